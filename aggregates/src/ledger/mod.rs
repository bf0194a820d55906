//! The hypothesis ledger of a root cause analysis: every candidate cause (a change, a failing
//! dependency, a component's own resources, a network zone), the evidence for it quoted from the
//! alert and field it came from, and a verdict: CONFIRMED, LIKELY or INCONCLUSIVE. Pure rules
//! over what the incident's alerts say ([`AlertRecord`]) and the changes linked to it
//! ([`ChangeRecord`]); the analysts (built-in or model) write from it.
//!
//! Three kinds of evidence make a component the cause:
//! - its own alert shows a failure of its own (a signature of [`crate::signatures`]: down,
//!   quorum lost, out of memory, disk full, certificate expired...);
//! - other alerts name it (its service name, its DNS name, its address, its zone): the failing
//!   requests lead there;
//! - a change of it came first.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::{
    correlation::{
        evidence::{Entity, EntityKind, Evidence},
        relation,
    },
    signatures::{self, Implicates, Signature},
};

mod context;
mod quotes;

pub use context::build_with_context;
use quotes::{findings, shortened};

/// What an alert of the incident says.
#[derive(Debug, Clone)]
pub struct AlertRecord {
    pub service: Option<String>,
    pub title: String,
    /// Its texts by field name (`title`, `detail`, `description`...).
    pub texts: Vec<(String, String)>,
    pub evidence: Evidence,
    pub fired_at: DateTime<Utc>,
    /// `evidence.sorted_keys()`, worked out once: the ledger compares every pair of alerts.
    keys: Vec<String>,
}

impl AlertRecord {
    pub fn new(
        service: Option<String>,
        title: String,
        texts: Vec<(String, String)>,
        evidence: Evidence,
        fired_at: DateTime<Utc>,
    ) -> Self {
        let keys = evidence.sorted_keys();
        Self {
            service,
            title,
            texts,
            evidence,
            fired_at,
            keys,
        }
    }
}

/// A deployment or configuration change linked to the incident.
#[derive(Debug, Clone)]
pub struct ChangeRecord {
    pub service: Option<String>,
    pub title: String,
    pub message: Option<String>,
    pub version: Option<String>,
    pub commit: Option<String>,
    pub failed: bool,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    Confirmed,
    Likely,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "CONFIRMED",
            Self::Likely => "LIKELY",
            Self::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// What kind of cause a hypothesis names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    Change,
    Dependency,
    Component,
    Host,
    Network,
    Database,
    Capacity,
}

/// One piece of evidence, quoted from where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Index of the alert in the incident (0 is its first), `None` for a change.
    pub alert: Option<usize>,
    /// The alert's service, or the change's title.
    pub source: String,
    pub field: String,
    pub excerpt: String,
    /// The failure kind it shows, if any (a [`crate::signatures`] id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hypothesis {
    /// The component at fault, spelled as the alerts spell it.
    pub component: String,
    pub kind: CauseKind,
    /// The failure, in words.
    pub failure: String,
    pub support: Vec<Finding>,
    /// Other alerts that name it (the path from the failing requests).
    pub named_by: Vec<String>,
    pub score: f64,
    pub verdict: Verdict,
}

/// A component or change that was considered and set aside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuledOut {
    pub subject: String,
    pub reason: String,
}

/// A failure shown at the same time by an alert that nothing in the incident leads to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unlinked {
    pub component: String,
    /// The failure, in words.
    pub failure: String,
    pub evidence: Finding,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ledger {
    /// Strongest first.
    pub hypotheses: Vec<Hypothesis>,
    pub ruled_out: Vec<RuledOut>,
    /// When the incident's own evidence establishes nothing: the failures other alerts of the
    /// same minutes show, strongest first, as leads to check rather than causes.
    pub unlinked: Vec<Unlinked>,
}

impl Ledger {
    /// The verdict of the analysis: that of the strongest hypothesis, or INCONCLUSIVE.
    pub fn verdict(&self) -> Verdict {
        self.hypotheses.first().map_or(Verdict::Inconclusive, |h| h.verdict)
    }

    pub fn leading(&self) -> Option<&Hypothesis> {
        self.hypotheses.first().filter(|h| h.verdict != Verdict::Inconclusive)
    }

    /// What the analysis concluded, as it is recorded with the incident.
    pub fn conclusion(&self) -> Conclusion {
        let leader = self.leading();
        Conclusion {
            verdict: self.verdict(),
            component: leader.map(|h| h.component.clone()),
            kind: leader.map(|h| h.kind),
            failure: leader.map(|h| h.failure.clone()),
            evidence: leader
                .map(|h| h.support.iter().take(5).cloned().collect())
                .unwrap_or_default(),
            named_by: leader.map(|h| h.named_by.clone()).unwrap_or_default(),
            ruled_out: self.ruled_out.iter().take(8).cloned().collect(),
            unlinked: self.unlinked.clone(),
            model: None,
        }
    }
}

/// The verdict of an analysis and what it rests on: the structured form of its conclusion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conclusion {
    pub verdict: Verdict,
    /// The component at fault; none when the cause is not established.
    pub component: Option<String>,
    pub kind: Option<CauseKind>,
    pub failure: Option<String>,
    pub evidence: Vec<Finding>,
    /// The alerts' services that lead to it.
    pub named_by: Vec<String>,
    pub ruled_out: Vec<RuledOut>,
    /// Failures of the same minutes that nothing links to the incident (see [`Ledger::unlinked`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlinked: Vec<Unlinked>,
    /// With a model configured: its verdict as the gate checked it (`crate::verdict_gate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::verdict_gate::ModelCheck>,
}

/// How long before the first alert a change may have caused it.
const CHANGE_WINDOW: Duration = Duration::minutes(30);
/// A score from which a hypothesis is LIKELY; CONFIRMED needs two independent lines of evidence.
const LIKELY_SCORE: f64 = 0.8;
/// Builds the ledger of an incident from its alerts (oldest first) and its linked changes.
pub fn build(alerts: &[AlertRecord], changes: &[ChangeRecord]) -> Ledger {
    build_in(alerts, alerts.len(), changes)
}

/// What a failure of an alert reached only through a shared failure kind counts for: it is a
/// lead from another incident, not the incident's own evidence.
const TOUCHED_WEIGHT: f64 = 0.5;

/// [`build`] where only `alerts[..witnesses]` are the incident's own or directly linked: the
/// others' failures count for [`TOUCHED_WEIGHT`], and what they name supports nothing.
fn build_in(alerts: &[AlertRecord], witnesses: usize, changes: &[ChangeRecord]) -> Ledger {
    let first_alert = alerts.iter().map(|a| a.fired_at).min();
    let mut hypotheses: Vec<Hypothesis> = Vec::new();
    for (index, alert) in alerts.iter().enumerate() {
        if let Some(mut hypothesis) = own_failure(&alerts[..witnesses], index, alert) {
            if index >= witnesses {
                hypothesis.score *= TOUCHED_WEIGHT;
            }
            merge_into(&mut hypotheses, hypothesis);
        }
    }
    for hypothesis in named_zones(alerts) {
        merge_into(&mut hypotheses, hypothesis);
    }
    let mut ruled_out = Vec::new();
    for change in changes {
        match change_hypothesis(alerts, change, first_alert) {
            Some(hypothesis) => merge_into(&mut hypotheses, hypothesis),
            None => ruled_out.push(RuledOut {
                subject: change.title.clone(),
                reason: "no alert of the incident shows a failure that change could explain".into(),
            }),
        }
    }
    // A component whose own alerts name another failing candidate is its caller: it fails
    // because that one does.
    let components: Vec<String> = hypotheses.iter().map(|h| h.component.clone()).collect();
    for hypothesis in &mut hypotheses {
        let calls_a_failing_one = components
            .iter()
            .any(|other| *other != hypothesis.component && named(alerts, other, &hypothesis.component));
        if calls_a_failing_one && hypothesis.kind != CauseKind::Change {
            hypothesis.score *= 0.7;
        }
        hypothesis.verdict = verdict(hypothesis);
    }
    hypotheses.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.component.cmp(&b.component)));
    if let Some(leader) = hypotheses.first() {
        let leader = leader.component.clone();
        for other in hypotheses.iter().skip(1) {
            ruled_out.push(RuledOut {
                subject: other.component.clone(),
                reason: if other.named_by.contains(&leader) || named(alerts, &leader, &other.component) {
                    format!("it fails because {leader} does: its alerts name {leader}")
                } else {
                    format!(
                        "weaker evidence ({:.2} against {:.2})",
                        other.score, hypotheses[0].score
                    )
                },
            });
        }
    }
    Ledger {
        hypotheses,
        ruled_out,
        unlinked: Vec::new(),
    }
}

/// The hypothesis that an alert's own component is failing, from the failures its text shows;
/// `witnesses` are the alerts whose naming it counts as support.
fn own_failure(witnesses: &[AlertRecord], index: usize, alert: &AlertRecord) -> Option<Hypothesis> {
    let service = alert.service.clone()?;
    let support: Vec<Finding> = findings(index, alert)
        .into_iter()
        .filter(|f| {
            f.signature
                .as_deref()
                .and_then(signatures::by_id)
                .is_some_and(is_own_failure)
        })
        .collect();
    if support.is_empty() {
        return None;
    }
    let named_by = naming_alerts(witnesses, index, &service);
    let best = support
        .iter()
        .filter_map(|f| f.signature.as_deref().and_then(signatures::by_id))
        .max_by(|a, b| own_weight(a).total_cmp(&own_weight(b)))?;
    let distinct = {
        let mut ids: Vec<&str> = support.iter().filter_map(|f| f.signature.as_deref()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    let hinted_by = hinting_alerts(witnesses, index, &service, &named_by);
    let score = own_weight(best)
        + 0.15 * (distinct - 1) as f64
        + NAMED_WEIGHT * named_by.len() as f64
        + HINTED_WEIGHT * hinted_by.len() as f64;
    let mut named_by = named_by;
    named_by.extend(hinted_by);
    Some(Hypothesis {
        component: component_name(alert, best, &service),
        kind: kind_of(best.implicates),
        failure: best.name.to_owned(),
        support,
        named_by,
        score,
        verdict: Verdict::Inconclusive,
    })
}

/// A failure an alert's text shows of its own component. A change of its own configuration
/// counts (`flag revision 88`, `config=... loaded_at`); a change elsewhere (a wire format, a
/// missing column) is the changed component's, and comes in through the linked changes.
fn is_own_failure(signature: &Signature) -> bool {
    signature.implicates != Implicates::Change || matches!(signature.id, "config_changed" | "bad_config")
}

/// How much a failure says about the component that shows it. A timeout, a refused connection or
/// a 5xx is what a caller sees of its dependency as much as its own failure: it counts for less,
/// so that the component the callers name comes first.
fn own_weight(signature: &Signature) -> f64 {
    if signature.distinctive {
        signature.confidence
    } else {
        0.6 * signature.confidence
    }
}

/// Where a failure shows, the component to name: the host a disk fills on, or the service.
fn component_name(alert: &AlertRecord, signature: &Signature, service: &str) -> String {
    if signature.implicates == Implicates::Host {
        if let Some(host) = alert.evidence.entities.iter().find(|e| e.kind == EntityKind::Host) {
            return host.value.clone();
        }
    }
    service.to_owned()
}

/// Zones named by several alerts that show network failures: a zone at fault pages the
/// services whose pods run there.
fn named_zones(alerts: &[AlertRecord]) -> Vec<Hypothesis> {
    let zones: Vec<&Entity> = alerts
        .iter()
        .flat_map(|a| a.evidence.entities.iter().filter(|e| e.kind == EntityKind::Zone))
        .collect();
    let mut out: Vec<Hypothesis> = Vec::new();
    for zone in zones {
        if out.iter().any(|h| h.component == zone.value) {
            continue;
        }
        let token = zone.value.replace(['-', '_'], "");
        let mut support = Vec::new();
        let mut named_by = Vec::new();
        for (index, alert) in alerts.iter().enumerate() {
            let names_zone = alert
                .evidence
                .entities
                .iter()
                .any(|e| e.value.replace(['-', '_'], "").contains(&token))
                || alert.evidence.terms.iter().any(|t| t.replace('-', "").contains(&token));
            if !names_zone {
                continue;
            }
            named_by.extend(alert.service.clone());
            support.extend(findings(index, alert).into_iter().filter(|f| {
                f.signature
                    .as_deref()
                    .and_then(signatures::by_id)
                    .is_some_and(|s| s.implicates == Implicates::Network)
            }));
        }
        if support.is_empty() {
            continue;
        }
        named_by.dedup();
        let score = 0.85 + 0.3 * named_by.len() as f64;
        out.push(Hypothesis {
            component: zone.value.clone(),
            kind: CauseKind::Network,
            failure: "packet loss in the zone".into(),
            support,
            named_by,
            score,
            verdict: Verdict::Inconclusive,
        });
    }
    out
}

/// The hypothesis that a linked change caused the incident, if an alert shows a failure it
/// could explain.
fn change_hypothesis(
    alerts: &[AlertRecord],
    change: &ChangeRecord,
    first_alert: Option<DateTime<Utc>>,
) -> Option<Hypothesis> {
    let service = change.service.clone()?;
    let before_first =
        first_alert.is_none_or(|first| change.at <= first + Duration::minutes(5) && first - change.at <= CHANGE_WINDOW);
    if !before_first {
        return None;
    }
    let mut support = vec![Finding {
        alert: None,
        source: change.title.clone(),
        field: "change".into(),
        excerpt: change_summary(change),
        signature: None,
    }];
    let mut affected = Vec::new();
    for (index, alert) in alerts.iter().enumerate() {
        let own = alert
            .service
            .as_deref()
            .is_some_and(|s| relation::name_parts(s) == relation::name_parts(&service));
        let names_it = names_service(alert, &service)
            || change
                .version
                .as_deref()
                .is_some_and(|v| alert.texts.iter().any(|(_, t)| t.contains(v)));
        if own || names_it {
            affected.extend(alert.service.clone());
            support.extend(
                findings(index, alert)
                    .into_iter()
                    .filter(|f| f.signature.is_some())
                    .take(2),
            );
        }
    }
    if affected.is_empty() {
        return None;
    }
    affected.dedup();
    let base = if change.failed { 1.2 } else { 0.9 };
    let score = base + 0.3 * affected.len() as f64;
    Some(Hypothesis {
        component: service,
        kind: CauseKind::Change,
        failure: if change.failed {
            "a failed change".into()
        } else {
            "a change that went out just before the failures".into()
        },
        support,
        named_by: affected,
        score,
        verdict: Verdict::Inconclusive,
    })
}

fn change_summary(change: &ChangeRecord) -> String {
    let mut parts = vec![format!("{} at {}", change.title, change.at.format("%H:%M:%S UTC"))];
    if let Some(version) = &change.version {
        parts.push(format!("version {version}"));
    }
    if let Some(commit) = &change.commit {
        parts.push(format!("commit {}", commit.chars().take(8).collect::<String>()));
    }
    if let Some(message) = &change.message {
        parts.push(format!("\"{}\"", shortened(message, 200)));
    }
    parts.join(", ")
}

/// Folds a hypothesis into one for the same component, or adds it.
fn merge_into(hypotheses: &mut Vec<Hypothesis>, hypothesis: Hypothesis) {
    match hypotheses.iter_mut().find(|h| h.component == hypothesis.component) {
        Some(existing) => {
            existing.score = existing.score.max(hypothesis.score) + 0.25 * existing.score.min(hypothesis.score);
            if hypothesis.kind == CauseKind::Change {
                existing.kind = CauseKind::Change;
                existing.failure = format!("{}, after {}", existing.failure, hypothesis.failure);
            }
            existing.support.extend(hypothesis.support);
            for name in hypothesis.named_by {
                if !existing.named_by.contains(&name) {
                    existing.named_by.push(name);
                }
            }
        }
        None => hypotheses.push(hypothesis),
    }
}

fn verdict(hypothesis: &Hypothesis) -> Verdict {
    let own = hypothesis.support.iter().any(|f| f.signature.is_some());
    let others = !hypothesis.named_by.is_empty();
    match (hypothesis.score >= LIKELY_SCORE, own && others) {
        (true, true) => Verdict::Confirmed,
        (true, false) => Verdict::Likely,
        _ => Verdict::Inconclusive,
    }
}

/// What each other service whose alerts name the component adds to its score.
const NAMED_WEIGHT: f64 = 0.45;
/// What each other service whose alerts name only the component's domain word adds
/// (`basket update failures` of `basket-api`): a caller's words, weaker than its name.
const HINTED_WEIGHT: f64 = 0.2;

/// Other services whose alerts name the domain word of `service` (its distinctive leading
/// part), among those not in `named_by` and not of that word themselves.
fn hinting_alerts(alerts: &[AlertRecord], index: usize, service: &str, named_by: &[String]) -> Vec<String> {
    let Some(part) = relation::leading_part(service).filter(|part| !part.bytes().any(|b| b.is_ascii_digit())) else {
        return Vec::new();
    };
    let mut names: Vec<String> = alerts
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .filter_map(|(_, alert)| alert.service.clone().map(|name| (name, alert)))
        .filter(|(name, alert)| {
            !named_by.contains(name)
                && relation::leading_part(name).as_deref() != Some(part.as_str())
                && relation::uses_part(&[], &alert.keys, &part)
        })
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Other alerts whose text names `service` (by name, a DNS name or host starting with it).
fn naming_alerts(alerts: &[AlertRecord], index: usize, service: &str) -> Vec<String> {
    let mut names: Vec<String> = alerts
        .iter()
        .enumerate()
        .filter(|(other, alert)| {
            *other != index && alert.service.as_deref() != Some(service) && names_service(alert, service)
        })
        .filter_map(|(_, alert)| alert.service.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

fn names_service(alert: &AlertRecord, service: &str) -> bool {
    relation::mentions(&alert.keys, service)
}

/// Whether an alert of `leader` names `other`, or one of `other` names `leader`.
fn named(alerts: &[AlertRecord], leader: &str, other: &str) -> bool {
    alerts
        .iter()
        .any(|a| a.service.as_deref() == Some(other) && names_service(a, leader))
}

fn kind_of(implicates: Implicates) -> CauseKind {
    match implicates {
        Implicates::Dependency => CauseKind::Dependency,
        Implicates::Component => CauseKind::Component,
        Implicates::Host => CauseKind::Host,
        Implicates::Network => CauseKind::Network,
        Implicates::Database => CauseKind::Database,
        Implicates::Change => CauseKind::Change,
        Implicates::Capacity => CauseKind::Capacity,
    }
}

#[cfg(test)]
mod tests;
