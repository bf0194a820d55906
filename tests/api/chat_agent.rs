//! The chat channel end to end: a real WebSocket client against the listener, and a fake
//! OpenAI-compatible server streaming the model's side.

use std::{path::PathBuf, time::Duration};

use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::{connect_async, tungstenite::Message};
use uuid::Uuid;
use vigil_llm::fake::{FakeOpenAi, Reply};

use vigil_providers::cloud_b::RoleArn;

use crate::{
    cloud_providers::{
        call, cloud_c_login, connect_cloud_d, spawn_with_fakes_and, ORGANIZATION, ROLE_ARN, SUBSCRIPTION_ID,
    },
    helpers::{eventually, spawn_app, spawn_app_with, CapturedLogs, TestApp},
};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Client {
    socket: Socket,
    user: String,
}

impl Client {
    async fn connect(app: &TestApp, user: &str) -> Self {
        Self::connect_to(app.ws_addr, user).await
    }

    async fn connect_to(ws_addr: std::net::SocketAddr, user: &str) -> Self {
        let (socket, _) = connect_async(format!("ws://{ws_addr}/")).await.unwrap();
        let mut client = Self {
            socket,
            user: user.to_owned(),
        };
        client.send(json!({ "type": "init", "user_id": user })).await;
        assert_eq!(client.next().await["data"]["status"], "START");
        client
    }

    async fn send(&mut self, message: Value) {
        self.socket.send(Message::text(message.to_string())).await.unwrap();
    }

    async fn ask(&mut self, session_id: &str, query: &str, extra: Value) {
        let mut message = json!({ "query": query, "user_id": self.user, "session_id": session_id });
        if let Value::Object(extra) = extra {
            message.as_object_mut().unwrap().extend(extra);
        }
        self.send(message).await;
    }

    async fn next(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), self.socket.next())
                .await
                .expect("a message within 10 s")
                .expect("socket open")
                .expect("valid frame");
            if let Message::Text(text) = frame {
                return serde_json::from_str(&text).expect("server sends JSON");
            }
        }
    }

    /// Asks for a long answer and returns once its first piece has arrived.
    async fn ask_long_question(&mut self, session_id: &str) {
        self.ask(session_id, "Tell me everything", json!({})).await;
        while self.next().await["type"] != "message" {}
    }

    /// Every message up to and including the `status END` of the exchange.
    async fn until_end(&mut self) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.next().await;
            let end = message["type"] == "status" && message["data"]["status"] == "END";
            seen.push(message);
            if end {
                return seen;
            }
        }
    }
}

impl Client {
    /// The refusal of a query that was not processed: its error, then its `status END`.
    async fn refused(&mut self, session_id: &str) -> Value {
        let error = self.next().await;
        assert_eq!(error["type"], "error", "{error}");
        assert_eq!(error["data"]["session_id"], session_id, "{error}");
        assert_eq!(
            self.next().await["data"],
            json!({ "status": "END", "isComplete": false, "session_id": session_id }),
            "after {error}"
        );
        error
    }
}

fn of_type<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages.iter().filter(|message| message["type"] == kind).collect()
}

fn chunks(messages: &[Value]) -> Vec<String> {
    of_type(messages, "message")
        .into_iter()
        .filter(|message| message["data"]["is_chunk"] == true)
        .map(|message| message["data"]["text"].as_str().unwrap().to_owned())
        .collect()
}

async fn app_with_model(model: &FakeOpenAi, cli_dir: Option<PathBuf>) -> TestApp {
    let base_url = model.base_url().to_owned();
    spawn_app_with(move |config| {
        config.llm_base_url = Some(base_url);
        config.llm_prices = Some("gpt-4o-mini=0.15/0.6".into());
        config.agent_cli_dir = cli_dir;
        config.agent_confirmation_timeout_secs = 5;
    })
    .await
}

/// A model whose one answer is `sentences` sentences streamed `delay` apart (a reply a test can
/// act on while it runs), the service using it, a user and a session of theirs.
/// Bind `_model` (not `..`): the fake model stops when it is dropped.
struct SlowReply {
    _model: FakeOpenAi,
    app: TestApp,
    user: String,
    session_id: String,
    answer: String,
}

async fn slow_reply(sentences: usize, delay: Duration) -> SlowReply {
    let model = FakeOpenAi::start().await;
    let answer = "First sentence arrives. ".repeat(sentences);
    model.push(Reply::text(answer.clone()).chunk_delay(delay));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    SlowReply {
        _model: model,
        app,
        user,
        session_id,
        answer,
    }
}

async fn new_session(app: &TestApp, user: &str) -> String {
    app.create_session(user, &json!({ "title": "agent" })).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn session(app: &TestApp, user: &str, id: &str) -> Value {
    app.send_as(user, Method::GET, &format!("/chat_api/sessions/{id}"), None)
        .await
        .json()
        .await
        .unwrap()
}

/// A directory holding stand-in `kubectl`, `aws`, `az` and `scw` CLIs that echo their arguments;
/// `aws` also names the access key it was given and whether the rest of its credentials came with
/// it, `az` its subscription and `scw` its organization.
fn fake_cli() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-cli-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let scripts = [
        ("kubectl", "#!/bin/sh\necho \"kubectl ran: $*\"\n"),
        (
            "aws",
            "#!/bin/sh\necho \"aws ran: $*\"\n\
             echo \"key: $AWS_ACCESS_KEY_ID secret: ${AWS_SECRET_ACCESS_KEY:+given} token: ${AWS_SESSION_TOKEN:+given}\"\n",
        ),
        (
            "az",
            "#!/bin/sh\necho \"az ran: $*\"\necho \"subscription: $AZURE_SUBSCRIPTION_ID\"\n",
        ),
        (
            "scw",
            "#!/bin/sh\necho \"scw ran: $*\"\necho \"organization: $SCW_DEFAULT_ORGANIZATION_ID\"\n",
        ),
    ];
    for (name, text) in scripts {
        let script = dir.join(name);
        std::fs::write(&script, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    dir
}

#[tokio::test]
async fn an_answer_streams_in_sentence_chunks_and_is_saved() {
    let model = FakeOpenAi::start().await;
    let answer = "The checkout service is failing its health checks since the 14:02 deploy. \
        Its error rate went from under one percent to thirty-four percent within two minutes of the release, \
        which points at the new build rather than at the database or the network path between them. \
        Roll back first.";
    model.push(Reply::text(answer).usage(1000, 200));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client
        .ask(
            &session_id,
            "Why is checkout down?",
            json!({ "ui_state": { "selectedMode": "agent" } }),
        )
        .await;
    let messages = client.until_end().await;

    let chunks = chunks(&messages);
    assert!(chunks.len() >= 4, "several chunks: {chunks:?}");
    assert!(chunks.iter().all(|chunk| chunk.chars().count() <= 100), "{chunks:?}");
    assert!(
        chunks[0].ends_with("deploy. "),
        "cut at the first sentence: {:?}",
        chunks[0]
    );
    assert_eq!(chunks.concat(), answer);
    let complete = of_type(&messages, "message")
        .into_iter()
        .find(|message| message["data"]["is_complete"] == true)
        .expect("a final message");
    assert_eq!(complete["data"]["text"], answer);
    assert_eq!(complete["data"]["streaming"], false);
    let usage = of_type(&messages, "usage_info");
    assert_eq!(usage[0]["data"]["total_cost"], 0.0, "0.000468 USD rounds to 0.00");
    let end = messages.last().unwrap();
    assert_eq!(
        end["data"],
        json!({ "status": "END", "isComplete": true, "session_id": session_id })
    );

    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["status"], "completed");
    assert_eq!(saved["ui_state"]["selectedMode"], "agent");
    let texts: Vec<_> = saved["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["sender"].clone(), m["text"].clone()))
        .collect();
    assert_eq!(
        texts,
        vec![
            (json!("user"), json!("Why is checkout down?")),
            (json!("assistant"), json!(answer))
        ]
    );
    let sent = model.requests();
    assert_eq!(
        sent[0]["messages"].as_array().unwrap().last().unwrap()["content"],
        "Why is checkout down?"
    );

    // A completed session takes a new question: the conversation goes on with its context.
    model.push(Reply::text("Yes."));
    client.ask(&session_id, "Still down?", json!({})).await;
    let again = client.until_end().await;
    assert_eq!(again.last().unwrap()["data"]["isComplete"], true);
    let context = model.requests()[1]["messages"].clone();
    assert!(
        context.to_string().contains("Roll back first."),
        "earlier answer is in the context"
    );
}

#[tokio::test]
async fn tool_arguments_that_are_not_an_object_are_reported_not_run() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::tool_call("search_incidents", json!([1, 2])));
    model.push(Reply::text("Those arguments were wrong."));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Any incidents?", json!({})).await;
    let messages = client.until_end().await;
    let calls = of_type(&messages, "tool_call");
    assert_eq!(calls.len(), 2, "{messages:#?}");
    for call in &calls {
        assert_eq!(call["data"]["input"], json!({ "raw": [1, 2] }), "{call}");
    }
    assert_eq!(calls[1]["data"]["status"], "error");
    assert!(of_type(&messages, "tool_result").is_empty(), "the tool did not run");

    client
        .ask(
            &session_id,
            "run it",
            json!({ "direct_tool_call": { "tool_name": "search_incidents", "input": "abc" } }),
        )
        .await;
    let messages = client.until_end().await;
    let calls = of_type(&messages, "tool_call");
    assert_eq!(calls[1]["data"]["input"], json!({ "raw": "abc" }), "{messages:#?}");
    assert_eq!(calls[1]["data"]["status"], "error");
}

#[tokio::test]
async fn a_nul_character_from_the_model_is_neither_streamed_nor_stored() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("Hello\u{0}World. Bye."));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Greet me", json!({})).await;
    let messages = client.until_end().await;
    assert_eq!(chunks(&messages).concat(), "HelloWorld. Bye.");
    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["messages"][1]["text"], "HelloWorld. Bye.");
}

#[tokio::test]
async fn a_tool_round_reports_running_then_success_and_its_result() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::tool_call("search_incidents", json!({ "query": "checkout" })));
    model.push(Reply::text("No checkout incident is on record."));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Any checkout incidents?", json!({})).await;
    let messages = client.until_end().await;

    let calls = of_type(&messages, "tool_call");
    assert_eq!(calls.len(), 2, "{messages:#?}");
    assert_eq!(calls[0]["data"]["status"], "running");
    assert_eq!(calls[1]["data"]["status"], "success");
    assert_eq!(calls[0]["data"]["tool_call_id"], calls[1]["data"]["tool_call_id"]);
    assert_eq!(calls[1]["data"]["tool_name"], "search_incidents");
    assert_eq!(calls[1]["data"]["input"], json!({ "query": "checkout" }));
    assert!(calls[0]["data"]["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(calls[1]["data"]["output"], "[]");
    let results = of_type(&messages, "tool_result");
    assert_eq!(results[0]["data"]["result"], json!([]));

    let second = &model.requests()[1]["messages"];
    let tool_message = second.as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_message["content"], "[]");

    let saved = session(&app, &user, &session_id).await;
    let assistant = &saved["messages"][1];
    assert_eq!(assistant["text"], "No checkout incident is on record.");
    assert_eq!(
        assistant["tool_calls"],
        json!([{ "tool_name": "search_incidents", "input": { "query": "checkout" }, "output": "[]" }])
    );
}

/// Text the model writes before it calls a tool is read before the call's events, even when it
/// ends with no whitespace to show that its sentence is over.
#[tokio::test]
async fn text_written_before_a_tool_call_is_sent_before_the_call() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("Let me look.").with_tool_call("search_incidents", json!({ "query": "checkout" })));
    model.push(Reply::text("Nothing on record."));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Any checkout incidents?", json!({})).await;
    let messages = client.until_end().await;

    let position = |found: &dyn Fn(&Value) -> bool| messages.iter().position(found).expect("in the reply");
    let first_call = position(&|message| message["type"] == "tool_call");
    let look = position(&|message| message["data"]["text"] == "Let me look." && message["data"]["is_chunk"] == true);
    assert!(look < first_call, "{messages:#?}");
    assert_eq!(chunks(&messages).concat(), "Let me look.Nothing on record.");
}

#[tokio::test]
async fn a_mutating_command_waits_for_confirmation_and_runs_only_when_approved() {
    let model = FakeOpenAi::start().await;
    let command = json!({ "command": "kubectl delete pod checkout-1 -n shop" });
    model.push(Reply::tool_call("cloud_cli", command.clone()));
    model.push(Reply::text("Deleted."));
    model.push(Reply::tool_call("cloud_cli", command.clone()));
    model.push(Reply::text("Left it alone."));
    let app = app_with_model(&model, Some(fake_cli())).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    for (approved, status) in [(true, "success"), (false, "error")] {
        client.ask(&session_id, "Delete the checkout pod", json!({})).await;
        let request = loop {
            let message = client.next().await;
            if message["type"] == "confirmation_request" {
                break message;
            }
        };
        assert_eq!(request["data"]["action"], "cloud_cli");
        assert_eq!(request["data"]["details"]["command"], command["command"]);
        assert_eq!(request["data"]["resources"], json!(["kubectl"]));
        let confirmation_id = request["data"]["confirmation_id"].as_str().unwrap();
        client
            .send(
                json!({ "type": "confirmation_response", "confirmation_id": confirmation_id,
                          "approved": approved, "user_id": user, "session_id": session_id }),
            )
            .await;
        let done = finished_call(&client.until_end().await);
        assert_eq!(done["data"]["status"], status, "approved: {approved}");
        let output = done["data"]["output"].as_str().unwrap();
        if approved {
            assert!(
                output.contains("kubectl ran: delete pod checkout-1 -n shop"),
                "{output}"
            );
        } else {
            assert!(output.contains("declined"), "{output}");
        }
    }
}

#[tokio::test]
async fn a_cancel_while_a_confirmation_waits_ends_its_tool_call_as_an_error() {
    let model = FakeOpenAi::start().await;
    let command = json!({ "command": "kubectl delete pod checkout-1 -n shop" });
    model.push(Reply::tool_call("cloud_cli", command.clone()));
    let app = app_with_model(&model, Some(fake_cli())).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Delete the checkout pod", json!({})).await;
    let mut seen = Vec::new();
    loop {
        let message = client.next().await;
        let asked = message["type"] == "confirmation_request";
        seen.push(message);
        if asked {
            break;
        }
    }
    client
        .send(json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": user }))
        .await;
    seen.extend(client.until_end().await);
    let calls = of_type(&seen, "tool_call");
    let statuses: Vec<&str> = calls
        .iter()
        .map(|call| call["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["running", "error"], "{calls:?}");
    assert_eq!(calls[0]["data"]["tool_call_id"], calls[1]["data"]["tool_call_id"]);
    assert!(
        calls[1]["data"]["output"].as_str().unwrap().contains("cancelled"),
        "{calls:?}"
    );
    let end = seen.last().unwrap();
    assert_eq!(end["data"]["isComplete"], false, "{end}");
}

#[tokio::test]
async fn ask_mode_refuses_mutating_commands_with_read_only_mode() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::tool_call(
        "cloud_cli",
        json!({ "command": "kubectl delete pod checkout-1" }),
    ));
    model.push(Reply::text("I cannot do that in ask mode."));
    let app = app_with_model(&model, Some(fake_cli())).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client
        .ask(&session_id, "Delete the pod", json!({ "mode": "ask" }))
        .await;
    let messages = client.until_end().await;

    let refusal = of_type(&messages, "error")
        .into_iter()
        .find(|error| error["data"]["code"] == "READ_ONLY_MODE")
        .expect("a READ_ONLY_MODE error");
    assert_eq!(refusal["data"]["session_id"], session_id);
    assert!(of_type(&messages, "confirmation_request").is_empty());
    let done = of_type(&messages, "tool_call").into_iter().last().unwrap().clone();
    assert_eq!(done["data"]["status"], "error");
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true);
}

#[tokio::test]
async fn cancel_stops_the_stream_saves_the_partial_answer_and_closes_the_session() {
    let SlowReply {
        app,
        user,
        session_id,
        answer: long,
        _model,
    } = slow_reply(40, Duration::from_millis(30)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    client
        .send(json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": user }))
        .await;
    let messages = client.until_end().await;
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], false);
    assert!(
        of_type(&messages, "message")
            .iter()
            .all(|message| message["data"]["is_complete"] != true),
        "no complete message after a cancel"
    );

    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["status"], "cancelled");
    let partial = saved["messages"][1]["text"].as_str().unwrap();
    assert!(
        !partial.is_empty() && partial.len() < long.len(),
        "one consolidated partial message"
    );
    let put = app
        .send_as(
            &user,
            Method::PUT,
            &format!("/chat_api/sessions/{session_id}"),
            Some(&json!({ "title": "x" })),
        )
        .await;
    assert_eq!(put.status(), 403);

    // The provider billed what it streamed: the cut-short call has its usage row too.
    let mut usage: Option<(Option<String>, i32, i32)> = None;
    for _ in 0..50 {
        usage =
            sqlx::query_as("SELECT error_message, input_tokens, output_tokens FROM llm_usage WHERE session_id = $1")
                .bind(&session_id)
                .fetch_optional(&app.db)
                .await
                .unwrap();
        if usage.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (error, input_tokens, output_tokens) = usage.expect("a usage row for the cancelled call");
    assert!(error.unwrap().contains("cancelled"));
    assert!(input_tokens > 0 && output_tokens > 0, "{input_tokens} {output_tokens}");
}

/// A query sent right after a cancel is not refused as BUSY because of the reply being
/// cancelled: it runs once that reply has wound down, and each reply has one END.
#[tokio::test]
async fn a_query_right_after_a_cancel_runs_once_the_cancelled_reply_has_wound_down() {
    let SlowReply {
        app,
        user,
        session_id,
        _model,
        ..
    } = slow_reply(40, Duration::from_millis(30)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    client
        .send(json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": user }))
        .await;
    client.ask(&session_id, "And now?", json!({})).await;

    let cancelled = client.until_end().await;
    assert!(of_type(&cancelled, "error").is_empty(), "{cancelled:#?}");
    assert_eq!(cancelled.last().unwrap()["data"]["isComplete"], false);
    let answered = client.until_end().await;
    assert!(of_type(&answered, "error").is_empty(), "{answered:#?}");
    assert_eq!(chunks(&answered).concat(), "You said: And now?");
    assert_eq!(
        answered.last().unwrap()["data"],
        json!({ "status": "END", "isComplete": true, "session_id": session_id })
    );

    let saved = session(&app, &user, &session_id).await;
    let senders: Vec<&str> = saved["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["sender"].as_str().unwrap())
        .collect();
    assert_eq!(senders, ["user", "assistant", "user", "assistant"], "{saved}");
    assert_eq!(saved["messages"][2]["text"], "And now?");
    assert_eq!(saved["status"], "completed");
}

/// Once a socket speaks for another user, the first user's reply (which runs on and is saved)
/// no longer reaches it.
#[tokio::test]
async fn a_socket_that_sends_init_as_another_user_hears_no_more_of_the_first_users_reply() {
    let SlowReply {
        app,
        user,
        session_id,
        answer,
        _model,
    } = slow_reply(40, Duration::from_millis(30)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    client.send(json!({ "type": "init", "user_id": "someone-else" })).await;
    while client.next().await["data"]["status"] != "START" {}
    let replying = session_id.parse().unwrap();
    eventually("the first user's reply to end", || async {
        (!app.state.reply_turns.is_running(replying)).then_some(())
    })
    .await;
    // Anything of that reply would have been queued for the socket before this probe's answer.
    let probe = Uuid::new_v4().to_string();
    client
        .send(json!({ "type": "control", "action": "cancel", "session_id": probe, "user_id": "someone-else" }))
        .await;
    let heard = client.until_end().await;
    assert_eq!(heard[0]["data"]["code"], "NOTHING_TO_CANCEL", "{heard:#?}");
    assert_eq!(heard.len(), 2, "nothing but the probe's answer: {heard:#?}");

    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["status"], "completed");
    assert_eq!(saved["messages"][1]["text"], answer.as_str());
}

/// A session deleted while its reply streams: the reply ends unfinished, and the deletion the user
/// asked for is no error.
#[tokio::test]
async fn deleting_a_session_while_it_answers_ends_the_reply_unfinished() {
    let logs = CapturedLogs::start();
    let SlowReply {
        app,
        user,
        session_id,
        _model,
        ..
    } = slow_reply(40, Duration::from_millis(30)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    let deleted = app
        .send_as(&user, Method::DELETE, &format!("/chat_api/sessions/{session_id}"), None)
        .await;
    assert_eq!(deleted.status(), 200);
    let messages = client.until_end().await;

    assert_eq!(
        messages.last().unwrap()["data"],
        json!({ "status": "END", "isComplete": false, "session_id": session_id })
    );
    assert!(
        of_type(&messages, "message")
            .iter()
            .all(|message| message["data"]["is_complete"] != true),
        "{messages:#?}"
    );
    let logged = logs.text();
    assert!(logged.contains("deleted while its reply was written"), "{logged}");
    assert!(!logged.lines().any(|line| line.contains("ERROR")), "{logged}");
}

#[tokio::test]
async fn limits_too_long_messages_and_the_sixth_message_in_a_minute() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    // Over the limit in tokens, then over it in characters only (~11,250 tokens of one letter).
    for too_long in ["incident ".repeat(20_500), "a".repeat(90_000)] {
        client.ask(&session_id, &too_long, json!({})).await;
        let error = client.refused(&session_id).await;
        assert_eq!(error["data"]["severity"], "error");
        assert_eq!(error["data"]["code"], "MESSAGE_TOO_LONG");
        let text = error["data"]["text"].as_str().unwrap();
        assert!(text.contains("too long") && text.contains("20,000 tokens"), "{text}");
    }
    assert_eq!(
        session(&app, &user, &session_id).await["messages"],
        json!([]),
        "nothing was processed"
    );

    for _ in 0..3 {
        client.ask("not-a-session", "hello", json!({})).await;
        assert_eq!(
            client.refused("not-a-session").await["data"]["code"],
            "INVALID_SESSION_ID"
        );
    }
    client.ask(&session_id, "hello", json!({})).await;
    let sixth = client.refused(&session_id).await;
    assert_eq!(sixth["data"]["code"], "RATE_LIMITED");
    assert!(sixth["data"]["text"].as_str().unwrap().contains("wait"), "{sixth}");
}

#[tokio::test]
async fn every_refused_query_still_ends_with_status_end() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "  ", json!({})).await;
    assert_eq!(client.refused(&session_id).await["data"]["code"], "EMPTY_QUERY");

    client.ask(&session_id, "hello", json!({ "mode": "write" })).await;
    let malformed = client.refused(&session_id).await;
    assert_eq!(malformed["data"]["code"], "INVALID_QUERY");
    assert!(
        malformed["data"]["text"].as_str().unwrap().contains("mode"),
        "{malformed}"
    );

    let attachment = json!({ "filename": "notes.exe", "file_type": "application/x-msdownload", "file_data": "AAAA" });
    client
        .ask(&session_id, "look at this", json!({ "attachments": [attachment] }))
        .await;
    assert_eq!(client.refused(&session_id).await["data"]["code"], "INVALID_ATTACHMENT");

    assert_eq!(session(&app, &user, &session_id).await["messages"], json!([]));
}

#[tokio::test]
async fn server_paths_reach_only_the_sessions_own_files() {
    let app = spawn_app().await;
    let (owner, stranger) = (app.new_user().await.id, app.new_user().await.id);
    let (own_session, strangers_session) = (new_session(&app, &owner).await, new_session(&app, &stranger).await);
    let data_dir = &app.state.config.data_dir;
    let own_dir = data_dir.join("sessions").join(&own_session);
    std::fs::create_dir_all(own_dir.join("workspace")).unwrap();
    std::fs::write(own_dir.join("workspace/shot.png"), b"own picture").unwrap();
    std::fs::write(data_dir.join("keep-out.png"), b"data directory").unwrap();
    let strangers_dir = data_dir.join("sessions").join(&strangers_session);
    std::fs::create_dir_all(&strangers_dir).unwrap();
    std::fs::write(strangers_dir.join("theirs.png"), b"someone else's").unwrap();
    let server_file = |path: &str| {
        json!({ "attachments": [{ "filename": "shot.png", "file_type": "image/png", "file_data": "",
                                  "is_server_path": true, "server_path": path }] })
    };
    let mut client = Client::connect(&app, &owner).await;

    for outside in [
        "keep-out.png".to_owned(),
        "../../keep-out.png".to_owned(),
        format!("../{strangers_session}/theirs.png"),
    ] {
        client.ask(&own_session, "what is this?", server_file(&outside)).await;
        let refusal = client.refused(&own_session).await;
        assert_eq!(refusal["data"]["code"], "INVALID_ATTACHMENT", "{outside}: {refusal}");
    }
    assert_eq!(session(&app, &owner, &own_session).await["messages"], json!([]));

    client
        .ask(&own_session, "what is this?", server_file("workspace/shot.png"))
        .await;
    client.until_end().await;
    let stored = session(&app, &owner, &own_session).await;
    let image = stored["messages"][0]["images"][0]["data"].as_str().unwrap();
    let decoded = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, image).unwrap();
    assert_eq!(decoded, b"own picture");
}

#[tokio::test]
async fn a_second_socket_cannot_start_a_reply_in_a_session_that_is_answering() {
    let SlowReply {
        app,
        user,
        session_id,
        answer: long,
        _model,
    } = slow_reply(10, Duration::from_millis(25)).await;
    let mut first = Client::connect(&app, &user).await;
    let mut second = Client::connect(&app, &user).await;

    first.ask_long_question(&session_id).await;
    second.ask(&session_id, "Me too", json!({})).await;
    let refusal = second.refused(&session_id).await;
    assert_eq!(refusal["data"]["code"], "BUSY", "{refusal}");
    first.until_end().await;

    let stored = session(&app, &user, &session_id).await;
    let texts: Vec<&str> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Tell me everything", long.as_str()], "{stored}");
}

/// A stranger naming a session that is answering learns no more than when it is idle: the
/// session is not found, not busy.
#[tokio::test]
async fn another_users_query_into_a_session_that_is_answering_finds_no_session() {
    let SlowReply {
        app,
        user,
        session_id,
        _model,
        ..
    } = slow_reply(10, Duration::from_millis(25)).await;
    let stranger = app.new_user().await.id;
    let mut owner = Client::connect(&app, &user).await;
    let mut other = Client::connect(&app, &stranger).await;

    owner.ask_long_question(&session_id).await;
    other.ask(&session_id, "What are you saying?", json!({})).await;
    let refusal = other.refused(&session_id).await;
    assert_eq!(refusal["data"]["code"], "SESSION_NOT_FOUND", "{refusal}");
    let heard = owner.until_end().await;
    assert!(
        heard.iter().all(|message| message["type"] != "error"),
        "the owner hears nothing of it: {heard:?}"
    );
}

#[tokio::test]
async fn malformed_and_mismatched_queries_count_against_the_rate() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;
    for _ in 0..3 {
        client
            .send(json!({ "query": 42, "user_id": user, "session_id": session_id }))
            .await;
        assert_eq!(client.refused(&session_id).await["data"]["code"], "INVALID_QUERY");
    }
    for _ in 0..2 {
        client
            .send(json!({ "query": "hello", "user_id": "someone-else", "session_id": session_id }))
            .await;
        assert_eq!(client.refused(&session_id).await["data"]["code"], "USER_MISMATCH");
    }
    client.ask(&session_id, "hello", json!({})).await;
    assert_eq!(client.refused(&session_id).await["data"]["code"], "RATE_LIMITED");
}

#[tokio::test]
async fn only_the_asker_cancels_a_reply() {
    let SlowReply {
        app,
        user,
        session_id,
        answer: _,
        _model,
    } = slow_reply(10, Duration::from_millis(25)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    let cancel =
        |user_id: &str| json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": user_id });
    client.send(cancel("someone-else")).await;
    let mut seen = Vec::new();
    let mut refused = None;
    while refused.is_none() {
        let message = client.next().await;
        if message["type"] == "error" {
            refused = Some(message.clone());
        }
        seen.push(message);
    }
    assert_eq!(refused.unwrap()["data"]["code"], "USER_MISMATCH");

    // The socket now speaks for another user, who cannot cancel the first one's reply, and no
    // longer sees it: the refusal has an END of its own.
    client.send(json!({ "type": "init", "user_id": "someone-else" })).await;
    client.send(cancel("someone-else")).await;
    // `next` fails the test when no such warning comes within its timeout.
    loop {
        let message = client.next().await;
        seen.push(message.clone());
        if message["data"]["code"] == "NOTHING_TO_CANCEL" {
            break;
        }
    }
    let end = client.next().await;
    assert_eq!(end["data"]["isComplete"], false, "{end}");
    // The first refusal did not end the reply: no END came before this one.
    assert!(seen.iter().all(|m| m["data"]["status"] != "END"), "{seen:#?}");
    // Polled within the chat endpoints' budget (20 a minute).
    let mut status = Value::Null;
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        status = session(&app, &user, &session_id).await["status"].clone();
        if status == "completed" || status == "cancelled" {
            break;
        }
    }
    assert_eq!(status, "completed", "the reply ran to its end");
}

#[tokio::test]
async fn a_stopping_service_saves_the_reply_it_cuts_short_and_says_goodbye() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let SlowReply {
        app,
        user,
        session_id,
        answer: _,
        _model,
    } = slow_reply(40, Duration::from_millis(25)).await;
    let stopping = app.spawn_beside(|_| {}).await;
    let mut client = Client::connect_to(stopping.ws_addr, &user).await;

    client.ask_long_question(&session_id).await;
    drop(stopping);

    let mut streamed = String::new();
    let end = loop {
        let message = client.next().await;
        if message["type"] == "message" && message["data"]["is_chunk"] == true {
            streamed.push_str(message["data"]["text"].as_str().unwrap());
        }
        if message["type"] == "status" {
            break message;
        }
    };
    assert_eq!(end["data"]["isComplete"], false, "{end}");
    let goodbye = tokio::time::timeout(Duration::from_secs(10), client.socket.next())
        .await
        .expect("a close frame");
    match goodbye {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Away),
        other => panic!("expected Close 1001, got {other:?}"),
    }
    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["status"], "cancelled", "{saved}");
    let partial = saved["messages"][1]["text"].as_str().unwrap();
    assert!(partial.starts_with("First sentence arrives."), "{saved}");
}

#[tokio::test]
async fn a_burst_into_a_busy_session_is_refused_and_counts_against_the_rate() {
    let SlowReply {
        app,
        user,
        session_id,
        answer: _,
        _model,
    } = slow_reply(10, Duration::from_millis(25)).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask_long_question(&session_id).await;
    // Five more while the first is answered: the bucket (5 a minute) has four tokens left.
    for _ in 0..5 {
        client.ask(&session_id, "And now?", json!({})).await;
    }
    let (mut busy, mut limited, mut refused_ends) = (0, 0, 0);
    loop {
        let message = client.next().await;
        match (message["type"].as_str(), message["data"]["isComplete"].as_bool()) {
            (Some("error"), _) if message["data"]["code"] == "BUSY" => busy += 1,
            (Some("error"), _) => {
                assert_eq!(message["data"]["code"], "RATE_LIMITED", "{message}");
                assert!(message["data"]["text"].as_str().unwrap().contains("wait"), "{message}");
                limited += 1;
            }
            (Some("status"), Some(false)) => refused_ends += 1,
            (Some("status"), Some(true)) => break,
            _ => {}
        }
    }
    assert_eq!(
        (busy, limited, refused_ends),
        (4, 1, 1),
        "BUSY sends no END (the running reply's END ends it); the query over the rate gets its own"
    );
}

#[tokio::test]
async fn a_model_failure_ends_with_an_error_and_an_incomplete_end() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::status(400));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "Why is checkout down?", json!({})).await;
    let messages = client.until_end().await;

    let errors = of_type(&messages, "error");
    assert_eq!(errors.len(), 1, "{messages:#?}");
    assert_eq!(errors[0]["data"]["code"], "MODEL_ERROR");
    assert_eq!(
        messages.last().unwrap()["data"],
        json!({ "status": "END", "isComplete": false, "session_id": session_id })
    );
    assert_eq!(session(&app, &user, &session_id).await["status"], "active");
}

#[tokio::test]
async fn a_session_that_cannot_be_read_still_ends_the_query() {
    let app = spawn_app().await;
    let mut client = Client::connect(&app, "u-1").await;
    app.take_database_away().await;

    let session_id = Uuid::new_v4().to_string();
    client.ask(&session_id, "hello", json!({})).await;
    let error = client.refused(&session_id).await;
    assert!(error["data"]["text"].as_str().unwrap().contains("try again"), "{error}");
}

#[tokio::test]
async fn without_a_model_the_built_in_assistant_answers_from_the_incidents() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client.ask(&session_id, "anything about checkout?", json!({})).await;
    let messages = client.until_end().await;

    let complete = of_type(&messages, "message").into_iter().last().unwrap().clone();
    let text = complete["data"]["text"].as_str().unwrap();
    assert!(
        text.contains("built-in assistant") && text.contains("checkout"),
        "{text}"
    );
    assert_eq!(of_type(&messages, "tool_call").len(), 2);
    assert!(of_type(&messages, "usage_info").is_empty(), "no model, no cost");
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true);
}

#[tokio::test]
async fn an_unused_session_id_starts_a_session_of_the_asker() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("Checkout is healthy."));
    model.push(Reply::text("Still healthy."));
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let mut client = Client::connect(&app, &user).await;
    let session_id = Uuid::new_v4().to_string();

    client
        .ask(
            &session_id,
            "Is checkout down?",
            json!({ "ui_state": { "selectedMode": "ask" } }),
        )
        .await;
    let messages = client.until_end().await;

    assert_eq!(chunks(&messages).concat(), "Checkout is healthy.");
    assert!(of_type(&messages, "error").is_empty(), "{messages:#?}");
    assert_eq!(
        messages.last().unwrap()["data"],
        json!({ "status": "END", "isComplete": true, "session_id": session_id })
    );
    let saved = session(&app, &user, &session_id).await;
    assert_eq!(saved["id"], session_id);
    assert_eq!(saved["title"], "Is checkout down?");
    assert_eq!(saved["status"], "completed");
    assert_eq!(saved["ui_state"]["selectedMode"], "ask");
    assert_eq!(saved["messages"].as_array().unwrap().len(), 2, "{saved}");

    // From then on it is an ordinary session: the conversation goes on with its context.
    client.ask(&session_id, "And now?", json!({})).await;
    assert_eq!(client.until_end().await.last().unwrap()["data"]["isComplete"], true);
    assert!(model.requests()[1]["messages"]
        .to_string()
        .contains("Checkout is healthy."));
    assert_eq!(
        session(&app, &user, &session_id).await["messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

#[tokio::test]
async fn sessions_of_others_and_deleted_sessions_are_refused_with_an_end() {
    let app = spawn_app().await;
    let owner = app.new_user().await.id;
    let other = app.new_user().await.id;
    let session_id = app
        .create_session(
            &owner,
            &json!({ "title": "secret", "messages": [{ "sender": "user", "text": "the root password is hunter2" }] }),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut client = Client::connect(&app, &other).await;

    client.ask(&session_id, "hello", json!({})).await;
    let error = client.refused(&session_id).await;
    assert_eq!(error["data"]["code"], "SESSION_NOT_FOUND", "{error}");
    assert!(!error.to_string().contains("hunter2"), "{error}");

    let deleted = new_session(&app, &other).await;
    let response = app
        .send_as(&other, Method::DELETE, &format!("/chat_api/sessions/{deleted}"), None)
        .await;
    assert_eq!(response.status(), 200);
    client.ask(&deleted, "hello again", json!({})).await;
    assert_eq!(client.refused(&deleted).await["data"]["code"], "SESSION_NOT_FOUND");

    client
        .send(json!({ "query": "hello", "user_id": owner, "session_id": session_id }))
        .await;
    assert_eq!(client.refused(&session_id).await["data"]["code"], "USER_MISMATCH");
    let saved = session(&app, &owner, &session_id).await;
    assert_eq!(saved["messages"].as_array().unwrap().len(), 1, "untouched: {saved}");
    assert_eq!(saved["status"], "active");
}

#[tokio::test]
async fn direct_tool_calls_bypass_the_model() {
    let model = FakeOpenAi::start().await;
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    client
        .ask(
            &session_id,
            "",
            json!({ "direct_tool_call": { "tool_name": "recent_deployments", "input": { "hours": 2 } } }),
        )
        .await;
    let messages = client.until_end().await;

    assert!(model.requests().is_empty(), "the model was not asked");
    let results = of_type(&messages, "tool_result");
    assert_eq!(results[0]["data"]["tool_name"], "recent_deployments");
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true);
}

/// Where no CLI is configured, a command that would need a confirmation fails at once: no
/// confirmation is asked for a tool that cannot run.
#[tokio::test]
async fn an_unconfigured_cloud_cli_is_refused_before_any_confirmation() {
    let model = FakeOpenAi::start().await;
    let app = app_with_model(&model, None).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    let command = "aws ec2 terminate-instances --instance-ids i-1";
    let (done, asked) = run_cli_approving(&mut client, &session_id, command).await;
    assert!(!asked, "no confirmation for a tool that cannot run");
    assert_eq!(done["data"]["status"], "error", "{done}");
    assert!(
        done["data"]["output"].as_str().unwrap().contains("not configured"),
        "{done}"
    );
}

/// Asks for `command` through the cloud command tool directly, bypassing the model.
async fn ask_cli(client: &mut Client, session_id: &str, command: &str) {
    client
        .ask(
            session_id,
            "",
            json!({ "direct_tool_call": { "tool_name": "cloud_cli", "input": { "command": command } } }),
        )
        .await;
}

/// The tool call of a reply's messages once it finished (`success` or `error`).
fn finished_call(messages: &[Value]) -> Value {
    of_type(messages, "tool_call")
        .into_iter()
        .find(|call| call["data"]["status"] != "running")
        .expect("the call finished")
        .clone()
}

/// Runs `command` through the cloud command tool directly and returns the finished tool call.
async fn run_cli(client: &mut Client, session_id: &str, command: &str) -> Value {
    ask_cli(client, session_id, command).await;
    finished_call(&client.until_end().await)
}

#[tokio::test]
async fn cloud_commands_act_with_the_users_own_connected_credentials() {
    let cli_dir = fake_cli();
    let (app, fakes) = spawn_with_fakes_and(|config| config.agent_cli_dir = Some(cli_dir)).await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    let refused = run_cli(&mut client, &session_id, "aws sts get-caller-identity").await;
    assert_eq!(refused["data"]["status"], "error", "{refused}");
    assert!(
        refused["data"]["output"].as_str().unwrap().contains("cloud_b"),
        "{refused}"
    );

    let (_, external_id) = call(&app, &user, Method::GET, "/cloud_b/external-id", None).await;
    let external_id = external_id["external_id"].as_str().unwrap().to_owned();
    fakes.sts.add_role(&ROLE_ARN.parse::<RoleArn>().unwrap(), &external_id);
    let (status, body) = call(
        &app,
        &user,
        Method::POST,
        "/cloud_b/auth",
        Some(json!({ "userId": user, "role_arn": ROLE_ARN, "external_id": external_id })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let issued = fakes.sts.issued().pop().expect("STS issued credentials");

    let ran = run_cli(&mut client, &session_id, "aws sts get-caller-identity").await;
    assert_eq!(ran["data"]["status"], "success", "{ran}");
    let output = ran["data"]["output"].as_str().unwrap();
    assert!(
        output.contains(&format!("key: {} secret: given token: given", issued.access_key_id)),
        "{output}"
    );

    let other = app.new_user().await.id;
    let other_session = new_session(&app, &other).await;
    let mut other_client = Client::connect(&app, &other).await;
    let refused = run_cli(&mut other_client, &other_session, "aws sts get-caller-identity").await;
    assert_eq!(
        refused["data"]["status"], "error",
        "another user never acts with them: {refused}"
    );
}

/// Runs `command` through the cloud command tool directly, approving any confirmation it asks
/// for; returns the finished tool call and whether a confirmation was asked.
async fn run_cli_approving(client: &mut Client, session_id: &str, command: &str) -> (Value, bool) {
    ask_cli(client, session_id, command).await;
    let mut asked = false;
    let mut messages = Vec::new();
    loop {
        let message = client.next().await;
        if message["type"] == "confirmation_request" {
            asked = true;
            let confirmation_id = message["data"]["confirmation_id"].clone();
            client
                .send(
                    json!({ "type": "confirmation_response", "confirmation_id": confirmation_id,
                              "approved": true, "user_id": client.user, "session_id": session_id }),
                )
                .await;
        }
        let end = message["type"] == "status" && message["data"]["status"] == "END";
        messages.push(message);
        if end {
            break;
        }
    }
    (finished_call(&messages), asked)
}

#[tokio::test]
async fn cloud_commands_refuse_connections_that_are_not_connected_until_reconnected() {
    let cli_dir = fake_cli();
    let (app, fakes) = spawn_with_fakes_and(|config| {
        config.agent_cli_dir = Some(cli_dir);
        config.ws_messages_per_minute = 100;
    })
    .await;
    let user = app.new_user().await.id;
    let session_id = new_session(&app, &user).await;
    let mut client = Client::connect(&app, &user).await;

    let (_, external_id) = call(&app, &user, Method::GET, "/cloud_b/external-id", None).await;
    let external_id = external_id["external_id"].as_str().unwrap().to_owned();
    fakes.sts.add_role(&ROLE_ARN.parse::<RoleArn>().unwrap(), &external_id);
    let cloud_b_auth = json!({ "userId": user, "role_arn": ROLE_ARN, "external_id": external_id });
    let (status, body) = call(&app, &user, Method::POST, "/cloud_b/auth", Some(cloud_b_auth.clone())).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&app, &user, Method::POST, "/cloud_c/login", Some(cloud_c_login(&user))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = connect_cloud_d(&app, &user).await;
    assert_eq!(status, 200, "{body}");

    let connected = [
        ("cloud_b", "123456789012", "aws sts get-caller-identity", "key: "),
        ("cloud_c", SUBSCRIPTION_ID, "az vm list", "subscription: "),
        ("cloud_d", ORGANIZATION, "scw instance server list", "organization: "),
    ];
    for (provider, _, command, shown) in connected {
        let (ran, _) = run_cli_approving(&mut client, &session_id, command).await;
        assert_eq!(ran["data"]["status"], "success", "{provider}: {ran}");
        assert!(ran["data"]["output"].as_str().unwrap().contains(shown), "{ran}");
    }
    // An account the command names must be a connected one too.
    let (refused, _) = run_cli_approving(
        &mut client,
        &session_id,
        "az vm list --subscription 99999999-2222-4333-8444-555566667777",
    )
    .await;
    assert_eq!(refused["data"]["status"], "error", "{refused}");
    assert!(
        refused["data"]["output"].as_str().unwrap().contains("not connected"),
        "{refused}"
    );

    for (provider, account_id, _, _) in connected {
        let delete = json!({ "provider": provider, "account_id": account_id });
        let (status, body) = call(&app, &user, Method::DELETE, "/api/user_connections", Some(delete)).await;
        assert_eq!(status, 200, "{body}");
    }
    let destructive = [
        ("cloud_b", "aws ec2 terminate-instances --instance-ids i-1"),
        ("cloud_c", "az vm delete --name web-1 --yes"),
        (
            "cloud_d",
            "scw instance server delete 11111111-2222-4333-8444-555566667777",
        ),
    ];
    for ((provider, _, reading, _), (_, changing)) in connected.into_iter().zip(destructive) {
        for command in [reading, changing] {
            let (refused, asked) = run_cli_approving(&mut client, &session_id, command).await;
            assert_eq!(refused["data"]["status"], "error", "{command}: {refused}");
            let output = refused["data"]["output"].as_str().unwrap();
            assert!(
                output.contains(provider) && output.contains("not connected"),
                "{command}: {output}"
            );
            assert!(!output.contains(" ran: "), "the program never ran: {output}");
            assert!(
                !asked,
                "{command}: nothing to confirm for a provider that is not connected"
            );
        }
    }

    // Connecting again (the stored credentials were kept) makes them usable once more.
    let (status, body) = call(&app, &user, Method::POST, "/cloud_b/auth", Some(cloud_b_auth)).await;
    assert_eq!(status, 200, "{body}");
    let (ran, _) = run_cli_approving(&mut client, &session_id, "aws sts get-caller-identity").await;
    assert_eq!(ran["data"]["status"], "success", "{ran}");
    let (refused, _) = run_cli_approving(&mut client, &session_id, "scw instance server list").await;
    assert_eq!(
        refused["data"]["status"], "error",
        "cloud_d is still not connected: {refused}"
    );
}

#[tokio::test]
async fn a_reply_reaches_the_sessions_sockets_on_other_instances() {
    if std::env::var("REDIS_URL").is_err() {
        eprintln!("REDIS_URL not set: the cross-instance fan-out needs Redis");
        return;
    }
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("Nothing is on fire."));
    model.push(Reply::text(
        "Checkout failed its health checks after the deploy. Roll it back first.",
    ));
    let first = app_with_model(&model, None).await;
    let second = first.spawn_beside(|_| {}).await;
    let user = first.new_user().await.id;
    let session_id = new_session(&first, &user).await;
    let mut asker = Client::connect(&first, &user).await;
    let mut watcher = Client::connect_to(second.ws_addr, &user).await;

    // Asking once in the session makes the second instance's socket follow it.
    watcher.ask(&session_id, "Anything on fire?", json!({})).await;
    watcher.until_end().await;

    asker.ask(&session_id, "What about checkout?", json!({})).await;
    let asked = asker.until_end().await;
    let watched = watcher.until_end().await;
    assert_eq!(
        chunks(&asked).concat(),
        "Checkout failed its health checks after the deploy. Roll it back first.",
        "{asked:#?}"
    );
    assert_eq!(
        chunks(&watched),
        chunks(&asked),
        "the other instance's socket saw the same stream"
    );
    let complete = |messages: &[Value]| {
        of_type(messages, "message")
            .into_iter()
            .find(|message| message["data"]["is_complete"] == true)
            .cloned()
    };
    assert_eq!(complete(&watched), complete(&asked));
    assert!(
        watched.iter().all(|message| message["session_id"] == session_id),
        "{watched:#?}"
    );

    let other = first.new_user().await.id;
    let mut stranger = Client::connect_to(second.ws_addr, &other).await;
    stranger.ask(&session_id, "Let me in", json!({})).await;
    let refused = stranger.refused(&session_id).await;
    assert_eq!(
        refused["data"]["code"], "SESSION_NOT_FOUND",
        "another user's session is refused: {refused}"
    );
    model.push(Reply::text("Still rolled back."));
    asker.ask(&session_id, "And now?", json!({})).await;
    asker.until_end().await;
    tokio::time::sleep(Duration::from_millis(200)).await; // time for a leak to arrive
    stranger.send(json!({ "type": "no-such-type" })).await;
    let next = stranger.next().await;
    assert_eq!(next["type"], "error", "the refused asker follows nothing: {next}");
    assert!(next.get("session_id").is_none(), "{next}");
}

#[tokio::test]
async fn the_socket_loop_runs_over_channels_without_a_network() {
    let app = spawn_app().await;
    let (to_server, from_client) =
        futures::channel::mpsc::unbounded::<Result<Message, tokio_tungstenite::tungstenite::Error>>();
    let (to_client, mut from_server) = futures::channel::mpsc::unbounded::<Message>();
    let sink = to_client.sink_map_err(|_| tokio_tungstenite::tungstenite::Error::ConnectionClosed);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let connection = tokio::spawn(vigil::ws::run_connection(
        sink,
        from_client,
        app.state.clone(),
        shutdown.clone(),
    ));

    to_server
        .unbounded_send(Ok(Message::text("{\"type\":\"init\",\"user_id\":\"u-1\"}")))
        .unwrap();
    let reply = from_server.next().await.unwrap();
    assert_eq!(
        reply.into_text().unwrap().as_str(),
        r#"{"type":"status","data":{"status":"START"}}"#
    );
    to_server
        .unbounded_send(Ok(Message::Binary(vec![1, 2].into())))
        .unwrap();
    let reply: Value = serde_json::from_str(from_server.next().await.unwrap().into_text().unwrap().as_str()).unwrap();
    assert_eq!(reply["type"], "error");
    drop(to_server);
    connection.await.unwrap().unwrap();
}
