//! What root cause analysis produced for one incident: thoughts, citations of the diagnostics it
//! ran, and suggestions. Its own stream (id = the incident's id), so the incident's stream stays
//! short however long an analysis runs.

mod risk;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use risk::{classify, Risk};

pub const MAX_CITATION_KEY_CHARS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThoughtKind {
    Analysis,
    Hypothesis,
    Evidence,
    Conclusion,
}

impl ThoughtKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Analysis => "analysis",
            Self::Hypothesis => "hypothesis",
            Self::Evidence => "evidence",
            Self::Conclusion => "conclusion",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuggestionKind {
    Diagnostic,
    Fix,
    Mitigation,
    Investigation,
}

impl SuggestionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Diagnostic => "diagnostic",
            Self::Fix => "fix",
            Self::Mitigation => "mitigation",
            Self::Investigation => "investigation",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Citation {
    /// Numeric keys (`1`, `2`, ...) are what thoughts and summaries cite as `[1]`.
    pub key: String,
    pub tool_name: Option<String>,
    pub command: Option<String>,
    pub output: String,
    pub executed_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    pub title: String,
    pub description: Option<String>,
    pub kind: SuggestionKind,
    pub risk: Risk,
    pub command: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AnalysisCommand {
    RecordThought {
        incident_id: Uuid,
        kind: ThoughtKind,
        content: String,
        at: DateTime<Utc>,
    },
    RecordCitation {
        incident_id: Uuid,
        citation: Citation,
        at: DateTime<Utc>,
    },
    ProposeSuggestion {
        incident_id: Uuid,
        suggestion: Suggestion,
        at: DateTime<Utc>,
    },
    /// Several findings of one analysis at once, in order: each decided as if issued alone after
    /// the ones before it, and all recorded or none (one append instead of one per finding).
    RecordAll(Vec<AnalysisCommand>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AnalysisEvent {
    ThoughtRecorded {
        incident_id: Uuid,
        kind: ThoughtKind,
        content: String,
        at: DateTime<Utc>,
    },
    CitationRecorded {
        incident_id: Uuid,
        citation: Citation,
        at: DateTime<Utc>,
    },
    SuggestionProposed {
        incident_id: Uuid,
        suggestion: Suggestion,
        at: DateTime<Utc>,
    },
}

impl AnalysisEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::ThoughtRecorded { at, .. }
            | Self::CitationRecorded { at, .. }
            | Self::SuggestionProposed { at, .. } => *at,
        }
    }
}

impl DomainEvent for AnalysisEvent {
    fn event_type(&self) -> String {
        match self {
            Self::ThoughtRecorded { .. } => "ThoughtRecorded",
            Self::CitationRecorded { .. } => "CitationRecorded",
            Self::SuggestionProposed { .. } => "SuggestionProposed",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    #[error("{0}")]
    Invalid(String),
    #[error("citation key `{0}` is already used")]
    DuplicateCitation(String),
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct IncidentAnalysis {
    citation_keys: Vec<String>,
    thoughts: usize,
    suggestions: usize,
}

impl IncidentAnalysis {
    fn decide(&self, command: AnalysisCommand) -> Result<AnalysisEvent, AnalysisError> {
        use AnalysisCommand as C;
        use AnalysisEvent as E;
        match command {
            C::RecordAll(_) => Err(AnalysisError::Invalid(
                "findings recorded together are single findings".into(),
            )),
            C::RecordThought {
                incident_id,
                kind,
                content,
                at,
            } => {
                let content = non_empty(content, "a thought")?;
                Ok(E::ThoughtRecorded {
                    incident_id,
                    kind,
                    content,
                    at,
                })
            }
            C::RecordCitation {
                incident_id,
                citation,
                at,
            } => {
                if citation.key.is_empty() || citation.key.chars().count() > MAX_CITATION_KEY_CHARS {
                    return Err(AnalysisError::Invalid(format!(
                        "a citation key has 1 to {MAX_CITATION_KEY_CHARS} characters"
                    )));
                }
                if self.citation_keys.contains(&citation.key) {
                    return Err(AnalysisError::DuplicateCitation(citation.key));
                }
                Ok(E::CitationRecorded {
                    incident_id,
                    citation,
                    at,
                })
            }
            C::ProposeSuggestion {
                incident_id,
                mut suggestion,
                at,
            } => {
                suggestion.title = non_empty(suggestion.title, "a suggestion's title")?;
                // A command is never safer than what it does: a mutating command proposed as safe is raised.
                if let Some(command) = &suggestion.command {
                    suggestion.risk = suggestion.risk.max(classify(command));
                }
                Ok(E::SuggestionProposed {
                    incident_id,
                    suggestion,
                    at,
                })
            }
        }
    }

    /// The next free numeric citation key.
    pub fn next_citation_key(&self) -> String {
        (1..)
            .map(|n: u32| n.to_string())
            .find(|key| !self.citation_keys.contains(key))
            .unwrap_or_default()
    }
}

fn non_empty(text: String, what: &str) -> Result<String, AnalysisError> {
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(AnalysisError::Invalid(format!("{what} must not be empty")));
    }
    Ok(text)
}

impl Aggregate for IncidentAnalysis {
    const TYPE: &'static str = "IncidentAnalysis";
    type Command = AnalysisCommand;
    type Event = AnalysisEvent;
    type Error = AnalysisError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        let events = match command {
            AnalysisCommand::RecordAll(commands) => {
                let mut after = self.clone();
                let mut events = Vec::with_capacity(commands.len());
                for command in commands {
                    let event = after.decide(command)?;
                    after.apply(event.clone());
                    events.push(event);
                }
                events
            }
            command => vec![self.decide(command)?],
        };
        for event in events {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        match event {
            AnalysisEvent::ThoughtRecorded { .. } => self.thoughts += 1,
            AnalysisEvent::CitationRecorded { citation, .. } => self.citation_keys.push(citation.key),
            AnalysisEvent::SuggestionProposed { .. } => self.suggestions += 1,
        }
    }
}
