//! cloud_f: the optional cloud platform behind `CLOUD_F_ENABLED`, connected by the OAuth 2.0
//! authorization-code flow with custom scopes (`CLOUD_F_SCOPES`). The spec shows no cloud_f
//! endpoints; these follow cloud_a's: login, callback (browser redirects to the frontend), status,
//! disconnect. While the flag is off every one of them is 404, as if cloud_f did not exist.

use axum::{
    extract::{FromRequestParts, State},
    http::request::Parts,
    response::Response,
    Json,
};
use chrono::Utc;
use serde::Serialize;
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_secrets::cloud_a::{CloudAClient, CloudAError};

use super::cloud_a::{
    disconnect_deleting, exchange_callback, oauth_error, redirect_to_frontend, Callback, CallbackQuery, LoginRequest,
    LoginResponse, SuccessMessage,
};
use crate::{
    auth::AuthUser,
    connections::{
        self as conn,
        cloud_a_setup::{fresh_oauth_tokens, FreshError},
        not_configured, TokenFields,
    },
    error::{AppError, ErrorBody},
    extract::{JsonBody, Query},
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudF;
/// The one account a cloud_f connection has when the provider names no e-mail.
const DEFAULT_ACCOUNT: &str = "default";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(callback))
        .routes(routes!(status))
        .routes(routes!(disconnect))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CloudFStatus {
    connected: bool,
    provider: &'static str,
    /// The signed-in account's e-mail, when the provider gave one.
    email: Option<String>,
    /// The scopes the service asks for.
    scopes: Vec<String>,
    /// Set when the stored credentials no longer work: `reauthentication_required`.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
}

/// Every cloud_f endpoint's first extractor: 404 while the flag is off, before the caller or the
/// body is looked at (a malformed body would otherwise be a 400 about an endpoint that is off).
struct Enabled;

impl FromRequestParts<AppState> for Enabled {
    type Rejection = AppError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if state.connections.offers(PROVIDER) {
            Ok(Self)
        } else {
            Err(AppError::NotFound("cloud_f is not enabled on this server".into()))
        }
    }
}

/// 503 while the OAuth client is not configured.
fn client(state: &AppState) -> Result<&CloudAClient, AppError> {
    state
        .connections
        .cloud_f
        .as_ref()
        .ok_or_else(|| not_configured(PROVIDER))
}

/// Start connecting cloud_f: the URL of its consent screen, asking for `CLOUD_F_SCOPES`.
#[utoipa::path(post, path = "/cloud_f/login", operation_id = "cloudFLogin", tag = "cloud connections", request_body = LoginRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = LoginResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "userId is not the caller", body = ErrorBody),
        (status = 404, description = "cloud_f is not enabled", body = ErrorBody),
        (status = 503, description = "cloud_f is not configured", body = ErrorBody)))]
async fn login(
    _: Enabled,
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, AppError> {
    let client = client(&state)?;
    conn::check_user_id(&request.user_id, &user.id)?;
    let oauth_state = state.connections.cloud_f_state_signer.issue(&user.id, Utc::now());
    Ok(Json(LoginResponse {
        login_url: client.login_url(&oauth_state).to_string(),
    }))
}

/// Where cloud_f sends the browser back. A valid state leads to a 303 redirect to
/// `<FRONTEND_URL>/connections?provider=cloud_f&status=connected` once the tokens are stored, or
/// on a provider error to `...&status=error&code=<code>`. A missing, forged (or cloud_a's),
/// expired or reused state is refused with 400 and no redirect.
#[utoipa::path(get, path = "/cloud_f/callback", operation_id = "cloudFCallback", tag = "cloud connections", params(CallbackQuery),
    responses((status = 303, description = "to the frontend"), (status = 400, body = ErrorBody),
        (status = 404, description = "cloud_f is not enabled", body = ErrorBody)))]
async fn callback(
    _: Enabled,
    State(state): State<AppState>,
    Query(query): Query<CallbackQuery>,
) -> Result<Response, AppError> {
    let client = client(&state)?;
    let signer = &state.connections.cloud_f_state_signer;
    let (user_id, tokens) = match exchange_callback(&state, PROVIDER, Ok(client), signer, &query).await? {
        Callback::Exchanged { user_id, tokens } => (user_id, tokens),
        Callback::Refused(redirect) => return Ok(redirect),
    };
    let fields = TokenFields {
        email: tokens.email.clone(),
        token_data: Some(json!({ "scopes": state.config.connections.cloud_f_scopes })),
        ..Default::default()
    };
    let credentials = serde_json::to_value(&tokens).expect("tokens serialise");
    let account = tokens.email.clone().unwrap_or_else(|| DEFAULT_ACCOUNT.to_owned());
    conn::save_and_connect(
        &state.connection_handles(),
        &user_id,
        PROVIDER,
        &credentials,
        &fields,
        &account,
        tokens.email.clone(),
    )
    .await?;
    redirect_to_frontend(&state, PROVIDER, &[("status", "connected")])
}

/// Whether cloud_f is connected; an access token expiring within five minutes is refreshed.
#[utoipa::path(get, path = "/cloud_f/status", operation_id = "cloudFStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudFStatus), (status = 401, body = ErrorBody),
        (status = 404, description = "cloud_f is not enabled", body = ErrorBody),
        (status = 502, description = "cloud_f unreachable; retry", body = ErrorBody),
        (status = 503, description = "cloud_f is not configured", body = ErrorBody)))]
async fn status(_: Enabled, State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudFStatus>, AppError> {
    let client = client(&state)?;
    let scopes = state.config.connections.cloud_f_scopes.clone();
    let disconnected = |scopes, error| CloudFStatus {
        connected: false,
        provider: PROVIDER.as_str(),
        email: None,
        scopes,
        error,
    };
    let Some(record) = conn::tokens::find(&state.db, &user.id, PROVIDER.as_str()).await? else {
        return Ok(Json(disconnected(scopes, None)));
    };
    let connected = conn::credentials_account(&state.db, &record).await?.is_some();
    // As for cloud_a: kept tokens of an account that is not connected are not used.
    if !connected && !conn::has_failed_connection(&state.db, &user.id, PROVIDER).await? {
        return Ok(Json(disconnected(scopes, None)));
    }
    let handles = state.connection_handles();
    let tokens = match fresh_oauth_tokens(&handles, client, PROVIDER, &user.id).await {
        Ok(Some((_, tokens))) => tokens,
        Ok(None) => return Ok(Json(disconnected(scopes, None))),
        Err(FreshError::OAuth(CloudAError::RefreshExpired)) => {
            conn::mark_failed(&handles, &user.id, PROVIDER, "the refresh token expired or was revoked").await?;
            return Ok(Json(disconnected(scopes, Some("reauthentication_required"))));
        }
        Err(FreshError::OAuth(error)) => return Err(oauth_error(PROVIDER, error)),
        Err(FreshError::Store(error)) => return Err(error),
    };
    Ok(Json(CloudFStatus {
        connected,
        provider: PROVIDER.as_str(),
        email: tokens.email,
        scopes,
        error: None,
    }))
}

/// Disconnect cloud_f and delete its stored credentials.
#[utoipa::path(post, path = "/cloud_f/disconnect", operation_id = "cloudFDisconnect", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SuccessMessage), (status = 401, body = ErrorBody),
        (status = 404, description = "cloud_f is not enabled", body = ErrorBody)))]
async fn disconnect(
    _: Enabled,
    State(state): State<AppState>,
    user: AuthUser,
) -> Result<Json<SuccessMessage>, AppError> {
    disconnect_deleting(&state, &user.id, PROVIDER, "credentials").await
}
