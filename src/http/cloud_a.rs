//! cloud_a: OAuth 2.0 authorization-code flow (spec Endpoints → cloud_a). The callback is reached
//! by the user's browser, so it answers with redirects to the frontend; its `state` (signed,
//! expiring, single-use) is what identifies the user there.

use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    Json,
};
use chrono::Utc;
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_secrets::{
    cloud_a::{CloudAClient, CloudAError, CloudATokens},
    StateError, StateSigner,
};

use crate::{
    auth::AuthUser,
    connections::{
        self as conn,
        cloud_a_setup::{fresh_tokens, FreshError, SetupPayload, CLOUD_A_SETUP_JOB, TOTAL_STEPS},
        not_configured, provider_unavailable, TokenFields,
    },
    error::{AppError, ErrorBody},
    extract::{JsonBody, Path, Query},
    jobs::{self, JobState, NewJob},
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudA;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(login_alias))
        .routes(routes!(callback))
        .routes(routes!(callback_alias))
        .routes(routes!(setup_status))
        .routes(routes!(status))
        .routes(routes!(force_disconnect))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = CloudALoginRequest)]
pub struct LoginRequest {
    /// Must be the authenticated user.
    #[serde(rename = "userId")]
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    pub(super) user_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = CloudALoginResponse)]
pub struct LoginResponse {
    /// The consent-screen URL to send the user to; its `state` is signed, expires after 10
    /// minutes and can be used once.
    pub(super) login_url: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
pub struct CallbackQuery {
    pub(super) code: Option<String>,
    pub(super) state: Option<String>,
    /// Set by the provider instead of `code` when the user declined (`access_denied`).
    pub(super) error: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SetupStatus {
    /// `PENDING`, `STARTED`, `PROGRESS`, `SUCCESS` or `FAILURE`.
    state: &'static str,
    status: String,
    complete: bool,
    /// Percent done, 0 to 100; absent when not known (a failure before the first step).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 100)]
    progress: Option<u32>,
    /// The step running (or reached), 1 to `total_steps`; absent before the first step.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    step: Option<u32>,
    total_steps: u32,
}

impl SetupStatus {
    /// Also the answer for an unknown task id (or another user's), as a task queue gives it.
    fn pending() -> Self {
        Self {
            state: "PENDING",
            status: "Waiting to start".into(),
            complete: false,
            progress: Some(0),
            step: None,
            total_steps: TOTAL_STEPS,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CloudAStatus {
    connected: bool,
    provider: &'static str,
    project_id: Option<String>,
    has_billing: bool,
    /// Set when the stored credentials no longer work: `reauthentication_required`.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SuccessMessage {
    pub success: bool,
    pub message: String,
}

fn client(state: &AppState) -> Result<&CloudAClient, AppError> {
    state
        .connections
        .cloud_a
        .as_ref()
        .ok_or_else(|| not_configured(PROVIDER))
}

/// Start connecting cloud_a: the URL of the consent screen.
#[utoipa::path(post, path = "/cloud_a/login", operation_id = "cloudALogin", tag = "cloud connections", request_body = LoginRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = LoginResponse),
        (status = 400, description = "userId missing or blank", body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "userId is not the caller", body = ErrorBody),
        (status = 503, description = "the service's cloud_a OAuth client is not configured (`provider_not_configured`)", body = ErrorBody)))]
async fn login(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, AppError> {
    conn::check_user_id(&request.user_id, &user.id)?;
    // The URL needs the client id, and a sign-in the callback could not finish (no client
    // secret to exchange the code with) is not worth starting.
    let client = state.connections.cloud_a.as_ref().ok_or_else(|| AppError::Refused {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "provider_not_configured",
        message: "cloud_a sign-in is not available: this service's cloud_a OAuth client is not configured \
                  (its operator must set CLOUD_A_CLIENT_ID and CLOUD_A_CLIENT_SECRET)"
            .into(),
    })?;
    let oauth_state = state.connections.state_signer.issue(&user.id, Utc::now());
    Ok(Json(LoginResponse {
        login_url: client.login_url(&oauth_state).to_string(),
    }))
}

/// Same as `POST /cloud_a/login`.
#[utoipa::path(post, path = "/login", operation_id = "cloudALoginAlias", tag = "cloud connections", request_body = LoginRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = LoginResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "userId is not the caller", body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn login_alias(
    state: State<AppState>,
    user: AuthUser,
    body: JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, AppError> {
    login(state, user, body).await
}

/// Where cloud_a sends the browser back. A valid state leads to a 303 redirect to
/// `<FRONTEND_URL>/connections?provider=cloud_a&status=pending&task_id=<id>` (setup running), or
/// on a provider error to `...&status=error&code=<code>`. A missing, forged, expired or reused
/// state is refused with 400 and no redirect.
#[utoipa::path(get, path = "/cloud_a/callback", operation_id = "cloudACallback", tag = "cloud connections", params(CallbackQuery),
    responses((status = 303, description = "to the frontend"), (status = 400, body = ErrorBody)))]
async fn callback(State(state): State<AppState>, Query(query): Query<CallbackQuery>) -> Result<Response, AppError> {
    let connectors = &state.connections;
    let (user_id, tokens) =
        match exchange_callback(&state, PROVIDER, client(&state), &connectors.state_signer, &query).await? {
            Callback::Exchanged { user_id, tokens } => (user_id, tokens),
            Callback::Refused(redirect) => return Ok(redirect),
        };
    let fields = TokenFields {
        email: tokens.email.clone(),
        token_data: Some(json!({})),
        ..Default::default()
    };
    let credentials = serde_json::to_value(&tokens).expect("tokens serialise");
    connectors
        .save(&state.db, &user_id, PROVIDER, &credentials, &fields)
        .await?;
    let job = NewJob::new(CLOUD_A_SETUP_JOB, json!(SetupPayload { user_id }));
    let task_id = jobs::enqueue(&state.db, job).await.map_err(AppError::unexpected)?.id();
    redirect_to_frontend(
        &state,
        PROVIDER,
        &[("status", "pending"), ("task_id", &task_id.to_string())],
    )
}

/// How an authorization-code callback went, once its state proved genuine.
pub(super) enum Callback {
    Exchanged {
        user_id: String,
        tokens: CloudATokens,
    },
    /// The provider refused, or sent no code: the browser goes back to the frontend with a code.
    Refused(Response),
}

/// The part of an authorization-code callback cloud_a and cloud_f share: the state is checked
/// against `signer` (400 when missing, forged, expired or reused), then the code is exchanged
/// with `client` (an error of its own, such as not configured, only once the state is good).
pub(super) async fn exchange_callback(
    state: &AppState,
    provider: Provider,
    client: Result<&CloudAClient, AppError>,
    signer: &StateSigner,
    query: &CallbackQuery,
) -> Result<Callback, AppError> {
    let oauth_state = query
        .state
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| AppError::bad_request("invalid_state", "the OAuth state is missing"))?;
    let claims = signer
        .verify_once(oauth_state, Utc::now(), &state.connections.nonces)
        .await
        .map_err(state_error)?;
    let refused = |error| oauth_failure_redirect(state, provider, error).map(Callback::Refused);
    if let Some(error) = query.error.as_deref() {
        return refused(CloudAError::from_callback(error));
    }
    let Some(code) = query.code.as_deref().filter(|c| !c.is_empty()) else {
        return redirect_to_frontend(state, provider, &[("status", "error"), ("code", "missing_code")])
            .map(Callback::Refused);
    };
    match client?.exchange_code(code).await {
        Ok(tokens) => Ok(Callback::Exchanged {
            user_id: claims.user_id,
            tokens,
        }),
        Err(error) => refused(error),
    }
}

/// Same as `GET /cloud_a/callback`.
#[utoipa::path(get, path = "/callback", operation_id = "cloudACallbackAlias", tag = "cloud connections", params(CallbackQuery),
    responses((status = 303, description = "to the frontend"), (status = 400, body = ErrorBody)))]
async fn callback_alias(state: State<AppState>, query: Query<CallbackQuery>) -> Result<Response, AppError> {
    callback(state, query).await
}

fn state_error(error: StateError) -> AppError {
    let code = match error {
        StateError::Expired => "state_expired",
        StateError::Replayed => "state_replayed",
        StateError::Malformed | StateError::BadSignature | StateError::KeyTooShort => "invalid_state",
        StateError::Store(store) => return conn::store_error(store),
    };
    AppError::bad_request(code, error.to_string())
}

/// The spec's OAuth failures, as codes for the frontend.
fn oauth_code(error: &CloudAError) -> &'static str {
    match error {
        CloudAError::InvalidGrant => "invalid_grant",
        CloudAError::AccessDenied => "access_denied",
        CloudAError::InvalidClient => "invalid_client",
        CloudAError::RefreshExpired => "reauthentication_required",
        CloudAError::Network(_) => "network_error",
        _ => "oauth_error",
    }
}

/// The browser's way back after an OAuth failure: `...&status=error&code=<code>`.
fn oauth_failure_redirect(state: &AppState, provider: Provider, error: CloudAError) -> Result<Response, AppError> {
    tracing::info!(%provider, code = oauth_code(&error), %error, "OAuth sign-in failed");
    redirect_to_frontend(state, provider, &[("status", "error"), ("code", oauth_code(&error))])
}

/// 303 to `<FRONTEND_URL>/connections?provider=<provider>&<pairs>`.
pub(super) fn redirect_to_frontend(
    state: &AppState,
    provider: Provider,
    pairs: &[(&str, &str)],
) -> Result<Response, AppError> {
    let mut url = Url::parse(&state.config.frontend_url)
        .and_then(|base| base.join("connections"))
        .map_err(|error| AppError::Internal(anyhow::anyhow!("FRONTEND_URL: {error}")))?;
    url.query_pairs_mut()
        .append_pair("provider", provider.as_str())
        .extend_pairs(pairs);
    Ok(Redirect::to(url.as_str()).into_response())
}

/// Progress of the post-auth setup started by the callback (`task_id` from its redirect). As in
/// a task queue, an id it does not know (or another user's task) reads as `PENDING`, exactly like
/// a task waiting to start.
#[utoipa::path(get, path = "/cloud_a/setup/status/{task_id}", operation_id = "cloudASetupStatus", tag = "cloud connections",
    params(("task_id" = String, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SetupStatus), (status = 401, body = ErrorBody)))]
async fn setup_status(
    State(state): State<AppState>,
    user: AuthUser,
    Path(task_id): Path<String>,
) -> Result<Json<SetupStatus>, AppError> {
    let Ok(id) = task_id.parse::<i64>() else {
        return Ok(Json(SetupStatus::pending()));
    };
    let job = jobs::get(&state.db, id)
        .await
        .map_err(AppError::unexpected)?
        .filter(|job| job.kind == CLOUD_A_SETUP_JOB)
        .filter(|job| job.payload.get("user_id").and_then(|v| v.as_str()) == Some(user.id.as_str()));
    let Some(job) = job else {
        return Ok(Json(SetupStatus::pending()));
    };
    let step = job
        .progress
        .as_ref()
        .and_then(|p| p.get("step"))
        .and_then(|s| s.as_u64())
        .map(|s| s as u32);
    let step_text = job
        .progress
        .as_ref()
        .and_then(|p| p.get("status"))
        .and_then(|s| s.as_str())
        .map(str::to_owned);
    let percent = |step: u32| step.saturating_sub(1) * 100 / TOTAL_STEPS;
    let status = match job.state {
        JobState::Available => SetupStatus::pending(),
        JobState::Running | JobState::Retryable => match step {
            None => SetupStatus {
                state: "STARTED",
                status: "Starting".into(),
                complete: false,
                progress: Some(0),
                step: None,
                total_steps: TOTAL_STEPS,
            },
            Some(step) => SetupStatus {
                state: "PROGRESS",
                status: step_text.unwrap_or_default(),
                complete: false,
                progress: Some(percent(step)),
                step: Some(step),
                total_steps: TOTAL_STEPS,
            },
        },
        JobState::Completed => SetupStatus {
            state: "SUCCESS",
            status: "Setup complete".into(),
            complete: true,
            progress: Some(100),
            step: Some(TOTAL_STEPS),
            total_steps: TOTAL_STEPS,
        },
        JobState::Discarded | JobState::Cancelled => SetupStatus {
            state: "FAILURE",
            status: match job.last_error {
                Some(error) => format!("Setup failed: {error}"),
                None => "Setup was cancelled".into(),
            },
            complete: true,
            progress: step.map(percent),
            step,
            total_steps: TOTAL_STEPS,
        },
    };
    Ok(Json(status))
}

/// Whether cloud_a is connected. Checks the credentials: an access token expiring within five
/// minutes is refreshed, and billing is read live for the connected project.
#[utoipa::path(get, path = "/cloud_a/status", operation_id = "cloudAStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudAStatus), (status = 401, body = ErrorBody),
        (status = 502, description = "cloud_a unreachable; retry", body = ErrorBody),
        (status = 503, description = "stored credentials cannot be checked: the service's cloud_a OAuth client is not \
            configured, or cloud_a rejects it", body = ErrorBody)))]
async fn status(State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudAStatus>, AppError> {
    let disconnected = |error| CloudAStatus {
        connected: false,
        provider: PROVIDER.as_str(),
        project_id: None,
        has_billing: false,
        error,
    };
    let Some(record) = conn::tokens::find(&state.db, &user.id, PROVIDER.as_str()).await? else {
        return Ok(Json(disconnected(None)));
    };
    // Only stored credentials need the OAuth client (to be refreshed and checked).
    let client = state
        .connections
        .cloud_a
        .as_ref()
        .ok_or_else(|| not_configured(PROVIDER))?;
    // The project the setup configured while it is connected, else another connected one.
    let project_id = conn::credentials_account(&state.db, &record).await?;
    // Tokens kept for projects that are not connected are not used; failed ones are tried
    // again, to tell whether the user must sign in again.
    if project_id.is_none() && !conn::has_failed_connection(&state.db, &user.id, PROVIDER).await? {
        return Ok(Json(disconnected(None)));
    }
    let handles = state.connection_handles();
    let tokens = match fresh_tokens(&handles, client, &user.id).await {
        Ok(Some((_, tokens))) => tokens,
        Ok(None) => return Ok(Json(disconnected(None))),
        Err(FreshError::OAuth(CloudAError::RefreshExpired)) => {
            conn::mark_failed(&handles, &user.id, PROVIDER, "the refresh token expired or was revoked").await?;
            return Ok(Json(disconnected(Some("reauthentication_required"))));
        }
        Err(FreshError::OAuth(error)) => return Err(oauth_error(PROVIDER, error)),
        Err(FreshError::Store(error)) => return Err(error),
    };
    let has_billing = match &project_id {
        Some(project_id) => match client.has_billing(&tokens.access_token, project_id).await {
            Ok(billing) => billing,
            Err(CloudAError::Unauthorized) => {
                conn::mark_failed(&handles, &user.id, PROVIDER, "cloud_a rejected the access token").await?;
                return Ok(Json(disconnected(Some("reauthentication_required"))));
            }
            Err(error) => return Err(oauth_error(PROVIDER, error)),
        },
        None => false,
    };
    Ok(Json(CloudAStatus {
        connected: project_id.is_some(),
        provider: PROVIDER.as_str(),
        project_id,
        has_billing,
        error: None,
    }))
}

pub(super) fn oauth_error(provider: Provider, error: CloudAError) -> AppError {
    match error {
        CloudAError::InvalidClient | CloudAError::Config(_) => AppError::Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "invalid_client",
            message: error.to_string(),
        },
        CloudAError::Network(_) => AppError::Refused {
            status: StatusCode::BAD_GATEWAY,
            code: "network_error",
            message: error.to_string(),
        },
        other => provider_unavailable(provider, other),
    }
}

/// Disconnect cloud_a and delete its stored credentials.
#[utoipa::path(post, path = "/api/cloud_a/force-disconnect", operation_id = "cloudAForceDisconnect", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SuccessMessage), (status = 401, body = ErrorBody)))]
async fn force_disconnect(State(state): State<AppState>, user: AuthUser) -> Result<Json<SuccessMessage>, AppError> {
    disconnect_deleting(&state, &user.id, PROVIDER, "credentials").await
}

/// A provider's own disconnect: the connections end and the stored `what` is deleted.
pub(super) async fn disconnect_deleting(
    state: &AppState,
    user_id: &str,
    provider: Provider,
    what: &str,
) -> Result<Json<SuccessMessage>, AppError> {
    let message = if conn::disconnect_provider(&state.connection_handles(), user_id, provider).await? {
        format!("{provider} disconnected; its stored {what} were deleted")
    } else {
        format!("{provider} was not connected")
    };
    Ok(Json(SuccessMessage { success: true, message }))
}
