//! Who a request's ingestion token names: the token read from the request (a bearer credential
//! or the `token` query parameter) and its owner, looked up once per request.

use crate::{ingest::tokens, state::AppState};

/// The owner of the live ingestion token a request presents, once looked up (kept in the
/// request's extensions, so that the rate limiter's lookup serves the handler too).
#[derive(Clone, Debug)]
pub struct TokenOwner(pub Option<String>);

impl TokenOwner {
    /// The owner of the request's token; `None` when it presents none or an unknown or revoked one.
    pub async fn resolve(parts: &mut axum::http::request::Parts, state: &AppState) -> sqlx::Result<Option<String>> {
        if let Some(Self(owner)) = parts.extensions.get::<Self>() {
            return Ok(owner.clone());
        }
        let owner = match presented_token(&parts.headers, &parts.uri) {
            Some(token) => tokens::owner_of(&state.db, &token).await?,
            None => None,
        };
        parts.extensions.insert(Self(owner.clone()));
        Ok(owner)
    }
}

/// The ingestion token a request presents: the bearer credential, else the `token` query parameter.
pub fn presented_token(headers: &axum::http::HeaderMap, uri: &axum::http::Uri) -> Option<String> {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(|token| token.trim().to_owned());
    bearer.or_else(|| {
        uri.query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("token=").map(str::to_owned))
    })
}
