//! Users' cloud-account credentials: where they are kept, how they are cached, and the
//! provider clients that obtain them.
//!
//! - [`SecretStore`] with [`VaultKv2`] (a Vault-compatible KV v2 server) and [`EmbeddedStore`]
//!   (AES-256-GCM rows in PostgreSQL, when no Vault is configured); the database elsewhere keeps
//!   only [`SecretRef`]s.
//! - [`CredentialCache`] (in-process or encrypted in Redis) and the [`Secrets`] facade.
//! - [`StateSigner`]: the signed, single-use OAuth `state` of the cloud_a flow.
//! - [`cloud_a`] (OAuth 2.0 authorization code) and [`cloud_e`] (OAuth client credentials).
//! - `fake` (feature `fake`): local servers speaking those protocols, for tests.

mod cache;
pub mod cloud_a;
pub mod cloud_e;
mod crypto;
mod facade;
#[cfg(feature = "fake")]
pub mod fake;
mod reference;
mod secret;
mod state;
mod store;

pub use cache::{CredentialCache, DEFAULT_CACHE_TTL};
pub use crypto::{EncryptionKey, KeyError};
pub use facade::Secrets;
pub use reference::{secret_name, ReferenceError, SecretRef};
pub use secret::Secret;
pub use state::{NonceStore, PgNonceStore, StateClaims, StateError, StateSigner, DEFAULT_STATE_TTL};
pub use store::{EmbeddedStore, SecretStore, StoreError, VaultKv2, VaultKv2Config, EMBEDDED_PREFIX, VAULT_PREFIX};

/// Creates this crate's tables if they are missing. The statements are those of `migrations/`,
/// run outside sqlx's migration history so they coexist with the host's own migrator; a host
/// may instead copy the files into its migrations folder.
pub async fn migrate(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    for sql in [
        include_str!("../migrations/0001_embedded_secrets.sql"),
        include_str!("../migrations/0002_oauth_state_nonces.sql"),
    ] {
        sqlx::raw_sql(sql).execute(pool).await?;
    }
    Ok(())
}
