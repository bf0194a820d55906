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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::collect;

    fn sse(events: &[&str]) -> impl Stream<Item = Result<Bytes, LlmError>> + Send + 'static {
        let body: String = events.iter().map(|data| format!("data: {data}\n\n")).collect();
        // Cut the body at awkward places: inside lines and inside multi-byte characters.
        let pieces: Vec<Result<Bytes, LlmError>> = body
            .as_bytes()
            .chunks(7)
            .map(|piece| Ok(Bytes::copy_from_slice(piece)))
            .collect();
        futures::stream::iter(pieces)
    }

    #[tokio::test]
    async fn interleaved_tool_call_fragments_are_assembled_by_index() {
        let data = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_logs","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_metrics","arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"service\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"cpu\"}"}},{"index":0,"function":{"arguments":"\"api\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#,
            "[DONE]",
        ];
        let collected: Vec<StreamEvent> = events_of(&data).await;
        assert_eq!(
            collected,
            vec![
                StreamEvent::ToolCall(ToolCall {
                    id: "call_a".into(),
                    name: "get_logs".into(),
                    arguments: r#"{"service":"api"}"#.into(),
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "call_b".into(),
                    name: "get_metrics".into(),
                    arguments: r#"{"q":"cpu"}"#.into(),
                }),
                StreamEvent::Usage(Usage {
                    input_tokens: 11,
                    output_tokens: 7,
                }),
                StreamEvent::Finished {
                    reason: Some("tool_calls".into()),
                },
            ]
        );
    }

    async fn events_of(data: &[&str]) -> Vec<StreamEvent> {
        events(sse(data))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// A body closed mid-answer (no chunked framing to tell it from an end) is an error after
    /// what it streamed, not a shorter answer; its half-assembled tool call is not run.
    #[tokio::test]
    async fn a_stream_cut_short_is_an_error_after_what_it_streamed() {
        let data = [
            r#"{"choices":[{"delta":{"content":"Checking. "}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"restart"}}]}}]}"#,
        ];
        let collected: Vec<_> = events(sse(&data)).collect().await;
        assert_eq!(collected.len(), 2, "{collected:?}");
        assert_eq!(
            collected[0].as_ref().unwrap(),
            &StreamEvent::TextDelta("Checking. ".into())
        );
        assert!(
            matches!(&collected[1], Err(LlmError::Protocol(message)) if message.contains("ended before")),
            "{collected:?}"
        );
    }

    /// Either end marker is enough: some servers send no `[DONE]`, others no `finish_reason`.
    #[tokio::test]
    async fn a_stream_ends_with_done_or_a_finish_reason() {
        let without_done = [
            r#"{"choices":[{"delta":{"content":"ok"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ];
        let completion = collect(events(sse(&without_done))).await.unwrap();
        assert_eq!(
            (completion.text.as_str(), completion.finish_reason.as_deref()),
            ("ok", Some("stop"))
        );
        let without_reason = [r#"{"choices":[{"delta":{"content":"ok"}}]}"#, "[DONE]"];
        let completion = collect(events(sse(&without_reason))).await.unwrap();
        assert_eq!((completion.text.as_str(), completion.finish_reason), ("ok", None));
    }

    #[tokio::test]
    async fn multi_byte_text_split_across_reads_survives() {
        let data = [
            r#"{"choices":[{"delta":{"content":"Grüße, "}}]}"#,
            r#"{"choices":[{"delta":{"content":"日本語 🎉"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ];
        let completion = collect(events(sse(&data))).await.unwrap();
        assert_eq!(completion.text, "Grüße, 日本語 🎉");
        assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
        assert_eq!(completion.usage, None);
    }

    #[tokio::test]
    async fn bad_json_is_a_protocol_error() {
        let data = [r#"{"choices":[{"delta":{"content":"ok"}}]}"#, r#"{"choices": [oops"#];
        let mut stream = Box::pin(events(sse(&data)));
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            StreamEvent::TextDelta("ok".into())
        );
        let error = stream.next().await.unwrap().unwrap_err();
        assert!(
            matches!(&error, LlmError::Protocol(message) if message.contains("oops")),
            "{error:?}"
        );
        assert!(stream.next().await.is_none(), "the stream ends after an error");
    }

    #[tokio::test]
    async fn an_error_payload_mid_stream_is_reported() {
        let data = [r#"{"error":{"message":"model overloaded","type":"server_error"}}"#];
        let error = collect(events(sse(&data))).await.unwrap_err();
        assert!(
            matches!(&error, LlmError::Protocol(message) if message.contains("model overloaded")),
            "{error:?}"
        );
    }

    #[test]
    fn requests_use_the_openai_wire_format() {
        let request = ChatRequest {
            model: None,
            messages: vec![
                ChatMessage::system("You are an SRE."),
                ChatMessage::user("Why is the API slow?"),
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "get_logs".into(),
                        arguments: r#"{"service":"api"}"#.into(),
                    }],
                },
                ChatMessage::tool_result("call_1", "timeout connecting to db"),
                ChatMessage::User {
                    parts: vec![
                        ContentPart::Text("And this graph?".into()),
                        ContentPart::Image {
                            mime_type: "image/png".into(),
                            base64_data: "iVBORw==".into(),
                        },
                    ],
                },
            ],
            tools: vec![ToolSpec {
                name: "get_logs".into(),
                description: "Recent logs of a service".into(),
                parameters: json!({"type": "object", "properties": {"service": {"type": "string"}}}),
            }],
            temperature: Some(0.5),
            max_tokens: Some(256),
        };
        let body = serde_json::to_value(WireRequest::new(&request, "gpt-4o")).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "You are an SRE."},
                    {"role": "user", "content": "Why is the API slow?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "get_logs", "arguments": "{\"service\":\"api\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "timeout connecting to db"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "And this graph?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
                    ]}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_logs",
                    "description": "Recent logs of a service",
                    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}}
                }}],
                "temperature": 0.5,
                "max_tokens": 256,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }
}
