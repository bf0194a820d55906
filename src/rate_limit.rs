//! Per-user request budgets (spec Limits): 100 requests a minute on the HTTP API, 20 on
//! `/chat_api/*`; health, metrics and the OpenAPI document are exempt. Requests with no identity
//! at all (registration, login) are counted per client address against a budget of their own
//! (`ANONYMOUS_RATE_LIMIT_PER_MINUTE`), larger than a user's because many users may share one
//! address (a NAT, an office, a test suite).
//!
//! The window is fixed and anchored at the caller's first request: the first request opens a
//! 60-second window and the 101st inside it is refused, however quickly or slowly the first 100
//! came. (A GCRA limiter such as `governor` refills continuously, so it would let the 101st
//! through whenever the first 100 took longer than 0.6 s, which is not "100 a minute".) With
//! Redis the count lives in one key per caller and window (`INCR` + `PEXPIRE` in a script, so
//! every instance spends one budget); without Redis an in-process map does the same.
//!
//! `X-RateLimit-Reset` is the number of seconds until the window closes (rounded up).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use axum::{
    extract::{ConnectInfo, FromRequestParts, Request, State},
    http::{HeaderMap, HeaderValue, Method},
    middleware::Next,
    response::{IntoResponse, Response},
};
use dashmap::DashMap;
use sha2::{Digest, Sha256};

use vigil_aggregates::source::Source;

use crate::{
    auth::{ingestion_token::TokenOwner, Identity},
    cache::{Cache, RedisHandle},
    config::Config,
    error::AppError,
    state::AppState,
};

const WINDOW: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Api,
    Chat,
    /// Alert ingestion has its own budget per source, so an alert storm is not cut off by the API's.
    Ingest(Source),
    /// Every request of a caller with no identity, whatever its path.
    Anonymous,
}

impl Scope {
    /// The budget a path spends, or `None` for exempt paths.
    pub fn of(method: &Method, path: &str) -> Option<Self> {
        let exempt = method == Method::OPTIONS
            || path == "/health"
            || path.starts_with("/health/")
            || path == "/metrics"
            || path == "/api/openapi.json";
        if exempt {
            None
        } else if path == "/chat_api" || path.starts_with("/chat_api/") {
            Some(Self::Chat)
        } else if let Some(source) = ingestion_source(path) {
            Some(Self::Ingest(source))
        } else {
            Some(Self::Api)
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Chat => "chat",
            Self::Ingest(source) => source.as_str(),
            Self::Anonymous => "anonymous",
        }
    }
}

/// `/api/source_x/...` → the source.
fn ingestion_source(path: &str) -> Option<Source> {
    let rest = path.strip_prefix("/api/")?;
    let (token, _) = rest.split_once('/')?;
    token
        .starts_with("source_")
        .then(|| Source::from_token(token))
        .flatten()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    pub reset_after: Duration,
}

impl Decision {
    fn new(limit: u32, count: u64, reset_after: Duration) -> Self {
        Self {
            allowed: count <= u64::from(limit),
            limit,
            remaining: u64::from(limit).saturating_sub(count) as u32,
            reset_after,
        }
    }

    fn reset_secs(&self) -> u64 {
        self.reset_after.as_millis().div_ceil(1000) as u64
    }
}

/// Requests a minute allowed in each scope.
#[derive(Clone, Copy, Debug)]
pub struct Budgets {
    pub api: u32,
    pub chat: u32,
    pub ingest: u32,
    pub anonymous: u32,
}

impl Budgets {
    pub fn from_config(config: &Config) -> Self {
        Self {
            api: config.rate_limit_per_minute,
            chat: config.chat_rate_limit_per_minute,
            ingest: config.ingest_rate_limit_per_minute,
            anonymous: config.anonymous_rate_limit_per_minute,
        }
    }

    fn of(&self, scope: Scope) -> u32 {
        match scope {
            Scope::Api => self.api,
            Scope::Chat => self.chat,
            Scope::Ingest(_) => self.ingest,
            Scope::Anonymous => self.anonymous,
        }
    }
}

pub struct RateLimiter {
    budgets: Budgets,
    /// Shared by every instance; `None` without `REDIS_URL`.
    redis: Option<RedisHandle>,
    /// This instance's own windows: the only ones without Redis, and the stand-in while Redis is
    /// out of reach (each instance then limits on its own rather than not at all).
    local: LocalWindows,
}

#[derive(Default)]
struct LocalWindows {
    windows: DashMap<String, (Instant, u64)>,
    calls: AtomicU64,
}

impl LocalWindows {
    /// Counts one request in `key`'s window: the count so far and the time until it resets.
    fn count(&self, key: String) -> (u64, Duration) {
        let now = Instant::now();
        if self.calls.fetch_add(1, Ordering::Relaxed) % 4096 == 0 {
            self.windows
                .retain(|_, (opened, _)| now.duration_since(*opened) < WINDOW);
        }
        let mut entry = self.windows.entry(key).or_insert((now, 0));
        let (opened, count) = entry.value_mut();
        if now.duration_since(*opened) >= WINDOW {
            *opened = now;
            *count = 0;
        }
        *count += 1;
        (*count, WINDOW.saturating_sub(now.duration_since(*opened)))
    }
}

/// Counts one request in a window and says when it resets (its digest is computed once).
static REDIS_WINDOW_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
",
    )
});

impl RateLimiter {
    pub fn new(cache: &Cache, budgets: Budgets) -> Self {
        let redis = match cache {
            Cache::Redis(redis) => Some(redis.clone()),
            Cache::InProcess => None,
        };
        Self {
            budgets,
            redis,
            local: LocalWindows::default(),
        }
    }

    /// Spends one request of `caller`'s budget in `scope`.
    pub async fn check(&self, scope: Scope, caller: &str) -> Decision {
        let limit = self.budgets.of(scope);
        let key = format!("ratelimit:{}:{caller}", scope.name());
        let (count, reset) = match &self.redis {
            Some(redis) => match Self::count_in_redis(redis, &key).await {
                Ok(counted) => counted,
                // A cache outage must not take the API down with it, nor leave it unlimited (the
                // handle logs the outage once).
                Err(_) => self.local.count(key),
            },
            None => self.local.count(key),
        };
        Decision::new(limit, count, reset)
    }

    async fn count_in_redis(redis: &RedisHandle, key: &str) -> anyhow::Result<(u64, Duration)> {
        let key = redis.key(key);
        let (count, ttl_ms): (u64, u64) = redis
            .run(|mut conn| async move {
                REDIS_WINDOW_SCRIPT
                    .key(key)
                    .arg(WINDOW.as_millis() as u64)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok((count, Duration::from_millis(ttl_ms)))
    }
}

/// Who a request is counted against: the verified user (the `X-User-ID` the auth mode honours,
/// or the login session's), or on an ingestion path the owner of a live ingestion token; `None`
/// for anything else, which is counted per client address. An unverified claim, an unknown token
/// or a stale cookie must neither open a budget of its own (a fresh value per request would
/// dodge the address's budget: password guessing unthrottled) nor spend a real user's (anyone
/// could lock them out). What is resolved here is kept for the handler, which so does not look
/// a session or a token up again.
async fn identified_caller_key(request: Request, state: &AppState, scope: Scope) -> (Request, Option<String>) {
    let (mut parts, body) = request.into_parts();
    let user_id = match Identity::from_request_parts(&mut parts, state).await {
        Ok(Identity::User(user_id)) => Some(user_id),
        // The handler meets the same failure and answers for it.
        Err(_) => None,
        Ok(_) if matches!(scope, Scope::Ingest(_)) => TokenOwner::resolve(&mut parts, state).await.ok().flatten(),
        Ok(_) => None,
    };
    let key = user_id.map(|user_id| format!("user:{}", hex::encode(Sha256::digest(user_id.as_bytes()))));
    (Request::from_parts(parts, body), key)
}

fn client_address_key(request: &Request) -> String {
    match request.extensions().get::<ConnectInfo<std::net::SocketAddr>>() {
        Some(ConnectInfo(addr)) => format!("ip:{}", addr.ip()),
        None => "ip:unknown".into(),
    }
}

pub async fn enforce(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(scope) = Scope::of(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let (request, caller) = identified_caller_key(request, &state, scope).await;
    let (scope, caller) = match caller {
        Some(caller) => (scope, caller),
        None => (Scope::Anonymous, client_address_key(&request)),
    };
    let decision = state.rate_limiter.check(scope, &caller).await;
    let mut response = if decision.allowed {
        next.run(request).await
    } else {
        state.metrics.rate_limit.refused(scope.name());
        AppError::RateLimited {
            limit: decision.limit,
            retry_after_secs: decision.reset_secs(),
        }
        .into_response()
    };
    write_headers(response.headers_mut(), &decision);
    response
}

fn write_headers(headers: &mut HeaderMap, decision: &Decision) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(decision.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(decision.remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(decision.reset_secs()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes() {
        assert_eq!(Scope::of(&Method::GET, "/health"), None);
        assert_eq!(Scope::of(&Method::GET, "/health/readiness"), None);
        assert_eq!(Scope::of(&Method::GET, "/healthz"), Some(Scope::Api));
        assert_eq!(Scope::of(&Method::OPTIONS, "/api/incidents"), None);
        assert_eq!(Scope::of(&Method::GET, "/chat_api/sessions"), Some(Scope::Chat));
        assert_eq!(Scope::of(&Method::POST, "/api/auth/login"), Some(Scope::Api));
        assert_eq!(
            Scope::of(&Method::POST, "/api/source_f/deployment"),
            Some(Scope::Ingest(Source::SourceF))
        );
        assert_eq!(Scope::of(&Method::POST, "/api/source_z/x"), Some(Scope::Api));
    }

    #[tokio::test]
    async fn in_process_window_refuses_after_the_limit() {
        let limiter = RateLimiter::new(
            &Cache::InProcess,
            Budgets {
                api: 3,
                chat: 1,
                ingest: 1,
                anonymous: 2,
            },
        );
        for expected_remaining in [2, 1, 0] {
            let decision = limiter.check(Scope::Api, "u").await;
            assert!(decision.allowed);
            assert_eq!(decision.remaining, expected_remaining);
        }
        let refused = limiter.check(Scope::Api, "u").await;
        assert!(!refused.allowed);
        assert!(refused.reset_secs() >= 59 && refused.reset_secs() <= 60);
        assert!(
            limiter.check(Scope::Api, "other").await.allowed,
            "budgets are per caller"
        );
        assert!(limiter.check(Scope::Chat, "u").await.allowed, "budgets are per scope");
        assert_eq!(limiter.check(Scope::Anonymous, "ip:a").await.limit, 2);
    }
}
