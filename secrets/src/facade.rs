//! The secrets store and the credential cache used together.

use std::sync::Arc;

use serde_json::Value;

use crate::{CredentialCache, SecretRef, SecretStore, StoreError};

pub struct Secrets {
    store: Arc<dyn SecretStore>,
    cache: CredentialCache,
}

impl Secrets {
    pub fn new(store: Arc<dyn SecretStore>, cache: CredentialCache) -> Self {
        Self { store, cache }
    }

    /// Writes through: the store first, then the cache.
    pub async fn save(&self, name: &str, value: &Value) -> Result<SecretRef, StoreError> {
        let reference = self.store.put(name, value).await?;
        if let Err(error) = self.cache.put(&reference, value).await {
            // The store holds the new value; a stale cached one lives at most one TTL.
            tracing::warn!(secret_ref = %reference, %error, "could not cache saved credentials");
        }
        Ok(reference)
    }

    /// From the cache if present there, else from the store (and then cached).
    pub async fn load(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError> {
        match self.cache.get(reference).await {
            Ok(Some(value)) => return Ok(Some(value)),
            Ok(None) => {}
            Err(error) => tracing::warn!(secret_ref = %reference, %error, "credential cache unavailable"),
        }
        let value = self.store.get(reference).await?;
        if let Some(value) = &value {
            if let Err(error) = self.cache.put(reference, value).await {
                tracing::warn!(secret_ref = %reference, %error, "could not cache loaded credentials");
            }
        }
        Ok(value)
    }

    /// Deletes from the store and the cache. A cache failure is an error here: cleared
    /// credentials must not stay usable.
    pub async fn remove(&self, reference: &SecretRef) -> Result<(), StoreError> {
        self.store.delete(reference).await?;
        self.cache.invalidate(reference).await
    }

    pub fn cache(&self) -> &CredentialCache {
        &self.cache
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}
