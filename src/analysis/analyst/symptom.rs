//! What kind of trouble an alert describes, from its words, and the small wording helpers the
//! analyst writes its sentences with.

use chrono::Duration;

use super::IncidentFacts;

/// What kind of trouble the alert describes, from its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Symptom {
    Latency,
    Errors,
    Resource,
    Availability,
    Unknown,
}

impl Symptom {
    pub(super) fn of(facts: &IncidentFacts) -> Self {
        let text = format!("{} {}", facts.title, facts.detail.as_deref().unwrap_or_default()).to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|word| text.contains(word));
        if has(&["latency", "slow", "response time", "p99", "p95", "timeout"]) {
            Self::Latency
        } else if has(&["5xx", "error rate", "errors", "exception", "failed requests"]) {
            Self::Errors
        } else if has(&["disk", "memory", "cpu", "oom", "space", "saturation"]) {
            Self::Resource
        } else if has(&["down", "unavailable", "unreachable", "crash", "restart"]) {
            Self::Availability
        } else {
            Self::Unknown
        }
    }

    pub(super) fn noun(self) -> &'static str {
        match self {
            Self::Latency => "slowdown",
            Self::Errors => "error spike",
            Self::Resource => "resource exhaustion",
            Self::Availability => "outage",
            Self::Unknown => "problem",
        }
    }

    pub(super) fn hypothesis(self, service: &str, detail: Option<&str>) -> String {
        let upstream = detail
            .and_then(upstream_named)
            .map(|name| format!(" The alert itself points at {name}."));
        match self {
            Self::Latency => format!(
                "Latency on {service} without a release usually comes from a slower dependency or from more load than its \
                 replicas absorb.{}",
                upstream.unwrap_or_default()
            ),
            Self::Errors => format!("An error spike without a release usually means a failing dependency or bad input.{}", upstream.unwrap_or_default()),
            Self::Resource => format!("{service} is running out of a resource; growth or a leak is the usual cause."),
            Self::Availability => format!("{service} is not serving; look for crashing replicas or a failed node."),
            Self::Unknown => format!("The alert does not say enough to rank causes for {service}; the diagnostics below gather the facts."),
        }
    }

    pub(super) fn next_look(self, detail: Option<&str>) -> String {
        match (self, detail.and_then(upstream_named)) {
            (Self::Latency | Self::Errors, Some(upstream)) => {
                format!("look first at {upstream}, which the alert names.")
            }
            (Self::Latency, None) => "look at load and at the slowest dependency.".into(),
            (Self::Errors, None) => "look at the first errors in the logs.".into(),
            (Self::Resource, _) => "look at what grew: traffic, data or a leak.".into(),
            (Self::Availability, _) => "look at pod restarts and node health.".into(),
            (Self::Unknown, _) => "gather the diagnostics first.".into(),
        }
    }

    pub(super) fn investigation_title(self, service: &str) -> String {
        match self {
            Self::Latency => format!("Trace the slowest requests of {service}"),
            Self::Errors => format!("Group the errors of {service} by cause"),
            Self::Resource => format!("Find what grew on {service}"),
            Self::Availability => format!("Find why {service} stopped serving"),
            Self::Unknown => format!("Gather the state of {service}"),
        }
    }

    pub(super) fn investigation_description(self) -> String {
        match self {
            Self::Latency => "Compare dependency latencies with the service's own to find where the time goes.".into(),
            Self::Errors => {
                "The first error type that rose is usually the cause; later ones are often consequences.".into()
            }
            Self::Resource => "Compare usage with the same hour last week.".into(),
            Self::Availability => "Check events, restarts and node conditions.".into(),
            Self::Unknown => "Collect pods, logs and recent changes before deciding.".into(),
        }
    }
}

/// A dependency the alert text names as upstream, e.g. "Upstream payments-api calls ...".
pub(super) fn upstream_named(detail: &str) -> Option<String> {
    let lower = detail.to_ascii_lowercase();
    let at = lower.find("upstream")?;
    detail[at + "upstream".len()..]
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| !c.is_alphanumeric() && c != '-'))
        .find(|word| word.contains('-') || word.ends_with("api") || word.ends_with("service"))
        .map(str::to_owned)
}

/// `missing env INVENTORY_DB_POOL_SIZE` → `INVENTORY_DB_POOL_SIZE`.
pub(super) fn missing_env_variable(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let marker = ["missing env ", "missing environment variable ", "env var not set: "]
        .into_iter()
        .find(|m| lower.contains(m))?;
    let at = lower.find(marker)? + marker.len();
    let name: String = message[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The first 12 characters of a commit id (payloads are untrusted: count characters, not bytes).
pub(super) fn short_commit(commit: &str) -> String {
    commit.chars().take(12).collect()
}

pub(super) fn first_sentence(text: &str) -> &str {
    text.split_inclusive(". ").next().unwrap_or(text).trim()
}

pub(super) fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

pub(super) fn human_duration(duration: Duration) -> String {
    let seconds = duration.num_seconds().abs();
    match seconds {
        0..=89 => format!("{seconds} s"),
        90..=5399 if seconds % 60 == 0 => format!("{} min", seconds / 60),
        90..=5399 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{:.1} h", seconds as f64 / 3600.0),
    }
}

pub(super) fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

pub(super) fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
