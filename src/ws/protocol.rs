//! Messages of the chat channel (spec Events): what clients send, parsed strictly enough to give a
//! useful error, and the server's `{type, data, session_id?}` envelope.

use std::borrow::Cow;

use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio_tungstenite::tungstenite::Message;

/// A client message. `init` must come first; a chat query is the one message without `type`.
#[derive(Debug, PartialEq)]
pub enum ClientMessage {
    Init {
        user_id: String,
    },
    Query(Box<ChatQuery>),
    /// `user_id` is checked against the connection's when given.
    Cancel {
        session_id: String,
        user_id: Option<String>,
    },
    /// `user_id` is checked against the connection's when given.
    Confirmation {
        confirmation_id: String,
        approved: bool,
        user_id: Option<String>,
    },
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ChatQuery {
    pub query: String,
    pub user_id: String,
    pub session_id: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub mode: Mode,
    #[serde(default)]
    pub selected_project_id: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: Vec<Attachment>,
    #[serde(default)]
    pub ui_state: Option<Map<String, Value>>,
    #[serde(default)]
    pub direct_tool_call: Option<DirectToolCall>,
}

/// An optional field sent as `null` takes its default, as one left out does.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `agent` may change infrastructure after a confirmation; `ask` is read-only.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Agent,
    Ask,
}

impl Mode {
    /// The credentials a tool may act with in this mode.
    pub fn access(self) -> crate::agent::credentials::Access {
        match self {
            Mode::Agent => crate::agent::credentials::Access::ReadWrite,
            Mode::Ask => crate::agent::credentials::Access::ReadOnly,
        }
    }
}

/// A file sent with a chat query (spec Attachment).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Attachment {
    pub filename: String,
    pub file_type: String,
    pub file_data: String,
    #[serde(default)]
    pub is_server_path: bool,
    #[serde(default)]
    pub server_path: Option<String>,
}

/// Runs one tool without asking the model (this service's shape; the spec leaves it open):
/// `{"tool_name": "search_incidents", "input": {"query": "checkout"}}`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct DirectToolCall {
    pub tool_name: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

fn empty_object() -> Value {
    json!({})
}

#[derive(Debug, PartialEq)]
pub struct ParseError {
    pub text: String,
    /// The session a malformed chat query named: its asker still gets the query's END.
    pub query_session_id: Option<String>,
}

impl ParseError {
    fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            query_session_id: None,
        }
    }
}

impl ClientMessage {
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let text = crate::text::without_nul_escapes(text.as_bytes());
        let value: Value = serde_json::from_slice(&text).map_err(|_| ParseError::new("message is not valid JSON"))?;
        if !value.is_object() {
            return Err(ParseError::new("a message is a JSON object"));
        }
        let kind = match value.get("type") {
            None => None,
            Some(Value::String(kind)) => Some(kind.clone()),
            Some(_) => return Err(ParseError::new("a message's type is a string")),
        };
        match kind.as_deref() {
            Some("init") => {
                let user_id = user_id_field(&value)
                    .ok_or_else(|| ParseError::new("init needs a non-empty string user_id"))?;
                Ok(Self::Init { user_id })
            }
            Some("control") => {
                let action = value.get("action").and_then(Value::as_str).unwrap_or_default();
                if action != "cancel" {
                    return Err(ParseError::new(format!(
                        "unknown control action {action:?}; the one action is \"cancel\""
                    )));
                }
                let session_id = session_id_field(&value).ok_or_else(|| ParseError::new("control needs a session_id"))?;
                let user_id = user_id_field(&value);
                Ok(Self::Cancel { session_id, user_id })
            }
            Some("confirmation_response") => {
                let confirmation_id = string_field(&value, "confirmation_id")
                    .ok_or_else(|| ParseError::new("confirmation_response needs a confirmation_id"))?;
                let approved = value
                    .get("approved")
                    .and_then(Value::as_bool)
                    .ok_or_else(|| ParseError::new("confirmation_response needs a boolean approved"))?;
                Ok(Self::Confirmation {
                    confirmation_id,
                    approved,
                    user_id: user_id_field(&value),
                })
            }
            Some(other) => Err(ParseError::new(format!(
                "unknown message type {other:?}; expected init, control or confirmation_response, or a chat query without type"
            ))),
            None => {
                let session_id = session_id_field(&value);
                let invalid = |text: String| ParseError {
                    text,
                    query_session_id: session_id.clone(),
                };
                let mut query: ChatQuery =
                    serde_path_to_error::deserialize(value).map_err(|error| invalid(query_error(&error)))?;
                // Read as `init`'s user id is (and `X-User-ID` over HTTP), or `" alice "` would be
                // refused as another user than the `" alice "` of the connection's `init`.
                query.user_id = crate::users::normalized_user_id(&query.user_id).to_owned();
                if query.user_id.is_empty() || query.session_id.trim().is_empty() {
                    return Err(invalid("a chat query needs user_id and session_id".into()));
                }
                query.session_id = canonical_session_id(&query.session_id);
                Ok(Self::Query(Box::new(query)))
            }
        }
    }
}

/// A message's `session_id`, as every message about the session names it: a UUID in its
/// canonical form (lowercase, hyphenated), whichever spelling the client sent (`{...}`, upper
/// case, no hyphens), so that the refusals and the reply of one query name it alike; anything
/// else as sent, trimmed.
fn session_id_field(value: &Value) -> Option<String> {
    string_field(value, "session_id").map(|id| canonical_session_id(&id))
}

fn canonical_session_id(raw: &str) -> String {
    let raw = raw.trim();
    raw.parse::<uuid::Uuid>()
        .map_or_else(|_| raw.to_owned(), |id| id.to_string())
}

/// A message's `user_id`, normalized as every user id is ([`crate::users::normalized_user_id`]).
fn user_id_field(value: &Value) -> Option<String> {
    value
        .get("user_id")
        .and_then(Value::as_str)
        .map(crate::users::normalized_user_id)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

fn string_field(value: &Value, name: &str) -> Option<String> {
    value
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
}

fn query_error(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    let inner = error.inner().to_string();
    if path == "." {
        // A missing field: serde names it in the message.
        format!("invalid chat query: {inner}")
    } else {
        format!("invalid chat query: {path}: {inner}")
    }
}

/// The server envelope: `{type, data, session_id?}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ServerMessage {
    #[serde(rename = "type")]
    pub kind: Cow<'static, str>,
    pub data: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl ServerMessage {
    fn new(kind: &'static str, data: Value, session_id: Option<&str>) -> Self {
        Self {
            kind: Cow::Borrowed(kind),
            data,
            session_id: session_id.map(str::to_owned),
        }
    }

    pub fn status_start() -> Self {
        Self::new("status", json!({ "status": "START" }), None)
    }

    pub fn status_end(session_id: &str, is_complete: bool) -> Self {
        Self::new(
            "status",
            json!({ "status": "END", "isComplete": is_complete, "session_id": session_id }),
            Some(session_id),
        )
    }

    /// One streamed piece of the assistant's answer.
    pub fn chunk(session_id: &str, text: &str) -> Self {
        Self::new(
            "message",
            json!({ "text": text, "is_chunk": true, "is_complete": false, "streaming": true, "session_id": session_id }),
            Some(session_id),
        )
    }

    /// The end of the answer: the whole text, once more, as one message.
    pub fn message_complete(session_id: &str, text: &str) -> Self {
        Self::new(
            "message",
            json!({ "text": text, "is_chunk": false, "is_complete": true, "streaming": false, "session_id": session_id }),
            Some(session_id),
        )
    }

    pub fn tool_call(session_id: &str, call: &ToolCallStatus<'_>) -> Self {
        let mut data = json!({
            "tool_name": call.tool_name,
            "input": call.input,
            "status": call.status,
            "timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
            "tool_call_id": call.tool_call_id,
        });
        if let Some(output) = call.output {
            data["output"] = json!(output);
        }
        Self::new("tool_call", data, Some(session_id))
    }

    pub fn tool_result(session_id: &str, tool_name: &str, result: Value) -> Self {
        Self::new(
            "tool_result",
            json!({ "tool_name": tool_name, "result": result, "session_id": session_id }),
            Some(session_id),
        )
    }

    pub fn confirmation_request(
        session_id: &str,
        confirmation_id: &str,
        action: &str,
        details: Value,
        resources: Vec<String>,
    ) -> Self {
        Self::new(
            "confirmation_request",
            json!({ "confirmation_id": confirmation_id, "action": action, "details": details, "resources": resources }),
            Some(session_id),
        )
    }

    pub fn usage_info(session_id: &str, total_cost: f64) -> Self {
        let rounded = (total_cost * 100.0).round() / 100.0;
        Self::new("usage_info", json!({ "total_cost": rounded }), Some(session_id))
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self::new("error", json!({ "text": text.into(), "severity": "error" }), None)
    }

    /// An error about no one session, with a machine-readable `code`.
    pub fn coded_error(text: impl Into<String>, code: &str) -> Self {
        Self::new(
            "error",
            json!({ "text": text.into(), "severity": "error", "code": code }),
            None,
        )
    }

    /// An error about one session's query or workflow; `code` is machine-readable when given.
    pub fn session_error(session_id: &str, text: impl Into<String>, severity: Severity, code: Option<&str>) -> Self {
        let mut data = json!({ "text": text.into(), "severity": severity, "session_id": session_id });
        if let Some(code) = code {
            data["code"] = json!(code);
        }
        Self::new("error", data, Some(session_id))
    }

    pub fn to_frame(&self) -> Message {
        Message::text(serde_json::to_string(self).expect("server messages serialize"))
    }
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A tool call's state as the `tool_call` message reports it.
pub struct ToolCallStatus<'a> {
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    pub input: &'a Value,
    /// `running`, `success` or `error`.
    pub status: &'static str,
    pub output: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_read_in_their_canonical_spelling() {
        let canonical = "8259031a-5c2e-4b7e-9f0e-2d1c3b4a5f60";
        let Ok(ClientMessage::Query(query)) = ClientMessage::parse(
            r#"{"query":"q","user_id":"u","session_id":" {8259031A-5C2E-4B7E-9F0E-2D1C3B4A5F60} "}"#,
        ) else {
            panic!("a query")
        };
        assert_eq!(query.session_id, canonical);
        assert_eq!(
            ClientMessage::parse(
                r#"{"type":"control","action":"cancel","session_id":"8259031A5C2E4B7E9F0E2D1C3B4A5F60"}"#
            ),
            Ok(ClientMessage::Cancel {
                session_id: canonical.into(),
                user_id: None
            })
        );
        let Err(refused) = ClientMessage::parse(r#"{"query":5,"user_id":"u","session_id":"S-1 "}"#) else {
            panic!("refused")
        };
        assert_eq!(
            refused.query_session_id.as_deref(),
            Some("S-1"),
            "not a UUID: as sent, trimmed"
        );
    }

    #[test]
    fn parses_each_client_message() {
        assert_eq!(
            ClientMessage::parse(r#"{"type":"init","user_id":"u1"}"#),
            Ok(ClientMessage::Init { user_id: "u1".into() })
        );
        assert_eq!(
            ClientMessage::parse(r#"{"type":"control","action":"cancel","session_id":"s","user_id":"u1"}"#),
            Ok(ClientMessage::Cancel {
                session_id: "s".into(),
                user_id: Some("u1".into())
            })
        );
        assert_eq!(
            ClientMessage::parse(r#"{"type":"confirmation_response","confirmation_id":"c","approved":false}"#),
            Ok(ClientMessage::Confirmation {
                confirmation_id: "c".into(),
                approved: false,
                user_id: None,
            })
        );
        assert_eq!(
            ClientMessage::parse(
                r#"{"type":"confirmation_response","confirmation_id":"c","approved":true,"user_id":"u1"}"#
            ),
            Ok(ClientMessage::Confirmation {
                confirmation_id: "c".into(),
                approved: true,
                user_id: Some("u1".into()),
            })
        );
        let Ok(ClientMessage::Query(query)) = ClientMessage::parse(
            r#"{"query":"why?","user_id":"u1","session_id":"s","mode":"ask","unknown":1,
                "direct_tool_call":{"tool_name":"search_incidents"}}"#,
        ) else {
            panic!("a chat query")
        };
        assert_eq!(query.mode, Mode::Ask);
        assert_eq!(query.direct_tool_call.unwrap().input, json!({}));
    }

    #[test]
    fn optional_fields_sent_as_null_take_their_defaults() {
        let Ok(ClientMessage::Query(query)) = ClientMessage::parse(
            r#"{"query":"why?","user_id":"u1","session_id":"s","mode":null,"attachments":null,"model":null,
                "ui_state":null,"direct_tool_call":null,"selected_project_id":null}"#,
        ) else {
            panic!("a chat query")
        };
        assert_eq!(query.mode, Mode::Agent);
        assert!(query.attachments.is_empty());
    }

    #[test]
    fn explains_what_is_wrong() {
        let error = |text: &str| ClientMessage::parse(text).unwrap_err().text;
        assert_eq!(error("nope"), "message is not valid JSON");
        assert!(error(r#"{"type":"init"}"#).contains("user_id"));
        assert!(error(r#"{"type":"dance"}"#).contains("unknown message type"));
        assert!(error(r#"{"type":"control","action":"pause","session_id":"s"}"#).contains("cancel"));
        assert!(error(r#"{"user_id":"u","session_id":"s"}"#).contains("query"));
        assert!(error(r#"{"query":"q","user_id":"u","session_id":"s","mode":"write"}"#).contains("mode"));
        assert!(error(r#"{"type":"confirmation_response","confirmation_id":"c"}"#).contains("approved"));
    }

    #[test]
    fn a_malformed_query_names_its_session_so_it_can_be_ended() {
        let session_of = |text: &str| ClientMessage::parse(text).unwrap_err().query_session_id;
        assert_eq!(
            session_of(r#"{"query":"q","user_id":"u","session_id":" s ","mode":"write"}"#),
            Some("s".into())
        );
        assert_eq!(session_of(r#"{"user_id":"u","session_id":"s"}"#), Some("s".into()));
        assert_eq!(session_of(r#"{"query":"q","user_id":"u","session_id":7}"#), None);
        assert_eq!(session_of(r#"{"type":"init"}"#), None);
    }

    #[test]
    fn usage_is_rounded_to_cents() {
        assert_eq!(
            ServerMessage::usage_info("s", 0.12645).data,
            json!({ "total_cost": 0.13 })
        );
    }
}
