//! What happened to an incident: its events, as stored.

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{ActiveTab, AlertInfo, AnalysisStatus, Correlation, IncidentStatus};
use crate::ledger::Conclusion;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum IncidentEvent {
    IncidentOpened {
        incident_id: Uuid,
        user_id: String,
        alert: AlertInfo,
        at: DateTime<Utc>,
        /// The incident a user split this one's alert off (absent for an alert's own incident).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        split_from: Option<Uuid>,
        /// The earlier incident the opening alert's key fired in (absent when none, and from
        /// events recorded before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_incident_id: Option<Uuid>,
    },
    AlertCorrelated {
        alert: AlertInfo,
        correlation: Correlation,
        /// With this alert the incident holds the most correlated alerts allowed: it takes no
        /// more (so the read model need not offer it to correlation again). Absent when false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        filled: bool,
        at: DateTime<Utc>,
    },
    AlertResolved {
        source_type: String,
        alert_key: String,
        source_alert_id: i64,
        at: DateTime<Utc>,
    },
    /// `analyzed_at` is set when this change stamps it (the first move to analyzed or resolved).
    StatusChanged {
        status: IncidentStatus,
        analyzed_at: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    },
    /// The incident became resolved: a postmortem is due.
    ResolutionRequested {
        at: DateTime<Utc>,
    },
    /// `analyzed_at` is set when the analysis completing stamps it (the incident had none).
    AnalysisStatusChanged {
        status: AnalysisStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        analyzed_at: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    },
    SummaryWritten {
        summary: String,
        at: DateTime<Utc>,
    },
    ActiveTabChanged {
        tab: ActiveTab,
        at: DateTime<Utc>,
    },
    /// A PATCH that changed nothing still moves `updated_at` (spec).
    IncidentTouched {
        at: DateTime<Utc>,
    },
    /// The analysis's verdict (CONFIRMED, LIKELY or INCONCLUSIVE), the component at fault, the
    /// evidence and what it ruled out.
    VerdictRecorded {
        conclusion: Conclusion,
        at: DateTime<Utc>,
    },
    /// The alert that just joined relates as strongly to these other open incidents: they are
    /// one failure seen from several sides (the correlator merges them into the oldest).
    AlertBridged {
        source_alert_id: i64,
        incident_ids: Vec<Uuid>,
        at: DateTime<Utc>,
    },
    MergedInto {
        target_incident_id: Uuid,
        at: DateTime<Utc>,
    },
    IncidentAbsorbed {
        source_incident_id: Uuid,
        alerts: Vec<AlertInfo>,
        at: DateTime<Utc>,
    },
    ChatSessionLinked {
        session_id: Uuid,
        at: DateTime<Utc>,
    },
    /// A user moved one of the incident's correlated alerts out, into `new_incident_id`.
    AlertSplitOff {
        source_type: String,
        source_alert_id: i64,
        service: Option<String>,
        new_incident_id: Uuid,
        /// The services of the alerts that stayed.
        #[serde(default)]
        remaining_services: Vec<String>,
        at: DateTime<Utc>,
    },
    /// One of its alert keys fired and recovered `recoveries` times within `window_seconds`.
    FlappingDetected {
        source_type: String,
        alert_key: String,
        recoveries: u32,
        window_seconds: i64,
        at: DateTime<Utc>,
    },
    /// A later firing (or recovery, `resolved`) of a flapping key.
    FlapRecorded {
        source_type: String,
        alert_key: String,
        source_alert_id: i64,
        resolved: bool,
        fired_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
}

impl IncidentEvent {
    pub fn at(&self) -> DateTime<Utc> {
        use IncidentEvent as E;
        match self {
            E::IncidentOpened { at, .. }
            | E::AlertCorrelated { at, .. }
            | E::AlertResolved { at, .. }
            | E::StatusChanged { at, .. }
            | E::ResolutionRequested { at }
            | E::AnalysisStatusChanged { at, .. }
            | E::SummaryWritten { at, .. }
            | E::ActiveTabChanged { at, .. }
            | E::IncidentTouched { at }
            | E::AlertBridged { at, .. }
            | E::VerdictRecorded { at, .. }
            | E::MergedInto { at, .. }
            | E::IncidentAbsorbed { at, .. }
            | E::ChatSessionLinked { at, .. }
            | E::AlertSplitOff { at, .. }
            | E::FlappingDetected { at, .. }
            | E::FlapRecorded { at, .. } => *at,
        }
    }
}

impl DomainEvent for IncidentEvent {
    fn event_type(&self) -> String {
        use IncidentEvent as E;
        match self {
            E::IncidentOpened { .. } => "IncidentOpened",
            E::AlertCorrelated { .. } => "AlertCorrelated",
            E::AlertResolved { .. } => "AlertResolved",
            E::StatusChanged { .. } => "StatusChanged",
            E::ResolutionRequested { .. } => "ResolutionRequested",
            E::AnalysisStatusChanged { .. } => "AnalysisStatusChanged",
            E::SummaryWritten { .. } => "SummaryWritten",
            E::ActiveTabChanged { .. } => "ActiveTabChanged",
            E::IncidentTouched { .. } => "IncidentTouched",
            E::AlertBridged { .. } => "AlertBridged",
            E::VerdictRecorded { .. } => "VerdictRecorded",
            E::MergedInto { .. } => "MergedInto",
            E::IncidentAbsorbed { .. } => "IncidentAbsorbed",
            E::ChatSessionLinked { .. } => "ChatSessionLinked",
            E::AlertSplitOff { .. } => "AlertSplitOff",
            E::FlappingDetected { .. } => "FlappingDetected",
            E::FlapRecorded { .. } => "FlapRecorded",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}
