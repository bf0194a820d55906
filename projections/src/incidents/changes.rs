//! The changes linked to an incident: deployments and configuration pushes (source_f, source_g)
//! of the incident's user, inside the deployment window before its first alert or while it takes
//! alerts, that concern one of its services: the same service, one its alerts name, or one named
//! by the change itself. A change may come first (a bad deploy) or arrive after the first alert
//! (a rollout still running when the callers began to fail).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{types::Json, PgPool};
use uuid::Uuid;
use vigil_aggregates::correlation::{
    evidence::Evidence,
    relation::{self, Relation, RelationKind},
};

/// A change and why it is linked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkedChange {
    pub source_alert_id: i64,
    pub source_type: String,
    pub title: String,
    pub service: Option<String>,
    pub environment: Option<String>,
    /// The deployment succeeded (it may still have caused the incident).
    pub succeeded: bool,
    pub at: DateTime<Utc>,
    /// The raw payload, for the fields each tool names its own way (version, commit, message).
    pub payload: Value,
    /// How it concerns the incident: `same_service`, `mentions` or `mentioned_by`, with the path.
    pub link: Relation,
}

#[derive(sqlx::FromRow)]
struct ChangeRow {
    id: i64,
    source_type: String,
    alert_title: String,
    alert_service: Option<String>,
    alert_environment: Option<String>,
    resolved: bool,
    fired_at: DateTime<Utc>,
    payload: Json<Value>,
}

#[derive(sqlx::FromRow)]
struct IncidentScope {
    user_id: String,
    alert_service: Option<String>,
    affected_services: Vec<String>,
    evidence: Vec<String>,
    started_at: DateTime<Utc>,
    last_alert_at: DateTime<Utc>,
}

/// The changes linked to `incident_id` (the caller has checked it is the user's), oldest first.
/// `window` is how long before the first alert a change may have caused it.
pub async fn linked_changes(db: &PgPool, incident_id: Uuid, window: Duration) -> sqlx::Result<Vec<LinkedChange>> {
    let Some(scope): Option<IncidentScope> = sqlx::query_as(
        "SELECT user_id, alert_service, affected_services, evidence, started_at, last_alert_at
         FROM incidents WHERE id = $1",
    )
    .bind(incident_id)
    .fetch_optional(db)
    .await?
    else {
        return Ok(Vec::new());
    };
    let rows: Vec<ChangeRow> = sqlx::query_as(
        "SELECT id, source_type, alert_title, alert_service, alert_environment, resolved, fired_at, payload
         FROM source_alerts
         WHERE user_id = $1 AND kind = 'deployment' AND fired_at BETWEEN $2 AND $3
         ORDER BY fired_at, id",
    )
    .bind(&scope.user_id)
    .bind(scope.started_at - window)
    .bind(scope.last_alert_at + window)
    .fetch_all(db)
    .await?;
    let services: Vec<&str> = scope
        .alert_service
        .as_deref()
        .into_iter()
        .chain(scope.affected_services.iter().map(String::as_str))
        .collect();
    let mut evidence = scope.evidence.clone();
    evidence.sort_unstable();
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let link = link(&row, &services, &evidence)?;
            Some(LinkedChange {
                source_alert_id: row.id,
                source_type: row.source_type,
                title: row.alert_title,
                service: row.alert_service,
                environment: row.alert_environment,
                succeeded: row.resolved,
                at: row.fired_at,
                payload: row.payload.0,
                link,
            })
        })
        .collect())
}

/// How a change concerns an incident of `services` with `evidence` (sorted keys), if it does.
fn link(row: &ChangeRow, services: &[&str], evidence: &[String]) -> Option<Relation> {
    let message = row.payload.0.get("message").and_then(Value::as_str);
    let change = Evidence::extract([], std::iter::once(row.alert_title.as_str()).chain(message));
    let keys = change.sorted_keys();
    let common = relation::common(row.alert_service.as_deref(), &keys, services, evidence);
    let relation = relation::relation(&common, relation::Sharing::ALONE);
    matches!(
        relation.kind,
        RelationKind::SameService | RelationKind::Mentions | RelationKind::MentionedBy
    )
    .then_some(relation)
}
