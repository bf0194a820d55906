//! The incidents' own rules, run on their state as placement knows it: each incident's commands
//! go through the aggregate's `decide`, from the state placement kept of its last batch, or read
//! from its events when it kept none.

use std::collections::{HashMap, HashSet};

use cqrs_es::{Aggregate, EventEnvelope};
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::incident::{Incident, IncidentCommand, IncidentError};
use vigil_projections::StoredEvent;

use super::{Abort, Notification, PlacementError, Placer, ACTOR};

/// Incidents [`Placer::known`] keeps at most before it starts over.
const KNOWN_INCIDENTS: usize = 20_000;

type Commanded = (
    Vec<(String, Vec<EventEnvelope<Incident>>)>,
    HashMap<Uuid, (Incident, usize)>,
);

impl Placer {
    /// Runs each incident's commands through the aggregate, in order, from its current state
    /// (`opened`: the incidents the commands open). Returns the events to append and the
    /// incidents' states after them.
    pub(super) async fn run_commands(
        &self,
        conn: &mut PgConnection,
        commands: Vec<(Uuid, Vec<IncidentCommand>)>,
        opened: &[Uuid],
    ) -> Result<Commanded, Abort> {
        let opened: HashSet<Uuid> = opened.iter().copied().collect();
        // Taken out rather than cloned: an attempt that does not commit leaves them to be read
        // again from their events.
        let mut current: HashMap<Uuid, (Incident, usize)> = {
            let mut known = self.known.lock().expect("placement cache lock");
            commands
                .iter()
                .filter_map(|(id, _)| Some((*id, known.remove(id)?)))
                .collect()
        };
        let remembered: HashSet<Uuid> = current.keys().copied().collect();
        let unknown: Vec<String> = commands
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !opened.contains(id) && !current.contains_key(id))
            .map(|id| id.to_string())
            .collect();
        if !unknown.is_empty() {
            let stored: Vec<StoredEvent> = sqlx::query_as(&format!(
                "{} WHERE aggregate_type = $1 AND aggregate_id = ANY($2) ORDER BY aggregate_id, sequence",
                StoredEvent::SELECT
            ))
            .bind(Incident::TYPE)
            .bind(&unknown)
            .fetch_all(&mut *conn)
            .await?;
            for event in &stored {
                let envelope = event.envelope::<Incident>()?;
                let Ok(id) = Uuid::parse_str(&envelope.aggregate_id) else {
                    continue;
                };
                let (incident, sequence) = current.entry(id).or_default();
                incident.apply(envelope.payload);
                *sequence = envelope.sequence;
            }
        }
        let metadata = ACTOR.metadata();
        let mut streams = Vec::with_capacity(commands.len());
        for (incident_id, commands) in commands {
            let aggregate_id = incident_id.to_string();
            let (incident, sequence) = current.entry(incident_id).or_default();
            let mut events = Vec::new();
            for command in commands {
                let decided = match incident.decide(command) {
                    Ok(decided) => decided,
                    Err(IncidentError::NotCorrelatable(_)) => {
                        return Err(Abort::StaleCandidate {
                            incident_id,
                            remembered: remembered.contains(&incident_id),
                        })
                    }
                    Err(source) => return Err(Abort::Failed(PlacementError::Refused { incident_id, source })),
                };
                for event in decided {
                    *sequence += 1;
                    incident.apply_event(&event);
                    events.push(EventEnvelope {
                        aggregate_id: aggregate_id.clone(),
                        sequence: *sequence,
                        payload: event,
                        metadata: metadata.clone(),
                    });
                }
            }
            if !events.is_empty() {
                streams.push((aggregate_id, events));
            }
        }
        Ok((streams, current))
    }

    pub(super) fn remember(&self, states: HashMap<Uuid, (Incident, usize)>) {
        let mut known = self.known.lock().expect("placement cache lock");
        if known.len() + states.len() > KNOWN_INCIDENTS {
            known.clear();
        }
        known.extend(states);
    }

    /// Drops what placement knows of every user's incidents in the batch (another writer got there first).
    pub(super) fn forget(&self, batch: &[Notification]) {
        let users: HashSet<&str> = batch.iter().map(|n| n.user_id.as_str()).collect();
        let mut known = self.known.lock().expect("placement cache lock");
        known.retain(|_, (incident, _)| !users.contains(incident.user_id()));
    }
}
