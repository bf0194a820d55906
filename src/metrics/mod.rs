//! Prometheus metrics: the registry `GET /metrics` renders (its handler and the middleware that
//! records each request are in `http::metrics`). The families other parts of the service record
//! into are in `families` and `placement`; the gauges read at scrape time in `scrape`. Every
//! label takes values from a fixed set (routes as templates, sources, kinds...): never a user,
//! incident or session id.

mod families;
mod placement;
mod scrape;

use std::time::Instant;

use axum::http::StatusCode;
use prometheus::{core::Collector, Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

use self::scrape::ScrapeGauges;
pub use self::scrape::ScrapeSources;
pub use self::{
    families::{
        AnalysisMetrics, AnalysisOutcome, ModelMetrics, ModelOutcome, OpenConnection, RateLimitMetrics,
        WebSocketMetrics,
    },
    placement::{AlertTally, Fate, PhaseClock, PlacementMetrics, PlacementPhase},
    scrape::LAG_EVENTS_CAP,
};
pub use crate::event_store::EventMetrics;

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
    pub async fn render(&self, sources: ScrapeSources<'_>) -> String {
        let _scraping = self.scraping.lock().await;
        self.scraped.refresh(sources).await;
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
