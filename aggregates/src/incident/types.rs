//! The values an incident is made of: its statuses as the spec names them, and what its events
//! keep of an alert and of how it was matched.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::correlation::evidence::Evidence;
use chrono::{DateTime, Utc};

pub const MAX_SUMMARY_CHARS: usize = 10_000;
/// Correlated alerts one incident takes by default; later alerts open incidents of their own.
pub const DEFAULT_MAX_CORRELATED_ALERTS: usize = 50;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentStatus {
    #[default]
    Investigating,
    Analyzed,
    Merged,
    Resolved,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnalysisStatus {
    #[default]
    Idle,
    Running,
    Complete,
    Error,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActiveTab {
    #[default]
    Thoughts,
    Chat,
}

macro_rules! wire_names {
    ($($type:ty { $($variant:ident => $name:literal),+ $(,)? })+) => {$(
        impl $type {
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
            pub const NAMES: &'static [&'static str] = &[$($name),+];
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $name),+ }
            }
            pub fn parse(value: &str) -> Option<Self> {
                match value { $($name => Some(Self::$variant),)+ _ => None }
            }
        }
    )+};
}

wire_names! {
    IncidentStatus { Investigating => "investigating", Analyzed => "analyzed", Merged => "merged", Resolved => "resolved" }
    AnalysisStatus { Idle => "idle", Running => "running", Complete => "complete", Error => "error" }
    ActiveTab { Thoughts => "thoughts", Chat => "chat" }
}

/// What the incident's events keep of one alert.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertInfo {
    /// `source_a` .. `source_i`.
    pub source_type: String,
    /// The id of the alert's row in the ingestion store.
    pub source_alert_id: i64,
    /// The source's stable key of the alert.
    pub alert_key: String,
    pub title: String,
    pub service: Option<String>,
    pub environment: Option<String>,
    pub severity: Option<String>,
    pub fired_at: DateTime<Utc>,
    pub source_url: Option<String>,
    /// Labels and links worth keeping (the correlated alert's `alert_metadata`).
    pub metadata: Value,
    /// What the alert names (entities and terms), for correlation and the analysis. Absent from
    /// events recorded before it was extracted.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
}

/// How an alert was matched to an incident.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    /// `time_window`, `service_match`, `semantic` or `manual`.
    pub strategy: String,
    /// 0.0 to 1.0.
    pub score: f64,
    /// Every sub-score, the weights and the threshold that decided it.
    pub details: Value,
}
