//! The built-in analyst: deterministic root cause analysis from the data the service holds. It
//! says plainly what it is, and every sentence it writes comes from a fact it was given: the
//! alert, the alerts correlated with it, recent deployments, and similar past incidents.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

pub use super::earlier::EarlierIncident;
use vigil_aggregates::{
    incident_analysis::{classify, Risk},
    ledger::{self, AlertRecord, ChangeRecord, Ledger, Verdict},
};

pub const DISCLAIMER: &str =
    "Written by vigil's built-in analyst, without a language model (none is configured, or it did \
     not answer): it reasons only from the alert payloads, correlated alerts, recent deployments and \
     past incidents on record.";

/// How far back a deployment still counts as a suspect.
const DEPLOY_LOOKBACK: Duration = Duration::hours(2);

#[derive(Clone, Debug, Default)]
pub struct IncidentFacts {
    pub title: String,
    pub service: Option<String>,
    pub environment: Option<String>,
    pub severity: Option<String>,
    pub source_type: String,
    pub started_at: DateTime<Utc>,
    /// The alert's own explanation (annotations, message).
    pub detail: Option<String>,
    /// Kubernetes namespace, when the alert's labels name one.
    pub namespace: Option<String>,
    pub correlated: Vec<AlertFact>,
    /// The changes linked to the incident.
    pub deployments: Vec<DeploymentFact>,
    pub similar: Vec<PastIncident>,
    /// What each of its alerts says (its first alert first), read from their payloads.
    pub alerts: Vec<AlertRecord>,
    /// The user's other alerts of the same minutes, not grouped with it.
    pub nearby: Vec<AlertRecord>,
    /// The incident its alert fired in before (resolved or merged since): the alert came back.
    pub earlier: Option<EarlierIncident>,
}

#[derive(Clone, Debug)]
pub struct AlertFact {
    pub title: String,
    pub service: Option<String>,
    pub severity: Option<String>,
    pub fired_at: DateTime<Utc>,
    pub strategy: String,
    pub score: f64,
}

#[derive(Clone, Debug)]
pub struct DeploymentFact {
    pub title: String,
    pub service: Option<String>,
    pub environment: Option<String>,
    pub failed: bool,
    pub at: DateTime<Utc>,
    pub message: Option<String>,
    pub version: Option<String>,
    pub commit: Option<String>,
    pub url: Option<String>,
}

#[derive(Clone, Debug)]
pub struct PastIncident {
    pub title: String,
    pub status: String,
    pub summary: Option<String>,
    pub started_at: DateTime<Utc>,
    pub similarity: f32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThoughtKind {
    Analysis,
    Hypothesis,
    Evidence,
    Conclusion,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Thought {
    pub kind: ThoughtKind,
    pub content: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suggestion {
    pub title: String,
    pub description: String,
    /// `diagnostic`, `fix`, `mitigation` or `investigation`.
    pub kind: &'static str,
    pub risk: Risk,
    pub command: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub thoughts: Vec<Thought>,
    pub suggestions: Vec<Suggestion>,
    pub summary: String,
    /// The hypotheses, verdicts and what was ruled out, that the text above is written from.
    pub ledger: Ledger,
}

/// Why a deployment is suspected, strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Suspicion {
    FailedSameService,
    FailedUpstream,
    SucceededSameService,
}

pub fn analyze(facts: &IncidentFacts) -> Analysis {
    let service = facts.service.as_deref().unwrap_or("the affected service");
    let ledger = ledger::build_with_context(&facts.alerts, &facts.nearby, &change_records(facts));
    let mut thoughts = vec![Thought {
        kind: ThoughtKind::Analysis,
        content: situation(facts, service),
    }];
    let suspect = suspect_deployment(facts);
    let symptom = Symptom::of(facts);

    thoughts.push(Thought {
        kind: ThoughtKind::Hypothesis,
        content: match &suspect {
            Some((deployment, why)) => deployment_hypothesis(facts, deployment, *why),
            None => format!(
                "No deployment of {service} is on record in the {} hours before the first alert, so a release is an \
                 unlikely trigger. {}",
                DEPLOY_LOOKBACK.num_hours(),
                symptom.hypothesis(service, facts.detail.as_deref())
            ),
        },
    });
    for hypothesis in ledger.hypotheses.iter().take(3) {
        thoughts.push(Thought {
            kind: ThoughtKind::Hypothesis,
            content: format!(
                "[{}] {}: {} (score {:.2}{}).",
                hypothesis.verdict.as_str(),
                hypothesis.component,
                hypothesis.failure,
                hypothesis.score,
                if hypothesis.named_by.is_empty() {
                    String::new()
                } else {
                    format!("; seen from {}", hypothesis.named_by.join(", "))
                }
            ),
        });
    }
    if let Some(leader) = ledger.hypotheses.first() {
        for finding in leader.support.iter().take(4) {
            thoughts.push(Thought {
                kind: ThoughtKind::Evidence,
                content: format!("{} ({}): \"{}\"", finding.source, finding.field, finding.excerpt),
            });
        }
    }
    for evidence in evidence(facts, suspect.as_ref().map(|(deployment, _)| deployment)) {
        thoughts.push(Thought {
            kind: ThoughtKind::Evidence,
            content: evidence,
        });
    }

    let suggestions = suggestions(
        facts,
        service,
        suspect.as_ref().map(|(deployment, why)| (deployment, *why)),
        symptom,
    );
    let conclusion = conclusion(facts, service, &ledger, symptom);
    thoughts.push(Thought {
        kind: ThoughtKind::Conclusion,
        content: conclusion.clone(),
    });

    let next_steps: Vec<String> = suggestions
        .iter()
        .take(3)
        .map(|s| format!("- {} ({} risk)", s.title, s.risk.as_str()))
        .collect();
    // That the alert came back is told in the summary too: it is the first thing on-call asks.
    let seen_before = facts
        .earlier
        .as_ref()
        .map(|earlier| format!("\n\n{}", earlier.sentence()))
        .unwrap_or_default();
    let summary = format!(
        "{conclusion}{seen_before}\n\nNext steps:\n{}\n\n_{DISCLAIMER}_",
        next_steps.join("\n")
    );
    Analysis {
        thoughts,
        suggestions,
        summary,
        ledger,
    }
}

/// The linked changes as the ledger reads them.
fn change_records(facts: &IncidentFacts) -> Vec<ChangeRecord> {
    facts
        .deployments
        .iter()
        .map(|d| ChangeRecord {
            service: d.service.clone(),
            title: d.title.clone(),
            message: d.message.clone(),
            version: d.version.clone(),
            commit: d.commit.clone(),
            failed: d.failed,
            at: d.at,
        })
        .collect()
}

fn situation(facts: &IncidentFacts, service: &str) -> String {
    let mut text = format!(
        "{} alert \"{}\" on {service}{} from {}, first fired {}.",
        facts.severity.as_deref().map(capitalize).unwrap_or_else(|| "An".into()),
        facts.title,
        facts
            .environment
            .as_deref()
            .map(|env| format!(" ({env})"))
            .unwrap_or_default(),
        facts.source_type,
        facts.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
    );
    if let Some(detail) = facts.detail.as_deref().filter(|detail| !detail.is_empty()) {
        let end = if detail.ends_with(['.', '!', '?']) { "" } else { "." };
        text.push_str(&format!(" The alert says: {detail}{end}"));
    }
    match facts.correlated.len() {
        0 => text.push_str(" No other alert has joined it yet."),
        count => {
            let last = facts
                .correlated
                .iter()
                .map(|alert| alert.fired_at)
                .max()
                .unwrap_or(facts.started_at);
            let services = distinct(facts.correlated.iter().filter_map(|alert| alert.service.clone()));
            text.push_str(&format!(
                " {count} related alert{} joined within {} (services: {}).",
                plural(count),
                human_duration(last - facts.started_at),
                if services.is_empty() {
                    "none named".into()
                } else {
                    services.join(", ")
                }
            ));
        }
    }
    text
}

/// The deployment most likely to have caused the incident, if any.
fn suspect_deployment(facts: &IncidentFacts) -> Option<(DeploymentFact, Suspicion)> {
    let mentioned = |deployment: &DeploymentFact| {
        let text = format!("{} {}", facts.title, facts.detail.as_deref().unwrap_or_default()).to_ascii_lowercase();
        deployment
            .service
            .as_deref()
            .is_some_and(|service| text.contains(&service.to_ascii_lowercase()))
    };
    facts
        .deployments
        .iter()
        .filter(|d| d.at <= facts.started_at + Duration::minutes(10) && facts.started_at - d.at <= DEPLOY_LOOKBACK)
        .filter(|d| d.environment.is_none() || facts.environment.is_none() || d.environment == facts.environment)
        .filter_map(|d| {
            let same_service = d.service.is_some() && d.service == facts.service;
            let why = match (d.failed, same_service) {
                (true, true) => Suspicion::FailedSameService,
                (true, false) if mentioned(d) => Suspicion::FailedUpstream,
                (false, true) => Suspicion::SucceededSameService,
                _ => return None,
            };
            Some((d.clone(), why))
        })
        .min_by_key(|(d, why)| (*why, (facts.started_at - d.at).num_seconds().abs()))
}

fn deployment_hypothesis(facts: &IncidentFacts, deployment: &DeploymentFact, why: Suspicion) -> String {
    let gap = human_duration(facts.started_at - deployment.at);
    let when = if deployment.at <= facts.started_at {
        format!("{gap} before the first alert")
    } else {
        format!("{gap} after it")
    };
    let cause = deployment
        .message
        .as_deref()
        .map(|m| format!(" The deployment reported: {m}"))
        .unwrap_or_default();
    match why {
        Suspicion::FailedSameService => format!(
            "The deployment \"{}\" failed at {} ({when}). A failed or partial rollout of the same service is the most \
             likely trigger.{cause}",
            deployment.title,
            deployment.at.format("%H:%M:%S UTC")
        ),
        Suspicion::FailedUpstream => format!(
            "{} is named in the alert and its deployment \"{}\" failed at {} ({when}); the symptoms likely propagate \
             from that upstream.{cause}",
            deployment.service.as_deref().unwrap_or("A dependency"),
            deployment.title,
            deployment.at.format("%H:%M:%S UTC")
        ),
        Suspicion::SucceededSameService => format!(
            "{} was deployed at {} ({when}){}; a regression in that release is the leading hypothesis.",
            deployment.service.as_deref().unwrap_or("The service"),
            deployment.at.format("%H:%M:%S UTC"),
            deployment
                .version
                .as_deref()
                .map(|v| format!(" as version {v}"))
                .unwrap_or_default()
        ),
    }
}

fn evidence(facts: &IncidentFacts, suspect: Option<&DeploymentFact>) -> Vec<String> {
    let mut evidence: Vec<String> = facts.earlier.iter().map(EarlierIncident::sentence).collect();
    if !facts.correlated.is_empty() {
        let timeline: Vec<String> = facts
            .correlated
            .iter()
            .map(|alert| {
                format!(
                    "{} +{} \"{}\"{} ({} {:.2})",
                    alert.fired_at.format("%H:%M:%S"),
                    human_duration(alert.fired_at - facts.started_at),
                    alert.title,
                    alert.service.as_deref().map(|s| format!(" on {s}")).unwrap_or_default(),
                    alert.strategy,
                    alert.score
                )
            })
            .collect();
        evidence.push(format!("Timeline of correlated alerts: {}.", timeline.join("; ")));
    }
    if let Some(deployment) = suspect {
        let mut facts_of_deploy = Vec::new();
        if let Some(version) = &deployment.version {
            facts_of_deploy.push(format!("version {version}"));
        }
        if let Some(commit) = &deployment.commit {
            facts_of_deploy.push(format!("commit {}", short_commit(commit)));
        }
        if let Some(url) = &deployment.url {
            facts_of_deploy.push(format!("build {url}"));
        }
        if !facts_of_deploy.is_empty() {
            evidence.push(format!("The suspected deployment: {}.", facts_of_deploy.join(", ")));
        }
    }
    let retries = facts
        .deployments
        .iter()
        .filter(|d| d.failed && d.service == facts.service)
        .count();
    if retries > 1 {
        evidence.push(format!(
            "{retries} deployments of this service failed in the window: the failure repeats, so it is not a flake."
        ));
    }
    if let Some(past) = facts.similar.iter().find(|past| past.similarity >= 0.5) {
        evidence.push(format!(
            "A similar past incident, \"{}\" ({}, similarity {:.2}), started {} and is {}{}.",
            past.title,
            past.started_at.format("%Y-%m-%d"),
            past.similarity,
            past.started_at.format("%H:%M UTC"),
            past.status,
            past.summary
                .as_deref()
                .map(|s| format!("; its summary: {}", first_sentence(s)))
                .unwrap_or_default()
        ));
    }
    evidence
}

/// The verdict in words: the component at fault and the evidence, what was ruled out, or that
/// the cause is not established and what to check.
fn conclusion(facts: &IncidentFacts, service: &str, ledger: &Ledger, symptom: Symptom) -> String {
    let Some(leader) = ledger.leading() else {
        let mut text = format!(
            "Verdict: {}. The cause is not established: no alert of the incident shows a failure that explains \
             this {} on {service}, and no linked change does. {}",
            Verdict::Inconclusive.as_str(),
            symptom.noun(),
            symptom.next_look(facts.detail.as_deref())
        );
        for lead in &ledger.unlinked {
            text.push_str(&format!(
                " In the same minutes {} showed a failure of its own, {}: it says \"{}\". Nothing in this \
                 incident's alerts leads to it; check whether {service} depends on {}.",
                lead.component, lead.failure, lead.evidence.excerpt, lead.component
            ));
        }
        return text;
    };
    let evidence: Vec<String> = leader
        .support
        .iter()
        .take(3)
        .map(|f| format!("{} says \"{}\"", f.source, f.excerpt))
        .collect();
    let mut text = format!(
        "Verdict: {}. Root cause: {}, {}. Evidence: {}.",
        leader.verdict.as_str(),
        leader.component,
        leader.failure,
        evidence.join("; ")
    );
    let callers: Vec<&String> = leader.named_by.iter().filter(|n| **n != leader.component).collect();
    if !callers.is_empty() {
        text.push_str(&format!(
            " {} fail{} because {} does: their errors name it.",
            callers.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", "),
            if callers.len() == 1 { "s" } else { "" },
            leader.component
        ));
    }
    let ruled: Vec<String> = ledger
        .ruled_out
        .iter()
        .take(4)
        .map(|r| format!("{} ({})", r.subject, r.reason))
        .collect();
    if !ruled.is_empty() {
        text.push_str(&format!(" Ruled out: {}.", ruled.join("; ")));
    }
    text
}

fn suggestions(
    facts: &IncidentFacts,
    service: &str,
    suspect: Option<(&DeploymentFact, Suspicion)>,
    symptom: Symptom,
) -> Vec<Suggestion> {
    let namespace = facts
        .namespace
        .as_deref()
        .map(|ns| format!("-n {ns} "))
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut propose = |title: String, description: String, kind: &'static str, command: Option<String>| {
        // Without a command the kind decides: looking is safe, changing is not.
        let risk = command.as_deref().map_or(
            if matches!(kind, "diagnostic" | "investigation") {
                Risk::Safe
            } else {
                Risk::Medium
            },
            classify,
        );
        out.push(Suggestion {
            title,
            description,
            kind,
            risk,
            command,
        });
    };
    propose(
        format!("Check the pods of {service}"),
        "Shows whether replicas are ready, restarting or pending.".into(),
        "diagnostic",
        Some(format!("kubectl {namespace}get pods -l app={service} -o wide")),
    );
    propose(
        format!("Read the recent logs of {service}"),
        format!(
            "Look for the first errors around {}.",
            facts.started_at.format("%H:%M UTC")
        ),
        "diagnostic",
        Some(format!(
            "kubectl {namespace}logs deployment/{service} --since=30m --tail=200"
        )),
    );
    if let Some((deployment, why)) = suspect {
        let target = match why {
            Suspicion::FailedUpstream => deployment.service.clone().unwrap_or_else(|| service.to_owned()),
            _ => service.to_owned(),
        };
        propose(
            format!("Review the rollout history of {target}"),
            "Confirms which revision is live and which one it replaced.".into(),
            "diagnostic",
            Some(format!("kubectl {namespace}rollout history deployment/{target}")),
        );
        if let Some(variable) = deployment.message.as_deref().and_then(missing_env_variable) {
            propose(
                format!("Set {variable} for {target}"),
                format!("The deployment failed because the environment variable {variable} is missing; add it to the release's values and redeploy."),
                "fix",
                None,
            );
        }
        propose(
            format!("Roll {target} back to the previous revision"),
            "Restores the last release that worked while the failed one is fixed. Changes production: needs approval."
                .into(),
            "mitigation",
            Some(format!("kubectl {namespace}rollout undo deployment/{target}")),
        );
        if let Some(commit) = &deployment.commit {
            propose(
                format!("Compare commit {} with the previous release", short_commit(commit)),
                "Find the change that introduced the failure.".into(),
                "investigation",
                None,
            );
        }
    } else {
        propose(
            symptom.investigation_title(service),
            symptom.investigation_description(),
            "investigation",
            None,
        );
    }
    out
}

/// What kind of trouble the alert describes, from its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Symptom {
    Latency,
    Errors,
    Resource,
    Availability,
    Unknown,
}

impl Symptom {
    fn of(facts: &IncidentFacts) -> Self {
        let text = format!("{} {}", facts.title, facts.detail.as_deref().unwrap_or_default()).to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|word| text.contains(word));
        if has(&["latency", "slow", "response time", "p99", "p95", "timeout"]) {
            Self::Latency
        } else if has(&["5xx", "error rate", "errors", "exception", "failed requests"]) {
            Self::Errors
        } else if has(&["disk", "memory", "cpu", "oom", "space", "saturation"]) {
            Self::Resource
        } else if has(&["down", "unavailable", "unreachable", "crash", "restart"]) {
            Self::Availability
        } else {
            Self::Unknown
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Self::Latency => "slowdown",
            Self::Errors => "error spike",
            Self::Resource => "resource exhaustion",
            Self::Availability => "outage",
            Self::Unknown => "problem",
        }
    }

    fn hypothesis(self, service: &str, detail: Option<&str>) -> String {
        let upstream = detail
            .and_then(upstream_named)
            .map(|name| format!(" The alert itself points at {name}."));
        match self {
            Self::Latency => format!(
                "Latency on {service} without a release usually comes from a slower dependency or from more load than its \
                 replicas absorb.{}",
                upstream.unwrap_or_default()
            ),
            Self::Errors => format!("An error spike without a release usually means a failing dependency or bad input.{}", upstream.unwrap_or_default()),
            Self::Resource => format!("{service} is running out of a resource; growth or a leak is the usual cause."),
            Self::Availability => format!("{service} is not serving; look for crashing replicas or a failed node."),
            Self::Unknown => format!("The alert does not say enough to rank causes for {service}; the diagnostics below gather the facts."),
        }
    }

    fn next_look(self, detail: Option<&str>) -> String {
        match (self, detail.and_then(upstream_named)) {
            (Self::Latency | Self::Errors, Some(upstream)) => {
                format!("look first at {upstream}, which the alert names.")
            }
            (Self::Latency, None) => "look at load and at the slowest dependency.".into(),
            (Self::Errors, None) => "look at the first errors in the logs.".into(),
            (Self::Resource, _) => "look at what grew: traffic, data or a leak.".into(),
            (Self::Availability, _) => "look at pod restarts and node health.".into(),
            (Self::Unknown, _) => "gather the diagnostics first.".into(),
        }
    }

    fn investigation_title(self, service: &str) -> String {
        match self {
            Self::Latency => format!("Trace the slowest requests of {service}"),
            Self::Errors => format!("Group the errors of {service} by cause"),
            Self::Resource => format!("Find what grew on {service}"),
            Self::Availability => format!("Find why {service} stopped serving"),
            Self::Unknown => format!("Gather the state of {service}"),
        }
    }

    fn investigation_description(self) -> String {
        match self {
            Self::Latency => "Compare dependency latencies with the service's own to find where the time goes.".into(),
            Self::Errors => {
                "The first error type that rose is usually the cause; later ones are often consequences.".into()
            }
            Self::Resource => "Compare usage with the same hour last week.".into(),
            Self::Availability => "Check events, restarts and node conditions.".into(),
            Self::Unknown => "Collect pods, logs and recent changes before deciding.".into(),
        }
    }
}

/// A dependency the alert text names as upstream, e.g. "Upstream payments-api calls ...".
fn upstream_named(detail: &str) -> Option<String> {
    let lower = detail.to_ascii_lowercase();
    let at = lower.find("upstream")?;
    detail[at + "upstream".len()..]
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| !c.is_alphanumeric() && c != '-'))
        .find(|word| word.contains('-') || word.ends_with("api") || word.ends_with("service"))
        .map(str::to_owned)
}

/// `missing env INVENTORY_DB_POOL_SIZE` → `INVENTORY_DB_POOL_SIZE`.
fn missing_env_variable(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let marker = ["missing env ", "missing environment variable ", "env var not set: "]
        .into_iter()
        .find(|m| lower.contains(m))?;
    let at = lower.find(marker)? + marker.len();
    let name: String = message[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The first 12 characters of a commit id (payloads are untrusted: count characters, not bytes).
fn short_commit(commit: &str) -> String {
    commit.chars().take(12).collect()
}

fn first_sentence(text: &str) -> &str {
    text.split_inclusive(". ").next().unwrap_or(text).trim()
}

fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

fn human_duration(duration: Duration) -> String {
    let seconds = duration.num_seconds().abs();
    match seconds {
        0..=89 => format!("{seconds} s"),
        90..=5399 if seconds % 60 == 0 => format!("{} min", seconds / 60),
        90..=5399 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{:.1} h", seconds as f64 / 3600.0),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, m, s).unwrap()
    }

    fn inventory_alert() -> IncidentFacts {
        IncidentFacts {
            title: "InventoryServiceHighErrorRate".into(),
            service: Some("inventory-service".into()),
            environment: Some("production".into()),
            severity: Some("critical".into()),
            source_type: "source_a".into(),
            started_at: at(17, 52, 0),
            detail: Some("5xx rate of inventory-service above 5% for 5 minutes".into()),
            namespace: Some("inventory".into()),
            correlated: vec![],
            deployments: vec![DeploymentFact {
                title: "inventory-service deploy to production failed (deploy-production #1842)".into(),
                service: Some("inventory-service".into()),
                environment: Some("production".into()),
                failed: true,
                at: at(17, 47, 55),
                message: Some(
                    "Stage 'helm upgrade' failed: CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE".into(),
                ),
                version: Some("2026.11.20-1".into()),
                commit: Some("9f2c4e1a7b3d5f60812c4a9e0d7b6f3a2c1e8d45".into()),
                url: None,
            }],
            similar: vec![],
            earlier: None,
            alerts: vec![AlertRecord::new(
                Some("inventory-service".into()),
                "InventoryServiceHighErrorRate".into(),
                vec![(
                    "detail".into(),
                    "5xx rate of inventory-service above 5% for 5 minutes".into(),
                )],
                Default::default(),
                at(17, 52, 0),
            )],
            nearby: vec![],
        }
    }

    #[test]
    fn a_failed_deploy_of_the_same_service_is_the_lead() {
        let analysis = analyze(&inventory_alert());
        let hypothesis = &analysis.thoughts[1];
        assert_eq!(hypothesis.kind, ThoughtKind::Hypothesis);
        assert!(
            hypothesis
                .content
                .contains("failed at 17:47:55 UTC (4 min 5 s before the first alert)"),
            "{}",
            hypothesis.content
        );
        assert!(hypothesis.content.contains("INVENTORY_DB_POOL_SIZE"));
        let fix = analysis
            .suggestions
            .iter()
            .find(|s| s.kind == "fix")
            .expect("a fix for the missing variable");
        assert_eq!(fix.title, "Set INVENTORY_DB_POOL_SIZE for inventory-service");
        let rollback = analysis.suggestions.iter().find(|s| s.kind == "mitigation").unwrap();
        assert_eq!(
            rollback.command.as_deref(),
            Some("kubectl -n inventory rollout undo deployment/inventory-service")
        );
        assert_eq!(rollback.risk, Risk::High, "a rollback is never proposed as safe");
        assert!(
            analysis
                .summary
                .contains("Root cause: inventory-service, a failed change"),
            "{}",
            analysis.summary
        );
        assert!(analysis.summary.contains("built-in analyst"));
        let kinds: Vec<_> = analysis.thoughts.iter().map(|t| t.kind).collect();
        assert_eq!(kinds.first(), Some(&ThoughtKind::Analysis));
        assert_eq!(kinds.last(), Some(&ThoughtKind::Conclusion));
        assert!(kinds.contains(&ThoughtKind::Evidence));
    }

    #[test]
    fn an_upstream_named_in_the_alert_is_followed() {
        let mut facts = inventory_alert();
        facts.service = Some("checkout-api".into());
        facts.title = "CheckoutApiHighLatency".into();
        facts.detail = Some(
            "p99 latency of checkout-api above 2s. Upstream inventory-service calls account for most of the time."
                .into(),
        );
        let analysis = analyze(&facts);
        assert!(
            analysis.thoughts[1]
                .content
                .starts_with("inventory-service is named in the alert"),
            "{}",
            analysis.thoughts[1].content
        );
        assert!(
            analysis.summary.contains("Root cause: inventory-service"),
            "{}",
            analysis.summary
        );
    }

    #[test]
    fn without_a_release_it_says_so_and_points_at_the_named_upstream() {
        let mut facts = inventory_alert();
        facts.deployments.clear();
        facts.service = Some("checkout-api".into());
        facts.title = "CheckoutApiHighLatency".into();
        facts.detail = Some("p99 latency above 2s. Upstream payments-api calls account for most of the time.".into());
        let analysis = analyze(&facts);
        assert!(analysis.thoughts[1]
            .content
            .starts_with("No deployment of checkout-api is on record"));
        assert!(analysis.thoughts[1].content.contains("points at payments-api"));
        assert!(analysis.summary.contains("look first at payments-api"));
        assert!(
            analysis.suggestions.iter().all(|s| s.kind != "mitigation"),
            "no rollback without a release"
        );
        assert!(analysis
            .suggestions
            .iter()
            .filter(|s| s.kind == "diagnostic")
            .all(|s| s.risk == Risk::Safe));
    }

    #[test]
    fn deployments_outside_the_window_or_environment_are_ignored() {
        let mut facts = inventory_alert();
        facts.deployments[0].at = at(14, 0, 0);
        assert!(analyze(&facts).thoughts[1].content.starts_with("No deployment"));
        let mut facts = inventory_alert();
        facts.deployments[0].environment = Some("staging".into());
        assert!(analyze(&facts).thoughts[1].content.starts_with("No deployment"));
    }

    #[test]
    fn correlated_alerts_and_past_incidents_become_evidence() {
        let mut facts = inventory_alert();
        facts.correlated.push(AlertFact {
            title: "InventoryServicePodsNotReady".into(),
            service: Some("inventory-service".into()),
            severity: Some("warning".into()),
            fired_at: at(17, 54, 30),
            strategy: "service_match".into(),
            score: 0.83,
        });
        facts.similar.push(PastIncident {
            title: "InventoryServiceHighErrorRate".into(),
            status: "resolved".into(),
            summary: Some("A missing database setting crashed the pods. Rolled back.".into()),
            started_at: at(3, 0, 0),
            similarity: 0.91,
        });
        let analysis = analyze(&facts);
        assert!(
            analysis.thoughts[0]
                .content
                .contains("1 related alert joined within 2 min 30 s"),
            "{}",
            analysis.thoughts[0].content
        );
        let evidence: Vec<_> = analysis
            .thoughts
            .iter()
            .filter(|t| t.kind == ThoughtKind::Evidence)
            .map(|t| t.content.as_str())
            .collect();
        assert!(
            evidence
                .iter()
                .any(|e| e.contains("17:54:30 +2 min 30 s \"InventoryServicePodsNotReady\"")),
            "{evidence:?}"
        );
        assert!(evidence
            .iter()
            .any(|e| e.contains("similarity 0.91") && e.contains("A missing database setting crashed the pods.")));
    }

    /// The verdict stays the ledger's: the earlier incident is a fact told, not evidence weighed.
    #[test]
    fn an_earlier_incident_of_the_alert_is_told_and_weighs_nothing() {
        let without = analyze(&inventory_alert());
        let mut facts = inventory_alert();
        facts.earlier = Some(EarlierIncident {
            id: uuid::Uuid::from_u128(7),
            title: "InventoryServiceHighErrorRate".into(),
            status: "resolved".into(),
            started_at: at(3, 0, 0),
            resolved_at: Some(at(4, 15, 0)),
            merged_into: None,
            summary: None,
        });
        let with = analyze(&facts);
        let told = format!(
            "This alert fired before, in incident {} (\"InventoryServiceHighErrorRate\", started 2026-11-20 03:00 \
             UTC), resolved at 2026-11-20 04:15 UTC: it has come back.",
            uuid::Uuid::from_u128(7)
        );
        assert!(with
            .thoughts
            .iter()
            .any(|t| t.kind == ThoughtKind::Evidence && t.content == told));
        assert!(with.summary.contains(&told), "{}", with.summary);
        assert_eq!(with.ledger.conclusion(), without.ledger.conclusion());
        assert_eq!(with.suggestions, without.suggestions);
        assert!(!without.summary.contains("fired before"));
    }

    #[test]
    fn helpers() {
        assert_eq!(
            missing_env_variable("CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE)"),
            Some("INVENTORY_DB_POOL_SIZE".into())
        );
        assert_eq!(missing_env_variable("all good"), None);
        assert_eq!(
            upstream_named("Upstream payments-api calls dominate"),
            Some("payments-api".into())
        );
        assert_eq!(human_duration(Duration::seconds(245)), "4 min 5 s");
        assert_eq!(human_duration(Duration::seconds(120)), "2 min");
        assert_eq!(human_duration(Duration::seconds(45)), "45 s");
        assert_eq!(short_commit("9f2c4e1a7b3d5f60812c"), "9f2c4e1a7b3d");
        assert_eq!(
            short_commit("éééééééééééééé"),
            "éééééééééééé",
            "no byte slicing of untrusted text"
        );
    }
}
