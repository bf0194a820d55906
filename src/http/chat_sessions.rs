//! Chat sessions over HTTP (spec Endpoints → Chat sessions). Writes are ChatSession commands;
//! reads come from the `chat_sessions` read table, always filtered by the caller's user id.

use std::path::PathBuf;

use axum::{extract::State, http::StatusCode, Json};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::chat_session::{ChatSessionCommand, Message};
use vigil_projections::chat_sessions::{self as read, split_inline_images, ChatSessionRow};

use crate::{
    auth::AuthUser,
    error::{AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::{JsonBodyOrDefault, Path, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_sessions, create_session))
        .routes(routes!(bulk_delete_sessions))
        .routes(routes!(get_session, update_session, delete_session))
}

/// A stored chat message (spec Message). Other fields a client sends are kept as sent.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct MessageSchema {
    #[schema(value_type = SenderSchema)]
    sender: String,
    /// Empty when absent.
    #[schema(required = false)]
    text: String,
    timestamp: Option<String>,
    /// `displayData` (data URL), `type` (MIME), `data` (base64), `name` (`image_<n>.<ext>`).
    images: Option<Vec<Value>>,
    /// Assistant only.
    tool_calls: Option<Vec<ToolCallSchema>>,
}

/// Who wrote a message.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum SenderSchema {
    User,
    Assistant,
}

/// A tool the assistant ran. Other fields a client sends are kept as sent.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ToolCallSchema {
    tool_name: String,
    /// Any JSON; `null` when absent.
    #[schema(required = false)]
    input: Value,
    /// Empty when absent.
    #[schema(required = false)]
    output: String,
}

/// Every field is optional; an empty body is `{}`.
#[derive(Default, Deserialize, utoipa::ToSchema)]
pub struct CreateSessionRequest {
    /// Generated from the first user message when absent or blank.
    title: Option<String>,
    /// Empty when absent or `null`.
    #[serde(default)]
    #[schema(value_type = Option<Vec<MessageSchema>>)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    ui_state: Option<Map<String, Value>>,
}

/// Every field is optional; an empty body is `{}`.
#[derive(Default, Deserialize, utoipa::ToSchema)]
pub struct UpdateSessionRequest {
    title: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<MessageSchema>>)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    ui_state: Option<Map<String, Value>>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionResponse {
    id: Uuid,
    title: String,
    #[schema(value_type = Vec<MessageSchema>)]
    messages: Vec<Message>,
    #[schema(value_type = Object)]
    ui_state: Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// `active`, `in_progress`, `completed` or `cancelled`.
    status: String,
    /// The incident the session is about, for sessions started by `POST /api/incidents/{id}/chat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    incident_id: Option<Uuid>,
}

impl From<ChatSessionRow> for SessionResponse {
    fn from(row: ChatSessionRow) -> Self {
        Self {
            id: row.id,
            title: row.title,
            messages: row.messages.0.into_iter().map(split_inline_images).collect(),
            ui_state: row.ui_state.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
            status: row.status,
            incident_id: row.incident_id,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionSummary {
    id: Uuid,
    title: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    message_count: i32,
    #[schema(value_type = Object)]
    ui_state: Value,
    status: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionList {
    sessions: Vec<SessionSummary>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DeletedResponse {
    message: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct BulkDeletedResponse {
    /// States the number deleted and whether the current session was kept.
    message: String,
    deleted_count: usize,
    /// The session that was kept: the one named, when it is an active session of the caller's.
    preserved_session_id: Option<Uuid>,
}

#[derive(Deserialize, utoipa::IntoParams)]
pub struct BulkDeleteQuery {
    /// Session to keep: a UUID (blank is none).
    #[param(pattern = r"^([\t\n\r ]*|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")]
    current_session_id: Option<String>,
}

/// Session ids are UUIDs; anything else names no session.
fn session_id(raw: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(raw).map_err(|_| AppError::NotFound("chat session not found".into()))
}

async fn load(state: &AppState, user: &AuthUser, id: Uuid) -> Result<ChatSessionRow, AppError> {
    read::find_active(&state.db, &user.id, id)
        .await?
        .ok_or_else(|| AppError::NotFound("chat session not found".into()))
}

/// The user's active sessions, most recently updated first.
#[utoipa::path(get, path = "/chat_api/sessions", operation_id = "listChatSessions", tag = "chat sessions", security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SessionList), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn list_sessions(State(state): State<AppState>, user: AuthUser) -> Result<Json<SessionList>, AppError> {
    let rows = read::list_active(&state.db, &user.id).await?;
    let sessions = rows
        .into_iter()
        .map(|row| SessionSummary {
            id: row.id,
            title: row.title,
            created_at: row.created_at,
            updated_at: row.updated_at,
            message_count: row.message_count,
            ui_state: row.ui_state.0,
            status: row.status,
        })
        .collect();
    Ok(Json(SessionList { sessions }))
}

/// Start a session. Without a title, one is generated from the first user message.
#[utoipa::path(post, path = "/chat_api/sessions", operation_id = "createChatSession", tag = "chat sessions", request_body = Option<CreateSessionRequest>,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 201, body = SessionResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_session(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBodyOrDefault(request): JsonBodyOrDefault<CreateSessionRequest>,
) -> Result<(StatusCode, Json<SessionResponse>), AppError> {
    let id = Uuid::new_v4();
    let command = ChatSessionCommand::Create {
        session_id: id,
        user_id: user.id.clone(),
        title: request.title,
        messages: request.messages.unwrap_or_default(),
        ui_state: request.ui_state.unwrap_or_default(),
        incident_id: None,
        at: Utc::now(),
    };
    execute(
        &state.events.chat_sessions,
        &id.to_string(),
        command,
        Actor::User(&user.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(load(&state, &user, id).await?.into())))
}

/// One session with its full messages; inline data-URL images are split into `images`.
#[utoipa::path(get, path = "/chat_api/sessions/{session_id}", operation_id = "getChatSession", tag = "chat sessions",
    params(("session_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SessionResponse), (status = 401, body = ErrorBody),
        (status = 404, description = "unknown, deleted or another user's session", body = ErrorBody)))]
async fn get_session(
    State(state): State<AppState>,
    user: AuthUser,
    Path(raw_id): Path<String>,
) -> Result<Json<SessionResponse>, AppError> {
    let id = session_id(&raw_id)?;
    Ok(Json(load(&state, &user, id).await?.into()))
}

/// Change the provided fields; `updated_at` always moves. A session titled `New Chat` updated
/// without a title gets one generated from its messages.
#[utoipa::path(put, path = "/chat_api/sessions/{session_id}", operation_id = "updateChatSession", tag = "chat sessions", request_body = Option<UpdateSessionRequest>,
    params(("session_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SessionResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "the session is completed or cancelled", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "lost too many concurrent-update races", body = ErrorBody)))]
async fn update_session(
    State(state): State<AppState>,
    user: AuthUser,
    Path(raw_id): Path<String>,
    JsonBodyOrDefault(request): JsonBodyOrDefault<UpdateSessionRequest>,
) -> Result<Json<SessionResponse>, AppError> {
    let id = session_id(&raw_id)?;
    let command = ChatSessionCommand::Update {
        user_id: user.id.clone(),
        title: request.title,
        messages: request.messages,
        ui_state: request.ui_state,
        at: Utc::now(),
    };
    execute(
        &state.events.chat_sessions,
        &id.to_string(),
        command,
        Actor::User(&user.id),
    )
    .await?;
    Ok(Json(load(&state, &user, id).await?.into()))
}

/// Soft delete: the session disappears from every read, and its storage folder is removed.
#[utoipa::path(delete, path = "/chat_api/sessions/{session_id}", operation_id = "deleteChatSession", tag = "chat sessions",
    params(("session_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = DeletedResponse), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_session(
    State(state): State<AppState>,
    user: AuthUser,
    Path(raw_id): Path<String>,
) -> Result<Json<DeletedResponse>, AppError> {
    let id = session_id(&raw_id)?;
    delete_one(&state, &user, id).await?;
    Ok(Json(DeletedResponse {
        message: format!("Chat session {id} deleted"),
    }))
}

/// How many sessions a bulk delete deletes at once (each holds a pooled connection meanwhile).
const BULK_DELETES_AT_ONCE: usize = 8;

/// Delete every session of the user except `current_session_id`.
#[utoipa::path(delete, path = "/chat_api/sessions/bulk-delete", operation_id = "bulkDeleteChatSessions", tag = "chat sessions", params(BulkDeleteQuery),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = BulkDeletedResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn bulk_delete_sessions(
    State(state): State<AppState>,
    user: AuthUser,
    Query(query): Query<BulkDeleteQuery>,
) -> Result<Json<BulkDeletedResponse>, AppError> {
    let keep = match query
        .current_session_id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        Some(raw) => Some(
            Uuid::parse_str(raw)
                .map_err(|_| AppError::bad_request("invalid_query", "current_session_id must be a UUID"))?,
        ),
        None => None,
    };
    let (kept, others): (Vec<Uuid>, Vec<Uuid>) = read::active_ids(&state.db, &user.id)
        .await?
        .into_iter()
        .partition(|&id| Some(id) == keep);
    // Only a session of the caller's that was there to keep is reported kept.
    let preserved = kept.first().copied();
    // A few at once: each delete is a command of its own (a read, an append, a projection), and
    // one after another a user's 20,000 sessions took longer than the request may.
    let mut deletes = futures::stream::iter(others)
        .map(|id| delete_one(&state, &user, id))
        .buffer_unordered(BULK_DELETES_AT_ONCE);
    let mut deleted_count = 0;
    while let Some(outcome) = deletes.next().await {
        match outcome {
            Ok(()) => deleted_count += 1,
            // Deleted concurrently by another request: not ours to count.
            Err(AppError::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    let plural = if deleted_count == 1 { "" } else { "s" };
    let message = match preserved {
        Some(kept) => format!("Deleted {deleted_count} chat session{plural}; the current session {kept} was preserved"),
        None => format!("Deleted {deleted_count} chat session{plural}"),
    };
    Ok(Json(BulkDeletedResponse {
        message,
        deleted_count,
        preserved_session_id: preserved,
    }))
}

async fn delete_one(state: &AppState, user: &AuthUser, id: Uuid) -> Result<(), AppError> {
    let command = ChatSessionCommand::Delete {
        user_id: user.id.clone(),
        at: Utc::now(),
    };
    execute(
        &state.events.chat_sessions,
        &id.to_string(),
        command,
        Actor::User(&user.id),
    )
    .await?;
    remove_storage(session_storage_dir(state, id)).await;
    Ok(())
}

/// Where a session's files (generated infrastructure code, uploads) live.
pub fn session_storage_dir(state: &AppState, id: Uuid) -> PathBuf {
    state.config.data_dir.join("sessions").join(id.to_string())
}

async fn remove_storage(dir: PathBuf) {
    match tokio::fs::remove_dir_all(&dir).await {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(dir = %dir.display(), %error, "could not remove session storage"),
    }
}
