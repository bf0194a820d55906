//! cloud_d: access key and secret key (spec Endpoints → cloud_d). Every check is a live call.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_providers::cloud_d::{AccessKey, Project, ScalewayError, SecretKey};

use crate::{
    auth::AuthUser,
    connections::{self as conn, provider_unavailable, TokenFields},
    error::{AppError, ErrorBody},
    extract::JsonBody,
    http::cloud_a::{disconnect_deleting, SuccessMessage},
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudD;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(connect))
        .routes(routes!(projects))
        .routes(routes!(disconnect))
        .routes(routes!(status))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudDConnectRequest)]
pub struct ConnectRequest {
    /// `SCW` followed by 17 uppercase letters or digits.
    #[schema(pattern = "^SCW[A-Z0-9]{17}$")]
    access_key: String,
    /// A UUID.
    #[schema(format = Uuid)]
    secret_key: String,
    /// Detected from the key when absent.
    organization_id: Option<String>,
    /// The organization's first project when absent.
    project_id: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudDConnectResponse)]
pub struct ConnectResponse {
    success: bool,
    message: String,
    organization_id: String,
    projects_count: usize,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectItem {
    project_id: String,
    project_name: String,
    organization_id: String,
    description: String,
    enabled: bool,
}

impl From<Project> for ProjectItem {
    fn from(project: Project) -> Self {
        Self {
            project_id: project.project_id,
            project_name: project.project_name,
            organization_id: project.organization_id,
            description: project.description,
            enabled: project.enabled,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ProjectList {
    projects: Vec<ProjectItem>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CloudDStatus {
    connected: bool,
    provider: &'static str,
}

/// Connect a key pair: detects the organization and the project with live calls.
#[utoipa::path(post, path = "/cloud_d_api/cloud_d/connect", operation_id = "cloudDConnect", tag = "cloud connections", request_body = ConnectRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = ConnectResponse),
        (status = 400, description = "malformed or rejected keys, unknown project", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
async fn connect(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<ConnectRequest>,
) -> Result<Json<ConnectResponse>, AppError> {
    let access_key: AccessKey = request
        .access_key
        .trim()
        .parse()
        .map_err(|error| AppError::bad_request("invalid_access_key", format!("accessKey: {error}")))?;
    let secret_key: SecretKey = request
        .secret_key
        .trim()
        .parse()
        .map_err(|error| AppError::bad_request("invalid_secret_key", format!("secretKey: {error}")))?;
    let client = &state.connections.scaleway;
    let organization_id = match request
        .organization_id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        Some(id) => id.to_owned(),
        None => client
            .organization_of(&access_key, &secret_key)
            .await
            .map_err(scaleway_error)?,
    };
    let projects = client
        .list_projects(&secret_key, &organization_id)
        .await
        .map_err(scaleway_error)?;
    let project = match request.project_id.as_deref().map(str::trim).filter(|id| !id.is_empty()) {
        Some(id) => projects.iter().find(|p| p.project_id == id).ok_or_else(|| {
            AppError::bad_request(
                "project_not_found",
                format!("project {id} is not in organization {organization_id}"),
            )
        })?,
        None => projects.first().ok_or_else(|| {
            AppError::bad_request("no_project", format!("organization {organization_id} has no project"))
        })?,
    };
    let stored = json!({
        "access_key": access_key.as_str(),
        "secret_key": secret_key.expose(),
        "organization_id": organization_id,
        "project_id": project.project_id,
    });
    let fields = TokenFields {
        token_data: Some(json!({
            "organization_id": organization_id,
            "project_id": project.project_id,
            "project_name": project.project_name,
        })),
        ..Default::default()
    };
    conn::save_and_connect(
        &state.connection_handles(),
        &user.id,
        PROVIDER,
        &stored,
        &fields,
        &organization_id,
        Some(project.project_name.clone()),
    )
    .await?;
    Ok(Json(ConnectResponse {
        success: true,
        message: format!("Connected cloud_d organization {organization_id}"),
        organization_id,
        projects_count: projects.len(),
    }))
}

fn scaleway_error(error: ScalewayError) -> AppError {
    match error {
        ScalewayError::InvalidCredentials(_) => {
            AppError::bad_request("invalid_credentials", "cloud_d rejected the access key or secret key")
        }
        ScalewayError::AccessDenied(_) => AppError::bad_request("access_denied", error.to_string()),
        ScalewayError::Rejected { .. } => AppError::bad_request("provider_rejected", error.to_string()),
        other => provider_unavailable(PROVIDER, other),
    }
}

/// The stored secret key and organization; `None` while cloud_d is not connected (kept keys included).
async fn stored(state: &AppState, user_id: &str) -> Result<Option<(SecretKey, String)>, AppError> {
    let Some((_, stored)) = state.connections.load_connected(&state.db, user_id, PROVIDER).await? else {
        return Ok(None);
    };
    let field = |name: &str| stored.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
    let secret_key = field("secret_key")
        .parse()
        .map_err(|_| AppError::Internal(anyhow::anyhow!("stored cloud_d secret key does not parse")))?;
    Ok(Some((secret_key, field("organization_id"))))
}

/// The organization's projects, listed live.
#[utoipa::path(get, path = "/cloud_d_api/cloud_d/projects", operation_id = "cloudDProjects", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = ProjectList), (status = 401, body = ErrorBody),
        (status = 404, description = "cloud_d is not connected", body = ErrorBody), (status = 502, body = ErrorBody)))]
async fn projects(State(state): State<AppState>, user: AuthUser) -> Result<Json<ProjectList>, AppError> {
    let (secret_key, organization_id) = stored(&state, &user.id)
        .await?
        .ok_or_else(|| AppError::NotFound("cloud_d is not connected".into()))?;
    let projects = state
        .connections
        .scaleway
        .list_projects(&secret_key, &organization_id)
        .await
        .map_err(scaleway_error)?;
    Ok(Json(ProjectList {
        projects: projects.into_iter().map(ProjectItem::from).collect(),
    }))
}

/// Disconnect cloud_d and delete its stored keys.
#[utoipa::path(post, path = "/cloud_d_api/cloud_d/disconnect", operation_id = "cloudDDisconnect", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SuccessMessage), (status = 401, body = ErrorBody)))]
async fn disconnect(State(state): State<AppState>, user: AuthUser) -> Result<Json<SuccessMessage>, AppError> {
    disconnect_deleting(&state, &user.id, PROVIDER, "keys").await
}

/// Whether cloud_d is connected and its stored keys still work (a live call).
#[utoipa::path(get, path = "/cloud_d_api/cloud_d/status", operation_id = "cloudDStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudDStatus), (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
async fn status(State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudDStatus>, AppError> {
    let status = |connected| CloudDStatus {
        connected,
        provider: PROVIDER.as_str(),
    };
    let Some((secret_key, organization_id)) = stored(&state, &user.id).await? else {
        return Ok(Json(status(false)));
    };
    match state.connections.scaleway.validate(&secret_key, &organization_id).await {
        Ok(()) => Ok(Json(status(true))),
        Err(ScalewayError::InvalidCredentials(_) | ScalewayError::AccessDenied(_)) => {
            conn::mark_failed(
                &state.connection_handles(),
                &user.id,
                PROVIDER,
                "cloud_d rejected the stored keys",
            )
            .await?;
            Ok(Json(status(false)))
        }
        Err(error) => Err(scaleway_error(error)),
    }
}
