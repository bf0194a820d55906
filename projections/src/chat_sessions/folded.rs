//! A new session's events folded into its row in memory, so that a replay (or a tail catching
//! up) inserts thousands of sessions in one statement instead of writing one per event. Each
//! column follows the statement [`super::ChatSessionsReadModel::apply`] runs for the event,
//! `message_count` included (a revision counts from where it starts, as the statement does).

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use serde_json::{Map, Value};
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::chat_session::{ChatSession, ChatSessionEvent, Message};

use crate::ProjectionError;

/// A session's row as its events up to the last of a run leave it.
pub(super) struct NewSession<'a> {
    id: Uuid,
    user_id: &'a str,
    title: &'a str,
    messages: Vec<&'a Message>,
    ui_state: &'a Map<String, Value>,
    status: &'static str,
    is_active: bool,
    incident_id: Option<Uuid>,
    message_count: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    version: i64,
}

impl<'a> NewSession<'a> {
    /// `None` unless the run creates the session.
    pub(super) fn of(run: &[&'a EventEnvelope<ChatSession>]) -> Option<Self> {
        use ChatSessionEvent as E;
        let (first, rest) = run.split_first()?;
        let E::ChatSessionCreated {
            session_id,
            user_id,
            title,
            messages,
            ui_state,
            incident_id,
            at,
        } = &first.payload
        else {
            return None;
        };
        let mut session = Self {
            id: *session_id,
            user_id,
            title,
            messages: messages.iter().collect(),
            ui_state,
            status: "active",
            is_active: true,
            incident_id: *incident_id,
            message_count: messages.len() as i64,
            created_at: *at,
            updated_at: *at,
            version: first.sequence as i64,
        };
        for event in rest {
            match &event.payload {
                E::ChatSessionCreated { .. } => return None,
                E::TitleChanged { title, .. } => session.title = title,
                E::MessagesReplaced { messages, .. } => {
                    session.messages = messages.iter().collect();
                    session.message_count = messages.len() as i64;
                }
                E::MessagesRevised { from, messages, .. } => {
                    session.messages.truncate(*from);
                    session.messages.extend(messages);
                    session.message_count = (*from + messages.len()) as i64;
                }
                E::MessageAppended { message, .. } => {
                    session.messages.push(message);
                    session.message_count += 1;
                }
                E::UiStateChanged { ui_state, .. } => session.ui_state = ui_state,
                E::ChatSessionTouched { .. } => {}
                E::StatusChanged { status, .. } => session.status = status.as_str(),
                E::ChatSessionDeleted { .. } => session.is_active = false,
            }
            session.updated_at = event.payload.at();
            session.version = event.sequence as i64;
        }
        Some(session)
    }
}

/// Inserts new sessions' rows, in one statement however many.
pub(super) async fn insert_sessions(
    conn: &mut PgConnection,
    sessions: &[NewSession<'_>],
) -> Result<(), ProjectionError> {
    if sessions.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO chat_sessions (id, user_id, title, messages, ui_state, status, is_active, incident_id,
                                    message_count, created_at, updated_at, version)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[], $7::bool[],
                              $8::uuid[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::bigint[])",
    )
    .bind(sessions.iter().map(|s| s.id).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.user_id).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.title).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| Json(&s.messages)).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| Json(s.ui_state)).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.status).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.is_active).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.incident_id).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.message_count as i32).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.created_at).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.updated_at).collect::<Vec<_>>())
    .bind(sessions.iter().map(|s| s.version).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}
