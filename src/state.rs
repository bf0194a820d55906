use std::{net::SocketAddr, sync::Arc};

use sqlx::PgPool;
use vigil_aggregates::correlation::CorrelationConfig;

use crate::{
    auth::{password::PasswordHasher, sessions::LoginSessions},
    cache::Cache,
    config::Config,
    event_store::EventStore,
    ingest::service::KeyedLocks,
    metrics::HttpMetrics,
    rate_limit::RateLimiter,
    vector_store::VectorStore,
};

/// Everything a handler may need, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub db: PgPool,
    pub events: EventStore,
    pub correlation: Arc<CorrelationConfig>,
    pub vectors: VectorStore,
    /// Serializes alert placement per user within this instance.
    pub ingest_locks: Arc<KeyedLocks>,
    pub cache: Cache,
    pub rate_limiter: Arc<RateLimiter>,
    pub metrics: Arc<HttpMetrics>,
    pub passwords: PasswordHasher,
    pub login_sessions: LoginSessions,
    /// Where this instance's own WebSocket listener can be reached (for the health check).
    pub websocket_addr: SocketAddr,
}
