//! The agent: answers one chat query. It streams the model's reply in sentence-cut chunks, runs
//! the tools the model asks for (asking the user before anything that changes infrastructure),
//! feeds their results back for up to `AGENT_MAX_STEPS` rounds, and keeps the conversation in
//! the session through the ChatSession aggregate. Without a configured model, a built-in
//! assistant answers from the user's incidents.

pub mod attachments;
mod builtin;
pub mod cli;
pub mod credentials;
pub mod outbox;
mod tool_run;
pub mod tools;
pub mod turns;
pub mod user_message;

use std::sync::Arc;

use chrono::Utc;
use cqrs_es::AggregateError;
use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use vigil_aggregates::chat_session::{
    generate_title, ChatSessionCommand, ChatSessionError, Message, Sender, ToolCall as StoredToolCall, TurnOutcome,
};
use vigil_llm::{ChatMessage, ChatRequest, ContentPart, LlmError, SentenceChunker, StreamEvent};

pub use outbox::{HeldOutbox, Outbox};

use self::tools::Tool;
use crate::{
    event_store::{execute, Actor},
    language_model::Call,
    state::AppState,
    text::shortened,
    ws::protocol::{ChatQuery, Mode, ServerMessage, Severity, ToolCallStatus},
};

/// Earlier messages of the session the model is shown, newest last.
const CONTEXT_MESSAGES: usize = 20;
/// Most characters of a tool's result the model is shown.
const MAX_TOOL_RESULT_CHARS: usize = 8_000;

const SYSTEM_PROMPT: &str = "You are Vigil, a site-reliability agent. You help the user understand and fix \
    incidents in their infrastructure. Use the tools to look at their incidents, correlated alerts, recent \
    deployments and similar past incidents before you answer; say what the data shows and what it does not. \
    Be concise and concrete.";

/// Confirmations the agent is waiting for on one connection: id → (session, where the answer goes).
pub type Confirmations = Arc<DashMap<String, (Uuid, oneshot::Sender<bool>)>>;

/// How one answer ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    Complete,
    Cancelled,
    Failed,
}

/// The refusal of a query naming a session the user may not use: its text and code.
pub const SESSION_NOT_FOUND: (&str, &str) = (
    "chat session not found: this session_id is taken by a session you cannot use (another user's, or a \
     deleted one); ask with a new session_id",
    "SESSION_NOT_FOUND",
);

/// Answers `query` in the user's session `session_id` (created when the id is unused, refused when
/// the session is not theirs), about `incident_id` when given. Sends everything through `outbox`
/// and always ends with one `status END`.
pub async fn answer(
    state: AppState,
    query: ChatQuery,
    session_id: Uuid,
    incident_id: Option<Uuid>,
    outbox: Outbox,
    confirmations: Confirmations,
    cancel: CancellationToken,
) -> Ending {
    let sid = session_id.to_string();
    let user_id = query.user_id.clone();
    // Until the session is known to be the user's, only the asker hears about this query: the
    // session's followers (its owner's sockets) must not see a stranger's refusal.
    let refuse = |text: &str, code: Option<&str>| {
        outbox.unrelayed().refuse(&sid, text, code);
        Ending::Failed
    };
    // A server path names a file of this session's own directory: the data directory also holds
    // the secrets store's key and every other session's files.
    let session_dir = state.config.data_dir.join("sessions").join(&sid);
    let accepted = match attachments::accept(&query.attachments, &session_dir, state.config.attachment_max_bytes) {
        Ok(accepted) => accepted,
        Err(message) => return refuse(&message, Some("INVALID_ATTACHMENT")),
    };
    let earlier = match open_session(&state, &query, session_id, incident_id).await {
        Ok(Some(messages)) => messages,
        Ok(None) => return refuse(SESSION_NOT_FOUND.0, Some(SESSION_NOT_FOUND.1)),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), session = %sid, "chat session lookup failed");
            return refuse("the session could not be read; try again", None);
        }
    };
    let sessions = state.events.chat_sessions.clone();
    outbox.follow_session();
    let history = context(&earlier);
    let held = HeldOutbox::new(outbox.clone());
    let mut turn = Turn {
        state: &state,
        outbox: &held,
        confirmations: &confirmations,
        user_id: &user_id,
        session_id,
        sid: &sid,
        mode: query.mode,
        chunker: SentenceChunker::new(),
        text: String::new(),
        tool_calls: Vec::new(),
        running: None,
        recordings: Vec::new(),
    };
    // The question is saved while the model starts on its answer: under load the save takes
    // longer than the model's first words, and waiting for it delayed every answer by its length.
    // What the turn sends is held until the save commits; a failed save drops the turn unseen.
    let (saved, outcome) = {
        let work = async {
            tokio::select! {
                _ = cancel.cancelled() => None,
                outcome = turn.run(&query, incident_id, history, &accepted) => Some(outcome),
            }
        };
        tokio::pin!(work);
        let begin = begin_turn(&state, &query, session_id, &accepted);
        tokio::pin!(begin);
        tokio::select! {
            saved = &mut begin => match saved {
                Ok(()) => {
                    held.release();
                    (Ok(()), work.await)
                }
                Err(error) => (Err(error), None),
            },
            outcome = &mut work => (begin.await, outcome),
        }
    };
    if let Err(error) = saved {
        tracing::error!(%error, session = %sid, "chat turn could not start");
        outbox.send(ServerMessage::session_error(
            &sid,
            "the message could not be saved; try again",
            Severity::Error,
            None,
        ));
        outbox.send(ServerMessage::status_end(&sid, false));
        return Ending::Failed;
    }
    held.release();
    // A tool call cut off by the cancel (running, or waiting for its confirmation) ends as an
    // error, so that no client waits for it to leave `running`.
    if let Some((call_id, name, input)) = turn.running.take() {
        let output = "not finished: the user cancelled";
        outbox.send(ServerMessage::tool_call(
            &sid,
            &ToolCallStatus {
                tool_call_id: &call_id,
                tool_name: &name,
                input: &input,
                status: "error",
                output: Some(output),
            },
        ));
        turn.tool_calls.push(StoredToolCall {
            tool_name: name,
            input,
            output: output.to_owned(),
            extra: Default::default(),
        });
    }
    // Whatever was cut mid-sentence still goes out, so the client's text matches what is saved.
    turn.send_held_back_text();
    let mut ending = match outcome {
        None => Ending::Cancelled,
        Some(Ok(())) => Ending::Complete,
        Some(Err(error)) => {
            tracing::warn!(%error, session = %sid, "agent answer failed");
            outbox.send(ServerMessage::session_error(
                &sid,
                format!("the language model failed: {error}"),
                Severity::Error,
                Some("MODEL_ERROR"),
            ));
            Ending::Failed
        }
    };
    let now = Utc::now();
    let actor = Actor::User(&user_id);
    let (text, tool_calls) = (std::mem::take(&mut turn.text), std::mem::take(&mut turn.tool_calls));
    let message = (!text.is_empty() || !tool_calls.is_empty()).then(|| {
        // A model may stream a NUL character; PostgreSQL stores none.
        let mut message = Message::assistant(text.replace('\0', ""));
        message.timestamp = Some(now.to_rfc3339());
        message.tool_calls = (!tool_calls.is_empty()).then_some(tool_calls);
        message
    });
    let finish = ChatSessionCommand::FinishTurn {
        user_id: user_id.clone(),
        message,
        outcome: match ending {
            Ending::Complete => TurnOutcome::Completed,
            Ending::Cancelled => TurnOutcome::Cancelled,
            Ending::Failed => TurnOutcome::Failed,
        },
        at: now,
    };
    // The answer is saved while the turn's usage rows are written and the session's cost read.
    // A cancelled call's row is written by a task of its own (dropped mid-stream): its cost is
    // read after the save, as it always was, to give that row the time to land.
    let recordings = std::mem::take(&mut turn.recordings);
    let cost = async {
        for recording in recordings {
            let _ = recording.await;
        }
        if state.model.is_some() {
            Some(session_cost(&state, &sid).await)
        } else {
            None
        }
    };
    let (saved, cost) = if ending == Ending::Cancelled {
        let saved = execute(&sessions, &sid, finish, actor).await;
        (saved, cost.await)
    } else {
        tokio::join!(execute(&sessions, &sid, finish, actor), cost)
    };
    match saved {
        Ok(()) => {}
        // The session was the user's when the turn began: it has been deleted since, as its user
        // asked. The reply is over unfinished, with nothing left to save it in.
        Err(AggregateError::UserError(ChatSessionError::NotFound)) => {
            tracing::info!(session = %sid, "the session was deleted while its reply was written; the reply is not saved");
            ending = Ending::Cancelled;
        }
        Err(error) => tracing::error!(%error, session = %sid, "the turn's answer and status were not saved"),
    }
    if ending == Ending::Complete {
        outbox.send(ServerMessage::message_complete(&sid, &text));
    }
    if let Some(cost) = cost {
        outbox.send(ServerMessage::usage_info(&sid, cost));
    }
    outbox.send(ServerMessage::status_end(&sid, ending == Ending::Complete));
    ending
}

/// The messages of the user's session `session_id`. The first query naming an unused id creates
/// the session (titled after the query), as `POST /chat_api/sessions` would. `None` when the id
/// is taken by a session the user may not use: another user's, or a deleted one.
async fn open_session(
    state: &AppState,
    query: &ChatQuery,
    session_id: Uuid,
    incident_id: Option<Uuid>,
) -> anyhow::Result<Option<Vec<Message>>> {
    let user_id = &query.user_id;
    if let Some(session) = vigil_projections::chat_sessions::find_active(&state.db, user_id, session_id).await? {
        return Ok(Some(session.messages.0));
    }
    let create = ChatSessionCommand::Create {
        session_id,
        user_id: user_id.clone(),
        title: Some(generate_title(&[Message::user(query.query.clone())])),
        messages: Vec::new(),
        ui_state: Default::default(),
        incident_id,
        at: Utc::now(),
    };
    match execute(
        &state.events.chat_sessions,
        &session_id.to_string(),
        create,
        Actor::User(user_id),
    )
    .await
    {
        Ok(()) => Ok(Some(Vec::new())),
        // Taken, though perhaps just now by the same user's other first query: look again.
        Err(AggregateError::UserError(ChatSessionError::AlreadyExists)) => Ok(
            vigil_projections::chat_sessions::find_active(&state.db, user_id, session_id)
                .await?
                .map(|session| session.messages.0),
        ),
        Err(error) => Err(error.into()),
    }
}

/// Saves the user's message (and UI state), reopening a closed session and marking it in
/// progress.
async fn begin_turn(
    state: &AppState,
    query: &ChatQuery,
    session_id: Uuid,
    accepted: &[attachments::Accepted],
) -> Result<(), AggregateError<ChatSessionError>> {
    let now = Utc::now();
    let mut message = Message::user(query.query.clone());
    message.timestamp = Some(now.to_rfc3339());
    let images = attachments::image_entries(accepted);
    message.images = (!images.is_empty()).then_some(images);
    let begin = ChatSessionCommand::BeginTurn {
        user_id: query.user_id.clone(),
        message,
        ui_state: query.ui_state.clone(),
        at: now,
    };
    execute(
        &state.events.chat_sessions,
        &session_id.to_string(),
        begin,
        Actor::User(&query.user_id),
    )
    .await
}

/// The conversation so far, for the model: the latest earlier messages with text.
fn context(earlier: &[Message]) -> Vec<ChatMessage> {
    let skip = earlier.len().saturating_sub(CONTEXT_MESSAGES);
    earlier
        .iter()
        .skip(skip)
        .filter(|message| !message.text.trim().is_empty())
        .map(|message| match message.sender {
            Sender::User => ChatMessage::user(message.text.clone()),
            Sender::Assistant => ChatMessage::assistant(message.text.clone()),
        })
        .collect()
}

/// Sum of the session's model costs, with surcharge, in USD.
async fn session_cost(state: &AppState, session_id: &str) -> f64 {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(total_cost_with_surcharge), 0)::float8 FROM llm_usage WHERE session_id = $1",
    )
    .bind(session_id)
    .fetch_one(&state.db)
    .await
    .unwrap_or(0.0)
}

/// One answer in the making: the text streamed so far and the tools run.
struct Turn<'a> {
    state: &'a AppState,
    outbox: &'a HeldOutbox,
    confirmations: &'a Confirmations,
    user_id: &'a str,
    session_id: Uuid,
    sid: &'a str,
    mode: Mode,
    chunker: SentenceChunker,
    text: String,
    tool_calls: Vec<StoredToolCall>,
    /// The tool call reported `running` and not yet finished: `(id, tool, input)`.
    running: Option<(String, String, Value)>,
    /// The model calls' `llm_usage` rows being written.
    recordings: Vec<tokio::task::JoinHandle<()>>,
}

impl Turn<'_> {
    async fn run(
        &mut self,
        query: &ChatQuery,
        incident_id: Option<Uuid>,
        history: Vec<ChatMessage>,
        accepted: &[attachments::Accepted],
    ) -> Result<(), LlmError> {
        if let Some(direct) = &query.direct_tool_call {
            let output = self
                .run_tool(
                    &format!("direct_{}", Uuid::new_v4().simple()),
                    &direct.tool_name,
                    &direct.input,
                )
                .await;
            self.say(&format!(
                "Ran {} directly.\n\n{}",
                direct.tool_name,
                shortened(&output, 2_000)
            ));
            return Ok(());
        }
        let incident = match incident_id {
            Some(id) => {
                let call_id = format!("context_{}", Uuid::new_v4().simple());
                Some(
                    self.run_tool(&call_id, Tool::GetIncident.name(), &json!({ "incident_id": id }))
                        .await,
                )
            }
            None => None,
        };
        let Some(model) = self.state.model.clone() else {
            match incident {
                Some(incident) => self.builtin_about_incident(&incident),
                None => self.builtin(&query.query).await,
            }
            return Ok(());
        };
        let mut parts = vec![ContentPart::Text(query.query.clone())];
        parts.extend(accepted.iter().map(attachments::Accepted::content_part));
        let mut messages = vec![ChatMessage::system(match self.mode {
            Mode::Agent => format!("{SYSTEM_PROMPT} Commands that change infrastructure need the user's confirmation."),
            Mode::Ask => format!("{SYSTEM_PROMPT} This conversation is read-only: never propose changes to run."),
        })];
        if let Some(incident) = incident {
            messages.push(ChatMessage::system(format!(
                "The user asks about this incident: {incident}"
            )));
        }
        messages.extend(history);
        messages.push(ChatMessage::User { parts });
        let specs = Tool::specs(self.state.agent_cli.as_deref());
        for _ in 0..self.state.config.agent_max_steps {
            let mut request = ChatRequest::new(messages.clone()).with_tools(specs.clone());
            request.model = query.model.clone().filter(|model| !model.trim().is_empty());
            let call = Call {
                user_id: self.user_id,
                session_id: Some(self.sid),
                request_type: "chat",
            };
            let mut on_event = |event: &StreamEvent| {
                if let StreamEvent::TextDelta(delta) = event {
                    self.say(delta);
                }
            };
            let (completion, recording) = model.complete_streaming_then_record(call, request, &mut on_event).await;
            self.recordings.push(tokio::spawn(recording));
            let completion = completion?;
            if completion.tool_calls.is_empty() {
                return Ok(());
            }
            messages.push(completion.to_message());
            for call in &completion.tool_calls {
                // Saved with the conversation, where PostgreSQL takes no NUL character.
                let arguments = crate::text::without_nul_escapes(call.arguments.as_bytes());
                let input = serde_json::from_slice(&arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.replace('\0', "")));
                let output = self.run_tool(&call.id, &call.name, &input).await;
                messages.push(ChatMessage::tool_result(
                    &call.id,
                    shortened(&output, MAX_TOOL_RESULT_CHARS),
                ));
            }
        }
        self.say(&format!(
            "\n\nI stopped after {} rounds of tool calls; ask me to continue if you want me to dig further.",
            self.state.config.agent_max_steps
        ));
        Ok(())
    }

    /// Streams text to the client in sentence-cut chunks and keeps it for the saved message.
    fn say(&mut self, text: &str) {
        // A model may stream a NUL character; PostgreSQL stores none, and the client must see
        // what is stored.
        let text = if text.contains('\0') {
            std::borrow::Cow::Owned(text.replace('\0', ""))
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        self.text.push_str(&text);
        for chunk in self.chunker.push(&text) {
            self.outbox.send(ServerMessage::chunk(self.sid, &chunk));
        }
    }

    /// Sends the text the chunker holds back for want of what follows it.
    fn send_held_back_text(&mut self) {
        for chunk in self.chunker.finish() {
            self.outbox.send(ServerMessage::chunk(self.sid, &chunk));
        }
    }
}
