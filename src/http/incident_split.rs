//! Splitting an alert off an incident (issue 27 item 6): the user's "this one does not belong".

use axum::{extract::State, http::StatusCode, Json};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_projections::incidents as read;

use super::incidents::{incident_id, owned, IncidentView};
use crate::{
    auth::IncidentUser,
    error::{AppError, ErrorBody},
    event_store::Actor,
    extract::{JsonBody, Path},
    incident_split,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(split_alert))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SplitRequest {
    /// The `id` of one of the incident's `correlatedAlerts` (as the detail shows it).
    #[schema(format = Uuid)]
    alert_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SplitResponse {
    /// The new incident, opened with the alert that was split off (status `investigating`; its
    /// analysis starts as for any new incident).
    incident: IncidentView,
    /// The incident the alert left.
    source_incident_id: Uuid,
}

/// Move one correlated alert out of the incident into a new incident of its own. The incident
/// records `AlertSplitOff` and its count, services and evidence no longer include the alert;
/// the new incident's history starts with `IncidentOpened` naming the source (`split_from`);
/// both events carry the caller as actor. The alert's later notifications (its recovery
/// included) go to the new incident, and the correlator does not merge the two back by itself;
/// the split counts against the learned topology edge between the alert's service and those that
/// stayed. The alert that opened the incident cannot be split off (it is the incident's title and
/// start): split the others off instead.
#[utoipa::path(post, path = "/api/incidents/{incident_id}/split", operation_id = "splitIncidentAlert", tag = "incidents",
    params(("incident_id" = Uuid, Path)), request_body = SplitRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 201, description = "the new incident", body = SplitResponse),
        (status = 400, description = "no identity, the id or alertId is not a UUID, missing or malformed body", body = ErrorBody),
        (status = 404, description = "the incident is not the user's, or the alert is not one of its alerts", body = ErrorBody),
        (status = 409, description = "the alert opened the incident (an incident's only alert is that one), the incident is merged, \
            or the alert opened an incident merged into this one", body = ErrorBody)))]
async fn split_alert(
    State(state): State<AppState>,
    user: IncidentUser,
    Path(raw_id): Path<String>,
    JsonBody(request): JsonBody<SplitRequest>,
) -> Result<(StatusCode, Json<SplitResponse>), AppError> {
    let source_id = incident_id(&raw_id)?;
    let alert_id = Uuid::parse_str(request.alert_id.trim())
        .map_err(|_| AppError::invalid("alertId must be a UUID: the id of one of the incident's correlatedAlerts"))?;
    owned(&state, &user, source_id).await?;
    let new_id = incident_split::split(
        &state.db,
        &state.events,
        Actor::User(&user.id),
        &user.id,
        source_id,
        alert_id,
    )
    .await?;
    let incident = read::find_incident(&state.db, &user.id, new_id)
        .await?
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("the split-off incident {new_id} has no read row")))?;
    Ok((
        StatusCode::CREATED,
        Json(SplitResponse {
            incident: incident.into(),
            source_incident_id: source_id,
        }),
    ))
}
