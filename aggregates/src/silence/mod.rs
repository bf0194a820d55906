//! Silences and maintenance windows (Alertmanager's silences, PagerDuty's maintenance windows):
//! which alerts a silence matches, when it applies, and the `Silence` aggregate (one stream per
//! silence, named by its id). A silence never changes once created; it is only expired.

mod matcher;
mod schedule;
#[cfg(test)]
mod tests;

pub use matcher::{compile_matchers, field_text, invalid, AlertFacts, CompiledMatcher, InvalidField, MatchOp, Matcher};
pub use schedule::{Schedule, ScheduleState};

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use schedule::{CompiledSchedule, DaySet};

/// Matchers one silence declares at most.
pub const MAX_MATCHERS: usize = 32;
/// Longest matcher value (characters); it bounds a regex's source too.
pub const MAX_VALUE_CHARS: usize = 1024;
/// Longest matcher name (characters).
pub const MAX_NAME_CHARS: usize = 128;
pub const MAX_COMMENT_CHARS: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SilenceDefinition {
    pub matchers: Vec<Matcher>,
    pub schedule: Schedule,
    pub comment: String,
}

impl SilenceDefinition {
    /// Checks everything: 1..=[`MAX_MATCHERS`] matchers; names non-blank and at most
    /// [`MAX_NAME_CHARS`]; values at most [`MAX_VALUE_CHARS`]; regexes compile; at least one
    /// matcher that does not match the empty string (Alertmanager's rule, so that a silence
    /// cannot silence everything by accident); a window ending after it starts; a weekly
    /// schedule with a known time zone, distinct days, `start != end`; a comment of at most
    /// [`MAX_COMMENT_CHARS`].
    pub fn validate(&self) -> Result<(), InvalidField> {
        self.checked().map(|_| ())
    }

    /// Validates, then keeps what validation compiled.
    pub fn compile(&self, id: Uuid) -> Result<CompiledSilence, InvalidField> {
        let (matchers, schedule) = self.checked()?;
        Ok(CompiledSilence { id, matchers, schedule })
    }

    fn checked(&self) -> Result<(Vec<CompiledMatcher>, CompiledSchedule), InvalidField> {
        let matchers = compile_matchers(&self.matchers, true)?;
        let schedule = self.checked_schedule()?;
        if self.comment.chars().count() > MAX_COMMENT_CHARS {
            return Err(invalid("comment", format!("at most {MAX_COMMENT_CHARS} characters")));
        }
        Ok((matchers, schedule))
    }

    fn checked_schedule(&self) -> Result<CompiledSchedule, InvalidField> {
        match &self.schedule {
            Schedule::Window { starts_at, ends_at } => {
                if ends_at <= starts_at {
                    return Err(invalid("endsAt", "must be after startsAt"));
                }
            }
            Schedule::Weekly {
                starts_at,
                ends_at,
                days,
                start,
                end,
                ..
            } => {
                if days.is_empty() {
                    return Err(invalid("weekly.days", "at least one day is required"));
                }
                let mut seen = DaySet::default();
                for day in days {
                    if seen.contains(*day) {
                        return Err(invalid("weekly.days", format!("{day} is listed twice")));
                    }
                    seen = seen.with(*day);
                }
                if start == end {
                    return Err(invalid("weekly.end", "must differ from weekly.start"));
                }
                if ends_at.is_some_and(|ends_at| ends_at <= *starts_at) {
                    return Err(invalid("endsAt", "must be after startsAt"));
                }
            }
        }
        CompiledSchedule::new(&self.schedule).map_err(|_| {
            let zone = match &self.schedule {
                Schedule::Weekly { time_zone, .. } => time_zone.chars().take(64).collect(),
                Schedule::Window { .. } => String::new(),
            };
            invalid(
                "weekly.timeZone",
                format!("`{zone}` is not a known IANA time zone (e.g. Europe/Berlin)"),
            )
        })
    }
}

/// A silence ready to test alerts (kept in memory by ingestion; silences never change once
/// created, they are only expired).
#[derive(Debug)]
pub struct CompiledSilence {
    pub id: Uuid,
    matchers: Vec<CompiledMatcher>,
    schedule: CompiledSchedule,
}

impl CompiledSilence {
    /// Every matcher matches (AND).
    pub fn matches(&self, alert: &AlertFacts<'_>) -> bool {
        self.matchers.iter().all(|matcher| matcher.matches(alert))
    }

    pub fn is_active(&self, at: DateTime<Utc>) -> bool {
        self.state(at) == ScheduleState::Active
    }

    /// Its schedule's state at `at` (an expiry by command is the aggregate's to know).
    pub fn state(&self, at: DateTime<Utc>) -> ScheduleState {
        self.schedule.state(at)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum SilenceCommand {
    Create {
        silence_id: Uuid,
        user_id: String,
        definition: SilenceDefinition,
        created_by: String,
        at: DateTime<Utc>,
    },
    /// DELETE: ends it now; kept in history.
    Expire {
        user_id: String,
        expired_by: String,
        at: DateTime<Utc>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SilenceEvent {
    SilenceCreated {
        silence_id: Uuid,
        user_id: String,
        definition: SilenceDefinition,
        created_by: String,
        at: DateTime<Utc>,
    },
    SilenceExpired {
        expired_by: String,
        at: DateTime<Utc>,
    },
}

impl DomainEvent for SilenceEvent {
    fn event_type(&self) -> String {
        match self {
            Self::SilenceCreated { .. } => "SilenceCreated".to_owned(),
            Self::SilenceExpired { .. } => "SilenceExpired".to_owned(),
        }
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SilenceError {
    /// Never created, or another user's.
    #[error("silence not found")]
    NotFound,
    #[error("silence already exists")]
    AlreadyExists,
    #[error(transparent)]
    Invalid(#[from] InvalidField),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Silence {
    user_id: Option<String>,
    definition: Option<SilenceDefinition>,
    expired: bool,
}

impl Silence {
    pub fn decide(&self, command: SilenceCommand) -> Result<Vec<SilenceEvent>, SilenceError> {
        match command {
            SilenceCommand::Create {
                silence_id,
                user_id,
                definition,
                created_by,
                at,
            } => {
                if self.user_id.is_some() {
                    return Err(SilenceError::AlreadyExists);
                }
                definition.validate()?;
                Ok(vec![SilenceEvent::SilenceCreated {
                    silence_id,
                    user_id,
                    definition,
                    created_by,
                    at,
                }])
            }
            SilenceCommand::Expire {
                user_id,
                expired_by,
                at,
            } => {
                let Some(definition) = self.owned_by(&user_id) else {
                    return Err(SilenceError::NotFound);
                };
                // DELETE is idempotent, and a schedule already over has nothing left to end.
                if self.expired || definition.schedule.state(at) == ScheduleState::Expired {
                    return Ok(Vec::new());
                }
                Ok(vec![SilenceEvent::SilenceExpired { expired_by, at }])
            }
        }
    }

    /// The definition, when the silence exists and is `user_id`'s.
    fn owned_by(&self, user_id: &str) -> Option<&SilenceDefinition> {
        self.definition
            .as_ref()
            .filter(|_| self.user_id.as_deref() == Some(user_id))
    }
}

impl Aggregate for Silence {
    const TYPE: &'static str = "Silence";
    type Command = SilenceCommand;
    type Event = SilenceEvent;
    type Error = SilenceError;
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
            SilenceEvent::SilenceCreated {
                user_id, definition, ..
            } => {
                self.user_id = Some(user_id);
                self.definition = Some(definition);
            }
            SilenceEvent::SilenceExpired { .. } => self.expired = true,
        }
    }
}
