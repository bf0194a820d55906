//! cloud_c: service principal (spec Endpoints → cloud_c). Login proves the secret with a
//! client-credentials token and picks a subscription from the live list.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_providers::{
    cloud_c::{choose_subscription, AzureError},
    Secret,
};

use crate::{
    auth::AuthUser,
    connections::{self as conn, provider_unavailable, TokenFields},
    error::required,
    error::{AppError, ErrorBody},
    extract::JsonBody,
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudC;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(login)).routes(routes!(status))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudCLoginRequest)]
pub struct LoginRequest {
    /// Must be the authenticated user.
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    user_id: String,
    #[schema(
        max_length = 255,
        pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    tenant_id: String,
    #[schema(
        max_length = 255,
        pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    client_id: String,
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    client_secret: String,
    /// The first enabled subscription when absent.
    #[schema(max_length = 255)]
    subscription_id: Option<String>,
    #[schema(max_length = 255)]
    subscription_name: Option<String>,
    /// A read-only principal for Ask mode.
    read_only_credentials: Option<ReadOnlyCredentials>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadOnlyCredentials {
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    client_id: String,
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    client_secret: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = CloudCLoginResponse)]
pub struct LoginResponse {
    message: String,
    subscription_id: String,
    subscription_name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CloudCStatus {
    connected: bool,
    provider: &'static str,
    subscription_id: Option<String>,
    subscription_name: Option<String>,
}

/// Connect a service principal and one of its subscriptions.
#[utoipa::path(post, path = "/cloud_c/login", operation_id = "cloudCLogin", tag = "cloud connections", request_body = LoginRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = LoginResponse),
        (status = 400, description = "a required field missing or blank (userId included), invalid tenant or credentials, or no usable subscription", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, description = "userId is not the caller", body = ErrorBody),
        (status = 502, body = ErrorBody)))]
async fn login(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Json<LoginResponse>, AppError> {
    conn::check_user_id(&request.user_id, &user.id)?;
    let tenant_id = required(&request.tenant_id, "tenantId")?;
    let client_id = required(&request.client_id, "clientId")?;
    let client_secret = Secret::new(required(&request.client_secret, "clientSecret")?);
    let azure = &state.connections.azure;
    let token = azure
        .token(&tenant_id, &client_id, &client_secret)
        .await
        .map_err(azure_error)?;
    let subscriptions = azure.list_subscriptions(&token).await.map_err(azure_error)?;
    let requested = request
        .subscription_id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty());
    let subscription = choose_subscription(subscriptions, requested).map_err(azure_error)?;
    let subscription_name = request
        .subscription_name
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| subscription.display_name.clone());
    let read_only = match request.read_only_credentials {
        Some(read_only) => {
            // Checked on connect like the main principal: Ask mode would otherwise find them unusable later.
            let read_only_client_id = required(&read_only.client_id, "readOnlyCredentials.clientId")?;
            let read_only_secret = Secret::new(required(&read_only.client_secret, "readOnlyCredentials.clientSecret")?);
            azure
                .token(&tenant_id, &read_only_client_id, &read_only_secret)
                .await
                .map_err(|error| match azure_error(error) {
                    AppError::BadRequest { code, message } => {
                        AppError::bad_request(code, format!("readOnlyCredentials: {message}"))
                    }
                    other => other,
                })?;
            Some(json!({ "client_id": read_only_client_id, "client_secret": read_only_secret.expose() }))
        }
        None => None,
    };
    let stored = json!({
        "tenant_id": tenant_id,
        "client_id": client_id,
        "client_secret": client_secret.expose(),
        "subscription_id": subscription.subscription_id,
        "subscription_name": subscription_name,
        "read_only_credentials": read_only,
    });
    let fields = TokenFields {
        tenant_id: Some(tenant_id),
        client_id: Some(client_id),
        subscription_id: Some(subscription.subscription_id.clone()),
        subscription_name: Some(subscription_name.clone()),
        token_data: Some(json!({ "has_read_only_credentials": read_only.is_some() })),
        ..Default::default()
    };
    conn::save_and_connect(
        &state.connection_handles(),
        &user.id,
        PROVIDER,
        &stored,
        &fields,
        &subscription.subscription_id,
        Some(subscription_name.clone()),
    )
    .await?;
    Ok(Json(LoginResponse {
        message: format!("Connected cloud_c subscription {subscription_name}"),
        subscription_id: subscription.subscription_id,
        subscription_name,
    }))
}

fn azure_error(error: AzureError) -> AppError {
    match error {
        AzureError::InvalidCredentials { .. } => {
            AppError::bad_request("invalid_credentials", "cloud_c rejected the client id or client secret")
        }
        AzureError::InvalidTenant(_) => AppError::bad_request("invalid_tenant", error.to_string()),
        AzureError::AccessDenied(_) => AppError::bad_request("access_denied", error.to_string()),
        AzureError::SubscriptionNotFound(_) => AppError::bad_request("subscription_not_found", error.to_string()),
        AzureError::NoEnabledSubscription => AppError::bad_request("no_enabled_subscription", error.to_string()),
        AzureError::Rejected { .. } => AppError::bad_request("provider_rejected", error.to_string()),
        other => provider_unavailable(PROVIDER, other),
    }
}

/// Whether cloud_c is connected, with the connected subscription. A connected principal is
/// checked live (a token is requested with the stored credentials); one the provider refuses
/// puts the connections in `error` (reconnection needed).
#[utoipa::path(get, path = "/cloud_c/status", operation_id = "cloudCStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudCStatus), (status = 401, body = ErrorBody),
        (status = 502, description = "cloud_c could not be reached to check the credentials", body = ErrorBody)))]
async fn status(State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudCStatus>, AppError> {
    let record = conn::tokens::find(&state.db, &user.id, PROVIDER.as_str()).await?;
    let connected = conn::has_connected_credentials(&state.db, record.as_ref()).await?
        && credentials_still_work(&state, &user.id).await?;
    Ok(Json(CloudCStatus {
        connected,
        provider: PROVIDER.as_str(),
        subscription_id: record.as_ref().and_then(|r| r.subscription_id.clone()),
        subscription_name: record.and_then(|r| r.subscription_name),
    }))
}

/// Asks cloud_c for a token with the stored credentials; marks the connections failed when it
/// refuses them.
async fn credentials_still_work(state: &AppState, user_id: &str) -> Result<bool, AppError> {
    let Some((_, stored)) = state.connections.load(&state.db, user_id, PROVIDER).await? else {
        return Ok(false);
    };
    let field = |name: &str| {
        stored
            .get(name)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let secret = Secret::new(field("client_secret"));
    match state
        .connections
        .azure
        .token(&field("tenant_id"), &field("client_id"), &secret)
        .await
    {
        Ok(_) => Ok(true),
        Err(AzureError::InvalidCredentials { .. } | AzureError::InvalidTenant(_) | AzureError::AccessDenied(_)) => {
            conn::mark_failed(
                &state.connection_handles(),
                user_id,
                PROVIDER,
                "cloud_c refused the stored credentials",
            )
            .await?;
            Ok(false)
        }
        Err(error) => Err(provider_unavailable(PROVIDER, error)),
    }
}
