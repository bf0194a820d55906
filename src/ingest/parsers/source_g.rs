//! source_g: CI/CD product deployment event. One pipeline run is one event; a later successful run of the same
//! application and environment resolves an earlier failure, hence the `application@environment` group key.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{
    tags::present_labels,
    time::EpochUnit,
    value::Obj,
    vocabulary::{
        deployment_group_key, deployment_severity, is_deployment_in_progress, is_deployment_success, unless_same_as,
    },
};

/// `None` for a run still in progress (`RUNNING`, `STARTED`...): it reports no outcome, so it
/// neither opens an incident nor resolves one.
pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<Option<NormalizedAlert>, ParseError> {
    let root = Obj::root(payload)?;
    let pipeline = root.require_object("pipeline")?;
    let key = pipeline.require_id("run_id")?;
    let application = root.text("application")?;
    let environment = root.text("environment")?;
    let pipeline_name = pipeline.text("name")?;
    let status = pipeline.word("status")?;
    if status.as_deref().is_some_and(is_deployment_in_progress) {
        return Ok(None);
    }
    let title = title(
        pipeline_name.as_deref(),
        application.as_deref(),
        status.as_deref(),
        &key,
    );
    let group_subject = application.as_deref().or(pipeline_name.as_deref()).unwrap_or(&key);

    let link = pipeline.text("url")?;
    Ok(Some(NormalizedAlert {
        source: Source::SourceG,
        kind: AlertKind::Deployment,
        group_key: deployment_group_key(group_subject, environment.as_deref()),
        key,
        detail: unless_same_as(root.text("message")?, &title),
        title,
        service: application,
        environment,
        severity: status.as_deref().and_then(deployment_severity),
        fired_at: root
            .time("finished_at", EpochUnit::Seconds)?
            .or(root.time("started_at", EpochUnit::Seconds)?)
            .unwrap_or(received_at),
        resolved: status.as_deref().is_some_and(is_deployment_success),
        state: status.map_or_else(|| "unknown".to_owned(), |status| status.to_lowercase()),
        account: account::organisation(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: pipeline_name,
        labels: labels(&root)?,
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    }))
}

/// Pipeline name and status, e.g. `"orders-api-deploy-production failed"`.
fn title(pipeline_name: Option<&str>, application: Option<&str>, status: Option<&str>, run_id: &str) -> String {
    let subject = match (pipeline_name, application) {
        (Some(name), _) => name.to_owned(),
        (None, Some(application)) => format!("{application} deployment"),
        (None, None) => format!("Deployment run {run_id}"),
    };
    match status {
        Some(status) => format!("{subject} {}", status.to_lowercase()),
        None => subject,
    }
}

fn labels(root: &Obj<'_>) -> Result<Map<String, Value>, ParseError> {
    let commit = root.object_or_empty("commit")?;
    Ok(present_labels([
        ("triggered_by", root.text("triggered_by")?),
        ("failed_stage", root.text("failed_stage")?),
        ("branch", commit.text("branch")?),
        ("commit", commit.text("sha")?),
        ("repository", commit.text("repo_url")?),
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::{AlertKind, Source};

    const SOURCE: Source = Source::SourceG;

    #[test]
    fn failed_pipeline_run() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.kind, AlertKind::Deployment);
        assert_eq!(alert.key, "01JD4T2K9M5Q7W3E8R1Y6U0BNC");
        assert_eq!(alert.group_key, "orders-api@production");
        assert_eq!(alert.title, "orders-api-deploy-production failed");
        assert_eq!(
            alert.detail.as_deref(),
            Some("Canary analysis failed: orders-api canary 5xx rate 4.1% vs baseline 0.2%")
        );
        assert_eq!(alert.service.as_deref(), Some("orders-api"));
        assert_eq!(alert.environment.as_deref(), Some("production"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        assert_eq!(alert.fired_at, utc("2026-11-20T13:27:41Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "failed");
        assert_eq!(alert.rule_name.as_deref(), Some("orders-api-deploy-production"));
        assert!(alert
            .source_url
            .as_deref()
            .is_some_and(|url| url.ends_with("/runs/01JD4T2K9M5Q7W3E8R1Y6U0BNC")));
        assert_eq!(alert.labels.get("failed_stage"), Some(&json!("canary-verification")));
    }

    #[test]
    fn related_run_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "01JD4TGX3B8N2C6V9M1Z5Q7W4E");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.group_key, firing.group_key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.fired_at, utc("2026-11-20T13:34:55Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn later_success_resolves_the_group() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, "01JD4VB7Q1W8E3R5T2Y9U4I6OP");
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "succeeded");
        assert_eq!(resolved.severity.as_deref(), Some("info"));
        assert_eq!(resolved.title, "orders-api-deploy-production succeeded");
        assert_eq!(resolved.fired_at, utc("2026-11-20T13:56:02Z"));
    }

    #[test]
    fn times_with_offsets_and_start_fallback() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/finished_at",
            json!("2026-11-20T15:27:41.5+02:00"),
        );
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T13:27:41.5Z"));
        let payload = without(payload, "/finished_at");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T13:20:04Z"));
        let payload = without(payload, "/started_at");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn a_run_still_in_progress_reports_nothing() {
        for status in [
            "RUNNING",
            "started",
            "In_Progress",
            "queued",
            "NOT_STARTED",
            "PAUSED",
            "APPROVAL_WAITING",
            "SKIPPED",
        ] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/pipeline/status", json!(status));
            let payload = without(payload, "/finished_at");
            assert_eq!(
                super::super::parse(SOURCE, &payload, received_at()).unwrap(),
                vec![],
                "{status}"
            );
        }
    }

    #[test]
    fn numeric_run_id_and_aborted_status() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/pipeline/run_id", json!(9001));
        let payload = with(payload, "/pipeline/status", json!("ABORTED"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "9001");
        assert_eq!(alert.severity.as_deref(), Some("warning"));
        assert_eq!(alert.title, "orders-api-deploy-production aborted");
    }

    #[test]
    fn failure_words_of_other_products_are_failures() {
        for (status, expected) in [
            ("TERMINAL", "critical"),
            ("TIMED_OUT", "critical"),
            ("EXPIRED", "critical"),
            ("Error", "critical"),
            ("REJECTED", "warning"),
            ("STOPPED", "warning"),
        ] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/pipeline/status", json!(status));
            let alert = parse_one(SOURCE, &payload);
            assert_eq!(alert.severity.as_deref(), Some(expected), "{status}");
            assert!(!alert.resolved, "{status}");
        }
    }

    #[test]
    fn minimal_run() {
        let alert = parse_one(
            SOURCE,
            &json!({"pipeline": {"run_id": "r1"}, "application": "orders-api"}),
        );
        assert_eq!(alert.title, "orders-api deployment");
        assert_eq!(alert.group_key, "orders-api");
        assert_eq!(alert.state, "unknown");
        assert_eq!((alert.severity, alert.environment, alert.detail), (None, None, None));
        assert!(!alert.resolved);
    }

    #[test]
    fn rejects_bodies_without_a_run_id() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `pipeline`");
        assert_error(
            SOURCE,
            &json!({"pipeline": "orders-api-deploy-production"}),
            "field `pipeline` must be an object, not a string",
        );
        assert_error(
            SOURCE,
            &without(fixture(SOURCE, Fixture::Firing), "/pipeline/run_id"),
            "missing field `pipeline.run_id`",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/pipeline/run_id", json!([1])),
            "field `pipeline.run_id` must be a string or a number, not an array",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/finished_at",
                json!("not-a-time"),
                "field `finished_at` must be an RFC 3339 time or epoch seconds, not \"not-a-time\"",
            ),
            (
                "/started_at",
                json!({"at": "2026-11-20T13:20:04Z"}),
                "field `started_at` must be an RFC 3339 time or epoch seconds, not an object",
            ),
            (
                "/pipeline/status",
                json!({"code": "FAILED"}),
                "field `pipeline.status` must be a string, not an object",
            ),
            (
                "/commit",
                json!("e52b7c9"),
                "field `commit` must be an object, not a string",
            ),
            (
                "/application",
                json!(["orders-api", ["x"]]),
                "field `application[1]` must be a string or a number, not an array",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }
}
