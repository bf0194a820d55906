//! Who is calling. Identity comes from `X-User-ID` (verified as described on [`AuthMode`]) or
//! from the login session cookie, and is resolved at most once per request.
//!
//! An identity is a user id, not an account: `X-User-ID` is honoured without looking for a row of
//! `users` (the gateway that sets it owns the user directory), so data is keyed by the id alone.

pub mod gateway;
pub mod ingestion_token;
pub mod password;
pub mod sessions;

use axum::{
    extract::FromRequestParts,
    http::{request::Parts, HeaderMap},
};
use axum_extra::extract::CookieJar;

pub use crate::users::{normalized_user_id, MAX_USER_ID_LEN};
use crate::{config::AuthMode, error::AppError, state::AppState};

pub const USER_ID_HEADER: &str = "x-user-id";

/// The outcome of looking at a request's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Neither `X-User-ID` nor a session cookie.
    Anonymous,
    /// An `X-User-ID` that is too long, or that strict mode could not verify.
    Unverified(String),
    /// A verified user id (it need not name a registered account).
    User(String),
}

impl Identity {
    pub async fn resolve(parts: &Parts, state: &AppState) -> Result<Self, AppError> {
        // A gateway that appends its header instead of replacing the client's would otherwise let
        // whichever came first through.
        if parts.headers.get_all(USER_ID_HEADER).iter().nth(1).is_some() {
            return Err(AppError::bad_request(
                "invalid_request",
                "X-User-ID is sent more than once; send it once",
            ));
        }
        let session_user = match session_token(&parts.headers) {
            Some(token) => state.login_sessions.user_of(&token).await?,
            None => None,
        };
        let claimed = match claimed_user_id(&parts.headers) {
            Claim::Absent => return Ok(session_user.map_or(Self::Anonymous, Self::User)),
            Claim::NotUtf8 => return Ok(Self::Unverified(String::new())),
            Claim::Id(claimed) => claimed,
        };
        if claimed.len() > MAX_USER_ID_LEN {
            return Ok(Self::Unverified(claimed));
        }
        if state.config.auth_mode == AuthMode::Strict
            && session_user.as_deref() != Some(claimed.as_str())
            && !signed_by_gateway(&parts.headers, &claimed, state)
        {
            return Ok(Self::Unverified(claimed));
        }
        Ok(Self::User(claimed))
    }
}

impl FromRequestParts<AppState> for Identity {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(identity) = parts.extensions.get::<Identity>() {
            return Ok(identity.clone());
        }
        let identity = Self::resolve(parts, state).await?;
        if let Self::User(id) = &identity {
            // The request's log span names its user: the identity, never a credential.
            tracing::Span::current().record("user_id", id.as_str());
        }
        parts.extensions.insert(identity.clone());
        Ok(identity)
    }
}

/// A verified user; anything else is 401.
#[derive(Clone, Debug)]
pub struct AuthUser {
    pub id: String,
}

impl FromRequestParts<AppState> for AuthUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match Identity::from_request_parts(parts, state).await? {
            Identity::User(id) => Ok(Self { id }),
            Identity::Anonymous => Err(AppError::Unauthorized(
                "authentication required: send the X-User-ID header or log in".into(),
            )),
            Identity::Unverified(_) => Err(AppError::Unauthorized(
                "invalid or unverified X-User-ID (an id is at most 255 bytes of UTF-8)".into(),
            )),
        }
    }
}

/// What `X-User-ID` claims.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// No header, or a blank one.
    Absent,
    /// Bytes that are not UTF-8: no id can be read from them, and a lossy reading could turn two
    /// different ids into one.
    NotUtf8,
    /// The id, trimmed. UTF-8 beyond ASCII is an id like any other, as it is in the WebSocket's
    /// `init`.
    Id(String),
}

pub fn claimed_user_id(headers: &HeaderMap) -> Claim {
    let Some(value) = headers.get(USER_ID_HEADER) else {
        return Claim::Absent;
    };
    match std::str::from_utf8(value.as_bytes()).map(normalized_user_id) {
        Ok("") => Claim::Absent,
        Ok(id) => Claim::Id(id.to_owned()),
        Err(_) => Claim::NotUtf8,
    }
}

pub fn session_token(headers: &HeaderMap) -> Option<String> {
    CookieJar::from_headers(headers)
        .get(sessions::SESSION_COOKIE)
        .map(|cookie| cookie.value().to_owned())
        .filter(|token| !token.is_empty())
}

fn signed_by_gateway(headers: &HeaderMap, user_id: &str, state: &AppState) -> bool {
    let Some(secret) = state.config.gateway_signing_secret.as_ref().filter(|s| !s.is_empty()) else {
        return false;
    };
    headers
        .get(gateway::SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|header| gateway::verify(secret.expose(), user_id, header, chrono::Utc::now().timestamp()))
}

/// A verified user on the incident endpoints, where the spec answers a missing identity with 400.
#[derive(Clone, Debug)]
pub struct IncidentUser {
    pub id: String,
}

impl FromRequestParts<AppState> for IncidentUser {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match Identity::from_request_parts(parts, state).await? {
            Identity::User(id) => Ok(Self { id }),
            Identity::Anonymous | Identity::Unverified(_) => Err(AppError::bad_request(
                "identity_required",
                "a valid user identity is required: send the X-User-ID header or log in",
            )),
        }
    }
}
