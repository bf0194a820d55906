//! Chat over the OpenAI chat-completions API, as OpenAI, Azure-style gateways, vLLM, Ollama,
//! LiteLLM and others serve it: `POST /v1/chat/completions` with `stream: true`, answered with
//! server-sent events.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{stream::BoxStream, Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::{
    error::LlmError,
    http::{Endpoint, OpenAiConfig},
    types::{ChatMessage, ChatRequest, ContentPart, StreamEvent, ToolCall, ToolSpec, Usage},
    LanguageModel,
};

/// A chat model behind an OpenAI-compatible API.
#[derive(Debug)]
pub struct OpenAiCompatible {
    endpoint: Endpoint,
    model: String,
}

impl OpenAiCompatible {
    /// Fails only when the HTTP client cannot be built (no TLS backend).
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(&config, "chat/completions")?,
            model: config.model,
        })
    }
}

#[async_trait]
impl LanguageModel for OpenAiCompatible {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> &str {
        "openai_compatible"
    }

    async fn stream(
        &self,
        request: &ChatRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, LlmError>>, LlmError> {
        let model = request.model.as_deref().unwrap_or(&self.model);
        let body = self.endpoint.post(&WireRequest::new(request, model)).await?;
        Ok(events(body).boxed())
    }
}

/// The stream events in a body of server-sent events, up to `data: [DONE]` or the body's end.
/// A body that ends with neither `[DONE]` nor a `finish_reason` was cut off (a connection closed
/// mid-answer, which a body without chunked framing cannot tell from its end): an error, not a
/// shorter answer.
fn events<S>(body: S) -> impl Stream<Item = Result<StreamEvent, LlmError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, LlmError>> + Send + 'static,
{
    async_stream::try_stream! {
        let mut decoder = ChunkDecoder::default();
        let mut done = false;
        let sse = body.eventsource();
        futures::pin_mut!(sse);
        while let Some(event) = sse.next().await {
            let event = event.map_err(|error| match error {
                EventStreamError::Transport(error) => error,
                other => LlmError::Protocol(format!("invalid event stream: {other}")),
            })?;
            if event.data == "[DONE]" {
                done = true;
                break;
            }
            if event.event == "error" {
                Err(LlmError::Protocol(format!("provider reported an error: {}", excerpt(&event.data))))?;
            }
            for stream_event in decoder.decode(&event.data)? {
                yield stream_event;
            }
        }
        if !done && decoder.finish_reason.is_none() {
            Err(LlmError::Protocol(
                "the stream ended before the answer did (no finish_reason, no [DONE])".to_owned(),
            ))?;
        }
        for stream_event in decoder.finish()? {
            yield stream_event;
        }
    }
}

/// Turns `chat.completion.chunk` payloads into stream events, assembling tool calls from their
/// fragments.
#[derive(Debug, Default)]
struct ChunkDecoder {
    /// Tool calls being assembled, by the `index` the provider gave them.
    calls: BTreeMap<u32, ToolCall>,
    finish_reason: Option<String>,
}

impl ChunkDecoder {
    fn decode(&mut self, data: &str) -> Result<Vec<StreamEvent>, LlmError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let chunk: WireChunk = serde_json::from_str(data)
            .map_err(|error| LlmError::Protocol(format!("chunk is not valid JSON ({error}): {}", excerpt(data))))?;
        if let Some(error) = chunk.error {
            return Err(LlmError::Protocol(format!(
                "provider reported an error: {}",
                excerpt(&error.to_string())
            )));
        }
        let mut events = Vec::new();
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    events.push(StreamEvent::TextDelta(text));
                }
                for (position, fragment) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    // Some servers leave `index` out when each chunk carries one call.
                    let index = fragment.index.unwrap_or(position as u32);
                    self.add_fragment(index, fragment);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
                events.extend(self.complete_calls()?);
            }
        }
        if let Some(usage) = chunk.usage {
            events.push(StreamEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            }));
        }
        Ok(events)
    }

    fn add_fragment(&mut self, index: u32, fragment: WireToolCallDelta) {
        let call = self.calls.entry(index).or_insert_with(|| ToolCall {
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        });
        // The id and name come whole, once (some servers repeat them); the arguments in pieces.
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty()) {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    /// The tool calls assembled so far, in index order.
    fn complete_calls(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(index, mut call)| {
                if call.name.is_empty() {
                    return Err(LlmError::Protocol(format!("tool call {index} has no function name")));
                }
                if call.id.is_empty() {
                    call.id = format!("call_{}", uuid::Uuid::new_v4().simple());
                }
                // A call without arguments is sent back to the provider later; "" is not JSON.
                if call.arguments.trim().is_empty() {
                    call.arguments = "{}".to_owned();
                }
                Ok(StreamEvent::ToolCall(call))
            })
            .collect()
    }

    /// The events due at the end of the stream: tool calls still open, then `Finished`.
    fn finish(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        let mut events = self.complete_calls()?;
        events.push(StreamEvent::Finished {
            reason: self.finish_reason.take(),
        });
        Ok(events)
    }
}

/// The start of a payload, for error messages.
fn excerpt(text: &str) -> String {
    const KEPT_CHARS: usize = 200;
    let mut excerpt: String = text.chars().take(KEPT_CHARS).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    excerpt
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
}

impl<'a> WireRequest<'a> {
    fn new(request: &'a ChatRequest, model: &'a str) -> Self {
        Self {
            model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools: request.tools.iter().map(WireTool::from).collect(),
            temperature: request.temperature,
            max_tokens: request.max_tokens,
            stream: true,
            stream_options: StreamOptions { include_usage: true },
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: WireUserContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        match message {
            ChatMessage::System { content } => Self::System { content },
            ChatMessage::User { parts } => Self::User {
                content: match parts.as_slice() {
                    // The plain string form is understood by every compatible server.
                    [ContentPart::Text(text)] => WireUserContent::Text(text),
                    parts => WireUserContent::Parts(parts.iter().map(WirePart::from).collect()),
                },
            },
            ChatMessage::Assistant { content, tool_calls } => Self::Assistant {
                content: content.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireToolCall {
                        id: &call.id,
                        kind: "function",
                        function: WireFunctionCall {
                            name: &call.name,
                            arguments: &call.arguments,
                        },
                    })
                    .collect(),
            },
            ChatMessage::Tool { tool_call_id, content } => Self::Tool { tool_call_id, content },
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireUserContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireImageUrl },
}

impl<'a> From<&'a ContentPart> for WirePart<'a> {
    fn from(part: &'a ContentPart) -> Self {
        match part {
            ContentPart::Text(text) => Self::Text { text },
            ContentPart::Image { mime_type, base64_data } => Self::ImageUrl {
                image_url: WireImageUrl {
                    url: format!("data:{mime_type};base64,{base64_data}"),
                },
            },
        }
    }
}

#[derive(Serialize)]
struct WireImageUrl {
    url: String,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(tool: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

/// A `chat.completion.chunk`, read leniently: compatible servers differ in which fields they send
/// and whether they send `null` or nothing.
#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<String>,
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    index: Option<u32>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u32,
    #[serde(default)]
    completion_tokens: u32,
}

#[cfg(test)]
mod tests;
