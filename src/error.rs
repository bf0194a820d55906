//! The HTTP layer's one error type. Every failure leaves the service as `{"error", "code"}` JSON
//! with the status chosen here; internal causes are logged once (by the request-logging
//! middleware, from the response's extensions) and never echoed to the caller.

use std::sync::Arc;

use axum::{
    extract::rejection::{BytesRejection, PathRejection, QueryRejection},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use cqrs_es::AggregateError;
use serde::Serialize;
use vigil_aggregates::{
    chat_session::ChatSessionError, grouping_rule::GroupingRuleError, incident::IncidentError,
    incident_analysis::AnalysisError, silence::SilenceError, topology::TopologyError,
};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Protocol-level refusals (405, 413, 503 timeout) that keep their own status.
    #[error("{message}")]
    Refused {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
    #[error("rate limit exceeded: {limit} requests per minute")]
    RateLimited { limit: u32, retry_after_secs: u64 },
    /// A dependency the request needs (the database) cannot be reached: 503, worth a retry.
    #[error("{0}")]
    Unavailable(anyhow::Error),
    #[error(transparent)]
    Internal(anyhow::Error),
}

/// A caller's value as an error message quotes it: at most 40 characters, then `…`, so that a
/// megabyte sent as a status is not sent back (nor logged) whole.
pub fn excerpt(value: &str) -> String {
    crate::text::shortened(value, 40)
}

/// Seconds a client is asked to wait before retrying a 503.
pub(crate) const UNAVAILABLE_RETRY_SECS: u32 = 5;

/// The JSON error body of every failed request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for a person.
    pub error: String,
    /// Stable machine-readable code (`invalid_request`, `unauthorized`, `not_found`, ...).
    pub code: String,
}

/// Carried in the extensions of a response that found the database out of reach, for the
/// database's circuit (`db_circuit`).
#[derive(Clone, Copy, Debug)]
pub struct DatabaseUnreachable;

/// Carried in a 500 response's extensions so the logging middleware can report the cause once.
#[derive(Clone, Debug)]
pub struct InternalErrorReport(pub Arc<anyhow::Error>);

impl AppError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::bad_request("invalid_request", message)
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Refused { status, .. } => *status,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error` text a client sees: an internal error's cause is logged, never shown.
    pub fn public_message(&self) -> String {
        match self {
            Self::Unavailable(_) => "the database is unavailable; retry later".to_owned(),
            Self::Internal(_) => "internal server error".to_owned(),
            other => other.to_string(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. } | Self::Refused { code, .. } => code,
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::RateLimited { .. } => "rate_limited",
            Self::Unavailable(_) => "service_unavailable",
            Self::Internal(_) => "internal_error",
        }
    }
}

impl From<AggregateError<ChatSessionError>> for AppError {
    fn from(error: AggregateError<ChatSessionError>) -> Self {
        match error {
            AggregateError::UserError(domain) => match domain {
                ChatSessionError::NotFound => Self::NotFound(domain.to_string()),
                ChatSessionError::AlreadyExists => Self::Conflict(domain.to_string()),
                ChatSessionError::Closed(_) => Self::Forbidden(domain.to_string()),
                ChatSessionError::Invalid(message) => Self::invalid(message),
            },
            other => aggregate_failure(other),
        }
    }
}

impl From<AggregateError<IncidentError>> for AppError {
    fn from(error: AggregateError<IncidentError>) -> Self {
        match error {
            AggregateError::UserError(domain) => match domain {
                IncidentError::NotFound | IncidentError::AlertNotFound => Self::NotFound(domain.to_string()),
                IncidentError::AlreadyExists
                | IncidentError::AlreadyMerged
                | IncidentError::NotCorrelatable(_)
                | IncidentError::CannotSplit(_) => Self::Conflict(domain.to_string()),
                IncidentError::Invalid(message) => Self::invalid(message),
            },
            other => aggregate_failure(other),
        }
    }
}

impl From<AggregateError<AnalysisError>> for AppError {
    fn from(error: AggregateError<AnalysisError>) -> Self {
        match error {
            AggregateError::UserError(AnalysisError::Invalid(message)) => Self::invalid(message),
            AggregateError::UserError(duplicate @ AnalysisError::DuplicateCitation(_)) => {
                Self::Conflict(duplicate.to_string())
            }
            other => aggregate_failure(other),
        }
    }
}

impl From<AggregateError<TopologyError>> for AppError {
    fn from(error: AggregateError<TopologyError>) -> Self {
        match error {
            AggregateError::UserError(domain @ TopologyError::NotFound) => Self::NotFound(domain.to_string()),
            other => aggregate_failure(other),
        }
    }
}

impl From<AggregateError<SilenceError>> for AppError {
    fn from(error: AggregateError<SilenceError>) -> Self {
        match error {
            AggregateError::UserError(domain @ SilenceError::NotFound) => Self::NotFound(domain.to_string()),
            AggregateError::UserError(domain @ SilenceError::AlreadyExists) => Self::Conflict(domain.to_string()),
            AggregateError::UserError(SilenceError::Invalid(invalid)) => {
                Self::bad_request("invalid_silence", invalid.to_string())
            }
            other => aggregate_failure(other),
        }
    }
}

impl From<AggregateError<GroupingRuleError>> for AppError {
    fn from(error: AggregateError<GroupingRuleError>) -> Self {
        match error {
            AggregateError::UserError(domain @ GroupingRuleError::NotFound) => Self::NotFound(domain.to_string()),
            AggregateError::UserError(domain @ GroupingRuleError::AlreadyExists) => Self::Conflict(domain.to_string()),
            AggregateError::UserError(GroupingRuleError::Invalid(invalid)) => {
                Self::bad_request("invalid_grouping_rule", invalid.to_string())
            }
            other => aggregate_failure(other),
        }
    }
}

/// Failures of the event store itself, common to every aggregate. postgres-es boxes the
/// database's own error, which says whether the database was out of reach.
fn aggregate_failure<E: std::error::Error>(error: AggregateError<E>) -> AppError {
    match error {
        AggregateError::AggregateConflict => {
            AppError::Conflict("the resource was changed concurrently too many times; retry".into())
        }
        AggregateError::DatabaseConnectionError(cause) | AggregateError::UnexpectedError(cause) => {
            match cause.downcast::<sqlx::Error>() {
                Ok(database) => AppError::unexpected(anyhow::Error::from(*database).context("event store")),
                Err(cause) => AppError::Internal(anyhow::anyhow!("event store: {cause}")),
            }
        }
        other => AppError::Internal(anyhow::anyhow!("event store: {other}")),
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> Self {
        Self::unexpected(error)
    }
}

impl From<vigil_projections::ProjectionError> for AppError {
    fn from(error: vigil_projections::ProjectionError) -> Self {
        Self::unexpected(error)
    }
}

impl AppError {
    /// A failure the service cannot explain to the caller: 500, unless a database error
    /// anywhere in its chain says the database was out of reach (503, worth a retry).
    pub fn unexpected(error: impl Into<anyhow::Error>) -> Self {
        let error = error.into();
        let unreachable = error
            .chain()
            .any(|cause| cause.downcast_ref::<sqlx::Error>().is_some_and(database_unreachable));
        if unreachable {
            Self::Unavailable(error)
        } else {
            Self::Internal(error)
        }
    }
}

impl From<anyhow::Error> for AppError {
    fn from(error: anyhow::Error) -> Self {
        Self::unexpected(error)
    }
}

/// Whether `error` says the database cannot be reached or is not serving (a retry may succeed),
/// rather than that a statement failed: no connection to be had, a connection lost, the server
/// shutting down or refusing connections (SQLSTATE classes 08 and 57P, 53300, 3D000 for a
/// database that is gone, and 55000 for one not accepting connections).
pub(crate) fn database_unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("57P")
                || code == "53300"
                || code == "3D000"
                || (code == "55000" && db.message().contains("not currently accepting connections"))
        }),
        _ => false,
    }
}

/// Maps a unique-constraint violation on `constraint` to `conflict`; any other error stays internal.
pub fn on_unique_violation(constraint: &str, conflict: AppError) -> impl FnOnce(sqlx::Error) -> AppError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db) if db.constraint() == Some(constraint) => conflict,
        _ => AppError::from(error),
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody {
            error: self.public_message(),
            code: self.code().to_owned(),
        };
        let mut response = (status, Json(body)).into_response();
        match self {
            Self::RateLimited { retry_after_secs, .. } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs.max(1)));
            }
            Self::Unavailable(cause) => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_SECS));
                response.extensions_mut().insert(InternalErrorReport(Arc::new(cause)));
                response.extensions_mut().insert(DatabaseUnreachable);
            }
            Self::Internal(cause) => {
                response.extensions_mut().insert(InternalErrorReport(Arc::new(cause)));
            }
            _ => {}
        }
        response
    }
}

impl From<PathRejection> for AppError {
    fn from(rejection: PathRejection) -> Self {
        Self::bad_request("invalid_path", rejection.body_text())
    }
}

impl From<QueryRejection> for AppError {
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request("invalid_query", rejection.body_text())
    }
}

impl From<BytesRejection> for AppError {
    fn from(rejection: BytesRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "payload_too_large",
                message: "request body is too large".into(),
            },
            _ => Self::bad_request("invalid_body", rejection.body_text()),
        }
    }
}
/// A required text field of a request, trimmed; blank is a 400 naming the field.
pub fn required(value: &str, field: &str) -> Result<String, AppError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(AppError::invalid(format!("{field} is required")));
    }
    Ok(value.to_owned())
}
