use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::{connect_async, tungstenite::Message};

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
    assert_eq!(next_json(&mut socket).await["type"], "error");

    socket
        .send(Message::text(json!({ "type": "init", "user_id": "u" }).to_string()))
        .await
        .unwrap();
    assert_eq!(next_json(&mut socket).await["data"]["status"], "START");
}
