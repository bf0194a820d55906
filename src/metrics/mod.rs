//! Prometheus metrics (`GET /metrics`) and the middleware that records them, applies the request
//! timeout, and logs each internal error once. The families other parts of the service record
//! into are in `families` and `placement`; the gauges read at scrape time in `scrape`. Every
//! label takes values from a fixed set (routes as templates, sources, kinds...): never a user,
//! incident or session id.

mod families;
mod placement;
mod scrape;

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use prometheus::{core::Collector, Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

use self::scrape::ScrapeGauges;
pub use self::{
    families::{
        AnalysisMetrics, AnalysisOutcome, ModelMetrics, ModelOutcome, OpenConnection, RateLimitMetrics,
        WebSocketMetrics,
    },
    placement::{AlertTally, Fate, PhaseClock, PlacementMetrics, PlacementPhase},
    scrape::LAG_EVENTS_CAP,
};
pub use crate::event_store::EventMetrics;

use crate::{
    error::{AppError, InternalErrorReport},
    state::AppState,
};

/// Every metric of the service, in one registry (`GET /metrics`). See docs/metrics.md.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    placement: PlacementMetrics,
    pub events: EventMetrics,
    pub analysis: AnalysisMetrics,
    pub websocket: WebSocketMetrics,
    pub model: ModelMetrics,
    pub rate_limit: RateLimitMetrics,
    scraped: ScrapeGauges,
    /// One scrape at a time: a scrape resets the gauges it reads before setting them again.
    scraping: tokio::sync::Mutex<()>,
}

impl Metrics {
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
        let events = EventMetrics::registered_in(&registry);
        Self {
            requests: registered(&registry, requests),
            latency: registered(&registry, latency),
            placement: PlacementMetrics::registered_in(&registry, &events),
            events,
            analysis: AnalysisMetrics::registered_in(&registry),
            websocket: WebSocketMetrics::registered_in(&registry),
            model: ModelMetrics::registered_in(&registry),
            rate_limit: RateLimitMetrics::registered_in(&registry),
            scraped: ScrapeGauges::registered_in(&registry),
            scraping: tokio::sync::Mutex::new(()),
            registry,
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

    /// The text exposition, with the gauges read at scrape time refreshed first.
    pub async fn render(&self, state: &AppState) -> String {
        let _scraping = self.scraping.lock().await;
        self.scraped.refresh(state).await;
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding of gathered metrics");
        String::from_utf8(buffer).expect("prometheus text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Registers `metric` with `registry` and hands it back.
fn registered<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

/// Prometheus text exposition of the service's metrics (docs/metrics.md).
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&state).await,
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
