use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::{connect_async, tungstenite::Message};
use uuid::Uuid;

use crate::helpers::spawn_app;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(socket: &mut Socket) -> Value {
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(5), socket.next())
            .await
            .expect("an answer within 5 s")
            .expect("socket open")
            .expect("valid frame");
        if let Message::Text(text) = frame {
            return serde_json::from_str(&text).expect("server sends JSON");
        }
    }
}

#[tokio::test]
async fn init_is_answered_with_status_start() {
    let app = spawn_app().await;
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    socket
        .send(Message::text(json!({ "type": "init", "user_id": "u-1" }).to_string()))
        .await
        .unwrap();
    assert_eq!(
        next_json(&mut socket).await,
        json!({ "type": "status", "data": { "status": "START" } })
    );
}

#[tokio::test]
async fn messages_before_init_get_an_error_and_the_socket_stays_usable() {
    let app = spawn_app().await;
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    socket.send(Message::text("{not json")).await.unwrap();
    let error = next_json(&mut socket).await;
    assert_eq!(error["type"], "error");
    assert_eq!(error["data"]["severity"], "error");

    socket
        .send(Message::text(
            json!({ "query": "hi", "user_id": "u", "session_id": "s" }).to_string(),
        ))
        .await
        .unwrap();
    let error = next_json(&mut socket).await;
    assert_eq!(error["type"], "error");
    assert_eq!(error["data"]["code"], "INIT_REQUIRED");
    assert_eq!(
        next_json(&mut socket).await["data"],
        json!({ "status": "END", "isComplete": false, "session_id": "s" }),
        "the query is still answered with its END"
    );

    socket
        .send(Message::text(json!({ "type": "init", "user_id": "u" }).to_string()))
        .await
        .unwrap();
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");
}

/// Every message but `init` needs one first, and names the connection's user when it names one.
#[tokio::test]
async fn control_and_confirmations_need_init_and_the_connections_user() {
    let app = spawn_app().await;
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    let session_id = Uuid::new_v4().to_string();
    for early in [
        json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": "u" }),
        json!({ "type": "confirmation_response", "confirmation_id": "c1", "approved": true, "user_id": "u" }),
    ] {
        send_json(&mut socket, early).await;
        let error = next_json(&mut socket).await;
        assert_eq!(
            (error["type"].as_str(), error["data"]["code"].as_str()),
            (Some("error"), Some("INIT_REQUIRED")),
            "{error}"
        );
    }
    send_json(&mut socket, json!({ "type": "init", "user_id": "u" })).await;
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");

    send_json(
        &mut socket,
        json!({ "type": "confirmation_response", "confirmation_id": "c1", "approved": true, "user_id": "someone-else" }),
    )
    .await;
    assert_eq!(next_json(&mut socket).await["data"]["code"], "USER_MISMATCH");
    send_json(
        &mut socket,
        json!({ "type": "confirmation_response", "confirmation_id": "c1", "approved": true, "user_id": "u" }),
    )
    .await;
    let unknown = next_json(&mut socket).await;
    assert!(
        unknown["data"]["text"].as_str().unwrap().contains("no confirmation"),
        "{unknown}"
    );
}

/// A user id no chat session could hold is refused at `init`, as over HTTP; the socket stays usable.
#[tokio::test]
async fn an_init_user_id_over_255_bytes_is_refused() {
    let app = spawn_app().await;
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    send_json(&mut socket, json!({ "type": "init", "user_id": "u".repeat(1_001) })).await;
    let error = next_json(&mut socket).await;
    assert_eq!(error["type"], "error");
    assert!(error["data"]["text"].as_str().unwrap().contains("255"), "{error}");

    send_json(
        &mut socket,
        json!({ "query": "hi", "user_id": "u".repeat(1_001), "session_id": Uuid::new_v4() }),
    )
    .await;
    assert_eq!(
        next_json(&mut socket).await["data"]["code"],
        "INIT_REQUIRED",
        "the refused init set no identity"
    );
    assert_eq!(next_json(&mut socket).await["data"]["status"], "END");

    send_json(&mut socket, json!({ "type": "init", "user_id": "u".repeat(255) })).await;
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");
}

async fn send_json(socket: &mut Socket, message: Value) {
    socket.send(Message::text(message.to_string())).await.unwrap();
}

/// Connects and sends `init` as `user_id`, as a client that knows only the spec does.
async fn connect_as(app: &crate::helpers::TestApp, user_id: &str) -> Socket {
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    send_json(&mut socket, json!({ "type": "init", "user_id": user_id })).await;
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");
    socket
}

/// Every message up to and including the first `status END`.
async fn until_end(socket: &mut Socket) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let message = next_json(socket).await;
        let end = message["type"] == "status" && message["data"]["status"] == "END";
        seen.push(message);
        if end {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_first_query_with_a_fresh_session_id_is_answered_to_the_end() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let mut socket = connect_as(&app, &user).await;
    let session_id = Uuid::new_v4().to_string();

    send_json(
        &mut socket,
        json!({ "query": "Is checkout down?", "user_id": user, "session_id": session_id }),
    )
    .await;
    let messages = until_end(&mut socket).await;

    assert!(
        messages.iter().any(|message| message["type"] == "message"),
        "{messages:#?}"
    );
    assert!(
        messages.iter().all(|message| message["type"] != "error"),
        "{messages:#?}"
    );
    assert_eq!(
        messages.last().unwrap()["data"],
        json!({ "status": "END", "isComplete": true, "session_id": session_id })
    );
}

/// A session id in another spelling of its UUID (upper case, here) is named in its canonical
/// form in every message about it: the reply and the refusals alike.
#[tokio::test]
async fn a_session_id_is_named_in_one_spelling_in_every_message() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let mut socket = connect_as(&app, &user).await;
    let canonical = Uuid::new_v4().to_string();
    let sent = canonical.to_uppercase();

    send_json(
        &mut socket,
        json!({ "query": "  ", "user_id": user, "session_id": sent }),
    )
    .await;
    let refused = until_end(&mut socket).await;
    send_json(
        &mut socket,
        json!({ "query": "Is checkout down?", "user_id": user, "session_id": sent }),
    )
    .await;
    let answered = until_end(&mut socket).await;

    assert_eq!(refused[0]["data"]["code"], "EMPTY_QUERY");
    for message in refused.iter().chain(&answered) {
        if let Some(named) = message.get("session_id") {
            assert_eq!(named, &json!(canonical), "{message}");
        }
    }
    assert_eq!(answered.last().unwrap()["data"]["session_id"], json!(canonical));
}

#[tokio::test]
async fn cancel_with_nothing_running_warns_and_sends_end() {
    let app = spawn_app().await;
    let mut socket = connect_as(&app, "u-1").await;
    let session_id = Uuid::new_v4().to_string();

    send_json(
        &mut socket,
        json!({ "type": "control", "action": "cancel", "session_id": session_id, "user_id": "u-1" }),
    )
    .await;

    let warning = next_json(&mut socket).await;
    assert_eq!(warning["type"], "error");
    assert_eq!(warning["data"]["severity"], "warning");
    assert_eq!(warning["data"]["code"], "NOTHING_TO_CANCEL");
    assert_eq!(
        next_json(&mut socket).await,
        json!({ "type": "status", "session_id": session_id,
                "data": { "status": "END", "isComplete": false, "session_id": session_id } })
    );
}

#[tokio::test]
async fn a_message_over_80000_characters_is_too_long_even_in_few_tokens() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let mut socket = connect_as(&app, &user).await;
    let session_id = Uuid::new_v4().to_string();

    send_json(
        &mut socket,
        json!({ "query": "a".repeat(90_000), "user_id": user, "session_id": session_id }),
    )
    .await;

    let error = next_json(&mut socket).await;
    assert_eq!(error["type"], "error");
    assert_eq!(error["data"]["severity"], "error");
    assert_eq!(error["data"]["session_id"], session_id);
    let text = error["data"]["text"].as_str().unwrap();
    assert!(text.contains("too long") && text.contains("20,000 tokens"), "{text}");
    assert_eq!(
        next_json(&mut socket).await["data"],
        json!({ "status": "END", "isComplete": false, "session_id": session_id })
    );
    let listed = app
        .send_as(&user, reqwest::Method::GET, "/chat_api/sessions", None)
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(listed["sessions"], json!([]), "nothing was processed");
}

/// The next frame that is not a text message (the server's Close, or the end of the stream).
async fn next_control(socket: &mut Socket) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(5), socket.next())
            .await
            .expect("an answer within 5 s");
        if !matches!(frame, Some(Ok(Message::Text(_)))) {
            return frame;
        }
    }
}

#[tokio::test]
async fn a_client_close_is_answered_with_a_close_frame() {
    use tokio_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame};

    let app = spawn_app().await;
    let mut socket = connect_as(&app, "closing-user").await;
    let bye = CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    };
    socket.send(Message::Close(Some(bye))).await.unwrap();
    match next_control(&mut socket).await {
        Some(Ok(Message::Close(frame))) => {
            assert!(frame.is_none_or(|frame| frame.code == CloseCode::Normal), "clean close");
        }
        other => panic!("expected the server's Close frame, got {other:?}"),
    }
}

#[tokio::test]
async fn a_frame_too_large_to_read_is_answered_with_close_1009() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let app = spawn_app().await;
    let mut socket = connect_as(&app, "oversize-user").await;
    let huge = json!({ "query": "x".repeat(17 * 1024 * 1024), "user_id": "oversize-user",
                       "session_id": Uuid::new_v4() });
    // The server may close before the client has written the whole frame.
    let _ = socket.send(Message::text(huge.to_string())).await;
    match next_control(&mut socket).await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Size),
        other => panic!("expected Close 1009, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_beyond_the_configured_size_is_answered_with_close_1009() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    // At most about 1 MiB: a 1 KiB attachment base64-encoded, a query at its limit, a 64 KiB body.
    let app = crate::helpers::spawn_app_with(|config| {
        config.attachment_max_bytes = 1024;
        config.max_body_bytes = 64 * 1024;
    })
    .await;
    let mut socket = connect_as(&app, "large-state-user").await;
    let query = json!({ "query": "hello", "user_id": "large-state-user", "session_id": Uuid::new_v4(),
                        "ui_state": { "blob": "x".repeat(2 * 1024 * 1024) } });
    let _ = socket.send(Message::text(query.to_string())).await;
    match next_control(&mut socket).await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Size),
        other => panic!("expected Close 1009, got {other:?}"),
    }
}

/// Past `WS_MAX_CONNECTIONS` a socket is refused with 503 at the handshake (idle sockets without
/// a cap used up the process's file descriptors, and the HTTP API with them); a place freed is
/// taken again.
#[tokio::test]
async fn sockets_past_the_cap_are_refused_until_a_place_frees() {
    use tokio_tungstenite::tungstenite::Error;

    let app = crate::helpers::spawn_app_with(|config| config.ws_max_connections = 2).await;
    let first = connect_as(&app, "u-1").await;
    let _second = connect_as(&app, "u-2").await;
    match connect_async(format!("ws://{}/", app.ws_addr)).await {
        Err(Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap_or_default()).unwrap();
            assert_eq!(body["code"], "service_unavailable");
        }
        other => panic!(
            "a third socket was not refused: {:?}",
            other.map(|(_, response)| response.status())
        ),
    }

    drop(first);
    let mut freed = None;
    for _ in 0..50 {
        if let Ok((socket, _)) = connect_async(format!("ws://{}/", app.ws_addr)).await {
            freed = Some(socket);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut socket = freed.expect("the closed socket's place is taken again");
    send_json(&mut socket, json!({ "type": "init", "user_id": "u-3" })).await;
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");
}

/// A direct tool call is checked before anything is echoed: a name that names no tool is an
/// `error` (quoting at most a little of it), and an input past its bound too. An audit's
/// 100,000-character name came back as more than 1,024 chunks, overflowed the send queue, and
/// the server dropped the sender's socket without a frame.
#[tokio::test]
async fn a_direct_tool_call_naming_no_tool_or_too_large_is_an_error_and_the_socket_stays() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let mut socket = connect_as(&app, &user).await;
    let session_id = Uuid::new_v4().to_string();
    for (call, code) in [
        (json!({ "tool_name": "x".repeat(100_000) }), "UNKNOWN_TOOL"),
        (json!({ "tool_name": "no_such_tool" }), "UNKNOWN_TOOL"),
        (
            json!({ "tool_name": "search_incidents", "input": { "query": "q".repeat(100_000) } }),
            "TOOL_INPUT_TOO_LARGE",
        ),
    ] {
        send_json(
            &mut socket,
            json!({ "query": "", "user_id": user, "session_id": session_id, "direct_tool_call": call }),
        )
        .await;
        let messages = until_end(&mut socket).await;
        assert_eq!(
            messages.len(),
            2,
            "an error and the END, nothing echoed: {messages:.300?}"
        );
        let error = &messages[0];
        assert_eq!(error["type"], "error", "{error:.300}");
        assert_eq!(error["data"]["code"], code, "{error:.300}");
        assert!(error.to_string().len() < 500, "the error is short: {error:.600}");
        assert_eq!(messages[1]["data"]["isComplete"], false);
    }

    // The socket is still usable, and a tool that exists runs.
    send_json(
        &mut socket,
        json!({ "query": "", "user_id": user, "session_id": session_id,
                "direct_tool_call": { "tool_name": "search_incidents", "input": { "query": "checkout" } } }),
    )
    .await;
    let messages = until_end(&mut socket).await;
    assert!(
        messages.iter().any(|message| message["type"] == "tool_result"),
        "{messages:#?}"
    );
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true);
}

/// `init` and every later message read a user id alike, trimmed as `X-User-ID` is over HTTP: after
/// `init` with `" alice "`, a query naming `" alice "` is alice's, not `USER_MISMATCH` (audit).
#[tokio::test]
async fn a_user_id_with_spaces_names_one_user_in_init_queries_and_http() {
    let app = spawn_app().await;
    let mut socket = connect_as(&app, " alice ").await;
    let session_id = Uuid::new_v4().to_string();

    send_json(
        &mut socket,
        json!({ "query": "Is checkout down?", "user_id": " alice ", "session_id": session_id }),
    )
    .await;
    let messages = until_end(&mut socket).await;
    assert!(
        messages.iter().all(|message| message["type"] != "error"),
        "{messages:#?}"
    );
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true);

    send_json(
        &mut socket,
        json!({ "query": "And now?", "user_id": "alice", "session_id": session_id }),
    )
    .await;
    let messages = until_end(&mut socket).await;
    assert_eq!(messages.last().unwrap()["data"]["isComplete"], true, "{messages:#?}");

    let listed = app
        .send_as("alice", reqwest::Method::GET, "/chat_api/sessions", None)
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(listed["sessions"][0]["id"], session_id, "{listed}");
}
