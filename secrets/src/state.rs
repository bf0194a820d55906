//! The signed, single-use OAuth `state` of the cloud_a flow (cross-site request forgery guard).
//!
//! `state = base64url(payload) "." base64url(HMAC-SHA256(key, "vigil-oauth-state.v1." base64url(payload)))`
//! with payload `{"uid": user id, "nonce": 128 random bits, "exp": unix seconds}`.

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, TimeDelta, Utc};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use sqlx::PgPool;

use crate::{Secret, StoreError};

pub const DEFAULT_STATE_TTL: TimeDelta = TimeDelta::minutes(10);
const MIN_KEY_LEN: usize = 32;
const MAC_CONTEXT: &[u8] = b"vigil-oauth-state.v1.";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the state signing key must be at least {MIN_KEY_LEN} bytes")]
    KeyTooShort,
    #[error("the OAuth state is malformed")]
    Malformed,
    #[error("the OAuth state signature does not match")]
    BadSignature,
    #[error("the OAuth state has expired; start the sign-in again")]
    Expired,
    #[error("the OAuth state was already used")]
    Replayed,
    #[error("could not record the OAuth state as used: {0}")]
    Store(#[from] StoreError),
}

/// What a verified state says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateClaims {
    pub user_id: String,
    pub nonce: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    uid: String,
    nonce: String,
    exp: i64,
}

#[derive(Debug, Clone)]
pub struct StateSigner {
    key: Secret<Vec<u8>>,
    ttl: TimeDelta,
}

impl StateSigner {
    pub fn new(key: Secret<Vec<u8>>) -> Result<Self, StateError> {
        if key.expose().len() < MIN_KEY_LEN {
            return Err(StateError::KeyTooShort);
        }
        Ok(Self {
            key,
            ttl: DEFAULT_STATE_TTL,
        })
    }

    pub fn with_ttl(self, ttl: TimeDelta) -> Self {
        Self { ttl, ..self }
    }

    pub fn issue(&self, user_id: &str, now: DateTime<Utc>) -> String {
        let mut nonce = [0u8; 16];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload {
            uid: user_id.to_owned(),
            nonce: URL_SAFE_NO_PAD.encode(nonce),
            exp: (now + self.ttl).timestamp(),
        };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&payload).expect("the payload serialises"));
        let mac = URL_SAFE_NO_PAD.encode(self.mac(&payload).finalize().into_bytes());
        format!("{payload}.{mac}")
    }

    /// Checks signature and expiry only; use [`StateSigner::verify_once`] in the callback.
    pub fn verify(&self, state: &str, now: DateTime<Utc>) -> Result<StateClaims, StateError> {
        let (payload, mac) = state.split_once('.').ok_or(StateError::Malformed)?;
        let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| StateError::Malformed)?;
        self.mac(payload)
            .verify_slice(&mac)
            .map_err(|_| StateError::BadSignature)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| StateError::Malformed)?;
        let payload: Payload = serde_json::from_slice(&payload).map_err(|_| StateError::Malformed)?;
        let expires_at = DateTime::from_timestamp(payload.exp, 0).ok_or(StateError::Malformed)?;
        if now >= expires_at {
            return Err(StateError::Expired);
        }
        Ok(StateClaims {
            user_id: payload.uid,
            nonce: payload.nonce,
            expires_at,
        })
    }

    /// [`StateSigner::verify`], then marks the state's nonce used so it cannot be replayed.
    pub async fn verify_once(
        &self,
        state: &str,
        now: DateTime<Utc>,
        nonces: &dyn NonceStore,
    ) -> Result<StateClaims, StateError> {
        let claims = self.verify(state, now)?;
        if nonces.consume(&claims.nonce, claims.expires_at).await? {
            Ok(claims)
        } else {
            Err(StateError::Replayed)
        }
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.expose()).expect("HMAC accepts keys of any length");
        mac.update(MAC_CONTEXT);
        mac.update(payload.as_bytes());
        mac
    }
}

/// Remembers which state nonces were used.
#[async_trait]
pub trait NonceStore: Send + Sync {
    /// Records `nonce` as used; `false` if it had been used before.
    async fn consume(&self, nonce: &str, expires_at: DateTime<Utc>) -> Result<bool, StoreError>;
}

/// `oauth_state_nonces` (see `migrations/0002_oauth_state_nonces.sql`).
#[derive(Debug, Clone)]
pub struct PgNonceStore {
    pool: PgPool,
}

impl PgNonceStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Deletes nonces of states that expired before `now`; returns how many.
    pub async fn purge_expired(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM oauth_state_nonces WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl NonceStore for PgNonceStore {
    async fn consume(&self, nonce: &str, expires_at: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO oauth_state_nonces (nonce, used_at, expires_at) VALUES ($1, now(), $2)
             ON CONFLICT (nonce) DO NOTHING",
        )
        .bind(nonce)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> StateSigner {
        StateSigner::new(Secret::new(vec![42; 32])).unwrap()
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[test]
    fn round_trip() {
        let state = signer().issue("user-1", now());
        let claims = signer().verify(&state, now()).unwrap();
        assert_eq!(claims.user_id, "user-1");
        assert_eq!(claims.expires_at, now() + DEFAULT_STATE_TTL);
        assert_ne!(
            signer().verify(&signer().issue("user-1", now()), now()).unwrap().nonce,
            claims.nonce
        );
    }

    #[test]
    fn tampered_payload_is_rejected() {
        let state = signer().issue("user-1", now());
        let (_, mac) = state.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(br#"{"uid":"admin","nonce":"x","exp":1900000000}"#);
        assert!(matches!(
            signer().verify(&format!("{forged}.{mac}"), now()),
            Err(StateError::BadSignature)
        ));
    }

    #[test]
    fn tampered_mac_is_rejected() {
        let state = signer().issue("user-1", now());
        let (payload, mac) = state.split_once('.').unwrap();
        let mut mac = URL_SAFE_NO_PAD.decode(mac).unwrap();
        mac[0] ^= 1;
        let tampered = format!("{payload}.{}", URL_SAFE_NO_PAD.encode(mac));
        assert!(matches!(
            signer().verify(&tampered, now()),
            Err(StateError::BadSignature)
        ));
        let other_key = StateSigner::new(Secret::new(vec![7; 32])).unwrap();
        assert!(matches!(other_key.verify(&state, now()), Err(StateError::BadSignature)));
    }

    #[test]
    fn malformed_states_are_rejected() {
        for bad in ["", "abc", "a.b", "!!.??"] {
            assert!(signer().verify(bad, now()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expired_state_is_rejected() {
        let state = signer().issue("user-1", now());
        assert!(signer().verify(&state, now() + TimeDelta::minutes(9)).is_ok());
        assert!(matches!(
            signer().verify(&state, now() + DEFAULT_STATE_TTL),
            Err(StateError::Expired)
        ));
        let short = signer().with_ttl(TimeDelta::seconds(30));
        let state = short.issue("user-1", now());
        assert!(matches!(
            short.verify(&state, now() + TimeDelta::seconds(31)),
            Err(StateError::Expired)
        ));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(matches!(
            StateSigner::new(Secret::new(vec![1; 16])),
            Err(StateError::KeyTooShort)
        ));
    }
}
