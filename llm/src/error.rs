use std::{fmt, time::Duration};

/// Why a call to a model provider failed. No variant ever holds the API key.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// HTTP 429 on every attempt; `retry_after` is what the last answer asked for.
    #[error("rate limited by the model provider{}", retry_after_suffix(*.retry_after))]
    RateLimited { retry_after: Option<Duration> },
    /// Any other unsuccessful status (after retries, for 5xx). `body` is the start of the answer.
    #[error("model provider answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("timed out {kind} after {after:?}")]
    Timeout { kind: TimeoutKind, after: Duration },
    /// The connection could not be made or broke.
    #[error("transport error: {0}")]
    Transport(#[source] reqwest::Error),
    /// The provider answered something this client does not understand, or reported an error
    /// in the middle of a stream.
    #[error("unexpected answer from the model provider: {0}")]
    Protocol(String),
}

fn retry_after_suffix(retry_after: Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |after| format!(" (retry after {after:?})"))
}

/// Which of the client's timeouts ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    /// Opening the TCP/TLS connection.
    Connect,
    /// From sending the request to the first byte of the response body.
    FirstByte,
    /// Between two chunks of the response body.
    Idle,
}

impl fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connecting",
            Self::FirstByte => "waiting for the first byte",
            Self::Idle => "waiting for the next chunk",
        })
    }
}

/// A provider's API key. Its `Debug` output is `[redacted]`, so configurations and errors can be
/// logged whole; it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_debug_is_redacted() {
        let key = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{key:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(key)), "Some([redacted])");
    }

    #[test]
    fn messages_say_what_happened() {
        let limited = LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(2)),
        };
        assert_eq!(
            limited.to_string(),
            "rate limited by the model provider (retry after 2s)"
        );
        let timeout = LlmError::Timeout {
            kind: TimeoutKind::Idle,
            after: Duration::from_millis(300),
        };
        assert_eq!(timeout.to_string(), "timed out waiting for the next chunk after 300ms");
    }
}
