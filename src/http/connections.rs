//! The user's cloud connections (spec Endpoints → Connections), read from `user_connections`.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::{connection_id, ConnectionCommand, Provider};
use vigil_projections::connections::{self as read, ConnectionRow};

use crate::{
    auth::AuthUser,
    error::{excerpt, AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::JsonBody,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_connections, disconnect_connection))
}

/// One connected (or formerly connected) account.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ConnectionItem {
    /// `cloud_a` .. `cloud_f`.
    provider: String,
    /// cloud_a: project id; cloud_b: account id; cloud_c: subscription id; cloud_d: organization id;
    /// cloud_e: client id.
    account_id: String,
    account_name: Option<String>,
    /// `connected`, `not_connected`, `pending` or `error`.
    status: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ConnectionRow> for ConnectionItem {
    fn from(row: ConnectionRow) -> Self {
        Self {
            provider: row.provider,
            account_id: row.account_id,
            account_name: row.account_name,
            status: row.status,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct DisconnectRequest {
    /// One of cloud_a, cloud_b, cloud_c, cloud_d, cloud_e (cloud_f when enabled).
    #[schema(pattern = "^cloud_[a-e]$")]
    provider: String,
    /// Not blank.
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    account_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DisconnectedResponse {
    /// Always `disconnected`.
    status: &'static str,
}

/// The caller's connections, by provider then account (cloud_f only when enabled).
#[utoipa::path(get, path = "/api/user_connections", operation_id = "listUserConnections", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = Vec<ConnectionItem>), (status = 401, body = ErrorBody)))]
async fn list_connections(
    State(state): State<AppState>,
    user: AuthUser,
) -> Result<Json<Vec<ConnectionItem>>, AppError> {
    let rows = read::list(&state.db, &user.id).await?;
    let offered = |row: &ConnectionRow| {
        row.provider
            .parse::<Provider>()
            .is_ok_and(|provider| state.connections.offers(provider))
    };
    Ok(Json(
        rows.into_iter().filter(offered).map(ConnectionItem::from).collect(),
    ))
}

/// Marks one connection `not_connected`. The stored credentials are kept, so reconnecting needs
/// no new authentication; the provider's own disconnect endpoint deletes them. Idempotent: an
/// account that is not connected (or never was) gets the same answer.
#[utoipa::path(delete, path = "/api/user_connections", operation_id = "disconnectUserConnection", tag = "cloud connections", request_body = DisconnectRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, description = "the account is not connected (now or already)", body = DisconnectedResponse),
        (status = 400, description = "missing or unknown provider, or missing account_id", body = ErrorBody),
        (status = 401, body = ErrorBody)))]
async fn disconnect_connection(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<DisconnectRequest>,
) -> Result<Json<DisconnectedResponse>, AppError> {
    let provider = request
        .provider
        .parse::<Provider>()
        .ok()
        .filter(|provider| state.connections.offers(*provider))
        .ok_or_else(|| {
            AppError::bad_request(
                "invalid_provider",
                format!("unknown provider {:?}", excerpt(&request.provider)),
            )
        })?;
    let account_id = request.account_id.trim();
    if account_id.is_empty() {
        return Err(AppError::invalid("account_id is required"));
    }
    let command = ConnectionCommand::Disconnect {
        user_id: user.id.clone(),
        credentials_kept: true,
        at: Utc::now(),
    };
    let id = connection_id(&user.id, provider, account_id);
    execute(&state.events.connections, &id, command, Actor::User(&user.id)).await?;
    Ok(Json(DisconnectedResponse { status: "disconnected" }))
}
