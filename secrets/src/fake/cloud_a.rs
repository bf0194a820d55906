//! A cloud_a OAuth 2.0 token endpoint (`/token`), userinfo, projects and billing info.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use url::Url;

use super::{bearer, client_credentials, json_response, oauth_error, parse_form, FakeServer, RecordedRequest};

/// Project list pages are this short so clients must follow `nextPageToken`.
const PAGE_SIZE: usize = 2;

pub struct FakeCloudA {
    server: FakeServer,
    state: Arc<Mutex<CloudAState>>,
}

struct CloudAState {
    client_id: String,
    client_secret: String,
    expires_in: u64,
    issued: u64,
    /// Unused authorization codes and the e-mail of the user who consented.
    codes: HashMap<String, String>,
    refresh_tokens: HashMap<String, RefreshGrant>,
    access_tokens: HashMap<String, AccessGrant>,
    projects: Vec<FakeProject>,
}

struct RefreshGrant {
    email: String,
    revoked: bool,
}

struct AccessGrant {
    email: String,
    expires: Instant,
}

struct FakeProject {
    id: String,
    name: String,
    billing_enabled: bool,
}

type Shared = Arc<Mutex<CloudAState>>;

impl FakeCloudA {
    /// Accepts the OAuth client `client_id` / `client_secret`; access tokens live 3600 s.
    pub async fn start(client_id: &str, client_secret: &str) -> Self {
        let state = Arc::new(Mutex::new(CloudAState {
            client_id: client_id.to_owned(),
            client_secret: client_secret.to_owned(),
            expires_in: 3600,
            issued: 0,
            codes: HashMap::new(),
            refresh_tokens: HashMap::new(),
            access_tokens: HashMap::new(),
            projects: Vec::new(),
        }));
        let router = Router::new()
            .route("/token", post(token))
            .route("/oauth2/v3/userinfo", get(userinfo))
            .route("/v1/projects", get(projects))
            .route("/v1/projects/{id}/billingInfo", get(billing_info))
            .with_state(state.clone());
        Self {
            server: FakeServer::start(router).await,
            state,
        }
    }

    /// The API base (userinfo, projects).
    pub fn url(&self) -> Url {
        self.server.url.clone()
    }

    /// Not served: the consent screen is the user's business; tests go straight to the callback.
    pub fn auth_url(&self) -> Url {
        self.server.url.join("authorize").expect("a relative path joins")
    }

    pub fn token_url(&self) -> Url {
        self.server.url.join("token").expect("a relative path joins")
    }

    /// Makes `code` exchangeable, once, for tokens of the user `email`.
    pub fn register_code(&self, code: &str, email: &str) {
        self.lock().codes.insert(code.to_owned(), email.to_owned());
    }

    /// The `expires_in` of access tokens issued from now on.
    pub fn set_expires_in(&self, seconds: u64) {
        self.lock().expires_in = seconds;
    }

    pub fn add_project(&self, id: &str, name: &str, billing_enabled: bool) {
        self.lock().projects.push(FakeProject {
            id: id.to_owned(),
            name: name.to_owned(),
            billing_enabled,
        });
    }

    /// Refreshing with `refresh_token` fails with `invalid_grant` from now on.
    pub fn revoke_refresh_token(&self, refresh_token: &str) {
        if let Some(grant) = self.lock().refresh_tokens.get_mut(refresh_token) {
            grant.revoked = true;
        }
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CloudAState> {
        self.state.lock().expect("cloud_a lock")
    }
}

impl CloudAState {
    fn issue_access_token(&mut self, email: &str) -> String {
        self.issued += 1;
        let token = format!("fake-a-access-{}", self.issued);
        self.access_tokens.insert(
            token.clone(),
            AccessGrant {
                email: email.to_owned(),
                expires: Instant::now() + Duration::from_secs(self.expires_in),
            },
        );
        token
    }

    fn user(&self, headers: &HeaderMap) -> Option<&str> {
        let grant = self.access_tokens.get(bearer(headers)?)?;
        (grant.expires > Instant::now()).then_some(grant.email.as_str())
    }
}

fn unauthenticated() -> Response {
    json_response(
        StatusCode::UNAUTHORIZED,
        json!({ "error": { "code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED" } }),
    )
}

async fn token(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let form = parse_form(&body);
    let mut state = state.lock().expect("cloud_a lock");
    let authenticated = client_credentials(&headers, &form)
        .is_some_and(|(id, secret)| id == state.client_id && secret == state.client_secret);
    if !authenticated {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "The OAuth client was not found.",
        );
    }
    match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let Some(email) = form.get("code").and_then(|code| state.codes.remove(code)) else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "Malformed auth code.");
            };
            let access_token = state.issue_access_token(&email);
            let refresh_token = format!("fake-a-refresh-{}", state.issued);
            state
                .refresh_tokens
                .insert(refresh_token.clone(), RefreshGrant { email, revoked: false });
            json_response(
                StatusCode::OK,
                json!({
                    "access_token": access_token,
                    "refresh_token": refresh_token,
                    "expires_in": state.expires_in,
                    "token_type": "Bearer",
                    "scope": "https://www.googleapis.com/auth/cloud-platform openid email",
                }),
            )
        }
        Some("refresh_token") => {
            let email = form
                .get("refresh_token")
                .and_then(|token| state.refresh_tokens.get(token))
                .filter(|grant| !grant.revoked)
                .map(|grant| grant.email.clone());
            let Some(email) = email else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "Token has been expired or revoked.",
                );
            };
            let access_token = state.issue_access_token(&email);
            json_response(
                StatusCode::OK,
                json!({
                    "access_token": access_token,
                    "expires_in": state.expires_in,
                    "token_type": "Bearer",
                    "scope": "https://www.googleapis.com/auth/cloud-platform openid email",
                }),
            )
        }
        _ => oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "Invalid grant_type."),
    }
}

async fn userinfo(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let state = state.lock().expect("cloud_a lock");
    match state.user(&headers) {
        Some(email) => json_response(
            StatusCode::OK,
            json!({ "sub": format!("fake-{email}"), "email": email, "email_verified": true }),
        ),
        None => unauthenticated(),
    }
}

async fn projects(
    State(state): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    let start: usize = query.get("pageToken").and_then(|t| t.parse().ok()).unwrap_or(0);
    let page: Vec<Value> = state
        .projects
        .iter()
        .skip(start)
        .take(PAGE_SIZE)
        .map(|p| json!({ "projectId": p.id, "name": p.name, "lifecycleState": "ACTIVE" }))
        .collect();
    let mut body = json!({ "projects": page });
    if start + PAGE_SIZE < state.projects.len() {
        body["nextPageToken"] = json!((start + PAGE_SIZE).to_string());
    }
    json_response(StatusCode::OK, body)
}

async fn billing_info(State(state): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    match state.projects.iter().find(|p| p.id == id) {
        Some(project) => json_response(
            StatusCode::OK,
            json!({
                "name": format!("projects/{id}/billingInfo"),
                "projectId": id,
                "billingAccountName": if project.billing_enabled { "billingAccounts/000000-000000-000000" } else { "" },
                "billingEnabled": project.billing_enabled,
            }),
        ),
        None => json_response(
            StatusCode::NOT_FOUND,
            json!({ "error": { "code": 404, "message": "Project not found.", "status": "NOT_FOUND" } }),
        ),
    }
}
