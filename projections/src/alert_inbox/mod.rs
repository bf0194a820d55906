//! `alert_inbox`: every alert received, with its fate, as `GET /api/alerts` lists it, made from
//! the incidents' events (an alert that opened, joined or resolved an incident) and the received
//! alerts' own events (silenced, unmatched, updated, deduplicated). Placement writes the entries
//! of the events it appends in the same statement (and marks them projected); two consumers apply
//! the rest, and everything in a replay. An entry is keyed by its id, so an event read twice
//! writes the same row; an incident's event wins over a received alert's whichever is applied
//! first, so the order of the two consumers does not matter.

mod entry;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::{incident::Incident, received_alert::ReceivedAlert};

pub use entry::{Entry, InboxWrites};

use crate::{EventConsumer, ProjectionError, StoredEvent};

/// What became of an alert, as the inbox names it.
pub mod fate {
    pub const OPENED: &str = "opened";
    pub const JOINED: &str = "joined";
    pub const RESOLVED: &str = "resolved";
    pub const SILENCED: &str = "silenced";
    pub const UNMATCHED: &str = "unmatched";
    pub const UPDATED: &str = "updated";
    pub const DEDUPLICATED: &str = "deduplicated";
    pub const HELD: &str = "held";
    /// Not stored: a held alert past its `held_until` is shown so.
    pub const HELD_EXPIRED: &str = "held_expired";
    pub const FLAPPING: &str = "flapping";
    pub const ALL: [&str; 10] = [
        OPENED,
        JOINED,
        RESOLVED,
        SILENCED,
        UNMATCHED,
        UPDATED,
        DEDUPLICATED,
        HELD,
        HELD_EXPIRED,
        FLAPPING,
    ];
}

/// The inbox entries of alerts that opened, joined or resolved an incident. Placement writes
/// them with its events; this consumer applies those other writers append (an alert split off)
/// and, in a replay, all of them.
pub struct IncidentAlertsInbox {
    pool: PgPool,
}

impl IncidentAlertsInbox {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

#[async_trait]
impl EventConsumer for IncidentAlertsInbox {
    fn name(&self) -> &'static str {
        "alert_inbox"
    }

    fn aggregate_type(&self) -> &'static str {
        Incident::TYPE
    }

    fn skips_projected(&self) -> bool {
        true
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut writes = InboxWrites::default();
        for event in events {
            if !matches!(
                event.event_type.as_str(),
                "IncidentOpened" | "AlertCorrelated" | "AlertResolved" | "FlapRecorded"
            ) {
                continue;
            }
            let envelope = event.envelope::<Incident>()?;
            let Ok(incident_id) = Uuid::parse_str(&envelope.aggregate_id) else {
                continue;
            };
            if let Some(entry) = Entry::of_incident_event(incident_id, None, &envelope.payload) {
                writes.push(entry);
            }
        }
        if writes.is_empty() {
            return Ok(());
        }
        let mut conn = self.pool.acquire().await?;
        fill_owners(&mut conn, &mut writes).await?;
        Ok(writes.write(&mut conn).await?)
    }

    fn tables(&self) -> &'static [&'static str] {
        &["alert_inbox WHERE recorded_by = 'incident'"]
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM alert_inbox WHERE recorded_by = 'incident'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// The inbox entries of alerts whose fate their own stream records (written by placement with
/// its events; applied here in a replay).
pub struct ReceivedAlertsInbox {
    pool: PgPool,
}

impl ReceivedAlertsInbox {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

#[async_trait]
impl EventConsumer for ReceivedAlertsInbox {
    fn name(&self) -> &'static str {
        "alert_inbox_received"
    }

    fn aggregate_type(&self) -> &'static str {
        ReceivedAlert::TYPE
    }

    fn skips_projected(&self) -> bool {
        true
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut writes = InboxWrites::default();
        for event in events {
            let envelope = event.envelope::<ReceivedAlert>()?;
            writes.push(Entry::of_received_event(&envelope.payload));
        }
        let mut conn = self.pool.acquire().await?;
        Ok(writes.write(&mut conn).await?)
    }

    fn tables(&self) -> &'static [&'static str] {
        &["alert_inbox WHERE recorded_by = 'received'"]
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM alert_inbox WHERE recorded_by = 'received'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Entries of incidents' later events get their incident's owner, from the event that opened it.
async fn fill_owners(conn: &mut PgConnection, writes: &mut InboxWrites) -> Result<(), ProjectionError> {
    let mut wanted: Vec<String> = writes
        .entries_mut()
        .filter(|entry| !entry.has_owner())
        .filter_map(|entry| entry.incident_id().map(|id| id.to_string()))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(());
    }
    let owners = crate::incidents::owners(conn, &wanted).await?;
    for entry in writes.entries_mut().filter(|entry| !entry.has_owner()) {
        if let Some(owner) = entry.incident_id().and_then(|id| owners.get(&id.to_string())) {
            entry.set_owner(owner.clone());
        }
    }
    Ok(())
}

/// One alert of the inbox.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InboxRow {
    pub id: i64,
    pub source_type: String,
    pub title: String,
    pub service: Option<String>,
    pub severity: Option<String>,
    pub fired_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    pub fate: String,
    pub incident_id: Option<Uuid>,
    pub score: Option<f64>,
    pub silence_ids: Option<Vec<Uuid>>,
    pub redelivery_of: Option<i64>,
    pub rule_id: Option<Uuid>,
    pub held_until: Option<DateTime<Utc>>,
}

/// Which alerts of a user's inbox a page holds.
#[derive(Debug, Clone, Default)]
pub struct InboxFilter {
    pub source: Option<String>,
    pub service: Option<String>,
    pub fate: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
    /// Older than this alert (the previous page's last id).
    pub before_id: Option<i64>,
}

/// A held alert is shown expired once its hold ran out (nothing is written when it does).
const SHOWN_FATE: &str = "CASE WHEN fate = 'held' AND held_until <= now() THEN 'held_expired' ELSE fate END";

static INBOX_COLUMNS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "id, source_type, title, service, severity, fired_at, received_at, {SHOWN_FATE} AS fate, incident_id, score, \
         silence_ids, redelivery_of, rule_id, held_until"
    )
});

/// `user_id`'s alerts matching `filter`, newest first, at most `limit`. Pages follow the ids
/// down, so alerts arriving meanwhile never shift a later page.
pub async fn list(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    filter: &InboxFilter,
    limit: i64,
) -> sqlx::Result<Vec<InboxRow>> {
    sqlx::query_as(&format!(
        "SELECT {columns} FROM alert_inbox
         WHERE user_id = $1
           AND ($2::text IS NULL OR source_type = $2)
           AND ($3::text IS NULL OR service = $3)
           AND ($4::text IS NULL OR {SHOWN_FATE} = $4)
           AND ($5::timestamptz IS NULL OR received_at >= $5)
           AND ($6::timestamptz IS NULL OR received_at < $6)
           AND ($7::bigint IS NULL OR id < $7)
         ORDER BY id DESC LIMIT $8",
        columns = *INBOX_COLUMNS
    ))
    .bind(user_id)
    .bind(&filter.source)
    .bind(&filter.service)
    .bind(&filter.fate)
    .bind(filter.since)
    .bind(filter.until)
    .bind(filter.before_id)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// `user_id`'s alert `id` with its raw payload as received (JSON text; a redelivery's is the
/// delivery's it repeats), if it is theirs.
pub async fn find(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    id: i64,
) -> sqlx::Result<Option<(InboxRow, Option<String>)>> {
    #[derive(sqlx::FromRow)]
    struct Found {
        #[sqlx(flatten)]
        row: InboxRow,
        payload: Option<String>,
    }
    let found: Option<Found> = sqlx::query_as(&format!(
        "SELECT {columns}, (SELECT d.payload::text FROM source_alerts d
                 WHERE d.id = COALESCE(i.redelivery_of, i.id) AND d.user_id = $1)
                AS payload
         FROM alert_inbox i WHERE i.id = $2 AND i.user_id = $1",
        columns = *INBOX_COLUMNS
    ))
    .bind(user_id)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(found.map(|f| (f.row, f.payload)))
}
