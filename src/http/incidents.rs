//! Incidents over HTTP (spec Endpoints → Incidents). Incidents are opened only by alert
//! ingestion; here they are listed, read, patched, merged, and their history is audited.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use futures::TryFutureExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::{
    chat_session::Message,
    incident::{ActiveTab, AnalysisStatus, IncidentCommand, IncidentStatus},
};
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

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_incidents))
        .routes(routes!(get_incident, patch_incident))
        .routes(routes!(merge_alert))
        .routes(routes!(incident_events))
}

/// The alert that opened the incident.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertView {
    title: Option<String>,
    service: Option<String>,
    /// The source it came from (`source_a` .. `source_i`).
    source: String,
    source_url: Option<String>,
    #[schema(value_type = Object)]
    metadata: Value,
    /// Detail only: when the alert fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    triggered_at: Option<DateTime<Utc>>,
    /// Detail only: the complete original alert payload, as a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_payload: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentView {
    id: Uuid,
    source_type: String,
    /// The alert's id in the ingestion store, as a string.
    source_alert_id: String,
    status: String,
    severity: Option<String>,
    alert: AlertView,
    aurora_status: String,
    summary: Option<String>,
    chat_session_id: Option<Uuid>,
    active_tab: Option<String>,
    correlated_alert_count: i32,
    affected_services: Vec<String>,
    merged_into_incident_id: Option<Uuid>,
    merged_into_title: Option<String>,
    started_at: DateTime<Utc>,
    analyzed_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<IncidentRow> for IncidentView {
    fn from(row: IncidentRow) -> Self {
        Self {
            id: row.id,
            source_type: row.source_type.clone(),
            source_alert_id: row.source_alert_id.to_string(),
            status: row.status,
            severity: row.severity,
            alert: AlertView {
                title: row.alert_title,
                service: row.alert_service,
                source: row.source_type,
                source_url: row.alert_source_url,
                metadata: row.alert_metadata.0,
                triggered_at: None,
                raw_payload: None,
            },
            aurora_status: row.aurora_status,
            summary: row.aurora_summary,
            chat_session_id: row.aurora_chat_session_id,
            active_tab: Some(row.active_tab),
            correlated_alert_count: row.correlated_alert_count,
            affected_services: row.affected_services,
            merged_into_incident_id: row.merged_into_incident_id,
            merged_into_title: row.merged_into_title,
            started_at: row.started_at,
            analyzed_at: row.analyzed_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentList {
    incidents: Vec<IncidentView>,
}

/// The detail response shows two suggestion types (spec): an investigation is a read-only look
/// like a diagnostic, a mitigation changes something like a fix. The stored type keeps the nuance.
fn detail_suggestion_type(stored: String) -> String {
    match stored.as_str() {
        "investigation" => "diagnostic".to_owned(),
        "mitigation" => "fix".to_owned(),
        _ => stored,
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuggestionView {
    id: i64,
    title: String,
    description: Option<String>,
    #[serde(rename = "type")]
    #[schema(value_type = Option<SuggestionType>)]
    kind: Option<String>,
    #[schema(value_type = Option<SuggestionRisk>)]
    risk: Option<String>,
    command: Option<String>,
    file_path: Option<String>,
    original_content: Option<String>,
    suggested_content: Option<String>,
    user_edited_content: Option<String>,
    repository: Option<String>,
    pr_url: Option<String>,
    pr_number: Option<i32>,
    created_branch: Option<String>,
    applied_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThoughtView {
    id: i64,
    timestamp: DateTime<Utc>,
    content: String,
    #[serde(rename = "type")]
    #[schema(value_type = Option<ThoughtType>)]
    kind: Option<String>,
    created_at: DateTime<Utc>,
}

/// The value sets of the detail's arrays, for the OpenAPI document (the rows hold them as text).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum ThoughtType {
    Analysis,
    Hypothesis,
    Evidence,
    Conclusion,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum SuggestionType {
    Diagnostic,
    Fix,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum SuggestionRisk {
    Safe,
    Medium,
    High,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CitationView {
    id: i64,
    key: String,
    /// Required by the spec; empty for a citation recorded without one.
    tool_name: String,
    command: Option<String>,
    #[schema(required = false)]
    output: String,
    executed_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorrelatedAlertView {
    id: Uuid,
    source_type: String,
    /// Required by the spec; empty for an alert recorded without one.
    alert_title: String,
    alert_service: Option<String>,
    alert_severity: Option<String>,
    correlation_strategy: String,
    correlation_score: f64,
    #[schema(value_type = Object, required = false)]
    correlation_details: Value,
    received_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentChatSession {
    id: Uuid,
    title: String,
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Message>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    status: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentDetail {
    #[serde(flatten)]
    incident: IncidentView,
    suggestions: Vec<SuggestionView>,
    streaming_thoughts: Vec<ThoughtView>,
    citations: Vec<CitationView>,
    correlated_alerts: Vec<CorrelatedAlertView>,
    chat_sessions: Vec<IncidentChatSession>,
    /// Deployments and configuration changes that concern the incident's services, inside the
    /// deployment window (not in the spec: an addition).
    changes: Vec<ChangeView>,
    /// The analysis's verdict and what it rests on, once it reached one (an addition).
    verdict: Option<VerdictView>,
    /// The earlier incident this one's alert fired in: a new firing of an alert whose incident
    /// is resolved or merged opens a new incident rather than reopening it (an addition). Null
    /// when the alert never fired before.
    #[schema(required = true)]
    previous_incident_id: Option<Uuid>,
    /// One of its alerts fired and recovered too often (`docs/noise.md`): its later cycles are
    /// recorded here (`FlapRecorded` events) and open nothing (an addition).
    flapping: bool,
}

/// The verdict of the analysis (`docs/rca.md`): CONFIRMED (the component's own failure and
/// other alerts leading to it), LIKELY (one line of evidence) or INCONCLUSIVE (the cause is not
/// established).
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictView {
    #[schema(example = "CONFIRMED")]
    verdict: VerdictName,
    /// The component at fault, spelled as the alerts spell it; null when not established.
    component: Option<String>,
    /// `change`, `dependency`, `component`, `host`, `network`, `database` or `capacity`.
    kind: Option<String>,
    /// The failure, in words.
    failure: Option<String>,
    /// The evidence, each quoted from the alert (or change) and field it came from.
    evidence: Vec<FindingView>,
    /// The services whose alerts lead to the component.
    named_by: Vec<String>,
    /// What was considered and set aside, and why.
    ruled_out: Vec<RuledOutView>,
    /// When the cause is not established: failures other alerts showed in the same minutes that
    /// nothing in the incident leads to, as leads to check. Empty otherwise.
    #[serde(default)]
    unlinked: Vec<UnlinkedView>,
    /// With a language model configured: the model's verdict and the verdict gate's decision on
    /// it (absent when no model answered, and the built-in analyst's verdict stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    model: Option<ModelCheckView>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct UnlinkedView {
    component: String,
    /// The failure, in words.
    failure: String,
    evidence: FindingView,
}

/// The model's verdict as the gate checked it (`docs/rca.md`, the model's verdict gate). It is
/// downgraded to INCONCLUSIVE when it cites nothing, cites only empty tool outputs, or contradicts
/// the ledger without new evidence; an accepted verdict is never stronger than its evidence.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCheckView {
    /// The verdict the model claimed; null when its answer had no readable verdict block.
    claimed_verdict: Option<VerdictName>,
    /// The component the model named.
    claimed_component: Option<String>,
    /// The existing evidence it cited: ledger items (`E1`, `E2`, ...) and tool results (`1`,
    /// `2`, ..., the keys of `citations`).
    cited: Vec<String>,
    /// Whether the model's verdict stands (the top-level verdict is then the model's).
    accepted: bool,
    /// `accepted`, `no_verdict`, `cites_nothing`, `empty_tool_outputs`, `no_component`,
    /// `contradicts_ledger` or `unsupported`.
    #[schema(example = "contradicts_ledger")]
    rule: String,
    /// The decision in words.
    reason: String,
    /// The built-in analyst's verdict, which the gated one replaces.
    ledger_verdict: VerdictName,
    /// The built-in analyst's component, if it named one.
    ledger_component: Option<String>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VerdictName {
    Confirmed,
    Likely,
    Inconclusive,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct FindingView {
    /// Index of the alert in the incident (0 is its first), null for a change.
    alert: Option<usize>,
    /// The alert's service, or the change.
    source: String,
    field: String,
    excerpt: String,
    /// The failure kind of the signature catalog it shows, if any.
    signature: Option<String>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuledOutView {
    subject: String,
    reason: String,
}

/// A change linked to an incident.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeView {
    /// The change's row in the ingestion store.
    source_alert_id: i64,
    source_type: String,
    title: String,
    service: Option<String>,
    environment: Option<String>,
    /// Whether the deployment reported success (a successful one may still be the cause).
    succeeded: bool,
    at: DateTime<Utc>,
    /// Why it is linked: `kind` (`same_service`, `mentions`, `mentioned_by`) and `path`.
    #[schema(value_type = Object)]
    link: Value,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentDetailResponse {
    incident: IncidentDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct PatchResponse {
    success: bool,
    id: Uuid,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeResponse {
    success: bool,
    target_incident_id: Uuid,
    source_incident_id: Uuid,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentEventView {
    sequence: i64,
    #[serde(rename = "type")]
    kind: String,
    version: String,
    recorded_at: DateTime<Utc>,
    /// `user:<id>` or `system:<part>`.
    actor: Option<String>,
    #[schema(value_type = Object)]
    payload: Value,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentEvents {
    incident_id: Uuid,
    events: Vec<IncidentEventView>,
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
pub struct AsOfQuery {
    /// ISO 8601 time: show the incident as it stood then.
    #[param(format = DateTime)]
    as_of: Option<String>,
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
