//! `incidents` and `correlated_alerts`: the read model of the Incident aggregate, and the
//! queries the incident API and the correlator serve from it.

mod queries;

use cqrs_es::EventEnvelope;
use serde_json::json;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::{AlertInfo, Correlation, Incident, IncidentEvent};

pub use queries::*;

use crate::{ProjectionError, ReadModel};

pub struct IncidentsReadModel;

impl ReadModel<Incident> for IncidentsReadModel {
    const NAME: &'static str = "incidents";

    async fn version(&self, conn: &mut PgConnection, aggregate_id: &str) -> Result<i64, ProjectionError> {
        let Ok(id) = Uuid::parse_str(aggregate_id) else {
            return Ok(0);
        };
        let version = sqlx::query_scalar("SELECT version FROM incidents WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?;
        Ok(version.unwrap_or(0))
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<Incident>) -> Result<(), ProjectionError> {
        use IncidentEvent as E;
        let id = Uuid::parse_str(&event.aggregate_id).unwrap_or_default();
        let version = event.sequence as i64;
        let at = event.payload.at();
        let set = |assignments: &str| {
            format!("UPDATE incidents SET {assignments}, updated_at = $2, version = $3 WHERE id = $1")
        };
        let touch = "UPDATE incidents SET updated_at = $2, version = $3 WHERE id = $1";
        match &event.payload {
            E::IncidentOpened {
                incident_id,
                user_id,
                alert,
                at,
            } => {
                sqlx::query(
                    "INSERT INTO incidents (id, user_id, source_type, source_alert_id, severity, alert_title, alert_service,
                         alert_environment, alert_source_url, alert_metadata, started_at, last_alert_at, created_at,
                         updated_at, affected_services, version)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $12, $13, $14)",
                )
                .bind(incident_id)
                .bind(user_id)
                .bind(&alert.source_type)
                .bind(alert.source_alert_id)
                .bind(&alert.severity)
                .bind(&alert.title)
                .bind(&alert.service)
                .bind(&alert.environment)
                .bind(&alert.source_url)
                .bind(Json(&alert.metadata))
                .bind(alert.fired_at)
                .bind(at)
                .bind(alert.service.iter().cloned().collect::<Vec<_>>())
                .bind(version)
                .execute(conn)
                .await?;
            }
            E::AlertCorrelated { alert, correlation, at } => {
                add_alerts(conn, id, version, *at, &[(alert, correlation.clone(), *at)]).await?;
            }
            E::IncidentAbsorbed {
                source_incident_id,
                alerts,
                at,
            } => {
                let manual = Correlation {
                    strategy: "manual".into(),
                    score: 1.0,
                    details: json!({ "merged_from_incident_id": source_incident_id }),
                };
                let alerts: Vec<_> = alerts.iter().map(|alert| (alert, manual.clone(), *at)).collect();
                add_alerts(conn, id, version, *at, &alerts).await?;
            }
            E::StatusChanged {
                status, analyzed_at, ..
            } => {
                sqlx::query(&set("status = $4, analyzed_at = COALESCE(analyzed_at, $5)"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .bind(analyzed_at)
                    .execute(conn)
                    .await?;
            }
            E::AnalysisStatusChanged { status, .. } => {
                sqlx::query(&set("aurora_status = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .execute(conn)
                    .await?;
            }
            E::SummaryWritten { summary, .. } => {
                sqlx::query(&set("aurora_summary = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(summary)
                    .execute(conn)
                    .await?;
            }
            E::ActiveTabChanged { tab, .. } => {
                sqlx::query(&set("active_tab = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(tab.as_str())
                    .execute(conn)
                    .await?;
            }
            E::MergedInto { target_incident_id, .. } => {
                sqlx::query(&set("status = 'merged', merged_into_incident_id = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(target_incident_id)
                    .execute(conn)
                    .await?;
            }
            E::ChatSessionLinked { session_id, .. } => {
                sqlx::query(&set("aurora_chat_session_id = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(session_id)
                    .execute(conn)
                    .await?;
            }
            E::AlertResolved { .. } | E::ResolutionRequested { .. } | E::IncidentTouched { .. } => {
                sqlx::query(touch).bind(id).bind(at).bind(version).execute(conn).await?;
            }
        }
        Ok(())
    }

    /// Runs of correlated alerts (an alert storm placed in one batch) are written together.
    async fn apply_all(
        &self,
        conn: &mut PgConnection,
        events: &[&EventEnvelope<Incident>],
    ) -> Result<(), ProjectionError> {
        let mut rest = events;
        while let Some(first) = rest.first() {
            let run = rest
                .iter()
                .take_while(|event| matches!(event.payload, IncidentEvent::AlertCorrelated { .. }))
                .count();
            if run < 2 {
                self.apply(conn, first).await?;
                rest = &rest[1..];
                continue;
            }
            let (correlated, after) = rest.split_at(run);
            let alerts: Vec<_> = correlated
                .iter()
                .filter_map(|event| match &event.payload {
                    IncidentEvent::AlertCorrelated { alert, correlation, at } => {
                        Some((alert, correlation.clone(), *at))
                    }
                    _ => None,
                })
                .collect();
            let last = correlated[run - 1];
            let id = Uuid::parse_str(&last.aggregate_id).unwrap_or_default();
            add_alerts(conn, id, last.sequence as i64, last.payload.at(), &alerts).await?;
            rest = after;
        }
        Ok(())
    }

    async fn truncate(&self, conn: &mut PgConnection) -> Result<(), ProjectionError> {
        // CASCADE also empties the analysis tables that reference incidents; a full `vigil
        // replay` rebuilds them after this projection.
        sqlx::query("TRUNCATE incidents, correlated_alerts CASCADE")
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// The incident as it stood at `as_of`: its events recorded up to then, applied by this very
/// projection to scratch copies of its tables (temporary tables shadow the real ones inside one
/// transaction, which is rolled back). `None` when the incident did not exist yet.
pub async fn as_of(
    db: &sqlx::PgPool,
    user_id: &str,
    id: Uuid,
    as_of: chrono::DateTime<chrono::Utc>,
) -> Result<Option<(IncidentRow, Vec<CorrelatedAlertRow>)>, ProjectionError> {
    let mut tx = db.begin().await?;
    for table in ["incidents", "correlated_alerts"] {
        sqlx::query(&format!(
            "CREATE TEMPORARY TABLE {table} (LIKE public.{table} INCLUDING DEFAULTS) ON COMMIT DROP"
        ))
        .execute(&mut *tx)
        .await?;
    }
    let events: Vec<crate::StoredEvent> = sqlx::query_as(&format!(
        "{} WHERE aggregate_type = 'Incident' AND aggregate_id = $1 AND recorded_at <= $2 ORDER BY sequence",
        crate::StoredEvent::SELECT
    ))
    .bind(id.to_string())
    .bind(as_of)
    .fetch_all(&mut *tx)
    .await?;
    for event in &events {
        IncidentsReadModel
            .apply(&mut tx, &event.envelope::<Incident>()?)
            .await?;
    }
    let incident = find_incident(&mut *tx, user_id, id).await?;
    let correlated = correlated_alerts(&mut *tx, id).await?;
    tx.rollback().await?;
    Ok(incident.map(|incident| (incident, correlated)))
}

/// Records correlated alerts (each with the time it was received) and folds them into the
/// incident's count, services and last alert time.
async fn add_alerts(
    conn: &mut PgConnection,
    incident_id: Uuid,
    version: i64,
    at: chrono::DateTime<chrono::Utc>,
    alerts: &[(&AlertInfo, Correlation, chrono::DateTime<chrono::Utc>)],
) -> Result<(), ProjectionError> {
    sqlx::query(
        "INSERT INTO correlated_alerts (user_id, incident_id, source_type, source_alert_id, alert_title, alert_service,
             alert_severity, correlation_strategy, correlation_score, correlation_details, alert_metadata, fired_at,
             received_at)
         SELECT i.user_id, i.id, a.source_type, a.source_alert_id, a.alert_title, a.alert_service, a.alert_severity,
             a.strategy, a.score, a.details, a.metadata, a.fired_at, a.received_at
         FROM incidents i,
             unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::float8[],
                 $9::jsonb[], $10::jsonb[], $11::timestamptz[], $12::timestamptz[])
             WITH ORDINALITY AS a(source_type, source_alert_id, alert_title, alert_service, alert_severity, strategy,
                 score, details, metadata, fired_at, received_at, ordinality)
         WHERE i.id = $1
         ORDER BY a.ordinality
         ON CONFLICT (incident_id, source_type, source_alert_id) DO NOTHING",
    )
    .bind(incident_id)
    .bind(
        alerts
            .iter()
            .map(|(a, _, _)| a.source_type.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(alerts.iter().map(|(a, _, _)| a.source_alert_id).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(a, _, _)| a.title.as_str()).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(a, _, _)| a.service.as_deref()).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(a, _, _)| a.severity.as_deref()).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(_, c, _)| c.strategy.as_str()).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(_, c, _)| c.score).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(_, c, _)| Json(&c.details)).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(a, _, _)| Json(&a.metadata)).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(a, _, _)| a.fired_at).collect::<Vec<_>>())
    .bind(alerts.iter().map(|(_, _, received)| *received).collect::<Vec<_>>())
    .execute(&mut *conn)
    .await?;
    let services: Vec<String> = alerts
        .iter()
        .filter_map(|(alert, _, _)| alert.service.clone())
        .collect();
    let latest = alerts.iter().map(|(alert, _, _)| alert.fired_at).max();
    sqlx::query(
        "UPDATE incidents SET
             correlated_alert_count = correlated_alert_count + $4,
             affected_services = ARRAY(SELECT DISTINCT unnest(affected_services || $5::text[]) ORDER BY 1),
             last_alert_at = GREATEST(last_alert_at, COALESCE($6, last_alert_at)),
             updated_at = $2, version = $3
         WHERE id = $1",
    )
    .bind(incident_id)
    .bind(at)
    .bind(version)
    .bind(alerts.len() as i32)
    .bind(services)
    .bind(latest)
    .execute(conn)
    .await?;
    Ok(())
}
