//! source_i: incident-correlation platform. One notification is one incident; the incident, not each of its
//! member alerts, is the alert here, because its id is the stable key and its status is what resolves.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    time::EpochUnit,
    value::Obj,
    vocabulary::{normalize_severity, unless_same_as},
};

pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<NormalizedAlert, ParseError> {
    let root = Obj::root(payload)?;
    let incident = root.require_object("incident")?;
    let key = incident.require_id("id")?;
    let alerts = incident.objects("alerts")?;
    let tags = incident_tags(&incident)?;
    let (condition_name, description, alert_service, link) = match alerts.first() {
        Some(alert) => (
            alert.text("condition_name")?,
            alert.text("description")?,
            alert.text("service")?,
            alert.text("link")?,
        ),
        None => (None, None, None, None),
    };
    let title = condition_name
        .clone()
        .or_else(|| description.clone())
        .or(incident.first_text(&["title", "description"])?)
        .unwrap_or_else(|| format!("Incident {key}"));
    let state = incident
        .word("status")?
        .map_or_else(|| "active".to_owned(), |status| status.to_lowercase());

    Ok(NormalizedAlert {
        source: Source::SourceI,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        detail: unless_same_as(description, &title),
        title,
        service: tag_value(&tags, "service").or(alert_service),
        environment: tag_value(&tags, "env").or_else(|| tag_value(&tags, "environment")),
        severity: incident
            .text("severity")?
            .and_then(|severity| normalize_severity(&severity)),
        fired_at: incident.time("start", EpochUnit::Seconds)?.unwrap_or(received_at),
        resolved: state == "resolved",
        state,
        account: account::organisation(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: condition_name,
        labels: labels(&tags, &alerts)?,
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    })
}

/// One `incident_tags` entry; a `tag_value` may be a string or a list.
struct IncidentTag {
    id: String,
    values: Vec<String>,
}

fn incident_tags(incident: &Obj<'_>) -> Result<Vec<IncidentTag>, ParseError> {
    let mut tags = Vec::new();
    for tag in incident.objects("incident_tags")? {
        let values = tag.label_values("tag_value")?;
        if let Some(id) = tag.text("tag_id")? {
            tags.push(IncidentTag { id, values });
        }
    }
    Ok(tags)
}

/// The first value of the tag with this `tag_id` (ignoring ASCII case) that has a value.
fn tag_value(tags: &[IncidentTag], tag_id: &str) -> Option<String> {
    tags.iter()
        .filter(|tag| tag.id.eq_ignore_ascii_case(tag_id))
        .find_map(|tag| tag.values.first().cloned())
}

/// Every incident tag (list values joined with commas) and the ids of the member alerts.
fn labels(tags: &[IncidentTag], alerts: &[Obj<'_>]) -> Result<Map<String, Value>, ParseError> {
    let mut labels: Map<String, Value> = tags
        .iter()
        .filter(|tag| !tag.values.is_empty())
        .map(|tag| (tag.id.clone(), Value::String(tag.values.join(","))))
        .collect();
    let mut alert_ids = Vec::new();
    for alert in alerts {
        alert_ids.extend(alert.text("id")?);
    }
    if !alert_ids.is_empty() {
        labels.insert("alert_ids".to_owned(), Value::String(alert_ids.join(",")));
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::super::RawPayload;
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;

    const SOURCE: Source = Source::SourceI;

    #[test]
    fn active_incident() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "6738f1c2a9e4b5d7c8f01234");
        assert_eq!(alert.group_key, alert.key);
        assert_eq!(alert.title, "notifications queue backlog high");
        assert!(alert
            .detail
            .as_deref()
            .is_some_and(|detail| detail.starts_with("notifications-worker queue backlog high: ")));
        assert_eq!(alert.service.as_deref(), Some("notifications-worker"));
        assert_eq!(alert.environment.as_deref(), Some("prod"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T21:12:33Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "active");
        assert_eq!(alert.rule_name.as_deref(), Some("notifications queue backlog high"));
        assert_eq!(
            alert.source_url.as_deref(),
            Some("https://grafana.example.com/d/notif-queues?orgId=1")
        );
        assert_eq!(alert.labels.get("team"), Some(&json!("messaging")));
        assert_eq!(alert.labels.get("alert_ids"), Some(&json!("6738f1c2a9e4b5d7c8f0a001")));
        assert_eq!(alert.raw, RawPayload::Whole);
    }

    #[test]
    fn related_incident_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "6738f26ba1c5d9e7f3b04a58");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.title, "notifications consumer lag high");
        assert_eq!(related.severity.as_deref(), Some("warning"));
        assert_eq!(related.fired_at, utc("2026-11-20T21:14:50Z"));
        assert_eq!(related.source_url, None);
        assert!(!related.resolved);
    }

    #[test]
    fn resolved_incident_shares_the_key() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "resolved");
        assert_eq!(resolved.title, firing.title);
        // fired-at is the incident's `start`; the 21:58:10 in the README table is its `end`.
        assert_eq!(resolved.fired_at, utc("2026-11-20T21:12:33Z"));
    }

    #[test]
    fn tag_value_may_be_a_list() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/incident/incident_tags/0/tag_value",
            json!(["notifications-worker", "email-sender"]),
        );
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("notifications-worker"));
        assert_eq!(
            alert.labels.get("service"),
            Some(&json!("notifications-worker,email-sender"))
        );
    }

    #[test]
    fn service_falls_back_to_the_first_alert() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/incident/incident_tags", json!([]));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("notifications-worker"));
        assert_eq!(alert.environment, None);
    }

    #[test]
    fn numeric_id_and_start_as_string() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/incident/id", json!(42));
        let payload = with(payload, "/incident/start", json!("1795209153"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "42");
        assert_eq!(alert.fired_at, utc("2026-11-20T21:12:33Z"));
    }

    #[test]
    fn incident_without_alerts_or_start() {
        let payload = without(
            without(fixture(SOURCE, Fixture::Firing), "/incident/alerts"),
            "/incident/start",
        );
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.title, "Incident 6738f1c2a9e4b5d7c8f01234");
        assert_eq!(alert.fired_at, received_at());
        assert_eq!(alert.service.as_deref(), Some("notifications-worker"));
        assert_eq!(alert.labels.get("alert_ids"), None);
    }

    #[test]
    fn title_falls_back_to_the_alert_description() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/incident/alerts/0/condition_name");
        let alert = parse_one(SOURCE, &payload);
        assert!(alert.title.starts_with("notifications-worker queue backlog high: "));
        assert_eq!(alert.detail, None);
    }

    #[test]
    fn rejects_bodies_without_an_incident_id() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `incident`");
        assert_error(
            SOURCE,
            &json!({"incident": [{"id": "x"}]}),
            "field `incident` must be an object, not an array",
        );
        assert_error(
            SOURCE,
            &without(fixture(SOURCE, Fixture::Firing), "/incident/id"),
            "missing field `incident.id`",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/incident/id", json!({"$oid": "x"})),
            "field `incident.id` must be a string or a number, not an object",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/incident/alerts",
                json!({}),
                "field `incident.alerts` must be an array, not an object",
            ),
            (
                "/incident/alerts/0",
                json!("6738f1c2a9e4b5d7c8f0a001"),
                "field `incident.alerts[0]` must be an object, not a string",
            ),
            (
                "/incident/start",
                json!("not-a-time"),
                "field `incident.start` must be an RFC 3339 time or epoch seconds, not \"not-a-time\"",
            ),
            (
                "/incident/incident_tags",
                json!("junk"),
                "field `incident.incident_tags` must be an array, not a string",
            ),
            (
                "/incident/incident_tags/0/tag_value",
                json!({"value": "notifications-worker"}),
                "field `incident.incident_tags[0].tag_value` must be a string, a number or a boolean, not an object",
            ),
            (
                "/incident/alerts/0/condition_name",
                json!(["a", {}]),
                "field `incident.alerts[0].condition_name[1]` must be a string or a number, not an object",
            ),
            (
                "/incident/severity",
                json!({"level": "Critical"}),
                "field `incident.severity` must be a string or a number, not an object",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }
}
