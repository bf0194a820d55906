use std::{net::SocketAddr, sync::Arc};

use sqlx::PgPool;
use vigil_aggregates::correlation::CorrelationConfig;

use crate::{
    auth::{password::PasswordHasher, sessions::LoginSessions},
    cache::Cache,
    config::Config,
    event_store::EventStore,
    ingest::pipeline::IngestPipeline,
    metrics::Metrics,
    rate_limit::RateLimiter,
    vector_store::VectorStore,
};

/// Everything a handler may need; a clone is one reference count (axum clones the state for
/// every extractor and middleware of every request).
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }

    /// The handles the connection use cases take.
    pub fn connection_handles(&self) -> crate::connections::ConnectionHandles {
        crate::connections::ConnectionHandles {
            db: self.db.clone(),
            connections: self.connections.clone(),
            events: self.events.clone(),
        }
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Services {
    pub config: Arc<Config>,
    pub db: PgPool,
    /// Open while the database is known to be down: requests needing it answer 503 at once.
    pub database_circuit: Arc<crate::db_circuit::DatabaseCircuit>,
    pub events: Arc<EventStore>,
    pub correlation: Arc<CorrelationConfig>,
    pub vectors: VectorStore,
    /// The language model, when one is configured.
    pub model: Option<Arc<crate::language_model::Model>>,
    /// The agent's cloud command tool, when `AGENT_CLI_DIR` is set.
    pub agent_cli: Option<Arc<crate::agent::cli::CliConfig>>,
    /// Where alert notifications are placed into incidents, in batches.
    pub ingest: Arc<IngestPipeline>,
    /// Users' service topologies as placement reads them (shared with it).
    pub topologies: Arc<crate::topology::TopologyCache>,
    pub cache: Cache,
    /// Reply messages for every socket that follows their session, on any instance.
    pub session_fanout: Arc<crate::ws::fanout::SessionFanout>,
    /// Which sessions have a reply being written (one at a time per session).
    pub reply_turns: Arc<crate::agent::turns::ReplyTurns>,
    pub rate_limiter: Arc<RateLimiter>,
    pub metrics: Arc<Metrics>,
    pub passwords: PasswordHasher,
    pub login_sessions: LoginSessions,
    /// Where this instance's own WebSocket listener can be reached (for the health check).
    pub websocket_addr: SocketAddr,
    /// Users' cloud connections: secrets store, cache, OAuth state and provider clients.
    pub connections: Arc<crate::connections::Connectors>,
}
