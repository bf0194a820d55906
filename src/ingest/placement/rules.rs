//! Placement of an alert a grouping rule matches (open after N): it joins the incident its group
//! opened while that one takes alerts; otherwise it is held, and the alert that makes the group
//! reach the rule's threshold within its window opens one incident with every alert held.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{is_minor_severity, EventKind, NewAlert},
    grouping_rule::CompiledRule,
    incident::{AlertInfo, Correlation, IncidentCommand},
    received_alert::AlertFate,
};

use super::{noise::RuleGroup, Candidates, Item, Plan};
use crate::{ingest::service::alert_info, metrics::Fate, vector_store::VectorStore};

/// The correlation strategy of an alert a rule put in its incident.
pub const RULE_STRATEGY: &str = "rule";

pub(super) struct ByRule<'r> {
    pub(super) rule: &'r CompiledRule,
    pub(super) group: &'r mut RuleGroup,
    /// Incidents found to take no more alerts since the batch read them.
    pub(super) stale: &'r HashSet<Uuid>,
    pub(super) max_correlated: usize,
    pub(super) now: DateTime<Utc>,
}

impl ByRule<'_> {
    /// Where `item` (delivery `alert_id`) goes: the incident it joins or opens, with whether it
    /// correlated; `None` while it is held.
    pub(super) fn place(
        self,
        plan: &mut Plan,
        candidates: &mut Candidates,
        item: &Item,
        alert_id: i64,
        vectors: &VectorStore,
    ) -> Option<(Uuid, bool)> {
        let source = item.alert.source;
        let info = alert_info(alert_id, item.alert, &item.prepared.evidence);
        if let Some(incident_id) = self.group.open_incident().filter(|id| !self.stale.contains(id)) {
            self.group.joined();
            plan.command(incident_id, self.correlate(item.user_id, info));
            plan.tally.count(source, Fate::Correlated);
            if let Some(index) = candidates.ids.iter().position(|id| *id == incident_id) {
                candidates.took_alert(index, item.new_alert());
            }
            return Some((incident_id, true));
        }
        let Some(released) = self.group.hold(info, self.now, self.rule.window, self.rule.threshold) else {
            // Its placement is the next one the plan takes: released later in the batch, it moves.
            plan.held_here.insert(alert_id, plan.placements.len());
            let fate = AlertFate::Held {
                rule_id: self.rule.id,
                until: self.now + self.rule.window,
            };
            plan.recorded.push(item.record(alert_id, fate));
            plan.tally.count(source, Fate::Held);
            return None;
        };
        plan.tally.count(source, Fate::Opened);
        // More alerts than an incident takes open several (the cap's split), each analysed once.
        let mut placed = None;
        for chunk in released.chunks(self.max_correlated + 1) {
            let incident_id = Uuid::new_v4();
            for (position, held) in chunk.iter().enumerate() {
                let command = if position == 0 {
                    IncidentCommand::Open {
                        incident_id,
                        user_id: item.user_id.to_owned(),
                        alert: held.alert.clone(),
                        previous_incident_id: None,
                        at: self.now,
                    }
                } else {
                    self.correlate(item.user_id, held.alert.clone())
                };
                plan.command(incident_id, command);
                let held_id = held.alert.source_alert_id;
                if held_id != alert_id {
                    match plan.held_here.remove(&held_id) {
                        Some(at) => plan.placements[at].2 = Some((incident_id, position > 0)),
                        None => plan.released.push((held_id, incident_id)),
                    }
                }
                let scored = scored(&held.alert, vectors);
                if position == 0 {
                    candidates.opened(incident_id, scored);
                } else {
                    candidates.took_alert(candidates.ids.len() - 1, scored);
                }
            }
            plan.opened.push(incident_id);
            self.group.opened(incident_id, chunk.len(), self.max_correlated as i64);
            placed = Some((incident_id, chunk.len() > 1));
        }
        placed
    }

    fn correlate(&self, user_id: &str, alert: AlertInfo) -> IncidentCommand {
        IncidentCommand::CorrelateAlert {
            user_id: user_id.to_owned(),
            alert,
            correlation: Correlation {
                strategy: RULE_STRATEGY.to_owned(),
                score: 1.0,
                details: serde_json::json!({
                    "rule": {
                        "id": self.rule.id,
                        "threshold": self.rule.threshold,
                        "windowSeconds": self.rule.window.num_seconds(),
                    }
                }),
            },
            max_correlated_alerts: self.max_correlated,
            bridges: Vec::new(),
            at: self.now,
        }
    }
}

/// A held alert as the correlator scores it (it may have arrived in an earlier batch).
fn scored(alert: &AlertInfo, vectors: &VectorStore) -> NewAlert {
    NewAlert {
        title: alert.title.clone(),
        service: alert.service.clone(),
        fired_at: alert.fired_at,
        kind: EventKind::Alert,
        embedding: vectors.embed(&alert.title),
        evidence: alert.evidence.sorted_keys(),
        minor: is_minor_severity(alert.severity.as_deref()),
    }
}
