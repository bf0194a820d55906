//! Where credentials live: a Vault-compatible KV v2 server, or encrypted rows in PostgreSQL.

mod embedded;
mod vault;

pub use embedded::{EmbeddedStore, EMBEDDED_PREFIX};
pub use vault::{VaultKv2, VaultKv2Config, VAULT_PREFIX};

use async_trait::async_trait;
use serde_json::Value;

use crate::reference::{ReferenceError, SecretRef};

/// A secrets store. Values are JSON objects; names come from [`crate::secret_name`].
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Writes `value` under `name`, replacing what was there, and returns its reference.
    async fn put(&self, name: &str, value: &Value) -> Result<SecretRef, StoreError>;

    /// The value behind `reference`, or `None` if there is none.
    async fn get(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError>;

    /// Deletes the secret with all its versions; deleting a missing secret succeeds.
    async fn delete(&self, reference: &SecretRef) -> Result<(), StoreError>;
}

/// Store and cache failures. None of them carries a secret value, a token or a key.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("secret reference {0} does not belong to this store")]
    ForeignReference(SecretRef),
    #[error("invalid secrets store configuration: {0}")]
    Config(String),
    #[error("secret values must be JSON objects")]
    NotAnObject,
    #[error("the stored value of {0} is not valid JSON")]
    CorruptValue(SecretRef),
    #[error("the secrets store rejected its token (HTTP {0}); check the configured Vault token and its policy")]
    Unauthorized(u16),
    #[error("the secrets store answered HTTP {status}: {message}")]
    Backend { status: u16, message: String },
    #[error("the secrets store could not be reached: {0}")]
    Http(#[source] reqwest::Error),
    #[error("secret {0} could not be decrypted: the data was altered or belongs to another name")]
    Decrypt(SecretRef),
    #[error("secret {reference} was encrypted with key {found}, but the configured key is {expected}")]
    KeyMismatch {
        reference: SecretRef,
        found: String,
        expected: String,
    },
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("credential cache error: {0}")]
    Cache(#[from] redis::RedisError),
}

fn require_object(value: &Value) -> Result<(), StoreError> {
    if value.is_object() {
        Ok(())
    } else {
        Err(StoreError::NotAnObject)
    }
}
