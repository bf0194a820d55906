//! cloud_b: role assumption with an external ID (spec Endpoints → cloud_b). The service assumes
//! the user's role through STS; the temporary credentials are kept in the secrets store and
//! assumed again when they expire within five minutes.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_providers::cloud_b::RoleArn;

use crate::{
    auth::AuthUser,
    connections::{
        self as conn,
        cloud_b::{assume, fresh, stored_credentials},
        StatusError, StatusErrorBody, TokenFields,
    },
    error::{AppError, ErrorBody},
    extract::JsonBody,
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudB;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(external_id))
        .routes(routes!(auth))
        .routes(routes!(get_credentials))
        .routes(routes!(status))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ExternalIdResponse {
    /// The external ID the role's trust policy must require; the same on every call.
    external_id: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct AuthRequest {
    /// Must be the authenticated user.
    #[serde(rename = "userId")]
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    user_id: String,
    /// `arn:aws:iam::<12-digit account id>:role/<role name>`.
    role_arn: String,
    /// Must be the caller's external ID (`GET /cloud_b/external-id`).
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    external_id: String,
    /// Role used in Ask (read-only) mode.
    read_only_role_arn: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct AuthResponse {
    /// `success`
    status: &'static str,
    message: String,
    account_id: String,
    /// When the assumed credentials expire (they are renewed automatically).
    expires_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CredentialsResponse {
    status: &'static str,
    message: String,
    has_credentials: bool,
    role_arn: Option<String>,
    account_id: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CloudBStatus {
    connected: bool,
    provider: &'static str,
    role_arn: Option<String>,
    account_id: Option<String>,
}

/// The caller's external ID, to put in the role's trust policy before connecting.
#[utoipa::path(get, path = "/cloud_b/external-id", operation_id = "cloudBExternalId", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = ExternalIdResponse), (status = 401, body = ErrorBody)))]
async fn external_id(State(state): State<AppState>, user: AuthUser) -> Json<ExternalIdResponse> {
    Json(ExternalIdResponse {
        external_id: state.connections.external_id(&user.id),
    })
}

/// Connect a role: validates the ARN and the external ID, assumes the role, stores it. Failures
/// answer in the spec's shape too: `status: "error"` and `message`, beside `error` and `code`.
#[utoipa::path(post, path = "/cloud_b/auth", operation_id = "cloudBAuth", tag = "cloud connections", request_body = AuthRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = AuthResponse),
        (status = 400, description = "missing field or blank userId, bad ARN, wrong external ID, or the role refused to be assumed",
            body = StatusErrorBody),
        (status = 401, body = StatusErrorBody), (status = 403, description = "userId is not the caller", body = StatusErrorBody),
        (status = 502, body = StatusErrorBody),
        (status = 503, description = "the service's own cloud_b credentials are not configured or rejected", body = StatusErrorBody)))]
async fn auth(
    State(state): State<AppState>,
    user: Result<AuthUser, AppError>,
    request: Result<JsonBody<AuthRequest>, AppError>,
) -> Result<Json<AuthResponse>, StatusError> {
    let (user, JsonBody(request)) = (user?, request?);
    Ok(connect_role(&state, &user, request).await?)
}

async fn connect_role(state: &AppState, user: &AuthUser, request: AuthRequest) -> Result<Json<AuthResponse>, AppError> {
    conn::check_user_id(&request.user_id, &user.id)?;
    let role_arn: RoleArn = request
        .role_arn
        .trim()
        .parse()
        .map_err(|error| AppError::bad_request("invalid_role_arn", format!("role_arn: {error}")))?;
    let read_only_role_arn = match request.read_only_role_arn.as_deref().map(str::trim) {
        Some(arn) if !arn.is_empty() => Some(
            arn.parse::<RoleArn>()
                .map_err(|error| AppError::bad_request("invalid_role_arn", format!("read_only_role_arn: {error}")))?,
        ),
        _ => None,
    };
    let expected = state.connections.external_id(&user.id);
    if request.external_id.trim() != expected {
        return Err(AppError::bad_request(
            "external_id_mismatch",
            "external_id is not yours: use the one from GET /cloud_b/external-id",
        ));
    }
    let handles = state.connection_handles();
    let credentials = assume(&handles, &user.id, &role_arn, &expected).await?;
    // Checked on connect like the main role: Ask mode would otherwise find it unusable later.
    if let Some(read_only) = &read_only_role_arn {
        assume(&handles, &user.id, read_only, &expected)
            .await
            .map_err(|error| match error {
                AppError::BadRequest { code, message } => {
                    AppError::bad_request(code, format!("read_only_role_arn: {message}"))
                }
                other => other,
            })?;
    }
    let stored = stored_credentials(&role_arn, &expected, read_only_role_arn.as_ref(), &credentials);
    let fields = TokenFields {
        token_data: Some(json!({
            "role_arn": role_arn.as_str(),
            "account_id": role_arn.account_id(),
            "read_only_role_arn": read_only_role_arn.as_ref().map(RoleArn::as_str),
        })),
        ..Default::default()
    };
    conn::save_and_connect(
        &handles,
        &user.id,
        PROVIDER,
        &stored,
        &fields,
        role_arn.account_id(),
        None,
    )
    .await?;
    Ok(Json(AuthResponse {
        status: "success",
        message: format!("Connected cloud_b account {}", role_arn.account_id()),
        account_id: role_arn.account_id().to_owned(),
        expires_at: credentials.expiration,
    }))
}

/// Whether usable credentials are stored (assuming the role again if they expired): none while
/// the role's account is not connected. No credential value is returned. Failures carry
/// `status: "error"` and `message` too.
#[utoipa::path(get, path = "/cloud_b/get-credentials", operation_id = "cloudBGetCredentials", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CredentialsResponse),
        (status = 400, description = "the stored role can no longer be assumed", body = StatusErrorBody),
        (status = 401, body = StatusErrorBody), (status = 502, body = StatusErrorBody), (status = 503, body = StatusErrorBody)))]
async fn get_credentials(
    State(state): State<AppState>,
    user: Result<AuthUser, AppError>,
) -> Result<Json<CredentialsResponse>, StatusError> {
    let user = user?;
    let Some((stored, expiration)) = fresh(&state.connection_handles(), &user.id).await? else {
        return Ok(Json(CredentialsResponse {
            status: "success",
            message: "cloud_b is not connected".into(),
            has_credentials: false,
            role_arn: None,
            account_id: None,
        }));
    };
    let role_arn: Option<RoleArn> = stored["role_arn"].as_str().and_then(|arn| arn.parse().ok());
    Ok(Json(CredentialsResponse {
        status: "success",
        message: format!("Credentials valid until {}", expiration.to_rfc3339()),
        has_credentials: true,
        account_id: role_arn.as_ref().map(|arn| arn.account_id().to_owned()),
        role_arn: role_arn.map(|arn| arn.to_string()),
    }))
}

/// Whether cloud_b is connected, with the role's ARN and account.
#[utoipa::path(get, path = "/cloud_b/status", operation_id = "cloudBStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudBStatus), (status = 401, body = ErrorBody)))]
async fn status(State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudBStatus>, AppError> {
    let record = conn::tokens::find(&state.db, &user.id, PROVIDER.as_str()).await?;
    Ok(Json(CloudBStatus {
        connected: conn::has_connected_credentials(&state.db, record.as_ref()).await?,
        provider: PROVIDER.as_str(),
        role_arn: record.as_ref().and_then(|r| r.data_str("role_arn")).map(str::to_owned),
        account_id: record
            .as_ref()
            .and_then(|r| r.data_str("account_id"))
            .map(str::to_owned),
    }))
}
