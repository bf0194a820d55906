//! source_a: Alertmanager / Grafana unified alerting webhook. One notification carries `alerts[]`.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    time::EpochUnit,
    value::Obj,
    vocabulary::{normalize_severity, unless_same_as},
};

pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<Vec<NormalizedAlert>, ParseError> {
    let notification = Obj::root(payload)?;
    let alerts = notification.require_array("alerts")?;
    if alerts.is_empty() {
        return Err(ParseError::Empty {
            field: notification.path_of("alerts"),
        });
    }
    alerts
        .iter()
        .enumerate()
        .map(|(index, element)| {
            let alert = notification.require_element("alerts", index, element)?;
            let raw = if alerts.len() == 1 {
                RawPayload::Whole
            } else {
                RawPayload::Narrowed(with_only_alert(payload, element))
            };
            parse_alert(&notification, &alert, raw, received_at)
        })
        .collect()
}

/// For an alert without `fingerprint` (Alertmanager before 0.19, hand-built senders): a digest of
/// its labels, which is what identifies an alert to Alertmanager (its fingerprint is a hash of
/// them), so a later notification of the same alert, its recovery included, has the same key.
/// `None` when it has no labels either.
fn labels_fingerprint(labels: Option<&Value>) -> Option<String> {
    use sha2::{Digest, Sha256};
    let labels = labels?.as_object().filter(|labels| !labels.is_empty())?;
    let sorted: std::collections::BTreeMap<&String, &Value> = labels.iter().collect();
    let canonical = serde_json::to_string(&sorted).ok()?;
    Some(format!(
        "labels:{}",
        &hex::encode(Sha256::digest(canonical.as_bytes()))[..16]
    ))
}

/// The notification as if it had carried only `element`: the spec's raw payload is "the complete
/// original alert payload", and a copy of every alert with each of a group's alerts would grow
/// with the square of the group.
fn with_only_alert(payload: &Value, element: &Value) -> Value {
    let mut narrowed = payload.clone();
    if let Some(fields) = narrowed.as_object_mut() {
        fields.insert("alerts".into(), Value::Array(vec![element.clone()]));
    }
    narrowed
}

fn parse_alert(
    notification: &Obj<'_>,
    alert: &Obj<'_>,
    raw: RawPayload,
    received_at: DateTime<Utc>,
) -> Result<NormalizedAlert, ParseError> {
    let labels = alert.object_or_empty("labels")?;
    // A blank fingerprint is an unset one, as everywhere (docs/ingestion.md: the unset markers read as absent).
    let fingerprint = alert
        .get("fingerprint")
        .filter(|value| !value.as_str().is_some_and(|text| text.trim().is_empty()));
    let key = match (fingerprint, labels_fingerprint(alert.get("labels"))) {
        (None, Some(key)) => key,
        _ => alert.require_id("fingerprint")?,
    };
    let annotations = alert.object_or_empty("annotations")?;
    let summary = annotations.first_text(&["summary", "description"])?;
    let description = annotations.text("description")?;
    let alertname = labels.text("alertname")?;
    let title = alertname
        .clone()
        .or_else(|| summary.clone())
        .unwrap_or_else(|| format!("Alert {key}"));
    // Plain Alertmanager always sends a per-alert status; the group status is only a fallback.
    let state = alert
        .word("status")?
        .or(notification.word("status")?)
        .map_or_else(|| "firing".to_owned(), |status| status.to_lowercase());

    let link = alert.text("generatorURL")?;
    Ok(NormalizedAlert {
        source: Source::SourceA,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        detail: unless_same_as(summary, &title),
        title,
        service: labels.text("service")?.or(labels.text("job")?),
        environment: labels.text("environment")?.or(labels.text("env")?),
        severity: labels
            .text("severity")?
            .and_then(|severity| normalize_severity(&severity)),
        // `endsAt` is not read: fired-at is the start, and `status` says whether the alert resolved.
        fired_at: alert.time("startsAt", EpochUnit::Seconds)?.unwrap_or(received_at),
        resolved: state == "resolved",
        state,
        account: account::organisation(link.as_deref())
            .or_else(|| account::organisation(notification.get("externalURL").and_then(Value::as_str))),
        source_url: link,
        dashboard_url: alert.text("dashboardURL")?,
        panel_url: alert.text("panelURL")?,
        rule_name: alertname,
        labels: labels.scalar_labels(),
        free_text: description.into_iter().collect(),
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::super::RawPayload;
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::{parse, ParseError, Source};

    const SOURCE: Source = Source::SourceA;

    #[test]
    fn an_alert_without_a_fingerprint_is_keyed_by_its_labels() {
        let firing = json!({"alerts": [{"status": "firing", "labels": {"alertname": "HighCPU", "job": "node"},
            "startsAt": "2026-11-20T10:00:00Z"}]});
        let resolved = json!({"alerts": [{"status": "resolved", "labels": {"job": "node", "alertname": "HighCPU"},
            "startsAt": "2026-11-20T10:00:00Z", "endsAt": "2026-11-20T10:30:00Z"}]});
        let other = json!({"alerts": [{"status": "firing", "labels": {"alertname": "HighCPU", "job": "db"}}]});
        let (firing, resolved, other) = (
            parse_one(SOURCE, &firing),
            parse_one(SOURCE, &resolved),
            parse_one(SOURCE, &other),
        );
        assert!(firing.key.starts_with("labels:"), "{}", firing.key);
        assert_eq!(
            resolved.key, firing.key,
            "the same labels, in any order, are the same alert"
        );
        assert!(resolved.resolved);
        assert_ne!(other.key, firing.key);
        assert_eq!(firing.service.as_deref(), Some("node"));
        assert_error(
            SOURCE,
            &json!({"alerts": [{"status": "firing", "startsAt": "2026-11-20T10:00:00Z"}]}),
            "missing field `alerts[0].fingerprint`",
        );
    }

    #[test]
    fn a_blank_fingerprint_is_an_unset_one() {
        let labels = json!({"alertname": "HighCPU", "job": "node"});
        let blank = parse_one(
            SOURCE,
            &json!({"alerts": [{"fingerprint": " ", "labels": labels.clone()}]}),
        );
        let absent = parse_one(SOURCE, &json!({"alerts": [{"labels": labels}]}));
        assert_eq!(blank.key, absent.key);
        assert!(blank.key.starts_with("labels:"), "{}", blank.key);
        assert!(parse(SOURCE, &json!({"alerts": [{"fingerprint": ""}]}), received_at()).is_err());
    }

    #[test]
    fn firing_alert() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "7d3f9a1c0b2e4f58");
        assert_eq!(alert.group_key, "7d3f9a1c0b2e4f58");
        assert_eq!(alert.title, "CheckoutApiHighLatency");
        assert_eq!(alert.detail.as_deref(), Some("checkout-api p99 latency above 2s"));
        assert_eq!(alert.service.as_deref(), Some("checkout-api"));
        assert_eq!(alert.environment, None);
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T14:02:10Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "firing");
        assert_eq!(alert.rule_name.as_deref(), Some("CheckoutApiHighLatency"));
        assert_eq!(
            alert.source_url.as_deref(),
            Some("https://grafana.example.com/alerting/grafana/ce4b7k2q9x1fkd/view?orgId=1")
        );
        assert_eq!(
            alert.dashboard_url.as_deref(),
            Some("https://grafana.example.com/d/checkout-api-red?orgId=1")
        );
        assert_eq!(
            alert.panel_url.as_deref(),
            Some("https://grafana.example.com/d/checkout-api-red?orgId=1&viewPanel=4")
        );
        assert_eq!(alert.labels.get("team"), Some(&json!("payments")));
        assert_eq!(alert.labels.len(), 10);
        assert_eq!(alert.raw, RawPayload::Whole);
    }

    #[test]
    fn related_alert_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "e19b04c7a3d25f6e");
        assert_ne!(related.key, firing.key);
        assert_ne!(related.group_key, firing.group_key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.title, "CheckoutApiHighErrorRate");
        assert_eq!(related.fired_at, utc("2026-11-20T14:04:40Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn resolved_alert_shares_the_firing_key() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "resolved");
        // fired-at stays `startsAt`; the 14:41:10 in the README table is `endsAt`.
        assert_eq!(resolved.fired_at, utc("2026-11-20T14:02:10Z"));
        assert_eq!(resolved.title, firing.title);
    }

    #[test]
    fn every_alert_of_a_grouped_notification_is_returned() {
        let first = fixture(SOURCE, Fixture::Firing)["alerts"][0].clone();
        let second = fixture(SOURCE, Fixture::Related)["alerts"][0].clone();
        let payload = with(fixture(SOURCE, Fixture::Firing), "/alerts", json!([first, second]));
        let alerts = parse(SOURCE, &payload, received_at()).expect("parses");
        let keys: Vec<&str> = alerts.iter().map(|alert| alert.key.as_str()).collect();
        assert_eq!(keys, ["7d3f9a1c0b2e4f58", "e19b04c7a3d25f6e"]);
        let mut alone = payload.clone();
        alone["alerts"] = json!([second]);
        assert_eq!(
            alerts[1].raw,
            RawPayload::Narrowed(alone),
            "the notification's own fields, with this alert only"
        );
    }

    #[test]
    fn plain_alertmanager_payload_without_grafana_fields() {
        let payload = json!({
            "version": "4",
            "status": "firing",
            "alerts": [{
                "status": "firing",
                "labels": {"alertname": "DiskFull", "job": "node-exporter", "severity": "warn", "env": "staging"},
                "annotations": {"description": "disk is 97% full"},
                "startsAt": "2026-11-20T14:02:10.123456789+01:00",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": 1234567890
            }]
        });
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "1234567890");
        assert_eq!(alert.service.as_deref(), Some("node-exporter"));
        assert_eq!(alert.environment.as_deref(), Some("staging"));
        assert_eq!(alert.severity.as_deref(), Some("warning"));
        assert_eq!(alert.detail.as_deref(), Some("disk is 97% full"));
        assert_eq!(alert.fired_at, utc("2026-11-20T13:02:10.123456789Z"));
        assert_eq!(
            (alert.dashboard_url, alert.panel_url, alert.source_url),
            (None, None, None)
        );
    }

    #[test]
    fn missing_optional_fields_fall_back() {
        let payload = json!({"alerts": [{"fingerprint": "abc"}]});
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.title, "Alert abc");
        assert_eq!(alert.fired_at, received_at());
        assert_eq!(alert.state, "firing");
        assert!(!alert.resolved);
        assert_eq!((alert.service, alert.severity, alert.detail), (None, None, None));
        assert!(alert.labels.is_empty());
    }

    #[test]
    fn unset_start_time_falls_back_to_receipt() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/alerts/0/startsAt",
            json!("0001-01-01T00:00:00Z"),
        );
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
        let payload = without(fixture(SOURCE, Fixture::Firing), "/alerts/0/startsAt");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn rejects_bodies_without_alerts() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `alerts`");
        assert_error(SOURCE, &json!({"alerts": []}), "field `alerts` must not be empty");
        assert_error(
            SOURCE,
            &json!({"alerts": {"fingerprint": "abc"}}),
            "field `alerts` must be an array, not an object",
        );
        assert_error(
            SOURCE,
            &json!({"alerts": [{"fingerprint": "abc"}, "oops"]}),
            "field `alerts[1]` must be an object, not a string",
        );
    }

    #[test]
    fn rejects_alerts_without_a_usable_fingerprint() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/alerts/0/fingerprint");
        let payload = without(payload, "/alerts/0/labels");
        assert_error(SOURCE, &payload, "missing field `alerts[0].fingerprint`");
        let payload = with(fixture(SOURCE, Fixture::Firing), "/alerts/0/fingerprint", json!({}));
        assert_eq!(
            super::super::test_support::parse_error(SOURCE, &payload),
            ParseError::WrongType {
                field: "alerts[0].fingerprint".into(),
                expected: "a string or a number",
                found: "an object"
            }
        );
        let payload = with(fixture(SOURCE, Fixture::Firing), "/alerts/0/fingerprint", json!(" "));
        let payload = without(payload, "/alerts/0/labels");
        assert_error(SOURCE, &payload, "field `alerts[0].fingerprint` must not be empty");
    }

    #[test]
    fn null_labels_and_annotations_read_as_absent() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/alerts/0/labels", json!(null));
        let payload = with(payload, "/alerts/0/annotations", json!(null));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.title, "Alert 7d3f9a1c0b2e4f58");
        assert_eq!((alert.service, alert.severity, alert.detail), (None, None, None));
        assert!(alert.labels.is_empty());
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/alerts/0/startsAt",
                json!({"x": 1}),
                "field `alerts[0].startsAt` must be an RFC 3339 time or epoch seconds, not an object",
            ),
            (
                "/alerts/0/startsAt",
                json!("not-a-time"),
                "field `alerts[0].startsAt` must be an RFC 3339 time or epoch seconds, not \"not-a-time\"",
            ),
            (
                "/alerts/0/labels",
                json!("service=checkout-api"),
                "field `alerts[0].labels` must be an object, not a string",
            ),
            (
                "/alerts/0/labels/service",
                json!({"name": "checkout-api"}),
                "field `alerts[0].labels.service` must be a string or a number, not an object",
            ),
            (
                "/alerts/0/annotations",
                json!(["checkout-api p99 latency above 2s"]),
                "field `alerts[0].annotations` must be an object, not an array",
            ),
            (
                "/alerts/0/status",
                json!(true),
                "field `alerts[0].status` must be a string, not a boolean",
            ),
            // A state is a word: a number or a list there is no state at all.
            (
                "/alerts/0/status",
                json!(5),
                "field `alerts[0].status` must be a string, not a number",
            ),
            (
                "/alerts/0/status",
                json!([]),
                "field `alerts[0].status` must be a string, not an array",
            ),
            (
                "/status",
                json!({"state": "firing"}),
                "field `status` must be a string, not an object",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }
}
