//! From a normalized alert to an incident: record the notification (deduplicated), then attach a
//! recovery to its incident, or correlate the alert with an open incident, or open a new one.
//!
//! The decision is serialized per user, so a storm of alerts of one service makes exactly one
//! incident and loses no correlation: first by an in-process lock per user (waiting for it holds
//! no database connection, so a storm cannot starve the pool the lock holder needs), then by a
//! transaction-scoped advisory lock that serializes instances sharing the database. Both are held
//! from the dedup insert until the incident's events are committed and projected.

use chrono::Utc;
use cqrs_es::AggregateError;
use serde::Serialize;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{best_match, CandidateIncident, CorrelationConfig, EventKind, NewAlert},
    incident::{AlertInfo, Correlation, IncidentCommand, IncidentError},
};
use vigil_projections::incidents::correlation_candidates;

use super::parsers::{AlertKind, NormalizedAlert};
use crate::{
    error::AppError,
    event_store::{execute, Actor},
    state::AppState,
    vector_store,
};

const ACTOR: Actor<'static> = Actor::System("ingestion");

/// What became of one alert of a notification.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct IngestedAlert {
    /// The alert's row in the ingestion store (the incident's `sourceAlertId`).
    pub alert_id: i64,
    /// The incident it belongs to; `null` for a recovery of an alert no incident holds.
    pub incident_id: Option<Uuid>,
    /// Whether it joined an existing incident as a correlated alert.
    pub correlated: bool,
}

pub async fn ingest(
    state: &AppState,
    user_id: &str,
    alerts: Vec<NormalizedAlert>,
) -> Result<Vec<IngestedAlert>, AppError> {
    let mut outcomes = Vec::with_capacity(alerts.len());
    for alert in alerts {
        outcomes.push(ingest_one(state, user_id, alert).await?);
    }
    Ok(outcomes)
}

async fn ingest_one(state: &AppState, user_id: &str, alert: NormalizedAlert) -> Result<IngestedAlert, AppError> {
    let _in_process = state.placement_gate.lock_user(user_id).await;
    // A placement holds its locked transaction's connection while its commands take another:
    // admit only as many at once as the pool can serve, so they cannot starve each other.
    let _admitted = state.placement_gate.admit().await;
    let mut tx = state.db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("ingest/{user_id}"))
        .execute(&mut *tx)
        .await?;

    let Some(alert_id) = record(&mut tx, user_id, &alert).await? else {
        let earlier = earlier_delivery(&mut tx, user_id, &alert).await?;
        tx.commit().await?;
        return Ok(earlier);
    };
    let info = alert_info(alert_id, &alert);

    let placed = if alert.resolved {
        attach_recovery(state, &mut tx, user_id, &alert, alert_id)
            .await?
            .map(|incident_id| (incident_id, false))
    } else if let Some(incident_id) = incident_holding_key(&mut tx, user_id, &alert).await? {
        // A state change of an alert an open incident already holds (acknowledged, re-notified).
        Some((incident_id, false))
    } else {
        match correlate(state, &mut tx, user_id, &alert, &info).await? {
            Some(incident_id) => Some((incident_id, true)),
            None => Some((open(state, &mut tx, user_id, &alert, info).await?, false)),
        }
    };

    if let Some((incident_id, correlated)) = placed {
        sqlx::query("UPDATE source_alerts SET incident_id = $2, correlated = $3 WHERE id = $1")
            .bind(alert_id)
            .bind(incident_id)
            .bind(correlated)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(IngestedAlert {
        alert_id,
        incident_id: placed.map(|(id, _)| id),
        correlated: placed.is_some_and(|(_, correlated)| correlated),
    })
}

/// Inserts the notification; `None` when this exact delivery was recorded before.
async fn record(
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "INSERT INTO source_alerts (user_id, source_type, alert_key, group_key, alert_state, resolved, kind, alert_uid,
             alert_title, rule_name, rule_url, dashboard_url, panel_url, alert_service, alert_environment, alert_severity,
             fired_at, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $3, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         ON CONFLICT ON CONSTRAINT source_alerts_delivery DO NOTHING
         RETURNING id",
    )
    .bind(user_id)
    .bind(alert.source.as_str())
    .bind(&alert.key)
    .bind(&alert.group_key)
    .bind(truncate(&alert.state, 50))
    .bind(alert.resolved)
    .bind(alert.kind.as_str())
    .bind(&alert.title)
    .bind(&alert.rule_name)
    .bind(&alert.source_url)
    .bind(&alert.dashboard_url)
    .bind(&alert.panel_url)
    .bind(&alert.service)
    .bind(&alert.environment)
    .bind(alert.severity.as_deref().map(|severity| truncate(severity, 20)))
    .bind(alert.fired_at)
    .bind(&alert.raw)
    .fetch_optional(&mut **tx)
    .await
}

async fn earlier_delivery(
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
) -> sqlx::Result<IngestedAlert> {
    let (alert_id, incident_id, correlated): (i64, Option<Uuid>, bool) = sqlx::query_as(
        "SELECT id, incident_id, correlated FROM source_alerts
         WHERE user_id = $1 AND source_type = $2 AND alert_key = $3 AND alert_state = $4 AND fired_at = $5",
    )
    .bind(user_id)
    .bind(alert.source.as_str())
    .bind(&alert.key)
    .bind(truncate(&alert.state, 50))
    .bind(alert.fired_at)
    .fetch_one(&mut **tx)
    .await?;
    Ok(IngestedAlert {
        alert_id,
        incident_id,
        correlated,
    })
}

/// A recovery joins the incident of the newest unresolved alert with the same group key.
async fn attach_recovery(
    state: &AppState,
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
    alert_id: i64,
) -> Result<Option<Uuid>, AppError> {
    let incident_id: Option<Uuid> = sqlx::query_scalar(
        "SELECT incident_id FROM source_alerts
         WHERE user_id = $1 AND source_type = $2 AND group_key = $3 AND NOT resolved AND incident_id IS NOT NULL
         ORDER BY id DESC LIMIT 1",
    )
    .bind(user_id)
    .bind(alert.source.as_str())
    .bind(&alert.group_key)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(incident_id) = incident_id else {
        return Ok(None);
    };
    let command = IncidentCommand::ResolveAlert {
        user_id: user_id.to_owned(),
        source_type: alert.source.as_str().to_owned(),
        alert_key: alert.key.clone(),
        source_alert_id: alert_id,
        at: Utc::now(),
    };
    execute(&state.events.incidents, &incident_id.to_string(), command, ACTOR).await?;
    Ok(Some(incident_id))
}

/// The open incident that already holds an alert with this key, if any.
async fn incident_holding_key(
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT s.incident_id FROM source_alerts s JOIN incidents i ON i.id = s.incident_id
         WHERE s.user_id = $1 AND s.source_type = $2 AND s.alert_key = $3 AND NOT s.resolved
           AND i.status IN ('investigating', 'analyzed')
         ORDER BY s.id DESC LIMIT 1",
    )
    .bind(user_id)
    .bind(alert.source.as_str())
    .bind(&alert.key)
    .fetch_optional(&mut **tx)
    .await
}

/// Joins the best-scoring open incident, if one reaches the threshold.
async fn correlate(
    state: &AppState,
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
    info: &AlertInfo,
) -> Result<Option<Uuid>, AppError> {
    let config = &state.correlation;
    let kind = event_kind(alert.kind);
    let window = config.window_for(kind);
    let rows = correlation_candidates(&mut **tx, user_id, alert.fired_at - window, alert.fired_at + window).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let new_alert = NewAlert {
        title: alert.title.clone(),
        service: alert.service.clone(),
        fired_at: alert.fired_at,
        kind,
        embedding: state.vectors.embed(&alert.title),
    };
    let candidates: Vec<CandidateIncident> = rows
        .iter()
        .map(|row| {
            let title = row.alert_title.clone().unwrap_or_default();
            CandidateIncident {
                embedding: row.embedding.clone().unwrap_or_else(|| state.vectors.embed(&title)),
                title,
                primary_service: row.alert_service.clone(),
                affected_services: row.affected_services.clone(),
                alert_times: vec![row.started_at, row.last_alert_at],
                correlated_alert_count: row.correlated_alert_count.max(0) as u32,
            }
        })
        .collect();
    let Some((index, score)) = best_match(&new_alert, &candidates, config) else {
        return Ok(None);
    };
    let incident_id = rows[index].id;
    let command = IncidentCommand::CorrelateAlert {
        user_id: user_id.to_owned(),
        alert: info.clone(),
        correlation: Correlation {
            strategy: score.strategy.as_str().to_owned(),
            score: score.total.clamp(0.0, 1.0),
            details: score.to_details(),
        },
        max_correlated_alerts: config.max_alerts_per_incident() as usize,
        at: Utc::now(),
    };
    match execute(&state.events.incidents, &incident_id.to_string(), command, ACTOR).await {
        Ok(()) => Ok(Some(incident_id)),
        // It closed or filled up since it was read: the alert opens an incident of its own.
        Err(AggregateError::UserError(IncidentError::NotCorrelatable(_))) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

async fn open(
    state: &AppState,
    tx: &mut Transaction<'_, Postgres>,
    user_id: &str,
    alert: &NormalizedAlert,
    info: AlertInfo,
) -> Result<Uuid, AppError> {
    let incident_id = Uuid::new_v4();
    let command = IncidentCommand::Open {
        incident_id,
        user_id: user_id.to_owned(),
        alert: info,
        at: Utc::now(),
    };
    execute(&state.events.incidents, &incident_id.to_string(), command, ACTOR).await?;
    let vector = state.vectors.embed(&alert.title);
    state
        .vectors
        .upsert(
            &mut **tx,
            vector_store::INCIDENT,
            &incident_id.to_string(),
            user_id,
            &alert.title,
            &vector,
        )
        .await?;
    Ok(incident_id)
}

fn alert_info(alert_id: i64, alert: &NormalizedAlert) -> AlertInfo {
    let mut metadata = serde_json::Map::new();
    metadata.insert("labels".into(), serde_json::Value::Object(alert.labels.clone()));
    for (name, value) in [
        ("detail", &alert.detail),
        ("environment", &alert.environment),
        ("dashboardUrl", &alert.dashboard_url),
        ("panelUrl", &alert.panel_url),
        ("ruleName", &alert.rule_name),
    ] {
        if let Some(value) = value {
            metadata.insert(name.into(), value.clone().into());
        }
    }
    metadata.insert("state".into(), alert.state.clone().into());
    metadata.insert("kind".into(), alert.kind.as_str().into());
    AlertInfo {
        source_type: alert.source.as_str().to_owned(),
        source_alert_id: alert_id,
        alert_key: alert.key.clone(),
        title: alert.title.clone(),
        service: alert.service.clone(),
        environment: alert.environment.clone(),
        severity: alert.severity.as_deref().map(|severity| truncate(severity, 20)),
        fired_at: alert.fired_at,
        source_url: alert.source_url.clone(),
        metadata: serde_json::Value::Object(metadata),
    }
}

fn event_kind(kind: AlertKind) -> EventKind {
    match kind {
        AlertKind::Alert => EventKind::Alert,
        AlertKind::Deployment => EventKind::Deployment,
    }
}

/// Cuts to at most `max` characters (for the spec's bounded columns).
fn truncate(value: &str, max: usize) -> String {
    value.chars().take(max).collect()
}

/// Correlation settings from the service configuration.
pub fn correlation_config(config: &crate::Config) -> anyhow::Result<CorrelationConfig> {
    let weights = &config.correlation_weights;
    CorrelationConfig::new(
        chrono::Duration::seconds(config.correlation_window_secs),
        chrono::Duration::seconds(config.deployment_correlation_window_secs),
        vigil_aggregates::correlation::Weights::new(weights[0], weights[1], weights[2])
            .map_err(|error| anyhow::anyhow!("CORRELATION_WEIGHTS: {error}"))?,
        config.correlation_threshold,
        config.correlation_max_alerts,
    )
    .map_err(|error| anyhow::anyhow!("correlation settings: {error}"))
}

/// In-process admission to alert placement: one placement at a time per user (a mutex per user,
/// made on first use) and a bound on placements at once across users.
pub struct PlacementGate {
    locks: dashmap::DashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>,
    placements: tokio::sync::Semaphore,
}

impl PlacementGate {
    /// Each placement needs two connections at its peak; leave a third of the pool to tails,
    /// workers and the rest of the API.
    pub fn for_pool(max_connections: u32) -> Self {
        let placements = (max_connections as usize / 3).max(1);
        Self {
            locks: Default::default(),
            placements: tokio::sync::Semaphore::new(placements),
        }
    }

    pub async fn admit(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.placements
            .acquire()
            .await
            .expect("the placement gate is never closed")
    }

    pub async fn lock_user(&self, user_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let mutex = self.locks.entry(user_id.to_owned()).or_default().clone();
        mutex.lock_owned().await
    }
}
