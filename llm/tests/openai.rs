//! The OpenAI-compatible clients against the fake server, over real HTTP on loopback.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use vigil_llm::{
    collect,
    fake::{fake_token_count, FakeOpenAi, Reply},
    ChatMessage, ChatRequest, ContentPart, LanguageModel, LlmError, OpenAiCompatible, OpenAiConfig, RetryPolicy,
    StreamEvent, TimeoutKind, Timeouts, ToolSpec, Usage,
};

/// Quick retries, so that tests which exhaust them stay fast.
fn config(fake: &FakeOpenAi) -> OpenAiConfig {
    OpenAiConfig::new(fake.base_url(), "gpt-4o").with_retry(RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(2),
    })
}

fn model(config: OpenAiConfig) -> OpenAiCompatible {
    OpenAiCompatible::new(config).unwrap()
}

async fn ask(model: &OpenAiCompatible, request: ChatRequest) -> Result<vigil_llm::Completion, LlmError> {
    collect(model.stream(&request).await?).await
}

/// The error of a call, whether it came before the stream or from it.
async fn failure(model: &OpenAiCompatible, request: ChatRequest) -> LlmError {
    match model.stream(&request).await {
        Err(error) => error,
        Ok(stream) => collect(stream).await.expect_err("the call should fail"),
    }
}

fn question() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user("Why is checkout slow?")])
}

#[tokio::test]
async fn streams_a_text_reply_in_several_deltas() {
    let fake = FakeOpenAi::start().await;
    let answer = "The payments database is saturated. Scale it up.";
    fake.push(Reply::text(answer));
    let model = model(config(&fake));
    assert_eq!((model.model_name(), model.provider()), ("gpt-4o", "openai_compatible"));

    let events: Vec<StreamEvent> = model
        .stream(&question())
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;

    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 5, "{deltas:?}");
    assert_eq!(deltas.concat(), answer);
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finished {
            reason: Some("stop".into())
        })
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["model"], "gpt-4o");
    assert_eq!(requests[0]["stream"], true);
    assert_eq!(requests[0]["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        requests[0]["messages"],
        json!([{"role": "user", "content": "Why is checkout slow?"}])
    );
}

#[tokio::test]
async fn the_fake_speaks_server_sent_events() {
    let fake = FakeOpenAi::start().await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fake.base_url()))
        .json(&json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "ping"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.unwrap();
    assert!(body.starts_with("data: {"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
}

#[tokio::test]
async fn usage_is_parsed_from_the_final_chunk() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::text("Scaled.").usage(1234, 56));
    fake.push(Reply::text("Scaled again."));
    let model = model(config(&fake));

    let completion = ask(&model, question()).await.unwrap();
    assert_eq!(
        completion.usage,
        Some(Usage {
            input_tokens: 1234,
            output_tokens: 56
        })
    );

    let completion = ask(&model, question()).await.unwrap();
    let usage = completion.usage.unwrap();
    assert_eq!(usage.input_tokens as usize, fake_token_count("Why is checkout slow?"));
    assert_eq!(usage.output_tokens as usize, fake_token_count("Scaled again."));
}

#[tokio::test]
async fn a_tool_call_round_trip() {
    let fake = FakeOpenAi::start().await;
    fake.push(
        Reply::text("Let me look.")
            .with_tool_call("get_logs", json!({"service": "checkout", "lines": 50}))
            .with_tool_call("get_metrics", json!({"metric": "db_connections"})),
    );
    fake.push(Reply::text("Checkout ran out of database connections."));
    let model = model(config(&fake));
    let tools = vec![
        ToolSpec {
            name: "get_logs".into(),
            description: "Recent log lines of a service".into(),
            parameters: json!({"type": "object", "properties": {"service": {"type": "string"}, "lines": {"type": "integer"}}}),
        },
        ToolSpec {
            name: "get_metrics".into(),
            description: "A metric's recent values".into(),
            parameters: json!({"type": "object", "properties": {"metric": {"type": "string"}}}),
        },
    ];
    let mut messages = vec![
        ChatMessage::system("You are an SRE."),
        ChatMessage::user("Why is checkout slow?"),
    ];

    let first = ask(&model, ChatRequest::new(messages.clone()).with_tools(tools.clone()))
        .await
        .unwrap();
    assert_eq!(first.text, "Let me look.");
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    let calls = &first.tool_calls;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].name, "get_logs");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({"service": "checkout", "lines": 50})
    );
    assert_eq!(calls[1].name, "get_metrics");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[1].arguments).unwrap(),
        json!({"metric": "db_connections"})
    );
    assert_ne!(calls[0].id, calls[1].id);

    messages.push(first.to_message());
    messages.push(ChatMessage::tool_result(&calls[0].id, "ERROR pool exhausted (50/50)"));
    messages.push(ChatMessage::tool_result(&calls[1].id, "db_connections=50"));
    let second = ask(&model, ChatRequest::new(messages).with_tools(tools)).await.unwrap();
    assert_eq!(second.text, "Checkout ran out of database connections.");
    assert!(second.tool_calls.is_empty());

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0]["tools"][0],
        json!({"type": "function", "function": {
            "name": "get_logs",
            "description": "Recent log lines of a service",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}, "lines": {"type": "integer"}}}
        }})
    );
    let replayed = &requests[1]["messages"];
    assert_eq!(
        replayed[2],
        json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": calls[0].id, "type": "function", "function": {"name": "get_logs", "arguments": calls[0].arguments}},
            {"id": calls[1].id, "type": "function", "function": {"name": "get_metrics", "arguments": calls[1].arguments}}
        ]})
    );
    assert_eq!(
        replayed[3],
        json!({"role": "tool", "tool_call_id": calls[0].id, "content": "ERROR pool exhausted (50/50)"})
    );
    assert_eq!(
        replayed[4],
        json!({"role": "tool", "tool_call_id": calls[1].id, "content": "db_connections=50"})
    );
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_the_time_the_server_asks_for() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::status(429).retry_after(1));
    fake.push(Reply::text("Recovered."));
    let model = model(config(&fake));

    let started = Instant::now();
    let completion = ask(&model, question()).await.unwrap();
    let elapsed = started.elapsed();

    assert_eq!(completion.text, "Recovered.");
    assert_eq!(fake.requests().len(), 2);
    // The backoff alone would have waited about 10 ms.
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}

#[tokio::test]
async fn retry_after_is_capped_and_persistent_rate_limits_fail() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::status(429).retry_after(30));
    fake.push(Reply::status(429).retry_after(30));
    fake.push(Reply::text("too late"));
    let model = model(config(&fake).with_retry(RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(200),
    }));

    let started = Instant::now();
    let error = failure(&model, question()).await;
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(
        matches!(error, LlmError::RateLimited { retry_after: Some(after) } if after == Duration::from_secs(30)),
        "{error:?}"
    );
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_until_attempts_run_out() {
    let fake = FakeOpenAi::start().await;
    for _ in 0..3 {
        fake.push(Reply::status(500));
    }
    fake.push(Reply::text("a fourth attempt would get this"));
    let model = model(config(&fake));

    let error = failure(&model, question()).await;
    assert!(
        matches!(&error, LlmError::Status { status: 500, body } if body.contains("fake error 500")),
        "{error:?}"
    );
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn a_server_error_then_success_recovers() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::status(503));
    fake.push(Reply::text("Back."));
    let completion = ask(&model(config(&fake)), question()).await.unwrap();
    assert_eq!(completion.text, "Back.");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::status(400));
    fake.push(Reply::text("a retry would get this"));
    let error = failure(&model(config(&fake)), question()).await;
    assert!(matches!(error, LlmError::Status { status: 400, .. }), "{error:?}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn the_api_key_is_sent_and_never_shown() {
    let fake = FakeOpenAi::start().await;
    fake.require_api_key("sk-right-key");

    let completion = ask(&model(config(&fake).with_api_key("sk-right-key")), question())
        .await
        .unwrap();
    assert_eq!(completion.text, "You said: Why is checkout slow?");

    let wrong = model(config(&fake).with_api_key("sk-wrong-key"));
    assert!(!format!("{wrong:?}").contains("sk-wrong-key"));
    let error = failure(&wrong, question()).await;
    assert!(matches!(error, LlmError::Status { status: 401, .. }), "{error:?}");
    for shown in [error.to_string(), format!("{error:?}")] {
        assert!(!shown.contains("sk-wrong-key"), "{shown}");
    }

    let error = failure(&model(config(&fake)), question()).await;
    assert!(matches!(error, LlmError::Status { status: 401, .. }), "{error:?}");
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::text("This answer arrives far too slowly.").chunk_delay(Duration::from_millis(500)));
    let model = model(config(&fake).with_timeouts(Timeouts {
        idle: Duration::from_millis(200),
        ..Timeouts::default()
    }));

    let started = Instant::now();
    let error = failure(&model, question()).await;
    assert!(
        matches!(
            error,
            LlmError::Timeout {
                kind: TimeoutKind::Idle,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(fake.requests().len(), 1, "timeouts are not retried");
}

#[tokio::test]
async fn a_silent_server_hits_the_first_byte_timeout() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::text("Too late.").chunk_delay(Duration::from_secs(2)));
    let model = model(config(&fake).with_timeouts(Timeouts {
        first_byte: Duration::from_millis(300),
        ..Timeouts::default()
    }));

    let error = failure(&model, question()).await;
    assert!(
        matches!(
            error,
            LlmError::Timeout {
                kind: TimeoutKind::FirstByte,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = OpenAiConfig::new(format!("http://127.0.0.1:{port}"), "gpt-4o").with_retry(RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(10),
    });
    let error = failure(&model(config), question()).await;
    assert!(matches!(error, LlmError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn malformed_chunks_are_protocol_errors() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::raw_events([
        r#"{"choices":[{"index":0,"delta":{"content":"fine so far"}}]}"#,
        "{not json",
    ]));
    let error = failure(&model(config(&fake)), question()).await;
    assert!(
        matches!(&error, LlmError::Protocol(message) if message.contains("not json")),
        "{error:?}"
    );
}

#[tokio::test]
async fn image_parts_are_sent_as_data_urls() {
    let fake = FakeOpenAi::start().await;
    let png = b"\x89PNG\r\n\x1a\n";
    let request = ChatRequest::new(vec![ChatMessage::User {
        parts: vec![
            ContentPart::Text("What does this graph show?".into()),
            ContentPart::image("image/png", png),
        ],
    }]);

    let completion = ask(&model(config(&fake)), request).await.unwrap();
    assert_eq!(completion.text, "You said: What does this graph show?");
    assert_eq!(
        fake.requests()[0]["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What does this graph show?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ])
    );
}

#[tokio::test]
async fn the_request_model_overrides_the_configured_one_and_v1_is_not_doubled() {
    let fake = FakeOpenAi::start().await;
    let model = model(OpenAiConfig::new(format!("{}/v1/", fake.base_url()), "gpt-4o"));
    let request = ChatRequest {
        model: Some("gpt-4o-mini".into()),
        temperature: Some(0.25),
        max_tokens: Some(100),
        ..question()
    };
    ask(&model, request).await.unwrap();
    let body = &fake.requests()[0];
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 100);
}

#[tokio::test]
async fn the_default_reply_can_be_replaced() {
    let fake = FakeOpenAi::start().await;
    fake.set_default_reply(Reply::text("Always this."));
    let model = model(config(&fake));
    for _ in 0..2 {
        assert_eq!(ask(&model, question()).await.unwrap().text, "Always this.");
    }
}
