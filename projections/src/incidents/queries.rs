use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{types::Json, PgPool};
use uuid::Uuid;

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
}

const INCIDENT_COLUMNS: &str = "i.id, i.user_id, i.source_type, i.source_alert_id, i.status, i.severity, i.alert_title,
    i.alert_service, i.alert_environment, i.alert_source_url, i.alert_metadata, i.aurora_status, i.aurora_summary,
    i.aurora_chat_session_id, i.started_at, i.last_alert_at, i.analyzed_at, i.active_tab, i.created_at, i.updated_at,
    i.merged_into_incident_id, target.alert_title AS merged_into_title, i.correlated_alert_count, i.affected_services,
    i.version";

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

pub async fn find_incident(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    id: Uuid,
) -> sqlx::Result<Option<IncidentRow>> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents i LEFT JOIN incidents target ON target.id = i.merged_into_incident_id
         WHERE i.id = $1 AND i.user_id = $2"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(db)
    .await
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

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CorrelatedAlertRow {
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

pub async fn correlated_alerts(
    db: impl sqlx::PgExecutor<'_>,
    incident_id: Uuid,
) -> sqlx::Result<Vec<CorrelatedAlertRow>> {
    sqlx::query_as(
        "SELECT id, incident_id, source_type, source_alert_id, alert_title, alert_service, alert_severity,
                correlation_strategy, correlation_score, correlation_details, alert_metadata, fired_at, received_at
         FROM correlated_alerts WHERE incident_id = $1 ORDER BY received_at, source_alert_id",
    )
    .bind(incident_id)
    .fetch_all(db)
    .await
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

/// The complete original payload of the incident's opening alert.
pub async fn opening_payload(db: &PgPool, user_id: &str, source_alert_id: i64) -> sqlx::Result<Option<Value>> {
    sqlx::query_scalar("SELECT payload FROM source_alerts WHERE id = $1 AND user_id = $2")
        .bind(source_alert_id)
        .bind(user_id)
        .fetch_optional(db)
        .await
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
}

/// A correlation candidate of one of the users asked about.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct UserCandidateRow {
    pub user_id: String,
    #[serde(flatten)]
    pub candidate: CandidateRow,
}
