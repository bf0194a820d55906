//! `GET /metrics`, and the middleware that records every request, applies the request timeout
//! and logs each internal error once.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::{
    error::{AppError, InternalErrorReport},
    metrics::ScrapeSources,
    state::AppState,
};

/// What a scrape of `state`'s metrics reads besides the registry.
pub fn scrape_sources(state: &AppState) -> ScrapeSources<'_> {
    ScrapeSources {
        db: &state.db,
        consumers: state
            .events
            .consumers
            .iter()
            .chain(&state.events.reactors)
            .cloned()
            .collect(),
        database_known_down: state.database_circuit.is_open(),
    }
}

/// Prometheus text exposition of the service's metrics (docs/metrics.md).
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(scrape_sources(&state)).await,
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
