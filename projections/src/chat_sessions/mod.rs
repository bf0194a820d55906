//! `chat_sessions`: the read model of the ChatSession aggregate, and the queries the API serves.

mod folded;
mod images;

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use serde_json::Value;
use sqlx::{types::Json, PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::chat_session::{ChatSession, ChatSessionEvent, Message};

use folded::{insert_sessions, NewSession};
pub use images::split_inline_images;

use crate::{ProjectionError, ReadModel};

pub struct ChatSessionsReadModel;

impl ReadModel<ChatSession> for ChatSessionsReadModel {
    const NAME: &'static str = "chat_sessions";
    const TABLES: &'static [&'static str] = &["chat_sessions"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, i64>, ProjectionError> {
        crate::projector::versions_by_uuid(
            conn,
            "SELECT wanted.id, found.version FROM unnest($1::uuid[]) AS wanted(id)
             CROSS JOIN LATERAL (SELECT version FROM chat_sessions WHERE id = wanted.id LIMIT 1) found",
            aggregate_ids,
        )
        .await
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<ChatSession>) -> Result<(), ProjectionError> {
        use ChatSessionEvent as E;
        let id = Uuid::parse_str(&event.aggregate_id).unwrap_or_default();
        let version = event.sequence as i64;
        let at = event.payload.at();
        let update = |set: &str| format!("UPDATE chat_sessions SET {set}, updated_at = $2, version = $3 WHERE id = $1");
        match &event.payload {
            E::ChatSessionCreated {
                session_id,
                user_id,
                title,
                messages,
                ui_state,
                incident_id,
                at,
            } => {
                sqlx::query(
                    "INSERT INTO chat_sessions
                       (id, user_id, title, messages, ui_state, incident_id, message_count, created_at, updated_at, version)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
                )
                .bind(session_id)
                .bind(user_id)
                .bind(title)
                .bind(Json(messages))
                .bind(Json(ui_state))
                .bind(incident_id)
                .bind(messages.len() as i32)
                .bind(at)
                .bind(version)
                .execute(conn)
                .await?;
            }
            E::TitleChanged { title, .. } => {
                sqlx::query(&update("title = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(title)
                    .execute(conn)
                    .await?;
            }
            E::MessagesReplaced { messages, .. } => {
                sqlx::query(&update("messages = $4, message_count = jsonb_array_length($4)"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(Json(messages))
                    .execute(conn)
                    .await?;
            }
            E::MessagesRevised { from, messages, .. } => {
                sqlx::query(&update(
                    "messages = CASE WHEN $4 = 0 THEN '[]'::jsonb
                                     ELSE jsonb_path_query_array(messages, '$[0 to $last]',
                                                                 jsonb_build_object('last', $4 - 1)) END || $5,
                     message_count = $4 + jsonb_array_length($5)",
                ))
                .bind(id)
                .bind(at)
                .bind(version)
                .bind(*from as i64)
                .bind(Json(messages))
                .execute(conn)
                .await?;
            }
            E::MessageAppended { message, .. } => {
                sqlx::query(&update(
                    "messages = messages || jsonb_build_array($4::jsonb), message_count = message_count + 1",
                ))
                .bind(id)
                .bind(at)
                .bind(version)
                .bind(Json(message))
                .execute(conn)
                .await?;
            }
            E::UiStateChanged { ui_state, .. } => {
                sqlx::query(&update("ui_state = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(Json(ui_state))
                    .execute(conn)
                    .await?;
            }
            E::ChatSessionTouched { .. } => {
                sqlx::query("UPDATE chat_sessions SET updated_at = $2, version = $3 WHERE id = $1")
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .execute(conn)
                    .await?;
            }
            E::StatusChanged { status, .. } => {
                sqlx::query(&update("status = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .execute(conn)
                    .await?;
            }
            E::ChatSessionDeleted { .. } => {
                sqlx::query(&update("is_active = false"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .execute(conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// New sessions' rows in one insert ([`NewSession`]); the events of existing ones one by one.
    async fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<ChatSession>>],
    ) -> Result<(), ProjectionError> {
        let mut created = Vec::new();
        for run in runs {
            match NewSession::of(run) {
                Some(session) => created.push(session),
                None => {
                    for event in run {
                        self.apply(conn, event).await?;
                    }
                }
            }
        }
        insert_sessions(conn, &created).await
    }
}

/// A session as the read table holds it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ChatSessionRow {
    pub id: Uuid,
    pub user_id: String,
    pub title: String,
    pub messages: Json<Vec<Message>>,
    pub ui_state: Json<Value>,
    pub status: String,
    pub is_active: bool,
    pub incident_id: Option<Uuid>,
    pub message_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

const COLUMNS: &str = "id, user_id, title, messages, ui_state, status, is_active, incident_id, message_count, \
                       created_at, updated_at, version";

/// A session as the list shows it: all but its messages, whose count is a column of its own.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ChatSessionSummaryRow {
    pub id: Uuid,
    pub title: String,
    pub ui_state: Json<Value>,
    pub status: String,
    pub message_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The user's active sessions, most recently updated first. Their messages are not read: a list
/// of 150 sessions of 1,000 messages each took 139 ms to read them all for their counts alone.
pub async fn list_active(db: &PgPool, user_id: &str) -> sqlx::Result<Vec<ChatSessionSummaryRow>> {
    sqlx::query_as(
        "SELECT id, title, ui_state, status, message_count, created_at, updated_at FROM chat_sessions
         WHERE user_id = $1 AND is_active ORDER BY updated_at DESC, id",
    )
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// One active session of the user; `None` for unknown, deleted or other users' sessions.
///
/// Read by primary key alone, owner and state checked on the row: with `user_id = $2 AND
/// is_active` in the statement, a generic plan made while the table was young served it from
/// `chat_sessions_user_recent`, reading every session of the user (kept as the table grew).
pub async fn find_active(db: &PgPool, user_id: &str, id: Uuid) -> sqlx::Result<Option<ChatSessionRow>> {
    let row: Option<ChatSessionRow> = sqlx::query_as(&format!("SELECT {COLUMNS} FROM chat_sessions WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(row.filter(|row| row.user_id == user_id && row.is_active))
}

/// Whether the id is taken by a session the user may not use: another user's, or a deleted one.
pub async fn taken_by_another(db: &PgPool, user_id: &str, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM chat_sessions WHERE id = $1 AND (user_id <> $2 OR NOT is_active))")
        .bind(id)
        .bind(user_id)
        .fetch_one(db)
        .await
}

/// The user's active sessions about one incident, oldest first.
pub async fn active_for_incident(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    incident_id: Uuid,
) -> sqlx::Result<Vec<ChatSessionRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM chat_sessions WHERE user_id = $1 AND incident_id = $2 AND is_active ORDER BY created_at, id"
    ))
    .bind(user_id)
    .bind(incident_id)
    .fetch_all(db)
    .await
}

/// The user's sessions about one incident as they stood at `as_of` (those active then, oldest
/// first), as [`crate::incidents::as_of`] shows the incident.
pub async fn for_incident_as_of(
    db: &PgPool,
    user_id: &str,
    incident_id: Uuid,
    as_of: DateTime<Utc>,
) -> Result<Vec<ChatSessionRow>, ProjectionError> {
    // Deleted ones included: a session deleted since was there then.
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM chat_sessions WHERE user_id = $1 AND incident_id = $2")
            .bind(user_id)
            .bind(incident_id)
            .fetch_all(db)
            .await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = db.begin().await?;
    crate::projector::project_as_of(&mut tx, &ChatSessionsReadModel, "chat_sessions", &ids, as_of).await?;
    let sessions = active_for_incident(&mut *tx, user_id, incident_id).await?;
    tx.rollback().await?;
    Ok(sessions)
}

/// Ids of the user's active sessions.
pub async fn active_ids(db: &PgPool, user_id: &str) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT id FROM chat_sessions WHERE user_id = $1 AND is_active")
        .bind(user_id)
        .fetch_all(db)
        .await
}

/// Every row, in id order (used to compare a replayed table with the live one).
pub async fn all_rows(db: &PgPool) -> sqlx::Result<Vec<ChatSessionRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM chat_sessions ORDER BY id"))
        .fetch_all(db)
        .await
}
