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
