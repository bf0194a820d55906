//! What the built-in analyst is given (the incident's facts) and what it writes (an analysis).

use chrono::{DateTime, Utc};
use serde::Serialize;
use vigil_aggregates::{
    incident_analysis::Risk,
    ledger::{AlertRecord, Ledger},
};

use super::EarlierIncident;

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
