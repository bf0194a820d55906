//! Each user's open incidents as the correlator scores them, kept current through a batch.

use uuid::Uuid;
use vigil_aggregates::correlation::{evidence::Evidence, CandidateIncident, Match, NewAlert};
use vigil_projections::incidents::CandidateRow;

use crate::vector_store::VectorStore;

/// One user's open incidents as the correlator scores them, kept current while the batch is
/// placed (counts, services and alert times grow as alerts join; new incidents are added).
#[derive(Default)]
pub(super) struct Candidates {
    pub(super) ids: Vec<Uuid>,
    pub(super) scored: Vec<CandidateIncident>,
}

impl Candidates {
    pub(super) fn push(&mut self, row: CandidateRow, vectors: &VectorStore) {
        let title = row.alert_title.unwrap_or_default();
        self.ids.push(row.id);
        self.scored.push(CandidateIncident {
            // Computed again rather than read back: an incident's title never changes, the stored
            // vector (`IncidentEmbeddings`) is this one, and it is a few kilobytes of JSON per
            // candidate per batch where computing it takes microseconds.
            embedding: vectors.embed(&title),
            title,
            primary_service: row.alert_service,
            affected_services: row.affected_services,
            alert_times: vec![row.started_at, row.last_alert_at],
            correlated_alert_count: row.correlated_alert_count.max(0) as u32,
            // Kept in byte order by the projection (`COLLATE "C"`): sorted again only if not.
            evidence: if row.evidence.is_sorted() {
                row.evidence
            } else {
                sorted_keys(row.evidence)
            },
        });
    }

    pub(super) fn opened(&mut self, incident_id: Uuid, alert: NewAlert) {
        self.ids.push(incident_id);
        self.scored.push(CandidateIncident {
            title: alert.title,
            affected_services: alert.service.iter().cloned().collect(),
            primary_service: alert.service,
            alert_times: vec![alert.fired_at, alert.fired_at],
            correlated_alert_count: 0,
            embedding: alert.embedding,
            evidence: alert.evidence,
        });
    }

    /// Folds a correlated alert in as the projection will: one more alert, its service among the
    /// affected ones, its evidence among the incident's, and the latest alert time moved on.
    pub(super) fn took_alert(&mut self, index: usize, alert: NewAlert) -> Uuid {
        let candidate = &mut self.scored[index];
        candidate.correlated_alert_count += 1;
        if let Some(service) = &alert.service {
            if !candidate.affected_services.contains(service) {
                candidate.affected_services.push(service.clone());
                candidate.affected_services.sort();
            }
        }
        if let Some(last) = candidate.alert_times.last_mut() {
            *last = (*last).max(alert.fired_at);
        }
        let evidence = std::mem::take(&mut candidate.evidence);
        candidate.evidence = merged(evidence, alert.evidence);
        self.ids[index]
    }

    /// The stored `correlation_details` of a match: the score, the entities the alert names, the
    /// runner-up incident and the incidents the alert bridges (merged by `ingest::bridging`).
    pub(super) fn details(&self, found: &Match, evidence: &Evidence) -> serde_json::Value {
        let mut details = found.score.to_details();
        details["entities"] = serde_json::json!(evidence.entities);
        if let Some((index, total)) = found.runner_up {
            details["runner_up"] = serde_json::json!({ "incident_id": self.ids[index], "total": total });
        }
        if !found.bridges.is_empty() {
            let bridges: Vec<_> = found
                .bridges
                .iter()
                .map(|&(index, total)| serde_json::json!({ "incident_id": self.ids[index], "total": total }))
                .collect();
            details["bridges"] = serde_json::json!(bridges);
        }
        details
    }
}

/// Two sorted, deduplicated key lists as one, in one pass (an incident taking an alert: its
/// thousands of keys are not sorted again).
pub(super) fn merged(a: Vec<String>, b: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.cmp(y) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    b.next();
                    a.next()
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Sorted and deduplicated, as the correlator looks keys up ([`CandidateIncident::evidence`]).
pub(super) fn sorted_keys(keys: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut keys: Vec<String> = keys.into_iter().collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn merged_keys_stay_sorted_and_unique() {
        let keys = |list: &[&str]| list.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            merged(keys(&["a", "c", "e"]), keys(&["b", "c", "f"])),
            keys(&["a", "b", "c", "e", "f"])
        );
        assert_eq!(merged(Vec::new(), keys(&["x"])), keys(&["x"]));
        assert_eq!(merged(keys(&["x"]), Vec::new()), keys(&["x"]));
    }
}
