//! The HTTP API: every module's routes merged under one OpenAPI document, with the layers that
//! apply to all of them.

mod alerts;
mod body_schemas;
mod chat_sessions;
mod cloud_a;
mod cloud_b;
mod cloud_c;
mod cloud_d;
mod cloud_e;
mod cloud_f;
mod common_responses;
mod connections;
mod grouping_rules;
mod health;
mod incident_chat;
mod incident_split;
mod incidents;
mod ingestion;
pub mod metrics;
mod postmortems;
mod request_id;
mod silences;
mod topology;
mod users;

use std::{any::Any, sync::Arc};

use axum::{
    http::{header, HeaderName, HeaderValue, Method, StatusCode},
    middleware,
    response::{IntoResponse, Response},
    Extension, Json, Router,
};
use tower_http::{
    catch_panic::CatchPanicLayer,
    cors::{AllowOrigin, CorsLayer},
    trace::TraceLayer,
};
use utoipa::{
    openapi::security::{ApiKey, ApiKeyValue, SecurityScheme},
    Modify, OpenApi,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{error::AppError, rate_limit, state::AppState};

#[derive(OpenApi)]
#[openapi(
    info(title = "vigil", description = "Incidents, root cause analysis, agent chat and cloud connections."),
    modifiers(&SecuritySchemes),
    components(schemas(crate::error::ErrorBody)),
    tags(
        (name = "users", description = "Accounts and login sessions"),
        (name = "chat sessions", description = "Conversations with the agent"),
        (name = "incidents", description = "Incidents opened by alert ingestion"),
        (name = "topology", description = "Each user's service catalog and the dependency edges correlation uses"),
        (name = "silences", description = "Silences and weekly maintenance windows: matching alerts open no incident"),
        (name = "grouping-rules", description = "Open-after-N grouping rules: matching alerts are held until enough \
            arrive within a window, then open one incident"),
        (name = "alerts", description = "The alert inbox: every alert received and what became of it"),
        (name = "alert ingestion", description = "Webhooks of the nine alert sources, and ingestion tokens"),
        (name = "cloud connections", description = "Users' cloud accounts (cloud_a .. cloud_e) and their credentials"),
        (name = "health", description = "Service and dependency health; exempt from rate limits"),
        (name = "operations", description = "Metrics and the API description"),
    )
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "user_id",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-User-ID"))),
        );
        components.add_security_scheme(
            "ingestion_token",
            SecurityScheme::Http(utoipa::openapi::security::Http::new(
                utoipa::openapi::security::HttpAuthScheme::Bearer,
            )),
        );
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(crate::auth::sessions::SESSION_COOKIE))),
        );
    }
}

/// The OpenAPI 3.1 document of every HTTP endpoint.
#[utoipa::path(get, path = "/api/openapi.json", operation_id = "getOpenApiDocument", tag = "operations",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_document(Extension(document): Extension<Arc<OpenApiJson>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document.0.clone())
}

/// The serialized document, made once at start-up.
struct OpenApiJson(String);

/// A body with one human-readable message.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct MessageBody {
    pub message: String,
}

pub fn router(state: AppState) -> Router {
    let (routes, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(users::router())
        .merge(chat_sessions::router())
        .merge(incidents::router())
        .merge(incident_split::router())
        .merge(topology::router())
        .merge(silences::router())
        .merge(grouping_rules::router())
        .merge(alerts::router())
        .merge(incident_chat::router())
        .merge(postmortems::router())
        .merge(ingestion::router())
        .merge(connections::router())
        .merge(cloud_a::router())
        .merge(cloud_b::router())
        .merge(cloud_c::router())
        .merge(cloud_d::router())
        .merge(cloud_e::router())
        .merge(cloud_f::router())
        .merge(health::router())
        .routes(routes!(metrics::metrics_handler))
        .routes(routes!(openapi_document))
        .split_for_parts();
    openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
    common_responses::CommonResponses.modify(&mut openapi);
    let mut document = serde_json::to_value(&openapi).expect("OpenAPI document serializes");
    body_schemas::document(&mut document);
    let document = Arc::new(OpenApiJson(document.to_string()));

    routes
        .layer(Extension(document))
        // Matched routes only: an unknown path is still a 404 while the database is down.
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::db_circuit::guard))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), rate_limit::enforce))
        .layer(middleware::from_fn_with_state(state.clone(), metrics::observe))
        .layer(axum::extract::DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(cors(&state.config.frontend_url))
        .layer(TraceLayer::new_for_http().make_span_with(request_id::request_span))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn(request_id::assign))
        .with_state(state)
}

/// Spec Authentication §7: the frontend origin, with credentials, the six methods and six headers.
fn cors(frontend_url: &str) -> CorsLayer {
    let origin = HeaderValue::from_str(frontend_url.trim_end_matches('/'))
        .unwrap_or_else(|_| HeaderValue::from_static("http://localhost:3000"));
    CorsLayer::new()
        .allow_origin(AllowOrigin::list([origin]))
        .allow_credentials(true)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
            Method::PATCH,
        ])
        .allow_headers([
            header::CONTENT_TYPE,
            HeaderName::from_static("x-provider"),
            HeaderName::from_static("x-requested-with"),
            HeaderName::from_static("x-user-id"),
            header::AUTHORIZATION,
            HeaderName::from_static("x-provider-preference"),
        ])
        // A browser shows a cross-origin script only the "safelisted" response headers unless
        // told otherwise; the rate-limit headers are meant for the frontend.
        .expose_headers([
            HeaderName::from_static("x-ratelimit-limit"),
            HeaderName::from_static("x-ratelimit-remaining"),
            HeaderName::from_static("x-ratelimit-reset"),
            header::RETRY_AFTER,
            request_id::REQUEST_ID_HEADER,
        ])
}

async fn not_found() -> AppError {
    AppError::NotFound("no such endpoint".into())
}

async fn method_not_allowed() -> AppError {
    AppError::Refused {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "this endpoint does not accept that method".into(),
    }
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(crate::error::ErrorBody {
            error: "internal server error".into(),
            code: "internal_error".into(),
        }),
    )
        .into_response()
}
