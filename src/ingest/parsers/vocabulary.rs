//! The words senders use for severities and deployment outcomes, in the spec's vocabulary.

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
