use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sender {
    User,
    Assistant,
}

/// One chat message as stored (spec Message). Fields the spec does not name are kept as sent,
/// so a client's own bookkeeping (message ids and the like) survives a round trip.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub sender: Sender,
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool the assistant ran while answering (assistant messages only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_name: String,
    #[serde(default)]
    pub input: Value,
    #[serde(default)]
    pub output: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Sender::User, text)
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Sender::Assistant, text)
    }

    fn new(sender: Sender, text: impl Into<String>) -> Self {
        Self {
            sender,
            text: text.into(),
            timestamp: None,
            images: None,
            tool_calls: None,
            extra: Map::new(),
        }
    }
}
