//! Alert ingestion endpoints (one per source) and the ingestion tokens that authenticate tools.
//!
//! Authentication: the API's usual identity (`X-User-ID` or the session cookie), or an ingestion
//! token as `Authorization: Bearer vgi_...` or `?token=vgi_...`. A notification is answered with
//! 202 once its alerts are recorded and placed: `{received: true, alerts: [{alert_id,
//! incident_id, correlated}]}`. Each user has a budget per source (`INGEST_RATE_LIMIT_PER_MINUTE`,
//! 1,200 by default) apart from the API's; past it the answer is 429 with `Retry-After`, so
//! senders retry instead of losing alerts.

use axum::{
    extract::{FromRequestParts, State},
    http::{request::Parts, StatusCode},
    Json,
};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use crate::{
    auth::{
        ingestion_token::{presented_token, TokenOwner},
        AuthUser, Identity,
    },
    error::{AppError, ErrorBody},
    extract::{JsonBody, Path, PostedJson},
    ingest::{
        parsers::{self, Source},
        service::IngestedAlert,
        tokens::{self, IngestionToken},
    },
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ingest_source_a))
        .routes(routes!(ingest_source_b))
        .routes(routes!(ingest_source_c))
        .routes(routes!(ingest_source_d))
        .routes(routes!(ingest_source_e))
        .routes(routes!(ingest_source_f))
        .routes(routes!(ingest_source_g))
        .routes(routes!(ingest_source_h))
        .routes(routes!(ingest_source_i))
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
}

/// The user a notification belongs to.
pub struct IngestionCaller {
    pub user_id: String,
}

impl FromRequestParts<AppState> for IngestionCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Identity::User(user_id) = Identity::from_request_parts(parts, state).await? {
            return Ok(Self { user_id });
        }
        if let Some(user_id) = TokenOwner::resolve(parts, state).await? {
            tracing::Span::current().record("user_id", user_id.as_str());
            return Ok(Self { user_id });
        }
        if presented_token(&parts.headers, &parts.uri).is_some() {
            return Err(AppError::Unauthorized("unknown or revoked ingestion token".into()));
        }
        Err(AppError::Unauthorized(
            "authentication required: X-User-ID, a session, or an ingestion token (Authorization: Bearer)".into(),
        ))
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct IngestResponse {
    received: bool,
    alerts: Vec<IngestedAlert>,
}

async fn ingest(
    state: &AppState,
    caller: IngestionCaller,
    source: Source,
    body: PostedJson,
) -> Result<(StatusCode, Json<IngestResponse>), AppError> {
    let alerts = parsers::parse(source, &body.document, chrono::Utc::now())
        .map_err(|error| AppError::bad_request("invalid_payload", format!("{source} payload: {error}")))?;
    drop(body.document);
    let alerts = state.ingest.submit(&caller.user_id, alerts, body.text).await?;
    Ok((StatusCode::ACCEPTED, Json(IngestResponse { received: true, alerts })))
}

macro_rules! ingestion_endpoint {
    ($name:ident, $operation_id:literal, $source:expr, $path:literal, $what:literal) => {
        #[doc = concat!("Receive a ", $what, " notification. Several alerts in one notification are placed one by one.")]
        #[utoipa::path(post, path = $path, operation_id = $operation_id, tag = "alert ingestion", request_body(content = Object, description = $what),
            security(("user_id" = []), ("session_cookie" = []), ("ingestion_token" = [])),
            responses((status = 202, body = IngestResponse),
                (status = 400, description = "malformed JSON, or a payload missing what the source needs", body = ErrorBody),
                (status = 401, body = ErrorBody),
                (status = 429, description = "per-source ingestion budget spent; retry after Retry-After", body = ErrorBody)))]
        async fn $name(
            State(state): State<AppState>,
            caller: IngestionCaller,
            body: PostedJson,
        ) -> Result<(StatusCode, Json<IngestResponse>), AppError> {
            ingest(&state, caller, $source, body).await
        }
    };
}

ingestion_endpoint!(
    ingest_source_a,
    "ingestSourceA",
    Source::SourceA,
    "/api/source_a/alerts",
    "source_a (alerting rules)"
);
ingestion_endpoint!(
    ingest_source_b,
    "ingestSourceB",
    Source::SourceB,
    "/api/source_b/webhook",
    "source_b (paging tool)"
);
ingestion_endpoint!(
    ingest_source_c,
    "ingestSourceC",
    Source::SourceC,
    "/api/source_c/alerts",
    "source_c (host monitoring)"
);
ingestion_endpoint!(
    ingest_source_d,
    "ingestSourceD",
    Source::SourceD,
    "/api/source_d/webhook",
    "source_d (metrics monitor)"
);
ingestion_endpoint!(
    ingest_source_e,
    "ingestSourceE",
    Source::SourceE,
    "/api/source_e/alerts",
    "source_e (log search alert)"
);
ingestion_endpoint!(
    ingest_source_f,
    "ingestSourceF",
    Source::SourceF,
    "/api/source_f/deployment",
    "source_f (CI build/deploy)"
);
ingestion_endpoint!(
    ingest_source_g,
    "ingestSourceG",
    Source::SourceG,
    "/api/source_g/deployment",
    "source_g (CD deployment)"
);
ingestion_endpoint!(
    ingest_source_h,
    "ingestSourceH",
    Source::SourceH,
    "/api/source_h/problems",
    "source_h (APM problem)"
);
ingestion_endpoint!(
    ingest_source_i,
    "ingestSourceI",
    Source::SourceI,
    "/api/source_i/webhook",
    "source_i (incident correlation)"
);

#[derive(Deserialize, utoipa::ToSchema)]
pub struct CreateTokenRequest {
    /// What the token is for, e.g. the sending tool: 1 to 255 characters, not blank.
    #[schema(
        max_length = 255,
        pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    record: IngestionToken,
    /// The token itself: shown this once, never again.
    token: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TokenList {
    tokens: Vec<IngestionToken>,
}

/// Create an ingestion token. The response is the only time the token is shown.
#[utoipa::path(post, path = "/api/ingestion-tokens", operation_id = "createIngestionToken", tag = "alert ingestion", request_body = CreateTokenRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 201, body = CreatedToken), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_token(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), AppError> {
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 255 {
        return Err(AppError::invalid("name must be 1 to 255 characters"));
    }
    let (record, token) = tokens::create(&state.db, &user.id, name).await?;
    Ok((StatusCode::CREATED, Json(CreatedToken { record, token })))
}

/// The user's ingestion tokens (without the secrets), newest first.
#[utoipa::path(get, path = "/api/ingestion-tokens", operation_id = "listIngestionTokens", tag = "alert ingestion", security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = TokenList), (status = 401, body = ErrorBody)))]
async fn list_tokens(State(state): State<AppState>, user: AuthUser) -> Result<Json<TokenList>, AppError> {
    Ok(Json(TokenList {
        tokens: tokens::list(&state.db, &user.id).await?,
    }))
}

/// Revoke a token; notifications carrying it are refused from then on.
#[utoipa::path(delete, path = "/api/ingestion-tokens/{token_id}", operation_id = "revokeIngestionToken", tag = "alert ingestion", params(("token_id" = Uuid, Path)),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = crate::http::MessageBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn revoke_token(
    State(state): State<AppState>,
    user: AuthUser,
    Path(raw_id): Path<String>,
) -> Result<Json<crate::http::MessageBody>, AppError> {
    let not_found = || AppError::NotFound("ingestion token not found".into());
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    if !tokens::revoke(&state.db, &user.id, id).await? {
        return Err(not_found());
    }
    Ok(Json(crate::http::MessageBody {
        message: "ingestion token revoked".into(),
    }))
}
