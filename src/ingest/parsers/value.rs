//! Readers over `serde_json::Value` shared by every source parser. They all follow one rule, so every source
//! treats odd input alike:
//!
//! - Absent or JSON `null`: missing. A required field is a [`ParseError`]; an optional one reads as `None` (or an
//!   empty list), and the parser falls back as it documents.
//! - Present and usable: read, with the tolerances real senders need: ids, numbers and epochs as strings or
//!   numbers, fractional epochs, RFC 3339 with any precision and offset (and a few looser forms), tags as a
//!   comma-separated string or a list, multivalue lists where text is expected (their first value).
//! - Present but unusable: a JSON type the field cannot have (an object where text is expected, a number where a
//!   list is expected, ...) or a string that is not the time or number the field must be: a [`ParseError`] that
//!   names the field's path and what it must be.
//!
//! The "unset" markers senders really use read as absent, not as errors: blank strings, and for times `0`,
//! negative epochs (`-1`) and dates not after 1970 such as Go's zero time `0001-01-01T00:00:00Z`.
//! Fields no parser asks for are never looked at, whatever they hold.

use std::sync::OnceLock;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Timelike, Utc};
use serde_json::{Map, Number, Value};

use super::ParseError;

/// What a text field must be, in error messages.
const TEXT: &str = "a string or a number";
/// What a whole-number field must be, in error messages.
const INTEGER: &str = "an integer or a numeric string";
/// What a tag collection must be, in error messages.
const TAGS: &str = "a comma-separated string or an array";
/// What a label value must be, in error messages.
const LABEL: &str = "a string, a number or a boolean";

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

    /// An optional object field.
    pub(super) fn object(&self, name: &str) -> Result<Option<Obj<'a>>, ParseError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(fields)) => Ok(Some(Obj {
                fields,
                path: self.path_of(name),
            })),
            Some(other) => Err(wrong_type(self.path_of(name), "an object", other)),
        }
    }

    /// An optional object field, read as an empty object when absent, so that all of its fields read as absent.
    pub(super) fn object_or_empty(&self, name: &str) -> Result<Obj<'a>, ParseError> {
        static EMPTY: OnceLock<Map<String, Value>> = OnceLock::new();
        Ok(self.object(name)?.unwrap_or_else(|| Obj {
            fields: EMPTY.get_or_init(Map::new),
            path: self.path_of(name),
        }))
    }

    pub(super) fn require_object(&self, name: &str) -> Result<Obj<'a>, ParseError> {
        self.object(name)?.ok_or_else(|| missing(self.path_of(name)))
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
        match element {
            Value::Object(fields) => Ok(Obj {
                fields,
                path: element_path(&self.path_of(name), index),
            }),
            other => Err(wrong_type(element_path(&self.path_of(name), index), "an object", other)),
        }
    }

    /// The elements of an optional array of objects; `null` elements are skipped, any other non-object is an error.
    pub(super) fn objects(&self, name: &str) -> Result<Vec<Obj<'a>>, ParseError> {
        let items = match self.get(name) {
            None => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => return Err(wrong_type(self.path_of(name), "an array", other)),
        };
        items
            .iter()
            .enumerate()
            .filter(|(_, item)| !item.is_null())
            .map(|(index, item)| self.require_element(name, index, item))
            .collect()
    }

    /// An optional text field: a string or a number; for a list (a multivalue field), its first value. Blank
    /// strings and empty lists read as absent.
    pub(super) fn text(&self, name: &str) -> Result<Option<String>, ParseError> {
        match self.get(name) {
            None => Ok(None),
            Some(value) => text_of(value, || self.path_of(name)),
        }
    }

    /// An optional word of a fixed vocabulary (an event type, a resource type): only a string is
    /// one. A number there is a malformed payload, not a word that matches nothing.
    pub(super) fn word(&self, name: &str) -> Result<Option<String>, ParseError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(non_blank(text)),
            Some(other) => Err(wrong_type(self.path_of(name), "a string", other)),
        }
    }

    /// Alternative optional text fields: the first one that has a value. Every alternative present must be usable.
    pub(super) fn first_text(&self, names: &[&str]) -> Result<Option<String>, ParseError> {
        let mut first = None;
        for name in names {
            let text = self.text(name)?;
            first = first.or(text);
        }
        Ok(first)
    }

    /// A required identifier, given as a string or a number.
    pub(super) fn require_id(&self, name: &str) -> Result<String, ParseError> {
        match self.get(name) {
            Some(value) => id_text(value, self.path_of(name)),
            None => Err(missing(self.path_of(name))),
        }
    }

    /// A required identifier that may come under one of several names; the first name present
    /// decides. A blank one is absent (an unset marker), so the next name is read.
    pub(super) fn require_first_id(&self, names: &[&str]) -> Result<String, ParseError> {
        let is_set = |name: &&&str| {
            self.get(name)
                .is_some_and(|value| !value.as_str().is_some_and(|text| text.trim().is_empty()))
        };
        match names
            .iter()
            .find(is_set)
            .or_else(|| names.iter().find(|name| self.get(name).is_some()))
        {
            Some(name) => self.require_id(name),
            None => Err(ParseError::MissingOneOf {
                fields: names.iter().map(|name| self.path_of(name)).collect(),
            }),
        }
    }

    /// An optional point in time: RFC 3339 / ISO 8601 text, or an epoch number (or numeric string) in `unit`.
    /// The unset markers (blank, `0`, negative, not after 1970) read as absent.
    pub(super) fn time(&self, name: &str, unit: EpochUnit) -> Result<Option<DateTime<Utc>>, ParseError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        match value {
            Value::Number(_) | Value::String(_) => match timestamp(value) {
                Some(time) => Ok(Some(time)),
                None if is_unset_time(value) => Ok(None),
                None => Err(invalid_value(self.path_of(name), unit.expected(), value)),
            },
            other => Err(wrong_type(self.path_of(name), unit.expected(), other)),
        }
    }

    /// An optional whole number such as a duration, given as a number or a numeric string; blank reads as absent.
    pub(super) fn integer(&self, name: &str) -> Result<Option<i64>, ParseError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
            Some(value @ (Value::Number(_) | Value::String(_))) => integer_of(value)
                .map(Some)
                .ok_or_else(|| invalid_value(self.path_of(name), INTEGER, value)),
            Some(other) => Err(wrong_type(self.path_of(name), INTEGER, other)),
        }
    }

    /// An optional duration in milliseconds: a whole number from 0 to `max_millis`, read as [`Self::integer`].
    pub(super) fn duration_millis(
        &self,
        name: &str,
        max_millis: i64,
        expected: &'static str,
    ) -> Result<Option<i64>, ParseError> {
        match self.integer(name)? {
            Some(millis) if !(0..=max_millis).contains(&millis) => Err(self.invalid(name, expected)),
            millis => Ok(millis),
        }
    }

    /// `start` plus the duration `millis` read from the field `name`, which must not carry it past the
    /// last supported time: a sum past it is that field's error, as a time past it is the time's.
    pub(super) fn after_millis(
        &self,
        start: DateTime<Utc>,
        name: &str,
        millis: i64,
    ) -> Result<DateTime<Utc>, ParseError> {
        TimeDelta::try_milliseconds(millis)
            .and_then(|duration| start.checked_add_signed(duration))
            .filter(|end| is_supported(*end))
            .ok_or_else(|| self.invalid(name, "a duration that ends by 9999-12-31T23:59:59Z"))
    }

    /// The field `name`, present but not what it must be.
    fn invalid(&self, name: &str, expected: &'static str) -> ParseError {
        invalid_value(self.path_of(name), expected, self.get(name).unwrap_or(&Value::Null))
    }

    /// A required whole number, given as a number or a numeric string.
    pub(super) fn require_integer(&self, name: &str) -> Result<i64, ParseError> {
        match self.get(name) {
            Some(Value::String(text)) if text.trim().is_empty() => Err(ParseError::Empty {
                field: self.path_of(name),
            }),
            _ => self.integer(name)?.ok_or_else(|| missing(self.path_of(name))),
        }
    }

    /// An optional tag collection, as a comma-separated string or as a list of strings.
    pub(super) fn tags(&self, name: &str) -> Result<Vec<Tag>, ParseError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(value) => tags_of(value, || self.path_of(name)),
        }
    }

    /// An optional label value: a string, a number or a boolean, or a list of them; every non-blank value.
    pub(super) fn label_values(&self, name: &str) -> Result<Vec<String>, ParseError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(value) => label_values_of(value, || self.path_of(name)),
        }
    }

    /// An optional label value as one text, the values of a list joined with commas.
    pub(super) fn label(&self, name: &str) -> Result<Option<String>, ParseError> {
        let values = self.label_values(name)?;
        Ok((!values.is_empty()).then(|| values.join(",")))
    }

    /// The fields of this object that read as flat text, as string labels. For free-form maps (label sets, log
    /// rows) whose members no parser names: what does not read as text is left out.
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

fn element_path(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// A non-blank string, trimmed.
fn non_blank(text: &str) -> Option<String> {
    Some(text.trim()).filter(|text| !text.is_empty()).map(str::to_owned)
}

/// Text from a string or a number; for a list, its first value. `path` names the field in errors.
fn text_of(value: &Value, path: impl Fn() -> String) -> Result<Option<String>, ParseError> {
    Ok(scalar_values(value, Booleans::Refused, path)?.into_iter().next())
}

/// Every non-blank value of a label: a string, a number, a boolean or a list of them.
fn label_values_of(value: &Value, path: impl Fn() -> String) -> Result<Vec<String>, ParseError> {
    scalar_values(value, Booleans::Accepted, path)
}

/// Tags from `"k:v, k:v"` or from `["k:v", "k:v"]` (each element may itself hold several, comma-separated).
fn tags_of(value: &Value, path: impl Fn() -> String) -> Result<Vec<Tag>, ParseError> {
    match value {
        Value::String(text) => Ok(parse_tag_text(text)),
        Value::Array(_) => Ok(scalar_values(value, Booleans::Refused, path)?
            .iter()
            .flat_map(|text| parse_tag_text(text))
            .collect()),
        other => Err(wrong_type(path(), TAGS, other)),
    }
}

/// Whether a boolean reads as text (`"true"`): for labels only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Booleans {
    Accepted,
    Refused,
}

/// The non-blank texts of a scalar, or of each element of a list of scalars (a multivalue field); `null`s are
/// skipped. Anything else, at the top or in the list, is an error naming where it is.
fn scalar_values(value: &Value, booleans: Booleans, path: impl Fn() -> String) -> Result<Vec<String>, ParseError> {
    let expected = match booleans {
        Booleans::Accepted => LABEL,
        Booleans::Refused => TEXT,
    };
    let flat = |value: &Value, path: &dyn Fn() -> String| match value {
        Value::Null => Ok(None),
        Value::Bool(flag) if booleans == Booleans::Accepted => Ok(Some(flag.to_string())),
        Value::String(text) => Ok(non_blank(text)),
        Value::Number(number) => Ok(Some(number_text(number))),
        other => Err(wrong_type(path(), expected, other)),
    };
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(index, item)| flat(item, &|| element_path(&path(), index)).transpose())
            .collect(),
        other => Ok(flat(other, &path)?.into_iter().collect()),
    }
}

/// A whole number from a number or a numeric string, without losing digits.
fn integer_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64().or_else(|| number.as_f64().and_then(float_to_i64)),
        Value::String(text) => {
            let text = text.trim();
            text.parse::<i64>()
                .ok()
                .or_else(|| text.parse::<f64>().ok().and_then(float_to_i64))
        }
        _ => None,
    }
}

/// Whether a time value that did not read as a time is one of the "unset" markers senders use rather than garbage:
/// blank, zero or negative epochs (`-1`), and dates not after 1970 such as Go's zero time `0001-01-01T00:00:00Z`.
fn is_unset_time(value: &Value) -> bool {
    let not_positive = |number: f64| number.is_finite() && number <= 0.0;
    match value {
        Value::Number(number) => number.as_f64().is_some_and(not_positive),
        Value::String(text) => {
            let text = text.trim();
            text.is_empty()
                || text.parse::<f64>().is_ok_and(not_positive)
                || parse_datetime_text(text).is_some_and(|time| time.timestamp() <= 0)
        }
        _ => false,
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

/// A value of an acceptable JSON type that still does not read as what the field must be (`"abc"` for a number).
fn invalid_value(field: String, expected: &'static str, found: &Value) -> ParseError {
    ParseError::InvalidValue {
        field,
        expected,
        found: crate::text::shortened(&found.to_string(), 40),
    }
}

fn id_text(value: &Value, path: String) -> Result<String, ParseError> {
    match value {
        Value::String(text) if text.trim().is_empty() => Err(ParseError::Empty { field: path }),
        Value::String(text) => Ok(text.trim().to_owned()),
        Value::Number(number) => Ok(number_text(number)),
        other => Err(wrong_type(path, TEXT, other)),
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

/// Lenient text of a member of a free-form map: a non-blank string or a number; for a list, its first such element.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => non_blank(text),
        Value::Number(number) => Some(number_text(number)),
        Value::Array(items) => items.iter().find_map(|item| match item {
            Value::Array(_) => None,
            flat => scalar_text(flat),
        }),
        _ => None,
    }
}

/// Lenient text of a member of a free-form label map: scalars as text, lists of scalars joined with commas, objects
/// skipped. Named fields are read strictly, with [`Obj::label`].
fn label_text(value: &Value) -> Option<String> {
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

impl EpochUnit {
    /// What a time field in this unit must be, in error messages.
    const fn expected(self) -> &'static str {
        match self {
            Self::Seconds => "an RFC 3339 time or epoch seconds",
            Self::Millis => "an RFC 3339 time or epoch milliseconds",
        }
    }
}

/// A point in time from an epoch number (or numeric string), or from RFC 3339 / ISO 8601 text; `None`
/// for anything else, including times not after 1970 or past the year 9999. [`Obj::time`] tells the unset markers
/// among those from garbage.
fn timestamp(value: &Value) -> Option<DateTime<Utc>> {
    let parsed = match value {
        Value::Number(number) => epoch_parts_of_number(number).and_then(|(whole, nanos)| epoch(whole, nanos)),
        Value::String(text) => {
            let text = text.trim();
            match split_decimal(text) {
                Some((whole, nanos)) => epoch(whole, nanos),
                None => parse_datetime_text(text),
            }
        }
        _ => None,
    };
    // The range is checked on the normalized time: chrono keeps `23:59:60` as a leap second of
    // `23:59:59`, which storage turns into the next second (`9999-12-31T23:59:60Z` into year 10000).
    parsed
        .and_then(without_leap_second)
        .filter(|time| time.timestamp() > 0 && is_supported(*time))
}

/// Whether a time is no later than the last one ingestion supports, 9999-12-31T23:59:59Z and its fractions.
fn is_supported(time: DateTime<Utc>) -> bool {
    time.timestamp() <= LATEST_EPOCH_SECONDS
}

/// A leap second (`23:59:60.x`) as the second after it (`00:00:00.x`), which is what PostgreSQL and
/// every later comparison make of it.
fn without_leap_second(time: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match time.nanosecond().checked_sub(1_000_000_000) {
        Some(nanos) => DateTime::from_timestamp(time.timestamp().checked_add(1)?, nanos),
        None => Some(time),
    }
}

/// 9999-12-31T23:59:59Z: later epochs are garbage, and times near chrono's own limit (year 262142) would overflow
/// when correlation reaches a window past them.
const LATEST_EPOCH_SECONDS: i64 = 253_402_300_799;

/// An epoch number as whole units plus the fraction of a unit in billionths.
fn epoch_parts_of_number(number: &Number) -> Option<(i64, u32)> {
    if let Some(whole) = number.as_i64() {
        return Some((whole, 0));
    }
    let float = number
        .as_f64()
        .filter(|float| float.is_finite() && *float >= 0.0 && *float < 9e18)?;
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

/// An epoch in whichever unit its magnitude says, whatever the field's documented unit: template
/// authors mix seconds and milliseconds up, and some tools send micro- or nanoseconds. Each unit's
/// range starts where the unit below would pass the year 5138 and where it itself reads 1973, so
/// no real alert time is ambiguous.
fn epoch(whole: i64, fraction_nanos: u32) -> Option<DateTime<Utc>> {
    const MILLIS_FROM: i64 = 100_000_000_000;
    const MICROS_FROM: i64 = 1_000 * MILLIS_FROM;
    const NANOS_FROM: i64 = 1_000 * MICROS_FROM;
    let units_per_second: i64 = match whole {
        ..MILLIS_FROM => 1,
        MILLIS_FROM..MICROS_FROM => 1_000,
        MICROS_FROM..NANOS_FROM => 1_000_000,
        _ => 1_000_000_000,
    };
    let nanos_per_unit = 1_000_000_000 / units_per_second;
    let nanos = whole.rem_euclid(units_per_second) * nanos_per_unit + i64::from(fraction_nanos) / units_per_second;
    DateTime::from_timestamp(whole.div_euclid(units_per_second), u32::try_from(nanos).ok()?)
}

/// RFC 3339 (nanoseconds and any offset), also `+0000`- and `+01`-style offsets (ISO 8601 allows
/// both), a space instead of `T`, and no offset at all (read as UTC).
fn parse_datetime_text(text: &str) -> Option<DateTime<Utc>> {
    parse_iso_datetime(text).or_else(|| parse_iso_datetime(&text.replacen(' ', "T", 1)))
}

fn parse_iso_datetime(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%#z"))
        .map(|time| time.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|naive| naive.and_utc())
        })
}

/// One `key:value` tag; a bare tag such as `monitor` has an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tag {
    pub(super) key: String,
    pub(super) value: String,
}

/// Tags from a comma-separated `"k:v, k:v"` string.
pub(super) fn parse_tag_text(text: &str) -> Vec<Tag> {
    text.split(',').filter_map(parse_tag).collect()
}

fn parse_tag(item: &str) -> Option<Tag> {
    // An APM's imported tags carry their origin first: `[Kubernetes]app:search-api`.
    let item = item.trim();
    let item = match item.strip_prefix('[').and_then(|rest| rest.split_once(']')) {
        Some((_context, tag)) => tag,
        None => item,
    };
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

/// Labels from `(name, text)` pairs, leaving out the texts a payload did not carry.
pub(super) fn present_labels<const N: usize>(pairs: [(&str, Option<String>); N]) -> Map<String, Value> {
    pairs
        .into_iter()
        .filter_map(|(name, text)| Some((name.to_owned(), Value::String(text?))))
        .collect()
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
        "FAILURE" | "FAILED" | "FAILED_CONTINUE" | "TERMINAL" | "ERROR" | "ERRORED" | "BROKEN" | "TIMED_OUT"
        | "TIMEDOUT" | "TIMEOUT" | "EXPIRED" => "critical",
        "UNSTABLE" | "ABORTED" | "CANCELED" | "CANCELLED" | "STOPPED" | "REJECTED" => "warning",
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

/// Whether a CI/CD status word says the deployment has no outcome (yet): it has not finished,
/// waits (for a slot, an approval), or was skipped. Such a notification reports no alert.
pub(super) fn is_deployment_in_progress(status: &str) -> bool {
    const IN_PROGRESS: &[&str] = &[
        "NOT_STARTED",
        "NOT_BUILT",
        "SKIPPED",
        "PAUSED",
        "SUSPENDED",
        "APPROVAL_WAITING",
        "WAITING_FOR_APPROVAL",
        "AWAITING_APPROVAL",
        "BUFFERED",
        "STARTED",
        "STARTING",
        "RUNNING",
        "IN_PROGRESS",
        "INPROGRESS",
        "PENDING",
        "QUEUED",
        "WAITING",
        "CREATED",
        "SCHEDULED",
        "BUILDING",
        "DEPLOYING",
    ];
    let status = status.trim();
    IN_PROGRESS.iter().any(|word| status.eq_ignore_ascii_case(word))
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
        assert_eq!(timestamp(&json!(1795172640)), Some(expected));
        assert_eq!(timestamp(&json!("1795172640")), Some(expected));
        assert_eq!(timestamp(&json!("1795172640.000")), Some(expected));
        assert_eq!(timestamp(&json!("1795172640.25")), Some(utc("2026-11-20T11:04:00.25Z")));
        assert_eq!(timestamp(&json!(1795172640.5)), Some(utc("2026-11-20T11:04:00.5Z")));
    }

    #[test]
    fn epoch_millis_keep_their_milliseconds() {
        let expected = utc("2026-11-20T07:55:00.123Z");
        assert_eq!(timestamp(&json!(1795161300123_i64)), Some(expected));
        assert_eq!(timestamp(&json!("1795161300123")), Some(expected));
    }

    #[test]
    fn epochs_are_read_by_magnitude_up_to_nanoseconds() {
        let expected = utc("2026-11-20T07:55:00.123456789Z");
        assert_eq!(timestamp(&json!(1_795_161_300_123_456_789_i64)), Some(expected));
        assert_eq!(timestamp(&json!("1795161300123456789")), Some(expected));
        assert_eq!(
            timestamp(&json!(1_795_161_300_123_456_i64)),
            Some(utc("2026-11-20T07:55:00.123456Z"))
        );
        assert_eq!(
            timestamp(&json!("1795161300123456.5")),
            Some(utc("2026-11-20T07:55:00.1234565Z"))
        );
        // A float in nanoseconds keeps what a double holds of it (microseconds, here).
        let float = timestamp(&json!(1.795_161_300_123_456_8e18)).expect("a time");
        assert_eq!(float.timestamp(), 1_795_161_300);
        assert_eq!(float.timestamp_subsec_micros() / 10, 12_345);
        assert_eq!(timestamp(&json!(u64::MAX)), None, "past what the clock library holds");
    }

    #[test]
    fn epoch_in_the_other_unit_is_read_by_magnitude() {
        let expected = utc("2026-11-20T07:55:00Z");
        assert_eq!(timestamp(&json!(1795161300000_i64)), Some(expected));
        assert_eq!(timestamp(&json!(1795161300)), Some(expected));
    }

    #[test]
    fn rfc3339_with_nanoseconds_offsets_and_loose_forms() {
        let expected = utc("2026-11-20T14:02:10.123456789Z");
        assert_eq!(timestamp(&json!("2026-11-20T14:02:10.123456789Z")), Some(expected));
        assert_eq!(timestamp(&json!("2026-11-20T16:02:10.123456789+02:00")), Some(expected));
        assert_eq!(timestamp(&json!("2026-11-20T09:02:10.123456789-0500")), Some(expected));
        assert_eq!(timestamp(&json!("2026-11-20 14:02:10.123456789")), Some(expected));
        assert_eq!(timestamp(&json!("2026-11-20T15:02:10.123456789+01")), Some(expected));
        assert_eq!(timestamp(&json!("2026-11-20T09:02:10.123456789-05")), Some(expected));
    }

    /// The error message of a reader's result, for comparisons.
    fn message<T: std::fmt::Debug>(result: Result<T, ParseError>) -> String {
        result.expect_err("must be rejected").to_string()
    }

    #[test]
    fn unset_times_are_absent() {
        for value in [
            json!(null),
            json!("0001-01-01T00:00:00Z"),
            json!("1970-01-01T00:00:00Z"),
            json!(0),
            json!(0.0),
            json!("0"),
            json!(-1),
            json!(-5),
            json!(-1.5),
            json!("-5"),
            json!(""),
            json!("  "),
        ] {
            let payload = json!({ "t": value });
            let obj = Obj::root(&payload).expect("object");
            assert_eq!(obj.time("t", EpochUnit::Seconds), Ok(None), "{value}");
            assert_eq!(obj.time("t", EpochUnit::Millis), Ok(None), "{value}");
        }
    }

    #[test]
    fn garbage_times_are_errors_naming_the_field() {
        for (value, found) in [
            (json!("yesterday"), "\"yesterday\""),
            (json!("not-a-time"), "\"not-a-time\""),
            (json!("2026-13-45T99:00:00Z"), "\"2026-13-45T99:00:00Z\""),
            (json!(1e300), "1e+300"),
            (json!(u64::MAX), "18446744073709551615"),
            (json!("99999999999999999999999"), "\"99999999999999999999999\""),
            (json!("1.2.3"), "\"1.2.3\""),
            (json!("NaN"), "\"NaN\""),
            (json!(true), "a boolean"),
            (json!({}), "an object"),
            (json!({"x": 1}), "an object"),
            (json!([]), "an array"),
            (json!(["2026-11-20T14:02:10Z"]), "an array"),
        ] {
            let payload = json!({ "event": { "t": value } });
            let event = Obj::root(&payload)
                .and_then(|root| root.require_object("event"))
                .expect("event");
            let error = event.time("t", EpochUnit::Seconds).expect_err("garbage");
            assert_eq!(error.field(), Some("event.t"), "{value}");
            assert_eq!(
                error.to_string(),
                format!("field `event.t` must be an RFC 3339 time or epoch seconds, not {found}"),
                "{value}"
            );
            assert_eq!(
                message(event.time("t", EpochUnit::Millis)),
                format!("field `event.t` must be an RFC 3339 time or epoch milliseconds, not {found}"),
            );
        }
    }

    #[test]
    fn long_unreadable_values_are_shortened_in_messages() {
        let payload = json!({ "t": "x".repeat(100) });
        let obj = Obj::root(&payload).expect("object");
        assert_eq!(
            message(obj.time("t", EpochUnit::Seconds)),
            format!(
                "field `t` must be an RFC 3339 time or epoch seconds, not \"{}…",
                "x".repeat(39)
            )
        );
    }

    #[test]
    fn text_from_strings_numbers_and_multivalue_lists() {
        let payload = json!({
            "s": " a ", "n": 42, "f": 1842.0, "blank": " ", "list": ["", "a", "b"], "empty": [], "nulls": [null],
            "null": null, "b": true, "o": {"x": 1}, "nested": ["a", ["b"]],
        });
        let obj = Obj::root(&payload).expect("object");
        for (name, expected) in [
            ("s", Some("a")),
            ("n", Some("42")),
            ("f", Some("1842")),
            ("blank", None),
            ("list", Some("a")),
            ("empty", None),
            ("nulls", None),
            ("null", None),
            ("absent", None),
        ] {
            assert_eq!(obj.text(name), Ok(expected.map(str::to_owned)), "{name}");
        }
        assert_eq!(
            message(obj.text("b")),
            "field `b` must be a string or a number, not a boolean"
        );
        assert_eq!(
            message(obj.text("o")),
            "field `o` must be a string or a number, not an object"
        );
        assert_eq!(
            message(obj.text("nested")),
            "field `nested[1]` must be a string or a number, not an array"
        );
        assert_eq!(obj.first_text(&["blank", "absent", "s"]), Ok(Some("a".to_owned())));
        assert_eq!(
            message(obj.first_text(&["s", "o"])),
            "field `o` must be a string or a number, not an object",
            "every alternative present must be usable"
        );
    }

    #[test]
    fn integers_from_numbers_and_numeric_strings() {
        let payload = json!({
            "a": 1842, "b": " 1842 ", "c": 1842.0, "d": "1842.0", "big": "9007199254740993", "neg": -3, "blank": "",
            "abc": "abc", "huge": 1e300, "huge_text": "1e300", "fraction": 4.5, "list": [1], "flag": false,
        });
        let obj = Obj::root(&payload).expect("object");
        for name in ["a", "b", "c", "d"] {
            assert_eq!(obj.integer(name), Ok(Some(1842)), "{name}");
        }
        assert_eq!(obj.integer("big"), Ok(Some(9_007_199_254_740_993)));
        assert_eq!(obj.integer("neg"), Ok(Some(-3)));
        assert_eq!(obj.integer("blank"), Ok(None));
        assert_eq!(obj.integer("absent"), Ok(None));
        for (name, found) in [
            ("abc", "\"abc\""),
            ("huge", "1e+300"),
            ("huge_text", "\"1e300\""),
            ("fraction", "4.5"),
            ("list", "an array"),
            ("flag", "a boolean"),
        ] {
            assert_eq!(
                message(obj.integer(name)),
                format!("field `{name}` must be an integer or a numeric string, not {found}")
            );
        }
        assert_eq!(obj.require_integer("b"), Ok(1842));
        assert_eq!(
            obj.require_integer("blank"),
            Err(ParseError::Empty { field: "blank".into() })
        );
        assert_eq!(
            obj.require_integer("absent"),
            Err(ParseError::MissingField { field: "absent".into() })
        );
    }

    #[test]
    fn objects_and_lists_of_objects() {
        let payload = json!({
            "o": {"k": " v ", "bad": [{}]}, "s": "x", "l": [{"a": 1}, null, {"b": 2}], "lo": {}, "junk": [{}, "junk"],
        });
        let obj = Obj::root(&payload).expect("object");
        let inner = obj.object("o").expect("readable").expect("present");
        assert_eq!(inner.text("k"), Ok(Some("v".to_owned())));
        assert_eq!(
            message(inner.text("bad")),
            "field `o.bad[0]` must be a string or a number, not an object"
        );
        assert!(obj.object("absent").expect("readable").is_none());
        assert_eq!(message(obj.object("s")), "field `s` must be an object, not a string");
        let empty = obj.object_or_empty("absent").expect("readable");
        assert_eq!(empty.text("k"), Ok(None));
        assert!(empty.scalar_labels().is_empty());
        assert_eq!(
            message(obj.object_or_empty("s")),
            "field `s` must be an object, not a string"
        );

        let elements = obj.objects("l").expect("readable");
        assert_eq!(elements.len(), 2, "null elements are skipped");
        assert_eq!(
            message(elements[1].object("b")),
            "field `l[2].b` must be an object, not a number",
            "elements keep their index in paths"
        );
        assert!(obj.objects("absent").expect("readable").is_empty());
        assert_eq!(message(obj.objects("lo")), "field `lo` must be an array, not an object");
        assert_eq!(
            message(obj.objects("junk")),
            "field `junk[1]` must be an object, not a string"
        );
    }

    #[test]
    fn label_values_from_scalars_and_lists() {
        let payload = json!({"s": " a ", "b": true, "l": ["a", 2, false, "", null], "o": {}, "lo": ["a", {}]});
        let obj = Obj::root(&payload).expect("object");
        assert_eq!(obj.label("s"), Ok(Some("a".to_owned())));
        assert_eq!(obj.label("b"), Ok(Some("true".to_owned())));
        assert_eq!(obj.label("l"), Ok(Some("a,2,false".to_owned())));
        assert_eq!(obj.label_values("l").map(|values| values.len()), Ok(3));
        assert_eq!(obj.label("absent"), Ok(None));
        assert_eq!(
            message(obj.label("o")),
            "field `o` must be a string, a number or a boolean, not an object"
        );
        assert_eq!(
            message(obj.label("lo")),
            "field `lo[1]` must be a string, a number or a boolean, not an object"
        );
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
    fn a_blank_first_id_reads_as_absent() {
        let payload = json!({"node": {"id": " ", "hostname": "db-01"}});
        let node = Obj::root(&payload)
            .and_then(|root| root.require_object("node"))
            .expect("node");
        assert_eq!(node.require_first_id(&["id", "hostname"]), Ok("db-01".to_owned()));
        let blank_only = json!({"id": ""});
        assert_eq!(
            Obj::root(&blank_only).and_then(|root| root.require_first_id(&["id", "hostname"])),
            Err(ParseError::Empty { field: "id".into() }),
            "with no other name set, the blank one is reported"
        );
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
        let payload = json!({
            "string": "env:prod, service:a:b ,monitor,, ",
            "list": ["env:prod", " service:a:b", "monitor", 7.5, null],
            "blank": "",
            "number": 42,
            "object": {"service": "x"},
            "junk": ["env:prod", {}],
        });
        let obj = Obj::root(&payload).expect("object");
        assert_eq!(obj.tags("string"), Ok(expected.clone()));
        assert_eq!(obj.tags("list").map(|tags| tags.len()), Ok(4));
        assert_eq!(obj.tags("blank"), Ok(Vec::new()));
        assert_eq!(obj.tags("absent"), Ok(Vec::new()));
        assert_eq!(find_tag(&expected, "SERVICE"), Some("a:b".to_owned()));
        assert_eq!(find_tag(&expected, "monitor"), None);
        assert_eq!(
            message(obj.tags("number")),
            "field `number` must be a comma-separated string or an array, not a number"
        );
        assert_eq!(
            message(obj.tags("object")),
            "field `object` must be a comma-separated string or an array, not an object"
        );
        assert_eq!(
            message(obj.tags("junk")),
            "field `junk[1]` must be a string or a number, not an object"
        );
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
