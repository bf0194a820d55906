use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    auth::{password::PasswordHasher, sessions::LoginSessions},
    cache::Cache,
    config::Config,
    db,
    event_store::EventStore,
    http,
    ingest::{pipeline::IngestPipeline, placement::Placer},
    metrics::Metrics,
    rate_limit::{Budgets, RateLimiter},
    state::{AppState, Services},
    vector_store::VectorStore,
    ws,
};

/// The running service: an HTTP listener, a WebSocket listener, and the state they share.
pub struct Application {
    http_listener: TcpListener,
    ws_listener: TcpListener,
    state: AppState,
}

impl Application {
    /// Connects, migrates and binds both listeners (port 0 picks a free port).
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        db::create_if_missing(&config).await?;
        let db = db::pool(&config, db::SERVICE_APPLICATION_NAME)?;
        db::migrate(&db).await?;
        Self::build_with_pool(config, db).await
    }

    /// Binds both listeners around an existing pool, without running migrations.
    pub async fn build_with_pool(config: Config, db: PgPool) -> anyhow::Result<Self> {
        let http_listener = TcpListener::bind((config.bind_address, config.http_port))
            .await
            .with_context(|| format!("binding the HTTP port {}", config.http_port))?;
        let ws_listener = TcpListener::bind((config.bind_address, config.ws_port))
            .await
            .with_context(|| format!("binding the WebSocket port {}", config.ws_port))?;
        let mut websocket_addr = ws_listener.local_addr()?;
        if websocket_addr.ip().is_unspecified() {
            websocket_addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let cache = Cache::new(
            config.redis_url.as_ref().map(|url| url.expose()),
            &config.redis_key_prefix,
        )?;
        let correlation = Arc::new(crate::ingest::service::correlation_config(&config)?);
        let connections = Arc::new(crate::connections::Connectors::from_config(&config, &db)?);
        let settle = Duration::from_secs(config.rca_settle_secs);
        let metrics = Arc::new(Metrics::new());
        let events = Arc::new(EventStore::observed(&db, &metrics.events).with_reactors(vec![
            Arc::new(crate::analysis::rca::rca_reactor(db.clone(), settle)),
            Arc::new(crate::analysis::postmortem::postmortem_reactor(db.clone())),
            Arc::new(crate::ingest::bridging::bridge_reactor(db.clone())),
        ]));
        let topologies = Arc::new(crate::topology::TopologyCache::default());
        let state = AppState::new(Services {
            rate_limiter: Arc::new(RateLimiter::new(&cache, Budgets::from_config(&config))),
            metrics: metrics.clone(),
            passwords: PasswordHasher::new(config.bcrypt_cost),
            login_sessions: LoginSessions::new(db.clone(), config.session_ttl(), config.session_cookie_secure),
            ingest: Arc::new(IngestPipeline::start(
                Placer::new(
                    db.clone(),
                    correlation.clone(),
                    VectorStore::default(),
                    events.announcer.clone(),
                    metrics.placement(),
                )
                .with_topologies(topologies.clone())
                .with_flapping(crate::ingest::placement::Flapping {
                    cycles: config.flapping_cycles,
                    window: chrono::Duration::seconds(config.flapping_window_secs),
                }),
                config.ingest_lanes as usize,
                config.ingest_batch_max_alerts as usize,
                Duration::from_millis(config.ingest_batch_linger_ms),
            )),
            topologies,
            events,
            correlation,
            vectors: VectorStore::default(),
            model: crate::language_model::Model::from_config(&config, &db)?
                .map(|model| Arc::new(model.with_metrics(metrics.model.clone()))),
            agent_cli: config.agent_cli_dir.clone().map(|bin_dir| {
                Arc::new(crate::agent::cli::CliConfig {
                    bin_dir,
                    allowed: config.agent_cli_allowlist.clone(),
                })
            }),
            session_fanout: Arc::new(crate::ws::fanout::SessionFanout::new(&cache)),
            reply_turns: Arc::default(),
            cache,
            database_circuit: crate::db_circuit::DatabaseCircuit::new((*db.connect_options()).clone()),
            db,
            websocket_addr,
            connections,
            config: Arc::new(config),
        });
        Ok(Self {
            http_listener,
            ws_listener,
            state,
        })
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_listener.local_addr().expect("bound listener has an address")
    }

    pub fn ws_addr(&self) -> SocketAddr {
        self.ws_listener.local_addr().expect("bound listener has an address")
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` is cancelled, then lets in-flight HTTP requests finish.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(http = %self.http_addr(), websocket = %self.ws_addr(), "vigil listening");
        self.state.events.spawn_tails(&self.state.db, &shutdown);
        tokio::spawn(self.state.session_fanout.clone().run(shutdown.clone()));
        let worker = self
            .state
            .config
            .run_workers
            .then(|| tokio::spawn(run_worker(self.state.clone(), shutdown.clone())));
        let websocket = tokio::spawn(ws::serve(self.ws_listener, self.state.clone(), shutdown.clone()));
        let router = http::router(self.state);
        axum::serve(
            self.http_listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await
        .context("HTTP server failed")?;
        shutdown.cancel();
        websocket.await.context("WebSocket listener task failed")?;
        // Its running jobs finish or are handed back before the process ends; left to the
        // process's exit, they waited for their leases to expire (a minute) before a retry.
        if let Some(worker) = worker {
            if let Err(error) = worker.await.context("job worker task failed")? {
                tracing::error!(error = %format!("{error:#}"), "job worker stopped with an error");
            }
        }
        Ok(())
    }
}

/// An ingestion lane busy placing for more than this share of its time means an alert storm:
/// the analyses of this process then give way to placement (docs/operations.md).
const STORM_LANE_SHARE: f64 = 0.5;
/// During a storm, one analysis still starts this often when none is running.
const ANALYSIS_TRICKLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs a background job worker with every job handler until `shutdown`.
pub async fn run_worker(state: AppState, shutdown: CancellationToken) -> anyhow::Result<()> {
    let config = crate::jobs::WorkerConfig {
        concurrency: usize::from(state.config.worker_concurrency),
        shutdown_grace: std::time::Duration::from_secs(state.config.worker_shutdown_grace_secs),
        ..Default::default()
    };
    let lanes = state.ingest.load();
    let storm = move || lanes.busiest_share() >= STORM_LANE_SHARE;
    let worker = crate::jobs::Worker::new(state.db.clone(), config)?
        .with_deferral(crate::jobs::Deferral::new(
            &[crate::jobs::kinds::RCA_JOB],
            storm,
            ANALYSIS_TRICKLE,
        ))
        .with_handler(crate::analysis::rca::RcaHandler { state: state.clone() })?
        .with_handler(crate::analysis::postmortem::PostmortemHandler { state: state.clone() })?
        .with_handler(crate::analysis::incident_chat::IncidentChatHandler { state: state.clone() })?
        .with_handler(crate::connections::CloudASetupHandler {
            state: state.connection_handles(),
        })?
        .with_handler(crate::ingest::bridging::BridgeHandler {
            db: state.db.clone(),
            events: state.events.clone(),
            correlation: state.correlation.clone(),
        })?;
    tracing::info!(worker = worker.id(), "job worker running");
    worker.run(shutdown).await.context("job worker failed")
}

/// A process that only tails events and runs jobs (`vigil worker`): no listeners.
pub async fn run_worker_process(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metrics_at = config.worker_metrics_port.map(|port| (config.bind_address, port));
    let app = Application::build(Config {
        http_port: 0,
        ws_port: 0,
        bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
        ..config
    })
    .await?;
    if let Some(at) = metrics_at {
        serve_metrics_only(at, app.state.clone(), shutdown.clone()).await?;
    }
    app.state.events.spawn_tails(&app.state.db, &shutdown);
    // Incident chat replies written here reach the sockets that follow their sessions.
    tokio::spawn(app.state.session_fanout.clone().run(shutdown.clone()));
    run_worker(app.state, shutdown).await
}

/// `GET /metrics` alone, for a worker process: its analyses and model calls are counted in its
/// own registry, which no HTTP API of its own exposes.
async fn serve_metrics_only(
    at: (std::net::IpAddr, u16),
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(at)
        .await
        .with_context(|| format!("binding the worker's metrics port {}", at.1))?;
    tracing::info!(metrics = %listener.local_addr()?, "worker metrics listening");
    let router = axum::Router::new()
        .route("/metrics", axum::routing::get(crate::http::metrics::metrics_handler))
        .with_state(state);
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "the worker's metrics listener failed");
        }
    });
    Ok(())
}
