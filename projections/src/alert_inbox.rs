//! `alert_inbox`: every alert received, with its fate, as `GET /api/alerts` lists it. Two
//! consumers write it: one reads the incidents' events (an alert that opened, joined or resolved
//! an incident), the other the received alerts' own events (silenced, unmatched, updated,
//! deduplicated). A row is keyed by its entry's id, so an event read twice writes the same row.
//! Each row says which consumer wrote it; an incident's event wins over a received alert's,
//! whichever is applied first, so a replay rebuilds the same rows whatever the order.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use serde::Deserialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::{
    incident::Incident,
    received_alert::{ReceivedAlert, ReceivedAlertEvent},
};

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
    pub const ALL: [&str; 7] = [OPENED, JOINED, RESOLVED, SILENCED, UNMATCHED, UPDATED, DEDUPLICATED];
}

/// Which consumer wrote a row.
const BY_INCIDENTS: &str = "incident";
const BY_RECEIVED: &str = "received";

/// One inbox row. For a recovery, the descriptive columns are read from its delivery when
/// written (an `AlertResolved` event names only the delivery).
#[derive(Debug, Default)]
struct Row {
    id: i64,
    user_id: Option<String>,
    incident_id: Option<Uuid>,
    source_type: String,
    title: Option<String>,
    service: Option<String>,
    severity: Option<String>,
    fired_at: Option<DateTime<Utc>>,
    received_at: DateTime<Utc>,
    fate: &'static str,
    score: Option<f64>,
    silence_ids: Option<Vec<Uuid>>,
    redelivery_of: Option<i64>,
}

/// The part of an incident event's alert the inbox keeps (the rest, evidence above all, is not
/// parsed).
#[derive(Deserialize)]
struct AlertPart {
    source_type: String,
    source_alert_id: i64,
    title: String,
    service: Option<String>,
    severity: Option<String>,
    fired_at: DateTime<Utc>,
}

#[derive(Deserialize)]
struct Opened {
    user_id: String,
    alert: AlertPart,
}

#[derive(Deserialize)]
struct Correlated {
    alert: AlertPart,
    correlation: Score,
}

#[derive(Deserialize)]
struct Score {
    score: f64,
}

#[derive(Deserialize)]
struct Resolved {
    source_type: String,
    source_alert_id: i64,
}

/// The inbox rows of alerts that opened, joined or resolved an incident.
pub struct IncidentAlertsInbox {
    pool: PgPool,
}

impl IncidentAlertsInbox {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn part<'de, T: Deserialize<'de>>(event: &'de StoredEvent) -> Result<T, ProjectionError> {
    T::deserialize(&event.payload[event.event_type.as_str()]).map_err(|source| ProjectionError::Deserialize {
        aggregate_type: event.aggregate_type.clone(),
        aggregate_id: event.aggregate_id.clone(),
        sequence: event.sequence,
        source,
    })
}

impl Row {
    fn of_alert(alert: AlertPart, event: &StoredEvent, fate: &'static str) -> Self {
        Self {
            id: alert.source_alert_id,
            incident_id: Uuid::parse_str(&event.aggregate_id).ok(),
            source_type: alert.source_type,
            title: Some(alert.title),
            service: alert.service,
            severity: alert.severity,
            fired_at: Some(alert.fired_at),
            received_at: event.recorded_at,
            fate,
            ..Self::default()
        }
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

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut rows: Vec<Row> = Vec::new();
        let mut seen: HashMap<i64, usize> = HashMap::new();
        for event in events {
            let row = match event.event_type.as_str() {
                "IncidentOpened" => {
                    let opened: Opened = part(event)?;
                    Row {
                        user_id: Some(opened.user_id),
                        ..Row::of_alert(opened.alert, event, fate::OPENED)
                    }
                }
                "AlertCorrelated" => {
                    let correlated: Correlated = part(event)?;
                    Row {
                        score: Some(correlated.correlation.score),
                        ..Row::of_alert(correlated.alert, event, fate::JOINED)
                    }
                }
                "AlertResolved" => {
                    let resolved: Resolved = part(event)?;
                    Row {
                        id: resolved.source_alert_id,
                        incident_id: Uuid::parse_str(&event.aggregate_id).ok(),
                        source_type: resolved.source_type,
                        received_at: event.recorded_at,
                        fate: fate::RESOLVED,
                        ..Row::default()
                    }
                }
                _ => continue,
            };
            // A row met again in the batch (an alert split off into a new incident) only moves:
            // one statement may not write a row twice.
            match seen.get(&row.id) {
                Some(&at) => rows[at].incident_id = row.incident_id,
                None => {
                    seen.insert(row.id, rows.len());
                    rows.push(row);
                }
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.pool.acquire().await?;
        fill_owners(&mut conn, &mut rows).await?;
        upsert(&mut conn, &rows, BY_INCIDENTS).await
    }

    fn tables(&self) -> &'static [&'static str] {
        &["alert_inbox WHERE recorded_by = 'incident'"]
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM alert_inbox WHERE recorded_by = $1")
            .bind(BY_INCIDENTS)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// The inbox rows of alerts whose fate their own stream records.
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

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut rows = Vec::with_capacity(events.len());
        for event in events {
            use ReceivedAlertEvent as E;
            let (user_id, alert, row) = match event.envelope::<ReceivedAlert>()?.payload {
                E::AlertSilenced {
                    user_id,
                    alert,
                    silence_ids,
                    ..
                } => (
                    user_id,
                    alert,
                    Row {
                        fate: fate::SILENCED,
                        silence_ids: Some(silence_ids),
                        ..Row::default()
                    },
                ),
                E::RecoveryUnmatched { user_id, alert, .. } => (
                    user_id,
                    alert,
                    Row {
                        fate: fate::UNMATCHED,
                        ..Row::default()
                    },
                ),
                E::AlertUpdated {
                    user_id,
                    alert,
                    incident_id,
                    ..
                } => (
                    user_id,
                    alert,
                    Row {
                        fate: fate::UPDATED,
                        incident_id: Some(incident_id),
                        ..Row::default()
                    },
                ),
                E::AlertRedelivered {
                    user_id,
                    alert,
                    redelivery_of,
                    incident_id,
                    ..
                } => (
                    user_id,
                    alert,
                    Row {
                        fate: fate::DEDUPLICATED,
                        incident_id,
                        redelivery_of: Some(redelivery_of),
                        ..Row::default()
                    },
                ),
            };
            rows.push(Row {
                id: alert.source_alert_id,
                user_id: Some(user_id),
                source_type: alert.source_type,
                title: Some(alert.title),
                service: alert.service,
                severity: alert.severity,
                fired_at: Some(alert.fired_at),
                received_at: event.recorded_at,
                ..row
            });
        }
        let mut conn = self.pool.acquire().await?;
        upsert(&mut conn, &rows, BY_RECEIVED).await
    }

    fn tables(&self) -> &'static [&'static str] {
        &["alert_inbox WHERE recorded_by = 'received'"]
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM alert_inbox WHERE recorded_by = $1")
            .bind(BY_RECEIVED)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Rows of incidents' later events get their incident's owner, from the event that opened it.
async fn fill_owners(conn: &mut PgConnection, rows: &mut [Row]) -> Result<(), ProjectionError> {
    let mut wanted: Vec<String> = rows
        .iter()
        .filter(|row| row.user_id.is_none())
        .filter_map(|row| row.incident_id.map(|id| id.to_string()))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(());
    }
    let owners = crate::incidents::owners(conn, &wanted).await?;
    for row in rows.iter_mut().filter(|row| row.user_id.is_none()) {
        row.user_id = row.incident_id.and_then(|id| owners.get(&id.to_string()).cloned());
    }
    Ok(())
}

/// Writes the rows as `recorded_by` (`BY_INCIDENTS` or `BY_RECEIVED`). A row an incident's event
/// wrote stays: met again (an alert split off into a new incident), it only moves to where the
/// alert is now. A row a received alert's event wrote gives way to an incident's.
async fn upsert(conn: &mut PgConnection, rows: &[Row], recorded_by: &str) -> Result<(), ProjectionError> {
    let rows: Vec<&Row> = rows.iter().filter(|row| row.user_id.is_some()).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let silence_ids: Vec<Option<String>> = rows
        .iter()
        .map(|row| {
            row.silence_ids.as_ref().map(|ids| {
                let listed: Vec<String> = ids.iter().map(Uuid::to_string).collect();
                format!("{{{}}}", listed.join(","))
            })
        })
        .collect();
    sqlx::query(
        "INSERT INTO alert_inbox AS i (id, recorded_by, user_id, source_type, title, service, severity, fired_at,
                                       received_at, fate, incident_id, score, silence_ids, redelivery_of)
         SELECT r.id, $14, r.user_id, r.source_type, COALESCE(r.title, d.alert_title, ''),
                CASE WHEN r.title IS NULL THEN d.alert_service ELSE r.service END,
                CASE WHEN r.title IS NULL THEN d.alert_severity ELSE r.severity END,
                COALESCE(r.fired_at, d.fired_at, r.received_at), r.received_at, r.fate, r.incident_id, r.score,
                r.silence_ids::uuid[], r.redelivery_of
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                     $8::timestamptz[], $9::text[], $10::uuid[], $11::float8[], $12::text[], $13::bigint[])
             AS r(id, user_id, source_type, title, service, severity, fired_at, received_at, fate, incident_id, score,
                  silence_ids, redelivery_of)
         LEFT JOIN source_alerts d ON r.title IS NULL AND d.id = r.id
         ON CONFLICT (id) DO UPDATE SET
             incident_id = EXCLUDED.incident_id, recorded_by = EXCLUDED.recorded_by,
             user_id = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.user_id ELSE i.user_id END,
             source_type = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.source_type ELSE i.source_type END,
             title = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.title ELSE i.title END,
             service = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.service ELSE i.service END,
             severity = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.severity ELSE i.severity END,
             fired_at = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.fired_at ELSE i.fired_at END,
             received_at = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.received_at ELSE i.received_at END,
             fate = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.fate ELSE i.fate END,
             score = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.score ELSE i.score END,
             silence_ids = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.silence_ids ELSE i.silence_ids END,
             redelivery_of = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.redelivery_of ELSE i.redelivery_of END
             WHERE EXCLUDED.recorded_by = 'incident'",
    )
    .bind(rows.iter().map(|r| r.id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.user_id.as_deref()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.source_type.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.title.as_deref()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.service.as_deref()).collect::<Vec<_>>())
    .bind(
        rows.iter()
            .map(|r| r.severity.as_deref().map(|s| s.chars().take(20).collect::<String>()))
            .collect::<Vec<_>>(),
    )
    .bind(rows.iter().map(|r| r.fired_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.received_at).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.fate).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.incident_id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.score).collect::<Vec<_>>())
    .bind(&silence_ids)
    .bind(rows.iter().map(|r| r.redelivery_of).collect::<Vec<_>>())
    .bind(recorded_by)
    .execute(conn)
    .await?;
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

const INBOX_COLUMNS: &str =
    "id, source_type, title, service, severity, fired_at, received_at, fate, incident_id, score, silence_ids, \
     redelivery_of";

/// `user_id`'s alerts matching `filter`, newest first, at most `limit`. Pages follow the ids
/// down, so alerts arriving meanwhile never shift a later page.
pub async fn list(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    filter: &InboxFilter,
    limit: i64,
) -> sqlx::Result<Vec<InboxRow>> {
    sqlx::query_as(&format!(
        "SELECT {INBOX_COLUMNS} FROM alert_inbox
         WHERE user_id = $1
           AND ($2::text IS NULL OR source_type = $2)
           AND ($3::text IS NULL OR service = $3)
           AND ($4::text IS NULL OR fate = $4)
           AND ($5::timestamptz IS NULL OR received_at >= $5)
           AND ($6::timestamptz IS NULL OR received_at < $6)
           AND ($7::bigint IS NULL OR id < $7)
         ORDER BY id DESC LIMIT $8"
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
        "SELECT {INBOX_COLUMNS}, (SELECT d.payload::text FROM source_alerts d
                 WHERE d.id = COALESCE(i.redelivery_of, i.id) AND d.user_id = $1)
                AS payload
         FROM alert_inbox i WHERE i.id = $2 AND i.user_id = $1"
    ))
    .bind(user_id)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(found.map(|f| (f.row, f.payload)))
}
