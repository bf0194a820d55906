//! The built-in analyst: deterministic root cause analysis from the data the service holds. It
//! says plainly what it is, and every sentence it writes comes from a fact it was given: the
//! alert, the alerts correlated with it, recent deployments, and similar past incidents.

use chrono::Duration;

pub use super::earlier::EarlierIncident;
use vigil_aggregates::{
    incident_analysis::{classify, Risk},
    ledger::{self, ChangeRecord, Ledger, Verdict},
};

pub const DISCLAIMER: &str =
    "Written by vigil's built-in analyst, without a language model (none is configured, or it did \
     not answer): it reasons only from the alert payloads, correlated alerts, recent deployments and \
     past incidents on record.";

/// How far back a deployment still counts as a suspect.
const DEPLOY_LOOKBACK: Duration = Duration::hours(2);

mod facts;
mod symptom;
#[cfg(test)]
mod tests;

pub use facts::*;
use symptom::*;

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
