//! source_f: CI server build/deploy notification. One build is one event; a later successful build of the same
//! service and environment resolves an earlier failure, hence the `service@environment` group key.

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

/// `None` for a build still running (no `result`, an in-progress `phase`) or one that was not built
/// (`NOT_BUILT`: skipped, say, after an upstream failure): it reports no outcome, so it neither
/// opens an incident nor resolves one.
pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<Option<NormalizedAlert>, ParseError> {
    let root = Obj::root(payload)?;
    let job_name = root.require_id("job_name")?;
    let build_number = root.require_integer("build_number")?;
    let service = root.text("service")?;
    let environment = root.text("environment")?;
    let result = root.word("result")?;
    let phase = root.word("phase")?;
    let no_outcome = match result.as_deref() {
        Some(result) => is_deployment_in_progress(result),
        None => phase.as_deref().is_some_and(is_deployment_in_progress),
    };
    if no_outcome {
        return Ok(None);
    }
    let title = title(
        &job_name,
        build_number,
        service.as_deref(),
        environment.as_deref(),
        result.as_deref(),
        phase.as_deref(),
    );

    let link = root.text("build_url")?;
    Ok(Some(NormalizedAlert {
        source: Source::SourceF,
        kind: AlertKind::Deployment,
        key: format!("{job_name}#{build_number}"),
        group_key: deployment_group_key(service.as_deref().unwrap_or(&job_name), environment.as_deref()),
        detail: unless_same_as(root.text("message")?, &title),
        title,
        service,
        environment,
        severity: result.as_deref().and_then(deployment_severity),
        fired_at: fired_at(&root)?.unwrap_or(received_at),
        resolved: result.as_deref().is_some_and(is_deployment_success),
        // A notification sent before the build finished has no result yet, only its phase.
        state: result
            .or(phase)
            .map_or_else(|| "unknown".to_owned(), |word| word.to_lowercase()),
        account: account::organisation(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: Some(job_name),
        labels: labels(&root)?,
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    }))
}

/// `"inventory-service deploy to production failed (deploy-production #1842)"`.
fn title(
    job_name: &str,
    build_number: i64,
    service: Option<&str>,
    environment: Option<&str>,
    result: Option<&str>,
    phase: Option<&str>,
) -> String {
    let subject = service.unwrap_or(job_name);
    let target = environment
        .map(|environment| format!(" to {environment}"))
        .unwrap_or_default();
    let outcome = result.map_or_else(
        || phase.map_or_else(|| "reported".to_owned(), str::to_lowercase),
        outcome_phrase,
    );
    let job = job_name.rsplit_once('/').map_or(job_name, |(_, leaf)| leaf);
    format!("{subject} deploy{target} {outcome} ({job} #{build_number})")
}

fn outcome_phrase(result: &str) -> String {
    match result.trim().to_uppercase().as_str() {
        "FAILURE" => "failed".to_owned(),
        "SUCCESS" => "succeeded".to_owned(),
        "NOT_BUILT" => "was not built".to_owned(),
        _ => result.trim().to_lowercase(),
    }
}

/// The build's end: `timestamp` is its start in epoch milliseconds, plus `duration_ms` when present.
/// A duration out of range is refused, not skipped: `1e15` once put a build in the year 33715,
/// where its incident sorted first for good.
fn fired_at(root: &Obj<'_>) -> Result<Option<DateTime<Utc>>, ParseError> {
    let started = root.time("timestamp", EpochUnit::Millis)?;
    let duration = root.duration_millis("duration_ms", MAX_BUILD_MILLIS, MAX_BUILD_EXPECTED)?;
    match (started, duration) {
        (Some(started), Some(duration)) => root.after_millis(started, "duration_ms", duration).map(Some),
        (started, _) => Ok(started),
    }
}

/// The longest build a duration may describe: 30 days (a build paused for approval may take days;
/// none takes a month).
const MAX_BUILD_MILLIS: i64 = 30 * 24 * 3_600 * 1_000;
const MAX_BUILD_EXPECTED: &str = "a duration in milliseconds from 0 to 2592000000 (30 days)";

fn labels(root: &Obj<'_>) -> Result<Map<String, Value>, ParseError> {
    let git = root.object_or_empty("git")?;
    Ok(present_labels([
        ("deployer", root.text("deployer")?),
        ("version", root.text("version")?),
        ("phase", root.text("phase")?),
        ("branch", git.text("branch")?),
        ("commit", git.text("commit_sha")?),
        ("repository", git.text("repository")?),
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

    const SOURCE: Source = Source::SourceF;

    #[test]
    fn failed_deployment() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.kind, AlertKind::Deployment);
        assert_eq!(alert.key, "inventory-service/deploy-production#1842");
        assert_eq!(alert.group_key, "inventory-service@production");
        assert_eq!(
            alert.title,
            "inventory-service deploy to production failed (deploy-production #1842)"
        );
        assert!(alert
            .detail
            .as_deref()
            .is_some_and(|detail| detail.starts_with("Stage 'helm upgrade' failed")));
        assert_eq!(alert.service.as_deref(), Some("inventory-service"));
        assert_eq!(alert.environment.as_deref(), Some("production"));
        assert_eq!(alert.severity.as_deref(), Some("critical"));
        // Started 17:44:51 (the README table), ran 184.233 s.
        assert_eq!(alert.fired_at, utc("2026-11-20T17:47:55.233Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "failure");
        assert_eq!(
            alert.source_url.as_deref(),
            Some("https://jenkins.example.com/job/inventory-service/job/deploy-production/1842/")
        );
        assert_eq!(alert.rule_name.as_deref(), Some("inventory-service/deploy-production"));
        assert_eq!(alert.labels.get("deployer"), Some(&json!("maria.chen")));
        assert_eq!(alert.labels.get("branch"), Some(&json!("main")));
    }

    #[test]
    fn related_build_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "inventory-service/deploy-production#1843");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.group_key, firing.group_key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.fired_at, utc("2026-11-20T17:54:23.870Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn later_success_resolves_the_group() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, "inventory-service/deploy-production#1844");
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "success");
        assert_eq!(resolved.severity.as_deref(), Some("info"));
        assert_eq!(
            resolved.title,
            "inventory-service deploy to production succeeded (deploy-production #1844)"
        );
        assert_eq!(resolved.fired_at, utc("2026-11-20T18:22:57.405Z"));
    }

    #[test]
    fn unstable_and_aborted_builds_are_warnings() {
        for result in ["UNSTABLE", "ABORTED"] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/result", json!(result));
            let alert = parse_one(SOURCE, &payload);
            assert_eq!(alert.severity.as_deref(), Some("warning"));
            assert!(!alert.resolved);
            assert_eq!(alert.state, result.to_lowercase());
        }
    }

    #[test]
    fn build_number_and_times_as_strings() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/build_number", json!("1842"));
        let payload = with(payload, "/timestamp", json!("1795196691000"));
        let payload = with(payload, "/duration_ms", json!("184233"));
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.key, "inventory-service/deploy-production#1842");
        assert_eq!(alert.fired_at, utc("2026-11-20T17:47:55.233Z"));
    }

    #[test]
    fn fired_at_is_the_start_without_a_duration_and_receipt_without_a_timestamp() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/duration_ms");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T17:44:51Z"));
        let payload = without(payload, "/timestamp");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn a_build_still_running_reports_nothing() {
        for phase in ["STARTED", "queued", "Running"] {
            let payload = json!({"job_name": "deploy-api", "build_number": 7, "phase": phase, "result": null});
            assert_eq!(
                super::super::parse(SOURCE, &payload, received_at()).unwrap(),
                vec![],
                "{phase}"
            );
        }
    }

    #[test]
    fn a_build_that_was_not_built_reports_nothing() {
        for result in ["NOT_BUILT", "not_built"] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/result", json!(result));
            assert_eq!(
                super::super::parse(SOURCE, &payload, received_at()).unwrap(),
                vec![],
                "{result}"
            );
        }
    }

    #[test]
    fn a_finished_phase_without_result_is_still_reported() {
        let payload = json!({"job_name": "deploy-api", "build_number": 7, "phase": "COMPLETED"});
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.title, "deploy-api deploy completed (deploy-api #7)");
        assert_eq!(alert.group_key, "deploy-api");
        assert_eq!(alert.state, "completed");
        assert_eq!(alert.severity, None);
        assert!(!alert.resolved);
    }

    #[test]
    fn rejects_bodies_without_job_and_build() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `job_name`");
        assert_error(
            SOURCE,
            &without(fixture(SOURCE, Fixture::Firing), "/build_number"),
            "missing field `build_number`",
        );
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/build_number", json!({"n": 1})),
            "field `build_number` must be an integer or a numeric string, not an object",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/build_number",
                json!("abc"),
                "field `build_number` must be an integer or a numeric string, not \"abc\"",
            ),
            (
                "/build_number",
                json!(1e300),
                "field `build_number` must be an integer or a numeric string, not 1e+300",
            ),
            (
                "/build_number",
                json!(18.5),
                "field `build_number` must be an integer or a numeric string, not 18.5",
            ),
            (
                "/timestamp",
                json!("last tuesday"),
                "field `timestamp` must be an RFC 3339 time or epoch milliseconds, not \"last tuesday\"",
            ),
            (
                "/duration_ms",
                json!("long"),
                "field `duration_ms` must be an integer or a numeric string, not \"long\"",
            ),
            (
                "/duration_ms",
                json!({"ms": 1}),
                "field `duration_ms` must be an integer or a numeric string, not an object",
            ),
            ("/git", json!("main"), "field `git` must be an object, not a string"),
            (
                "/result",
                json!(false),
                "field `result` must be a string, not a boolean",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/build_number", json!(" ")),
            "field `build_number` must not be empty",
        );
    }

    #[test]
    fn whole_build_numbers_in_any_form_give_the_same_key() {
        for build_number in [json!(1842), json!(1842.0), json!(" 1842 "), json!("1842.0")] {
            let payload = with(fixture(SOURCE, Fixture::Firing), "/build_number", build_number);
            assert_eq!(
                parse_one(SOURCE, &payload).key,
                "inventory-service/deploy-production#1842"
            );
        }
    }
}
