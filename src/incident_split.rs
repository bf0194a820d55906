//! Splitting one alert off an incident into a new incident of its own: two aggregates' events,
//! committed together or not at all (as a merge, [`crate::incident_merge`], whose helpers this
//! shares).
//!
//! The source records `AlertSplitOff` (with the services that stay, evidence against their edge
//! to the alert's service in the learned topology); the new incident opens with the alert
//! (`IncidentOpened` naming the source in `split_from`), so it is analysed like any new
//! incident. The alert's delivery row then points at the new incident, so that its recovery and
//! its repeated notifications go there.

use std::time::Duration;

use chrono::Utc;
use cqrs_es::Aggregate;
use rand::Rng;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::incident::{alerts_in, AlertInfo, Incident, IncidentCommand};
use vigil_projections::{
    incidents::{correlated_alert_id, IncidentsReadModel},
    Projector,
};

use crate::{
    error::AppError,
    event_store::{Actor, EventStore},
    incident_merge::{append, envelopes, load, Attempt, MAX_ATTEMPTS},
};

/// Moves the alert shown as `alert_id` (a `correlatedAlerts[].id` of `source_id`) into a new
/// incident, as `actor`; returns the new incident's id. 404 when the alert is not one of the
/// incident's, 409 for its opening alert, a merged incident, or an alert that opened an incident
/// merged into this one (an alert opens at most one incident).
pub async fn split(
    db: &PgPool,
    events: &EventStore,
    actor: Actor<'_>,
    user_id: &str,
    source_id: Uuid,
    alert_id: Uuid,
) -> Result<Uuid, AppError> {
    let projector = Projector::new(db.clone(), IncidentsReadModel);
    let new_id = Uuid::new_v4();
    for attempt in 1..=MAX_ATTEMPTS {
        let mut tx = db.begin().await?;
        let split = match try_split(&mut tx, &projector, &actor, user_id, source_id, alert_id, new_id).await {
            Ok(appended) => tx.commit().await.map(|()| appended).map_err(Attempt::from),
            Err(failed) => {
                let _ = tx.rollback().await;
                Err(failed)
            }
        };
        match split {
            Ok(appended) => {
                events.incident_events_appended.inc_by(appended as u64);
                events.announcer.announce(Incident::TYPE);
                return Ok(new_id);
            }
            Err(Attempt::LostRace) if attempt < MAX_ATTEMPTS => {
                let backoff_ms = rand::rng().random_range(1..=5 * u64::from(attempt));
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            }
            Err(Attempt::LostRace) => break,
            Err(Attempt::Failed(error)) => return Err(error),
        }
    }
    Err(AppError::Conflict(
        "the incident was changed concurrently too many times; retry".into(),
    ))
}

async fn try_split(
    conn: &mut PgConnection,
    projector: &Projector<Incident, IncidentsReadModel>,
    actor: &Actor<'_>,
    user_id: &str,
    source_id: Uuid,
    alert_id: Uuid,
    new_id: Uuid,
) -> Result<usize, Attempt> {
    let (history, source, source_sequence) = load(conn, source_id).await?;
    let alerts = alerts_in(history.into_iter().map(|event| event.payload));
    let position = alerts
        .iter()
        .position(|alert| correlated_alert_id(source_id, &alert.source_type, alert.source_alert_id) == alert_id)
        .ok_or_else(|| Attempt::Failed(AppError::NotFound("alert not found in this incident".into())))?;
    let alert = alerts[position].clone();
    let remaining_services = services_but(&alerts, position);
    let at = Utc::now();
    let split = source.decide(IncidentCommand::SplitOff {
        user_id: user_id.to_owned(),
        alert: alert.clone(),
        new_incident_id: new_id,
        remaining_services,
        at,
    })?;
    // An alert that opened an incident (merged into this one since) keeps that incident's row:
    // an alert is the opening alert of one incident only (`incidents_source_alert`).
    let opened_before: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM incidents WHERE source_type = $1 AND source_alert_id = $2 AND user_id = $3")
            .bind(&alert.source_type)
            .bind(alert.source_alert_id)
            .bind(user_id)
            .fetch_optional(&mut *conn)
            .await?;
    if let Some(opened) = opened_before {
        return Err(Attempt::Failed(AppError::Conflict(format!(
            "this alert opened incident {opened}, which was merged into this one; it cannot open another"
        ))));
    }
    let opened = Incident::default().decide(IncidentCommand::OpenSplit {
        incident_id: new_id,
        user_id: user_id.to_owned(),
        alert: alert.clone(),
        source_incident_id: source_id,
        at,
    })?;
    let source_events = envelopes(source_id, source_sequence, split, actor);
    let new_events = envelopes(new_id, 0, opened, actor);
    // The new stream is unseen by anyone else; the source is the one a racing writer may take.
    append(conn, &source_events).await?;
    append(conn, &new_events).await?;
    projector
        .project_in(conn, &source_id.to_string(), &source_events)
        .await?;
    projector.project_in(conn, &new_id.to_string(), &new_events).await?;
    sqlx::query("UPDATE source_alerts SET incident_id = $1, correlated = false WHERE id = $2 AND user_id = $3")
        .bind(new_id)
        .bind(alert.source_alert_id)
        .bind(user_id)
        .execute(&mut *conn)
        .await?;
    Ok(source_events.len() + new_events.len())
}

/// The distinct services of every alert but the one at `left`, in order of first appearance.
fn services_but(alerts: &[AlertInfo], left: usize) -> Vec<String> {
    let mut services: Vec<String> = Vec::new();
    for (index, alert) in alerts.iter().enumerate() {
        if let Some(service) = alert.service.as_ref().filter(|_| index != left) {
            if !services.contains(service) {
                services.push(service.clone());
            }
        }
    }
    services
}
