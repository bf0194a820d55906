//! Dependency checks behind `/health` and `/health/readiness` (spec Health and "Overall health").
//! A subsystem that does not exist yet says so as `degraded` with a warning; nothing reports a
//! health it has not measured.

use std::{collections::BTreeMap, future::Future, net::SocketAddr, time::Duration};

use futures::{SinkExt, StreamExt};
use serde::Serialize;
use tokio_tungstenite::tungstenite::Message;

use crate::state::AppState;

const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Healthy,
    Degraded,
    Unhealthy,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Check {
    pub status: HealthStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Check {
    pub fn healthy(message: impl Into<String>) -> Self {
        Self {
            status: HealthStatus::Healthy,
            message: Some(message.into()),
            warning: None,
            error: None,
        }
    }
    pub fn degraded(message: impl Into<String>, warning: impl Into<String>) -> Self {
        Self {
            status: HealthStatus::Degraded,
            message: Some(message.into()),
            warning: Some(warning.into()),
            error: None,
        }
    }
    pub fn unhealthy(error: impl Into<String>) -> Self {
        Self {
            status: HealthStatus::Unhealthy,
            message: None,
            warning: None,
            error: Some(error.into()),
        }
    }
}

/// The spec's table: any unhealthy → unhealthy; else any degraded → degraded; else healthy.
pub fn overall(checks: &BTreeMap<&'static str, Check>) -> HealthStatus {
    checks
        .values()
        .map(|check| check.status)
        .max()
        .unwrap_or(HealthStatus::Healthy)
}

pub async fn full_report(state: &AppState) -> BTreeMap<&'static str, Check> {
    let (database, cache, vector_store, task_queue, chatbot) = tokio::join!(
        check_database(state),
        bounded(check_cache(state)),
        needs_database(state, check_vector_store(state)),
        needs_database(state, check_task_queue(state)),
        check_chatbot_websocket(state.websocket_addr, state.config.health_ws_timeout()),
    );
    BTreeMap::from([
        ("database", database),
        ("cache", cache),
        ("vector_store", vector_store),
        ("task_queue", task_queue),
        ("chatbot_websocket", chatbot),
    ])
}

pub async fn readiness_report(state: &AppState) -> BTreeMap<&'static str, Check> {
    let (database, cache) = tokio::join!(check_database(state), bounded(check_cache(state)));
    BTreeMap::from([("database", database), ("cache", cache)])
}

async fn bounded(check: impl Future<Output = Check>) -> Check {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Check::unhealthy(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())))
}

/// A check that needs the database: unhealthy at once while the database's circuit is open,
/// rather than after waiting out [`CHECK_TIMEOUT`] for a connection.
async fn needs_database(state: &AppState, check: impl Future<Output = Check>) -> Check {
    if state.database_circuit.is_open() {
        return Check::unhealthy(
            "PostgreSQL unreachable (the circuit is open; a background probe retries every 500 ms)",
        );
    }
    bounded(check).await
}

/// `SELECT 1`; a failure (or no answer in time) has the database's circuit probe it.
async fn check_database(state: &AppState) -> Check {
    let check = needs_database(state, async {
        match sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.db).await {
            Ok(_) => Check::healthy("PostgreSQL answered"),
            Err(error) => Check::unhealthy(format!("PostgreSQL unreachable: {}", database_error_summary(&error))),
        }
    })
    .await;
    if check.status == HealthStatus::Unhealthy {
        state.database_circuit.suspect();
    }
    check
}

/// A one-line cause that names no credentials (connection errors can echo the URL's host only).
fn database_error_summary(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".into(),
        sqlx::Error::Io(io) => io.kind().to_string(),
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string().lines().next().unwrap_or_default().to_owned(),
    }
}

async fn check_cache(state: &AppState) -> Check {
    match state.cache.ping().await {
        Ok(message) => Check::healthy(message),
        Err(error) => Check::unhealthy(format!("cache unreachable: {error:#}")),
    }
}

/// The default vector store lives in PostgreSQL: it answers when its table does.
async fn check_vector_store(state: &AppState) -> Check {
    match sqlx::query_scalar::<_, i64>("SELECT count(*) FROM embeddings")
        .fetch_one(&state.db)
        .await
    {
        Ok(vectors) => Check::healthy(format!(
            "in-database vector store answered ({vectors} vectors, built-in embedding)"
        )),
        Err(error) => Check::unhealthy(format!("vector store unreachable: {}", database_error_summary(&error))),
    }
}

async fn check_task_queue(state: &AppState) -> Check {
    match crate::jobs::live_workers(&state.db, crate::jobs::LIVE_WORKER_WINDOW).await {
        Ok(0) => Check::degraded(
            "0 active workers",
            "no task queue worker is active: background jobs wait until one starts",
        ),
        Ok(workers) => Check::healthy(format!(
            "{workers} active worker{}",
            if workers == 1 { "" } else { "s" }
        )),
        Err(error) => Check::unhealthy(format!("task queue unreachable: {error}")),
    }
}

/// Connects to the service's own chat socket, sends `init`, and needs the first answer in time.
pub async fn check_chatbot_websocket(addr: SocketAddr, timeout: Duration) -> Check {
    let url = format!("ws://{addr}/");
    let attempt = async {
        let (mut socket, _) = tokio_tungstenite::connect_async(&url)
            .await
            .map_err(|e| e.to_string())?;
        socket
            .send(Message::text(r#"{"type":"init","user_id":"health-check"}"#))
            .await
            .map_err(|e| e.to_string())?;
        let first = loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => break text,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => return Err(format!("unexpected frame {other:?}")),
                Some(Err(error)) => return Err(error.to_string()),
                None => return Err("connection closed before any answer".into()),
            }
        };
        let _ = socket.close(None).await;
        Ok::<_, String>(first.to_string())
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Check::unhealthy(format!("no answer to init within {} ms", timeout.as_millis())),
        Ok(Err(error)) => Check::unhealthy(format!("chatbot channel failed: {error}")),
        Ok(Ok(first)) if first.contains("\"START\"") => Check::healthy("chatbot channel answered init"),
        Ok(Ok(first)) => Check::unhealthy(format!("unexpected first answer: {first}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(statuses: &[HealthStatus]) -> BTreeMap<&'static str, Check> {
        let names = ["a", "b", "c", "d", "e"];
        statuses
            .iter()
            .zip(names)
            .map(|(status, name)| {
                (
                    name,
                    Check {
                        status: *status,
                        message: None,
                        warning: None,
                        error: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn overall_status_table() {
        use HealthStatus::*;
        assert_eq!(overall(&with(&[Healthy, Healthy])), Healthy);
        assert_eq!(overall(&with(&[Healthy, Degraded])), Degraded);
        assert_eq!(overall(&with(&[Degraded, Unhealthy, Healthy])), Unhealthy);
    }
}
