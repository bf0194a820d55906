//! Server-side login sessions behind the `vigil_session` cookie. The cookie holds 32 random
//! bytes; the database holds their SHA-256 digest and an expiry.

use std::time::Duration;

use axum_extra::extract::cookie::{Cookie, SameSite};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

pub const SESSION_COOKIE: &str = "vigil_session";

#[derive(Clone)]
pub struct LoginSessions {
    db: PgPool,
    ttl: Duration,
    secure_cookie: bool,
}

impl LoginSessions {
    pub fn new(db: PgPool, ttl: Duration, secure_cookie: bool) -> Self {
        Self { db, ttl, secure_cookie }
    }

    /// Opens a session for `user_id` and returns the cookie that carries it.
    pub async fn open(&self, user_id: &str) -> sqlx::Result<Cookie<'static>> {
        let mut token = [0u8; 32];
        rand::rng().fill_bytes(&mut token);
        let token = hex::encode(token);
        let ttl = chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::days(7));
        sqlx::query("DELETE FROM login_sessions WHERE user_id = $1 AND expires_at < now()")
            .bind(user_id)
            .execute(&self.db)
            .await?;
        sqlx::query("INSERT INTO login_sessions (token_sha256, user_id, expires_at) VALUES ($1, $2, $3)")
            .bind(digest(&token))
            .bind(user_id)
            .bind(chrono::Utc::now() + ttl)
            .execute(&self.db)
            .await?;
        Ok(self.cookie(token, self.ttl))
    }

    /// The user of a live session, if the token names one.
    pub async fn user_of(&self, token: &str) -> sqlx::Result<Option<String>> {
        sqlx::query_scalar("SELECT user_id FROM login_sessions WHERE token_sha256 = $1 AND expires_at > now()")
            .bind(digest(token))
            .fetch_optional(&self.db)
            .await
    }

    pub async fn close(&self, token: &str) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM login_sessions WHERE token_sha256 = $1")
            .bind(digest(token))
            .execute(&self.db)
            .await
            .map(drop)
    }

    /// Ends every session of `user_id` except `keep` (used after a password change).
    pub async fn close_others(&self, user_id: &str, keep: Option<&str>) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM login_sessions WHERE user_id = $1 AND token_sha256 IS DISTINCT FROM $2")
            .bind(user_id)
            .bind(keep.map(digest))
            .execute(&self.db)
            .await
            .map(drop)
    }

    /// A cookie that tells the browser to forget the session.
    pub fn removal_cookie(&self) -> Cookie<'static> {
        self.cookie(String::new(), Duration::ZERO)
    }

    fn cookie(&self, value: String, max_age: Duration) -> Cookie<'static> {
        Cookie::build((SESSION_COOKIE, value))
            .http_only(true)
            .same_site(SameSite::Lax)
            .secure(self.secure_cookie)
            .path("/")
            .max_age(time_duration(max_age))
            .build()
    }
}

fn digest(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

fn time_duration(duration: Duration) -> cookie::time::Duration {
    cookie::time::Duration::seconds(duration.as_secs() as i64)
}
