//! Prometheus metrics (`GET /metrics`) and the middleware that records them, applies the request
//! timeout, and logs each internal error once; also what alert placement reports of its batches.

use std::time::{Duration, Instant};

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use prometheus::{
    core::Collector, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::{
    error::{AppError, InternalErrorReport},
    state::AppState,
};

pub struct HttpMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    placement: PlacementMetrics,
}

impl HttpMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests answered, by route and status"),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("http_request_duration_seconds", "HTTP request latency by route").buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["method", "route"],
        )
        .expect("valid metric");
        let placement = PlacementMetrics::registered_in(&registry);
        Self {
            requests: registered(&registry, requests),
            latency: registered(&registry, latency),
            registry,
            placement,
        }
    }

    /// What alert placement records its batches into (a handle on this registry's metrics).
    pub fn placement(&self) -> PlacementMetrics {
        self.placement.clone()
    }

    pub fn observe(&self, method: &str, route: &str, status: StatusCode, started: Instant) {
        self.requests.with_label_values(&[method, route, status.as_str()]).inc();
        self.latency
            .with_label_values(&[method, route])
            .observe(started.elapsed().as_secs_f64());
    }

    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding of gathered metrics");
        String::from_utf8(buffer).expect("prometheus text format is UTF-8")
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// How alert placement spends a batch (see `ingest::placement`): how many alerts each committed
/// batch held, and the wall time of each of its steps, from the lane's side (a database step
/// includes its round trip). Under load these say where a lane's time goes, and so what bounds
/// ingestion: `sum / count` of a phase is its mean time per batch.
#[derive(Clone)]
pub struct PlacementMetrics {
    batch_alerts: Histogram,
    /// One series per phase, in [`PlacementPhase::ALL`]'s order (resolved once, not per batch).
    phase_seconds: [Histogram; PlacementPhase::COUNT],
}

/// The steps of a batch, in order (the `phase` label). A batch on the fast path has no
/// transaction to begin or commit and writes its read rows with the rest: its `begin`, `project`
/// and `commit` are zero, and `record` includes the write's commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementPhase {
    /// `BEGIN` and the users' locks (the careful path).
    Begin,
    /// The one statement every decision reads from.
    Lookup,
    /// Decisions and the aggregate's commands, in memory (reading an incident's events when
    /// placement has not kept its state).
    Decide,
    /// The deliveries and events written (on the fast path, the read rows too).
    Record,
    /// The incidents' read rows written (the careful path).
    Project,
    Commit,
}

impl PlacementPhase {
    const COUNT: usize = 6;
    pub const ALL: [Self; Self::COUNT] = [
        Self::Begin,
        Self::Lookup,
        Self::Decide,
        Self::Record,
        Self::Project,
        Self::Commit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::Lookup => "lookup",
            Self::Decide => "decide",
            Self::Record => "record",
            Self::Project => "project",
            Self::Commit => "commit",
        }
    }
}

impl PlacementMetrics {
    fn registered_in(registry: &Registry) -> Self {
        let batch_alerts = Histogram::with_opts(
            HistogramOpts::new("ingest_placement_batch_alerts", "Alerts per committed placement batch")
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0]),
        )
        .expect("valid metric");
        let phase_seconds = HistogramVec::new(
            HistogramOpts::new(
                "ingest_placement_phase_seconds",
                "Wall time of each step of a committed placement batch",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
            ]),
            &["phase"],
        )
        .expect("valid metric");
        let phase_seconds = registered(registry, phase_seconds);
        Self {
            batch_alerts: registered(registry, batch_alerts),
            phase_seconds: PlacementPhase::ALL.map(|phase| phase_seconds.with_label_values(&[phase.as_str()])),
        }
    }

    /// Records a committed batch of `alerts` alerts and the time each phase took.
    pub fn observe_batch(&self, alerts: usize, clock: &PhaseClock) {
        self.batch_alerts.observe(alerts as f64);
        for (histogram, took) in self.phase_seconds.iter().zip(clock.laps) {
            histogram.observe(took.as_secs_f64());
        }
    }
}

impl Default for PlacementMetrics {
    /// Metrics no registry exposes (placement outside a serving process: tests, tools).
    fn default() -> Self {
        Self::registered_in(&Registry::new())
    }
}

/// Times the phases of one batch, each from the end of the one before.
pub struct PhaseClock {
    last: Instant,
    laps: [Duration; PlacementPhase::COUNT],
}

impl PhaseClock {
    pub fn start() -> Self {
        Self {
            last: Instant::now(),
            laps: [Duration::ZERO; PlacementPhase::COUNT],
        }
    }

    /// Ends `phase` now.
    pub fn lap(&mut self, phase: PlacementPhase) {
        let now = Instant::now();
        self.laps[phase as usize] = now - self.last;
        self.last = now;
    }
}

/// Registers `metric` with `registry` and hands it back.
fn registered<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

/// Prometheus text exposition of the HTTP metrics.
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

pub async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = match tokio::time::timeout(state.config.request_timeout(), next.run(request)).await {
        Ok(response) => response,
        Err(_) => AppError::Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "timeout",
            message: "the request took too long and was abandoned".into(),
        }
        .into_response(),
    };
    if let Some(InternalErrorReport(cause)) = response.extensions().get::<InternalErrorReport>() {
        tracing::error!(%method, %route, error = %format!("{cause:#}"), "request failed");
    }
    state.metrics.observe(&method, &route, response.status(), started);
    response
}
