//! Per-user ingestion tokens, for alerting tools that cannot set an `X-User-ID` header. The token
//! is shown once at creation; the database keeps its SHA-256 digest and a short prefix.

use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

pub const TOKEN_PREFIX: &str = "vgi_";

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct IngestionToken {
    pub id: Uuid,
    pub name: String,
    /// The first characters of the token, to tell tokens apart.
    pub token_prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, name, token_prefix, created_at, last_used_at, revoked_at";

/// Creates a token; returns its record and the secret, which is not stored anywhere.
pub async fn create(db: &PgPool, user_id: &str, name: &str) -> sqlx::Result<(IngestionToken, String)> {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    let record = sqlx::query_as(&format!(
        "INSERT INTO ingestion_tokens (user_id, name, token_sha256, token_prefix) VALUES ($1, $2, $3, $4) RETURNING {COLUMNS}"
    ))
    .bind(user_id)
    .bind(name)
    .bind(digest(&token))
    .bind(&token[..TOKEN_PREFIX.len() + 8])
    .fetch_one(db)
    .await?;
    Ok((record, token))
}

pub async fn list(db: &PgPool, user_id: &str) -> sqlx::Result<Vec<IngestionToken>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM ingestion_tokens WHERE user_id = $1 ORDER BY created_at DESC, id"
    ))
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// Revokes one of the user's tokens; `false` when the user has no such live token.
pub async fn revoke(db: &PgPool, user_id: &str, id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "UPDATE ingestion_tokens SET revoked_at = now() WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
    )
    .bind(id)
    .bind(user_id)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// The owner of a live token, noting its use.
pub async fn owner_of(db: &PgPool, token: &str) -> sqlx::Result<Option<String>> {
    if !token.starts_with(TOKEN_PREFIX) {
        return Ok(None);
    }
    sqlx::query_scalar(
        "UPDATE ingestion_tokens SET last_used_at = now() WHERE token_sha256 = $1 AND revoked_at IS NULL RETURNING user_id",
    )
    .bind(digest(token))
    .fetch_optional(db)
    .await
}

pub fn digest(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}
