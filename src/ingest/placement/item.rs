//! One alert of a batch as placement decides it, with the commands it makes.

use chrono::{DateTime, Utc};
use vigil_aggregates::{
    correlation::{is_minor_severity, NewAlert},
    incident::IncidentCommand,
};

use super::{noise::AlertKey, notification::Prepared};
use crate::ingest::{parsers::NormalizedAlert, service::event_kind};

pub(super) struct Item<'a> {
    pub(super) notification: usize,
    pub(super) user_id: &'a str,
    pub(super) alert: &'a NormalizedAlert,
    pub(super) prepared: &'a Prepared,
}

/// What makes a delivery unique (the `source_alerts_delivery` constraint).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Delivery<'a> {
    pub(super) user_id: &'a str,
    pub(super) source_type: &'a str,
    pub(super) alert_key: &'a str,
    pub(super) alert_state: &'a str,
    pub(super) fired_at: DateTime<Utc>,
}

/// An occurrence of an alert: its key and when it fired. The same key firing again (after its
/// recovery, or with its recovery never sent) is a new alert, correlated or opening an incident
/// like any other; only an occurrence's state changes (acknowledged, notified again) stay with the
/// incident that holds it, as they are.
pub(super) type Occurrence<'a> = (&'a str, &'a str, &'a str, DateTime<Utc>);

impl<'a> Item<'a> {
    pub(super) fn occurrence(&self) -> Occurrence<'a> {
        (
            self.user_id,
            self.alert.source.as_str(),
            &self.alert.key,
            self.alert.fired_at,
        )
    }

    /// The recovery this item is, as the command that resolves its alert in an incident.
    pub(super) fn resolve_alert(&self, source_alert_id: i64) -> IncidentCommand {
        IncidentCommand::ResolveAlert {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            source_alert_id,
            at: Utc::now(),
        }
    }

    pub(super) fn key(&self) -> AlertKey<'a> {
        (self.user_id, self.alert.source.as_str(), &self.alert.key)
    }

    /// A later firing or recovery of this item's flapping key, as the command recording it.
    pub(super) fn record_flap(&self, source_alert_id: i64) -> IncidentCommand {
        IncidentCommand::RecordFlap {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            source_alert_id,
            resolved: self.alert.resolved,
            fired_at: self.alert.fired_at,
            at: Utc::now(),
        }
    }

    /// This recovery made its key flapping: the `recoveries`th within `window`.
    pub(super) fn mark_flapping(&self, recoveries: u32, window: chrono::Duration) -> IncidentCommand {
        IncidentCommand::MarkFlapping {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            recoveries,
            window_seconds: window.num_seconds(),
            at: Utc::now(),
        }
    }

    /// The alert as the correlator scores it.
    pub(super) fn new_alert(&self) -> NewAlert {
        let alert = self.alert;
        NewAlert {
            title: alert.title.clone(),
            service: alert.service.clone(),
            fired_at: alert.fired_at,
            kind: event_kind(alert.kind),
            embedding: self.prepared.title_embedding.clone(),
            evidence: self.prepared.evidence_keys.clone(),
            minor: is_minor_severity(alert.severity.as_deref()),
        }
    }

    pub(super) fn delivery(&self) -> Delivery<'a> {
        Delivery {
            user_id: self.user_id,
            source_type: self.alert.source.as_str(),
            alert_key: &self.alert.key,
            alert_state: &self.alert.state,
            fired_at: self.alert.fired_at,
        }
    }
}
