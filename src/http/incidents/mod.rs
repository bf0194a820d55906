//! Incidents over HTTP (spec Endpoints → Incidents). Incidents are opened only by alert
//! ingestion; here they are listed, read, patched, merged, and their history is audited.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use futures::TryFutureExt;
use serde_json::{Map, Value};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::incident::{ActiveTab, AnalysisStatus, IncidentCommand, IncidentStatus};
use vigil_projections::{
    chat_sessions::{self as sessions, split_inline_images},
    incidents::{self as read, IncidentRow},
};

use crate::{
    auth::IncidentUser,
    error::{excerpt, AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::{JsonBody, JsonDocument, Path, Query},
    incident_merge,
    state::AppState,
};

mod views;

pub use views::*;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_incidents))
        .routes(routes!(get_incident, patch_incident))
        .routes(routes!(merge_alert))
        .routes(routes!(incident_events))
}

/// Incident ids are UUIDs; anything else is a 400 (spec).
pub(super) fn incident_id(raw: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(raw.trim()).map_err(|_| {
        AppError::bad_request(
            "invalid_incident_id",
            format!("incident id `{}` is not a UUID", excerpt(raw)),
        )
    })
}

pub(super) async fn owned(state: &AppState, user: &IncidentUser, id: Uuid) -> Result<IncidentRow, AppError> {
    read::find_incident(&state.db, &user.id, id)
        .await?
        .ok_or_else(|| AppError::NotFound("incident not found".into()))
}

/// The user's incidents: at most 100, newest `startedAt` first, merged ones left out.
#[utoipa::path(get, path = "/api/incidents", operation_id = "listIncidents", tag = "incidents", security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = IncidentList), (status = 400, description = "no user identity", body = ErrorBody)))]
async fn list_incidents(State(state): State<AppState>, user: IncidentUser) -> Result<Json<IncidentList>, AppError> {
    let incidents = read::list_incidents(&state.db, &user.id)
        .await?
        .into_iter()
        .map(IncidentView::from)
        .collect();
    Ok(Json(IncidentList { incidents }))
}

/// One incident with its suggestions, thoughts (chronological), citations (numeric keys, in key
/// order), correlated alerts and active chat sessions. With `as_of`, the incident and its chat
/// sessions as they stood at that time (their events up to then, projected afresh).
#[utoipa::path(get, path = "/api/incidents/{incident_id}", operation_id = "getIncident", tag = "incidents", params(("incident_id" = Uuid, Path), AsOfQuery),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = IncidentDetailResponse),
        (status = 400, description = "no user identity, or the id is not a UUID", body = ErrorBody),
        (status = 404, description = "not found or not the user's", body = ErrorBody)))]
async fn get_incident(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
    Query(query): Query<AsOfQuery>,
) -> Result<Json<IncidentDetailResponse>, AppError> {
    let id = incident_id(&raw_id)?;
    let as_of = match query.as_of.as_deref() {
        None => None,
        Some(raw) => Some(
            DateTime::parse_from_rfc3339(raw)
                .map_err(|_| AppError::bad_request("invalid_query", "as_of must be an ISO 8601 time with an offset"))?
                .with_timezone(&Utc),
        ),
    };
    let live = owned(&state, &user, id).await?;
    let db = &state.db;
    let (row, correlated) = match as_of {
        None => {
            let correlated = read::correlated_alerts(db, id).await?;
            (live, correlated)
        }
        Some(as_of) => read::as_of(db, &user.id, id, as_of)
            .await?
            .ok_or_else(|| AppError::NotFound("the incident did not exist at that time".into()))?,
    };
    let chats = async {
        Ok::<_, AppError>(match as_of {
            None => sessions::active_for_incident(db, &user.id, id).await?,
            Some(as_of) => sessions::for_incident_as_of(db, &user.id, id, as_of).await?,
        })
    };
    let window = chrono::Duration::seconds(state.config.deployment_correlation_window_secs);
    let (payload, mut suggestions, mut thoughts, mut citations, chats, changes) = tokio::try_join!(
        read::opening_payload(db, &user.id, row.source_alert_id).map_err(AppError::from),
        read::suggestions(db, id).map_err(AppError::from),
        read::thoughts(db, id).map_err(AppError::from),
        read::citations(db, id).map_err(AppError::from),
        chats,
        read::linked_changes(db, id, window).map_err(AppError::from),
    )?;
    if let Some(as_of) = as_of {
        let recorded = read::analysis_recorded_by(db, id, as_of).await?;
        suggestions.retain(|s| recorded.contains(&s.id));
        thoughts.retain(|t| recorded.contains(&t.id));
        citations.retain(|c| recorded.contains(&c.id));
    }
    let verdict = row
        .analysis_verdict
        .as_ref()
        .and_then(|stored| serde_json::from_value::<VerdictView>(stored.0.clone()).ok());
    let triggered_at = row.started_at;
    let (previous_incident_id, flapping) = (row.previous_incident_id, row.flapping);
    let mut incident = IncidentView::from(row);
    incident.alert.triggered_at = Some(triggered_at);
    incident.alert.raw_payload = Some(payload.unwrap_or_default());
    let detail = IncidentDetail {
        incident,
        suggestions: suggestions
            .into_iter()
            .map(|s| SuggestionView {
                id: s.id,
                title: s.title,
                description: s.description,
                kind: s.kind.map(detail_suggestion_type),
                risk: s.risk,
                command: s.command,
                file_path: s.file_path,
                original_content: s.original_content,
                suggested_content: s.suggested_content,
                user_edited_content: s.user_edited_content,
                repository: s.repository,
                pr_url: s.pr_url,
                pr_number: s.pr_number,
                created_branch: s.created_branch,
                applied_at: s.applied_at,
                created_at: s.created_at,
            })
            .collect(),
        streaming_thoughts: thoughts
            .into_iter()
            .map(|t| ThoughtView {
                id: t.id,
                timestamp: t.timestamp,
                content: t.content,
                kind: t.thought_type,
                created_at: t.created_at,
            })
            .collect(),
        citations: citations
            .into_iter()
            .map(|c| CitationView {
                id: c.id,
                key: c.citation_key,
                tool_name: c.tool_name.unwrap_or_default(),
                command: c.command,
                output: c.output,
                executed_at: c.executed_at,
                created_at: c.created_at,
            })
            .collect(),
        correlated_alerts: correlated
            .into_iter()
            .map(|a| CorrelatedAlertView {
                id: a.id,
                source_type: a.source_type,
                alert_title: a.alert_title.unwrap_or_default(),
                alert_service: a.alert_service,
                alert_severity: a.alert_severity,
                correlation_strategy: a.correlation_strategy,
                correlation_score: a.correlation_score,
                correlation_details: a.correlation_details.0,
                received_at: a.received_at,
            })
            .collect(),
        chat_sessions: chats
            .into_iter()
            .map(|s| IncidentChatSession {
                id: s.id,
                title: s.title,
                messages: s.messages.0.into_iter().map(split_inline_images).collect(),
                created_at: s.created_at,
                updated_at: s.updated_at,
                status: s.status,
            })
            .collect(),
        changes: changes
            .into_iter()
            .map(|c| ChangeView {
                source_alert_id: c.source_alert_id,
                source_type: c.source_type,
                title: c.title,
                service: c.service,
                environment: c.environment,
                succeeded: c.succeeded,
                at: c.at,
                link: serde_json::to_value(&c.link).unwrap_or_default(),
            })
            .collect(),
        verdict,
        previous_incident_id,
        flapping,
    };
    Ok(Json(IncidentDetailResponse { incident: detail }))
}

/// Reads one optional enumerated field of the PATCH body.
fn enum_field<T>(
    body: &Map<String, Value>,
    name: &str,
    parse: fn(&str) -> Option<T>,
    allowed: &[&str],
) -> Result<Option<T>, AppError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => parse(value).map(Some).ok_or_else(|| {
            AppError::invalid(format!(
                "invalid value `{}` for {name}; allowed: {}",
                excerpt(value),
                allowed.join(", ")
            ))
        }),
        Some(_) => Err(AppError::invalid(format!("{name} must be a string"))),
    }
}

/// The PATCH body as the OpenAPI document describes it. The handler reads the fields from the
/// JSON object itself, to tell an absent field from a null one and to name a bad value.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
struct IncidentPatch {
    status: Option<PatchedStatus>,
    aurora_status: Option<PatchedAuroraStatus>,
    #[schema(max_length = 10_000)]
    summary: Option<String>,
    active_tab: Option<PatchedTab>,
}

/// String schemas whose values are the domain's wire names (`NAMES`), so that the document and
/// the PATCH validation cannot drift apart.
macro_rules! wire_names_schemas {
    ($($schema:ident => $names:expr),+ $(,)?) => {$(
        struct $schema;

        impl utoipa::PartialSchema for $schema {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some($names.iter().copied()))
                    .into()
            }
        }

        impl utoipa::ToSchema for $schema {}
    )+};
}

wire_names_schemas! {
    PatchedStatus => IncidentStatus::NAMES,
    PatchedAuroraStatus => AnalysisStatus::NAMES,
    PatchedTab => ActiveTab::NAMES,
}

/// Change status, auroraStatus, summary (at most 10,000 characters) or activeTab. Setting
/// `resolved` (from another status) starts postmortem generation; `analyzed`/`resolved` stamp
/// `analyzedAt` once. `updatedAt` moves on every PATCH.
#[utoipa::path(patch, path = "/api/incidents/{incident_id}", operation_id = "patchIncident", tag = "incidents", params(("incident_id" = Uuid, Path)),
    request_body(content = IncidentPatch, description = "status, auroraStatus, summary, activeTab (all optional, at least one)"),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = PatchResponse),
        (status = 400, description = "no identity, bad id, missing body, invalid value, summary too long, nothing to update", body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn patch_incident(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
    JsonDocument(body): JsonDocument,
) -> Result<Json<PatchResponse>, AppError> {
    let id = incident_id(&raw_id)?;
    let Value::Object(body) = body else {
        return Err(AppError::invalid("the request body must be a JSON object"));
    };
    let status = enum_field(&body, "status", IncidentStatus::parse, IncidentStatus::NAMES)?;
    let analysis_status = enum_field(&body, "auroraStatus", AnalysisStatus::parse, AnalysisStatus::NAMES)?;
    let active_tab = enum_field(&body, "activeTab", ActiveTab::parse, ActiveTab::NAMES)?;
    let summary = match body.get("summary") {
        None | Some(Value::Null) => None,
        Some(Value::String(summary)) => Some(summary.clone()),
        Some(_) => return Err(AppError::invalid("summary must be a string")),
    };
    owned(&state, &user, id).await?;
    let command = IncidentCommand::Patch {
        user_id: user.id.clone(),
        status,
        analysis_status,
        summary,
        active_tab,
        at: Utc::now(),
    };
    execute(&state.events.incidents, &id.to_string(), command, Actor::User(&user.id)).await?;
    Ok(Json(PatchResponse { success: true, id }))
}

#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeRequest {
    /// The incident to merge into the target.
    #[schema(format = Uuid)]
    source_incident_id: String,
}

/// Merge the source incident into the target: the source becomes `merged` (left out of the list,
/// `mergedIntoIncidentId` set), its alerts become the target's correlated alerts (strategy
/// `manual`, score 1.0).
#[utoipa::path(post, path = "/api/incidents/{target_incident_id}/merge-alert", operation_id = "mergeIncidentAlert", tag = "incidents",
    params(("target_incident_id" = Uuid, Path)), request_body = MergeRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = MergeResponse),
        (status = 400, description = "bad ids, or source equals target", body = ErrorBody),
        (status = 404, description = "either incident not found or not the user's", body = ErrorBody),
        (status = 409, description = "source or target already merged", body = ErrorBody)))]
async fn merge_alert(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_target): Path<String>,
    JsonBody(request): JsonBody<MergeRequest>,
) -> Result<Json<MergeResponse>, AppError> {
    let target_id = incident_id(&raw_target)?;
    let source_id = Uuid::parse_str(request.source_incident_id.trim())
        .map_err(|_| AppError::invalid("sourceIncidentId must be a UUID"))?;
    if source_id == target_id {
        return Err(AppError::invalid("an incident cannot be merged into itself"));
    }
    owned(&state, &user, target_id).await?;
    owned(&state, &user, source_id).await?;
    incident_merge::merge(
        &state.db,
        &state.events,
        Actor::User(&user.id),
        &user.id,
        source_id,
        target_id,
    )
    .await?;
    Ok(Json(MergeResponse {
        success: true,
        target_incident_id: target_id,
        source_incident_id: source_id,
    }))
}

/// The incident's full event history, oldest first, for auditors.
#[utoipa::path(get, path = "/api/incidents/{incident_id}/events", operation_id = "listIncidentEvents", tag = "incidents", params(("incident_id" = Uuid, Path)),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = IncidentEvents), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn incident_events(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
) -> Result<Json<IncidentEvents>, AppError> {
    let id = incident_id(&raw_id)?;
    owned(&state, &user, id).await?;
    let rows: Vec<(i64, String, String, DateTime<Utc>, Value, Value)> = sqlx::query_as(
        "SELECT sequence, event_type, event_version, recorded_at, metadata, payload FROM events
         WHERE aggregate_type = 'Incident' AND aggregate_id = $1 ORDER BY sequence",
    )
    .bind(id.to_string())
    .fetch_all(&state.db)
    .await?;
    let events = rows
        .into_iter()
        .map(
            |(sequence, kind, version, recorded_at, metadata, payload)| IncidentEventView {
                sequence,
                kind,
                version,
                recorded_at,
                actor: metadata.get("actor").and_then(Value::as_str).map(str::to_owned),
                payload,
            },
        )
        .collect();
    Ok(Json(IncidentEvents {
        incident_id: id,
        events,
    }))
}
