//! A fake OpenAI-compatible API for tests: real HTTP on loopback, real server-sent events, and
//! replies scripted in advance.
//!
//! ```no_run
//! # async fn example() {
//! use serde_json::json;
//! use vigil_llm::fake::{FakeOpenAi, Reply};
//!
//! let fake = FakeOpenAi::start().await;
//! fake.push(Reply::tool_call("get_logs", json!({"service": "api"})));
//! fake.push(Reply::text("The API lost its database connection."));
//! // ... point the code under test at `fake.base_url()`, then:
//! let bodies = fake.requests();
//! # }
//! ```

use std::{
    collections::VecDeque,
    convert::Infallible,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{
        sse::{Event, Sse},
        IntoResponse, Response,
    },
    routing::post,
    Json, Router,
};
use futures::Stream;
use serde_json::{json, Value};
use tokio::{net::TcpListener, task::JoinHandle};

/// Text replies are streamed in pieces of this many characters, tool-call arguments in pieces of
/// `ARGUMENT_PIECE_CHARS`.
const TEXT_PIECE_CHARS: usize = 5;
const ARGUMENT_PIECE_CHARS: usize = 8;

/// A running fake server; it stops accepting connections when dropped.
///
/// `POST /v1/chat/completions` answers with the next [`Reply`] pushed, in FIFO order, or with the
/// default reply when none is left. It records every JSON body it receives.
#[derive(Debug)]
pub struct FakeOpenAi {
    base_url: String,
    state: Arc<Mutex<ServerState>>,
    server: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct ServerState {
    replies: VecDeque<Reply>,
    default_reply: Option<Reply>,
    api_key: Option<String>,
    requests: Vec<Value>,
}

type SharedState = Arc<Mutex<ServerState>>;

impl FakeOpenAi {
    /// Serves on `127.0.0.1` on a free port. Panics when it cannot bind, as a test would.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake OpenAI server binds a loopback port");
        let address = listener.local_addr().expect("a bound listener has an address");
        let state = SharedState::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(Arc::clone(&state));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake OpenAI server runs");
        });
        Self {
            base_url: format!("http://{address}"),
            state,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`, without `/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Queues the reply to a coming chat request.
    pub fn push(&self, reply: Reply) {
        lock(&self.state).replies.push_back(reply);
    }

    /// The reply once the queue is empty. Until this is called, it is a short text echoing the
    /// last user message: `You said: <text>`.
    pub fn set_default_reply(&self, reply: Reply) {
        lock(&self.state).default_reply = Some(reply);
    }

    /// From now on, requests without `Authorization: Bearer <key>` get a 401 (consuming no reply).
    pub fn require_api_key(&self, key: impl Into<String>) {
        lock(&self.state).api_key = Some(key.into());
    }

    /// The bodies of all chat requests received so far, in order, answered or refused.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.state).requests.clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(state: &Mutex<ServerState>) -> MutexGuard<'_, ServerState> {
    // A test that panicked elsewhere must not hide its own failure behind a poisoned lock.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the fake answers to one chat request.
#[derive(Clone, Debug)]
pub struct Reply {
    kind: ReplyKind,
    chunk_delay: Duration,
    usage: Option<(u32, u32)>,
}

#[derive(Clone, Debug)]
enum ReplyKind {
    Answer {
        /// The text, in the pieces it is streamed in.
        pieces: Vec<String>,
        /// Name and arguments (JSON text) of each call.
        tool_calls: Vec<(String, String)>,
    },
    Status {
        status: StatusCode,
        retry_after: Option<u64>,
    },
    Raw(Vec<String>),
}

impl Reply {
    fn new(kind: ReplyKind) -> Self {
        Self {
            kind,
            chunk_delay: Duration::ZERO,
            usage: None,
        }
    }

    /// A streamed text answer (finish reason `stop`), sent in pieces of a few characters.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(ReplyKind::Answer {
            pieces: pieces(&text.into(), TEXT_PIECE_CHARS),
            tool_calls: Vec::new(),
        })
    }

    /// A streamed text answer sent in exactly these pieces, one content event each: for a stream
    /// whose shape matters (a load test's N pieces a fixed time apart).
    pub fn text_in_pieces<I, S>(pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(ReplyKind::Answer {
            pieces: pieces.into_iter().map(Into::into).collect(),
            tool_calls: Vec::new(),
        })
    }

    /// An answer that calls one tool (finish reason `tool_calls`); the arguments are streamed in
    /// fragments. Tool-call ids are `call_<request>_<index>`: the request's 1-based position in
    /// [`FakeOpenAi::requests`] and the call's 0-based index in the reply.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::new(ReplyKind::Answer {
            pieces: Vec::new(),
            tool_calls: Vec::new(),
        })
        .with_tool_call(name, arguments)
    }

    /// Adds a tool call to a text or tool-call answer: `Reply::text("Checking.").with_tool_call(..)`
    /// or several calls in one answer. No effect on other replies.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        if let ReplyKind::Answer { tool_calls, .. } = &mut self.kind {
            tool_calls.push((name.into(), arguments.to_string()));
        }
        self
    }

    /// An error answer with this HTTP status and an OpenAI-style error body. Panics on a number
    /// that is no HTTP status.
    pub fn status(status: u16) -> Self {
        Self::new(ReplyKind::Status {
            status: StatusCode::from_u16(status).expect("an HTTP status code"),
            retry_after: None,
        })
    }

    /// Adds `Retry-After: <seconds>` to a status reply. No effect on other replies.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let ReplyKind::Status { retry_after, .. } = &mut self.kind {
            *retry_after = Some(seconds);
        }
        self
    }

    /// A stream of exactly these `data:` payloads, sent as they are (nothing is added, not even
    /// `[DONE]`): for malformed or unusual streams.
    pub fn raw_events<I, S>(events: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(ReplyKind::Raw(events.into_iter().map(Into::into).collect()))
    }

    /// Waits this long before each event of a streamed reply, the first included.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Reports this usage instead of the computed one: by default [`fake_token_count`] of the
    /// request's message texts as input, and of the reply's text and tool-call arguments as output.
    pub fn usage(mut self, input_tokens: u32, output_tokens: u32) -> Self {
        self.usage = Some((input_tokens, output_tokens));
        self
    }
}

async fn chat_completions(State(state): State<SharedState>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let (reply, request_number) = {
        let mut state = lock(&state);
        state.requests.push(body.clone());
        if let Some(refusal) = check_api_key(&state, &headers) {
            return refusal;
        }
        if body["stream"] != true {
            return error_response(
                StatusCode::BAD_REQUEST,
                "the fake OpenAI server only streams: send stream: true",
            );
        }
        let reply = match state.replies.pop_front() {
            Some(reply) => reply,
            None => state.default_reply.clone().unwrap_or_else(|| echo(&body)),
        };
        (reply, state.requests.len())
    };
    let delay = reply.chunk_delay;
    let events = match reply.kind {
        ReplyKind::Status { status, retry_after } => {
            let mut response = error_response(status, &format!("fake error {}", status.as_u16()));
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            return response;
        }
        ReplyKind::Raw(events) => events,
        ReplyKind::Answer { pieces, tool_calls } => {
            answer_events(&body, request_number, &pieces, &tool_calls, reply.usage)
        }
    };
    Sse::new(delayed(events, delay)).into_response()
}

fn check_api_key(state: &ServerState, headers: &HeaderMap) -> Option<Response> {
    let expected = format!("Bearer {}", state.api_key.as_ref()?);
    let given = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    (given != Some(expected.as_str())).then(|| error_response(StatusCode::UNAUTHORIZED, "Incorrect API key provided"))
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "fake_error", "code": status.as_u16()}});
    (status, Json(body)).into_response()
}

/// The default reply: `You said: ` and the text of the last user message.
fn echo(body: &Value) -> Reply {
    let last_user = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|message| message["role"] == "user");
    match last_user {
        Some(message) => Reply::text(format!("You said: {}", message_text(message))),
        None => Reply::text("Hello from the fake model."),
    }
}

/// The text of a wire message: its string content, or its text parts joined by spaces.
fn message_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The `data:` payloads of a streamed answer, as OpenAI sends them: a role chunk, the text's
/// pieces, each tool call (its name, then its arguments in fragments), the finish reason, the
/// usage when the request asked for it, and `[DONE]`.
fn answer_events(
    request: &Value,
    request_number: usize,
    text_pieces: &[String],
    tool_calls: &[(String, String)],
    usage: Option<(u32, u32)>,
) -> Vec<String> {
    let model = request["model"].as_str().unwrap_or("fake-model").to_owned();
    let chunk = move |choices: Value| {
        json!({
            "id": format!("chatcmpl-fake-{request_number}"),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
        })
    };
    let delta = |delta: Value| json!([{"index": 0, "delta": delta, "finish_reason": null}]);

    let mut chunks = vec![chunk(delta(json!({"role": "assistant", "content": ""})))];
    for piece in text_pieces {
        chunks.push(chunk(delta(json!({"content": piece}))));
    }
    for (index, (name, arguments)) in tool_calls.iter().enumerate() {
        let id = format!("call_{request_number}_{index}");
        chunks.push(chunk(delta(json!({"tool_calls": [{
            "index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
        }]}))));
        for fragment in pieces(arguments, ARGUMENT_PIECE_CHARS) {
            chunks.push(chunk(delta(
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
            )));
        }
    }
    let finish_reason = if tool_calls.is_empty() { "stop" } else { "tool_calls" };
    chunks.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish_reason}]),
    ));

    if request["stream_options"]["include_usage"] == true {
        let (input, output) = usage.unwrap_or_else(|| {
            let input: usize = request["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|message| fake_token_count(&message_text(message)))
                .sum();
            let output = fake_token_count(&text_pieces.concat())
                + tool_calls
                    .iter()
                    .map(|(_, arguments)| fake_token_count(arguments))
                    .sum::<usize>();
            (saturate(input), saturate(output))
        });
        let mut usage_chunk = chunk(json!([]));
        usage_chunk["usage"] = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": u64::from(input) + u64::from(output)});
        chunks.push(usage_chunk);
    }
    let mut events: Vec<String> = chunks.iter().map(Value::to_string).collect();
    events.push("[DONE]".to_owned());
    events
}

fn saturate(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// `text` in pieces of `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|piece| piece.iter().collect()).collect()
}

fn delayed(events: Vec<String>, delay: Duration) -> impl Stream<Item = Result<Event, Infallible>> {
    async_stream::stream! {
        for data in events {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            yield Ok(Event::default().data(data));
        }
    }
}

/// The token count the fake reports: one per whitespace-separated word. Cheaper than a real
/// tokenizer (whose first use takes a second in debug builds and would distort timings in tests)
/// and easy to predict.
pub fn fake_token_count(text: &str) -> usize {
    text.split_whitespace().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_respect_characters() {
        assert_eq!(pieces("Grüße🎉!", 3), ["Grü", "ße🎉", "!"]);
        assert!(pieces("", 3).is_empty());
    }
}
