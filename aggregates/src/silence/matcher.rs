//! Which alerts a silence matches: Alertmanager's four matcher operators over an alert's
//! fields and labels.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{MAX_MATCHERS, MAX_NAME_CHARS, MAX_VALUE_CHARS};

/// A validation failure naming the request field at fault, in the HTTP body's camelCase JSON
/// path, e.g. `matchers[2].value`, `matchers`, `endsAt`, `weekly.timeZone`, `weekly.days`,
/// `comment`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    pub field: String,
    pub message: String,
}

pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidField {
    InvalidField {
        field: field.into(),
        message: message.into(),
    }
}

/// Compiled size one matcher's regex may reach: plenty for label patterns, small enough that
/// a user cannot make every alert's evaluation costly (or exhaust memory) with `(a{1000}){1000}`.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Cache of the regex's lazy DFA; when it is too small the regex falls back to a slower but
/// still linear-time engine, so this bounds memory, never correctness.
const REGEX_DFA_SIZE_LIMIT: usize = 256 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

/// One matcher as declared (stored in events).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matcher {
    pub name: String,
    pub op: MatchOp,
    pub value: String,
}

/// What a matcher can see of an alert. The names `source`, `service`, `environment`,
/// `severity` and `title` refer to these fields; any other name is one of the alert's `labels`,
/// compared as a string: strings as they are, numbers and booleans as their JSON text, arrays
/// and objects as compact JSON text. A field or label the alert lacks (or a `null` label) is the
/// empty string, Alertmanager's semantics: `team=""` matches an alert without `team`, and so
/// does `team!="x"`.
#[derive(Clone, Copy, Debug)]
pub struct AlertFacts<'a> {
    pub source: &'a str,
    pub service: Option<&'a str>,
    pub environment: Option<&'a str>,
    pub severity: Option<&'a str>,
    pub title: &'a str,
    pub labels: &'a Map<String, Value>,
}

/// What a matcher's name designates, resolved once rather than per alert.
#[derive(Clone, Debug)]
enum Target {
    Source,
    Service,
    Environment,
    Severity,
    Title,
    Label(String),
}

impl Target {
    fn of(name: &str) -> Self {
        match name {
            "source" => Self::Source,
            "service" => Self::Service,
            "environment" => Self::Environment,
            "severity" => Self::Severity,
            "title" => Self::Title,
            label => Self::Label(label.to_owned()),
        }
    }

    fn text<'a>(&self, alert: &AlertFacts<'a>) -> Cow<'a, str> {
        let field = |value: Option<&'a str>| Cow::Borrowed(value.unwrap_or(""));
        match self {
            Self::Source => Cow::Borrowed(alert.source),
            Self::Service => field(alert.service),
            Self::Environment => field(alert.environment),
            Self::Severity => field(alert.severity),
            Self::Title => Cow::Borrowed(alert.title),
            Self::Label(name) => match alert.labels.get(name) {
                None | Some(Value::Null) => Cow::Borrowed(""),
                Some(Value::String(text)) => Cow::Borrowed(text.as_str()),
                // `Value`'s Display is its compact JSON text.
                Some(other) => Cow::Owned(other.to_string()),
            },
        }
    }
}

#[derive(Clone, Debug)]
enum Test {
    Equal(String),
    Regex(Regex),
}

/// A matcher ready to test alerts: its regex compiled once, fully anchored (`^(?:value)$`, as
/// Alertmanager does), with the `regex` crate (linear time, no backtracking) and a bounded
/// compiled size.
#[derive(Clone, Debug)]
pub struct CompiledMatcher {
    target: Target,
    test: Test,
    negated: bool,
}

impl CompiledMatcher {
    pub fn new(matcher: &Matcher) -> Result<Self, regex::Error> {
        let (test, negated) = match matcher.op {
            MatchOp::Equal => (Test::Equal(matcher.value.clone()), false),
            MatchOp::NotEqual => (Test::Equal(matcher.value.clone()), true),
            MatchOp::Regex => (Test::Regex(anchored(&matcher.value)?), false),
            MatchOp::NotRegex => (Test::Regex(anchored(&matcher.value)?), true),
        };
        Ok(Self {
            target: Target::of(&matcher.name),
            test,
            negated,
        })
    }

    pub fn matches(&self, alert: &AlertFacts<'_>) -> bool {
        self.test_text(&self.target.text(alert))
    }

    /// Whether it would match an alert lacking the field or label.
    pub fn matches_empty(&self) -> bool {
        self.test_text("")
    }

    fn test_text(&self, text: &str) -> bool {
        let found = match &self.test {
            Test::Equal(value) => text == value,
            Test::Regex(regex) => regex.is_match(text),
        };
        found != self.negated
    }
}

fn anchored(pattern: &str) -> Result<Regex, regex::Error> {
    // The pattern must stand on its own first: otherwise an unbalanced one such as `a)|(.*`
    // would escape the anchoring group (`^(?:a)|(.*)$` matches everything). It also makes a
    // syntax error's position point into what the user wrote.
    bounded(pattern)?;
    bounded(&format!("^(?:{pattern})$"))
}

fn bounded(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
        .build()
}

/// Validates and compiles declared matchers: 1..=[`MAX_MATCHERS`] (none at all when not
/// `selective`); names non-blank and at most [`MAX_NAME_CHARS`]; values at most
/// [`MAX_VALUE_CHARS`]; regexes compile. `selective`: at least one matcher must not match the
/// empty string (Alertmanager's rule for silences, so that one cannot silence everything by
/// accident).
pub fn compile_matchers(matchers: &[Matcher], selective: bool) -> Result<Vec<CompiledMatcher>, InvalidField> {
    if selective && matchers.is_empty() {
        return Err(invalid("matchers", "at least one matcher is required"));
    }
    if matchers.len() > MAX_MATCHERS {
        return Err(invalid("matchers", format!("at most {MAX_MATCHERS} matchers")));
    }
    let mut compiled = Vec::with_capacity(matchers.len());
    for (i, matcher) in matchers.iter().enumerate() {
        if matcher.name.trim().is_empty() {
            return Err(invalid(format!("matchers[{i}].name"), "must not be blank"));
        }
        if matcher.name.chars().count() > MAX_NAME_CHARS {
            return Err(invalid(
                format!("matchers[{i}].name"),
                format!("at most {MAX_NAME_CHARS} characters"),
            ));
        }
        if matcher.value.chars().count() > MAX_VALUE_CHARS {
            return Err(invalid(
                format!("matchers[{i}].value"),
                format!("at most {MAX_VALUE_CHARS} characters"),
            ));
        }
        // The regex crate's message says why, with a caret under the fault.
        let matcher =
            CompiledMatcher::new(matcher).map_err(|e| invalid(format!("matchers[{i}].value"), e.to_string()))?;
        compiled.push(matcher);
    }
    if selective && compiled.iter().all(CompiledMatcher::matches_empty) {
        return Err(invalid(
            "matchers",
            "at least one matcher must not match an empty or absent value (the silence would match every alert)",
        ));
    }
    Ok(compiled)
}

/// The text a matcher named `name` compares for `alert` (a field, or else a label).
pub fn field_text<'a>(alert: &AlertFacts<'a>, name: &str) -> Cow<'a, str> {
    Target::of(name).text(alert)
}
