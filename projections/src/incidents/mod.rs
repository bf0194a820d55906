//! `incidents`: the read model of the Incident aggregate, and the queries the incident API and
//! the correlator serve from it (the alerts that joined an incident are read from its events).

mod changes;
mod folded;
mod queries;
mod rows;

use std::collections::HashMap;

use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::{Incident, IncidentEvent};

pub use changes::{linked_changes, LinkedChange};
use folded::{write_folded, Columns, FoldedRun};
pub use queries::*;
pub use rows::RowWrites;
use rows::{write_rows, AlertsJoined, Opening};

use crate::{ProjectionError, ReadModel};

pub struct IncidentsReadModel;

impl ReadModel<Incident> for IncidentsReadModel {
    const NAME: &'static str = "incidents";
    const PROJECTED_BY_WRITERS: bool = true;
    const TABLES: &'static [&'static str] = &["incidents", "flapping_keys"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<HashMap<String, i64>, ProjectionError> {
        crate::projector::versions_by_uuid(
            conn,
            "SELECT wanted.id, found.version FROM unnest($1::uuid[]) AS wanted(id)
             CROSS JOIN LATERAL (SELECT version FROM incidents WHERE id = wanted.id LIMIT 1) found",
            aggregate_ids,
        )
        .await
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
            E::IncidentOpened { .. } => {
                let writes = RowWrites {
                    openings: Opening::new(event, None, Columns::default()).into_iter().collect(),
                    joined: Vec::new(),
                };
                write_rows(conn, &writes).await?;
            }
            E::AlertCorrelated { alert, filled, .. } => {
                write_rows(conn, &RowWrites::joined(AlertsJoined::new(event, vec![alert], *filled))).await?;
            }
            E::IncidentAbsorbed { alerts, .. } => {
                let joined = AlertsJoined::new(event, alerts.iter().collect(), false);
                write_rows(conn, &RowWrites::joined(joined)).await?;
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
            E::AnalysisStatusChanged {
                status, analyzed_at, ..
            } => {
                sqlx::query(&set("aurora_status = $4, analyzed_at = COALESCE(analyzed_at, $5)"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .bind(analyzed_at)
                    .execute(conn)
                    .await?;
            }
            E::VerdictRecorded { conclusion, .. } => {
                sqlx::query(&set("analysis_verdict = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(Json(conclusion))
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
                // A merged incident takes no more alerts, whatever its status becomes (its alerts
                // are the target's): it leaves the correlation candidates for good.
                sqlx::query(&set(
                    "status = 'merged', merged_into_incident_id = $4, takes_alerts = false",
                ))
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
            E::AlertSplitOff { .. } => split_off(conn, event).await?,
            E::FlappingDetected {
                source_type, alert_key, ..
            } => {
                sqlx::query(&format!(
                    "WITH flagged AS ({} RETURNING user_id)
                     INSERT INTO flapping_keys (user_id, source_type, alert_key, incident_id, detected_at)
                     SELECT user_id, $4, $5, $1, $2 FROM flagged
                     ON CONFLICT (user_id, source_type, alert_key)
                         DO UPDATE SET incident_id = EXCLUDED.incident_id, detected_at = EXCLUDED.detected_at",
                    set("flapping = true")
                ))
                .bind(id)
                .bind(at)
                .bind(version)
                .bind(source_type)
                .bind(alert_key)
                .execute(conn)
                .await?;
            }
            E::AlertResolved { .. }
            | E::FlapRecorded { .. }
            | E::ResolutionRequested { .. }
            | E::IncidentTouched { .. }
            | E::AlertBridged { .. } => {
                sqlx::query(touch).bind(id).bind(at).bind(version).execute(conn).await?;
            }
        }
        Ok(())
    }

    /// Runs of correlated alerts and recoveries (an alert storm placed in one batch) are written
    /// together.
    async fn apply_all(
        &self,
        conn: &mut PgConnection,
        events: &[&EventEnvelope<Incident>],
    ) -> Result<(), ProjectionError> {
        self.apply_runs(conn, &[events.to_vec()]).await
    }

    /// Across incidents, in one statement: the rows of new incidents (with the alerts that joined
    /// them in the same run folded in) and the alerts that joined existing ones; then the rest of
    /// each run folded into one update ([`FoldedRun`]), all in two more statements (a run that
    /// splits an alert off goes event by event).
    async fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<Incident>>],
    ) -> Result<(), ProjectionError> {
        let (writes, rest) = RowWrites::split(runs);
        write_rows(conn, &writes).await?;
        let mut folded = Vec::new();
        for run in rest {
            match FoldedRun::of(run) {
                Some(fold) => folded.push(fold),
                None => {
                    for event in run {
                        self.apply(conn, event).await?;
                    }
                }
            }
        }
        write_folded(conn, &folded).await
    }

    async fn truncate(&self, conn: &mut PgConnection) -> Result<(), ProjectionError> {
        // CASCADE also empties the analysis tables that reference incidents; a full `vigil
        // replay` rebuilds them after this projection.
        sqlx::query("TRUNCATE incidents, flapping_keys CASCADE")
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// An alert left the incident (a user's split): its count, services, evidence and last alert
/// time are worked out again from the alerts that stay, read from its events up to this one
/// (a split is rare, and the row keeps no list of its alerts' evidence to subtract from). Its
/// severity and title are its opening alert's, which never leaves.
async fn split_off(conn: &mut PgConnection, event: &EventEnvelope<Incident>) -> Result<(), ProjectionError> {
    let id = Uuid::parse_str(&event.aggregate_id).unwrap_or_default();
    let history: Vec<Json<IncidentEvent>> = sqlx::query_scalar(
        "SELECT payload FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence <= $3
         ORDER BY sequence",
    )
    .bind(<Incident as cqrs_es::Aggregate>::TYPE)
    .bind(&event.aggregate_id)
    .bind(event.sequence as i64)
    .fetch_all(&mut *conn)
    .await?;
    let alerts = vigil_aggregates::incident::alerts_in(history.into_iter().map(|event| event.0));
    let services: Vec<&str> = alerts.iter().filter_map(|alert| alert.service.as_deref()).collect();
    let evidence: Vec<String> = alerts.iter().flat_map(|alert| alert.evidence.keys()).collect();
    let last_alert_at = alerts.iter().map(|alert| alert.fired_at).max();
    sqlx::query(
        "UPDATE incidents SET correlated_alert_count = $4,
             affected_services = ARRAY(SELECT DISTINCT unnest($5::text[]) ORDER BY 1),
             evidence = (ARRAY(SELECT DISTINCT k COLLATE \"C\" FROM unnest($6::text[]) AS e(k) ORDER BY 1))[1:4096],
             last_alert_at = COALESCE($7, started_at),
             updated_at = $2, version = $3
         WHERE id = $1",
    )
    .bind(id)
    .bind(event.payload.at())
    .bind(event.sequence as i64)
    .bind(alerts.len().saturating_sub(1) as i32)
    .bind(&services)
    .bind(&evidence)
    .bind(last_alert_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// The incident as it stood at `as_of`: its events recorded up to then, applied by this very
/// projection to a scratch copy of its table (a temporary table shadows the real one inside one
/// transaction, which is rolled back), with the alerts that had joined it by then. `None` when
/// the incident did not exist yet.
pub async fn as_of(
    db: &sqlx::PgPool,
    user_id: &str,
    id: Uuid,
    as_of: chrono::DateTime<chrono::Utc>,
) -> Result<Option<(IncidentRow, Vec<CorrelatedAlertRow>)>, ProjectionError> {
    let mut tx = db.begin().await?;
    crate::projector::project_as_of(&mut tx, &IncidentsReadModel, "incidents", &[id.to_string()], as_of).await?;
    let mut incident = find_incident(&mut *tx, user_id, id).await?;
    if let Some(incident) = &mut incident {
        // The merge target is not in the scratch table; its title never changes, so the live
        // row's is the one it had then.
        if let Some(target) = incident.merged_into_incident_id {
            incident.merged_into_title = sqlx::query_scalar("SELECT alert_title FROM public.incidents WHERE id = $1")
                .bind(target)
                .fetch_optional(&mut *tx)
                .await?
                .flatten();
        }
    }
    let correlated = correlated_alerts_recorded_by(&mut *tx, id, Some(as_of)).await?;
    tx.rollback().await?;
    Ok(incident.map(|incident| (incident, correlated)))
}
