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

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Map, Number, Value};

use super::{
    tags::{parse_tag_text, Tag},
    time::{is_supported, parse_datetime_text, timestamp, EpochUnit},
    ParseError,
};

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

#[cfg(test)]
mod tests;
