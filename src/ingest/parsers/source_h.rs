//! source_h: APM problem notification sent through a custom template. `PID` is the stable problem key,
//! `ProblemID` ("P-…") only the display id.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    tags::{find_tag, tags_to_labels, Tag},
    time::EpochUnit,
    value::Obj,
    vocabulary::{is_word, normalize_severity, unless_same_as},
};

pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<NormalizedAlert, ParseError> {
    let root = Obj::root(payload)?;
    // `PID` is the stable key; a template that leaves it out still names the problem.
    let key = root.require_first_id(&["PID", "ProblemID"])?;
    let tags = root.tags("Tags")?;
    let impacted_entity = root.text("ImpactedEntity")?;
    let problem_id = root.text("ProblemID")?;
    let title = root
        .text("ProblemTitle")?
        .or_else(|| impacted_entity.clone())
        .unwrap_or_else(|| format!("Problem {}", problem_id.as_deref().unwrap_or(&key)));
    let state = root
        .word("State")?
        .map_or_else(|| "open".to_owned(), |state| state.to_lowercase());

    let link = root.text("ProblemURL")?;
    Ok(NormalizedAlert {
        source: Source::SourceH,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        detail: unless_same_as(impacted_entity, &title),
        title,
        service: impacted_service(&root)?.or_else(|| find_tag(&tags, "service")),
        environment: find_tag(&tags, "env").or_else(|| find_tag(&tags, "environment")),
        severity: root
            .text("ProblemSeverity")?
            .and_then(|severity| severity_of(&severity)),
        fired_at: root.time("StartTime", EpochUnit::Millis)?.unwrap_or(received_at),
        resolved: state == "resolved",
        state,
        account: environment(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: None,
        labels: labels(&tags, problem_id, root.text("ProblemImpact")?),
        free_text: problem_text(&root)?,
        raw: RawPayload::Whole,
    })
}

/// The environment of the problem's link: a SaaS environment's subdomain
/// (`abc12345.live.dynatrace.com`) or a managed cluster's `/e/<id>` path.
fn environment(link: Option<&str>) -> Option<String> {
    let id = account::path_segment_after(link, "e").or_else(|| account::subdomain(link))?;
    account::scoped("dynatrace", &id)
}

/// The problem's details and the names of every impacted entity (a process group, a host).
fn problem_text(root: &Obj<'_>) -> Result<Vec<String>, ParseError> {
    let mut text: Vec<String> = root.text("ProblemDetailsText")?.into_iter().collect();
    for entity in root.objects("ImpactedEntities")? {
        text.extend(entity.text("name")?);
    }
    Ok(text)
}

/// The name of the first impacted entity of type SERVICE.
fn impacted_service(root: &Obj<'_>) -> Result<Option<String>, ParseError> {
    let mut service = None;
    for entity in root.objects("ImpactedEntities")? {
        let (kind, name) = (entity.text("type")?, entity.text("name")?);
        if service.is_none() && is_word(kind.as_deref(), "SERVICE") {
            service = name;
        }
    }
    Ok(service)
}

fn severity_of(problem_severity: &str) -> Option<String> {
    let normalized = match problem_severity.trim().to_uppercase().as_str() {
        "AVAILABILITY" | "ERROR" => "critical",
        "PERFORMANCE" | "RESOURCE_CONTENTION" | "CUSTOM_ALERT" | "MONITORING_UNAVAILABLE" => "warning",
        _ => return normalize_severity(problem_severity),
    };
    Some(normalized.to_owned())
}

fn labels(tags: &[Tag], problem_id: Option<String>, problem_impact: Option<String>) -> Map<String, Value> {
    let mut labels = tags_to_labels(tags);
    for (name, text) in [("problem_id", problem_id), ("problem_impact", problem_impact)] {
        if let Some(text) = text {
            labels.insert(name.to_owned(), Value::String(text));
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;

    const SOURCE: Source = Source::SourceH;

    #[test]
    fn open_problem() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "-4711862830151459123_1795161300000V2");
        assert_eq!(alert.group_key, alert.key);
        assert_eq!(alert.title, "Response time degradation");
        assert_eq!(
            alert.detail.as_deref(),
            Some("Response time degradation on Web service search-api")
        );
        assert_eq!(alert.service.as_deref(), Some("search-api"));
        assert_eq!(alert.environment.as_deref(), Some("prod"));
        assert_eq!(alert.severity.as_deref(), Some("warning"));
        assert_eq!(alert.fired_at, utc("2026-11-20T07:55:00Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "open");
        assert!(alert
            .source_url
            .as_deref()
            .is_some_and(|url| url.ends_with("pid=-4711862830151459123_1795161300000V2")));
        assert_eq!(alert.labels.get("problem_id"), Some(&json!("P-2611487")));
        assert_eq!(alert.labels.get("team"), Some(&json!("discovery")));
    }

    #[test]
    fn related_problem_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "-2297340015568102746_1795161480000V2");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.title, "Failure rate increase");
        assert_eq!(related.severity.as_deref(), Some("critical"));
        assert_eq!(related.fired_at, utc("2026-11-20T07:58:00Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn resolved_problem_shares_the_pid() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "resolved");
        // The template carries no end time, so fired-at stays the problem's start.
        assert_eq!(resolved.fired_at, utc("2026-11-20T07:55:00Z"));
    }

    #[test]
    fn service_falls_back_to_tags_as_string_or_list() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/ImpactedEntities");
        assert_eq!(parse_one(SOURCE, &payload).service.as_deref(), Some("search-api"));
        let payload = with(payload, "/Tags", json!(["env:prod", "service:search-api-v2"]));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("search-api-v2"));
        assert_eq!(alert.environment.as_deref(), Some("prod"));
    }

    #[test]
    fn non_service_entities_are_skipped() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/ImpactedEntities",
            json!([{"type": "HOST", "name": "es-node-3"}, null, {"type": "service", "name": "search-gw"}]),
        );
        assert_eq!(parse_one(SOURCE, &payload).service.as_deref(), Some("search-gw"));
    }

    #[test]
    fn numeric_pid_and_start_time_as_string() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/PID", json!(4711862830151459_i64));
        let payload = with(payload, "/StartTime", json!("1795161300000"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "4711862830151459");
        assert_eq!(alert.fired_at, utc("2026-11-20T07:55:00Z"));
    }

    #[test]
    fn tags_with_their_context_and_a_problem_without_pid() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/Tags",
            json!("[Environment]service:search-api, [Kubernetes]env:production"),
        );
        let payload = without(payload, "/ImpactedEntities");
        let payload = without(payload, "/PID");
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.service.as_deref(), Some("search-api"));
        assert_eq!(alert.environment.as_deref(), Some("production"));
        assert_eq!(
            alert.key,
            fixture(SOURCE, Fixture::Firing)["ProblemID"].as_str().unwrap()
        );
    }

    #[test]
    fn a_blank_pid_reads_as_absent() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/PID", json!(""));
        assert_eq!(
            parse_one(SOURCE, &payload).key,
            fixture(SOURCE, Fixture::Firing)["ProblemID"].as_str().unwrap()
        );
    }

    #[test]
    fn every_problem_severity_is_mapped() {
        for (given, expected) in [
            ("AVAILABILITY", "critical"),
            ("ERROR", "critical"),
            ("PERFORMANCE", "warning"),
            ("RESOURCE_CONTENTION", "warning"),
            ("CUSTOM_ALERT", "warning"),
            ("MONITORING_UNAVAILABLE", "warning"),
            ("INFO", "info"),
        ] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/ProblemSeverity", json!(given));
            assert_eq!(
                parse_one(SOURCE, &payload).severity.as_deref(),
                Some(expected),
                "{given}"
            );
        }
    }

    #[test]
    fn missing_optional_fields_fall_back() {
        let alert = parse_one(
            SOURCE,
            &json!({"PID": "p1", "ProblemID": "P-1", "ProblemSeverity": "CUSTOM_ALERT"}),
        );
        assert_eq!(alert.title, "Problem P-1");
        assert_eq!(alert.severity.as_deref(), Some("warning"));
        assert_eq!(alert.fired_at, received_at());
        assert_eq!(alert.state, "open");
        assert_eq!((alert.service, alert.detail, alert.environment), (None, None, None));
    }

    #[test]
    fn rejects_bodies_without_a_pid() {
        assert_rejects_non_objects(SOURCE);
        assert_error(
            SOURCE,
            &json!({}),
            "missing field: one of `PID`, `ProblemID` is required",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/PID", json!({"id": "x"})),
            "field `PID` must be a string or a number, not an object",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/StartTime",
                json!("abc"),
                "field `StartTime` must be an RFC 3339 time or epoch milliseconds, not \"abc\"",
            ),
            (
                "/Tags",
                json!(42),
                "field `Tags` must be a comma-separated string or an array, not a number",
            ),
            (
                "/ImpactedEntities",
                json!({"type": "SERVICE", "name": "search-api"}),
                "field `ImpactedEntities` must be an array, not an object",
            ),
            (
                "/ImpactedEntities",
                json!([{"type": "HOST", "name": "es-node-3"}, "junk"]),
                "field `ImpactedEntities[1]` must be an object, not a string",
            ),
            (
                "/ImpactedEntities/0/name",
                json!({"id": "SERVICE-1"}),
                "field `ImpactedEntities[0].name` must be a string or a number, not an object",
            ),
            (
                "/ProblemTitle",
                json!(true),
                "field `ProblemTitle` must be a string or a number, not a boolean",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }

    #[test]
    fn unset_start_time_falls_back_to_receipt() {
        for unset in [json!(-1), json!("-1"), json!(0), json!("")] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/StartTime", unset.clone());
            assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at(), "{unset}");
        }
    }
}
