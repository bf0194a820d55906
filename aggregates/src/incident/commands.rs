//! What can be asked of an incident.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{ActiveTab, AlertInfo, AnalysisStatus, Correlation, IncidentStatus};
use crate::ledger::Conclusion;

#[derive(Clone, Debug, PartialEq)]
pub enum IncidentCommand {
    Open {
        incident_id: Uuid,
        user_id: String,
        alert: AlertInfo,
        /// The incident that held the alert's key before (resolved, merged, or no longer taking
        /// it): a new firing opens a new incident linked to it rather than reopening it.
        previous_incident_id: Option<Uuid>,
        at: DateTime<Utc>,
    },
    CorrelateAlert {
        user_id: String,
        alert: AlertInfo,
        correlation: Correlation,
        /// The configured cap of correlated alerts per incident.
        max_correlated_alerts: usize,
        /// Other open incidents the alert relates to as strongly as to this one.
        bridges: Vec<Uuid>,
        at: DateTime<Utc>,
    },
    /// A recovery notification for one of the incident's alerts.
    ResolveAlert {
        user_id: String,
        source_type: String,
        alert_key: String,
        source_alert_id: i64,
        at: DateTime<Utc>,
    },
    /// The PATCH of the spec: every provided field changes; `updated_at` always moves.
    Patch {
        user_id: String,
        status: Option<IncidentStatus>,
        analysis_status: Option<AnalysisStatus>,
        summary: Option<String>,
        active_tab: Option<ActiveTab>,
        at: DateTime<Utc>,
    },
    /// The analysis ends (`complete`, or `error` when it gave up) with its summary, which does
    /// not replace a summary someone wrote while the analysis ran.
    FinishAnalysis {
        user_id: String,
        status: AnalysisStatus,
        summary: String,
        /// The verdict and what it rests on, when the analysis reached one.
        conclusion: Option<Conclusion>,
        at: DateTime<Utc>,
    },
    /// Source side of a merge: this incident goes into `target_incident_id`.
    MergeInto {
        user_id: String,
        target_incident_id: Uuid,
        at: DateTime<Utc>,
    },
    /// Target side of a merge: the source's alerts join this incident.
    Absorb {
        user_id: String,
        source_incident_id: Uuid,
        alerts: Vec<AlertInfo>,
        at: DateTime<Utc>,
    },
    LinkChatSession {
        user_id: String,
        session_id: Uuid,
        at: DateTime<Utc>,
    },
    /// Source side of a split: one of its correlated alerts leaves for `new_incident_id`.
    SplitOff {
        user_id: String,
        alert: AlertInfo,
        new_incident_id: Uuid,
        /// The services of the alerts that stay (for the learned topology).
        remaining_services: Vec<String>,
        at: DateTime<Utc>,
    },
    /// The recovery just recorded of `alert_key` is its `recoveries`th within the flapping
    /// window: the key is flapping, and its later cycles are recorded here (once per key).
    MarkFlapping {
        user_id: String,
        source_type: String,
        alert_key: String,
        recoveries: u32,
        window_seconds: i64,
        at: DateTime<Utc>,
    },
    /// A firing or recovery of a key flapping in this incident: recorded, nothing opened or
    /// analysed (whatever the incident's status).
    RecordFlap {
        user_id: String,
        source_type: String,
        alert_key: String,
        source_alert_id: i64,
        resolved: bool,
        fired_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// New side of a split: the incident opens with the alert that left `source_incident_id`.
    OpenSplit {
        incident_id: Uuid,
        user_id: String,
        alert: AlertInfo,
        source_incident_id: Uuid,
        at: DateTime<Utc>,
    },
}
