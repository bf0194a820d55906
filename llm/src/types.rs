//! The provider-neutral vocabulary of a chat: requests, messages, tools and the events of a streamed
//! answer. Their serde form is this crate's own (for storing or logging them); each provider module
//! maps them to its wire format.

use base64::Engine as _;
use futures::{Stream, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::error::LlmError;

/// One call to a language model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Overrides the model the client was configured with, for this request only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }
}

/// A message of the conversation, by role.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        parts: Vec<ContentPart>,
    },
    /// What the model said earlier: text, tool calls, or both.
    Assistant {
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of running the tool call `tool_call_id`.
    Tool {
        tool_call_id: String,
        content: String,
    },
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message made of one text part.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User {
            parts: vec![ContentPart::Text(text.into())],
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }

    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }
}

/// A part of a user message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentPart {
    Text(String),
    /// An image, inline: `base64_data` is the standard base64 encoding of the file's bytes.
    Image {
        mime_type: String,
        base64_data: String,
    },
}

impl ContentPart {
    /// An image part from the file's raw bytes.
    pub fn image(mime_type: impl Into<String>, bytes: &[u8]) -> Self {
        Self::Image {
            mime_type: mime_type.into(),
            base64_data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// A call of a tool, as the model asked for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not validated against the schema.
    pub arguments: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// One event of a streamed answer. A successful stream ends with exactly one `Finished`; `ToolCall`s
/// come whole (after their fragments were put together), `Usage` when the provider reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ToolCall(ToolCall),
    Usage(Usage),
    /// `reason` is the provider's finish reason (`stop`, `tool_calls`, `length`, ...) when it gave one.
    Finished {
        reason: Option<String>,
    },
}

/// A whole answer, put together from its stream by [`collect`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Completion {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
}

impl Completion {
    /// The assistant message to put in the conversation before answering its tool calls.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: (!self.text.is_empty()).then(|| self.text.clone()),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// Reads a stream to its end; the first error ends it.
pub async fn collect<S>(stream: S) -> Result<Completion, LlmError>
where
    S: Stream<Item = Result<StreamEvent, LlmError>>,
{
    stream
        .try_fold(Completion::default(), |mut completion, event| async move {
            match event {
                StreamEvent::TextDelta(text) => completion.text.push_str(&text),
                StreamEvent::ToolCall(call) => completion.tool_calls.push(call),
                StreamEvent::Usage(usage) => completion.usage = Some(usage),
                StreamEvent::Finished { reason } => completion.finish_reason = reason,
            }
            Ok(completion)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn collect_assembles_a_completion() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "get_logs".into(),
            arguments: "{}".into(),
        };
        let usage = Usage {
            input_tokens: 3,
            output_tokens: 4,
        };
        let events = vec![
            Ok(StreamEvent::TextDelta("Hel".into())),
            Ok(StreamEvent::TextDelta("lo".into())),
            Ok(StreamEvent::ToolCall(call.clone())),
            Ok(StreamEvent::Usage(usage)),
            Ok(StreamEvent::Finished {
                reason: Some("tool_calls".into()),
            }),
        ];
        let completion = collect(futures::stream::iter(events)).await.unwrap();
        assert_eq!(completion.text, "Hello");
        assert_eq!(completion.tool_calls, vec![call.clone()]);
        assert_eq!(completion.usage, Some(usage));
        assert_eq!(completion.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            completion.to_message(),
            ChatMessage::Assistant {
                content: Some("Hello".into()),
                tool_calls: vec![call],
            }
        );
    }

    #[tokio::test]
    async fn collect_stops_at_the_first_error() {
        let events = vec![
            Ok(StreamEvent::TextDelta("partial".into())),
            Err(LlmError::Protocol("bad chunk".into())),
        ];
        let error = collect(futures::stream::iter(events)).await.unwrap_err();
        assert!(matches!(error, LlmError::Protocol(_)), "{error:?}");
    }

    #[test]
    fn messages_have_a_role_tagged_serde_form() {
        let message = ChatMessage::user("hi");
        let json = serde_json::to_value(&message).unwrap();
        assert_eq!(json, serde_json::json!({"role": "user", "parts": [{"text": "hi"}]}));
        assert_eq!(serde_json::from_value::<ChatMessage>(json).unwrap(), message);
    }

    #[test]
    fn image_parts_are_base64_encoded() {
        let part = ContentPart::image("image/png", b"\x89PNG");
        assert_eq!(
            part,
            ContentPart::Image {
                mime_type: "image/png".into(),
                base64_data: "iVBORw==".into(),
            }
        );
    }
}
