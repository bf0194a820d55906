//! Local HTTP servers that speak the real protocols of the secrets store and the providers, for
//! tests here and in the service. Each binds 127.0.0.1 on a free port, records every request,
//! and stops when dropped.
//!
//! Starting a fake panics if no loopback port can be bound: they are test fixtures.

mod cloud_a;
mod cloud_e;
mod vault;

pub use cloud_a::FakeCloudA;
pub use cloud_e::FakeCloudE;
pub use vault::FakeVault;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;
use tokio::task::JoinHandle;
use url::Url;

/// One request as a fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The body as `application/x-www-form-urlencoded` fields.
    pub fn form(&self) -> HashMap<String, String> {
        url::form_urlencoded::parse(self.body.as_bytes()).into_owned().collect()
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

type Recorded = Arc<Mutex<Vec<RecordedRequest>>>;

struct FakeServer {
    url: Url,
    requests: Recorded,
    task: JoinHandle<()>,
}

impl FakeServer {
    async fn start(router: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for a fake server");
        let address = listener.local_addr().expect("a bound listener has an address");
        let requests = Recorded::default();
        let app = router.layer(middleware::from_fn_with_state(requests.clone(), record));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake server runs");
        });
        Self {
            url: Url::parse(&format!("http://{address}/")).expect("a socket address makes a URL"),
            requests,
            task,
        }
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(State(requests): State<Recorded>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    requests.lock().expect("requests lock").push(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    });
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// An OAuth 2.0 error body (RFC 6749 §5.2).
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    json_response(
        status,
        serde_json::json!({ "error": error, "error_description": description }),
    )
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Client credentials from HTTP Basic (form-encoded parts, RFC 6749 §2.3.1) or from the body.
fn client_credentials(headers: &HeaderMap, form: &HashMap<String, String>) -> Option<(String, String)> {
    let from_basic = || {
        let encoded = headers
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Basic ")?;
        let decoded = String::from_utf8(STANDARD.decode(encoded).ok()?).ok()?;
        let (id, secret) = decoded.split_once(':')?;
        Some((form_decode(id), form_decode(secret)))
    };
    from_basic().or_else(|| Some((form.get("client_id")?.clone(), form.get("client_secret")?.clone())))
}

fn form_decode(component: &str) -> String {
    url::form_urlencoded::parse(format!("v={component}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

fn parse_form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
