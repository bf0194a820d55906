//! `incidents`: the read model of the Incident aggregate, and the queries the incident API and
//! the correlator serve from it (the alerts that joined an incident are read from its events).

mod queries;

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::{AlertInfo, Incident, IncidentEvent};

pub use queries::*;

use crate::{ProjectionError, ReadModel};

pub struct IncidentsReadModel;

impl ReadModel<Incident> for IncidentsReadModel {
    const NAME: &'static str = "incidents";
    const PROJECTED_BY_WRITERS: bool = true;

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, i64>, ProjectionError> {
        crate::projector::versions_by_uuid(
            conn,
            "SELECT id, version FROM incidents WHERE id = ANY($1::uuid[])",
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
            E::IncidentOpened { .. } => insert_opened(conn, &[event]).await?,
            E::AlertCorrelated { alert, filled, .. } => {
                add_alerts(conn, &[AlertsJoined::new(event, vec![alert], *filled)]).await?;
            }
            E::IncidentAbsorbed { alerts, .. } => {
                add_alerts(conn, &[AlertsJoined::new(event, alerts.iter().collect(), false)]).await?;
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
        self.apply_runs(conn, &[events.to_vec()]).await
    }

    /// Across incidents: every opening event in one insert, then every run of correlated alerts
    /// that follows in one statement; the rest incident by incident, in order.
    async fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<Incident>>],
    ) -> Result<(), ProjectionError> {
        let mut rest: Vec<&[&EventEnvelope<Incident>]> = runs.iter().map(Vec::as_slice).collect();
        let mut opened = Vec::new();
        for run in &mut rest {
            if let Some((first, after)) = run.split_first() {
                if matches!(first.payload, IncidentEvent::IncidentOpened { .. }) {
                    opened.push(*first);
                    *run = after;
                }
            }
        }
        insert_opened(conn, &opened).await?;
        let mut joined = Vec::new();
        for run in &mut rest {
            let correlated = run
                .iter()
                .take_while(|event| matches!(event.payload, IncidentEvent::AlertCorrelated { .. }))
                .count();
            if correlated == 0 {
                continue;
            }
            let (alerts, after) = run.split_at(correlated);
            let last = alerts[correlated - 1];
            let filled = alerts
                .iter()
                .any(|event| matches!(event.payload, IncidentEvent::AlertCorrelated { filled: true, .. }));
            let alerts = alerts
                .iter()
                .filter_map(|event| match &event.payload {
                    IncidentEvent::AlertCorrelated { alert, .. } => Some(alert),
                    _ => None,
                })
                .collect();
            joined.push(AlertsJoined::new(last, alerts, filled));
            *run = after;
        }
        add_alerts(conn, &joined).await?;
        for run in rest {
            for event in run {
                self.apply(conn, event).await?;
            }
        }
        Ok(())
    }

    async fn truncate(&self, conn: &mut PgConnection) -> Result<(), ProjectionError> {
        // CASCADE also empties the analysis tables that reference incidents; a full `vigil
        // replay` rebuilds them after this projection.
        sqlx::query("TRUNCATE incidents CASCADE").execute(conn).await?;
        Ok(())
    }
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
    sqlx::query("CREATE TEMPORARY TABLE incidents (LIKE public.incidents INCLUDING DEFAULTS) ON COMMIT DROP")
        .execute(&mut *tx)
        .await?;
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
    let correlated = correlated_alerts_recorded_by(&mut *tx, id, Some(as_of)).await?;
    tx.rollback().await?;
    Ok(incident.map(|incident| (incident, correlated)))
}

/// New incidents' rows, from their opening events.
async fn insert_opened(conn: &mut PgConnection, events: &[&EventEnvelope<Incident>]) -> Result<(), ProjectionError> {
    let opened: Vec<(i64, &Uuid, &str, &AlertInfo, DateTime<Utc>)> = events
        .iter()
        .filter_map(|event| match &event.payload {
            IncidentEvent::IncidentOpened {
                incident_id,
                user_id,
                alert,
                at,
            } => Some((event.sequence as i64, incident_id, user_id.as_str(), alert, *at)),
            _ => None,
        })
        .collect();
    if opened.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&AlertInfo) -> Option<&str>| -> Vec<Option<&str>> { opened.iter().map(|o| f(o.3)).collect() };
    sqlx::query(
        "INSERT INTO incidents (id, user_id, source_type, source_alert_id, severity, alert_title, alert_service,
             alert_environment, alert_source_url, alert_metadata, started_at, last_alert_at, created_at,
             updated_at, affected_services, version)
         SELECT id, user_id, source_type, source_alert_id, severity, alert_title, alert_service, alert_environment,
             alert_source_url, alert_metadata, fired_at, fired_at, at, at,
             CASE WHEN alert_service IS NULL THEN '{}'::text[] ELSE ARRAY[alert_service] END, version
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[],
             $9::text[], $10::jsonb[], $11::timestamptz[], $12::timestamptz[], $13::bigint[])
             AS o(id, user_id, source_type, source_alert_id, severity, alert_title, alert_service, alert_environment,
                  alert_source_url, alert_metadata, fired_at, at, version)",
    )
    .bind(opened.iter().map(|o| *o.1).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.2).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.3.source_type.as_str()).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.3.source_alert_id).collect::<Vec<_>>())
    .bind(column(|a| a.severity.as_deref()))
    .bind(opened.iter().map(|o| o.3.title.as_str()).collect::<Vec<_>>())
    .bind(column(|a| a.service.as_deref()))
    .bind(column(|a| a.environment.as_deref()))
    .bind(column(|a| a.source_url.as_deref()))
    .bind(opened.iter().map(|o| Json(&o.3.metadata)).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.3.fired_at).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.4).collect::<Vec<_>>())
    .bind(opened.iter().map(|o| o.0).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// Alerts that joined one incident, up to the event at `version`, recorded at `at`.
struct AlertsJoined<'a> {
    incident_id: Uuid,
    version: i64,
    at: DateTime<Utc>,
    alerts: Vec<&'a AlertInfo>,
    /// One of them filled the incident: it is no longer a correlation candidate.
    filled: bool,
}

impl<'a> AlertsJoined<'a> {
    fn new(last: &EventEnvelope<Incident>, alerts: Vec<&'a AlertInfo>, filled: bool) -> Self {
        Self {
            incident_id: Uuid::parse_str(&last.aggregate_id).unwrap_or_default(),
            version: last.sequence as i64,
            at: last.payload.at(),
            alerts,
            filled,
        }
    }
}

/// Folds alerts that joined incidents into the incidents' counts, services and last alert
/// times: one statement for any number of incidents. The alerts themselves are read from the
/// incidents' events ([`correlated_alerts`]).
async fn add_alerts(conn: &mut PgConnection, joined: &[AlertsJoined<'_>]) -> Result<(), ProjectionError> {
    if joined.is_empty() {
        return Ok(());
    }
    fn services<'a>(group: &AlertsJoined<'a>) -> Vec<&'a str> {
        group
            .alerts
            .iter()
            .filter_map(|alert| alert.service.as_deref())
            .collect()
    }
    sqlx::query(
        "UPDATE incidents SET
             correlated_alert_count = correlated_alert_count + u.joined,
             affected_services = ARRAY(
                 SELECT DISTINCT unnest(affected_services || ARRAY(SELECT jsonb_array_elements_text(u.services)))
                 ORDER BY 1),
             last_alert_at = GREATEST(last_alert_at, COALESCE(u.latest, last_alert_at)),
             takes_alerts = takes_alerts AND NOT u.filled,
             updated_at = u.at, version = u.version
         FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::int[], $5::jsonb[], $6::timestamptz[],
                 $7::bool[])
             AS u(id, at, version, joined, services, latest, filled)
         WHERE incidents.id = u.id",
    )
    .bind(joined.iter().map(|group| group.incident_id).collect::<Vec<_>>())
    .bind(joined.iter().map(|group| group.at).collect::<Vec<_>>())
    .bind(joined.iter().map(|group| group.version).collect::<Vec<_>>())
    .bind(joined.iter().map(|group| group.alerts.len() as i32).collect::<Vec<_>>())
    .bind(joined.iter().map(|group| Json(services(group))).collect::<Vec<_>>())
    .bind(
        joined
            .iter()
            .map(|group| group.alerts.iter().map(|alert| alert.fired_at).max())
            .collect::<Vec<_>>(),
    )
    .bind(joined.iter().map(|group| group.filled).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}
