//! Lenient readers over `serde_json::Value` shared by every source parser.
//!
//! Required fields (the ones a key is built from) are read strictly and produce a [`ParseError`] that names
//! the field's path. Everything else is read leniently: a missing, `null`, empty or wrong-typed optional
//! field is treated as absent, so one odd field never costs us the whole alert.

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use serde_json::{Map, Number, Value};

use super::ParseError;

/// A JSON object together with the path that led to it, so errors can name the exact field
/// (`alerts[0].fingerprint`, `event.data.id`).
#[derive(Debug, Clone)]
pub(super) struct Obj<'a> {
    fields: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    /// The top level of a webhook body, which must be a JSON object.
    pub(super) fn root(payload: &'a Value) -> Result<Self, ParseError> {
        match payload {
            Value::Object(fields) => Ok(Self {
                fields,
                path: String::new(),
            }),
            other => Err(ParseError::NotAnObject { found: describe(other) }),
        }
    }

    /// The dotted path of a field of this object, for error messages.
    pub(super) fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The raw value of a field; JSON `null` counts as absent.
    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        self.fields.get(name).filter(|value| !value.is_null())
    }

    pub(super) fn object(&self, name: &str) -> Option<Obj<'a>> {
        match self.get(name) {
            Some(Value::Object(fields)) => Some(Obj {
                fields,
                path: self.path_of(name),
            }),
            _ => None,
        }
    }

    pub(super) fn require_object(&self, name: &str) -> Result<Obj<'a>, ParseError> {
        match self.get(name) {
            Some(Value::Object(fields)) => Ok(Obj {
                fields,
                path: self.path_of(name),
            }),
            Some(other) => Err(wrong_type(self.path_of(name), "an object", other)),
            None => Err(missing(self.path_of(name))),
        }
    }

    pub(super) fn require_array(&self, name: &str) -> Result<&'a [Value], ParseError> {
        match self.get(name) {
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(wrong_type(self.path_of(name), "an array", other)),
            None => Err(missing(self.path_of(name))),
        }
    }

    /// Element `index` of the array field `name`, which must itself be an object.
    pub(super) fn require_element(&self, name: &str, index: usize, element: &'a Value) -> Result<Obj<'a>, ParseError> {
        let path = format!("{}[{index}]", self.path_of(name));
        match element {
            Value::Object(fields) => Ok(Obj { fields, path }),
            other => Err(wrong_type(path, "an object", other)),
        }
    }

    /// The object elements of an optional array field; anything else in the array is skipped.
    pub(super) fn objects(&self, name: &str) -> impl Iterator<Item = Obj<'a>> {
        let items = match self.get(name) {
            Some(Value::Array(items)) => items.as_slice(),
            _ => &[],
        };
        let path = self.path_of(name);
        items.iter().enumerate().filter_map(move |(index, item)| match item {
            Value::Object(fields) => Some(Obj {
                fields,
                path: format!("{path}[{index}]"),
            }),
            _ => None,
        })
    }

    /// An optional text field: a non-blank string or a number; for a list, its first such element.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(scalar_text)
    }

    /// The first of several alternative optional text fields that is present.
    pub(super) fn first_text(&self, names: &[&str]) -> Option<String> {
        names.iter().find_map(|name| self.text(name))
    }

    /// A required identifier, given as a string or a number.
    pub(super) fn require_id(&self, name: &str) -> Result<String, ParseError> {
        match self.get(name) {
            Some(value) => id_text(value, self.path_of(name)),
            None => Err(missing(self.path_of(name))),
        }
    }

    /// A required identifier that may come under one of several names; the first name present decides.
    pub(super) fn require_first_id(&self, names: &[&str]) -> Result<String, ParseError> {
        match names.iter().find(|name| self.get(name).is_some()) {
            Some(name) => self.require_id(name),
            None => Err(ParseError::MissingOneOf {
                fields: names.iter().map(|name| self.path_of(name)).collect(),
            }),
        }
    }

    /// An optional point in time: RFC 3339 / ISO 8601 text, or an epoch number in `unit`.
    pub(super) fn time(&self, name: &str, unit: EpochUnit) -> Option<DateTime<Utc>> {
        self.get(name).and_then(|value| timestamp(value, unit))
    }

    /// An optional whole number such as a duration, given as a number or a numeric string.
    pub(super) fn integer(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::Number(number) => number.as_i64().or_else(|| number.as_f64().and_then(float_to_i64)),
            Value::String(text) => text.trim().parse::<f64>().ok().and_then(float_to_i64),
            _ => None,
        }
    }

    /// An optional tag collection, as a comma-separated string or as a list.
    pub(super) fn tags(&self, name: &str) -> Vec<Tag> {
        self.get(name).map(parse_tags).unwrap_or_default()
    }

    /// The fields of this object that read as flat text, as string labels.
    pub(super) fn scalar_labels(&self) -> Map<String, Value> {
        self.scalar_labels_where(|_| true)
    }

    pub(super) fn scalar_labels_where(&self, mut keep: impl FnMut(&str) -> bool) -> Map<String, Value> {
        self.fields
            .iter()
            .filter(|(name, _)| keep(name))
            .filter_map(|(name, value)| label_text(value).map(|text| (name.clone(), Value::String(text))))
            .collect()
    }
}

/// How the JSON type of a value reads in an error message.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn missing(field: String) -> ParseError {
    ParseError::MissingField { field }
}

fn wrong_type(field: String, expected: &'static str, found: &Value) -> ParseError {
    ParseError::WrongType {
        field,
        expected,
        found: describe(found),
    }
}

fn id_text(value: &Value, path: String) -> Result<String, ParseError> {
    match value {
        Value::String(text) if text.trim().is_empty() => Err(ParseError::Empty { field: path }),
        Value::String(text) => Ok(text.trim().to_owned()),
        Value::Number(number) => Ok(number_text(number)),
        other => Err(wrong_type(path, "a string or a number", other)),
    }
}

/// A number as text, writing integral floats without a fraction so `1842.0` and `1842` give the same id.
fn number_text(number: &Number) -> String {
    match number.as_f64() {
        Some(float) if !number.is_i64() && !number.is_u64() => {
            float_to_i64(float).map_or_else(|| number.to_string(), |whole| whole.to_string())
        }
        _ => number.to_string(),
    }
}

/// Whole floats within the exactly representable range only, so the conversion never loses digits.
fn float_to_i64(float: f64) -> Option<i64> {
    const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    (float.is_finite() && float.fract() == 0.0 && float.abs() <= EXACT_LIMIT).then_some(float as i64)
}

/// A non-blank string or a number as text; for a list (a multivalue field), its first such element.
pub(super) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.trim()).filter(|text| !text.is_empty()).map(str::to_owned),
        Value::Number(number) => Some(number_text(number)),
        Value::Array(items) => items.iter().find_map(|item| match item {
            Value::Array(_) => None,
            flat => scalar_text(flat),
        }),
        _ => None,
    }
}

/// Text for a label value: scalars as text, lists of scalars joined with commas, objects skipped.
pub(super) fn label_text(value: &Value) -> Option<String> {
    match value {
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().filter_map(scalar_text).collect();
            (!parts.is_empty()).then(|| parts.join(","))
        }
        other => scalar_text(other),
    }
}

/// The unit a source documents for an epoch field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EpochUnit {
    Seconds,
    Millis,
}

/// Epoch values at or above this are read as milliseconds whatever the field's documented unit says, and values
/// below it as seconds: as seconds it is the year 5138, as milliseconds it is March 1973, so no real alert time is
/// ambiguous, and template authors do mix the two units up.
const MILLIS_THRESHOLD: i64 = 100_000_000_000;

impl EpochUnit {
    fn plausible_for(self, whole: i64) -> Self {
        match self {
            Self::Seconds if whole >= MILLIS_THRESHOLD => Self::Millis,
            Self::Millis if whole < MILLIS_THRESHOLD => Self::Seconds,
            unit => unit,
        }
    }
}

/// A point in time from an epoch number (or numeric string) in `unit`, or from RFC 3339 / ISO 8601 text.
/// Zero and pre-1970 values are the "unset" sentinels some tools send (Go's `0001-01-01T00:00:00Z`), so they
/// count as absent.
fn timestamp(value: &Value, unit: EpochUnit) -> Option<DateTime<Utc>> {
    let parsed = match value {
        Value::Number(number) => epoch_parts_of_number(number).and_then(|(whole, nanos)| epoch(whole, nanos, unit)),
        Value::String(text) => {
            let text = text.trim();
            match split_decimal(text) {
                Some((whole, nanos)) => epoch(whole, nanos, unit),
                None => parse_datetime_text(text),
            }
        }
        _ => None,
    };
    parsed.filter(|time| time.timestamp() > 0)
}

/// An epoch number as whole units plus the fraction of a unit in billionths.
fn epoch_parts_of_number(number: &Number) -> Option<(i64, u32)> {
    if let Some(whole) = number.as_i64() {
        return Some((whole, 0));
    }
    let float = number
        .as_f64()
        .filter(|float| float.is_finite() && *float >= 0.0 && *float < 1e15)?;
    let fraction_nanos = ((float.fract() * 1e9) as u32).min(999_999_999);
    Some((float.trunc() as i64, fraction_nanos))
}

/// `"1795172640.000"` → whole units and the fraction in billionths; `None` unless it is a plain decimal.
fn split_decimal(text: &str) -> Option<(i64, u32)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let digits = fraction.get(..9).unwrap_or(fraction);
    let scale = 10u32.pow(9 - digits.len() as u32);
    let fraction_nanos = if digits.is_empty() {
        0
    } else {
        digits.parse::<u32>().ok()? * scale
    };
    Some((whole.parse().ok()?, fraction_nanos))
}

fn epoch(whole: i64, fraction_nanos: u32, unit: EpochUnit) -> Option<DateTime<Utc>> {
    match unit.plausible_for(whole) {
        EpochUnit::Seconds => DateTime::from_timestamp(whole, fraction_nanos),
        EpochUnit::Millis => {
            let millis_nanos = u32::try_from(whole.rem_euclid(1000)).ok()? * 1_000_000;
            DateTime::from_timestamp(whole.div_euclid(1000), millis_nanos + fraction_nanos / 1000)
        }
    }
}

/// RFC 3339 (nanoseconds and any offset), also `+0000`-style offsets, a space instead of `T`, and no offset
/// at all (read as UTC).
fn parse_datetime_text(text: &str) -> Option<DateTime<Utc>> {
    parse_iso_datetime(text).or_else(|| parse_iso_datetime(&text.replacen(' ', "T", 1)))
}

fn parse_iso_datetime(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .map(|time| time.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|naive| naive.and_utc())
        })
}

/// `start + millis`, when the duration is sane.
pub(super) fn add_millis(start: DateTime<Utc>, millis: i64) -> Option<DateTime<Utc>> {
    if millis < 0 {
        return None;
    }
    start.checked_add_signed(TimeDelta::try_milliseconds(millis)?)
}

/// One `key:value` tag; a bare tag such as `monitor` has an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tag {
    pub(super) key: String,
    pub(super) value: String,
}

/// Tags from `"k:v, k:v"` or from `["k:v", "k:v"]`.
pub(super) fn parse_tags(value: &Value) -> Vec<Tag> {
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(scalar_text)
            .flat_map(|item| parse_tag_text(&item))
            .collect(),
        other => scalar_text(other).map(|text| parse_tag_text(&text)).unwrap_or_default(),
    }
}

/// Tags from a comma-separated `"k:v, k:v"` string.
pub(super) fn parse_tag_text(text: &str) -> Vec<Tag> {
    text.split(',').filter_map(parse_tag).collect()
}

fn parse_tag(item: &str) -> Option<Tag> {
    let (key, value) = item.split_once(':').unwrap_or((item, ""));
    let key = key.trim();
    (!key.is_empty()).then(|| Tag {
        key: key.to_owned(),
        value: value.trim().to_owned(),
    })
}

/// The value of the first tag named `key` (case-insensitively) that has a value.
pub(super) fn find_tag(tags: &[Tag], key: &str) -> Option<String> {
    tags.iter()
        .find(|tag| tag.key.eq_ignore_ascii_case(key) && !tag.value.is_empty())
        .map(|tag| tag.value.clone())
}

pub(super) fn tags_to_labels(tags: &[Tag]) -> Map<String, Value> {
    tags.iter()
        .map(|tag| (tag.key.clone(), Value::String(tag.value.clone())))
        .collect()
}

/// Maps the usual spellings onto `critical` / `warning` / `info`; any other word is kept, lowercased.
pub(super) fn normalize_severity(raw: &str) -> Option<String> {
    let word = raw.trim().to_lowercase();
    let normalized = match word.as_str() {
        "" => return None,
        "critical" | "crit" | "fatal" | "severe" | "error" | "emergency" => "critical",
        "warning" | "warn" => "warning",
        "info" | "informational" | "debug" => "info",
        _ => return Some(word),
    };
    Some(normalized.to_owned())
}

/// Severity of a CI/CD outcome: failed → critical, unstable/aborted → warning, succeeded → info.
pub(super) fn deployment_severity(outcome: &str) -> Option<String> {
    let normalized = match outcome.trim().to_uppercase().as_str() {
        "FAILURE" | "FAILED" => "critical",
        "UNSTABLE" | "ABORTED" | "CANCELED" | "CANCELLED" => "warning",
        "SUCCESS" | "SUCCEEDED" => "info",
        _ => return normalize_severity(outcome),
    };
    Some(normalized.to_owned())
}

/// Whether a CI/CD outcome word means the deployment went through.
pub(super) fn is_deployment_success(outcome: &str) -> bool {
    ["SUCCESS", "SUCCEEDED"]
        .iter()
        .any(|word| outcome.trim().eq_ignore_ascii_case(word))
}

/// `"<service>@<environment>"`: what a failed deployment and a later successful one share.
pub(super) fn deployment_group_key(service: &str, environment: Option<&str>) -> String {
    match environment {
        Some(environment) => format!("{service}@{environment}"),
        None => service.to_owned(),
    }
}

/// Whether an optional word is `word`, ignoring ASCII case.
pub(super) fn is_word(text: Option<&str>, word: &str) -> bool {
    text.is_some_and(|text| text.trim().eq_ignore_ascii_case(word))
}

/// `text`, unless it merely repeats `title`.
pub(super) fn unless_same_as(text: Option<String>, title: &str) -> Option<String> {
    text.filter(|text| text != title)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid test time")
            .with_timezone(&Utc)
    }

    #[test]
    fn epoch_seconds_as_number_string_and_fraction() {
        let expected = utc("2026-11-20T11:04:00Z");
        assert_eq!(timestamp(&json!(1795172640), EpochUnit::Seconds), Some(expected));
        assert_eq!(timestamp(&json!("1795172640"), EpochUnit::Seconds), Some(expected));
        assert_eq!(timestamp(&json!("1795172640.000"), EpochUnit::Seconds), Some(expected));
        assert_eq!(
            timestamp(&json!("1795172640.25"), EpochUnit::Seconds),
            Some(utc("2026-11-20T11:04:00.25Z"))
        );
        assert_eq!(
            timestamp(&json!(1795172640.5), EpochUnit::Seconds),
            Some(utc("2026-11-20T11:04:00.5Z"))
        );
    }

    #[test]
    fn epoch_millis_keep_their_milliseconds() {
        let expected = utc("2026-11-20T07:55:00.123Z");
        assert_eq!(timestamp(&json!(1795161300123_i64), EpochUnit::Millis), Some(expected));
        assert_eq!(timestamp(&json!("1795161300123"), EpochUnit::Millis), Some(expected));
    }

    #[test]
    fn epoch_in_the_other_unit_is_read_by_magnitude() {
        let expected = utc("2026-11-20T07:55:00Z");
        assert_eq!(timestamp(&json!(1795161300000_i64), EpochUnit::Seconds), Some(expected));
        assert_eq!(timestamp(&json!(1795161300), EpochUnit::Millis), Some(expected));
    }

    #[test]
    fn rfc3339_with_nanoseconds_offsets_and_loose_forms() {
        let expected = utc("2026-11-20T14:02:10.123456789Z");
        assert_eq!(
            timestamp(&json!("2026-11-20T14:02:10.123456789Z"), EpochUnit::Seconds),
            Some(expected)
        );
        assert_eq!(
            timestamp(&json!("2026-11-20T16:02:10.123456789+02:00"), EpochUnit::Seconds),
            Some(expected)
        );
        assert_eq!(
            timestamp(&json!("2026-11-20T09:02:10.123456789-0500"), EpochUnit::Seconds),
            Some(expected)
        );
        assert_eq!(
            timestamp(&json!("2026-11-20 14:02:10.123456789"), EpochUnit::Seconds),
            Some(expected)
        );
    }

    #[test]
    fn unset_and_garbage_times_are_absent() {
        for value in [
            json!("0001-01-01T00:00:00Z"),
            json!(0),
            json!("0"),
            json!(-5),
            json!("-5"),
            json!("yesterday"),
            json!(""),
            json!(1e300),
            json!(u64::MAX),
            json!("99999999999999999999999"),
            json!("1.2.3"),
            json!(true),
            json!({}),
        ] {
            assert_eq!(timestamp(&value, EpochUnit::Seconds), None, "{value}");
            assert_eq!(timestamp(&value, EpochUnit::Millis), None, "{value}");
        }
    }

    #[test]
    fn ids_from_strings_and_numbers() {
        let payload = json!({"a": " 42 ", "b": 42, "c": 42.0, "d": 4.5, "e": "", "f": {}, "g": null});
        let obj = Obj::root(&payload).expect("object");
        assert_eq!(obj.require_id("a"), Ok("42".to_owned()));
        assert_eq!(obj.require_id("b"), Ok("42".to_owned()));
        assert_eq!(obj.require_id("c"), Ok("42".to_owned()));
        assert_eq!(obj.require_id("d"), Ok("4.5".to_owned()));
        assert_eq!(obj.require_id("e"), Err(ParseError::Empty { field: "e".into() }));
        assert_eq!(
            obj.require_id("f").map_err(|error| error.to_string()),
            Err("field `f` must be a string or a number, not an object".to_owned())
        );
        assert_eq!(obj.require_id("g"), Err(ParseError::MissingField { field: "g".into() }));
    }

    #[test]
    fn first_id_names_all_alternatives_when_none_is_present() {
        let payload = json!({"node": {}});
        let node = Obj::root(&payload)
            .and_then(|root| root.require_object("node"))
            .expect("node");
        assert_eq!(
            node.require_first_id(&["id", "hostname"])
                .map_err(|error| error.to_string()),
            Err("missing field: one of `node.id`, `node.hostname` is required".to_owned())
        );
    }

    #[test]
    fn tags_from_comma_string_or_list() {
        let expected = vec![
            Tag {
                key: "env".into(),
                value: "prod".into(),
            },
            Tag {
                key: "service".into(),
                value: "a:b".into(),
            },
            Tag {
                key: "monitor".into(),
                value: String::new(),
            },
        ];
        assert_eq!(parse_tags(&json!("env:prod, service:a:b ,monitor,, ")), expected);
        assert_eq!(
            parse_tags(&json!(["env:prod", " service:a:b", "monitor", 7.5, {}])).len(),
            4
        );
        assert_eq!(find_tag(&expected, "SERVICE"), Some("a:b".to_owned()));
        assert_eq!(find_tag(&expected, "monitor"), None);
        assert!(parse_tags(&json!({"service": "x"})).is_empty());
    }

    #[test]
    fn multivalue_text_takes_the_first_value() {
        assert_eq!(scalar_text(&json!(["", "a", "b"])), Some("a".to_owned()));
        assert_eq!(scalar_text(&json!([[1], {}])), None);
        assert_eq!(scalar_text(&json!("  ")), None);
        assert_eq!(label_text(&json!(["a", 2])), Some("a,2".to_owned()));
    }

    #[test]
    fn severity_words_are_normalized() {
        assert_eq!(normalize_severity("CRITICAL").as_deref(), Some("critical"));
        assert_eq!(normalize_severity(" Warn ").as_deref(), Some("warning"));
        assert_eq!(normalize_severity("Informational").as_deref(), Some("info"));
        assert_eq!(normalize_severity("P1").as_deref(), Some("p1"));
        assert_eq!(normalize_severity("  "), None);
        assert_eq!(deployment_severity("FAILURE").as_deref(), Some("critical"));
        assert_eq!(deployment_severity("aborted").as_deref(), Some("warning"));
        assert_eq!(deployment_severity("Succeeded").as_deref(), Some("info"));
        assert_eq!(deployment_severity("NOT_BUILT").as_deref(), Some("not_built"));
    }
}
