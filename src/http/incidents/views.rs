//! What the incident endpoints answer, as the spec and the OpenAPI document name it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;
use vigil_aggregates::chat_session::Message;
use vigil_projections::incidents::IncidentRow;

/// The alert that opened the incident.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertView {
    pub(super) title: Option<String>,
    pub(super) service: Option<String>,
    /// The source it came from (`source_a` .. `source_i`).
    pub(super) source: String,
    pub(super) source_url: Option<String>,
    #[schema(value_type = Object)]
    pub(super) metadata: Value,
    /// Detail only: when the alert fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) triggered_at: Option<DateTime<Utc>>,
    /// Detail only: the complete original alert payload, as a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) raw_payload: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentView {
    pub(super) id: Uuid,
    pub(super) source_type: String,
    /// The alert's id in the ingestion store, as a string.
    pub(super) source_alert_id: String,
    pub(super) status: String,
    pub(super) severity: Option<String>,
    pub(super) alert: AlertView,
    pub(super) aurora_status: String,
    pub(super) summary: Option<String>,
    pub(super) chat_session_id: Option<Uuid>,
    pub(super) active_tab: Option<String>,
    pub(super) correlated_alert_count: i32,
    pub(super) affected_services: Vec<String>,
    pub(super) merged_into_incident_id: Option<Uuid>,
    pub(super) merged_into_title: Option<String>,
    pub(super) started_at: DateTime<Utc>,
    pub(super) analyzed_at: Option<DateTime<Utc>>,
    pub(super) created_at: DateTime<Utc>,
    pub(super) updated_at: DateTime<Utc>,
}

impl From<IncidentRow> for IncidentView {
    fn from(row: IncidentRow) -> Self {
        Self {
            id: row.id,
            source_type: row.source_type.clone(),
            source_alert_id: row.source_alert_id.to_string(),
            status: row.status,
            severity: row.severity,
            alert: AlertView {
                title: row.alert_title,
                service: row.alert_service,
                source: row.source_type,
                source_url: row.alert_source_url,
                metadata: row.alert_metadata.0,
                triggered_at: None,
                raw_payload: None,
            },
            aurora_status: row.aurora_status,
            summary: row.aurora_summary,
            chat_session_id: row.aurora_chat_session_id,
            active_tab: Some(row.active_tab),
            correlated_alert_count: row.correlated_alert_count,
            affected_services: row.affected_services,
            merged_into_incident_id: row.merged_into_incident_id,
            merged_into_title: row.merged_into_title,
            started_at: row.started_at,
            analyzed_at: row.analyzed_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentList {
    pub(super) incidents: Vec<IncidentView>,
}

/// The detail response shows two suggestion types (spec): an investigation is a read-only look
/// like a diagnostic, a mitigation changes something like a fix. The stored type keeps the nuance.
pub(super) fn detail_suggestion_type(stored: String) -> String {
    match stored.as_str() {
        "investigation" => "diagnostic".to_owned(),
        "mitigation" => "fix".to_owned(),
        _ => stored,
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuggestionView {
    pub(super) id: i64,
    pub(super) title: String,
    pub(super) description: Option<String>,
    #[serde(rename = "type")]
    #[schema(value_type = Option<SuggestionType>)]
    pub(super) kind: Option<String>,
    #[schema(value_type = Option<SuggestionRisk>)]
    pub(super) risk: Option<String>,
    pub(super) command: Option<String>,
    pub(super) file_path: Option<String>,
    pub(super) original_content: Option<String>,
    pub(super) suggested_content: Option<String>,
    pub(super) user_edited_content: Option<String>,
    pub(super) repository: Option<String>,
    pub(super) pr_url: Option<String>,
    pub(super) pr_number: Option<i32>,
    pub(super) created_branch: Option<String>,
    pub(super) applied_at: Option<DateTime<Utc>>,
    pub(super) created_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThoughtView {
    pub(super) id: i64,
    pub(super) timestamp: DateTime<Utc>,
    pub(super) content: String,
    #[serde(rename = "type")]
    #[schema(value_type = Option<ThoughtType>)]
    pub(super) kind: Option<String>,
    pub(super) created_at: DateTime<Utc>,
}

/// The value sets of the detail's arrays, for the OpenAPI document (the rows hold them as text).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(super) enum ThoughtType {
    Analysis,
    Hypothesis,
    Evidence,
    Conclusion,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(super) enum SuggestionType {
    Diagnostic,
    Fix,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(super) enum SuggestionRisk {
    Safe,
    Medium,
    High,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CitationView {
    pub(super) id: i64,
    pub(super) key: String,
    /// Required by the spec; empty for a citation recorded without one.
    pub(super) tool_name: String,
    pub(super) command: Option<String>,
    #[schema(required = false)]
    pub(super) output: String,
    pub(super) executed_at: Option<DateTime<Utc>>,
    pub(super) created_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorrelatedAlertView {
    pub(super) id: Uuid,
    pub(super) source_type: String,
    /// Required by the spec; empty for an alert recorded without one.
    pub(super) alert_title: String,
    pub(super) alert_service: Option<String>,
    pub(super) alert_severity: Option<String>,
    pub(super) correlation_strategy: String,
    pub(super) correlation_score: f64,
    #[schema(value_type = Object, required = false)]
    pub(super) correlation_details: Value,
    pub(super) received_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentChatSession {
    pub(super) id: Uuid,
    pub(super) title: String,
    #[schema(value_type = Vec<Object>)]
    pub(super) messages: Vec<Message>,
    pub(super) created_at: DateTime<Utc>,
    pub(super) updated_at: DateTime<Utc>,
    pub(super) status: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentDetail {
    #[serde(flatten)]
    pub(super) incident: IncidentView,
    pub(super) suggestions: Vec<SuggestionView>,
    pub(super) streaming_thoughts: Vec<ThoughtView>,
    pub(super) citations: Vec<CitationView>,
    pub(super) correlated_alerts: Vec<CorrelatedAlertView>,
    pub(super) chat_sessions: Vec<IncidentChatSession>,
    /// Deployments and configuration changes that concern the incident's services, inside the
    /// deployment window (not in the spec: an addition).
    pub(super) changes: Vec<ChangeView>,
    /// The analysis's verdict and what it rests on, once it reached one (an addition).
    pub(super) verdict: Option<VerdictView>,
    /// The earlier incident this one's alert fired in: a new firing of an alert whose incident
    /// is resolved or merged opens a new incident rather than reopening it (an addition). Null
    /// when the alert never fired before.
    #[schema(required = true)]
    pub(super) previous_incident_id: Option<Uuid>,
    /// One of its alerts fired and recovered too often (`docs/noise.md`): its later cycles are
    /// recorded here (`FlapRecorded` events) and open nothing (an addition).
    pub(super) flapping: bool,
}

/// The verdict of the analysis (`docs/rca.md`): CONFIRMED (the component's own failure and
/// other alerts leading to it), LIKELY (one line of evidence) or INCONCLUSIVE (the cause is not
/// established).
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictView {
    #[schema(example = "CONFIRMED")]
    pub(super) verdict: VerdictName,
    /// The component at fault, spelled as the alerts spell it; null when not established.
    pub(super) component: Option<String>,
    /// `change`, `dependency`, `component`, `host`, `network`, `database` or `capacity`.
    pub(super) kind: Option<String>,
    /// The failure, in words.
    pub(super) failure: Option<String>,
    /// The evidence, each quoted from the alert (or change) and field it came from.
    pub(super) evidence: Vec<FindingView>,
    /// The services whose alerts lead to the component.
    pub(super) named_by: Vec<String>,
    /// What was considered and set aside, and why.
    pub(super) ruled_out: Vec<RuledOutView>,
    /// When the cause is not established: failures other alerts showed in the same minutes that
    /// nothing in the incident leads to, as leads to check. Empty otherwise.
    #[serde(default)]
    pub(super) unlinked: Vec<UnlinkedView>,
    /// With a language model configured: the model's verdict and the verdict gate's decision on
    /// it (absent when no model answered, and the built-in analyst's verdict stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub(super) model: Option<ModelCheckView>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct UnlinkedView {
    pub(super) component: String,
    /// The failure, in words.
    pub(super) failure: String,
    pub(super) evidence: FindingView,
}

/// The model's verdict as the gate checked it (`docs/rca.md`, the model's verdict gate). It is
/// downgraded to INCONCLUSIVE when it cites nothing, cites only empty tool outputs, or contradicts
/// the ledger without new evidence; an accepted verdict is never stronger than its evidence.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCheckView {
    /// The verdict the model claimed; null when its answer had no readable verdict block.
    pub(super) claimed_verdict: Option<VerdictName>,
    /// The component the model named.
    pub(super) claimed_component: Option<String>,
    /// The existing evidence it cited: ledger items (`E1`, `E2`, ...) and tool results (`1`,
    /// `2`, ..., the keys of `citations`).
    pub(super) cited: Vec<String>,
    /// Whether the model's verdict stands (the top-level verdict is then the model's).
    pub(super) accepted: bool,
    /// `accepted`, `no_verdict`, `cites_nothing`, `empty_tool_outputs`, `no_component`,
    /// `contradicts_ledger` or `unsupported`.
    #[schema(example = "contradicts_ledger")]
    pub(super) rule: String,
    /// The decision in words.
    pub(super) reason: String,
    /// The built-in analyst's verdict, which the gated one replaces.
    pub(super) ledger_verdict: VerdictName,
    /// The built-in analyst's component, if it named one.
    pub(super) ledger_component: Option<String>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VerdictName {
    Confirmed,
    Likely,
    Inconclusive,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct FindingView {
    /// Index of the alert in the incident (0 is its first), null for a change.
    pub(super) alert: Option<usize>,
    /// The alert's service, or the change.
    pub(super) source: String,
    pub(super) field: String,
    pub(super) excerpt: String,
    /// The failure kind of the signature catalog it shows, if any.
    pub(super) signature: Option<String>,
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuledOutView {
    pub(super) subject: String,
    pub(super) reason: String,
}

/// A change linked to an incident.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeView {
    /// The change's row in the ingestion store.
    pub(super) source_alert_id: i64,
    pub(super) source_type: String,
    pub(super) title: String,
    pub(super) service: Option<String>,
    pub(super) environment: Option<String>,
    /// Whether the deployment reported success (a successful one may still be the cause).
    pub(super) succeeded: bool,
    pub(super) at: DateTime<Utc>,
    /// Why it is linked: `kind` (`same_service`, `mentions`, `mentioned_by`) and `path`.
    #[schema(value_type = Object)]
    pub(super) link: Value,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentDetailResponse {
    pub(super) incident: IncidentDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct PatchResponse {
    pub(super) success: bool,
    pub(super) id: Uuid,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeResponse {
    pub(super) success: bool,
    pub(super) target_incident_id: Uuid,
    pub(super) source_incident_id: Uuid,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentEventView {
    pub(super) sequence: i64,
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) version: String,
    pub(super) recorded_at: DateTime<Utc>,
    /// `user:<id>` or `system:<part>`.
    pub(super) actor: Option<String>,
    #[schema(value_type = Object)]
    pub(super) payload: Value,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IncidentEvents {
    pub(super) incident_id: Uuid,
    pub(super) events: Vec<IncidentEventView>,
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
pub struct AsOfQuery {
    /// ISO 8601 time: show the incident as it stood then.
    #[param(format = DateTime)]
    pub(super) as_of: Option<String>,
}
