//! Secrets encrypted with AES-256-GCM and kept in PostgreSQL, for deployments without Vault.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::PgPool;

use super::{require_object, SecretStore, StoreError};
use crate::crypto::EncryptionKey;
use crate::reference::{validate_path, SecretRef};

pub const EMBEDDED_PREFIX: &str = "embedded";

/// Rows of `embedded_secrets` (see `migrations/0001_embedded_secrets.sql`). The secret name is
/// the associated data of its ciphertext, so a ciphertext copied to another row does not decrypt.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    pool: PgPool,
    key: EncryptionKey,
    location: String,
}

impl EmbeddedStore {
    /// `mount` and `base_path` only shape the references, so they look like Vault's.
    pub fn new(pool: PgPool, key: EncryptionKey, mount: &str, base_path: &str) -> Result<Self, StoreError> {
        validate_path(mount)?;
        validate_path(base_path)?;
        Ok(Self {
            pool,
            key,
            location: format!("{mount}/{base_path}"),
        })
    }

    fn own_name<'r>(&self, reference: &'r SecretRef) -> Result<&'r str, StoreError> {
        if reference.prefix() == EMBEDDED_PREFIX && reference.location() == self.location {
            Ok(reference.name())
        } else {
            Err(StoreError::ForeignReference(reference.clone()))
        }
    }
}

#[async_trait]
impl SecretStore for EmbeddedStore {
    async fn put(&self, name: &str, value: &Value) -> Result<SecretRef, StoreError> {
        require_object(value)?;
        let reference = SecretRef::new(EMBEDDED_PREFIX, &self.location, name)?;
        let plaintext = serde_json::to_vec(value).expect("a JSON value always serialises");
        let (nonce, ciphertext) = self.key.seal(&plaintext, name.as_bytes());
        sqlx::query(
            "INSERT INTO embedded_secrets (name, nonce, ciphertext, key_id, updated_at)
             VALUES ($1, $2, $3, $4, now())
             ON CONFLICT (name) DO UPDATE
             SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, key_id = EXCLUDED.key_id,
                 updated_at = EXCLUDED.updated_at",
        )
        .bind(name)
        .bind(&nonce[..])
        .bind(&ciphertext)
        .bind(self.key.id())
        .execute(&self.pool)
        .await?;
        tracing::debug!(secret_ref = %reference, "stored secret in the embedded store");
        Ok(reference)
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError> {
        let name = self.own_name(reference)?;
        let row: Option<(Vec<u8>, Vec<u8>, String)> =
            sqlx::query_as("SELECT nonce, ciphertext, key_id FROM embedded_secrets WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        let Some((nonce, ciphertext, key_id)) = row else {
            return Ok(None);
        };
        if key_id != self.key.id() {
            return Err(StoreError::KeyMismatch {
                reference: reference.clone(),
                found: key_id,
                expected: self.key.id().to_owned(),
            });
        }
        let plaintext = self
            .key
            .open(&nonce, &ciphertext, name.as_bytes())
            .map_err(|_| StoreError::Decrypt(reference.clone()))?;
        serde_json::from_slice(&plaintext)
            .map(Some)
            .map_err(|_| StoreError::CorruptValue(reference.clone()))
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), StoreError> {
        let name = self.own_name(reference)?;
        sqlx::query("DELETE FROM embedded_secrets WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        tracing::debug!(secret_ref = %reference, "deleted secret from the embedded store");
        Ok(())
    }
}
