//! What became of a received alert that no incident's events record: one stream per delivery,
//! named by its id (`source_alerts.id`), so that recording a fate never races another writer.
//! An alert that opens, joins or resolves an incident is recorded by that incident's events.

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

#[derive(Clone, Debug, PartialEq)]
pub enum ReceivedAlertCommand {
    /// Silences in force matched the firing alert: it opens and joins nothing.
    Silence {
        user_id: String,
        alert: AlertSummary,
        silence_ids: Vec<Uuid>,
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
}

impl DomainEvent for ReceivedAlertEvent {
    fn event_type(&self) -> String {
        match self {
            Self::AlertSilenced { .. } => "AlertSilenced".to_owned(),
        }
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
        match command {
            ReceivedAlertCommand::Silence {
                user_id,
                alert,
                silence_ids,
                at,
            } => {
                if silence_ids.is_empty() {
                    return Err(ReceivedAlertError::NoSilence);
                }
                if self.fate_recorded {
                    return Ok(Vec::new());
                }
                Ok(vec![ReceivedAlertEvent::AlertSilenced {
                    user_id,
                    alert,
                    silence_ids,
                    at,
                }])
            }
        }
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

    fn apply(&mut self, event: Self::Event) {
        match event {
            ReceivedAlertEvent::AlertSilenced { .. } => self.fate_recorded = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silence(ids: Vec<Uuid>) -> ReceivedAlertCommand {
        ReceivedAlertCommand::Silence {
            user_id: "u".into(),
            alert: AlertSummary {
                source_type: "source_a".into(),
                source_alert_id: 7,
                title: "disk full".into(),
                service: None,
                severity: None,
                fired_at: DateTime::UNIX_EPOCH,
            },
            silence_ids: ids,
            at: DateTime::UNIX_EPOCH,
        }
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
    fn silencing_names_its_silences() {
        assert_eq!(
            ReceivedAlert::default().decide(silence(Vec::new())),
            Err(ReceivedAlertError::NoSilence)
        );
    }
}
