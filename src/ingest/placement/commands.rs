//! The incidents' own rules, run on their state as placement knows it: each incident's commands
//! go through the aggregate's `decide`, from the state placement kept of its last batch, or read
//! from its events when it kept none.

use std::collections::{HashMap, HashSet};

use cqrs_es::{Aggregate, EventEnvelope};
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::incident::{Incident, IncidentCommand, IncidentError};
use vigil_projections::load_ranges;

use super::{Abort, PlacementError, Placer, ACTOR};

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
    ///
    /// A state placement kept is brought up to date rather than read again whole: by the events
    /// after it when the batch's read rows (`versions_seen`) are further on, or for every kept
    /// state when `catch_up` (an earlier attempt found another writer ahead). An analysis appends
    /// to incidents that are still taking alerts; reading their whole histories again on every
    /// such append kept the lane's database busy.
    pub(super) async fn run_commands(
        &self,
        conn: &mut PgConnection,
        commands: Vec<(Uuid, Vec<IncidentCommand>)>,
        opened: &[Uuid],
        versions_seen: &HashMap<String, i64>,
        catch_up: bool,
    ) -> Result<Commanded, Abort> {
        let opened: HashSet<Uuid> = opened.iter().copied().collect();
        // Copied rather than taken: an attempt that does not commit leaves the kept states as
        // they were, to be caught up by the next.
        let mut current: HashMap<Uuid, (Incident, usize)> = {
            let known = self.known.lock().expect("placement cache lock");
            commands
                .iter()
                .filter_map(|(id, _)| Some((*id, known.get(id)?.clone())))
                .collect()
        };
        let remembered: HashSet<Uuid> = current.keys().copied().collect();
        let behind = |id: &Uuid| -> Option<(String, i64)> {
            if opened.contains(id) {
                return None;
            }
            let aggregate_id = id.to_string();
            let Some((_, sequence)) = current.get(id) else {
                return Some((aggregate_id, 1));
            };
            let after = *sequence as i64;
            (catch_up || versions_seen.get(&aggregate_id).is_some_and(|&seen| seen > after))
                .then(|| (aggregate_id, after + 1))
        };
        let ranges: Vec<(String, i64)> = commands.iter().filter_map(|(id, _)| behind(id)).collect();
        if !ranges.is_empty() {
            // To the stream's end: a last sequence whose range size (last - first + 1) cannot overflow.
            let ranges: Vec<(&str, i64, i64)> = ranges
                .iter()
                .map(|(id, first)| (id.as_str(), *first, i64::MAX - 1))
                .collect();
            for event in load_ranges(conn, Incident::TYPE, &ranges).await? {
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
}
