use std::{collections::HashMap, sync::LazyLock};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{types::Json, PgConnection, PgPool};

use crate::{projector::recorded_by, ProjectionError};
use uuid::Uuid;
use vigil_aggregates::incident::{Correlation, Incident, IncidentEvent};

/// An incident as its read row holds it, with the title of the incident it was merged into.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct IncidentRow {
    pub id: Uuid,
    pub user_id: String,
    pub source_type: String,
    pub source_alert_id: i64,
    pub status: String,
    pub severity: Option<String>,
    pub alert_title: Option<String>,
    pub alert_service: Option<String>,
    pub alert_environment: Option<String>,
    pub alert_source_url: Option<String>,
    pub alert_metadata: Json<Value>,
    pub aurora_status: String,
    pub aurora_summary: Option<String>,
    pub aurora_chat_session_id: Option<Uuid>,
    pub started_at: DateTime<Utc>,
    pub last_alert_at: DateTime<Utc>,
    pub analyzed_at: Option<DateTime<Utc>>,
    pub active_tab: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub merged_into_incident_id: Option<Uuid>,
    pub merged_into_title: Option<String>,
    pub correlated_alert_count: i32,
    pub affected_services: Vec<String>,
    pub version: i64,
    /// The analysis's verdict (`ledger::Conclusion` as JSON), once it reached one.
    pub analysis_verdict: Option<Json<Value>>,
    /// The earlier incident its opening alert fired in (resolved or merged since).
    pub previous_incident_id: Option<Uuid>,
    /// One of its alert keys was found flapping.
    pub flapping: bool,
}

const INCIDENT_COLUMNS: &str = "i.id, i.user_id, i.source_type, i.source_alert_id, i.status, i.severity, i.alert_title,
    i.alert_service, i.alert_environment, i.alert_source_url, i.alert_metadata, i.aurora_status, i.aurora_summary,
    i.aurora_chat_session_id, i.started_at, i.last_alert_at, i.analyzed_at, i.active_tab, i.created_at, i.updated_at,
    i.merged_into_incident_id, target.alert_title AS merged_into_title, i.correlated_alert_count, i.affected_services,
    i.version, i.analysis_verdict, i.previous_incident_id, i.flapping";

/// Spec: at most 100 incidents, newest `started_at` first, merged ones left out.
pub const INCIDENT_LIST_LIMIT: i64 = 100;

pub async fn list_incidents(db: &PgPool, user_id: &str) -> sqlx::Result<Vec<IncidentRow>> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents i LEFT JOIN incidents target ON target.id = i.merged_into_incident_id
         WHERE i.user_id = $1 AND i.status <> 'merged'
         ORDER BY i.started_at DESC, i.id LIMIT $2"
    ))
    .bind(user_id)
    .bind(INCIDENT_LIST_LIMIT)
    .fetch_all(db)
    .await
}

/// One incident of the user's. Read by primary key alone, the owner checked on the row: with
/// `user_id = $2` in the statement, a generic plan made while the table was young served it from
/// `incidents_user_started`, reading every incident of the user (kept as the table grew).
pub async fn find_incident(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    id: Uuid,
) -> sqlx::Result<Option<IncidentRow>> {
    let row: Option<IncidentRow> = sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents i LEFT JOIN incidents target ON target.id = i.merged_into_incident_id
         WHERE i.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.filter(|row| row.user_id == user_id))
}

/// The user's incidents among `ids`, in the order of `ids` (ids that are not the user's are left out).
pub async fn find_incidents(db: &PgPool, user_id: &str, ids: &[Uuid]) -> sqlx::Result<Vec<IncidentRow>> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM unnest($1::uuid[]) WITH ORDINALITY AS wanted(id, position)
         JOIN incidents i ON i.id = wanted.id
         LEFT JOIN incidents target ON target.id = i.merged_into_incident_id
         WHERE i.user_id = $2
         ORDER BY wanted.position"
    ))
    .bind(ids)
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// Every incident row, in id order (for comparing a replayed table with the live one).
pub async fn all_incidents(db: &PgPool) -> sqlx::Result<Vec<IncidentRow>> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents i LEFT JOIN incidents target ON target.id = i.merged_into_incident_id
         ORDER BY i.id"
    ))
    .fetch_all(db)
    .await
}

/// An alert that joined an incident after the one that opened it (correlated, or brought by a
/// merge). Not a table of its own: see [`correlated_alerts`].
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelatedAlertRow {
    /// Derived from the incident and the alert, so the same on every read.
    pub id: Uuid,
    pub incident_id: Uuid,
    pub source_type: String,
    pub source_alert_id: i64,
    pub alert_title: Option<String>,
    pub alert_service: Option<String>,
    pub alert_severity: Option<String>,
    pub correlation_strategy: String,
    pub correlation_score: f64,
    pub correlation_details: Json<Value>,
    pub alert_metadata: Json<Value>,
    pub fired_at: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
}

/// The alerts that joined an incident, oldest first: read from the incident's own stream (its
/// `AlertCorrelated` and `IncidentAbsorbed` events, through the event store's primary key)
/// rather than from a table of their own. An incident holds a bounded number of them, and a
/// table would cost ingestion a row and two index entries for every alert it correlates.
pub async fn correlated_alerts(
    db: impl sqlx::PgExecutor<'_>,
    incident_id: Uuid,
) -> sqlx::Result<Vec<CorrelatedAlertRow>> {
    correlated_alerts_recorded_by(db, incident_id, None).await
}

/// [`correlated_alerts`] as of `as_of`: from the events of the transactions recorded by then
/// (all of them when `None`), as [`super::as_of`] folds the incident.
pub async fn correlated_alerts_recorded_by(
    db: impl sqlx::PgExecutor<'_>,
    incident_id: Uuid,
    as_of: Option<DateTime<Utc>>,
) -> sqlx::Result<Vec<CorrelatedAlertRow>> {
    // Every incident detail reads this: the statement is put together once.
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT payload FROM events
             WHERE aggregate_type = $1 AND aggregate_id = $2
               AND event_type IN ('AlertCorrelated', 'IncidentAbsorbed', 'AlertSplitOff')
               AND ($3::timestamptz IS NULL OR ({}))
             ORDER BY sequence",
            recorded_by("= $2")
        )
    });
    let events: Vec<Json<IncidentEvent>> = sqlx::query_scalar(&STATEMENT)
        .bind(<Incident as cqrs_es::Aggregate>::TYPE)
        .bind(incident_id.to_string())
        .bind(as_of)
        .fetch_all(db)
        .await?;
    Ok(joined_alerts(incident_id, events.into_iter().map(|event| event.0)))
}

/// The correlated alerts an incident's events describe, ordered by the time each joined, then
/// by alert id; an alert is listed once however often it joined.
pub fn joined_alerts(incident_id: Uuid, events: impl IntoIterator<Item = IncidentEvent>) -> Vec<CorrelatedAlertRow> {
    let mut rows: Vec<CorrelatedAlertRow> = Vec::new();
    let mut listed = std::collections::HashSet::new();
    for event in events {
        let (alerts, correlation, at) = match event {
            IncidentEvent::AlertCorrelated {
                alert, correlation, at, ..
            } => (vec![alert], correlation, at),
            IncidentEvent::IncidentAbsorbed {
                source_incident_id,
                alerts,
                at,
            } => (alerts, merged_from(source_incident_id), at),
            IncidentEvent::AlertSplitOff {
                source_type,
                source_alert_id,
                ..
            } => {
                let left = (source_type, source_alert_id);
                listed.remove(&left);
                rows.retain(|row| (&row.source_type, row.source_alert_id) != (&left.0, left.1));
                continue;
            }
            _ => continue,
        };
        for alert in alerts {
            if !listed.insert((alert.source_type.clone(), alert.source_alert_id)) {
                continue;
            }
            rows.push(CorrelatedAlertRow {
                id: correlated_alert_id(incident_id, &alert.source_type, alert.source_alert_id),
                incident_id,
                source_type: alert.source_type,
                source_alert_id: alert.source_alert_id,
                alert_title: Some(alert.title),
                alert_service: alert.service,
                alert_severity: alert.severity,
                correlation_strategy: correlation.strategy.clone(),
                correlation_score: correlation.score,
                correlation_details: Json(correlation.details.clone()),
                alert_metadata: Json(alert.metadata),
                fired_at: Some(alert.fired_at),
                received_at: at,
            });
        }
    }
    rows.sort_by_key(|row| (row.received_at, row.source_alert_id));
    rows
}

/// The id an incident's alert is shown with (`correlatedAlerts[].id`): derived from the incident
/// and the alert, so the same on every read and different in every incident.
pub fn correlated_alert_id(incident_id: Uuid, source_type: &str, source_alert_id: i64) -> Uuid {
    Uuid::new_v5(&incident_id, format!("{source_type}/{source_alert_id}").as_bytes())
}

/// How the alerts of a merged incident joined its target.
fn merged_from(source_incident_id: Uuid) -> Correlation {
    Correlation {
        strategy: "manual".into(),
        score: 1.0,
        details: serde_json::json!({ "merged_from_incident_id": source_incident_id }),
    }
}

/// Which of an incident's thoughts, citations and suggestions it had at `as_of`: their ids (each
/// row's id is the store position of the analysis event that recorded it) among the events of
/// the transactions recorded by then, as [`super::as_of`] folds the incident. The times the rows
/// show are the events' own, which may come before the append.
pub async fn analysis_recorded_by(
    db: &PgPool,
    incident_id: Uuid,
    as_of: DateTime<Utc>,
) -> sqlx::Result<std::collections::HashSet<i64>> {
    let positions: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT global_position FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND {}",
        recorded_by("= $2")
    ))
    .bind(<vigil_aggregates::incident_analysis::IncidentAnalysis as cqrs_es::Aggregate>::TYPE)
    .bind(incident_id.to_string())
    .bind(as_of)
    .fetch_all(db)
    .await?;
    Ok(positions.into_iter().collect())
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ThoughtRow {
    pub id: i64,
    pub timestamp: DateTime<Utc>,
    pub content: String,
    pub thought_type: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub async fn thoughts(db: &PgPool, incident_id: Uuid) -> sqlx::Result<Vec<ThoughtRow>> {
    sqlx::query_as(
        "SELECT id, timestamp, content, thought_type, created_at FROM incident_thoughts
         WHERE incident_id = $1 ORDER BY timestamp, id",
    )
    .bind(incident_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SuggestionRow {
    pub id: i64,
    pub title: String,
    pub description: Option<String>,
    #[sqlx(rename = "type")]
    pub kind: Option<String>,
    pub risk: Option<String>,
    pub command: Option<String>,
    pub file_path: Option<String>,
    pub original_content: Option<String>,
    pub suggested_content: Option<String>,
    pub user_edited_content: Option<String>,
    pub repository: Option<String>,
    pub pr_url: Option<String>,
    pub pr_number: Option<i32>,
    pub created_branch: Option<String>,
    pub applied_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

pub async fn suggestions(db: &PgPool, incident_id: Uuid) -> sqlx::Result<Vec<SuggestionRow>> {
    sqlx::query_as(
        "SELECT id, title, description, type, risk, command, file_path, original_content, suggested_content,
                user_edited_content, repository, pr_url, pr_number, created_branch, applied_at, created_at
         FROM incident_suggestions WHERE incident_id = $1 ORDER BY id",
    )
    .bind(incident_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CitationRow {
    pub id: i64,
    pub citation_key: String,
    pub tool_name: Option<String>,
    pub command: Option<String>,
    pub output: String,
    pub executed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Citations with numeric keys only, in key order (spec).
pub async fn citations(db: &PgPool, incident_id: Uuid) -> sqlx::Result<Vec<CitationRow>> {
    sqlx::query_as(
        "SELECT id, citation_key, tool_name, command, output, executed_at, created_at FROM incident_citations
         WHERE incident_id = $1 AND citation_key ~ '^[0-9]+$' ORDER BY citation_key::bigint",
    )
    .bind(incident_id)
    .fetch_all(db)
    .await
}

/// The complete original payload of the incident's opening alert. Read by primary key alone, the
/// owner checked on the row (see [`find_incident`]; here the index a young table's plan took
/// was `source_alerts_key`, and with it every alert the user ever sent).
pub async fn opening_payload(db: &PgPool, user_id: &str, source_alert_id: i64) -> sqlx::Result<Option<String>> {
    // As text: the `json` column keeps the payload as it was posted, which a parsed value would
    // reorder and respell.
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT user_id, payload::text FROM source_alerts WHERE id = $1")
            .bind(source_alert_id)
            .fetch_optional(db)
            .await?;
    Ok(row.and_then(|(owner, payload)| (owner == user_id).then_some(payload)))
}

/// An open incident the correlator may attach a new alert to (placement reads these).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct CandidateRow {
    pub id: Uuid,
    pub alert_title: Option<String>,
    pub alert_service: Option<String>,
    pub affected_services: Vec<String>,
    pub started_at: DateTime<Utc>,
    pub last_alert_at: DateTime<Utc>,
    pub correlated_alert_count: i32,
    /// The last event sequence the row reflects.
    pub version: i64,
    /// The evidence keys of its alerts (see `Evidence::keys`).
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// A correlation candidate of one of the users asked about.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct UserCandidateRow {
    pub user_id: String,
    #[serde(flatten)]
    pub candidate: CandidateRow,
}

/// The owner of each of `incident_ids`, from the event that opened it (what a consumer of an
/// incident's later events, which do not name the user, needs when the read row may lag).
pub(crate) async fn owners<S: AsRef<str> + Sync>(
    conn: &mut PgConnection,
    incident_ids: &[S],
) -> Result<HashMap<String, String>, ProjectionError> {
    let ids: Vec<&str> = incident_ids.iter().map(AsRef::as_ref).collect();
    Ok(sqlx::query_as::<_, (String, Option<String>)>(
        "SELECT aggregate_id, payload->'IncidentOpened'->>'user_id' FROM events
         WHERE aggregate_type = $1 AND aggregate_id = ANY($2) AND sequence = 1",
    )
    .bind(<Incident as cqrs_es::Aggregate>::TYPE)
    .bind(&ids)
    .fetch_all(conn)
    .await?
    .into_iter()
    .filter_map(|(id, owner)| Some((id, owner?)))
    .collect())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;
    use vigil_aggregates::incident::AlertInfo;

    use super::*;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 24, 9, minute, 0).unwrap()
    }

    fn alert(source_alert_id: i64, service: &str) -> AlertInfo {
        AlertInfo {
            source_type: "source_a".into(),
            source_alert_id,
            alert_key: format!("key-{source_alert_id}"),
            title: format!("alert {source_alert_id}"),
            service: Some(service.into()),
            environment: None,
            severity: Some("warning".into()),
            fired_at: at(0),
            source_url: None,
            metadata: json!({ "labels": { "n": source_alert_id } }),
            evidence: Default::default(),
        }
    }

    fn correlated(source_alert_id: i64, minute: u32) -> IncidentEvent {
        IncidentEvent::AlertCorrelated {
            alert: alert(source_alert_id, "checkout-api"),
            correlation: Correlation {
                strategy: "service_match".into(),
                score: 0.8,
                details: json!({ "service_match": 1.0 }),
            },
            filled: false,
            at: at(minute),
        }
    }

    #[test]
    fn correlated_and_merged_alerts_are_listed_once_each_in_the_order_they_joined() {
        let incident = Uuid::new_v4();
        let merged_from = Uuid::new_v4();
        let events = vec![
            IncidentEvent::IncidentOpened {
                incident_id: incident,
                user_id: "owner".into(),
                alert: alert(1, "checkout-api"),
                at: at(1),
                split_from: None,
                previous_incident_id: None,
            },
            correlated(3, 2),
            IncidentEvent::IncidentTouched { at: at(3) },
            IncidentEvent::IncidentAbsorbed {
                source_incident_id: merged_from,
                alerts: vec![alert(7, "payments"), alert(3, "checkout-api")],
                at: at(4),
            },
            correlated(2, 2),
        ];

        let rows = joined_alerts(incident, events);

        let listed: Vec<(i64, &str, f64)> = rows
            .iter()
            .map(|row| {
                (
                    row.source_alert_id,
                    row.correlation_strategy.as_str(),
                    row.correlation_score,
                )
            })
            .collect();
        assert_eq!(
            listed,
            [(2, "service_match", 0.8), (3, "service_match", 0.8), (7, "manual", 1.0)]
        );
        let merged = &rows[2];
        assert_eq!(
            merged.correlation_details.0,
            json!({ "merged_from_incident_id": merged_from })
        );
        assert_eq!(merged.alert_service.as_deref(), Some("payments"));
        assert_eq!(merged.received_at, at(4));
        assert_eq!(rows[0].alert_metadata.0, json!({ "labels": { "n": 2 } }));
        assert_eq!(rows[0].alert_title.as_deref(), Some("alert 2"));
        assert!(rows.iter().all(|row| row.incident_id == incident));
    }

    #[test]
    fn an_alert_split_off_leaves_the_list_until_it_joins_again() {
        let incident = Uuid::new_v4();
        let split = IncidentEvent::AlertSplitOff {
            source_type: "source_a".into(),
            source_alert_id: 3,
            service: Some("checkout-api".into()),
            new_incident_id: Uuid::new_v4(),
            remaining_services: vec!["checkout-api".into()],
            at: at(5),
        };
        let listed = |events: Vec<IncidentEvent>| -> Vec<i64> {
            joined_alerts(incident, events)
                .iter()
                .map(|row| row.source_alert_id)
                .collect()
        };
        assert_eq!(listed(vec![correlated(2, 2), correlated(3, 3), split.clone()]), [2]);
        assert_eq!(
            listed(vec![correlated(2, 2), correlated(3, 3), split, correlated(3, 9)]),
            [2, 3]
        );
    }

    #[test]
    fn a_correlated_alert_keeps_its_id_from_read_to_read_and_incident_to_incident() {
        let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
        let read = |incident| joined_alerts(incident, vec![correlated(5, 1)])[0].id;
        assert_eq!(read(first), read(first));
        assert_ne!(read(first), read(second));
    }
}
