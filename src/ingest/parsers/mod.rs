//! Parsers that turn alert and deployment webhook bodies from the nine ingestion sources into one
//! [`NormalizedAlert`] type. Pure functions: no I/O.
//!
//! The per-source rules (key, title, service, severity, fired-at, resolved) follow
//! `tests/fixtures/alerts/README.md`.

// Webhook bodies are untrusted input: nothing in here may panic on them.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)
)]

mod account;
mod source_a;
mod source_b;
mod source_c;
mod source_d;
mod source_e;
mod source_f;
mod source_g;
mod source_h;
mod source_i;
mod tags;
mod time;
mod value;
mod vocabulary;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use vigil_aggregates::source::{AlertKind, Source, UnknownSource};

/// One alert (or deployment event) from any source, in a single shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NormalizedAlert {
    pub source: Source,
    pub kind: AlertKind,
    /// Stable identity of this alert across redeliveries and its own state changes.
    /// Multi-part keys are joined with '/' (source_c `node/chart/alarm`); source_f is `job#build`.
    pub key: String,
    /// What a firing alert and its recovery share. Equal to `key` except for deployments (source_f,
    /// source_g), where it is `"<service>@<environment>"` so that a later success resolves an earlier failure.
    pub group_key: String,
    /// Never empty: composed from other fields when the payload has no title.
    pub title: String,
    pub detail: Option<String>,
    pub service: Option<String>,
    pub environment: Option<String>,
    /// `"critical"`, `"warning"` or `"info"` where the source's level maps onto one; otherwise the source's own
    /// word, lowercased.
    pub severity: Option<String>,
    /// From the payload; the time of receipt when the payload has none.
    pub fired_at: DateTime<Utc>,
    pub resolved: bool,
    /// The source's own state word, lowercased (`firing`, `incident.resolved`, `clear`, `failure`, ...).
    pub state: String,
    /// Link back to the alert, rule, build or problem in the source tool.
    pub source_url: Option<String>,
    pub dashboard_url: Option<String>,
    pub panel_url: Option<String>,
    pub rule_name: Option<String>,
    /// The account of the tool that sent it: an organisation's name, or `<tool>#<id>`
    /// (`account.rs`). Correlation keeps different accounts' incidents apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Flat string labels or tags worth keeping.
    pub labels: Map<String, Value>,
    /// Free text that says what broke beyond `title` and `detail` (a description, problem
    /// details): read for the entities it names, not stored.
    pub free_text: Vec<String>,
    /// What the alert keeps as its raw payload (`alert.rawPayload`).
    pub raw: RawPayload,
}

impl NormalizedAlert {
    /// What silences' and grouping rules' matchers see of it.
    pub fn facts(&self) -> vigil_aggregates::silence::AlertFacts<'_> {
        vigil_aggregates::silence::AlertFacts {
            source: self.source.as_str(),
            service: self.service.as_deref(),
            environment: self.environment.as_deref(),
            severity: self.severity.as_deref(),
            title: &self.title,
            labels: &self.labels,
        }
    }
}

/// An alert's raw payload: the spec's "complete original alert payload".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RawPayload {
    /// The notification as it was posted, kept as its text came (key order, number spelling).
    Whole,
    /// The notification narrowed to this alert: each alert of a source_a notification carrying
    /// several keeps the notification's fields with only its own element in `alerts` (a copy of
    /// the whole group with each alert would grow with the square of the group).
    Narrowed(Value),
}

/// Why a webhook body could not be turned into alerts. The message names the JSON field path and is meant
/// to be shown to the API client as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the request body must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("missing field `{field}`")]
    MissingField { field: String },
    #[error("missing field: one of {} is required", quoted_list(.fields))]
    MissingOneOf { fields: Vec<String> },
    #[error("field `{field}` must be {expected}, not {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    /// The field has a usable JSON type but its value does not read as what it must be (`"abc"` as a build
    /// number, `"not-a-time"` as a time). `found` is the value as JSON, shortened.
    #[error("field `{field}` must be {expected}, not {found}")]
    InvalidValue {
        field: String,
        expected: &'static str,
        found: String,
    },
    #[error("field `{field}` must not be empty")]
    Empty { field: String },
}

impl ParseError {
    /// The JSON path of the offending field (the first alternative for `MissingOneOf`); `None` when the body
    /// itself is the problem.
    pub fn field(&self) -> Option<&str> {
        match self {
            ParseError::NotAnObject { .. } => None,
            ParseError::MissingField { field }
            | ParseError::WrongType { field, .. }
            | ParseError::InvalidValue { field, .. }
            | ParseError::Empty { field } => Some(field),
            ParseError::MissingOneOf { fields } => fields.first().map(String::as_str),
        }
    }
}

fn quoted_list(fields: &[String]) -> String {
    fields
        .iter()
        .map(|field| format!("`{field}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parse one webhook body. Notifications with several alerts (source_a `alerts[]`) return several
/// NormalizedAlerts; an empty `alerts` array is an error. A deployment still in progress (source_f,
/// source_g) returns none: it reports no outcome yet. `received_at` is the fallback fired-at time.
pub fn parse(source: Source, payload: &Value, received_at: DateTime<Utc>) -> Result<Vec<NormalizedAlert>, ParseError> {
    match source {
        Source::SourceA => source_a::parse(payload, received_at),
        Source::SourceB => source_b::parse(payload, received_at).map(Vec::from_iter),
        Source::SourceC => source_c::parse(payload, received_at).map(Vec::from_iter),
        Source::SourceD => source_d::parse(payload, received_at).map(|alert| vec![alert]),
        Source::SourceE => source_e::parse(payload, received_at).map(|alert| vec![alert]),
        Source::SourceF => source_f::parse(payload, received_at).map(Vec::from_iter),
        Source::SourceG => source_g::parse(payload, received_at).map(Vec::from_iter),
        Source::SourceH => source_h::parse(payload, received_at).map(|alert| vec![alert]),
        Source::SourceI => source_i::parse(payload, received_at).map(|alert| vec![alert]),
    }
}

/// Fixtures and small helpers shared by the per-source tests.
#[cfg(test)]
mod test_support {
    use chrono::{DateTime, Utc};
    use serde_json::Value;

    use super::{parse, NormalizedAlert, ParseError, Source};

    macro_rules! fixture_set {
        ($dir:literal) => {
            [
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/alerts/",
                    $dir,
                    "/firing.json"
                )),
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/alerts/",
                    $dir,
                    "/related.json"
                )),
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/alerts/",
                    $dir,
                    "/resolved.json"
                )),
            ]
        };
    }

    const FIXTURES: [(Source, [&str; 3]); 9] = [
        (Source::SourceA, fixture_set!("source_a")),
        (Source::SourceB, fixture_set!("source_b")),
        (Source::SourceC, fixture_set!("source_c")),
        (Source::SourceD, fixture_set!("source_d")),
        (Source::SourceE, fixture_set!("source_e")),
        (Source::SourceF, fixture_set!("source_f")),
        (Source::SourceG, fixture_set!("source_g")),
        (Source::SourceH, fixture_set!("source_h")),
        (Source::SourceI, fixture_set!("source_i")),
    ];

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Fixture {
        Firing,
        Related,
        Resolved,
    }

    impl Fixture {
        pub(super) const ALL: [Fixture; 3] = [Fixture::Firing, Fixture::Related, Fixture::Resolved];
    }

    pub(super) fn fixture(source: Source, which: Fixture) -> Value {
        let (_, texts) = FIXTURES
            .iter()
            .find(|(candidate, _)| *candidate == source)
            .expect("every source has fixtures");
        let text = match which {
            Fixture::Firing => texts[0],
            Fixture::Related => texts[1],
            Fixture::Resolved => texts[2],
        };
        serde_json::from_str(text).expect("fixture is valid JSON")
    }

    /// A receipt time far from every fixture time, so a fallback to it is unmistakable.
    pub(super) fn received_at() -> DateTime<Utc> {
        utc("2030-01-02T03:04:05Z")
    }

    pub(super) fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid test time")
            .with_timezone(&Utc)
    }

    /// Parses a payload that must yield exactly one alert.
    pub(super) fn parse_one(source: Source, payload: &Value) -> NormalizedAlert {
        let mut alerts = parse(source, payload, received_at()).expect("payload parses");
        assert_eq!(alerts.len(), 1, "expected exactly one alert");
        alerts.remove(0)
    }

    pub(super) fn parse_fixture(source: Source, which: Fixture) -> NormalizedAlert {
        parse_one(source, &fixture(source, which))
    }

    pub(super) fn parse_error(source: Source, payload: &Value) -> ParseError {
        parse(source, payload, received_at()).expect_err("payload must be rejected")
    }

    /// `payload` with the value at JSON pointer `pointer` replaced.
    pub(super) fn with(mut payload: Value, pointer: &str, replacement: Value) -> Value {
        *payload.pointer_mut(pointer).expect("pointer exists in payload") = replacement;
        payload
    }

    /// `payload` without the object member at JSON pointer `pointer`.
    pub(super) fn without(mut payload: Value, pointer: &str) -> Value {
        let (parent, name) = pointer.rsplit_once('/').expect("pointer has a parent");
        payload
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .and_then(|object| object.remove(name))
            .expect("member exists in payload");
        payload
    }

    /// Asserts the error message, which is what an API client sees.
    pub(super) fn assert_error(source: Source, payload: &Value, expected_message: &str) {
        assert_eq!(parse_error(source, payload).to_string(), expected_message);
    }

    /// The checks every source must pass on bodies that are not objects at all.
    pub(super) fn assert_rejects_non_objects(source: Source) {
        for (payload, found) in [
            (serde_json::json!([]), "an array"),
            (serde_json::json!("alert"), "a string"),
            (serde_json::json!(42), "a number"),
            (Value::Null, "null"),
        ] {
            assert_eq!(parse_error(source, &payload), ParseError::NotAnObject { found });
        }
        assert_eq!(
            parse_error(source, &serde_json::json!([])).to_string(),
            "the request body must be a JSON object, not an array"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use serde_json::json;

    use super::test_support::{fixture, received_at, Fixture};
    use super::*;

    #[test]
    fn source_tokens_round_trip() {
        for source in Source::ALL {
            assert_eq!(source.as_str().parse::<Source>(), Ok(source));
            assert_eq!(Source::from_token(&source.as_str().to_uppercase()), Some(source));
            assert_eq!(source.to_string(), source.as_str());
            assert_eq!(serde_json::to_value(source).ok(), Some(json!(source.as_str())));
        }
        assert_eq!(
            "source_z".parse::<Source>().map_err(|error| error.to_string()),
            Err("unknown alert source `source_z`; expected one of source_a, source_b, ... source_i".to_owned())
        );
    }

    #[test]
    fn only_ci_sources_report_deployments() {
        let deployments: Vec<Source> = Source::ALL
            .into_iter()
            .filter(|source| source.kind() == AlertKind::Deployment)
            .collect();
        assert_eq!(deployments, [Source::SourceF, Source::SourceG]);
        assert_eq!(
            serde_json::to_value(AlertKind::Deployment).ok(),
            Some(json!("deployment"))
        );
    }

    #[test]
    fn every_fixture_parses_and_round_trips_through_serde() {
        for source in Source::ALL {
            for which in Fixture::ALL {
                let alerts = parse(source, &fixture(source, which), received_at()).expect("fixture parses");
                for alert in alerts {
                    assert_eq!(alert.source, source);
                    assert_eq!(alert.kind, source.kind());
                    assert_ne!(alert.fired_at, received_at(), "{source} {which:?} has its own fired-at");
                    let json = serde_json::to_value(&alert).expect("serializes");
                    let back: NormalizedAlert = serde_json::from_value(json).expect("deserializes");
                    assert_eq!(back, alert);
                }
            }
        }
    }

    #[test]
    fn parse_error_exposes_the_field_path() {
        let error = parse(Source::SourceB, &json!({"event": {"data": {"id": {}}}}), received_at());
        assert_eq!(error.as_ref().err().and_then(ParseError::field), Some("event.data.id"));
        assert_eq!(
            error.map_err(|error| error.to_string()),
            Err("field `event.data.id` must be a string or a number, not an object".to_owned())
        );
    }

    fn odd_values() -> Vec<Value> {
        vec![
            Value::Null,
            json!(true),
            json!(0),
            json!(-1),
            json!(1.5),
            json!(1e300),
            json!(u64::MAX),
            json!(""),
            json!("   "),
            json!("x"),
            json!("0001-01-01T00:00:00Z"),
            json!("99999999999999999999999999"),
            json!([]),
            json!([null]),
            json!([{}]),
            json!([[1, 2], "a:b"]),
            json!({}),
            json!({"id": {}, "name": [], "status": 7}),
        ]
    }

    /// Every variant of `value` with one member or element removed, or replaced by one of `odd`, at any depth.
    fn mutations(value: &Value, odd: &[Value]) -> Vec<Value> {
        let mut variants = Vec::new();
        match value {
            Value::Object(members) => {
                for (name, member) in members {
                    let mut removed = members.clone();
                    removed.remove(name);
                    variants.push(Value::Object(removed));
                    let replacements = odd.iter().cloned().chain(mutations(member, odd));
                    for replacement in replacements {
                        let mut replaced = members.clone();
                        replaced.insert(name.clone(), replacement);
                        variants.push(Value::Object(replaced));
                    }
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let mut removed = items.clone();
                    removed.remove(index);
                    variants.push(Value::Array(removed));
                    let replacements = odd.iter().cloned().chain(mutations(item, odd));
                    for replacement in replacements {
                        let mut replaced = items.clone();
                        replaced[index] = replacement;
                        variants.push(Value::Array(replaced));
                    }
                }
            }
            _ => {}
        }
        variants
    }

    fn assert_parses_without_panic(source: Source, payload: &Value) {
        let outcome = catch_unwind(AssertUnwindSafe(|| parse(source, payload, received_at())));
        let Ok(result) = outcome else {
            panic!("{source} panicked on {payload}");
        };
        for alert in result.into_iter().flatten() {
            assert!(!alert.key.trim().is_empty(), "{source}: empty key for {payload}");
            assert!(
                !alert.group_key.trim().is_empty(),
                "{source}: empty group_key for {payload}"
            );
            assert!(!alert.title.trim().is_empty(), "{source}: empty title for {payload}");
            assert!(!alert.state.trim().is_empty(), "{source}: empty state for {payload}");
        }
    }

    #[test]
    fn parse_never_panics_on_odd_input() {
        let odd = odd_values();
        let all_fixtures: Vec<Value> = Source::ALL
            .into_iter()
            .flat_map(|source| Fixture::ALL.map(|which| fixture(source, which)))
            .collect();
        for source in Source::ALL {
            for payload in odd.iter().chain(&all_fixtures) {
                assert_parses_without_panic(source, payload);
            }
            for which in Fixture::ALL {
                for payload in mutations(&fixture(source, which), &odd) {
                    assert_parses_without_panic(source, &payload);
                }
            }
        }
    }

    /// The JSON pointers of every object member of `value`, at any depth.
    fn member_pointers(value: &Value, prefix: &str, pointers: &mut Vec<String>) {
        match value {
            Value::Object(members) => {
                for (name, member) in members {
                    let pointer = format!("{prefix}/{name}");
                    pointers.push(pointer.clone());
                    member_pointers(member, &pointer, pointers);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    member_pointers(item, &format!("{prefix}/{index}"), pointers);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn a_null_member_reads_as_if_it_were_absent() {
        let without_raw = |result: Result<Vec<NormalizedAlert>, ParseError>| {
            result.map(|alerts| {
                alerts
                    .into_iter()
                    .map(|alert| NormalizedAlert {
                        raw: RawPayload::Whole,
                        ..alert
                    })
                    .collect::<Vec<_>>()
            })
        };
        for source in Source::ALL {
            for which in Fixture::ALL {
                let payload = fixture(source, which);
                let mut pointers = Vec::new();
                member_pointers(&payload, "", &mut pointers);
                for pointer in pointers {
                    let nulled = super::test_support::with(payload.clone(), &pointer, Value::Null);
                    let removed = super::test_support::without(payload.clone(), &pointer);
                    assert_eq!(
                        without_raw(parse(source, &nulled, received_at())),
                        without_raw(parse(source, &removed, received_at())),
                        "{source} {which:?} with `{pointer}` null"
                    );
                }
            }
        }
    }

    /// The top-level fields each source cannot do without (source_c's flat shape has alternatives for each).
    fn required_top_level_fields(source: Source) -> &'static [&'static str] {
        match source {
            Source::SourceA => &["alerts"],
            Source::SourceB => &["event"],
            Source::SourceC => &["alert", "node"],
            Source::SourceD => &["alert_id"],
            Source::SourceE => &["search_name"],
            Source::SourceF => &["job_name", "build_number"],
            Source::SourceG => &["pipeline"],
            // `PID`, or else `ProblemID`: the fixtures carry both.
            Source::SourceH => &[],
            Source::SourceI => &["incident"],
        }
    }

    #[test]
    fn removing_a_top_level_field_fails_only_for_required_fields() {
        for source in Source::ALL {
            for which in Fixture::ALL {
                let payload = fixture(source, which);
                let Value::Object(members) = &payload else {
                    panic!("fixtures are objects");
                };
                for name in members.keys() {
                    let mut reduced = members.clone();
                    reduced.remove(name);
                    let reduced = Value::Object(reduced);
                    assert_parses_without_panic(source, &reduced);
                    let result = parse(source, &reduced, received_at());
                    let required = required_top_level_fields(source).contains(&name.as_str());
                    assert_eq!(
                        result.is_err(),
                        required,
                        "{source} {which:?} without `{name}`: {result:?}"
                    );
                }
            }
        }
    }
}
