//! What the OpenAI-compatible clients share: their configuration, the retry loop around a POST, and
//! the timeouts on reading a response body.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use rand::Rng;
use reqwest::{header, Response, StatusCode};
use serde::Serialize;
use tokio::time::Instant;

use crate::error::{ApiKey, LlmError, TimeoutKind};

/// Where and how to reach an OpenAI-compatible API. `Debug` never shows the key.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// `https://api.openai.com`, `http://localhost:11434`, ...; a trailing `/` or `/v1` is fine.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<ApiKey>,
    /// The model used when a request names none.
    pub model: String,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }

    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
}

/// There is deliberately no total timeout: a long answer may stream for minutes while it keeps
/// making progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Opening the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the first byte of the response body: covers the provider's
    /// queueing and the prompt's processing.
    pub first_byte: Duration,
    /// Between two chunks of the body once it flows. Reasoning models that think silently
    /// mid-answer may need more.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(30),
        }
    }
}

/// Retries of a request that failed before any of its response was used: on HTTP 429, on 5xx and
/// when the connection could not be made. A timeout waiting for the answer is not retried (the
/// provider may still be working on it, and billing it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    /// Delay after the first failure; it doubles after each further one (with jitter).
    pub base_delay: Duration,
    /// Cap on any delay, including one a `Retry-After` header asks for.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The delay after attempt number `failed` (1-based) failed: `Retry-After` when the provider
    /// sent one, otherwise `base_delay × 2^(failed-1)` scaled by a random factor in [0.5, 1] so that
    /// clients which failed together do not retry together; never more than `max_delay`.
    fn delay(&self, failed: u32, retry_after: Option<Duration>) -> Duration {
        let delay = retry_after.unwrap_or_else(|| {
            let exponential = self
                .base_delay
                .saturating_mul(2u32.saturating_pow(failed.saturating_sub(1)));
            exponential.mul_f64(rand::rng().random_range(0.5..=1.0))
        });
        delay.min(self.max_delay)
    }
}

/// The URL of `path` (such as `chat/completions`) under `base_url`, which may or may not end
/// with `/` or `/v1`.
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    format!("{base}/v1/{path}")
}

/// One endpoint of the API with the policy to call it.
#[derive(Debug)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    url: String,
    /// The URL's host, which its spans name (never a path or a query, which could carry a key).
    host: String,
    api_key: Option<ApiKey>,
    timeouts: Timeouts,
    retry: RetryPolicy,
}

/// How one attempt failed.
enum Failure {
    Retryable {
        error: LlmError,
        retry_after: Option<Duration>,
    },
    Final(LlmError),
}

/// At most this much of an error answer is read, and this many characters of it are kept.
const ERROR_BODY_READ_BYTES: usize = 4096;
const ERROR_BODY_KEPT_CHARS: usize = 500;

impl Endpoint {
    pub(crate) fn new(config: &OpenAiConfig, path: &str) -> Result<Self, LlmError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect)
            .build()
            .map_err(LlmError::Transport)?;
        let url = endpoint_url(&config.base_url, path);
        Ok(Self {
            client,
            host: reqwest::Url::parse(&url)
                .ok()
                .and_then(|url| url.host_str().map(str::to_owned))
                .unwrap_or_default(),
            url,
            api_key: config.api_key.clone(),
            timeouts: config.timeouts,
            retry: config.retry,
        })
    }

    /// POSTs `body` as JSON, retrying by the policy, and returns the successful response with its
    /// body still unread, wrapped in the body timeouts.
    #[tracing::instrument(name = "model call", skip_all, fields(host = %self.host))]
    pub(crate) async fn post(
        &self,
        body: &impl Serialize,
    ) -> Result<impl Stream<Item = Result<Bytes, LlmError>> + Send + 'static, LlmError> {
        let mut attempt = 1;
        loop {
            let deadline = Instant::now() + self.timeouts.first_byte;
            let (error, retry_after) = match self.attempt(body, deadline).await {
                Ok(response) => return Ok(timed_body(response, deadline, self.timeouts)),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Retryable { error, retry_after }) => (error, retry_after),
            };
            if attempt >= self.retry.max_attempts {
                return Err(error);
            }
            let delay = self.retry.delay(attempt, retry_after);
            tracing::warn!(url = %self.url, attempt, ?delay, %error, "model provider call failed, retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn attempt(&self, body: &impl Serialize, deadline: Instant) -> Result<Response, Failure> {
        let mut request = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose());
        }
        let response = match tokio::time::timeout_at(deadline, request.send()).await {
            Err(_) => {
                return Err(Failure::Final(LlmError::Timeout {
                    kind: TimeoutKind::FirstByte,
                    after: self.timeouts.first_byte,
                }))
            }
            Ok(Err(error)) if error.is_connect() => {
                let error = if error.is_timeout() {
                    LlmError::Timeout {
                        kind: TimeoutKind::Connect,
                        after: self.timeouts.connect,
                    }
                } else {
                    LlmError::Transport(error)
                };
                return Err(Failure::Retryable {
                    error,
                    retry_after: None,
                });
            }
            Ok(Err(error)) => return Err(Failure::Final(LlmError::Transport(error))),
            Ok(Ok(response)) => response,
        };

        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(&response);
        if status == StatusCode::TOO_MANY_REQUESTS {
            return Err(Failure::Retryable {
                error: LlmError::RateLimited { retry_after },
                retry_after,
            });
        }
        let error = LlmError::Status {
            status: status.as_u16(),
            body: self.error_body(response, deadline).await,
        };
        if status.is_server_error() {
            Err(Failure::Retryable { error, retry_after })
        } else {
            Err(Failure::Final(error))
        }
    }

    /// The start of an error answer, as far as it arrives in time, without the API key should
    /// the provider echo it.
    async fn error_body(&self, response: Response, deadline: Instant) -> String {
        let mut bytes = Vec::new();
        let body = timed_body(response, deadline, self.timeouts);
        futures::pin_mut!(body);
        while let Some(Ok(chunk)) = body.next().await {
            bytes.extend_from_slice(&chunk);
            if bytes.len() >= ERROR_BODY_READ_BYTES {
                break;
            }
        }
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(key) = self.api_key.as_ref().filter(|key| !key.expose().is_empty()) {
            text = text.replace(key.expose(), "[redacted]");
        }
        text.trim().chars().take(ERROR_BODY_KEPT_CHARS).collect()
    }
}

/// `Retry-After` in seconds; the HTTP-date form is not used by model providers and is ignored.
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(header::RETRY_AFTER)?.to_str().ok()?;
    Duration::try_from_secs_f64(value.trim().parse().ok()?).ok()
}

/// The response body, failing with a timeout when its first byte has not come by
/// `first_byte_deadline` or when a later chunk takes longer than `timeouts.idle`.
fn timed_body(
    response: Response,
    first_byte_deadline: Instant,
    timeouts: Timeouts,
) -> impl Stream<Item = Result<Bytes, LlmError>> + Send + 'static {
    async_stream::try_stream! {
        let mut body = response.bytes_stream();
        let (mut deadline, mut kind, mut after) = (first_byte_deadline, TimeoutKind::FirstByte, timeouts.first_byte);
        loop {
            let next = tokio::time::timeout_at(deadline, body.next())
                .await
                .map_err(|_| LlmError::Timeout { kind, after })?;
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(LlmError::Transport)?;
            (deadline, kind, after) = (Instant::now() + timeouts.idle, TimeoutKind::Idle, timeouts.idle);
            yield chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_do_not_double_slashes_or_versions() {
        for base in [
            "http://host:8080",
            "http://host:8080/",
            "http://host:8080/v1",
            "http://host:8080/v1/",
        ] {
            assert_eq!(
                endpoint_url(base, "chat/completions"),
                "http://host:8080/v1/chat/completions"
            );
        }
        assert_eq!(
            endpoint_url("https://gateway.example/openai/", "embeddings"),
            "https://gateway.example/openai/v1/embeddings"
        );
    }

    #[test]
    fn delays_grow_exponentially_within_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let first = policy.delay(1, None);
            assert!(
                (Duration::from_millis(50)..=Duration::from_millis(100)).contains(&first),
                "{first:?}"
            );
            let third = policy.delay(3, None);
            assert!(
                (Duration::from_millis(200)..=Duration::from_millis(400)).contains(&third),
                "{third:?}"
            );
            assert!(policy.delay(30, None) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        };
        assert_eq!(policy.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(policy.delay(1, Some(Duration::from_secs(60))), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn error_bodies_are_cut_short_and_never_show_the_key() {
        let config = OpenAiConfig::new("http://localhost", "gpt-4o").with_api_key("sk-very-secret");
        let endpoint = Endpoint::new(&config, "chat/completions").unwrap();
        let body = format!("  invalid key sk-very-secret {}", "x".repeat(5000));
        let response = Response::from(http::Response::new(body));
        let deadline = Instant::now() + Duration::from_secs(5);

        let excerpt = endpoint.error_body(response, deadline).await;
        assert!(excerpt.starts_with("invalid key [redacted] xxx"), "{excerpt}");
        assert_eq!(excerpt.chars().count(), ERROR_BODY_KEPT_CHARS);
    }

    #[test]
    fn config_debug_hides_the_key() {
        let config = OpenAiConfig::new("http://localhost", "gpt-4o").with_api_key("sk-very-secret");
        let debug = format!("{config:?}");
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
    }
}
