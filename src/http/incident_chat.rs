//! `POST /api/incidents/:id/chat`: a question about an incident, answered in the background by
//! the chat agent into a chat session (202 at once; the answer is read from the session).

use axum::{extract::State, http::StatusCode, Json};
use chrono::Utc;
use cqrs_es::AggregateError;
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::chat_session::{ChatSessionCommand, ChatSessionError};
use vigil_projections::chat_sessions as sessions;

use super::incidents::{incident_id, owned};
use crate::{
    analysis::incident_chat::{IncidentChatPayload, INCIDENT_CHAT_JOB},
    auth::IncidentUser,
    error::{excerpt, AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::{JsonBody, Path, Query},
    jobs::{enqueue, NewJob},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(ask_about_incident))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct IncidentQuestion {
    /// Not blank.
    #[schema(pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    question: String,
    /// `agent` (default) or `ask` (read-only). A background answer cannot wait for a
    /// confirmation, so commands that change infrastructure are declined in either mode.
    #[serde(default)]
    #[schema(pattern = "^(agent|ask)?$")]
    mode: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionParam {
    /// Continue this chat session (one of the caller's) instead of starting a new one.
    /// A UUID (blank is none).
    #[param(pattern = r"^([\t\n\r ]*|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")]
    session_id: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Accepted {
    session_id: Uuid,
    /// Always `processing`.
    status: &'static str,
    is_new_session: bool,
}

/// Asks the agent about an incident. The answer is appended to the chat session, which is
/// `in_progress` while the job runs and `completed` after (`active` again if the model failed).
#[utoipa::path(post, path = "/api/incidents/{id}/chat", operation_id = "askAboutIncident", tag = "incidents",
    params(("id" = Uuid, Path, description = "incident UUID"), SessionParam),
    request_body = IncidentQuestion,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 202, body = Accepted),
        (status = 400, description = "no identity, bad id or session_id, empty or over-long question (the chat message limit), or unknown mode", body = ErrorBody),
        (status = 404, description = "no such incident of the caller's, or no session of the caller's about it", body = ErrorBody)))]
async fn ask_about_incident(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
    Query(param): Query<SessionParam>,
    JsonBody(request): JsonBody<IncidentQuestion>,
) -> Result<(StatusCode, Json<Accepted>), AppError> {
    let id = incident_id(&raw_id)?;
    let incident = owned(&state, &user, id).await?;
    let question = request.question.trim().to_owned();
    if question.is_empty() {
        return Err(AppError::bad_request("empty_question", "question must not be empty"));
    }
    // The limit of a chat message over the WebSocket (spec Limits: user message).
    if let Some(problem) = crate::agent::user_message::too_long(&question) {
        return Err(AppError::bad_request("message_too_long", problem));
    }
    let ask_mode = match request.mode.as_deref().map(str::trim) {
        None | Some("") | Some("agent") => false,
        Some("ask") => true,
        Some(other) => {
            return Err(AppError::bad_request(
                "invalid_mode",
                format!("mode `{}` is not `agent` or `ask`", excerpt(other)),
            ))
        }
    };
    let actor = Actor::User(&user.id);
    let (session_id, is_new_session) = match param.session_id.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(raw) => {
            let session_id = Uuid::parse_str(raw)
                .map_err(|_| AppError::bad_request("invalid_query", "session_id must be a UUID"))?;
            // Only a session about this incident continues here: another's would get this
            // incident's question and answer while still listed under its own incident.
            let about_this_incident = sessions::find_active(&state.db, &user.id, session_id)
                .await?
                .is_some_and(|session| session.incident_id == Some(id));
            if !about_this_incident {
                return Err(AppError::NotFound(
                    "no chat session about this incident has that id".into(),
                ));
            }
            (session_id, false)
        }
        None => {
            let session_id = Uuid::new_v4();
            let title = format!("Incident: {}", incident.alert_title.as_deref().unwrap_or("untitled"));
            let create = ChatSessionCommand::Create {
                session_id,
                user_id: user.id.clone(),
                title: Some(title.chars().take(255).collect()),
                messages: Vec::new(),
                ui_state: Default::default(),
                incident_id: Some(id),
                at: Utc::now(),
            };
            execute(
                &state.events.chat_sessions,
                &session_id.to_string(),
                create,
                actor.clone(),
            )
            .await?;
            (session_id, true)
        }
    };
    let sid = session_id.to_string();
    // Reopened, then marked in progress; an answer running in the session may complete it in
    // between (a follow-up sent before the previous answer ended), so a refusal is tried again.
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let now = Utc::now();
        let reopen = ChatSessionCommand::Reactivate {
            user_id: user.id.clone(),
            at: now,
        };
        execute(&state.events.chat_sessions, &sid, reopen, actor.clone()).await?;
        let busy = ChatSessionCommand::MarkInProgress {
            user_id: user.id.clone(),
            at: now,
        };
        match execute(&state.events.chat_sessions, &sid, busy, actor.clone()).await {
            Err(AggregateError::UserError(ChatSessionError::Closed(_))) if attempt < ATTEMPTS => continue,
            outcome => {
                outcome?;
                break;
            }
        }
    }
    let payload = IncidentChatPayload {
        user_id: user.id,
        session_id,
        incident_id: id,
        question,
        ask_mode,
    };
    let mut job = NewJob::new(
        INCIDENT_CHAT_JOB,
        serde_json::to_value(payload).expect("payload serializes"),
    );
    // An answer that failed half-way would repeat the question if retried.
    job.max_attempts = 1;
    enqueue(&state.db, job).await.map_err(AppError::unexpected)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            session_id,
            status: "processing",
            is_new_session,
        }),
    ))
}
