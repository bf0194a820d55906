use std::{collections::BTreeMap, time::Instant};

use axum::{extract::State, http::StatusCode, Json};
use serde::Serialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    health::{self, Check, HealthStatus},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(liveness))
        .routes(routes!(readiness))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct HealthReport {
    overall_status: HealthStatus,
    /// ISO 8601 time of the report.
    timestamp: String,
    /// Milliseconds taken to run all checks.
    response_time_ms: f64,
    #[schema(value_type = HealthChecks)]
    checks: BTreeMap<&'static str, Check>,
}

/// The checks of `/health`, as the OpenAPI document names them (the report builds them as a map).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct HealthChecks {
    database: Check,
    cache: Check,
    vector_store: Check,
    /// Its message says how many workers are active; `warning` when none is.
    task_queue: Check,
    chatbot_websocket: Check,
}

/// The checks of `/health/readiness`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ReadinessChecks {
    database: Check,
    cache: Check,
}

/// State of the service and each dependency; 503 when any check is unhealthy.
#[utoipa::path(get, path = "/health", operation_id = "getHealth", tag = "health", responses(
    (status = 200, description = "healthy or degraded", body = HealthReport),
    (status = 503, description = "a check is unhealthy", body = HealthReport)))]
async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthReport>) {
    let started = Instant::now();
    let checks = health::full_report(&state).await;
    let overall_status = health::overall(&checks);
    let status = if overall_status == HealthStatus::Unhealthy {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let report = HealthReport {
        overall_status,
        timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        response_time_ms: (started.elapsed().as_secs_f64() * 1000.0 * 100.0).round() / 100.0,
        checks,
    };
    (status, Json(report))
}

#[derive(Serialize, utoipa::ToSchema)]
struct Liveness {
    /// Always `alive`.
    status: &'static str,
}

/// The process responds.
#[utoipa::path(get, path = "/health/liveness", operation_id = "getLiveness", tag = "health",
    responses((status = 200, body = Liveness)))]
async fn liveness() -> Json<Liveness> {
    Json(Liveness { status: "alive" })
}

#[derive(Serialize, utoipa::ToSchema)]
struct Readiness {
    /// `ready` or `not_ready`.
    status: &'static str,
    #[schema(value_type = ReadinessChecks)]
    checks: BTreeMap<&'static str, Check>,
}

/// Ready to serve: database and cache both healthy.
#[utoipa::path(get, path = "/health/readiness", operation_id = "getReadiness", tag = "health", responses(
    (status = 200, description = "ready", body = Readiness),
    (status = 503, description = "database or cache unhealthy", body = Readiness)))]
async fn readiness(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let checks = health::readiness_report(&state).await;
    if health::overall(&checks) == HealthStatus::Healthy {
        (
            StatusCode::OK,
            Json(Readiness {
                status: "ready",
                checks,
            }),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                status: "not_ready",
                checks,
            }),
        )
    }
}
