//! From a normalized alert to an incident: the outcome type, what the incident keeps of an
//! alert, and the correlation settings. Placement itself is batched: see `pipeline` and
//! `placement`.

use serde::Serialize;
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{evidence::Evidence, CorrelationConfig, EventKind},
    incident::AlertInfo,
};

use super::parsers::{AlertKind, NormalizedAlert, Source};

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

pub(super) fn alert_info(alert_id: i64, alert: &NormalizedAlert, evidence: &Evidence) -> AlertInfo {
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
        evidence: evidence.clone(),
    }
}

/// The evidence of an alert: entities of its labels, entities and terms of its title, detail
/// and free text, and the account of the tool that sent it.
pub fn alert_evidence(alert: &NormalizedAlert) -> Evidence {
    // A host-monitoring agent's alert is about the host it names as its service.
    let host = (alert.source == Source::SourceC)
        .then_some(alert.service.as_deref())
        .flatten()
        .map(|host| ("host", host));
    let labels = alert
        .labels
        .iter()
        .filter_map(|(key, value)| value.as_str().map(|value| (key.as_str(), value)))
        .chain(host);
    let texts = std::iter::once(alert.title.as_str())
        .chain(alert.detail.as_deref())
        .chain(alert.free_text.iter().map(String::as_str));
    Evidence::extract(labels, texts).with_account(alert.account.as_deref())
}

pub(super) fn event_kind(kind: AlertKind) -> EventKind {
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
