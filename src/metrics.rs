//! Prometheus metrics (`GET /metrics`) and the middleware that records them, applies the request
//! timeout, and logs each internal error once.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

use crate::{
    error::{AppError, InternalErrorReport},
    state::AppState,
};

pub struct HttpMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
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
        registry
            .register(Box::new(requests.clone()))
            .expect("metric registered once");
        registry
            .register(Box::new(latency.clone()))
            .expect("metric registered once");
        Self {
            registry,
            requests,
            latency,
        }
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

/// Prometheus text exposition of the HTTP metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
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
