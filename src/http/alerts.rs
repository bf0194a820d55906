//! The alert inbox (issue 30): every alert the caller's sources sent, newest first, with what
//! became of it; and one alert with its raw payload.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::source::Source;
use vigil_projections::alert_inbox::{self as read, fate, InboxFilter, InboxRow};

use crate::{
    auth::AuthUser,
    error::{AppError, ErrorBody},
    extract::{page_limit, Path, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_alerts))
        .routes(routes!(get_alert))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InboxAlertListQuery {
    /// `source_a` .. `source_i`.
    #[param(pattern = "^source_[a-i]$")]
    source: Option<String>,
    /// The alert's service, exactly.
    service: Option<String>,
    /// `opened`, `joined`, `resolved`, `silenced`, `unmatched`, `updated`, `deduplicated`, `held`,
    /// `held_expired` or `flapping`.
    #[param(pattern = "^(opened|joined|resolved|silenced|unmatched|updated|deduplicated|held|held_expired|flapping)$")]
    fate: Option<String>,
    /// Received at or after (ISO 8601).
    since: Option<DateTime<Utc>>,
    /// Received before (ISO 8601).
    until: Option<DateTime<Utc>>,
    /// 1 to 100 (default 50).
    #[param(pattern = "^(100|[1-9][0-9]?)$")]
    limit: Option<String>,
    /// The previous page's `nextCursor`: the page after it, unchanged by alerts arriving since.
    #[param(pattern = "^[0-9]{1,18}$")]
    cursor: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboxAlert {
    /// The delivery's id (an incident's correlated alert's `sourceAlertId`).
    id: i64,
    source: String,
    title: String,
    service: Option<String>,
    severity: Option<String>,
    fired_at: DateTime<Utc>,
    received_at: DateTime<Utc>,
    /// What became of it: `opened` (it opened `incidentId`), `joined` (it joined `incidentId`
    /// with `score`), `resolved` (a recovery that resolved its alert in `incidentId`),
    /// `silenced` (by `silenceIds`: it opened and joined nothing), `unmatched` (a recovery of an
    /// alert no incident holds), `updated` (a state change, such as acknowledged, of an alert
    /// `incidentId` holds), `deduplicated` (the same delivery as `redeliveryOf` again), `held`
    /// (grouping rule `ruleId` holds it until enough alerts like it arrive, counting it until
    /// `heldUntil`), `held_expired` (held, and `heldUntil` passed without an incident opening) or
    /// `flapping` (a later firing or recovery of an alert key flapping in `incidentId`, recorded
    /// there; it opened nothing). A held alert that an incident opened with shows that fate.
    #[schema(
        pattern = "^(opened|joined|resolved|silenced|unmatched|updated|deduplicated|held|held_expired|flapping)$"
    )]
    fate: String,
    /// Where the alert is now (an alert split off is in the incident it was split into).
    incident_id: Option<Uuid>,
    score: Option<f64>,
    silence_ids: Option<Vec<Uuid>>,
    redelivery_of: Option<i64>,
    rule_id: Option<Uuid>,
    held_until: Option<DateTime<Utc>>,
    /// This alert with its raw payload.
    url: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboxAlertList {
    alerts: Vec<InboxAlert>,
    /// Pass as `cursor` for the next page; absent on the last one.
    next_cursor: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboxAlertDetail {
    #[serde(flatten)]
    alert: InboxAlert,
    /// The body the source sent, as received.
    #[schema(value_type = Object)]
    raw_payload: Option<Value>,
}

/// The caller's alerts, newest first, each with its fate. An alert is listed once its placement
/// is projected, a moment after its webhook was answered.
#[utoipa::path(get, path = "/api/alerts", operation_id = "listAlerts", tag = "alerts", params(InboxAlertListQuery),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = InboxAlertList),
        (status = 400, description = "an unknown source or fate, a bad time, limit or cursor", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn list_alerts(
    State(state): State<AppState>,
    user: AuthUser,
    Query(query): Query<InboxAlertListQuery>,
) -> Result<Json<InboxAlertList>, AppError> {
    let limit = page_limit(query.limit.as_deref(), 50, 100)?;
    let before_id = query.cursor.as_deref().map(alert_id).transpose()?;
    let source = match query.source.as_deref() {
        None => None,
        Some(token) => Some(
            Source::ALL
                .into_iter()
                .find(|source| source.as_str() == token)
                .ok_or_else(|| AppError::invalid("source: must be one of source_a .. source_i"))?
                .as_str()
                .to_owned(),
        ),
    };
    if query.fate.as_deref().is_some_and(|f| !fate::ALL.contains(&f)) {
        return Err(AppError::invalid(format!(
            "fate: must be one of {}",
            fate::ALL.join(", ")
        )));
    }
    let filter = InboxFilter {
        source,
        service: query.service,
        fate: query.fate,
        since: query.since,
        until: query.until,
        before_id,
    };
    let mut rows = read::list(&state.db, &user.id, &filter, limit + 1).await?;
    let next_cursor = (rows.len() as i64 > limit).then(|| rows[limit as usize - 1].id.to_string());
    rows.truncate(limit as usize);
    Ok(Json(InboxAlertList {
        alerts: rows.into_iter().map(InboxAlert::from).collect(),
        next_cursor,
    }))
}

/// One of the caller's alerts, with the payload its source sent.
#[utoipa::path(get, path = "/api/alerts/{alert_id}", operation_id = "getAlert", tag = "alerts",
    params(("alert_id" = String, Path, pattern = "^[0-9]{1,18}$")), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = InboxAlertDetail), (status = 400, description = "the id is not an integer", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody),
        (status = 404, description = "not found or not the caller's", body = ErrorBody)))]
async fn get_alert(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<String>,
) -> Result<Json<InboxAlertDetail>, AppError> {
    let (row, payload) = read::find(&state.db, &user.id, alert_id(&id)?)
        .await?
        .ok_or_else(|| AppError::NotFound("alert not found".into()))?;
    Ok(Json(InboxAlertDetail {
        alert: InboxAlert::from(row),
        raw_payload: payload.and_then(|text| serde_json::from_str(&text).ok()),
    }))
}

/// An alert id: the digits of a delivery's id.
fn alert_id(raw: &str) -> Result<i64, AppError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id >= 0 && raw.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| AppError::invalid("alert id: must be the digits of an alert's id"))
}

impl From<InboxRow> for InboxAlert {
    fn from(row: InboxRow) -> Self {
        Self {
            url: format!("/api/alerts/{}", row.id),
            id: row.id,
            source: row.source_type,
            title: row.title,
            service: row.service,
            severity: row.severity,
            fired_at: row.fired_at,
            received_at: row.received_at,
            fate: row.fate,
            incident_id: row.incident_id,
            score: row.score,
            silence_ids: row.silence_ids,
            redelivery_of: row.redelivery_of,
            rule_id: row.rule_id,
            held_until: row.held_until,
        }
    }
}
