//! Decrypted credentials kept for a short time, so each use does not reach the secrets store.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use crate::crypto::{EncryptionKey, NONCE_LEN};
use crate::{Secret, SecretRef, StoreError};

pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(300);

const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// In-process by default; in Redis (shared by every instance) when configured. Redis holds only
/// AES-256-GCM blobs, bound to their reference, under `<key_prefix>` + SHA-256 of the reference,
/// so neither credentials nor user ids appear there.
pub struct CredentialCache {
    ttl: Duration,
    backend: Backend,
}

enum Backend {
    InProcess(Mutex<HashMap<SecretRef, Entry>>),
    Redis(RedisCache),
}

struct Entry {
    value: Secret<Value>,
    expires: Instant,
}

struct RedisCache {
    client: redis::Client,
    // Made on first use, so the service starts while Redis is down; it reconnects by itself.
    connection: OnceCell<ConnectionManager>,
    key_prefix: String,
    key: EncryptionKey,
}

impl CredentialCache {
    pub fn in_process(ttl: Duration) -> Self {
        Self {
            ttl,
            backend: Backend::InProcess(Mutex::default()),
        }
    }

    /// `key` encrypts the cached blobs; every instance sharing the Redis needs the same key.
    pub fn redis(client: redis::Client, key_prefix: impl Into<String>, key: EncryptionKey, ttl: Duration) -> Self {
        Self {
            ttl,
            backend: Backend::Redis(RedisCache {
                client,
                connection: OnceCell::new(),
                key_prefix: key_prefix.into(),
                key,
            }),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub async fn get(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError> {
        match &self.backend {
            Backend::InProcess(entries) => {
                let mut entries = entries.lock().expect("cache lock poisoned");
                match entries.get(reference) {
                    Some(entry) if entry.expires > Instant::now() => Ok(Some(entry.value.expose().clone())),
                    Some(_) => {
                        entries.remove(reference);
                        Ok(None)
                    }
                    None => Ok(None),
                }
            }
            Backend::Redis(redis) => redis.get(reference).await,
        }
    }

    pub async fn put(&self, reference: &SecretRef, value: &Value) -> Result<(), StoreError> {
        match &self.backend {
            Backend::InProcess(entries) => {
                let now = Instant::now();
                let mut entries = entries.lock().expect("cache lock poisoned");
                entries.retain(|_, entry| entry.expires > now);
                entries.insert(
                    reference.clone(),
                    Entry {
                        value: Secret::new(value.clone()),
                        expires: now + self.ttl,
                    },
                );
                Ok(())
            }
            Backend::Redis(redis) => redis.put(reference, value, self.ttl).await,
        }
    }

    /// Forgets the cached credentials of `reference`, e.g. on disconnect.
    pub async fn invalidate(&self, reference: &SecretRef) -> Result<(), StoreError> {
        match &self.backend {
            Backend::InProcess(entries) => {
                entries.lock().expect("cache lock poisoned").remove(reference);
                Ok(())
            }
            Backend::Redis(redis) => redis.invalidate(reference).await,
        }
    }
}

impl RedisCache {
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let connect = || async {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
                .set_response_timeout(REDIS_RESPONSE_TIMEOUT)
                .set_number_of_retries(1);
            // The retry back-off would otherwise hold a caller for seconds while Redis is down.
            tokio::time::timeout(
                REDIS_CONNECT_TIMEOUT * 2,
                ConnectionManager::new_with_config(self.client.clone(), config),
            )
            .await
            .unwrap_or_else(|_| Err((redis::ErrorKind::IoError, "connecting to Redis timed out").into()))
        };
        Ok(self.connection.get_or_try_init(connect).await?.clone())
    }

    fn key(&self, reference: &SecretRef) -> String {
        let digest = Sha256::digest(reference.to_string().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}{hex}", self.key_prefix)
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError> {
        let mut connection = self.connection().await?;
        let blob: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.key(reference))
            .query_async(&mut connection)
            .await?;
        let Some(blob) = blob else {
            return Ok(None);
        };
        let (nonce, ciphertext) = blob.split_at(NONCE_LEN.min(blob.len()));
        let plaintext = self
            .key
            .open(nonce, ciphertext, reference.to_string().as_bytes())
            .map_err(|_| StoreError::Decrypt(reference.clone()))?;
        serde_json::from_slice(&plaintext)
            .map(Some)
            .map_err(|_| StoreError::CorruptValue(reference.clone()))
    }

    async fn put(&self, reference: &SecretRef, value: &Value, ttl: Duration) -> Result<(), StoreError> {
        let plaintext = serde_json::to_vec(value).expect("a JSON value always serialises");
        let (nonce, ciphertext) = self.key.seal(&plaintext, reference.to_string().as_bytes());
        let blob = [&nonce[..], &ciphertext].concat();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut connection = self.connection().await?;
        redis::cmd("SET")
            .arg(self.key(reference))
            .arg(blob)
            .arg("PX")
            .arg(ttl_ms)
            .exec_async(&mut connection)
            .await?;
        Ok(())
    }

    async fn invalidate(&self, reference: &SecretRef) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        redis::cmd("DEL")
            .arg(self.key(reference))
            .exec_async(&mut connection)
            .await?;
        Ok(())
    }
}

impl fmt::Debug for CredentialCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.backend {
            Backend::InProcess(_) => "in-process",
            Backend::Redis(_) => "redis",
        };
        f.debug_struct("CredentialCache")
            .field("backend", &backend)
            .field("ttl", &self.ttl)
            .finish()
    }
}
