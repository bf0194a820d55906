use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use reqwest::Url;
use serde_json::{json, Value};

use super::{lock, Failure, FakeServer, RecordedRequest};
use crate::cloud_d::{AccessKey, Project, SecretKey};

/// The provider's own cap on `page_size`.
const PAGE_SIZE_LIMIT: usize = 100;
const CREATED_AT: &str = "2024-05-02T09:12:44.182919Z";

/// A fake of the provider's IAM and Account APIs, authenticating `X-Auth-Token` against registered keys.
///
/// - `GET /iam/v1alpha1/api-keys/{access_key}`: the API key object, which like the real one carries no
///   `organization_id` unless [`FakeScaleway::set_api_key_shows_organization`].
/// - `GET /account/v3/projects/{project_id}`: one project.
/// - `GET /account/v3/projects?organization_id=&page=&page_size=`: projects of the organization
///   (`organization_id` required), at most [`FakeScaleway::set_max_page_size`] a page.
///
/// An unknown token gets 401 `denied_authentication`; another organization's resources 403
/// `permissions_denied`; an unknown resource 404 `not_found`.
pub struct FakeScaleway {
    server: FakeServer,
    state: Arc<Mutex<ScalewayState>>,
}

struct ScalewayState {
    keys: Vec<ApiKeyRecord>,
    projects: Vec<Project>,
    max_page_size: usize,
    api_key_shows_organization: bool,
}

struct ApiKeyRecord {
    access_key: String,
    secret_key: String,
    organization_id: String,
    default_project_id: String,
}

impl FakeScaleway {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(ScalewayState {
            keys: Vec::new(),
            projects: Vec::new(),
            max_page_size: PAGE_SIZE_LIMIT,
            api_key_shows_organization: false,
        }));
        let router = Router::new()
            .route("/iam/v1alpha1/api-keys/{access_key}", get(api_key))
            .route("/account/v3/projects", get(list_projects))
            .route("/account/v3/projects/{project_id}", get(project))
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

    pub fn add_api_key(
        &self,
        access_key: &AccessKey,
        secret_key: &SecretKey,
        organization_id: &str,
        default_project_id: &str,
    ) {
        lock(&self.state).keys.push(ApiKeyRecord {
            access_key: access_key.to_string(),
            secret_key: secret_key.expose().to_owned(),
            organization_id: organization_id.to_owned(),
            default_project_id: default_project_id.to_owned(),
        });
    }

    /// Adds a project, listed after those already added.
    pub fn add_project(&self, project: Project) {
        lock(&self.state).projects.push(project);
    }

    /// Serves at most `max_page_size` projects a page whatever `page_size` asks (to exercise paging).
    pub fn set_max_page_size(&self, max_page_size: usize) {
        lock(&self.state).max_page_size = max_page_size.clamp(1, PAGE_SIZE_LIMIT);
    }

    /// Whether the API key object carries `organization_id` (the real one does not).
    pub fn set_api_key_shows_organization(&self, shows: bool) {
        lock(&self.state).api_key_shows_organization = shows;
    }
}

fn error(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn denied_authentication() -> Response {
    let body = json!({
        "message": "authentication is denied",
        "method": "api_key",
        "reason": "invalid_argument",
        "type": "denied_authentication",
    });
    error(StatusCode::UNAUTHORIZED, body)
}

fn permissions_denied(resource: &str) -> Response {
    let body = json!({
        "message": "insufficient permissions",
        "type": "permissions_denied",
        "details": [{ "resource": resource, "action": "read" }],
    });
    error(StatusCode::FORBIDDEN, body)
}

fn not_found(resource: &str, resource_id: &str) -> Response {
    let body = json!({
        "message": "resource is not found",
        "resource": resource,
        "resource_id": resource_id,
        "type": "not_found",
    });
    error(StatusCode::NOT_FOUND, body)
}

fn invalid_argument(argument_name: &str, help_message: &str) -> Response {
    let body = json!({
        "message": "invalid argument(s)",
        "type": "invalid_arguments",
        "details": [{ "argument_name": argument_name, "reason": "constraint", "help_message": help_message }],
    });
    error(StatusCode::BAD_REQUEST, body)
}

/// The organization of the key whose secret is the request's `X-Auth-Token`.
fn caller_organization(state: &ScalewayState, headers: &HeaderMap) -> Option<String> {
    let token = headers.get("x-auth-token")?.to_str().ok()?;
    state
        .keys
        .iter()
        .find(|key| key.secret_key == token)
        .map(|key| key.organization_id.clone())
}

fn project_json(project: &Project) -> Value {
    json!({
        "id": project.project_id,
        "name": project.project_name,
        "organization_id": project.organization_id,
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
        "description": project.description,
    })
}

async fn api_key(
    State(state): State<Arc<Mutex<ScalewayState>>>,
    Path(access_key): Path<String>,
    headers: HeaderMap,
) -> Response {
    let state = lock(&state);
    let Some(caller) = caller_organization(&state, &headers) else {
        return denied_authentication();
    };
    let Some(key) = state.keys.iter().find(|key| key.access_key == access_key) else {
        return not_found("api_key", &access_key);
    };
    if key.organization_id != caller {
        return permissions_denied("api_key");
    }
    let mut body = json!({
        "access_key": key.access_key,
        "secret_key": null,
        "application_id": uuid::Uuid::new_v4().to_string(),
        "user_id": null,
        "description": "",
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
        "expires_at": null,
        "default_project_id": key.default_project_id,
        "editable": true,
        "deletable": true,
        "managed": false,
        "creation_ip": "192.0.2.10",
    });
    if state.api_key_shows_organization {
        body["organization_id"] = json!(key.organization_id);
    }
    Json(body).into_response()
}

async fn project(
    State(state): State<Arc<Mutex<ScalewayState>>>,
    Path(project_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let state = lock(&state);
    let Some(caller) = caller_organization(&state, &headers) else {
        return denied_authentication();
    };
    let Some(project) = state.projects.iter().find(|project| project.project_id == project_id) else {
        return not_found("project", &project_id);
    };
    if project.organization_id != caller {
        return permissions_denied("project");
    }
    Json(project_json(project)).into_response()
}

async fn list_projects(
    State(state): State<Arc<Mutex<ScalewayState>>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let state = lock(&state);
    let Some(caller) = caller_organization(&state, &headers) else {
        return denied_authentication();
    };
    let Some(organization_id) = query.get("organization_id") else {
        return invalid_argument("organization_id", "required");
    };
    if *organization_id != caller {
        return permissions_denied("project");
    }
    let number = |name: &str, default: usize| query.get(name).map_or(Some(default), |value| value.parse().ok());
    let Some(page) = number("page", 1).filter(|page| *page >= 1) else {
        return invalid_argument("page", "must be at least 1");
    };
    let Some(page_size) = number("page_size", 20).filter(|size| (1..=PAGE_SIZE_LIMIT).contains(size)) else {
        return invalid_argument("page_size", "must be between 1 and 100");
    };
    let served = page_size.min(state.max_page_size);
    let organization: Vec<&Project> = state
        .projects
        .iter()
        .filter(|project| project.organization_id == *organization_id)
        .collect();
    let projects: Vec<Value> = organization
        .iter()
        .skip((page - 1).saturating_mul(served))
        .take(served)
        .map(|project| project_json(project))
        .collect();
    Json(json!({ "total_count": organization.len(), "projects": projects })).into_response()
}
