//! source_d: metrics SaaS monitor with a user-templated JSON body. The key is the monitor (`alert_id`).

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    tags::{find_tag, parse_tag_text, tags_to_labels, Tag},
    time::EpochUnit,
    value::Obj,
    vocabulary::{is_word, normalize_severity, unless_same_as},
};

/// Bracketed words the tool puts in front of a monitor's name, such as `[Triggered on {...}]` or `[P2]`.
const TITLE_MARKERS: [&str; 8] = [
    "Triggered",
    "Re-Triggered",
    "Recovered",
    "Warn",
    "Re-Warn",
    "No Data",
    "Re-No Data",
    "Renotify",
];

pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<NormalizedAlert, ParseError> {
    let root = Obj::root(payload)?;
    let key = root.require_id("alert_id")?;
    let tags = root.tags("tags")?;
    let scope = root.text("scope")?;
    let scope_tags = scope.as_deref().map(parse_tag_text).unwrap_or_default();
    let transition = root.word("alert_transition")?;
    let alert_type = root.word("alert_type")?;
    let resolved = is_word(transition.as_deref(), "recovered") || is_word(alert_type.as_deref(), "success");
    let title = root
        .first_text(&["title", "event_title"])?
        .map(|title| strip_title_markers(&title).to_owned())
        .unwrap_or_else(|| format!("Monitor {key}"));

    Ok(NormalizedAlert {
        source: Source::SourceD,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        detail: unless_same_as(root.text("body")?.and_then(|body| clean_body(&body)), &title),
        title,
        service: service(&tags, &scope_tags, scope.as_deref()),
        environment: find_tag(&tags, "env").or_else(|| find_tag(&scope_tags, "env")),
        severity: alert_type.as_deref().and_then(normalize_severity),
        fired_at: root
            .time("date_happened", EpochUnit::Seconds)?
            .or(root.time("last_updated", EpochUnit::Millis)?)
            .unwrap_or(received_at),
        resolved,
        state: transition
            .or(alert_type)
            .map_or_else(|| "triggered".to_owned(), |word| word.to_lowercase()),
        account: organisation(root.get("org")),
        source_url: root.text("link")?,
        dashboard_url: None,
        panel_url: None,
        rule_name: None,
        labels: tags_to_labels(&tags),
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    })
}

/// The `service:` tag, else the one in `scope`, else `scope` itself when it is a bare name rather than tags
/// (a scope such as `env:prod` alone would lump unrelated monitors into one service).
fn service(tags: &[Tag], scope_tags: &[Tag], scope: Option<&str>) -> Option<String> {
    find_tag(tags, "service")
        .or_else(|| find_tag(scope_tags, "service"))
        .or_else(|| scope.filter(|scope| !scope.contains([':', ','])).map(str::to_owned))
}

/// `"[Triggered on {env:prod}] cart-service p99 latency"` → `"cart-service p99 latency"`, so a firing alert and its
/// recovery carry the same title. Brackets that are not status markers are kept.
fn strip_title_markers(title: &str) -> &str {
    let mut rest = title.trim();
    while let Some((inside, after)) = rest.strip_prefix('[').and_then(|inner| inner.split_once(']')) {
        if !is_title_marker(inside) {
            break;
        }
        rest = after.trim_start();
    }
    if rest.is_empty() {
        title.trim()
    } else {
        rest
    }
}

fn is_title_marker(inside: &str) -> bool {
    let word = inside.split_once(" on ").map_or(inside, |(word, _)| word).trim();
    let is_priority = word.len() == 2
        && word.starts_with(['P', 'p'])
        && word.chars().nth(1).is_some_and(|digit| digit.is_ascii_digit());
    is_priority || TITLE_MARKERS.iter().any(|marker| marker.eq_ignore_ascii_case(word))
}

/// The event body without the `%%%` markdown fences.
fn clean_body(body: &str) -> Option<String> {
    let body = body.trim();
    let body = body.strip_prefix("%%%").unwrap_or(body);
    let body = body.strip_suffix("%%%").unwrap_or(body).trim();
    (!body.is_empty()).then(|| body.to_owned())
}

/// The organisation the monitor belongs to (`org.name`, else its id). Read leniently: an
/// unusual `org` is no reason to refuse the alert.
fn organisation(org: Option<&Value>) -> Option<String> {
    let org = org?;
    let field = |name: &str| match org.get(name)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    };
    field("name")
        .and_then(|name| account::name(&name))
        .or_else(|| field("id").and_then(|id| account::scoped("datadog", &id)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;
    use super::strip_title_markers;

    const SOURCE: Source = Source::SourceD;

    #[test]
    fn firing_monitor() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "148302117");
        assert_eq!(alert.group_key, "148302117");
        assert_eq!(alert.title, "cart-service p99 latency is above 1.5s");
        assert_eq!(alert.service.as_deref(), Some("cart-service"));
        assert_eq!(alert.environment.as_deref(), Some("prod"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T16:31:00Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "triggered");
        assert_eq!(
            alert.source_url.as_deref(),
            Some("https://app.datadog.example.com/event/event?id=7981245503328106512")
        );
        assert!(alert
            .detail
            .as_deref()
            .is_some_and(|detail| detail.starts_with("**cart-service p99 latency is above 1.5s**")));
        assert_eq!(alert.labels.get("team"), Some(&json!("shopping")));
        assert_eq!(alert.labels.get("monitor"), Some(&json!("")));
    }

    #[test]
    fn related_monitor_with_tag_list_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "148302240");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.title, "cart-service p95 latency is above 800ms");
        assert_eq!(related.severity.as_deref(), Some("warning"));
        assert_eq!(related.fired_at, utc("2026-11-20T16:33:00Z"));
        assert_eq!(related.labels, firing.labels);
    }

    #[test]
    fn recovery_shares_the_monitor_key_and_title() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert_eq!(resolved.title, firing.title);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "recovered");
        assert_eq!(resolved.severity.as_deref(), Some("success"));
        assert_eq!(resolved.fired_at, utc("2026-11-20T17:06:00Z"));
    }

    #[test]
    fn templated_numbers_and_strings_are_interchangeable() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/alert_id", json!(148302117));
        let payload = with(payload, "/date_happened", json!("1795192260"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "148302117");
        assert_eq!(alert.fired_at, utc("2026-11-20T16:31:00Z"));
    }

    #[test]
    fn fired_at_falls_back_to_last_updated_millis_then_receipt() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/date_happened");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T16:31:00.412Z"));
        let payload = without(payload, "/last_updated");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn service_falls_back_to_scope() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/tags");
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("cart-service"));
        assert_eq!(alert.environment.as_deref(), Some("prod"));
        let payload = with(payload, "/scope", json!("cart-service"));
        assert_eq!(parse_one(SOURCE, &payload).service.as_deref(), Some("cart-service"));
        let payload = with(payload, "/scope", json!("env:prod"));
        assert_eq!(parse_one(SOURCE, &payload).service, None);
    }

    #[test]
    fn event_title_is_used_when_title_is_missing() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/title");
        assert_eq!(
            parse_one(SOURCE, &payload).title,
            "cart-service p99 latency is above 1.5s"
        );
        let payload = without(payload, "/event_title");
        assert_eq!(parse_one(SOURCE, &payload).title, "Monitor 148302117");
    }

    #[test]
    fn only_status_markers_are_stripped_from_titles() {
        assert_eq!(strip_title_markers("[P2] [Warn on {host:a}] disk full"), "disk full");
        assert_eq!(strip_title_markers("[Re-Triggered] disk full"), "disk full");
        assert_eq!(strip_title_markers("[prod] disk full"), "[prod] disk full");
        assert_eq!(strip_title_markers("[Triggered]"), "[Triggered]");
        assert_eq!(strip_title_markers("[Triggered on {x:y"), "[Triggered on {x:y");
    }

    #[test]
    fn rejects_bodies_without_a_monitor_id() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `alert_id`");
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/alert_id", json!({"id": 1})),
            "field `alert_id` must be a string or a number, not an object",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/alert_id", json!(true)),
            "field `alert_id` must be a string or a number, not a boolean",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/tags",
                json!(42),
                "field `tags` must be a comma-separated string or an array, not a number",
            ),
            (
                "/tags",
                json!({"service": "cart-service"}),
                "field `tags` must be a comma-separated string or an array, not an object",
            ),
            (
                "/tags",
                json!(["service:cart-service", ["env:prod"]]),
                "field `tags[1]` must be a string or a number, not an array",
            ),
            (
                "/date_happened",
                json!("yesterday"),
                "field `date_happened` must be an RFC 3339 time or epoch seconds, not \"yesterday\"",
            ),
            (
                "/last_updated",
                json!(true),
                "field `last_updated` must be an RFC 3339 time or epoch milliseconds, not a boolean",
            ),
            (
                "/title",
                json!({"text": "x"}),
                "field `title` must be a string or a number, not an object",
            ),
            (
                "/scope",
                json!(["env:prod", {}]),
                "field `scope[1]` must be a string or a number, not an object",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }
}
