//! What became of a received alert that no incident's events record: one stream per inbox entry,
//! named by its id (a delivery's `source_alerts.id`, or for a redelivery an id of its own from
//! the same sequence), so that recording a fate never races another writer. An alert that
//! opens, joins or resolves an incident is recorded by that incident's events.

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The alert as the inbox lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertSummary {
    pub source_type: String,
    pub source_alert_id: i64,
    pub title: String,
    pub service: Option<String>,
    pub severity: Option<String>,
    pub fired_at: DateTime<Utc>,
}

/// What became of it.
#[derive(Clone, Debug, PartialEq)]
pub enum AlertFate {
    /// Silences in force matched the firing alert: it opens and joins nothing.
    Silenced { silence_ids: Vec<Uuid> },
    /// A recovery of an alert no incident holds.
    Unmatched,
    /// A state change (acknowledged, notified again) of an alert `incident_id` holds.
    Updated { incident_id: Uuid },
    /// The same delivery as `of` again (same source, key, state and firing time): nothing changed.
    Redelivered { of: i64, incident_id: Option<Uuid> },
    /// A grouping rule holds it until enough alerts like it arrive (then it goes into the
    /// incident they open, whose events record it); past `until` it stops counting.
    Held { rule_id: Uuid, until: DateTime<Utc> },
}

#[derive(Clone, Debug, PartialEq)]
pub enum ReceivedAlertCommand {
    Record {
        user_id: String,
        alert: AlertSummary,
        fate: AlertFate,
        at: DateTime<Utc>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReceivedAlertEvent {
    AlertSilenced {
        user_id: String,
        alert: AlertSummary,
        silence_ids: Vec<Uuid>,
        at: DateTime<Utc>,
    },
    RecoveryUnmatched {
        user_id: String,
        alert: AlertSummary,
        at: DateTime<Utc>,
    },
    AlertUpdated {
        user_id: String,
        alert: AlertSummary,
        incident_id: Uuid,
        at: DateTime<Utc>,
    },
    AlertRedelivered {
        user_id: String,
        alert: AlertSummary,
        redelivery_of: i64,
        incident_id: Option<Uuid>,
        at: DateTime<Utc>,
    },
    AlertHeld {
        user_id: String,
        alert: AlertSummary,
        rule_id: Uuid,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    },
}

impl ReceivedAlertEvent {
    /// Whose alert, which one, and when its fate was decided: every event names them.
    pub fn recorded(&self) -> (&str, &AlertSummary, DateTime<Utc>) {
        match self {
            Self::AlertSilenced { user_id, alert, at, .. }
            | Self::RecoveryUnmatched { user_id, alert, at }
            | Self::AlertUpdated { user_id, alert, at, .. }
            | Self::AlertRedelivered { user_id, alert, at, .. }
            | Self::AlertHeld { user_id, alert, at, .. } => (user_id, alert, *at),
        }
    }
}

impl DomainEvent for ReceivedAlertEvent {
    fn event_type(&self) -> String {
        match self {
            Self::AlertSilenced { .. } => "AlertSilenced",
            Self::RecoveryUnmatched { .. } => "RecoveryUnmatched",
            Self::AlertUpdated { .. } => "AlertUpdated",
            Self::AlertRedelivered { .. } => "AlertRedelivered",
            Self::AlertHeld { .. } => "AlertHeld",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceivedAlertError {
    #[error("a silence needs at least one silence id")]
    NoSilence,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReceivedAlert {
    fate_recorded: bool,
}

impl ReceivedAlert {
    /// A delivery's fate is recorded once: the same command again changes nothing.
    pub fn decide(&self, command: ReceivedAlertCommand) -> Result<Vec<ReceivedAlertEvent>, ReceivedAlertError> {
        let ReceivedAlertCommand::Record {
            user_id,
            alert,
            fate,
            at,
        } = command;
        if self.fate_recorded {
            return Ok(Vec::new());
        }
        let event = match fate {
            AlertFate::Silenced { silence_ids } if silence_ids.is_empty() => return Err(ReceivedAlertError::NoSilence),
            AlertFate::Silenced { silence_ids } => ReceivedAlertEvent::AlertSilenced {
                user_id,
                alert,
                silence_ids,
                at,
            },
            AlertFate::Unmatched => ReceivedAlertEvent::RecoveryUnmatched { user_id, alert, at },
            AlertFate::Updated { incident_id } => ReceivedAlertEvent::AlertUpdated {
                user_id,
                alert,
                incident_id,
                at,
            },
            AlertFate::Redelivered { of, incident_id } => ReceivedAlertEvent::AlertRedelivered {
                user_id,
                alert,
                redelivery_of: of,
                incident_id,
                at,
            },
            AlertFate::Held { rule_id, until } => ReceivedAlertEvent::AlertHeld {
                user_id,
                alert,
                rule_id,
                until,
                at,
            },
        };
        Ok(vec![event])
    }
}

impl Aggregate for ReceivedAlert {
    const TYPE: &'static str = "ReceivedAlert";
    type Command = ReceivedAlertCommand;
    type Event = ReceivedAlertEvent;
    type Error = ReceivedAlertError;
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

    fn apply(&mut self, _: Self::Event) {
        self.fate_recorded = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(fate: AlertFate) -> ReceivedAlertCommand {
        ReceivedAlertCommand::Record {
            user_id: "u".into(),
            alert: AlertSummary {
                source_type: "source_a".into(),
                source_alert_id: 7,
                title: "disk full".into(),
                service: None,
                severity: None,
                fired_at: DateTime::UNIX_EPOCH,
            },
            fate,
            at: DateTime::UNIX_EPOCH,
        }
    }

    fn silence(ids: Vec<Uuid>) -> ReceivedAlertCommand {
        record(AlertFate::Silenced { silence_ids: ids })
    }

    #[test]
    fn a_silenced_alert_is_recorded_once() {
        let mut alert = ReceivedAlert::default();
        let events = alert.decide(silence(vec![Uuid::nil()])).unwrap();
        assert_eq!(events.len(), 1);
        for event in events {
            alert.apply(event);
        }
        assert!(alert.decide(silence(vec![Uuid::nil()])).unwrap().is_empty());
    }

    #[test]
    fn each_fate_is_its_own_event() {
        let types: Vec<String> = [
            AlertFate::Unmatched,
            AlertFate::Updated {
                incident_id: Uuid::nil(),
            },
            AlertFate::Redelivered {
                of: 3,
                incident_id: None,
            },
            AlertFate::Held {
                rule_id: Uuid::nil(),
                until: DateTime::UNIX_EPOCH,
            },
        ]
        .into_iter()
        .map(|fate| ReceivedAlert::default().decide(record(fate)).unwrap()[0].event_type())
        .collect();
        assert_eq!(
            types,
            ["RecoveryUnmatched", "AlertUpdated", "AlertRedelivered", "AlertHeld"]
        );
    }

    #[test]
    fn silencing_names_its_silences() {
        assert_eq!(
            ReceivedAlert::default().decide(silence(Vec::new())),
            Err(ReceivedAlertError::NoSilence)
        );
    }
}
