//! What placement records of alerts beyond the incidents' events: each fate no incident event
//! records (silenced, unmatched, updated, redelivered) as the first event of its inbox entry's own
//! stream, and the inbox entries of every event the batch appends.

use std::collections::HashMap;

use chrono::Utc;
use cqrs_es::EventEnvelope;
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::{
    incident::Incident,
    received_alert::{AlertFate, AlertSummary, ReceivedAlert, ReceivedAlertCommand},
};
use vigil_projections::alert_inbox::{Entry, InboxWrites};

use super::{Abort, Item, PlacementError, Placer, Plan, ACTOR};
use crate::ingest::parsers::NormalizedAlert;

/// A delivery received before, recorded as an inbox entry of its own.
pub(super) struct Redelivery {
    pub(super) index: usize,
    /// The entry's id: reserved when the batch read its deliveries (a copy within the batch), or
    /// to be reserved.
    pub(super) entry: Option<i64>,
    /// The delivery it repeats.
    pub(super) of: i64,
    /// Where that delivery went.
    pub(super) incident_id: Option<Uuid>,
}

impl Placer {
    /// Records the batch's redeliveries as inbox entries, reserving ids for those received in an
    /// earlier batch (one round trip, only when there are any).
    pub(super) async fn record_redeliveries(
        &self,
        conn: &mut PgConnection,
        items: &[Item<'_>],
        plan: &mut Plan,
    ) -> Result<(), Abort> {
        let wanted = plan.redelivered.iter().filter(|r| r.entry.is_none()).count();
        let mut reserved = if wanted == 0 {
            Vec::new()
        } else {
            sqlx::query_scalar::<_, i64>("SELECT nextval('source_alerts_id_seq') FROM generate_series(1, $1)")
                .bind(wanted as i64)
                .fetch_all(&mut *conn)
                .await?
        }
        .into_iter();
        for redelivery in std::mem::take(&mut plan.redelivered) {
            let Some(entry) = redelivery.entry.or_else(|| reserved.next()) else {
                return Err(Abort::Failed(PlacementError::Database(sqlx::Error::Protocol(
                    "fewer ids reserved than redeliveries".into(),
                ))));
            };
            let fate = AlertFate::Redelivered {
                of: redelivery.of,
                incident_id: redelivery.incident_id,
            };
            plan.recorded.push(items[redelivery.index].record(entry, fate));
        }
        Ok(())
    }
}

impl Item<'_> {
    /// The command recording the fate of this item, as inbox entry `source_alert_id`.
    pub(super) fn record(&self, source_alert_id: i64, fate: AlertFate) -> (i64, ReceivedAlertCommand) {
        let alert = self.alert;
        let command = ReceivedAlertCommand::Record {
            user_id: self.user_id.to_owned(),
            alert: AlertSummary {
                source_type: alert.source.as_str().to_owned(),
                source_alert_id,
                title: alert.title.clone(),
                service: alert.service.clone(),
                severity: alert.severity.clone(),
                fired_at: alert.fired_at,
            },
            fate,
            at: Utc::now(),
        };
        (source_alert_id, command)
    }
}

/// The inbox entries of the batch's events, written with them (each event marked `projected`
/// is projected there). A recovery written with its delivery is described from the alert itself.
pub(super) fn inbox_entries(
    items: &[Item<'_>],
    plan: &Plan,
    streams: &[(String, Vec<EventEnvelope<Incident>>)],
    received: &[EventEnvelope<ReceivedAlert>],
    states: &HashMap<Uuid, (Incident, usize)>,
) -> InboxWrites {
    let mut inbox = InboxWrites::default();
    for (aggregate_id, events) in streams {
        let Ok(incident_id) = Uuid::parse_str(aggregate_id) else {
            continue;
        };
        let owner = states.get(&incident_id).map(|(incident, _)| incident.user_id());
        for event in events {
            inbox.extend(Entry::of_incident_event(incident_id, owner, &event.payload));
        }
    }
    for event in received {
        inbox.push(Entry::of_received_event(&event.payload));
    }
    let placed: HashMap<i64, &NormalizedAlert> = plan
        .placements
        .iter()
        .map(|&(index, alert_id, _)| (alert_id, items[index].alert))
        .collect();
    for entry in inbox.entries_mut() {
        if let Some(alert) = placed.get(&entry.id()) {
            entry.describe(
                &alert.title,
                alert.service.as_deref(),
                alert.severity.as_deref(),
                alert.fired_at,
            );
        }
    }
    inbox
}

/// The events recording the fates no incident's event records, each the first of its entry's
/// own stream.
pub(super) fn received_alert_events(
    commands: Vec<(i64, ReceivedAlertCommand)>,
) -> Result<Vec<EventEnvelope<ReceivedAlert>>, Abort> {
    let metadata = ACTOR.metadata();
    let mut envelopes = Vec::with_capacity(commands.len());
    for (alert_id, command) in commands {
        let events = ReceivedAlert::default()
            .decide(command)
            .map_err(|error| Abort::Failed(PlacementError::FateRefused(error)))?;
        envelopes.extend(events.into_iter().zip(1..).map(|(payload, sequence)| EventEnvelope {
            aggregate_id: alert_id.to_string(),
            sequence,
            payload,
            metadata: metadata.clone(),
        }));
    }
    Ok(envelopes)
}
