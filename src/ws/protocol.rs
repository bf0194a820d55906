//! Messages of the chat channel (spec Events) and the per-connection state machine.
//!
//! A connection must start with `init`; until then any other message is answered with an
//! `error` and the connection stays open so the client can still send `init`. Unparseable or
//! unknown messages get an `error` too.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    Init { user_id: String },
}

/// The server envelope: `{type, data, session_id?}`.
#[derive(Debug, Serialize, PartialEq)]
pub struct ServerMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub data: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl ServerMessage {
    pub fn status_start() -> Self {
        Self {
            kind: "status",
            data: json!({ "status": "START" }),
            session_id: None,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            kind: "error",
            data: json!({ "text": text.into(), "severity": "error" }),
            session_id: None,
        }
    }

    pub fn to_frame(&self) -> Message {
        Message::text(serde_json::to_string(self).expect("server messages serialize"))
    }
}

#[derive(Debug, Default)]
pub struct Connection {
    user_id: Option<String>,
}

impl Connection {
    pub fn handle(&mut self, text: &str) -> Vec<ServerMessage> {
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(_) => return vec![ServerMessage::error("message is not valid JSON")],
        };
        if value.get("type").and_then(Value::as_str) == Some("init") {
            return match serde_json::from_value::<ClientMessage>(value) {
                Ok(ClientMessage::Init { user_id }) if !user_id.trim().is_empty() => {
                    self.user_id = Some(user_id);
                    vec![ServerMessage::status_start()]
                }
                _ => vec![ServerMessage::error("init needs a non-empty string user_id")],
            };
        }
        if self.user_id.is_none() {
            return vec![ServerMessage::error("send an init message with your user_id first")];
        }
        vec![ServerMessage::error(
            "chat queries are not available on this server yet",
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_answered_with_start() {
        let mut connection = Connection::default();
        assert_eq!(
            connection.handle(r#"{"type":"init","user_id":"u1"}"#),
            vec![ServerMessage::status_start()]
        );
    }

    #[test]
    fn anything_before_init_is_an_error_and_init_still_works_after() {
        let mut connection = Connection::default();
        let replies = connection.handle(r#"{"query":"hi","user_id":"u1","session_id":"x"}"#);
        assert_eq!(replies[0].kind, "error");
        assert_eq!(connection.handle("not json")[0].kind, "error");
        assert_eq!(connection.handle(r#"{"type":"init"}"#)[0].kind, "error");
        assert_eq!(
            connection.handle(r#"{"type":"init","user_id":"u1"}"#),
            vec![ServerMessage::status_start()]
        );
    }
}
