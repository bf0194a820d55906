//! Users are a plain table (no history is asked of them); this is its repository.

use sqlx::PgPool;

use crate::error::{on_unique_violation, AppError};

/// The longest user id accepted (bytes), over HTTP and the WebSocket alike.
pub const MAX_USER_ID_LEN: usize = 255;

/// A user id as every entry point reads it (`X-User-ID`, the WebSocket's `init` and the user ids of
/// its later messages): trimmed, so that one user is never two.
pub fn normalized_user_id(raw: &str) -> &str {
    raw.trim()
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    pub password_hash: String,
}

pub async fn insert(db: &PgPool, email: &str, name: Option<&str>, password_hash: &str) -> Result<User, AppError> {
    sqlx::query_as(
        "INSERT INTO users (email, name, password_hash) VALUES ($1, $2, $3) RETURNING id, email, name, password_hash",
    )
    .bind(email)
    .bind(name)
    .bind(password_hash)
    .fetch_one(db)
    .await
    .map_err(on_unique_violation(
        "users_email_key",
        AppError::Conflict("an account with this email already exists".into()),
    ))
}

pub async fn by_email(db: &PgPool, email: &str) -> sqlx::Result<Option<User>> {
    sqlx::query_as("SELECT id, email, name, password_hash FROM users WHERE lower(email) = lower($1)")
        .bind(email)
        .fetch_optional(db)
        .await
}

pub async fn by_id(db: &PgPool, id: &str) -> sqlx::Result<Option<User>> {
    sqlx::query_as("SELECT id, email, name, password_hash FROM users WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Replaces the password hash if it is still `replacing` (the one the caller verified against):
/// of two changes made with the same current password at once, only the first succeeds.
pub async fn replace_password_hash(db: &PgPool, id: &str, replacing: &str, password_hash: &str) -> sqlx::Result<bool> {
    let result =
        sqlx::query("UPDATE users SET password_hash = $3, updated_at = now() WHERE id = $1 AND password_hash = $2")
            .bind(id)
            .bind(replacing)
            .bind(password_hash)
            .execute(db)
            .await?;
    Ok(result.rows_affected() == 1)
}
