//! An incident: alerts that belong together, their analysis status, and where people are with it
//! (spec Incident, States → Incident status and Analysis status).

mod commands;
mod events;
mod types;

#[cfg(test)]
mod flapping_tests;
#[cfg(test)]
mod previous_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use commands::IncidentCommand;
pub use events::IncidentEvent;
pub use types::*;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncidentError {
    /// Unknown, or another user's: indistinguishable to the caller.
    #[error("incident not found")]
    NotFound,
    #[error("incident already exists")]
    AlreadyExists,
    #[error("incident is already merged")]
    AlreadyMerged,
    /// The incident no longer takes alerts (not investigating, or full); open a new one instead.
    #[error("incident does not take more alerts: {0}")]
    NotCorrelatable(&'static str),
    #[error("{0}")]
    Invalid(String),
    /// The alert a split names is not one of the incident's.
    #[error("alert not found in this incident")]
    AlertNotFound,
    /// The split cannot be made in the incident's present state.
    #[error("{0}")]
    CannotSplit(&'static str),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Incident {
    id: Option<Uuid>,
    user_id: String,
    status: IncidentStatus,
    analysis_status: AnalysisStatus,
    summary: Option<String>,
    /// Whether the summary was written while the analysis ran (by a PATCH): the analysis's own
    /// summary then does not replace it.
    summary_written_while_running: bool,
    active_tab: ActiveTab,
    analyzed_at: Option<DateTime<Utc>>,
    /// The incident it was merged into, kept when a PATCH moves the status on (as the read
    /// row keeps it).
    merged_into: Option<Uuid>,
    /// The opening alert first, then every correlated or absorbed one: their identities only,
    /// which is all a decision needs (placement keeps thousands of incidents in memory). The
    /// alerts themselves are in the events ([`alerts_in`]).
    alerts: Vec<HeldAlert>,
    /// The alert keys found flapping in it, `(source, key)`.
    #[serde(default)]
    flapping: Vec<(String, String)>,
}

/// Which alert an incident holds: its source and its row in the ingestion store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct HeldAlert {
    source_type: String,
    source_alert_id: i64,
}

impl From<&AlertInfo> for HeldAlert {
    fn from(alert: &AlertInfo) -> Self {
        Self {
            source_type: alert.source_type.clone(),
            source_alert_id: alert.source_alert_id,
        }
    }
}

/// Every alert an incident's history holds, in order: the opening alert, then each correlated or
/// absorbed one (what a merge hands on to its target).
pub fn alerts_in(events: impl IntoIterator<Item = IncidentEvent>) -> Vec<AlertInfo> {
    let mut alerts = Vec::new();
    for event in events {
        match event {
            IncidentEvent::IncidentOpened { alert, .. } => alerts = vec![alert],
            IncidentEvent::AlertCorrelated { alert, .. } => alerts.push(alert),
            IncidentEvent::IncidentAbsorbed { alerts: absorbed, .. } => alerts.extend(absorbed),
            IncidentEvent::AlertSplitOff {
                source_type,
                source_alert_id,
                ..
            } => alerts.retain(|alert| !(alert.source_type == source_type && alert.source_alert_id == source_alert_id)),
            _ => {}
        }
    }
    alerts
}

impl Incident {
    fn owned_by(&self, user_id: &str) -> Result<&Self, IncidentError> {
        if self.id.is_none() || self.user_id != user_id {
            return Err(IncidentError::NotFound);
        }
        Ok(self)
    }

    fn holds(&self, alert: &AlertInfo) -> bool {
        self.alerts
            .iter()
            .any(|held| held.source_type == alert.source_type && held.source_alert_id == alert.source_alert_id)
    }

    fn status_change(&self, status: IncidentStatus, at: DateTime<Utc>) -> Vec<IncidentEvent> {
        use IncidentEvent as E;
        let stamps_analysis = matches!(status, IncidentStatus::Analyzed | IncidentStatus::Resolved);
        let analyzed_at = (stamps_analysis && self.analyzed_at.is_none()).then_some(at);
        match (self.status, status) {
            // Resolving again starts no second postmortem; the PATCH still touches the incident.
            (IncidentStatus::Resolved, IncidentStatus::Resolved) => vec![E::IncidentTouched { at }],
            (_, IncidentStatus::Resolved) => {
                vec![
                    E::StatusChanged {
                        status,
                        analyzed_at,
                        at,
                    },
                    E::ResolutionRequested { at },
                ]
            }
            (current, wanted) if current == wanted && analyzed_at.is_none() => vec![],
            _ => vec![E::StatusChanged {
                status,
                analyzed_at,
                at,
            }],
        }
    }

    /// The events a command yields, without applying them: the rules `handle` runs, for callers that
    /// write several aggregates in one transaction (batched alert placement).
    pub fn decide(&self, command: IncidentCommand) -> Result<Vec<IncidentEvent>, IncidentError> {
        use IncidentCommand as C;
        use IncidentEvent as E;
        match command {
            C::Open {
                incident_id,
                user_id,
                alert,
                previous_incident_id,
                at,
            } => {
                if self.id.is_some() {
                    return Err(IncidentError::AlreadyExists);
                }
                if previous_incident_id == Some(incident_id) {
                    return Err(IncidentError::Invalid("an incident cannot follow itself".into()));
                }
                Ok(vec![E::IncidentOpened {
                    incident_id,
                    user_id,
                    alert,
                    at,
                    split_from: None,
                    previous_incident_id,
                }])
            }
            C::OpenSplit {
                incident_id,
                user_id,
                alert,
                source_incident_id,
                at,
            } => {
                if self.id.is_some() {
                    return Err(IncidentError::AlreadyExists);
                }
                Ok(vec![E::IncidentOpened {
                    incident_id,
                    user_id,
                    alert,
                    at,
                    split_from: Some(source_incident_id),
                    previous_incident_id: None,
                }])
            }
            C::SplitOff {
                user_id,
                alert,
                new_incident_id,
                remaining_services,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if incident.is_merged_into_another() {
                    return Err(IncidentError::AlreadyMerged);
                }
                let held = HeldAlert::from(&alert);
                if incident.alerts.first() == Some(&held) {
                    // The incident's row (title, source alert, start) is its opening alert's.
                    return Err(IncidentError::CannotSplit(
                        "the alert that opened the incident stays with it; split the other alerts off instead",
                    ));
                }
                if !incident.holds(&alert) {
                    return Err(IncidentError::AlertNotFound);
                }
                Ok(vec![E::AlertSplitOff {
                    source_type: alert.source_type,
                    source_alert_id: alert.source_alert_id,
                    service: alert.service,
                    new_incident_id,
                    remaining_services,
                    at,
                }])
            }
            C::CorrelateAlert {
                user_id,
                alert,
                correlation,
                max_correlated_alerts,
                bridges,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if incident.holds(&alert) {
                    return Ok(vec![]);
                }
                if incident.status != IncidentStatus::Investigating {
                    return Err(IncidentError::NotCorrelatable("it is no longer investigating"));
                }
                // Its alerts went to the target; PATCHed back to investigating it is still merged.
                if incident.is_merged_into_another() {
                    return Err(IncidentError::NotCorrelatable("it is merged into another incident"));
                }
                if incident.alerts.len() > max_correlated_alerts {
                    return Err(IncidentError::NotCorrelatable(
                        "it holds the most correlated alerts allowed",
                    ));
                }
                if !(0.0..=1.0).contains(&correlation.score) {
                    return Err(IncidentError::Invalid(
                        "correlation score must be within 0.0 and 1.0".into(),
                    ));
                }
                let source_alert_id = alert.source_alert_id;
                let mut events = vec![E::AlertCorrelated {
                    alert,
                    correlation,
                    filled: incident.alerts.len() >= max_correlated_alerts,
                    at,
                }];
                if !bridges.is_empty() {
                    events.push(E::AlertBridged {
                        source_alert_id,
                        incident_ids: bridges,
                        at,
                    });
                }
                Ok(events)
            }
            C::ResolveAlert {
                user_id,
                source_type,
                alert_key,
                source_alert_id,
                at,
            } => {
                self.owned_by(&user_id)?;
                Ok(vec![E::AlertResolved {
                    source_type,
                    alert_key,
                    source_alert_id,
                    at,
                }])
            }
            C::Patch {
                user_id,
                status,
                analysis_status,
                summary,
                active_tab,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if status.is_none() && analysis_status.is_none() && summary.is_none() && active_tab.is_none() {
                    return Err(IncidentError::Invalid("no valid fields to update".into()));
                }
                if summary
                    .as_ref()
                    .is_some_and(|summary| summary.chars().count() > MAX_SUMMARY_CHARS)
                {
                    return Err(IncidentError::Invalid(format!(
                        "summary must be at most {MAX_SUMMARY_CHARS} characters"
                    )));
                }
                let mut events = status
                    .map(|status| incident.status_change(status, at))
                    .unwrap_or_default();
                if let Some(status) = analysis_status.filter(|status| *status != incident.analysis_status) {
                    // The caller may not set analyzed_at (spec), so a PATCHed analysis status stamps none.
                    events.push(E::AnalysisStatusChanged {
                        status,
                        analyzed_at: None,
                        at,
                    });
                }
                if let Some(summary) = summary.filter(|summary| Some(summary) != incident.summary.as_ref()) {
                    events.push(E::SummaryWritten { summary, at });
                }
                if let Some(tab) = active_tab.filter(|tab| *tab != incident.active_tab) {
                    events.push(E::ActiveTabChanged { tab, at });
                }
                if events.is_empty() {
                    events.push(E::IncidentTouched { at });
                }
                Ok(events)
            }
            C::FinishAnalysis {
                user_id,
                status,
                summary,
                conclusion,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                let mut events = Vec::new();
                if status != incident.analysis_status {
                    // The analysis completing is what analysing means: analyzed_at is "managed
                    // automatically" and "null until analysed" (spec).
                    let stamps = status == AnalysisStatus::Complete && incident.analyzed_at.is_none();
                    events.push(E::AnalysisStatusChanged {
                        status,
                        analyzed_at: stamps.then_some(at),
                        at,
                    });
                }
                let summary: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
                if !incident.summary_written_while_running && incident.summary.as_ref() != Some(&summary) {
                    events.push(E::SummaryWritten { summary, at });
                }
                if let Some(conclusion) = conclusion {
                    events.push(E::VerdictRecorded { conclusion, at });
                }
                if events.is_empty() {
                    events.push(E::IncidentTouched { at });
                }
                Ok(events)
            }
            C::MergeInto {
                user_id,
                target_incident_id,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if incident.id == Some(target_incident_id) {
                    return Err(IncidentError::Invalid(
                        "an incident cannot be merged into itself".into(),
                    ));
                }
                if incident.is_merged_into_another() {
                    return Err(IncidentError::AlreadyMerged);
                }
                Ok(vec![E::MergedInto { target_incident_id, at }])
            }
            C::Absorb {
                user_id,
                source_incident_id,
                alerts,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if incident.id == Some(source_incident_id) {
                    return Err(IncidentError::Invalid(
                        "an incident cannot be merged into itself".into(),
                    ));
                }
                if incident.is_merged_into_another() {
                    return Err(IncidentError::AlreadyMerged);
                }
                let alerts: Vec<AlertInfo> = alerts.into_iter().filter(|alert| !incident.holds(alert)).collect();
                Ok(vec![E::IncidentAbsorbed {
                    source_incident_id,
                    alerts,
                    at,
                }])
            }
            C::LinkChatSession {
                user_id,
                session_id,
                at,
            } => {
                self.owned_by(&user_id)?;
                Ok(vec![E::ChatSessionLinked { session_id, at }])
            }
            C::MarkFlapping {
                user_id,
                source_type,
                alert_key,
                recoveries,
                window_seconds,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if incident.is_flapping(&source_type, &alert_key) {
                    return Ok(Vec::new());
                }
                Ok(vec![E::FlappingDetected {
                    source_type,
                    alert_key,
                    recoveries,
                    window_seconds,
                    at,
                }])
            }
            C::RecordFlap {
                user_id,
                source_type,
                alert_key,
                source_alert_id,
                resolved,
                fired_at,
                at,
            } => {
                let incident = self.owned_by(&user_id)?;
                if !incident.is_flapping(&source_type, &alert_key) {
                    return Err(IncidentError::Invalid(format!(
                        "alert key {alert_key} is not flapping in this incident"
                    )));
                }
                Ok(vec![E::FlapRecorded {
                    source_type,
                    alert_key,
                    source_alert_id,
                    resolved,
                    fired_at,
                    at,
                }])
            }
        }
    }

    /// Merged into an incident. A status PATCHed away from `merged` afterwards does not undo the
    /// merge (the target still holds its alerts, and the spec's PATCH does nothing else): merged
    /// again, its alerts would be two incidents' at once. A status of `merged` set by PATCH names
    /// no target: such an incident may still be merged, as source or target.
    fn is_merged_into_another(&self) -> bool {
        self.merged_into.is_some()
    }

    fn is_flapping(&self, source_type: &str, alert_key: &str) -> bool {
        self.flapping
            .iter()
            .any(|(source, key)| source == source_type && key == alert_key)
    }

    /// The owner (empty before the incident is opened).
    pub fn user_id(&self) -> &str {
        &self.user_id
    }

    /// [`Aggregate::apply`] from a borrowed event: placement applies the events it decides and
    /// then writes them, and a clone of each (an alert and its labels) would be spent for nothing.
    pub fn apply_event(&mut self, event: &IncidentEvent) {
        use IncidentEvent as E;
        match event {
            E::IncidentOpened {
                incident_id,
                user_id,
                alert,
                ..
            } => {
                self.id = Some(*incident_id);
                self.user_id.clone_from(user_id);
                self.alerts = vec![alert.into()];
            }
            E::AlertCorrelated { alert, .. } => self.alerts.push(alert.into()),
            E::IncidentAbsorbed { alerts, .. } => self.alerts.extend(alerts.iter().map(HeldAlert::from)),
            E::AlertSplitOff {
                source_type,
                source_alert_id,
                ..
            } => self
                .alerts
                .retain(|held| !(held.source_type == *source_type && held.source_alert_id == *source_alert_id)),
            E::StatusChanged {
                status, analyzed_at, ..
            } => {
                self.status = *status;
                self.analyzed_at = self.analyzed_at.or(*analyzed_at);
            }
            E::MergedInto { target_incident_id, .. } => {
                self.status = IncidentStatus::Merged;
                self.merged_into = Some(*target_incident_id);
            }
            E::AnalysisStatusChanged {
                status, analyzed_at, ..
            } => {
                self.analyzed_at = self.analyzed_at.or(*analyzed_at);
                if *status == AnalysisStatus::Running {
                    self.summary_written_while_running = false;
                }
                self.analysis_status = *status;
            }
            E::SummaryWritten { summary, .. } => {
                self.summary_written_while_running |= self.analysis_status == AnalysisStatus::Running;
                self.summary = Some(summary.clone());
            }
            E::ActiveTabChanged { tab, .. } => self.active_tab = *tab,
            E::FlappingDetected {
                source_type, alert_key, ..
            } => self.flapping.push((source_type.clone(), alert_key.clone())),
            E::AlertResolved { .. }
            | E::FlapRecorded { .. }
            | E::ResolutionRequested { .. }
            | E::IncidentTouched { .. }
            | E::AlertBridged { .. }
            | E::VerdictRecorded { .. }
            | E::ChatSessionLinked { .. } => {}
        }
    }
}

impl Aggregate for Incident {
    const TYPE: &'static str = "Incident";
    type Command = IncidentCommand;
    type Event = IncidentEvent;
    type Error = IncidentError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        self.apply_event(&event);
    }
}
