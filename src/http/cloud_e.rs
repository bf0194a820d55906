//! cloud_e: mesh network connected with OAuth client credentials (spec Endpoints → cloud_e).
//! Connecting also makes the agent's SSH key pair and a reusable auth key for the network.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::connection::Provider;
use vigil_secrets::{
    cloud_e::{generate_ssh_keypair, ssh_setup, CloudEError},
    Secret,
};

use crate::{
    auth::AuthUser,
    connections::{self as conn, provider_unavailable, TokenFields},
    error::required,
    error::{AppError, ErrorBody},
    extract::JsonBody,
    http::cloud_a::{disconnect_deleting, SuccessMessage},
    state::AppState,
};

const PROVIDER: Provider = Provider::CloudE;
/// How responses name the client's default network.
const DEFAULT_NETWORK: &str = "default";
/// How the API names it (and records stored before responses said `default`).
const API_DEFAULT_NETWORK: &str = "-";

/// A network as responses name it.
fn shown_network(network: &str) -> &str {
    if network == API_DEFAULT_NETWORK {
        DEFAULT_NETWORK
    } else {
        network
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(connect))
        .routes(routes!(ssh_setup_info))
        .routes(routes!(disconnect))
        .routes(routes!(status))
        .routes(routes!(refresh_token))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudEConnectRequest)]
pub struct ConnectRequest {
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    client_id: String,
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    client_secret: String,
    /// The client's default network when absent (or `default`).
    network: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudEConnectResponse)]
pub struct ConnectResponse {
    success: bool,
    message: String,
    /// The network connected: its name, or `default` for the client's default network.
    network: String,
    network_name: String,
    device_count: usize,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshSetupResponse {
    success: bool,
    /// The agent's public key (`ssh-ed25519 ...`); the private key never leaves the secrets store.
    ssh_public_key: String,
    /// As in `connect`: the network's name, or `default`.
    network: String,
    instructions: Vec<String>,
    /// Appends the public key to `~/.ssh/authorized_keys` unless it is there.
    command: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudEStatus {
    connected: bool,
    provider: &'static str,
    /// As in `connect`: the network's name, or `default`.
    network: Option<String>,
    network_name: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefreshResponse {
    success: bool,
    message: String,
    /// When the new access token expires.
    expires_at: DateTime<Utc>,
}

/// Connect a network: token, device listing, SSH key pair and a reusable auth key.
#[utoipa::path(post, path = "/cloud_e_api/cloud_e/connect", operation_id = "cloudEConnect", tag = "cloud connections", request_body = ConnectRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = ConnectResponse),
        (status = 400, description = "rejected client credentials or unknown network", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
async fn connect(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<ConnectRequest>,
) -> Result<Json<ConnectResponse>, AppError> {
    let client_id = required(&request.client_id, "clientId")?;
    let client_secret = Secret::new(required(&request.client_secret, "clientSecret")?);
    // `None`: the client's default network, whichever way the request names it.
    let requested = request
        .network
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != API_DEFAULT_NETWORK && *n != DEFAULT_NETWORK);
    if requested.is_some_and(|n| n.len() > 255 || n.contains('/')) {
        return Err(AppError::invalid("network must be a network name"));
    }
    let network = requested.unwrap_or(DEFAULT_NETWORK).to_owned();
    let client = &state.connections.cloud_e;
    let token = client.token(&client_id, &client_secret).await.map_err(cloud_e_error)?;
    let devices = client
        .list_devices(&token.access_token, requested)
        .await
        .map_err(cloud_e_error)?;
    let key_pair = generate_ssh_keypair("vigil-agent").map_err(|error| AppError::Internal(error.into()))?;
    let auth_key = client
        .create_auth_key(&token.access_token, requested, &[])
        .await
        .map_err(cloud_e_error)?;
    let stored = json!({
        "client_id": client_id,
        "client_secret": client_secret.expose(),
        "access_token": token.access_token.expose(),
        "expires_at": token.expires_at,
        "network": requested.unwrap_or(API_DEFAULT_NETWORK),
        "ssh_private_key": key_pair.private_key.expose(),
        "ssh_public_key": key_pair.public_key,
        "auth_key": { "id": auth_key.id, "key": auth_key.key.expose() },
    });
    let fields = TokenFields {
        client_id: Some(client_id.clone()),
        token_data: Some(json!({
            "network": network,
            "network_name": network,
            "ssh_public_key": key_pair.public_key,
            "auth_key_id": auth_key.id,
            "device_count": devices.len(),
            "expires_at": token.expires_at,
        })),
        ..Default::default()
    };
    conn::save_and_connect(
        &state.connection_handles(),
        &user.id,
        PROVIDER,
        &stored,
        &fields,
        &client_id,
        Some(network.clone()),
    )
    .await?;
    Ok(Json(ConnectResponse {
        success: true,
        message: format!("Connected cloud_e network {network}"),
        network_name: network.clone(),
        network,
        device_count: devices.len(),
    }))
}

fn cloud_e_error(error: CloudEError) -> AppError {
    match error {
        CloudEError::InvalidClient => {
            AppError::bad_request("invalid_credentials", "cloud_e rejected the client id or client secret")
        }
        CloudEError::Unauthorized => AppError::bad_request(
            "access_denied",
            "cloud_e refused the access token: the OAuth client needs the devices and keys scopes",
        ),
        CloudEError::NetworkNotFound => AppError::bad_request("network_not_found", error.to_string()),
        CloudEError::Config(_) | CloudEError::SshKey(_) => AppError::Internal(error.into()),
        other => provider_unavailable(PROVIDER, other),
    }
}

fn not_connected() -> AppError {
    AppError::NotFound("cloud_e is not connected".into())
}

/// The token record while its client is connected; 404 otherwise (kept credentials included).
async fn connected_record(state: &AppState, user_id: &str) -> Result<conn::TokenRecord, AppError> {
    let record = conn::tokens::find(&state.db, user_id, PROVIDER.as_str())
        .await?
        .ok_or_else(not_connected)?;
    conn::credentials_account(&state.db, &record)
        .await?
        .ok_or_else(not_connected)?;
    Ok(record)
}

/// How to let the agent log in to the network's machines over SSH.
#[utoipa::path(get, path = "/cloud_e_api/cloud_e/ssh-setup", operation_id = "cloudESshSetup", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SshSetupResponse), (status = 401, body = ErrorBody),
        (status = 404, description = "cloud_e is not connected", body = ErrorBody)))]
async fn ssh_setup_info(State(state): State<AppState>, user: AuthUser) -> Result<Json<SshSetupResponse>, AppError> {
    let record = connected_record(&state, &user.id).await?;
    let public_key = record.data_str("ssh_public_key").unwrap_or_default().to_owned();
    let network = shown_network(record.data_str("network").unwrap_or(DEFAULT_NETWORK)).to_owned();
    let setup = ssh_setup(&public_key, &network).map_err(|error| AppError::Internal(error.into()))?;
    Ok(Json(SshSetupResponse {
        success: true,
        ssh_public_key: public_key,
        network,
        instructions: setup.instructions,
        command: setup.command,
    }))
}

/// Disconnect cloud_e and delete its stored credentials and keys.
#[utoipa::path(post, path = "/cloud_e_api/cloud_e/disconnect", operation_id = "cloudEDisconnect", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SuccessMessage), (status = 401, body = ErrorBody)))]
async fn disconnect(State(state): State<AppState>, user: AuthUser) -> Result<Json<SuccessMessage>, AppError> {
    disconnect_deleting(&state, &user.id, PROVIDER, "credentials and keys").await
}

/// Whether cloud_e is connected, with its network. A connected client is checked live: its
/// network's devices are listed with the stored token (and, when that token is refused, a new one
/// is asked for with the client credentials); credentials the provider refuses put the
/// connection in `error` (reconnection needed).
#[utoipa::path(get, path = "/cloud_e_api/cloud_e/status", operation_id = "cloudEStatus", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = CloudEStatus), (status = 401, body = ErrorBody),
        (status = 502, description = "cloud_e could not be reached to check the credentials", body = ErrorBody)))]
async fn status(State(state): State<AppState>, user: AuthUser) -> Result<Json<CloudEStatus>, AppError> {
    let record = conn::tokens::find(&state.db, &user.id, PROVIDER.as_str()).await?;
    let connected = conn::has_connected_credentials(&state.db, record.as_ref()).await?
        && credentials_still_work(&state, &user.id).await?;
    Ok(Json(CloudEStatus {
        connected,
        provider: PROVIDER.as_str(),
        network: record
            .as_ref()
            .and_then(|r| r.data_str("network"))
            .map(|network| shown_network(network).to_owned()),
        network_name: record
            .as_ref()
            .and_then(|r| r.data_str("network_name"))
            .map(str::to_owned),
    }))
}

/// Lists the network's devices with the stored token, or asks for a token with the stored client
/// credentials when that one is refused; marks the connection failed when cloud_e refuses them.
async fn credentials_still_work(state: &AppState, user_id: &str) -> Result<bool, AppError> {
    let Some((_, stored)) = state.connections.load(&state.db, user_id, PROVIDER).await? else {
        return Ok(false);
    };
    let field = |name: &str| stored.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
    let network = field("network");
    let network =
        Some(network.as_str()).filter(|n| !n.is_empty() && *n != DEFAULT_NETWORK && *n != API_DEFAULT_NETWORK);
    let cloud_e = &state.connections.cloud_e;
    let checked = match cloud_e.list_devices(&Secret::new(field("access_token")), network).await {
        Err(CloudEError::Unauthorized) => cloud_e
            .token(&field("client_id"), &Secret::new(field("client_secret")))
            .await
            .map(drop),
        listed => listed.map(drop),
    };
    match checked {
        Ok(()) => Ok(true),
        Err(refused @ (CloudEError::InvalidClient | CloudEError::NetworkNotFound)) => {
            conn::mark_failed(&state.connection_handles(), user_id, PROVIDER, &refused.to_string()).await?;
            Ok(false)
        }
        Err(error) => Err(cloud_e_error(error)),
    }
}

/// Get a new access token with the stored client credentials now. No request body.
#[utoipa::path(post, path = "/cloud_e_api/cloud_e/refresh-token", operation_id = "cloudERefreshToken", tag = "cloud connections",
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = RefreshResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "cloud_e is not connected", body = ErrorBody), (status = 502, body = ErrorBody)))]
async fn refresh_token(State(state): State<AppState>, user: AuthUser) -> Result<Json<RefreshResponse>, AppError> {
    let (_, mut stored) = state
        .connections
        .load_connected(&state.db, &user.id, PROVIDER)
        .await?
        .ok_or_else(not_connected)?;
    let field = |name: &str| stored.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
    let client_secret = Secret::new(field("client_secret"));
    let token = match state
        .connections
        .cloud_e
        .token(&field("client_id"), &client_secret)
        .await
    {
        Ok(token) => token,
        Err(CloudEError::InvalidClient) => {
            conn::mark_failed(
                &state.connection_handles(),
                &user.id,
                PROVIDER,
                "cloud_e rejected the stored client credentials",
            )
            .await?;
            return Err(cloud_e_error(CloudEError::InvalidClient));
        }
        Err(error) => return Err(cloud_e_error(error)),
    };
    stored["access_token"] = json!(token.access_token.expose());
    stored["expires_at"] = json!(token.expires_at);
    state.connections.resave(&user.id, PROVIDER, &stored).await?;
    conn::tokens::merge_token_data(
        &state.db,
        &user.id,
        PROVIDER.as_str(),
        &json!({ "expires_at": token.expires_at }),
    )
    .await?;
    Ok(Json(RefreshResponse {
        success: true,
        message: "cloud_e access token refreshed".into(),
        expires_at: token.expires_at,
    }))
}
