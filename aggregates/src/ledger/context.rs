//! The context of an incident: the user's other alerts of the same minutes, which of them the
//! incident's evidence leads to, and the failures nothing leads to.

use super::{build, build_in, relation, AlertRecord, ChangeRecord, Finding, Ledger, RuledOut, Unlinked};

/// Unlinked failures named at most, so that a storm's unrelated failures do not bury the lead.
const MAX_UNLINKED: usize = 3;

/// Builds the ledger from the incident's alerts, other alerts of the same user and window that
/// were not grouped with it (`nearby`), and its linked changes. A nearby alert is reasoned from
/// when a chain of direct evidence (a mention, a shared address or host) leads to it from the
/// incident's alerts, or when it shows a distinctive failure one of those shows (one hop, not
/// followed further). The others are ruled out, unless the incident's own evidence establishes
/// nothing: then those that show a failure of their own are kept as unlinked leads (a caller's
/// vague errors often name nothing of the dependency that fails at the same time).
pub fn build_with_context(alerts: &[AlertRecord], nearby: &[AlertRecord], changes: &[ChangeRecord]) -> Ledger {
    let mut reached: Vec<AlertRecord> = alerts.to_vec();
    // Each pending alert with the strongest link found so far; each round compares it only with
    // the alerts the round before reached, so that every pair is looked at once.
    let mut pending: Vec<(&AlertRecord, Link)> = nearby.iter().map(|alert| (alert, Link::None)).collect();
    let mut frontier = 0..reached.len();
    loop {
        let mut linked = Vec::new();
        let mut rest = Vec::new();
        for (candidate, mut strongest) in pending {
            for known in &reached[frontier.clone()] {
                strongest = strongest.max(link(known, candidate));
                if strongest == Link::Direct {
                    break;
                }
            }
            if strongest == Link::Direct {
                linked.push(candidate);
            } else {
                rest.push((candidate, strongest));
            }
        }
        pending = rest;
        if linked.is_empty() {
            break;
        }
        frontier = reached.len()..reached.len() + linked.len();
        reached.extend(linked.into_iter().cloned());
    }
    // Reached through a shared failure kind only: reasoned from, but not followed further. Two
    // services seeing expired credentials at once is a lead; what the other one names is
    // another incident's business.
    let (touched, rest): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .partition(|(_, strongest)| *strongest == Link::SameFailure);
    let pending: Vec<&AlertRecord> = rest.into_iter().map(|(alert, _)| alert).collect();
    let witnesses = reached.len();
    reached.extend(touched.into_iter().map(|(alert, _)| alert.clone()));
    let mut ledger = build_in(&reached, witnesses, changes);
    if ledger.leading().is_none() {
        ledger.unlinked = unlinked_failures(&pending);
    }
    let mut unrelated: Vec<String> = pending
        .iter()
        .filter_map(|a| a.service.clone())
        .filter(|service| !ledger.unlinked.iter().any(|u| u.component == *service))
        .collect();
    unrelated.sort();
    unrelated.dedup();
    for service in unrelated {
        ledger.ruled_out.push(RuledOut {
            subject: service,
            reason: "it fired in the same minutes but nothing leads to it from the incident's alerts: no name, \
                     address or failure in common"
                .into(),
        });
    }
    ledger
}

/// The strongest failure each alert shows of its own component, strongest first, one per component.
fn unlinked_failures(alerts: &[&AlertRecord]) -> Vec<Unlinked> {
    let mut found: Vec<(f64, Unlinked)> = Vec::new();
    for alert in alerts {
        let alone = build(std::slice::from_ref(*alert), &[]);
        let Some(leader) = alone.leading() else { continue };
        let Some(evidence) = leader.support.first() else {
            continue;
        };
        if found.iter().any(|(_, u)| u.component == leader.component) {
            continue;
        }
        found.push((
            leader.score,
            Unlinked {
                component: leader.component.clone(),
                failure: leader.failure.clone(),
                evidence: Finding {
                    alert: None,
                    ..evidence.clone()
                },
            },
        ));
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.component.cmp(&b.1.component)));
    found.into_iter().take(MAX_UNLINKED).map(|(_, u)| u).collect()
}

/// How evidence leads from one alert to another, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Link {
    None,
    /// They show one distinctive failure.
    SameFailure,
    /// One names the other's service, or they name one specific entity.
    Direct,
}

/// How evidence leads from `a` to `b`. (Domain words are not followed: in a tenant of many
/// products they lead into unrelated incidents.)
fn link(a: &AlertRecord, b: &AlertRecord) -> Link {
    let services_b: Vec<&str> = b.service.as_deref().into_iter().collect();
    let common = relation::common(a.service.as_deref(), &a.keys, &services_b, &b.keys);
    if relation::relation(&common, relation::Sharing::ALONE).is_direct() {
        Link::Direct
    } else if !common.failures().is_empty() {
        Link::SameFailure
    } else {
        Link::None
    }
}
