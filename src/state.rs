use std::{net::SocketAddr, sync::Arc};

use sqlx::PgPool;
use vigil_aggregates::correlation::CorrelationConfig;

use crate::{
    auth::{password::PasswordHasher, sessions::LoginSessions},
    cache::Cache,
    config::Config,
    event_store::EventStore,
    ingest::service::PlacementGate,
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
    /// Admission to alert placement: per user, and bounded by the pool.
    pub placement_gate: Arc<PlacementGate>,
    pub cache: Cache,
    pub rate_limiter: Arc<RateLimiter>,
    pub metrics: Arc<HttpMetrics>,
    pub passwords: PasswordHasher,
    pub login_sessions: LoginSessions,
    /// Where this instance's own WebSocket listener can be reached (for the health check).
    pub websocket_addr: SocketAddr,
}
