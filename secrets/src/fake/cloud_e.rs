//! A cloud_e API: OAuth client-credentials tokens, devices and auth keys of networks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use chrono::{TimeDelta, Utc};
use serde_json::{json, Value};
use url::Url;

use super::{
    bearer, client_credentials, json_response, oauth_error, parse_form, timestamp, FakeServer, RecordedRequest,
};

pub struct FakeCloudE {
    server: FakeServer,
    state: Arc<Mutex<CloudEState>>,
}

struct CloudEState {
    client_id: String,
    client_secret: String,
    expires_in: Option<u64>,
    default_network: String,
    /// Network name to its devices.
    networks: HashMap<String, Vec<Value>>,
    access_tokens: HashSet<String>,
    keys: Vec<Value>,
    issued: u64,
}

type Shared = Arc<Mutex<CloudEState>>;

impl FakeCloudE {
    /// Accepts `client_id` / `client_secret`, whose default network (`-`) is `default_network`.
    /// Tokens carry `expires_in: 3600` unless changed with [`FakeCloudE::set_expires_in`].
    pub async fn start(client_id: &str, client_secret: &str, default_network: &str) -> Self {
        let state = Arc::new(Mutex::new(CloudEState {
            client_id: client_id.to_owned(),
            client_secret: client_secret.to_owned(),
            expires_in: Some(3600),
            default_network: default_network.to_owned(),
            networks: HashMap::from([(default_network.to_owned(), Vec::new())]),
            access_tokens: HashSet::new(),
            keys: Vec::new(),
            issued: 0,
        }));
        let router = Router::new()
            .route("/api/v2/oauth/token", post(token))
            .route("/api/v2/tailnet/{network}/devices", get(devices))
            .route("/api/v2/tailnet/{network}/keys", post(create_key))
            .with_state(state.clone());
        Self {
            server: FakeServer::start(router).await,
            state,
        }
    }

    pub fn url(&self) -> Url {
        self.server.url.clone()
    }

    /// `None` leaves `expires_in` out of token responses.
    pub fn set_expires_in(&self, seconds: Option<u64>) {
        self.lock().expires_in = seconds;
    }

    /// Adds a device (a JSON object in the API's shape) to `network`, creating the network.
    pub fn add_device(&self, network: &str, device: Value) {
        self.lock().networks.entry(network.to_owned()).or_default().push(device);
    }

    /// The client's secret is rotated and every token issued so far is revoked, as when the
    /// client is deleted in the provider's console.
    pub fn revoke_client(&self) {
        let mut state = self.lock();
        state.client_secret = format!("{}-rotated", state.client_secret);
        state.access_tokens.clear();
    }

    /// The auth keys created so far, as returned to the client.
    pub fn auth_keys(&self) -> Vec<Value> {
        self.lock().keys.clone()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CloudEState> {
        self.state.lock().expect("cloud_e lock")
    }
}

impl CloudEState {
    fn authorized(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|token| self.access_tokens.contains(token))
    }

    /// The devices of `network`, where `-` names the default network.
    fn devices(&self, network: &str) -> Option<&Vec<Value>> {
        let name = if network == "-" { &self.default_network } else { network };
        self.networks.get(name)
    }
}

fn message(status: StatusCode, text: &str) -> Response {
    json_response(status, json!({ "message": text }))
}

async fn token(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let form = parse_form(&body);
    let mut state = state.lock().expect("cloud_e lock");
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "grant_type must be client_credentials",
        );
    }
    let authenticated = client_credentials(&headers, &form)
        .is_some_and(|(id, secret)| id == state.client_id && secret == state.client_secret);
    if !authenticated {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "invalid client id or secret",
        );
    }
    state.issued += 1;
    let access_token = format!("fake-e-access-{}", state.issued);
    state.access_tokens.insert(access_token.clone());
    let mut body = json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "scope": form.get("scope").cloned().unwrap_or_default(),
    });
    if let Some(expires_in) = state.expires_in {
        body["expires_in"] = json!(expires_in);
    }
    json_response(StatusCode::OK, body)
}

async fn devices(State(state): State<Shared>, headers: HeaderMap, Path(network): Path<String>) -> Response {
    let state = state.lock().expect("cloud_e lock");
    if !state.authorized(&headers) {
        return message(StatusCode::UNAUTHORIZED, "API token invalid");
    }
    match state.devices(&network) {
        Some(devices) => json_response(StatusCode::OK, json!({ "devices": devices })),
        None => message(StatusCode::NOT_FOUND, "tailnet not found"),
    }
}

async fn create_key(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(network): Path<String>,
    body: Bytes,
) -> Response {
    let mut state = state.lock().expect("cloud_e lock");
    if !state.authorized(&headers) {
        return message(StatusCode::UNAUTHORIZED, "API token invalid");
    }
    if state.devices(&network).is_none() {
        return message(StatusCode::NOT_FOUND, "tailnet not found");
    }
    let capabilities = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|body| body.get("capabilities").cloned())
        .filter(|c| c["devices"]["create"].is_object());
    let Some(capabilities) = capabilities else {
        return message(StatusCode::BAD_REQUEST, "capabilities.devices.create is required");
    };
    state.issued += 1;
    let now = Utc::now();
    let key = json!({
        "id": format!("k{}", state.issued),
        "key": format!("tskey-auth-k{}-fakesecret{}", state.issued, state.issued),
        "created": timestamp(now),
        "expires": timestamp(now + TimeDelta::days(90)),
        "capabilities": capabilities,
    });
    state.keys.push(key.clone());
    json_response(StatusCode::OK, key)
}
