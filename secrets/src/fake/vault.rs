//! A Vault KV version 2 server: `/v1/<mount>/data/<path>` and `/v1/<mount>/metadata/<path>`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use url::Url;

use super::{json_response, timestamp, FakeServer, RecordedRequest};

pub struct FakeVault {
    server: FakeServer,
    state: Arc<Mutex<VaultState>>,
}

struct VaultState {
    token: String,
    /// `<mount>/<path>` to every written version, oldest first.
    secrets: HashMap<String, Vec<Value>>,
}

type Shared = Arc<Mutex<VaultState>>;

impl FakeVault {
    /// Accepts requests carrying `X-Vault-Token: <token>`.
    pub async fn start(token: &str) -> Self {
        let state = Arc::new(Mutex::new(VaultState {
            token: token.to_owned(),
            secrets: HashMap::new(),
        }));
        let router = Router::new()
            .route("/v1/{*path}", any(handle))
            .with_state(state.clone());
        Self {
            server: FakeServer::start(router).await,
            state,
        }
    }

    pub fn url(&self) -> Url {
        self.server.url.clone()
    }

    /// Every version written at `<mount>/<path>`, oldest first; empty once deleted.
    pub fn versions(&self, path: &str) -> Vec<Value> {
        let state = self.state.lock().expect("vault lock");
        state.secrets.get(path).cloned().unwrap_or_default()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }
}

fn errors(status: StatusCode, messages: &[&str]) -> Response {
    json_response(status, json!({ "errors": messages }))
}

fn metadata(version: usize) -> Value {
    json!({
        "created_time": timestamp(chrono::Utc::now()),
        "custom_metadata": null,
        "deletion_time": "",
        "destroyed": false,
        "version": version,
    })
}

async fn handle(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path(path): Path<String>,
    body: Bytes,
) -> Response {
    let mut state = state.lock().expect("vault lock");
    let token = headers.get("x-vault-token").and_then(|v| v.to_str().ok());
    if token != Some(state.token.as_str()) {
        return errors(StatusCode::FORBIDDEN, &["permission denied"]);
    }
    let segments: Vec<&str> = path.split('/').collect();
    let Some(api_at) = segments
        .iter()
        .skip(1)
        .position(|s| *s == "data" || *s == "metadata")
        .map(|i| i + 1)
    else {
        return errors(StatusCode::NOT_FOUND, &[]);
    };
    let rest = &segments[api_at + 1..];
    if rest.is_empty() || rest.iter().any(|s| s.is_empty()) {
        return errors(StatusCode::NOT_FOUND, &[]);
    }
    let key = format!("{}/{}", segments[..api_at].join("/"), rest.join("/"));
    match (segments[api_at], method) {
        ("data", Method::POST | Method::PUT) => {
            let data = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|body| body.get("data").filter(|d| d.is_object()).cloned());
            let Some(data) = data else {
                return errors(StatusCode::BAD_REQUEST, &["no data provided"]);
            };
            let versions = state.secrets.entry(key).or_default();
            versions.push(data);
            json_response(StatusCode::OK, json!({ "data": metadata(versions.len()) }))
        }
        ("data", Method::GET) => match state.secrets.get(&key).and_then(|v| v.last().map(|d| (v.len(), d))) {
            Some((version, data)) => json_response(
                StatusCode::OK,
                json!({ "data": { "data": data, "metadata": metadata(version) } }),
            ),
            None => errors(StatusCode::NOT_FOUND, &[]),
        },
        ("metadata", Method::DELETE) => {
            state.secrets.remove(&key);
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Default::default())
                .expect("an empty response builds")
        }
        _ => errors(StatusCode::METHOD_NOT_ALLOWED, &["unsupported operation"]),
    }
}
