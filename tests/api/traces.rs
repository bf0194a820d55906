//! Traces over OTLP/HTTP (issue #31, item 4): `vigil serve`, with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at a receiver of the test's own, exports its spans: the request with its id, the
//! placement batch, the analysis job and its model call.

use std::sync::{Arc, Mutex};

use axum::{body::Bytes, extract::State, routing::post, Router};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::any_value::Value as AnyValue,
};
use prost::Message;
use reqwest::Method;
use serde_json::Value;
use vigil_llm::fake::{FakeOpenAi, Reply};

use crate::{
    helpers::{eventually, spawn_app_without_workers},
    ingestion::fixture,
};

/// A span as received: its name, its string attributes and the service that sent it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    attributes: Vec<(String, String)>,
    service: String,
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// An OTLP/HTTP traces receiver (protobuf, as the exporter sends by default) on a free port.
async fn receiver() -> (String, Spans) {
    async fn export(State(spans): State<Spans>, body: Bytes) -> Vec<u8> {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
        let text = |value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match value
            .as_ref()
            .and_then(|v| v.value.as_ref())
        {
            Some(AnyValue::StringValue(text)) => text.clone(),
            Some(AnyValue::IntValue(number)) => number.to_string(),
            other => format!("{other:?}"),
        };
        let mut received = spans.lock().unwrap();
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .map(|attribute| text(&attribute.value))
                .unwrap_or_default();
            for span in resource_spans.scope_spans.into_iter().flat_map(|scope| scope.spans) {
                received.push(Received {
                    name: span.name,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|attribute| (attribute.key.clone(), text(&attribute.value)))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
        ExportTraceServiceResponse::default().encode_to_vec()
    }
    let spans = Spans::default();
    let router = Router::new()
        .route("/v1/traces", post(export))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}"), spans)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn spans_of_requests_placement_analyses_and_model_calls_reach_the_otlp_receiver() {
    let (endpoint, spans) = receiver().await;
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("The checkout-api pool is exhausted."));
    // The in-process app owns the test database and the user; `vigil serve` does the work.
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let (http_port, ws_port) = (free_port(), free_port());
    let mut service = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .arg("serve")
        .env("DATABASE_URL", app.state.config.database_url.expose())
        .env("HTTP_PORT", http_port.to_string())
        .env("WS_PORT", ws_port.to_string())
        .env("LLM_BASE_URL", model.base_url())
        .env("RCA_SETTLE_SECS", "0")
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .kill_on_drop(true)
        .spawn()
        .expect("vigil serve starts");
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{http_port}/api/source_a/alerts");
    let answered = eventually("vigil serve to take the alert", || async {
        let response = client
            .request(Method::POST, &url)
            .header("X-User-ID", &user)
            .header("X-Request-ID", "trace-me-1")
            .json(&fixture("source_a", "firing"))
            .send()
            .await
            .ok()?;
        (response.status() == 202).then_some(response.json::<Value>().await.unwrap())
    })
    .await;
    assert!(answered["alerts"][0]["incident_id"].is_string(), "{answered}");

    let received = eventually(
        "the spans of the request, its placement, its analysis and the model call",
        || {
            let spans = spans.lock().unwrap().clone();
            async move {
                let named = |name: &str| spans.iter().any(|span| span.name == name);
                (named("request") && named("placement batch") && named("job") && named("model call")).then_some(spans)
            }
        },
    )
    .await;
    service.kill().await.unwrap();

    assert!(received.iter().all(|span| span.service == "vigil"), "service.name");
    let request = received
        .iter()
        .find(|span| {
            span.name == "request"
                && span
                    .attributes
                    .contains(&("request_id".to_owned(), "trace-me-1".to_owned()))
        })
        .unwrap_or_else(|| panic!("the request's span carries its id: {received:?}"));
    assert!(
        request.attributes.contains(&("user_id".to_owned(), user.clone())),
        "{request:?}"
    );
    let batch = received.iter().find(|span| span.name == "placement batch").unwrap();
    assert!(
        batch.attributes.contains(&("alerts".to_owned(), "1".to_owned())),
        "{batch:?}"
    );
    let job = received.iter().find(|span| span.name == "job").unwrap();
    assert!(
        job.attributes.contains(&("kind".to_owned(), "rca".to_owned())),
        "{job:?}"
    );
    let call = received.iter().find(|span| span.name == "model call").unwrap();
    assert!(
        call.attributes.contains(&("host".to_owned(), "127.0.0.1".to_owned())),
        "{call:?}"
    );
    assert_eq!(model.requests().len(), 1, "one model call");
}
