//! A conversation between a user and the agent (spec Chat session).

mod message;
mod title;

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

pub use message::{Message, Sender, ToolCall};
pub use title::{generate_title, DEFAULT_TITLE, GENERATED_TITLE_CHARS};

pub const MAX_TITLE_CHARS: usize = 255;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    #[default]
    Active,
    InProgress,
    Completed,
    Cancelled,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Completed and cancelled sessions take no further edits (spec: PUT is refused with 403).
    pub fn is_closed(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ChatSessionCommand {
    Create {
        session_id: Uuid,
        user_id: String,
        title: Option<String>,
        messages: Vec<Message>,
        ui_state: Map<String, Value>,
        incident_id: Option<Uuid>,
        at: DateTime<Utc>,
    },
    /// The PUT of the spec: every provided field changes, `updated_at` moves even if none is given.
    /// Renaming, replacing the messages and changing the UI state are this command with one field.
    Update {
        user_id: String,
        title: Option<String>,
        messages: Option<Vec<Message>>,
        ui_state: Option<Map<String, Value>>,
        at: DateTime<Utc>,
    },
    AppendMessage {
        user_id: String,
        message: Message,
        at: DateTime<Utc>,
    },
    MarkInProgress {
        user_id: String,
        at: DateTime<Utc>,
    },
    /// Back to `active` after background work ends, or to continue a completed conversation.
    Reactivate {
        user_id: String,
        at: DateTime<Utc>,
    },
    Complete {
        user_id: String,
        at: DateTime<Utc>,
    },
    Cancel {
        user_id: String,
        at: DateTime<Utc>,
    },
    Delete {
        user_id: String,
        at: DateTime<Utc>,
    },
    /// A chat turn starts, as one decision: the session is reopened if it was closed, takes the
    /// client's UI state (as `Update` would), appends the user's message and is in progress.
    BeginTurn {
        user_id: String,
        message: Message,
        ui_state: Option<Map<String, Value>>,
        at: DateTime<Utc>,
    },
    /// A chat turn ends: the assistant's message, when anything was written, is appended and the
    /// session takes the turn's outcome.
    FinishTurn {
        user_id: String,
        message: Option<Message>,
        outcome: TurnOutcome,
        at: DateTime<Utc>,
    },
}

/// How a chat turn ended, and so the session's status after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnOutcome {
    /// `completed` (spec); a new message reopens the session.
    Completed,
    /// `cancelled` by the user.
    Cancelled,
    /// Back to `active`: the turn failed, the conversation can go on.
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChatSessionEvent {
    ChatSessionCreated {
        session_id: Uuid,
        user_id: String,
        title: String,
        messages: Vec<Message>,
        ui_state: Map<String, Value>,
        incident_id: Option<Uuid>,
        at: DateTime<Utc>,
    },
    TitleChanged {
        title: String,
        at: DateTime<Utc>,
    },
    /// The whole conversation replaced. No longer decided (a PUT records [`Self::MessagesRevised`]);
    /// kept so that sessions recorded with it still load and replay.
    MessagesReplaced {
        messages: Vec<Message>,
        at: DateTime<Utc>,
    },
    /// The messages from position `from` on are replaced by `messages`: a PUT records only what
    /// differs from the conversation it found. A client re-sends the whole conversation after
    /// every message, so recording it whole made a session's history grow with the square of
    /// its length, and every later command replay all of it.
    MessagesRevised {
        from: usize,
        messages: Vec<Message>,
        at: DateTime<Utc>,
    },
    MessageAppended {
        message: Message,
        at: DateTime<Utc>,
    },
    UiStateChanged {
        ui_state: Map<String, Value>,
        at: DateTime<Utc>,
    },
    /// An update that changed no field still marks the session as touched (spec: updated_at moves).
    ChatSessionTouched {
        at: DateTime<Utc>,
    },
    StatusChanged {
        status: SessionStatus,
        at: DateTime<Utc>,
    },
    ChatSessionDeleted {
        at: DateTime<Utc>,
    },
}

impl ChatSessionEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::ChatSessionCreated { at, .. }
            | Self::TitleChanged { at, .. }
            | Self::MessagesReplaced { at, .. }
            | Self::MessagesRevised { at, .. }
            | Self::MessageAppended { at, .. }
            | Self::UiStateChanged { at, .. }
            | Self::ChatSessionTouched { at }
            | Self::StatusChanged { at, .. }
            | Self::ChatSessionDeleted { at } => *at,
        }
    }
}

impl DomainEvent for ChatSessionEvent {
    fn event_type(&self) -> String {
        match self {
            Self::ChatSessionCreated { .. } => "ChatSessionCreated",
            Self::TitleChanged { .. } => "TitleChanged",
            Self::MessagesReplaced { .. } => "MessagesReplaced",
            Self::MessagesRevised { .. } => "MessagesRevised",
            Self::MessageAppended { .. } => "MessageAppended",
            Self::UiStateChanged { .. } => "UiStateChanged",
            Self::ChatSessionTouched { .. } => "ChatSessionTouched",
            Self::StatusChanged { .. } => "StatusChanged",
            Self::ChatSessionDeleted { .. } => "ChatSessionDeleted",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatSessionError {
    /// Unknown, deleted, or another user's session: indistinguishable to the caller.
    #[error("chat session not found")]
    NotFound,
    #[error("chat session already exists")]
    AlreadyExists,
    #[error("chat session is {} and cannot be updated", .0.as_str())]
    Closed(SessionStatus),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChatSession {
    created: bool,
    deleted: bool,
    user_id: String,
    title: String,
    messages: Vec<Message>,
    status: SessionStatus,
}

impl ChatSession {
    /// The session as its owner may act on it: existing, not deleted, theirs.
    fn owned_by(&self, user_id: &str) -> Result<&Self, ChatSessionError> {
        if !self.created || self.deleted || self.user_id != user_id {
            return Err(ChatSessionError::NotFound);
        }
        Ok(self)
    }

    fn set_status(&self, status: SessionStatus, at: DateTime<Utc>) -> Vec<ChatSessionEvent> {
        if self.status == status {
            return vec![];
        }
        vec![ChatSessionEvent::StatusChanged { status, at }]
    }

    fn decide(&self, command: ChatSessionCommand) -> Result<Vec<ChatSessionEvent>, ChatSessionError> {
        use ChatSessionCommand as C;
        use ChatSessionEvent as E;
        match command {
            C::Create {
                session_id,
                user_id,
                title,
                messages,
                ui_state,
                incident_id,
                at,
            } => {
                if self.created {
                    return Err(ChatSessionError::AlreadyExists);
                }
                if user_id.trim().is_empty() {
                    return Err(ChatSessionError::Invalid("a session needs an owner".into()));
                }
                let title = match provided(title) {
                    Some(title) => checked_title(title)?,
                    None => generate_title(&messages),
                };
                Ok(vec![E::ChatSessionCreated {
                    session_id,
                    user_id,
                    title,
                    messages,
                    ui_state,
                    incident_id,
                    at,
                }])
            }
            C::Update {
                user_id,
                title,
                messages,
                ui_state,
                at,
            } => {
                let session = self.owned_by(&user_id)?;
                if session.status.is_closed() {
                    return Err(ChatSessionError::Closed(session.status));
                }
                let new_title = match provided(title) {
                    Some(title) => Some(checked_title(title)?),
                    None if session.title == DEFAULT_TITLE => {
                        Some(generate_title(messages.as_deref().unwrap_or(&session.messages)))
                    }
                    None => None,
                };
                let mut events = Vec::new();
                if let Some(title) = new_title.filter(|title| *title != session.title) {
                    events.push(E::TitleChanged { title, at });
                }
                if let Some(mut messages) = messages {
                    let from = session
                        .messages
                        .iter()
                        .zip(&messages)
                        .take_while(|(kept, sent)| kept == sent)
                        .count();
                    if from < session.messages.len().max(messages.len()) {
                        messages.drain(..from);
                        events.push(E::MessagesRevised { from, messages, at });
                    }
                }
                if let Some(ui_state) = ui_state {
                    events.push(E::UiStateChanged { ui_state, at });
                }
                if events.is_empty() {
                    events.push(E::ChatSessionTouched { at });
                }
                Ok(events)
            }
            C::AppendMessage { user_id, message, at } => {
                self.owned_by(&user_id)?;
                Ok(vec![E::MessageAppended { message, at }])
            }
            C::MarkInProgress { user_id, at } => {
                let session = self.owned_by(&user_id)?;
                if session.status.is_closed() {
                    return Err(ChatSessionError::Closed(session.status));
                }
                Ok(session.set_status(SessionStatus::InProgress, at))
            }
            C::Reactivate { user_id, at } => Ok(self.owned_by(&user_id)?.set_status(SessionStatus::Active, at)),
            C::Complete { user_id, at } => {
                let session = self.owned_by(&user_id)?;
                if session.status == SessionStatus::Cancelled {
                    return Err(ChatSessionError::Closed(session.status));
                }
                Ok(session.set_status(SessionStatus::Completed, at))
            }
            C::Cancel { user_id, at } => Ok(self.owned_by(&user_id)?.set_status(SessionStatus::Cancelled, at)),
            C::Delete { user_id, at } => {
                self.owned_by(&user_id)?;
                Ok(vec![E::ChatSessionDeleted { at }])
            }
            C::BeginTurn {
                user_id,
                message,
                ui_state,
                at,
            } => {
                let session = self.owned_by(&user_id)?;
                let mut events = Vec::new();
                // A session still called `New Chat` (created empty, say, then asked over the
                // WebSocket) is named after its first user message, this one if it is the first.
                if session.title == DEFAULT_TITLE {
                    let mut title = generate_title(&session.messages);
                    if title == DEFAULT_TITLE {
                        title = generate_title(std::slice::from_ref(&message));
                    }
                    if title != session.title {
                        events.push(E::TitleChanged { title, at });
                    }
                }
                if let Some(ui_state) = ui_state {
                    events.push(E::UiStateChanged { ui_state, at });
                }
                events.push(E::MessageAppended { message, at });
                events.extend(session.set_status(SessionStatus::InProgress, at));
                Ok(events)
            }
            C::FinishTurn {
                user_id,
                message,
                outcome,
                at,
            } => {
                let session = self.owned_by(&user_id)?;
                let mut events: Vec<_> = message
                    .map(|message| E::MessageAppended { message, at })
                    .into_iter()
                    .collect();
                let status = match outcome {
                    TurnOutcome::Completed => SessionStatus::Completed,
                    TurnOutcome::Cancelled => SessionStatus::Cancelled,
                    TurnOutcome::Failed => SessionStatus::Active,
                };
                // A cancel that raced the turn's end wins; the written message is kept all the same.
                if session.status != SessionStatus::Cancelled || status == SessionStatus::Cancelled {
                    events.extend(session.set_status(status, at));
                }
                Ok(events)
            }
        }
    }
}

/// A title the caller actually gave: absent and blank are the same.
fn provided(title: Option<String>) -> Option<String> {
    title
        .map(|title| title.trim().to_owned())
        .filter(|title| !title.is_empty())
}

fn checked_title(title: String) -> Result<String, ChatSessionError> {
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(ChatSessionError::Invalid(format!(
            "title must be at most {MAX_TITLE_CHARS} characters"
        )));
    }
    Ok(title)
}

impl Aggregate for ChatSession {
    const TYPE: &'static str = "ChatSession";
    type Command = ChatSessionCommand;
    type Event = ChatSessionEvent;
    type Error = ChatSessionError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _services: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        use ChatSessionEvent as E;
        match event {
            E::ChatSessionCreated {
                user_id,
                title,
                messages,
                ..
            } => {
                self.created = true;
                self.user_id = user_id;
                self.title = title;
                self.messages = messages;
            }
            E::TitleChanged { title, .. } => self.title = title,
            E::MessagesReplaced { messages, .. } => self.messages = messages,
            E::MessagesRevised { from, messages, .. } => {
                self.messages.truncate(from);
                self.messages.extend(messages);
            }
            E::MessageAppended { message, .. } => self.messages.push(message),
            E::UiStateChanged { .. } | E::ChatSessionTouched { .. } => {}
            E::StatusChanged { status, .. } => self.status = status,
            E::ChatSessionDeleted { .. } => self.deleted = true,
        }
    }
}
