//! Postmortems of resolved incidents: one incident's (`404` until one exists, `202` while it is
//! being written) and the caller's list.

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::incident::IncidentStatus;

use super::incidents::{incident_id, owned};
use crate::{
    analysis::postmortem::POSTMORTEM_JOB,
    auth::{AuthUser, IncidentUser},
    error::{AppError, ErrorBody},
    extract::Path,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(incident_postmortem))
        .routes(routes!(list_postmortems))
}

/// A postmortem (markdown with Summary, Timeline, Root Cause, Impact, Resolution, Action Items,
/// Lessons Learned).
#[derive(Serialize, utoipa::ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Postmortem {
    incident_id: Uuid,
    title: String,
    content: String,
    generated_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Generating {
    /// Always `generating`.
    status: &'static str,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct PostmortemList {
    /// The caller's postmortems, newest first (at most 100).
    postmortems: Vec<Postmortem>,
}

/// The incident's postmortem, written when it becomes resolved.
#[utoipa::path(get, path = "/api/incidents/{id}/postmortem", operation_id = "getIncidentPostmortem", tag = "incidents",
    params(("id" = Uuid, Path, description = "incident UUID")),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = Postmortem),
        (status = 202, description = "being written", body = Generating),
        (status = 400, description = "no identity, or the id is not a UUID", body = ErrorBody),
        (status = 404, description = "no such incident of the caller's, or no postmortem (it is not resolved)", body = ErrorBody)))]
async fn incident_postmortem(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
) -> Result<axum::response::Response, AppError> {
    let id = incident_id(&raw_id)?;
    let incident = owned(&state, &user, id).await?;
    // By primary key alone (the incident is the caller's, checked above): with `user_id = $2` as
    // well, a plan made while the table was young took `postmortems_by_user` and kept it.
    let written: Option<Postmortem> =
        sqlx::query_as("SELECT incident_id, title, content, generated_at FROM postmortems WHERE incident_id = $1")
            .bind(id)
            .fetch_optional(&state.db)
            .await?;
    if let Some(postmortem) = written {
        return Ok(Json(postmortem).into_response());
    }
    let (queued, pending): (bool, bool) = sqlx::query_as(
        "SELECT count(*) > 0, count(*) FILTER (WHERE state IN ('available', 'running', 'retryable')) > 0
         FROM jobs WHERE kind = $1 AND unique_key LIKE $2",
    )
    .bind(POSTMORTEM_JOB)
    .bind(format!("postmortem:incident:{id}:%"))
    .fetch_one(&state.db)
    .await?;
    // Resolved with no job yet: the reactor that queues it has not read the resolution (it does
    // so within moments), and a client polling from the PATCH's answer must not be told "none".
    let awaiting_job = !queued && incident.status == IncidentStatus::Resolved.as_str();
    if pending || awaiting_job {
        return Ok((StatusCode::ACCEPTED, Json(Generating { status: "generating" })).into_response());
    }
    Err(AppError::NotFound(
        "no postmortem for this incident: one is written when it is resolved".into(),
    ))
}

/// The caller's postmortems, newest first.
#[utoipa::path(get, path = "/api/postmortems", operation_id = "listPostmortems", tag = "incidents", security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = PostmortemList), (status = 401, body = ErrorBody)))]
async fn list_postmortems(State(state): State<AppState>, user: AuthUser) -> Result<Json<PostmortemList>, AppError> {
    let postmortems = sqlx::query_as(
        "SELECT incident_id, title, content, generated_at FROM postmortems
         WHERE user_id = $1 ORDER BY generated_at DESC, incident_id LIMIT 100",
    )
    .bind(&user.id)
    .fetch_all(&state.db)
    .await?;
    Ok(Json(PostmortemList { postmortems }))
}
