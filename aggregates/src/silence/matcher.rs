//! Which alerts a silence matches: Alertmanager's four matcher operators over an alert's
//! fields and labels.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
