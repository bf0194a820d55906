//! A cloud_a OAuth 2.0 token endpoint (`/token`), userinfo, projects and billing info, and the
//! setup calls: service enablement, service accounts and the project IAM policy.

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
    /// Whether enabling services is refused (403), as for a user who may not.
    enablement_denied: bool,
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
    enabled_services: Vec<String>,
    service_accounts: Vec<String>,
    /// `(role, members)`.
    bindings: Vec<(String, Vec<String>)>,
    etag: u64,
}

type Shared = Arc<Mutex<CloudAState>>;

/// A project's enabled services, its service accounts' e-mails and its IAM bindings.
#[derive(Debug, Clone)]
pub struct ProjectSetup {
    pub enabled_services: Vec<String>,
    pub service_accounts: Vec<String>,
    /// `(role, members)`.
    pub bindings: Vec<(String, Vec<String>)>,
}

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
            enablement_denied: false,
        }));
        let router = Router::new()
            .route("/token", post(token))
            .route("/oauth2/v3/userinfo", get(userinfo))
            .route("/v1/projects", get(projects))
            .route("/v1/projects/{id}/billingInfo", get(billing_info))
            .route("/v1/projects/{id}/services:batchEnable", post(batch_enable))
            .route("/v1/projects/{id}/serviceAccounts", post(create_service_account))
            .route("/v1/projects/{id}/serviceAccounts/{email}", get(service_account))
            // `{project}:getIamPolicy` and `{project}:setIamPolicy`: one segment, split here.
            .route("/v1/projects/{target}", post(iam_policy))
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
            enabled_services: Vec::new(),
            service_accounts: Vec::new(),
            bindings: vec![("roles/owner".to_owned(), vec!["user:owner@example.com".to_owned()])],
            etag: 1,
        });
    }

    /// Refreshing with `refresh_token` fails with `invalid_grant` from now on.
    /// From now on, enabling services answers 403 (the consenting user may not enable APIs).
    pub fn deny_service_enablement(&self) {
        self.lock().enablement_denied = true;
    }

    pub fn revoke_refresh_token(&self, refresh_token: &str) {
        if let Some(grant) = self.lock().refresh_tokens.get_mut(refresh_token) {
            grant.revoked = true;
        }
    }

    /// What the setup calls left on a project.
    pub fn project_setup(&self, id: &str) -> Option<ProjectSetup> {
        let state = self.lock();
        let project = state.projects.iter().find(|p| p.id == id)?;
        Some(ProjectSetup {
            enabled_services: project.enabled_services.clone(),
            service_accounts: project.service_accounts.clone(),
            bindings: project.bindings.clone(),
        })
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

/// The API's error body: `{"error": {"code", "message", "status"}}`.
fn api_error(code: StatusCode, status: &str, message: impl Into<String>) -> Response {
    json_response(
        code,
        json!({ "error": { "code": code.as_u16(), "message": message.into(), "status": status } }),
    )
}

fn unauthenticated() -> Response {
    api_error(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials.",
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
        None => not_found("Project"),
    }
}

fn not_found(what: &str) -> Response {
    api_error(StatusCode::NOT_FOUND, "NOT_FOUND", format!("{what} not found."))
}

fn bad_request(message: &str) -> Response {
    api_error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
}

async fn batch_enable(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let mut state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("Invalid JSON payload.");
    };
    let Some(services) = request["serviceIds"].as_array() else {
        return bad_request("serviceIds is required.");
    };
    if state.enablement_denied {
        return json_response(
            StatusCode::FORBIDDEN,
            json!({ "error": { "code": 403, "message": "Permission denied to enable service", "status": "PERMISSION_DENIED" } }),
        );
    }
    let Some(project) = state.projects.iter_mut().find(|p| p.id == id) else {
        return not_found("Project");
    };
    for service in services.iter().filter_map(Value::as_str) {
        if !project.enabled_services.iter().any(|s| s == service) {
            project.enabled_services.push(service.to_owned());
        }
    }
    json_response(
        StatusCode::OK,
        json!({ "name": format!("operations/acat.{id}"), "done": true, "response": {} }),
    )
}

async fn create_service_account(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let mut state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    let Some(account_id) = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|request| request["accountId"].as_str().map(str::to_owned))
    else {
        return bad_request("accountId is required.");
    };
    let Some(project) = state.projects.iter_mut().find(|p| p.id == id) else {
        return not_found("Project");
    };
    let email = format!("{account_id}@{id}.iam.gserviceaccount.com");
    if project.service_accounts.contains(&email) {
        return api_error(
            StatusCode::CONFLICT,
            "ALREADY_EXISTS",
            format!("Service account {account_id} already exists within project projects/{id}."),
        );
    }
    project.service_accounts.push(email.clone());
    json_response(
        StatusCode::OK,
        json!({ "name": format!("projects/{id}/serviceAccounts/{email}"), "projectId": id, "email": email }),
    )
}

async fn service_account(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path((id, email)): Path<(String, String)>,
) -> Response {
    let state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    match state.projects.iter().find(|p| p.id == id) {
        Some(project) if project.service_accounts.contains(&email) => json_response(
            StatusCode::OK,
            json!({ "name": format!("projects/{id}/serviceAccounts/{email}"), "projectId": id, "email": email }),
        ),
        _ => not_found("Service account"),
    }
}

async fn iam_policy(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(target): Path<String>,
    body: Bytes,
) -> Response {
    let mut state = state.lock().expect("cloud_a lock");
    if state.user(&headers).is_none() {
        return unauthenticated();
    }
    let Some((id, method)) = target.split_once(':') else {
        return not_found("Method");
    };
    let Some(project) = state.projects.iter_mut().find(|p| p.id == id) else {
        return not_found("Project");
    };
    let policy = |project: &FakeProject| {
        json!({
            "version": 1,
            "etag": format!("BwX{}", project.etag),
            "bindings": project.bindings.iter()
                .map(|(role, members)| json!({ "role": role, "members": members }))
                .collect::<Vec<_>>(),
        })
    };
    match method {
        "getIamPolicy" => json_response(StatusCode::OK, policy(project)),
        "setIamPolicy" => {
            let Ok(request) = serde_json::from_slice::<Value>(&body) else {
                return bad_request("Invalid JSON payload.");
            };
            let new = &request["policy"];
            if new["etag"] != json!(format!("BwX{}", project.etag)) {
                return api_error(StatusCode::CONFLICT, "ABORTED", "There were concurrent policy changes.");
            }
            let Some(bindings) = new["bindings"].as_array() else {
                return bad_request("policy.bindings is required.");
            };
            project.bindings = bindings
                .iter()
                .filter_map(|binding| {
                    let role = binding["role"].as_str()?.to_owned();
                    let members = binding["members"]
                        .as_array()?
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                    Some((role, members))
                })
                .collect();
            project.etag += 1;
            json_response(StatusCode::OK, policy(project))
        }
        _ => not_found("Method"),
    }
}
