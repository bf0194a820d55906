//! The database's circuit. While PostgreSQL is down, every pool acquire waits out the pool's
//! timeout (5 s: sqlx retries a refused connection until then), so every request of the API
//! waited 5 s for its 503 and the health check 3 s. Once a request or a health check has found
//! the database out of reach, a background probe confirms it and opens the circuit: requests
//! that need the database then answer 503 at once, until the probe reaches it again. The same
//! pattern as the Redis cache's (cache.rs).

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    extract::{Request, State},
    http::{header, HeaderValue, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use sqlx::{postgres::PgConnectOptions, Connection, PgConnection};

use crate::{
    error::{AppError, DatabaseUnreachable, UNAVAILABLE_RETRY_SECS},
    rate_limit::Scope,
    state::AppState,
};

/// How long one probe may take (connect and `SELECT 1`) before it counts as a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause between failed probes: how soon the service notices the database is back.
const PROBE_PAUSE: Duration = Duration::from_millis(500);

pub struct DatabaseCircuit {
    /// How the probe connects: the pool's own options, on a connection of its own, so that a
    /// pool busy with slow queries is not taken for a database that is down.
    options: PgConnectOptions,
    open: AtomicBool,
    probing: AtomicBool,
}

impl DatabaseCircuit {
    pub fn new(options: PgConnectOptions) -> Arc<Self> {
        Arc::new(Self {
            options,
            open: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        })
    }

    /// Whether the database is known to be out of reach (requests needing it answer 503 at once).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Says the database looked out of reach: a probe checks it at once (unless one is running),
    /// opens the circuit if it is, and keeps probing until it is back. One slow answer alone
    /// opens nothing.
    pub fn suspect(self: &Arc<Self>) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let circuit = self.clone();
        tokio::spawn(async move { circuit.probe_until_reachable().await });
    }

    async fn probe_until_reachable(&self) {
        loop {
            match self.probe().await {
                Ok(()) => {
                    if self.open.swap(false, Ordering::AcqRel) {
                        tracing::info!("the database is reachable again; requests are served");
                    }
                    break;
                }
                Err(error) => {
                    if !self.open.swap(true, Ordering::AcqRel) {
                        tracing::warn!(%error, "the database is unreachable; requests that need it answer 503 at once until a probe reaches it");
                    }
                    tokio::time::sleep(PROBE_PAUSE).await;
                }
            }
        }
        self.probing.store(false, Ordering::Release);
    }

    async fn probe(&self) -> anyhow::Result<()> {
        let attempt = async {
            let mut conn = PgConnection::connect_with(&self.options).await?;
            sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&mut conn).await?;
            conn.close().await
        };
        tokio::time::timeout(PROBE_TIMEOUT, attempt)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {} ms", PROBE_TIMEOUT.as_millis()))?
            .map_err(anyhow::Error::from)
    }
}

/// Whether a request on `path` is served without the database or has its own way through an
/// outage: health checks (they report the outage), metrics, the API document, preflights, and
/// alert ingestion (a sender is answered by its own path, unchanged, and retries its 503s).
fn exempt(method: &axum::http::Method, path: &str) -> bool {
    matches!(Scope::of(method, path), None | Some(Scope::Ingest(_)))
}

/// The middleware: answers 503 at once while the circuit is open, and reports to it every
/// response that found the database out of reach.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let exempt = exempt(request.method(), request.uri().path());
    if !exempt && state.database_circuit.is_open() {
        return unavailable();
    }
    let response = next.run(request).await;
    if response.extensions().get::<DatabaseUnreachable>().is_some() {
        state.database_circuit.suspect();
    }
    response
}

/// The same answer as a request that waited for the database (code and `Retry-After`), without
/// the wait, and without a log line per request (the circuit logged once when it opened).
fn unavailable() -> Response {
    let mut response = AppError::Refused {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "service_unavailable",
        message: "the database is unavailable; retry later".into(),
    }
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_SECS));
    response
}

#[cfg(test)]
mod tests {
    use super::exempt;
    use axum::http::Method;

    #[test]
    fn health_metrics_and_ingestion_pass_an_open_circuit_and_the_rest_do_not() {
        for path in [
            "/health",
            "/health/readiness",
            "/metrics",
            "/api/openapi.json",
            "/api/source_a/alerts",
        ] {
            assert!(exempt(&Method::GET, path) || exempt(&Method::POST, path), "{path}");
        }
        for path in [
            "/api/incidents",
            "/chat_api/sessions",
            "/api/ingestion-tokens",
            "/api/users/register",
        ] {
            assert!(!exempt(&Method::GET, path), "{path}");
        }
    }
}
