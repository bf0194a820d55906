//! Where each alert of a batch goes, decided in memory from what placement's lookups found:
//! no I/O here. A redelivery reports where its delivery went (a recovery that came ahead of its
//! firing resolves the incident that holds it now); a recovery is a flapping key's cycle or
//! resolves its alert; a firing alert stays with the incident holding its occurrence, or is
//! silenced, or is a flapping key's cycle, or goes as a grouping rule says, or correlates with an
//! open incident, or opens one.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{best_match_in, topology::Topology},
    grouping_rule::CompiledRule,
    incident::{Correlation, IncidentCommand},
    received_alert::AlertFate,
};

use super::{
    candidates::Candidates,
    fates::Redelivery,
    item::{Delivery, Item, Occurrence},
    noise::{Flaps, GroupKey, RuleGroup},
    plan::Plan,
    rules,
    statements::Found,
    Placer,
};
use crate::{
    ingest::{
        parsers::{AlertKind, NormalizedAlert},
        service::alert_info,
        silences::InForce,
    },
    metrics::Fate,
};

/// What the decision reads of one batch.
pub(super) struct Batch<'a> {
    pub(super) items: &'a [Item<'a>],
    /// One per item (what makes a delivery unique).
    pub(super) deliveries: &'a [Delivery<'a>],
    pub(super) found: &'a Found,
    pub(super) topologies: &'a HashMap<String, std::sync::Arc<Topology>>,
    pub(super) silences: &'a InForce<'a>,
    /// One per item: the grouping rule a firing alert falls under, and its group.
    pub(super) rule_hits: &'a [Option<(&'a CompiledRule, GroupKey)>],
    /// Incidents found to take no more alerts since the batch read them.
    pub(super) stale: &'a HashSet<Uuid>,
    pub(super) now: DateTime<Utc>,
}

impl Placer {
    /// The plan of `batch`: each incident's commands, where each alert went, the fates recorded
    /// beside them. `candidates`, `groups` and `flaps` are kept current as alerts are placed.
    pub(super) fn decide<'a>(
        &self,
        batch: &Batch<'a>,
        mut candidates: HashMap<&'a str, Candidates>,
        groups: &mut HashMap<GroupKey, RuleGroup>,
        flaps: &mut Flaps<'a>,
    ) -> Plan {
        let Batch {
            items,
            deliveries,
            found,
            topologies,
            silences,
            rule_hits,
            stale,
            now,
        } = *batch;
        let no_topology = Topology::default();
        // The first item of each delivery not recorded before places it (with the id reserved
        // for it); later copies in the batch and earlier deliveries only report where it went.
        let mut claimed: HashMap<&Delivery, i64> = HashMap::new();
        let fresh: Vec<Option<i64>> = deliveries
            .iter()
            .zip(&found.deliveries)
            .map(|(delivery, row)| match (row.recorded, claimed.entry(delivery)) {
                (false, std::collections::hash_map::Entry::Vacant(first)) => Some(*first.insert(row.id)),
                _ => None,
            })
            .collect();
        let keyed = |incidents: &mut dyn Iterator<Item = (usize, Uuid)>, part: fn(&NormalizedAlert) -> &str| {
            incidents
                .map(|(index, incident_id)| {
                    let item = &items[index];
                    (
                        (item.user_id, item.alert.source.as_str(), part(item.alert)),
                        incident_id,
                    )
                })
                .collect::<HashMap<(&str, &str, &str), Uuid>>()
        };
        let recoveries = keyed(
            &mut found.group_incidents.iter().map(|&(index, id, _)| (index, id)),
            |alert| alert.group_key.as_str(),
        );
        let holders: HashMap<Occurrence, Uuid> = found
            .key_holders
            .iter()
            .map(|&(index, incident_id)| (items[index].occurrence(), incident_id))
            .collect();
        // Where each key was last placed, kept current through the batch: a new incident a key
        // opens names the one it fired in before.
        let mut last_placed: HashMap<(&str, &str, &str), Uuid> =
            keyed(&mut found.earlier.iter().copied(), |alert| alert.key.as_str());
        let mut plan = Plan::default();
        let mut placed_groups: HashMap<(&str, &str, &str), (Uuid, DateTime<Utc>)> = HashMap::new();
        let mut placed_occurrences: HashMap<Occurrence, Uuid> = HashMap::new();
        let mut adopted = HashSet::new();
        for (index, (item, alert_id)) in items.iter().zip(&fresh).enumerate() {
            let alert = item.alert;
            let group = (item.user_id, alert.source.as_str(), alert.group_key.as_str());
            // A deployment's success resolves only a failure that came before it.
            let recovery_target = || {
                placed_groups
                    .get(&group)
                    .filter(|&&(_, fired_at)| alert.kind != AlertKind::Deployment || fired_at <= alert.fired_at)
                    .map(|&(incident_id, _)| incident_id)
                    .or_else(|| recoveries.get(&group).copied())
            };
            let Some(alert_id) = *alert_id else {
                // A recovery recorded while no incident held its alert (it came ahead of its
                // firing), delivered again now that one does: it resolves that incident, once.
                let row = &found.deliveries[index];
                let mut fate = Fate::Deduplicated;
                let mut went_to = row.incident_id;
                if alert.resolved && row.recorded && row.incident_id.is_none() && adopted.insert(row.id) {
                    if let Some(incident_id) = recovery_target() {
                        plan.command(incident_id, item.resolve_alert(row.id));
                        plan.adoptions.push((row.id, incident_id));
                        fate = Fate::Resolved;
                        went_to = Some(incident_id);
                    }
                }
                plan.tally.count(alert.source, fate);
                // Recorded as an inbox entry of its own: one from an earlier batch under an id to
                // be reserved, a copy within this batch under the id reserved for it and unused.
                let redelivery = if row.recorded {
                    Redelivery {
                        index,
                        entry: None,
                        of: row.id,
                        incident_id: went_to,
                    }
                } else {
                    let of = claimed[&deliveries[index]];
                    Redelivery {
                        index,
                        entry: Some(row.id),
                        of,
                        incident_id: plan
                            .placements
                            .iter()
                            .find(|placed| placed.1 == of)
                            .and_then(|placed| placed.2.map(|(id, _)| id)),
                    }
                };
                plan.redelivered.push(redelivery);
                continue;
            };
            let occurrence = item.occurrence();
            let flapping_in = flaps
                .flapping_in(&item.key())
                .filter(|_| alert.kind == AlertKind::Alert);
            let placement = if let (true, Some(incident_id)) = (alert.resolved, flapping_in) {
                plan.flap(item, alert_id, incident_id)
            } else if alert.resolved {
                let incident = recovery_target();
                if let Some(incident_id) = incident {
                    plan.command(incident_id, item.resolve_alert(alert_id));
                    let recoveries = (alert.kind == AlertKind::Alert)
                        .then(|| flaps.recovered(item.key()))
                        .flatten();
                    if let Some(recoveries) = recoveries {
                        plan.command(incident_id, item.mark_flapping(recoveries, self.flapping.window));
                        flaps.flagged(item.key(), incident_id);
                    }
                }
                let fate = if incident.is_some() {
                    Fate::Resolved
                } else {
                    plan.recorded.push(item.record(alert_id, AlertFate::Unmatched));
                    Fate::Unmatched
                };
                plan.tally.count(alert.source, fate);
                incident.map(|incident_id| (incident_id, false))
            } else if let Some(&incident_id) = placed_occurrences.get(&occurrence).or_else(|| holders.get(&occurrence))
            {
                // A state change of an alert an open incident already holds (acknowledged, re-notified).
                plan.tally.count(alert.source, Fate::Updated);
                plan.recorded
                    .push(item.record(alert_id, AlertFate::Updated { incident_id }));
                Some((incident_id, false))
            } else if let Some(silence_ids) = silences.matching(item.user_id, alert) {
                plan.recorded
                    .push(item.record(alert_id, AlertFate::Silenced { silence_ids }));
                plan.tally.count(alert.source, Fate::Silenced);
                None
            } else if let Some(incident_id) = flapping_in {
                plan.flap(item, alert_id, incident_id)
            } else if let Some((rule, key)) = &rule_hits[index] {
                let user_candidates = candidates.entry(item.user_id).or_default();
                let group = groups.entry(key.clone()).or_default();
                let by_rule = rules::ByRule {
                    rule,
                    group,
                    stale,
                    max_correlated: self.correlation.max_alerts_per_incident() as usize,
                    now,
                };
                by_rule.place(&mut plan, user_candidates, item, alert_id, &self.vectors)
            } else {
                let user_candidates = candidates.entry(item.user_id).or_default();
                let new_alert = item.new_alert();
                let topology = topologies.get(item.user_id).map_or(&no_topology, |t| t.as_ref());
                match best_match_in(&new_alert, &user_candidates.scored, &self.correlation, topology) {
                    Some(found) => {
                        let details = user_candidates.details(&found, &item.prepared.evidence);
                        let bridges = found
                            .bridges
                            .iter()
                            .map(|&(index, _)| user_candidates.ids[index])
                            .collect();
                        let (score, strategy) = (found.score.total, found.score.strategy);
                        plan.tally.correlated(alert.source, strategy, score);
                        let incident_id = user_candidates.took_alert(found.index, new_alert);
                        plan.command(
                            incident_id,
                            IncidentCommand::CorrelateAlert {
                                user_id: item.user_id.to_owned(),
                                alert: alert_info(alert_id, alert, &item.prepared.evidence),
                                correlation: Correlation {
                                    strategy: strategy.as_str().to_owned(),
                                    score: score.clamp(0.0, 1.0),
                                    details,
                                },
                                max_correlated_alerts: self.correlation.max_alerts_per_incident() as usize,
                                bridges,
                                at: Utc::now(),
                            },
                        );
                        Some((incident_id, true))
                    }
                    None => {
                        let incident_id = Uuid::new_v4();
                        let key = (item.user_id, alert.source.as_str(), alert.key.as_str());
                        plan.command(
                            incident_id,
                            IncidentCommand::Open {
                                incident_id,
                                user_id: item.user_id.to_owned(),
                                alert: alert_info(alert_id, alert, &item.prepared.evidence),
                                previous_incident_id: last_placed.get(&key).copied(),
                                at: Utc::now(),
                            },
                        );
                        plan.opened.push(incident_id);
                        plan.tally.count(alert.source, Fate::Opened);
                        user_candidates.opened(incident_id, new_alert);
                        Some((incident_id, false))
                    }
                }
            };
            if let (Some((incident_id, _)), false) = (placement, alert.resolved) {
                placed_occurrences.insert(occurrence, incident_id);
                placed_groups.insert(group, (incident_id, alert.fired_at));
                last_placed.insert((item.user_id, alert.source.as_str(), alert.key.as_str()), incident_id);
            }
            plan.placements.push((index, alert_id, placement));
        }
        plan
    }
}
