use chrono::{DateTime, NaiveTime, TimeZone, Utc, Weekday};
use cqrs_es::test::{AggregateResultValidator, TestFramework};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::*;
use MatchOp::{Equal, NotEqual, NotRegex, Regex};

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn time(h: u32, m: u32) -> NaiveTime {
    NaiveTime::from_hms_opt(h, m, 0).unwrap()
}

fn m(name: &str, op: MatchOp, value: &str) -> Matcher {
    Matcher {
        name: name.into(),
        op,
        value: value.into(),
    }
}

fn labels(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("labels are an object")
}

fn facts(labels: &Map<String, Value>) -> AlertFacts<'_> {
    AlertFacts {
        source: "prometheus",
        service: Some("checkout-api"),
        environment: None,
        severity: Some("critical"),
        title: "High latency on checkout",
        labels,
    }
}

fn matches(matcher: Matcher, alert: &AlertFacts<'_>) -> bool {
    CompiledMatcher::new(&matcher).unwrap().matches(alert)
}

fn window() -> Schedule {
    Schedule::Window {
        starts_at: utc(2026, 11, 20, 14, 0),
        ends_at: utc(2026, 11, 20, 16, 0),
    }
}

fn weekly(time_zone: &str, days: &[Weekday], start: NaiveTime, end: NaiveTime) -> Schedule {
    Schedule::Weekly {
        starts_at: utc(2026, 1, 1, 0, 0),
        ends_at: None,
        time_zone: time_zone.into(),
        days: days.to_vec(),
        start,
        end,
    }
}

/// `schedule` (weekly) applying from `from` until `until`.
fn bounded(mut schedule: Schedule, from: DateTime<Utc>, until: Option<DateTime<Utc>>) -> Schedule {
    if let Schedule::Weekly { starts_at, ends_at, .. } = &mut schedule {
        (*starts_at, *ends_at) = (from, until);
    }
    schedule
}

fn definition(matchers: Vec<Matcher>, schedule: Schedule) -> SilenceDefinition {
    SilenceDefinition {
        matchers,
        schedule,
        comment: "deploying checkout".into(),
    }
}

fn checkout_silence() -> SilenceDefinition {
    definition(vec![m("service", Equal, "checkout-api")], window())
}

fn field_at_fault(definition: &SilenceDefinition) -> String {
    definition.validate().unwrap_err().field
}

#[test]
fn each_operator_tests_fields_and_labels() {
    let labels = labels(json!({"team": "payments", "region": "eu-west-1"}));
    let alert = facts(&labels);
    assert!(matches(m("service", Equal, "checkout-api"), &alert));
    assert!(!matches(m("service", Equal, "Checkout-API"), &alert));
    assert!(matches(m("severity", NotEqual, "warning"), &alert));
    assert!(!matches(m("severity", NotEqual, "critical"), &alert));
    assert!(matches(m("title", Regex, "High latency.*"), &alert));
    assert!(matches(m("source", NotRegex, "datadog|grafana"), &alert));
    assert!(!matches(m("source", NotRegex, "prom.*"), &alert));
    assert!(matches(m("team", Equal, "payments"), &alert));
    assert!(matches(m("region", Regex, "eu-.*"), &alert));
    assert!(!matches(m("region", Regex, "us-.*"), &alert));
}

#[test]
fn an_absent_field_or_label_is_the_empty_string() {
    let labels = labels(json!({"owner": null}));
    let alert = facts(&labels);
    // `environment` is None, `team` is missing and `owner` is null.
    for name in ["environment", "team", "owner"] {
        assert!(matches(m(name, Equal, ""), &alert), "{name}");
        assert!(matches(m(name, NotEqual, "x"), &alert), "{name}");
        assert!(!matches(m(name, Equal, "x"), &alert), "{name}");
        assert!(!matches(m(name, NotEqual, ""), &alert), "{name}");
        assert!(matches(m(name, Regex, ".*"), &alert), "{name}");
        assert!(!matches(m(name, Regex, ".+"), &alert), "{name}");
        assert!(matches(m(name, NotRegex, "a.*"), &alert), "{name}");
    }
    let equal_empty = CompiledMatcher::new(&m("team", Equal, "")).unwrap();
    assert!(equal_empty.matches_empty());
    let not_regex_any = CompiledMatcher::new(&m("team", NotRegex, ".*")).unwrap();
    assert!(!not_regex_any.matches_empty());
}

#[test]
fn labels_that_are_not_strings_compare_as_their_json_text() {
    let labels = labels(json!({
        "replicas": 3, "ratio": 2.5, "canary": true, "zones": ["a", "b"], "meta": {"k": 1}
    }));
    let alert = facts(&labels);
    assert!(matches(m("replicas", Equal, "3"), &alert));
    assert!(matches(m("replicas", Regex, "[0-9]+"), &alert));
    assert!(matches(m("ratio", Equal, "2.5"), &alert));
    assert!(matches(m("canary", Equal, "true"), &alert));
    assert!(matches(m("canary", NotEqual, "false"), &alert));
    assert!(matches(m("zones", Equal, r#"["a","b"]"#), &alert));
    assert!(matches(m("meta", Equal, r#"{"k":1}"#), &alert));
}

#[test]
fn regexes_are_fully_anchored_and_cannot_escape_the_anchors() {
    let labels = labels(json!({"host": "xdb1"}));
    assert!(!matches(m("host", Regex, "db.*"), &facts(&labels)));
    assert!(matches(m("host", NotRegex, "db.*"), &facts(&labels)));
    let labels = self::labels(json!({"host": "db1"}));
    assert!(matches(m("host", Regex, "db.*"), &facts(&labels)));
    assert!(!matches(m("host", Regex, "db"), &facts(&labels)));
    // Alternation stays inside the anchors: `a|b` is `^(?:a|b)$`.
    let labels = self::labels(json!({"host": "ab"}));
    assert!(!matches(m("host", Regex, "a|b"), &facts(&labels)));
    // Unbalanced groups would otherwise turn `^(?:a)|(.*)$` into match-everything.
    assert!(CompiledMatcher::new(&m("host", Regex, "a)|(.*")).is_err());
}

#[test]
fn an_invalid_or_oversized_regex_names_its_matcher() {
    let refused = definition(
        vec![m("service", Equal, "checkout-api"), m("host", Regex, "db(1")],
        window(),
    )
    .validate()
    .unwrap_err();
    assert_eq!(refused.field, "matchers[1].value");
    assert!(refused.message.contains("unclosed group"), "{}", refused.message);
    let huge = definition(vec![m("host", NotRegex, "(a{1000}){1000}")], window());
    let refused = huge.validate().unwrap_err();
    assert_eq!(refused.field, "matchers[0].value");
    assert!(refused.message.contains("size limit"), "{}", refused.message);
}

#[test]
fn matchers_that_all_match_the_empty_string_are_refused() {
    let everything = definition(
        vec![
            m("team", Equal, ""),
            m("service", Regex, ".*"),
            m("env", NotEqual, "prod"),
            m("region", NotRegex, "us-.+"),
        ],
        window(),
    );
    assert_eq!(field_at_fault(&everything), "matchers");
    let mut narrowed = everything.clone();
    narrowed.matchers.push(m("service", Regex, "checkout-.*"));
    assert_eq!(narrowed.validate(), Ok(()));
}

#[test]
fn matcher_counts_names_values_and_the_comment_are_bounded() {
    assert_eq!(field_at_fault(&definition(vec![], window())), "matchers");
    let many = vec![m("service", Equal, "a"); MAX_MATCHERS + 1];
    assert_eq!(field_at_fault(&definition(many, window())), "matchers");
    let blank = vec![m("service", Equal, "a"), m("  ", Equal, "a")];
    assert_eq!(field_at_fault(&definition(blank, window())), "matchers[1].name");
    let long_name = vec![m(&"n".repeat(MAX_NAME_CHARS + 1), Equal, "a")];
    assert_eq!(field_at_fault(&definition(long_name, window())), "matchers[0].name");
    let long_value = vec![m("service", Equal, &"é".repeat(MAX_VALUE_CHARS + 1))];
    assert_eq!(field_at_fault(&definition(long_value, window())), "matchers[0].value");
    let at_limit = vec![m("service", Equal, &"é".repeat(MAX_VALUE_CHARS))];
    assert_eq!(definition(at_limit, window()).validate(), Ok(()));
    let mut chatty = checkout_silence();
    chatty.comment = "c".repeat(MAX_COMMENT_CHARS + 1);
    assert_eq!(field_at_fault(&chatty), "comment");
}

#[test]
fn a_fixed_window_is_pending_then_active_then_expired() {
    let schedule = window();
    assert_eq!(schedule.state(utc(2026, 11, 20, 13, 59)), ScheduleState::Pending);
    assert_eq!(schedule.state(utc(2026, 11, 20, 14, 0)), ScheduleState::Active);
    assert!(schedule.is_active(utc(2026, 11, 20, 15, 59)));
    assert_eq!(schedule.state(utc(2026, 11, 20, 16, 0)), ScheduleState::Expired);
    let backwards = Schedule::Window {
        starts_at: utc(2026, 11, 20, 16, 0),
        ends_at: utc(2026, 11, 20, 16, 0),
    };
    assert_eq!(
        field_at_fault(&definition(checkout_silence().matchers, backwards)),
        "endsAt"
    );
}

#[test]
fn a_weekly_window_runs_past_midnight_into_the_next_day() {
    // Saturday 22:00 to 02:00 in UTC; 2026-11-21 is a Saturday.
    let schedule = weekly("UTC", &[Weekday::Sat], time(22, 0), time(2, 0));
    assert_eq!(schedule.state(utc(2026, 11, 21, 21, 59)), ScheduleState::Pending);
    assert_eq!(schedule.state(utc(2026, 11, 21, 22, 0)), ScheduleState::Active);
    assert!(schedule.is_active(utc(2026, 11, 21, 23, 59)));
    assert!(schedule.is_active(utc(2026, 11, 22, 0, 0)));
    assert!(schedule.is_active(utc(2026, 11, 22, 1, 59)));
    assert_eq!(schedule.state(utc(2026, 11, 22, 2, 0)), ScheduleState::Pending);
    // Sunday evening is not Saturday; Saturday morning follows Friday, not listed.
    assert!(!schedule.is_active(utc(2026, 11, 22, 23, 0)));
    assert!(!schedule.is_active(utc(2026, 11, 21, 1, 0)));
    // Next week again.
    assert!(schedule.is_active(utc(2026, 11, 28, 23, 0)));
}

#[test]
fn a_weekly_window_is_bounded_by_starts_at_and_ends_at() {
    let bounded = bounded(
        weekly("UTC", &[Weekday::Sat], time(22, 0), time(2, 0)),
        utc(2026, 11, 21, 23, 0),
        Some(utc(2026, 11, 28, 23, 0)),
    );
    assert_eq!(bounded.state(utc(2026, 11, 21, 22, 30)), ScheduleState::Pending);
    assert_eq!(bounded.state(utc(2026, 11, 21, 23, 30)), ScheduleState::Active);
    assert_eq!(bounded.state(utc(2026, 11, 24, 12, 0)), ScheduleState::Pending);
    assert_eq!(bounded.state(utc(2026, 11, 28, 22, 30)), ScheduleState::Active);
    assert_eq!(bounded.state(utc(2026, 11, 28, 23, 0)), ScheduleState::Expired);
}

#[test]
fn weekly_slots_keep_local_wall_clock_hours_across_dst() {
    // Europe/Berlin moves from CET (+1) to CEST (+2) on Sunday 2026-03-29 at 02:00.
    let office = weekly("Europe/Berlin", &[Weekday::Sat, Weekday::Mon], time(9, 0), time(17, 0));
    // Saturday before: 09:00-17:00 CET is 08:00-16:00 UTC.
    assert!(!office.is_active(utc(2026, 3, 28, 7, 59)));
    assert!(office.is_active(utc(2026, 3, 28, 8, 0)));
    assert!(!office.is_active(utc(2026, 3, 28, 16, 0)));
    // Monday after: 09:00-17:00 CEST is 07:00-15:00 UTC.
    assert!(!office.is_active(utc(2026, 3, 30, 6, 59)));
    assert!(office.is_active(utc(2026, 3, 30, 7, 0)));
    assert!(office.is_active(utc(2026, 3, 30, 14, 59)));
    assert!(!office.is_active(utc(2026, 3, 30, 15, 0)));

    // 02:30 does not exist that Sunday: the 02:30-03:00 slot is simply empty, without panicking.
    let skipped = weekly("Europe/Berlin", &[Weekday::Sun], time(2, 30), time(3, 0));
    let compiled = definition(checkout_silence().matchers, skipped.clone())
        .compile(Uuid::nil())
        .unwrap();
    let day_start = utc(2026, 3, 28, 22, 0);
    let active_minutes = (0..24 * 60)
        .map(|minute| day_start + chrono::Duration::minutes(minute))
        .filter(|at| compiled.is_active(*at) || skipped.is_active(*at))
        .count();
    assert_eq!(active_minutes, 0);
    // A week later it is there again.
    assert!(compiled.is_active(utc(2026, 4, 5, 0, 45)));

    // 02:00-03:00 happens twice on 2026-10-25 (back to CET): the slot is active both times.
    let repeated = weekly("Europe/Berlin", &[Weekday::Sun], time(2, 0), time(3, 0));
    assert!(repeated.is_active(utc(2026, 10, 25, 0, 30)));
    assert!(repeated.is_active(utc(2026, 10, 25, 1, 30)));
    assert!(!repeated.is_active(utc(2026, 10, 25, 2, 0)));
}

#[test]
fn a_weekly_schedule_needs_a_known_zone_distinct_days_and_a_span() {
    let matchers = checkout_silence().matchers;
    let unknown = weekly("Mars/Olympus_Mons", &[Weekday::Sat], time(22, 0), time(2, 0));
    let refused = definition(matchers.clone(), unknown.clone()).validate().unwrap_err();
    assert_eq!(refused.field, "weekly.timeZone");
    assert!(refused.message.contains("Mars/Olympus_Mons"));
    // Evaluated anyway (it was never validated), it never hides an alert.
    assert_eq!(unknown.state(utc(2026, 11, 21, 23, 0)), ScheduleState::Pending);

    let no_days = weekly("UTC", &[], time(22, 0), time(2, 0));
    assert_eq!(field_at_fault(&definition(matchers.clone(), no_days)), "weekly.days");
    let twice = weekly(
        "UTC",
        &[Weekday::Sat, Weekday::Sun, Weekday::Sat],
        time(22, 0),
        time(2, 0),
    );
    assert_eq!(field_at_fault(&definition(matchers.clone(), twice)), "weekly.days");
    let empty_span = weekly("UTC", &[Weekday::Sat], time(22, 0), time(22, 0));
    assert_eq!(field_at_fault(&definition(matchers.clone(), empty_span)), "weekly.end");
    let from = utc(2026, 11, 21, 23, 0);
    let ended_before_start = bounded(
        weekly("UTC", &[Weekday::Sat], time(22, 0), time(2, 0)),
        from,
        Some(from),
    );
    assert_eq!(field_at_fault(&definition(matchers, ended_before_start)), "endsAt");
}

#[test]
fn a_compiled_silence_needs_every_matcher_and_its_schedule() {
    let silence = definition(
        vec![m("service", Equal, "checkout-api"), m("team", Regex, "pay.*")],
        window(),
    );
    let id = Uuid::new_v4();
    let compiled = silence.compile(id).unwrap();
    assert_eq!(compiled.id, id);
    let payments = labels(json!({"team": "payments"}));
    let search = labels(json!({"team": "search"}));
    assert!(compiled.matches(&facts(&payments)));
    assert!(!compiled.matches(&facts(&search)));
    assert!(compiled.is_active(utc(2026, 11, 20, 15, 0)));
    assert!(!compiled.is_active(utc(2026, 11, 20, 16, 0)));
    assert_eq!(compiled.state(utc(2026, 11, 20, 16, 0)), ScheduleState::Expired);
    let invalid = definition(vec![m("team", Equal, "")], window());
    assert_eq!(invalid.compile(id).unwrap_err().field, "matchers");
}

#[test]
fn the_definition_is_stored_as_tagged_json() {
    let schedule = weekly("Europe/Berlin", &[Weekday::Sat], time(22, 0), time(2, 0));
    let stored = serde_json::to_value(definition(vec![m("team", NotRegex, "a")], schedule.clone())).unwrap();
    assert_eq!(stored["schedule"]["kind"], "weekly");
    assert_eq!(stored["schedule"]["time_zone"], "Europe/Berlin");
    assert_eq!(stored["matchers"][0]["op"], "not_regex");
    let back: SilenceDefinition = serde_json::from_value(stored).unwrap();
    assert_eq!(back.schedule, schedule);
    assert_eq!(serde_json::to_value(ScheduleState::Active).unwrap(), "active");
}

const ID: Uuid = Uuid::from_u128(0x51);

fn create(definition: SilenceDefinition) -> SilenceCommand {
    SilenceCommand::Create {
        silence_id: ID,
        user_id: "owner".into(),
        definition,
        created_by: "alice@example.com".into(),
        at: utc(2026, 11, 20, 13, 0),
    }
}

fn created() -> SilenceEvent {
    SilenceEvent::SilenceCreated {
        silence_id: ID,
        user_id: "owner".into(),
        definition: checkout_silence(),
        created_by: "alice@example.com".into(),
        at: utc(2026, 11, 20, 13, 0),
    }
}

fn when(given: Vec<SilenceEvent>, command: SilenceCommand) -> AggregateResultValidator<Silence> {
    TestFramework::<Silence>::with(()).given(given).when(command)
}

fn expire(user_id: &str, at: DateTime<Utc>) -> SilenceCommand {
    SilenceCommand::Expire {
        user_id: user_id.into(),
        expired_by: "bob@example.com".into(),
        at,
    }
}

fn expired(at: DateTime<Utc>) -> SilenceEvent {
    SilenceEvent::SilenceExpired {
        expired_by: "bob@example.com".into(),
        at,
    }
}

#[test]
fn a_silence_is_created_once_and_only_when_valid() {
    when(vec![], create(checkout_silence())).then_expect_events(vec![created()]);
    when(vec![created()], create(checkout_silence())).then_expect_error(SilenceError::AlreadyExists);
    let everything = definition(vec![m("team", Regex, ".*")], window());
    let refusal = everything.validate().unwrap_err();
    when(vec![], create(everything)).then_expect_error(SilenceError::Invalid(refusal));
}

#[test]
fn expiring_is_idempotent_and_only_for_its_owner() {
    let during = utc(2026, 11, 20, 15, 0);
    when(vec![created()], expire("owner", during)).then_expect_events(vec![expired(during)]);
    when(
        vec![created(), expired(during)],
        expire("owner", utc(2026, 11, 20, 15, 30)),
    )
    .then_expect_events(vec![]);
    // Pending silences can be expired too (cancelled before they start).
    when(vec![created()], expire("owner", utc(2026, 11, 20, 13, 30)))
        .then_expect_events(vec![expired(utc(2026, 11, 20, 13, 30))]);
    // The window already ended: nothing to end.
    when(vec![created()], expire("owner", utc(2026, 11, 20, 16, 0))).then_expect_events(vec![]);
    when(vec![created()], expire("intruder", during)).then_expect_error(SilenceError::NotFound);
    when(vec![], expire("owner", during)).then_expect_error(SilenceError::NotFound);
}
