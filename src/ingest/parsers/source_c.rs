//! source_c: host-monitoring agent. Two shapes: flat v1 and nested v2 (`alert` and `node` objects).
//! There is no id field, so the key is built from node, chart and alarm name.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    tags::present_labels,
    time::EpochUnit,
    value::Obj,
    vocabulary::{normalize_severity, unless_same_as},
};

/// The fields of one alarm, whichever shape it came in.
struct Alarm {
    node: String,
    chart: Option<String>,
    name: String,
    status: Option<String>,
    info: Option<String>,
    detail: Option<String>,
    host: Option<String>,
    labels: Map<String, Value>,
}

impl Alarm {
    /// `node/chart/alarm`, or `node/alarm` when the chart is unknown.
    fn key(&self) -> String {
        match &self.chart {
            Some(chart) => format!("{}/{chart}/{}", self.node, self.name),
            None => format!("{}/{}", self.node, self.name),
        }
    }

    fn title(&self) -> String {
        let place = self.host.as_deref().unwrap_or(&self.node);
        self.info.clone().unwrap_or_else(|| format!("{} on {place}", self.name))
    }
}

/// `None` for an alarm whose state says nothing (`UNDEFINED`, `UNINITIALIZED`: the agent cannot
/// evaluate it yet). `REMOVED` (the alarm or its chart went away) ends it, as `CLEAR` does.
pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<Option<NormalizedAlert>, ParseError> {
    let root = Obj::root(payload)?;
    let alarm = match root.object("alert")? {
        Some(alert) => nested_alarm(&root, &alert)?,
        None => flat_alarm(&root)?,
    };
    let key = alarm.key();
    let title = alarm.title();
    let state = alarm
        .status
        .as_deref()
        .map_or_else(|| "unknown".to_owned(), str::to_lowercase);
    if matches!(state.as_str(), "undefined" | "uninitialized") {
        return Ok(None);
    }

    let link = root.text("alert_url")?;
    Ok(Some(NormalizedAlert {
        source: Source::SourceC,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        detail: unless_same_as(alarm.detail, &title),
        title,
        service: alarm.host,
        environment: None,
        severity: alarm.status.as_deref().and_then(normalize_severity),
        fired_at: root.time("when", EpochUnit::Seconds)?.unwrap_or(received_at),
        resolved: matches!(state.as_str(), "clear" | "removed"),
        state,
        account: root
            .get("space")
            .and_then(Value::as_str)
            .and_then(account::name)
            .or_else(|| account::path_segment_after(link.as_deref(), "spaces")),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: Some(alarm.name),
        labels: alarm.labels,
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    }))
}

/// v1: `name`/`alarm`, `chart`, `status`, `host`, `node_id`, `info`, `message` at the top level.
fn flat_alarm(root: &Obj<'_>) -> Result<Alarm, ParseError> {
    const LABEL_FIELDS: [&str; 9] = [
        "chart",
        "context",
        "family",
        "class",
        "type",
        "component",
        "space",
        "room",
        "units",
    ];
    let mut labels = Map::new();
    for name in LABEL_FIELDS {
        if let Some(text) = root.label(name)? {
            labels.insert(name.to_owned(), Value::String(text));
        }
    }
    Ok(Alarm {
        node: root.require_first_id(&["node_id", "host"])?,
        chart: root.text("chart")?,
        name: root.require_first_id(&["name", "alarm"])?,
        status: root.word("status")?,
        info: root.first_text(&["info", "message"])?,
        detail: root.text("message")?,
        host: root.text("host")?,
        labels,
    })
}

/// v2: `alert.name`, `alert.state.status`, `alert.chart.name`, `alert.rendered.info`, `node.hostname`, `node.id`.
fn nested_alarm(root: &Obj<'_>, alert: &Obj<'_>) -> Result<Alarm, ParseError> {
    let node = root.require_object("node")?;
    // `alert.chart` is an object (`name`, `context`, `family`), or in older agents the chart's name as text.
    let (chart, chart_name) = match alert.get("chart") {
        Some(Value::String(_) | Value::Number(_)) => (None, alert.text("chart")?),
        _ => {
            let chart = alert.object_or_empty("chart")?;
            let name = chart.text("name")?;
            (Some(chart), name)
        }
    };
    let rendered = alert.object_or_empty("rendered")?;
    let summary = rendered.text("summary")?;
    Ok(Alarm {
        node: node.require_first_id(&["id", "hostname"])?,
        chart: chart_name,
        name: alert.require_id("name")?,
        status: alert
            .object_or_empty("state")?
            .word("status")?
            .or(alert.word("status")?),
        info: rendered.text("info")?.or_else(|| summary.clone()),
        detail: summary,
        host: node.text("hostname")?,
        labels: nested_labels(root, alert, chart.as_ref())?,
    })
}

fn nested_labels(root: &Obj<'_>, alert: &Obj<'_>, chart: Option<&Obj<'_>>) -> Result<Map<String, Value>, ParseError> {
    let name_of = |object: &str| root.object_or_empty(object)?.text("name");
    let chart_field = |name: &str| chart.map_or(Ok(None), |chart| chart.text(name));
    Ok(present_labels([
        ("chart", chart_field("name")?),
        ("context", chart_field("context")?),
        ("family", chart_field("family")?),
        ("class", alert.text("classification")?),
        ("type", alert.text("type")?),
        ("component", alert.text("component")?),
        ("space", name_of("space")?),
        ("room", name_of("room")?),
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;

    const SOURCE: Source = Source::SourceC;
    const FIRING_KEY: &str = "f3c9e1a2-7b4d-4e8f-9a61-2d5c8b0e7f14/disk_space./var/lib/postgresql/disk_space_usage";

    #[test]
    fn firing_flat_alarm() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, FIRING_KEY);
        assert_eq!(alert.group_key, FIRING_KEY);
        assert_eq!(alert.title, "Total space utilization of disk /var/lib/postgresql");
        assert_eq!(
            alert.detail.as_deref(),
            Some("payments-db-01 needs attention, disk_space._var_lib_postgresql (/var/lib/postgresql), disk_space_usage = 96.4%")
        );
        assert_eq!(alert.service.as_deref(), Some("payments-db-01"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T03:47:20Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "critical");
        assert_eq!(alert.rule_name.as_deref(), Some("disk_space_usage"));
        assert!(alert
            .source_url
            .as_deref()
            .is_some_and(|url| url.starts_with("https://app.netdata.example.com/")));
        assert_eq!(alert.labels.get("room"), Some(&json!("databases")));
        assert_eq!(alert.labels.get("context"), Some(&json!("disk.space")));
    }

    #[test]
    fn related_nested_alarm_is_distinct_on_the_same_host() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(
            related.key,
            "f3c9e1a2-7b4d-4e8f-9a61-2d5c8b0e7f14/disk_space./var/lib/postgresql/out_of_disk_space_time"
        );
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(
            related.title,
            "Estimated time until disk /var/lib/postgresql on payments-db-01 runs out of space: 1.8 hours"
        );
        assert_eq!(
            related.detail.as_deref(),
            Some("Disk /var/lib/postgresql space running out on payments-db-01")
        );
        assert_eq!(related.severity.as_deref(), Some("critical"));
        assert_eq!(related.state, "critical");
        assert_eq!(related.fired_at, utc("2026-11-20T03:49:05Z"));
        assert!(!related.resolved);
        assert_eq!(related.labels.get("space"), Some(&json!("acme")));
        assert_eq!(related.labels.get("class"), Some(&json!("Utilization")));
    }

    #[test]
    fn cleared_alarm_resolves_the_firing_key() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "clear");
        assert_eq!(resolved.severity.as_deref(), Some("clear"));
        assert_eq!(resolved.fired_at, utc("2026-11-20T04:26:50Z"));
    }

    #[test]
    fn a_removed_alarm_ends_and_an_undefined_one_reports_nothing() {
        let removed = with(fixture(SOURCE, Fixture::Resolved), "/status", json!("REMOVED"));
        let removed = parse_one(SOURCE, &removed);
        assert!(removed.resolved);
        assert_eq!(removed.key, parse_fixture(SOURCE, Fixture::Firing).key);
        for status in ["UNDEFINED", "uninitialized"] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/status", json!(status));
            assert_eq!(
                super::super::parse(SOURCE, &payload, received_at()).unwrap(),
                vec![],
                "{status}"
            );
        }
    }

    #[test]
    fn status_is_case_insensitive() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/status", json!("Warning"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.severity.as_deref(), Some("warning"));
        let payload = with(fixture(SOURCE, Fixture::Related), "/alert/state/status", json!("CLEAR"));
        assert!(parse_one(SOURCE, &payload).resolved);
    }

    #[test]
    fn key_falls_back_to_host_and_alarm() {
        let payload = json!({"alarm": "ram_usage", "host": "db-2", "status": "WARNING", "when": "1795146440"});
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "db-2/ram_usage");
        assert_eq!(alert.title, "ram_usage on db-2");
        assert_eq!(alert.fired_at, utc("2026-11-20T03:47:20Z"));
    }

    #[test]
    fn missing_time_and_status_fall_back() {
        let payload = without(without(fixture(SOURCE, Fixture::Firing), "/when"), "/status");
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.fired_at, received_at());
        assert_eq!(alert.state, "unknown");
        assert_eq!(alert.severity, None);
        assert!(!alert.resolved);
    }

    #[test]
    fn nested_alarm_without_node_id_uses_the_hostname() {
        let payload = without(fixture(SOURCE, Fixture::Related), "/node/id");
        assert_eq!(
            parse_one(SOURCE, &payload).key,
            "payments-db-01/disk_space./var/lib/postgresql/out_of_disk_space_time"
        );
    }

    #[test]
    fn rejects_bodies_without_a_node_or_alarm_name() {
        assert_rejects_non_objects(SOURCE);
        assert_error(
            SOURCE,
            &json!({}),
            "missing field: one of `node_id`, `host` is required",
        );
        assert_error(
            SOURCE,
            &json!({"host": "db-1"}),
            "missing field: one of `name`, `alarm` is required",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/node_id", json!(["a"])),
            "field `node_id` must be a string or a number, not an array",
        );
        assert_error(
            SOURCE,
            &without(fixture(SOURCE, Fixture::Related), "/node"),
            "missing field `node`",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Related), "/alert/name", json!({})),
            "field `alert.name` must be a string or a number, not an object",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (which, pointer, value, message) in [
            (
                Fixture::Firing,
                "/when",
                json!({"x": 1}),
                "field `when` must be an RFC 3339 time or epoch seconds, not an object",
            ),
            (
                Fixture::Firing,
                "/when",
                json!("soon"),
                "field `when` must be an RFC 3339 time or epoch seconds, not \"soon\"",
            ),
            (
                Fixture::Firing,
                "/status",
                json!(true),
                "field `status` must be a string, not a boolean",
            ),
            (
                Fixture::Firing,
                "/context",
                json!({"name": "disk.space"}),
                "field `context` must be a string, a number or a boolean, not an object",
            ),
            (
                Fixture::Related,
                "/when",
                json!([1795146545]),
                "field `when` must be an RFC 3339 time or epoch seconds, not an array",
            ),
            (
                Fixture::Related,
                "/alert/state",
                json!("critical"),
                "field `alert.state` must be an object, not a string",
            ),
            (
                Fixture::Related,
                "/alert/rendered",
                json!(["info"]),
                "field `alert.rendered` must be an object, not an array",
            ),
            (
                Fixture::Related,
                "/node/hostname",
                json!({}),
                "field `node.hostname` must be a string or a number, not an object",
            ),
            (
                Fixture::Related,
                "/room",
                json!("databases"),
                "field `room` must be an object, not a string",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, which), pointer, value), message);
        }
        assert_error(
            SOURCE,
            &json!({"alert": "disk full", "host": "db-1", "name": "disk"}),
            "field `alert` must be an object, not a string",
        );
    }

    #[test]
    fn nested_chart_may_be_plain_text() {
        let payload = with(
            fixture(SOURCE, Fixture::Related),
            "/alert/chart",
            json!("disk_space./var/lib/postgresql"),
        );
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, parse_fixture(SOURCE, Fixture::Related).key);
        assert_eq!(alert.labels.get("chart"), None);
    }
}
