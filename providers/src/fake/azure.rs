use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::header::{AUTHORIZATION, HOST};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use reqwest::Url;
use serde_json::{json, Value};

use super::{lock, Failure, FakeServer, RecordedRequest};
use crate::cloud_c::Subscription;

const MANAGEMENT_SCOPE: &str = "https://management.azure.com/.default";
const TOKEN_LIFETIME_SECS: u64 = 3599;

/// A fake identity platform and management API on one server: pass [`FakeAzure::url`] as both the
/// authority base and the management base.
///
/// `POST /{tenant}/oauth2/v2.0/token` grants client-credentials tokens to registered service principals
/// with AADSTS error documents otherwise; `GET /subscriptions?api-version=2020-01-01` lists the token's
/// tenant's subscriptions, [`FakeAzure::set_page_size`] at a time with `nextLink`.
pub struct FakeAzure {
    server: FakeServer,
    state: Arc<Mutex<AzureState>>,
}

struct AzureState {
    tenants: HashMap<String, Tenant>,
    /// Issued token to its tenant.
    tokens: HashMap<String, String>,
    page_size: usize,
}

#[derive(Default)]
struct Tenant {
    /// Client id to client secret.
    clients: HashMap<String, String>,
    subscriptions: Vec<Subscription>,
}

impl FakeAzure {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(AzureState {
            tenants: HashMap::new(),
            tokens: HashMap::new(),
            page_size: 100,
        }));
        let router = Router::new()
            .route("/{tenant}/oauth2/v2.0/token", post(token))
            .route("/subscriptions", get(subscriptions))
            .with_state(state.clone());
        Self {
            server: FakeServer::start(router).await,
            state,
        }
    }

    pub fn url(&self) -> Url {
        self.server.url.clone()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    pub fn set_failure(&self, failure: Option<Failure>) {
        self.server.set_failure(failure);
    }

    /// Registers a service principal (and its tenant, if new).
    pub fn add_service_principal(&self, tenant_id: &str, client_id: &str, client_secret: &str) {
        lock(&self.state)
            .tenants
            .entry(tenant_id.to_owned())
            .or_default()
            .clients
            .insert(client_id.to_owned(), client_secret.to_owned());
    }

    /// Adds a subscription that every principal of `tenant_id` sees, after those already added.
    pub fn add_subscription(&self, tenant_id: &str, subscription: Subscription) {
        lock(&self.state)
            .tenants
            .entry(tenant_id.to_owned())
            .or_default()
            .subscriptions
            .push(subscription);
    }

    /// Subscriptions per page of the listing (100 unless set).
    pub fn set_page_size(&self, page_size: usize) {
        lock(&self.state).page_size = page_size.max(1);
    }
}

fn oauth_error(status: StatusCode, error: &str, code: u64, description: String) -> Response {
    let body = json!({
        "error": error,
        "error_description": format!(
            "AADSTS{code}: {description}\r\nTrace ID: {trace}\r\nCorrelation ID: {correlation}\r\nTimestamp: {now}",
            trace = uuid::Uuid::new_v4(),
            correlation = uuid::Uuid::new_v4(),
            now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%SZ"),
        ),
        "error_codes": [code],
        "timestamp": chrono::Utc::now().format("%Y-%m-%d %H:%M:%SZ").to_string(),
        "trace_id": uuid::Uuid::new_v4().to_string(),
        "correlation_id": uuid::Uuid::new_v4().to_string(),
        "error_uri": format!("https://login.microsoftonline.com/error?code={code}"),
    });
    (status, Json(body)).into_response()
}

async fn token(
    State(state): State<Arc<Mutex<AzureState>>>,
    Path(tenant_id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let field = |name: &str| form.get(name).map(String::as_str);
    let mut state = lock(&state);
    let Some(tenant) = state.tenants.get(&tenant_id) else {
        let description = format!(
            "Tenant '{tenant_id}' not found. Check to make sure you have the correct tenant ID and are signing into \
             the correct cloud."
        );
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", 90002, description);
    };
    if field("grant_type") != Some("client_credentials") {
        let description = "The provided value for the input parameter 'grant_type' is not valid.".to_owned();
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", 70003, description);
    }
    if field("scope") != Some(MANAGEMENT_SCOPE) {
        let description = "The provided value for the input parameter 'scope' is not valid.".to_owned();
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_scope", 70011, description);
    }
    let client_id = field("client_id").unwrap_or_default();
    let Some(secret) = tenant.clients.get(client_id) else {
        let description = format!(
            "Application with identifier '{client_id}' was not found in the directory '{tenant_id}'. This can \
             happen if the application has not been installed by the administrator of the tenant."
        );
        return oauth_error(StatusCode::BAD_REQUEST, "unauthorized_client", 700016, description);
    };
    if field("client_secret") != Some(secret.as_str()) {
        let description = format!(
            "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, \
             not the client secret ID, for a secret added to app '{client_id}'."
        );
        return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", 7000215, description);
    }
    let access_token = format!("eyJ0eXAiOiJKV1QifQ.{}.fake", uuid::Uuid::new_v4().simple());
    state.tokens.insert(access_token.clone(), tenant_id);
    Json(json!({
        "token_type": "Bearer",
        "expires_in": TOKEN_LIFETIME_SECS,
        "ext_expires_in": TOKEN_LIFETIME_SECS,
        "access_token": access_token,
    }))
    .into_response()
}

fn management_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": { "code": code, "message": message } }))).into_response()
}

async fn subscriptions(
    State(state): State<Arc<Mutex<AzureState>>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let state = lock(&state);
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(bearer) = bearer else {
        let message = "Authentication failed. The 'Authorization' header is missing.";
        return management_error(StatusCode::UNAUTHORIZED, "AuthenticationFailed", message);
    };
    let Some(tenant) = state
        .tokens
        .get(bearer)
        .and_then(|tenant_id| state.tenants.get(tenant_id))
    else {
        let message = "The access token is invalid.";
        return management_error(StatusCode::UNAUTHORIZED, "InvalidAuthenticationToken", message);
    };
    if query.get("api-version").map(String::as_str) != Some("2020-01-01") {
        let message = "The api-version query parameter (?api-version=) is required for all requests.";
        return management_error(StatusCode::BAD_REQUEST, "MissingApiVersionParameter", message);
    }
    let skip: usize = query
        .get("$skiptoken")
        .and_then(|token| token.parse().ok())
        .unwrap_or(0);
    let page: Vec<Value> = tenant
        .subscriptions
        .iter()
        .skip(skip)
        .take(state.page_size)
        .map(|s| {
            json!({
                "id": format!("/subscriptions/{}", s.subscription_id),
                "authorizationSource": "RoleBased",
                "managedByTenants": [],
                "subscriptionId": s.subscription_id,
                "displayName": s.display_name,
                "state": s.state,
                "subscriptionPolicies": {
                    "locationPlacementId": "Public_2014-09-01",
                    "quotaId": "PayAsYouGo_2014-09-01",
                    "spendingLimit": "Off",
                },
            })
        })
        .collect();
    let next = skip + page.len();
    let mut body = json!({ "value": page, "count": { "type": "Total", "value": tenant.subscriptions.len() } });
    if next < tenant.subscriptions.len() {
        let host = headers
            .get(HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("127.0.0.1");
        body["nextLink"] = json!(format!(
            "http://{host}/subscriptions?api-version=2020-01-01&%24skiptoken={next}"
        ));
    }
    Json(body).into_response()
}
