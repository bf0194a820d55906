//! source_e: log-search alert action. There is no alert id: the saved search (within its app) is the key, and
//! `sid` changes on every run.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{time::EpochUnit, value::Obj, vocabulary::normalize_severity};

pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<NormalizedAlert, ParseError> {
    let root = Obj::root(payload)?;
    let search_name = root.require_id("search_name")?;
    let key = match root.text("app")? {
        Some(app) => format!("{app}/{search_name}"),
        None => search_name.clone(),
    };
    let result = root.object_or_empty("result")?;
    // `result.status` is a field of the log line (an HTTP status), never the alert state.
    let alert_status = result.text("alert_status")?.or(root.text("alert_status")?);
    let state = alert_status.map_or_else(|| "triggered".to_owned(), |status| status.to_lowercase());

    let link = root.text("results_link")?;
    Ok(NormalizedAlert {
        source: Source::SourceE,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        title: search_name.clone(),
        detail: result.text("_raw")?,
        service: result.text("service")?.or(result.text("host")?),
        environment: None,
        severity: root.text("severity")?.and_then(|severity| severity_of(&severity)),
        fired_at: root
            .time("trigger_time", EpochUnit::Seconds)?
            .or(result.time("_time", EpochUnit::Seconds)?)
            .unwrap_or(received_at),
        resolved: state == "resolved",
        state,
        account: account::organisation(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: Some(search_name),
        labels: result_labels(&result),
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    })
}

/// The tool's 1..6 levels (debug, info, warn, error, severe, fatal), as a number, a numeric string or a word.
/// Its UI calls 3..6 Low, Medium, High and Critical, so error (Medium) maps to warning and severe (High) to
/// critical.
fn severity_of(text: &str) -> Option<String> {
    let level = text.parse::<u8>().ok().or_else(|| level_of_word(text));
    let normalized = match level {
        Some(1 | 2) => "info",
        Some(3) => "warning",
        // "error" means critical here as it does for every other source.
        Some(4..=6) => "critical",
        _ => return normalize_severity(text),
    };
    Some(normalized.to_owned())
}

fn level_of_word(word: &str) -> Option<u8> {
    match word.trim().to_lowercase().as_str() {
        "debug" => Some(1),
        "info" => Some(2),
        "warn" | "warning" => Some(3),
        "error" => Some(4),
        "severe" => Some(5),
        "fatal" | "critical" => Some(6),
        // The words the product's own alert settings show for 3, 4 and 5.
        "low" => Some(3),
        "medium" => Some(4),
        "high" => Some(5),
        _ => None,
    }
}

/// The result row's own fields; the `_`-prefixed internals (`_raw`, `_time`, ...) are left out.
fn result_labels(result: &Obj<'_>) -> Map<String, Value> {
    result.scalar_labels_where(|name| !name.starts_with('_'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;

    const SOURCE: Source = Source::SourceE;

    #[test]
    fn firing_search() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "search/auth-service - HTTP 5xx error spike");
        assert_eq!(alert.group_key, alert.key);
        assert_eq!(alert.title, "auth-service - HTTP 5xx error spike");
        assert_eq!(alert.service.as_deref(), Some("auth-service"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T11:05:00Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "triggered");
        assert_eq!(alert.rule_name.as_deref(), Some("auth-service - HTTP 5xx error spike"));
        assert!(alert
            .detail
            .as_deref()
            .is_some_and(|detail| detail.contains("POST /oauth/token 503")));
        assert_eq!(alert.labels.get("status"), Some(&json!("503")));
        assert_eq!(alert.labels.get("_raw"), None);
        assert!(alert
            .source_url
            .as_deref()
            .is_some_and(|url| url.starts_with("https://splunk.example.com/app/search/@go?sid=")));
    }

    #[test]
    fn related_search_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "search/auth-service - login error spike");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.severity.as_deref(), Some("critical"), "level 4 is error");
        assert_eq!(related.fired_at, utc("2026-11-20T11:07:00Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn resolved_run_shares_the_search_key() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "resolved");
        assert_eq!(resolved.severity.as_deref(), Some("info"));
        assert_eq!(resolved.fired_at, utc("2026-11-20T11:40:00Z"));
    }

    #[test]
    fn http_status_in_the_result_is_not_the_alert_state() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/result/status", json!("resolved"));
        assert!(!parse_one(SOURCE, &payload).resolved);
    }

    #[test]
    fn severity_as_number_string_or_word() {
        for (given, expected) in [
            (json!(1), "info"),
            (json!("2"), "info"),
            (json!(3), "warning"),
            (json!("error"), "critical"),
            (json!(4), "critical"),
            (json!("Severe"), "critical"),
            (json!("fatal"), "critical"),
            (json!(6), "critical"),
            (json!("high"), "critical"),
            (json!("Medium"), "critical"),
            (json!("low"), "warning"),
            (json!(9), "9"),
            (json!("page"), "page"),
        ] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/severity", given.clone());
            assert_eq!(
                parse_one(SOURCE, &payload).severity.as_deref(),
                Some(expected),
                "{given}"
            );
        }
    }

    #[test]
    fn fired_at_falls_back_to_result_time_then_receipt() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/trigger_time", json!("1795172700"));
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T11:05:00Z"));
        let payload = without(payload, "/trigger_time");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T11:04:00Z"));
        let payload = without(payload, "/result");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn multivalue_fields_and_host_fallback() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/result/service");
        let payload = with(payload, "/result/host", json!(["auth-1", "auth-2"]));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("auth-1"));
        assert_eq!(alert.labels.get("host"), Some(&json!("auth-1,auth-2")));
    }

    #[test]
    fn key_without_app_is_the_search_name() {
        let alert = parse_one(SOURCE, &json!({"search_name": "disk full"}));
        assert_eq!(alert.key, "disk full");
        assert_eq!(alert.title, "disk full");
        assert_eq!((alert.service, alert.severity, alert.detail), (None, None, None));
    }

    #[test]
    fn rejects_bodies_without_a_search_name() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `search_name`");
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/search_name", json!(["a"])),
            "field `search_name` must be a string or a number, not an array",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/search_name", json!("")),
            "field `search_name` must not be empty",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/trigger_time",
                json!("abc"),
                "field `trigger_time` must be an RFC 3339 time or epoch seconds, not \"abc\"",
            ),
            (
                "/result",
                json!("auth-service"),
                "field `result` must be an object, not a string",
            ),
            (
                "/result/_time",
                json!({}),
                "field `result._time` must be an RFC 3339 time or epoch seconds, not an object",
            ),
            (
                "/result/host",
                json!(["auth-1", {"name": "auth-2"}]),
                "field `result.host[1]` must be a string or a number, not an object",
            ),
            (
                "/severity",
                json!({"level": 5}),
                "field `severity` must be a string or a number, not an object",
            ),
            (
                "/app",
                json!(true),
                "field `app` must be a string or a number, not a boolean",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }

    #[test]
    fn free_form_result_fields_are_not_checked() {
        let mut payload = fixture(SOURCE, Fixture::Firing);
        payload["result"]["extra"] = json!({"nested": [1, {}]});
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.labels.get("extra"), None);
        assert_eq!(alert.service.as_deref(), Some("auth-service"));
    }
}
