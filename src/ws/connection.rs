//! One client's side of the chat channel: the init handshake, validation of each message, the
//! per-client rate limit, and the workflows (agent answers) it started.
//!
//! A connection must start with `init`; until then any other message is answered with an `error`
//! and the connection stays open so the client can still send `init`. Unparseable or unknown
//! messages get an `error` too and change nothing.

use std::{
    collections::{HashMap, HashSet},
    panic::AssertUnwindSafe,
    time::{Duration, Instant},
};

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::protocol::{ChatQuery, ClientMessage, DirectToolCall, ParseError, ServerMessage, Severity};
use crate::{
    agent::{self, tools::Tool, turns::ReplyTurn, Confirmations, Ending, Outbox},
    state::AppState,
};

/// The spec's WebSocket limit: a bucket of `capacity` messages, refilled evenly over `period`.
#[derive(Debug)]
pub struct TokenBucket {
    capacity: f64,
    tokens: f64,
    refill_per_second: f64,
    updated: Instant,
}

impl TokenBucket {
    pub fn new(capacity: u32, period: Duration) -> Self {
        let capacity = f64::from(capacity.max(1));
        Self {
            capacity,
            tokens: capacity,
            refill_per_second: capacity / period.as_secs_f64(),
            updated: Instant::now(),
        }
    }

    /// Takes a token, or says how long until one is back.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.refill_per_second).min(self.capacity);
        self.updated = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.refill_per_second))
        }
    }
}

/// The code of a query refused because a reply is still being written in its session.
const BUSY: &str = "BUSY";

/// Why a query is not processed: the error's text and code.
struct Refusal {
    text: String,
    code: &'static str,
}

impl Refusal {
    fn new(text: impl Into<String>, code: &'static str) -> Self {
        Self {
            text: text.into(),
            code,
        }
    }
}

/// A message naming another user than the connection's `init`.
const NOT_YOURS: &str = "user_id does not match the one this connection was initialised with";

pub struct Connection {
    /// Names this connection among the followers of a session.
    id: Uuid,
    state: AppState,
    outbox: Outbox,
    user_id: Option<String>,
    bucket: TokenBucket,
    /// The replies this connection's user asked for here, by session. A cancelled one stays until
    /// it has wound down: its END is still to come.
    workflows: HashMap<Uuid, Workflow>,
    /// Replies asked for by a user this connection spoke for before an `init` as someone else.
    /// They run on and are saved, unseen here; kept so that a stopping service still cancels them.
    left_running: Vec<Workflow>,
    confirmations: Confirmations,
    /// Sessions this connection has asked in: it sees their replies, whoever writes them.
    followed: HashSet<Uuid>,
}

struct Workflow {
    cancel: CancellationToken,
    /// Fires when the connection stops speaking for the user who asked.
    detach: CancellationToken,
    task: JoinHandle<Ending>,
}

impl Workflow {
    /// Cancelled: for its client the reply is over, though it may still be saving what was written.
    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// How a reply gets its session's turn.
enum TurnSource {
    Taken(ReplyTurn),
    /// After this connection's cancelled reply in the session has wound down.
    AfterCancelled(JoinHandle<Ending>),
}

impl Connection {
    pub fn new(state: AppState, outbox: Outbox) -> Self {
        let bucket = TokenBucket::new(state.config.ws_messages_per_minute, Duration::from_secs(60));
        Self {
            id: Uuid::new_v4(),
            state,
            outbox,
            user_id: None,
            bucket,
            workflows: HashMap::new(),
            left_running: Vec::new(),
            confirmations: Default::default(),
            followed: HashSet::new(),
        }
    }

    pub fn handle(&mut self, text: &str) {
        self.workflows.retain(|_, workflow| !workflow.task.is_finished());
        self.left_running.retain(|workflow| !workflow.task.is_finished());
        let message = match ClientMessage::parse(text) {
            Ok(message) => message,
            Err(ParseError {
                text,
                query_session_id: Some(session_id),
            }) => {
                // A malformed query still counts against the rate, as every query does.
                let _ = self.bucket.try_take(Instant::now());
                return self.outbox.refuse(&session_id, text, Some("INVALID_QUERY"));
            }
            Err(error) => return self.outbox.send(ServerMessage::error(error.text)),
        };
        if let ClientMessage::Init { user_id } = message {
            if user_id.len() > crate::users::MAX_USER_ID_LEN {
                return self.outbox.send(ServerMessage::error(format!(
                    "user_id must be at most {} bytes",
                    crate::users::MAX_USER_ID_LEN
                )));
            }
            if self.user_id.as_ref().is_some_and(|current| *current != user_id) {
                // Another user from now on: the previous one's sessions are no longer followed,
                // their confirmations can no longer be answered from here, and their running
                // replies no longer reach this socket.
                self.state
                    .session_fanout
                    .forget(self.id, std::mem::take(&mut self.followed));
                self.confirmations.clear();
                for (_, workflow) in self.workflows.drain() {
                    workflow.detach.cancel();
                    self.left_running.push(workflow);
                }
            }
            self.user_id = Some(user_id);
            return self.outbox.send(ServerMessage::status_start());
        }
        let Some(user_id) = self.user_id.clone() else {
            const INIT_FIRST: &str = "send an init message with your user_id first";
            return match message {
                ClientMessage::Query(query) => self.outbox.refuse(&query.session_id, INIT_FIRST, Some("INIT_REQUIRED")),
                _ => self
                    .outbox
                    .send(ServerMessage::coded_error(INIT_FIRST, "INIT_REQUIRED")),
            };
        };
        match message {
            ClientMessage::Init { .. } => unreachable!("handled above"),
            ClientMessage::Query(query) => self.query(&user_id, *query),
            ClientMessage::Cancel {
                session_id,
                user_id: Some(claimed),
            } if claimed != user_id => self.refuse_cancel(&session_id, NOT_YOURS, Severity::Error, "USER_MISMATCH"),
            ClientMessage::Cancel { session_id, .. } => self.cancel(&session_id),
            ClientMessage::Confirmation {
                user_id: Some(claimed), ..
            } if claimed != user_id => self.outbox.send(ServerMessage::coded_error(NOT_YOURS, "USER_MISMATCH")),
            ClientMessage::Confirmation {
                confirmation_id,
                approved,
                ..
            } => match self.confirmations.remove(&confirmation_id) {
                Some((_, (_, answer))) => {
                    let _ = answer.send(approved);
                }
                None => self.outbox.send(ServerMessage::error(
                    "no confirmation with this id is pending (it may have timed out or been cancelled)",
                )),
            },
        }
    }

    /// Answers something that is not a message at all.
    pub fn reject(&self, text: &str) {
        self.outbox.send(ServerMessage::error(text));
    }

    fn query(&mut self, user_id: &str, query: ChatQuery) {
        let sid = query.session_id.clone();
        match self.admit(user_id, &query, &sid) {
            // A reply the user cancelled is over for them: the query runs once it has wound down.
            Ok(session_id) => match self.workflows.remove(&session_id) {
                Some(cancelled) => self.start_reply(session_id, query, TurnSource::AfterCancelled(cancelled.task)),
                None => match self.state.reply_turns.try_take(session_id) {
                    Some(turn) => self.start_reply(session_id, query, TurnSource::Taken(turn)),
                    None => {
                        tokio::spawn(refuse_busy_elsewhere(
                            self.state.db.clone(),
                            self.outbox.clone(),
                            user_id.to_owned(),
                            session_id,
                            sid,
                        ));
                    }
                },
            },
            // The running reply's END is still to come: a second END now would tell the client
            // that reply is over.
            Err(Refusal { text, code: BUSY }) => {
                self.outbox
                    .send(ServerMessage::session_error(&sid, text, Severity::Error, Some(BUSY)))
            }
            Err(Refusal { text, code }) => self.outbox.refuse(&sid, text, Some(code)),
        }
    }

    /// The checks a query must pass before any work is done for it. Every query of the client
    /// counts against its rate (a burst into a session that is still answering is refused as
    /// such, and the burst's sixth query within the minute as over the rate).
    fn admit(&mut self, user_id: &str, query: &ChatQuery, sid: &str) -> Result<Uuid, Refusal> {
        let within_rate = self.bucket.try_take(Instant::now());
        if query.user_id != user_id {
            return Err(Refusal::new(NOT_YOURS, "USER_MISMATCH"));
        }
        if let Err(wait) = within_rate {
            self.state.metrics.rate_limit.refused("websocket");
            return Err(Refusal::new(
                format!(
                    "Rate limit exceeded: at most {} messages per 60 seconds. Please wait {} seconds and retry.",
                    self.state.config.ws_messages_per_minute,
                    wait.as_secs() + 1
                ),
                "RATE_LIMITED",
            ));
        }
        let session_id = sid.parse::<Uuid>();
        if session_id
            .as_ref()
            .is_ok_and(|id| self.workflows.get(id).is_some_and(|workflow| !workflow.is_cancelled()))
        {
            return Err(Refusal::new(
                "a reply is still being written in this session; wait for it or cancel it",
                BUSY,
            ));
        }
        if let Some(text) = agent::user_message::too_long(&query.query) {
            return Err(Refusal::new(text, "MESSAGE_TOO_LONG"));
        }
        if let Some(call) = &query.direct_tool_call {
            check_direct_call(call)?;
        }
        if query.query.trim().is_empty() && query.direct_tool_call.is_none() {
            return Err(Refusal::new("the query is empty", "EMPTY_QUERY"));
        }
        session_id.map_err(|_| Refusal::new("session_id is not a UUID", "INVALID_SESSION_ID"))
    }

    fn start_reply(&mut self, session_id: Uuid, query: ChatQuery, turn: TurnSource) {
        let (state, sid, user_id) = (self.state.clone(), session_id.to_string(), query.user_id.clone());
        let cancel = CancellationToken::new();
        let detach = CancellationToken::new();
        let asker = self.outbox.detachable(detach.clone());
        let outbox = asker.relaying(self.state.session_fanout.clone(), session_id, Some(self.id));
        let answering = self.outbox.answering(session_id);
        let reply = agent::answer(
            self.state.clone(),
            query,
            session_id,
            None,
            outbox,
            self.confirmations.clone(),
            cancel.clone(),
        );
        let cancelled = cancel.clone();
        let task = tokio::spawn(async move {
            let _answering = answering;
            let _turn = match turn {
                TurnSource::Taken(turn) => turn,
                TurnSource::AfterCancelled(previous) => {
                    let _ = previous.await;
                    // Cancelled while it waited (or the service is stopping): it never starts.
                    if cancelled.is_cancelled() {
                        asker.send(ServerMessage::status_end(&sid, false));
                        return Ending::Cancelled;
                    }
                    match state.reply_turns.try_take(session_id) {
                        Some(turn) => turn,
                        // Taken in between, from another socket or by an incident-chat job.
                        None => {
                            refuse_busy_elsewhere(state.db.clone(), asker, user_id, session_id, sid).await;
                            return Ending::Failed;
                        }
                    }
                }
            };
            match AssertUnwindSafe(reply).catch_unwind().await {
                Ok(ending) => ending,
                Err(_) => {
                    // A bug cut the reply short: its client must not wait for the END forever.
                    asker.send(ServerMessage::status_end(&sid, false));
                    Ending::Failed
                }
            }
        });
        self.workflows.insert(session_id, Workflow { cancel, detach, task });
        // The answer makes the connection follow the session once it has checked that the
        // session is this user's; it is forgotten when the connection closes.
        self.followed.insert(session_id);
    }

    fn cancel(&mut self, session_id: &str) {
        let running = session_id.parse::<Uuid>().ok().and_then(|id| {
            self.workflows
                .get(&id)
                .filter(|workflow| !workflow.is_cancelled())
                .map(|workflow| (id, workflow.cancel.clone()))
        });
        let Some((id, cancel)) = running else {
            return self.refuse_cancel(
                session_id,
                "no reply is running in this session",
                Severity::Warning,
                "NOTHING_TO_CANCEL",
            );
        };
        // Pending confirmations of the session end unanswered, which counts as declined; the
        // cancelled reply sends the END.
        self.confirmations.retain(|_, (session, _)| *session != id);
        cancel.cancel();
    }

    /// Answers a cancel that cancels nothing. The spec's cancel always ends with END, so that a
    /// client waiting for it is released, unless a reply this client sees is still being
    /// written in the session (one it started, or one in a session it follows): that reply's
    /// END is still to come, and a second one now would tell the client it is over.
    fn refuse_cancel(&self, session_id: &str, text: &str, severity: Severity, code: &str) {
        self.outbox
            .send(ServerMessage::session_error(session_id, text, severity, Some(code)));
        let sees_reply_running = session_id.parse::<Uuid>().is_ok_and(|id| {
            self.workflows.contains_key(&id) || (self.followed.contains(&id) && self.state.reply_turns.is_running(id))
        });
        if !sees_reply_running {
            self.outbox.send(ServerMessage::status_end(session_id, false));
        }
    }

    /// The client is gone: its confirmations can never be answered. Running answers finish and are
    /// saved, unless the service is stopping (`stop_workflows`).
    pub fn close(&mut self, stop_workflows: bool) {
        self.confirmations.clear();
        self.state
            .session_fanout
            .forget(self.id, std::mem::take(&mut self.followed));
        if stop_workflows {
            for workflow in self.workflows.values().chain(&self.left_running) {
                workflow.cancel.cancel();
            }
        }
    }

    /// Resolves once every reply this connection started has ended (a cancelled one saves what
    /// was written and sends its END first).
    pub fn replies_ended(&mut self) -> impl std::future::Future<Output = ()> + use<> {
        let tasks: Vec<JoinHandle<Ending>> = self
            .workflows
            .drain()
            .map(|(_, workflow)| workflow)
            .chain(self.left_running.drain(..))
            .map(|workflow| workflow.task)
            .collect();
        async move {
            futures::future::join_all(tasks).await;
        }
    }
}

/// The largest input of a direct tool call, as JSON: it is echoed in each of the call's `tool_call`
/// messages, and no tool's arguments come near it.
const MAX_TOOL_INPUT_BYTES: usize = 16 * 1024;

/// Checks a direct tool call before anything of it is echoed: a name that names no tool used to be
/// echoed in full, and a 100,000-character one flooded the socket's send queue, which dropped it.
fn check_direct_call(call: &DirectToolCall) -> Result<(), Refusal> {
    if Tool::named(&call.tool_name).is_none() {
        let known: Vec<&str> = Tool::ALL.iter().map(|tool| tool.name()).collect();
        return Err(Refusal::new(
            format!(
                "direct_tool_call.tool_name {:?} names no tool; expected one of {}",
                crate::text::shortened(&call.tool_name, 40),
                known.join(", ")
            ),
            "UNKNOWN_TOOL",
        ));
    }
    if call.input.to_string().len() > MAX_TOOL_INPUT_BYTES {
        return Err(Refusal::new(
            format!("direct_tool_call.input must be at most {MAX_TOOL_INPUT_BYTES} bytes of JSON"),
            "TOOL_INPUT_TOO_LARGE",
        ));
    }
    Ok(())
}

/// Refuses a query into a session that another socket (or an incident-chat job) is answering
/// in: this query has its own END. A session the user may not use is refused as not found, as
/// when no reply runs: whether a stranger's session is answering is not theirs to know.
async fn refuse_busy_elsewhere(db: sqlx::PgPool, outbox: Outbox, user_id: String, session_id: Uuid, sid: String) {
    match vigil_projections::chat_sessions::taken_by_another(&db, &user_id, session_id).await {
        Ok(true) => outbox.refuse(&sid, agent::SESSION_NOT_FOUND.0, Some(agent::SESSION_NOT_FOUND.1)),
        Ok(false) => outbox.refuse(
            &sid,
            "a reply is still being written in this session from elsewhere; wait for it or cancel it there",
            Some(BUSY),
        ),
        Err(error) => {
            tracing::error!(%error, session = %sid, "chat session lookup failed");
            outbox.refuse(&sid, "the session could not be read; try again", None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_holds_five_and_refills_over_the_minute() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5, Duration::from_secs(60));
        for _ in 0..5 {
            assert!(bucket.try_take(start).is_ok());
        }
        let wait = bucket.try_take(start).unwrap_err();
        assert_eq!(wait.as_secs(), 12, "one token comes back every 12 s");
        assert!(bucket.try_take(start + Duration::from_secs(11)).is_err());
        assert!(bucket.try_take(start + Duration::from_secs(13)).is_ok());
        assert!(bucket.try_take(start + Duration::from_secs(14)).is_err());
        assert!(
            (0..5).all(|_| bucket.try_take(start + Duration::from_secs(600)).is_ok()),
            "a long pause refills to the capacity, never beyond"
        );
        assert!(bucket.try_take(start + Duration::from_secs(600)).is_err());
    }
}
