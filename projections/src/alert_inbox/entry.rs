//! One inbox entry as an event makes it, and the statement that writes a set of them: on its
//! own (the tails, a replay), or as a part of placement's write.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;
use vigil_aggregates::{
    incident::{AlertInfo, IncidentEvent},
    received_alert::ReceivedAlertEvent,
};

use super::fate;

/// Which kind of event an entry comes from: an incident's event wins over a received alert's,
/// whichever is applied first (a recovery recorded unmatched, then delivered again once an
/// incident holds its alert).
const FROM_INCIDENT: &str = "incident";
const FROM_RECEIVED: &str = "received";

/// One inbox row. A recovery's descriptive columns are its delivery's (`source_alerts`) once
/// that row is committed: an `AlertResolved` event names only the delivery.
#[derive(Debug, Default)]
pub struct Entry {
    id: i64,
    recorded_by: &'static str,
    user_id: Option<String>,
    incident_id: Option<Uuid>,
    source_type: String,
    title: Option<String>,
    service: Option<String>,
    severity: Option<String>,
    fired_at: Option<DateTime<Utc>>,
    /// When its fate was decided: the event's own time, so that placement's write and a replay
    /// agree to the microsecond.
    received_at: DateTime<Utc>,
    fate: &'static str,
    score: Option<f64>,
    silence_ids: Option<Vec<Uuid>>,
    redelivery_of: Option<i64>,
    rule_id: Option<Uuid>,
    held_until: Option<DateTime<Utc>>,
}

impl Entry {
    /// The entry `event` of incident `incident_id` makes, if any. `user_id`: the incident's
    /// owner when known (an `IncidentOpened` names it).
    pub fn of_incident_event(incident_id: Uuid, user_id: Option<&str>, event: &IncidentEvent) -> Option<Self> {
        use IncidentEvent as E;
        let entry = |user_id: Option<&str>| Self {
            recorded_by: FROM_INCIDENT,
            user_id: user_id.map(str::to_owned),
            incident_id: Some(incident_id),
            received_at: event.at(),
            ..Self::default()
        };
        // A recovery or a flapping cycle names only its delivery; its other columns are the
        // delivery's (see `UPSERT`).
        let of_delivery = |source_type: &String, id: &i64, fate| Self {
            id: *id,
            source_type: source_type.clone(),
            fate,
            ..entry(user_id)
        };
        Some(match event {
            E::IncidentOpened { alert, user_id, .. } => entry(Some(user_id)).describing(alert, fate::OPENED, None),
            E::AlertCorrelated { alert, correlation, .. } => {
                entry(user_id).describing(alert, fate::JOINED, Some(correlation.score))
            }
            E::AlertResolved {
                source_type,
                source_alert_id,
                ..
            } => of_delivery(source_type, source_alert_id, fate::RESOLVED),
            E::FlapRecorded {
                source_type,
                source_alert_id,
                ..
            } => of_delivery(source_type, source_alert_id, fate::FLAPPING),
            _ => return None,
        })
    }

    /// This entry for `alert`, with its fate.
    fn describing(self, alert: &AlertInfo, fate: &'static str, score: Option<f64>) -> Self {
        Self {
            id: alert.source_alert_id,
            source_type: alert.source_type.clone(),
            title: Some(alert.title.clone()),
            service: alert.service.clone(),
            severity: alert.severity.clone(),
            fired_at: Some(alert.fired_at),
            fate,
            score,
            ..self
        }
    }

    /// The entry a received alert's event makes.
    pub fn of_received_event(event: &ReceivedAlertEvent) -> Self {
        use ReceivedAlertEvent as E;
        let entry = match event {
            E::AlertSilenced { silence_ids, .. } => Self {
                fate: fate::SILENCED,
                silence_ids: Some(silence_ids.clone()),
                ..Self::default()
            },
            E::RecoveryUnmatched { .. } => Self {
                fate: fate::UNMATCHED,
                ..Self::default()
            },
            E::AlertUpdated { incident_id, .. } => Self {
                fate: fate::UPDATED,
                incident_id: Some(*incident_id),
                ..Self::default()
            },
            E::AlertRedelivered {
                redelivery_of,
                incident_id,
                ..
            } => Self {
                fate: fate::DEDUPLICATED,
                incident_id: *incident_id,
                redelivery_of: Some(*redelivery_of),
                ..Self::default()
            },
            E::AlertHeld { rule_id, until, .. } => Self {
                fate: fate::HELD,
                rule_id: Some(*rule_id),
                held_until: Some(*until),
                ..Self::default()
            },
        };
        let (user_id, alert, at) = event.recorded();
        Self {
            id: alert.source_alert_id,
            recorded_by: FROM_RECEIVED,
            user_id: Some(user_id.to_owned()),
            source_type: alert.source_type.clone(),
            title: Some(alert.title.clone()),
            service: alert.service.clone(),
            severity: alert.severity.clone(),
            fired_at: Some(alert.fired_at),
            received_at: at,
            ..entry
        }
    }

    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn incident_id(&self) -> Option<Uuid> {
        self.incident_id
    }

    pub fn has_owner(&self) -> bool {
        self.user_id.is_some()
    }

    pub fn set_owner(&mut self, user_id: String) {
        self.user_id = Some(user_id);
    }

    /// A recovery's title, service, severity and firing time, for when its delivery is written in
    /// the same statement (and so not yet readable there).
    pub fn describe(&mut self, title: &str, service: Option<&str>, severity: Option<&str>, fired_at: DateTime<Utc>) {
        if self.title.is_none() {
            self.title = Some(title.to_owned());
            self.service = service.map(str::to_owned);
            self.severity = severity.map(str::to_owned);
            self.fired_at = Some(fired_at);
        }
    }
}

/// Entries to write in one statement: one per id (an entry met again, an alert split off into a
/// new incident, only moves to the incident it is in now).
#[derive(Default)]
pub struct InboxWrites {
    entries: Vec<Entry>,
    at: HashMap<i64, usize>,
}

/// The statement's insert: `$1`.. `$16`, one array per column. The descriptive columns of an
/// entry whose event names only the delivery (a recovery, a flapping cycle) are the delivery's.
const UPSERT: &str = "INSERT INTO alert_inbox AS i (id, recorded_by, user_id, source_type, title, service, severity,
                                   fired_at, received_at, fate, incident_id, score, silence_ids, redelivery_of,
                                   rule_id, held_until)
     SELECT r.id, r.recorded_by, r.user_id, r.source_type, COALESCE(d.alert_title, r.title, ''),
            CASE WHEN d.id IS NULL THEN r.service ELSE d.alert_service END,
            CASE WHEN d.id IS NULL THEN r.severity ELSE d.alert_severity END,
            COALESCE(d.fired_at, r.fired_at, r.received_at), r.received_at, r.fate,
            r.incident_id, r.score, r.silence_ids::uuid[], r.redelivery_of, r.rule_id, r.held_until
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                 $8::timestamptz[], $9::timestamptz[], $10::text[], $11::uuid[], $12::float8[], $13::text[],
                 $14::bigint[], $15::uuid[], $16::timestamptz[])
         AS r(id, recorded_by, user_id, source_type, title, service, severity, fired_at, received_at, fate,
              incident_id, score, silence_ids, redelivery_of, rule_id, held_until)
     LEFT JOIN source_alerts d ON r.fate IN ('resolved', 'flapping') AND d.id = r.id
     ON CONFLICT (user_id, id) DO UPDATE SET
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
         redelivery_of = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.redelivery_of ELSE i.redelivery_of END,
         rule_id = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.rule_id ELSE i.rule_id END,
         held_until = CASE WHEN i.recorded_by = 'received' THEN EXCLUDED.held_until ELSE i.held_until END
         WHERE EXCLUDED.recorded_by = 'incident'";

impl InboxWrites {
    /// Adds `entry`; one for an id met before wins as the statement's conflict rule says (an
    /// incident's event over a received alert's, whichever comes first).
    pub fn push(&mut self, entry: Entry) {
        match self.at.get(&entry.id) {
            Some(_) if entry.recorded_by == FROM_RECEIVED => {}
            Some(&at) if self.entries[at].recorded_by == FROM_RECEIVED => self.entries[at] = entry,
            Some(&at) => self.entries[at].incident_id = entry.incident_id,
            None => {
                self.at.insert(entry.id, self.entries.len());
                self.entries.push(entry);
            }
        }
    }

    pub fn extend(&mut self, entries: impl IntoIterator<Item = Entry>) {
        for entry in entries {
            self.push(entry);
        }
    }

    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.entries.iter_mut()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many parameters [`InboxWrites::bind`] binds.
    pub const PARAMETERS: usize = 16;

    /// The insert as a common table expression named `inboxed`, its parameters numbered from
    /// `$first` in the order [`InboxWrites::bind`] binds them.
    pub fn cte(first: usize) -> String {
        format!("inboxed AS ({})", crate::renumbered(UPSERT, first - 1))
    }

    /// Writes the entries on their own.
    pub async fn write(&self, conn: &mut sqlx::PgConnection) -> sqlx::Result<()> {
        if !self.is_empty() {
            self.bind(sqlx::query(UPSERT)).execute(conn).await?;
        }
        Ok(())
    }

    /// Binds the 16 parameters of [`InboxWrites::cte`], after those bound before. Entries whose
    /// owner is unknown are left out.
    pub fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let entries: Vec<&'q Entry> = self.entries.iter().filter(|e| e.user_id.is_some()).collect();
        let column =
            |f: fn(&'q Entry) -> Option<&'q str>| -> Vec<Option<&'q str>> { entries.iter().map(|&e| f(e)).collect() };
        let silence_ids: Vec<Option<String>> = entries
            .iter()
            .map(|e| {
                e.silence_ids.as_ref().map(|ids| {
                    let listed: Vec<String> = ids.iter().map(Uuid::to_string).collect();
                    format!("{{{}}}", listed.join(","))
                })
            })
            .collect();
        query
            .bind(entries.iter().map(|e| e.id).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.recorded_by).collect::<Vec<_>>())
            .bind(column(|e| e.user_id.as_deref()))
            .bind(column(|e| Some(e.source_type.as_str())))
            .bind(column(|e| e.title.as_deref()))
            .bind(column(|e| e.service.as_deref()))
            .bind(
                entries
                    .iter()
                    .map(|e| e.severity.as_deref().map(|s| s.chars().take(20).collect::<String>()))
                    .collect::<Vec<_>>(),
            )
            .bind(entries.iter().map(|e| e.fired_at).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.received_at).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.fate).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.incident_id).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.score).collect::<Vec<_>>())
            .bind(silence_ids)
            .bind(entries.iter().map(|e| e.redelivery_of).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.rule_id).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.held_until).collect::<Vec<_>>())
    }
}
