//! HashiCorp-Vault-compatible KV version 2 over HTTP.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

use super::{require_object, SecretStore, StoreError};
use crate::reference::{validate_path, SecretRef};
use crate::Secret;

pub const VAULT_PREFIX: &str = "vault";

#[derive(Debug, Clone)]
pub struct VaultKv2Config {
    /// e.g. `https://vault.internal:8200`
    pub address: Url,
    pub token: Secret<String>,
    /// The KV v2 mount, e.g. `secret`.
    pub mount: String,
    pub base_path: String,
    pub timeout: Duration,
}

impl VaultKv2Config {
    /// Base path `users` and a 10-second timeout.
    pub fn new(address: Url, token: Secret<String>, mount: impl Into<String>) -> Self {
        Self {
            address,
            token,
            mount: mount.into(),
            base_path: "users".into(),
            timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone)]
pub struct VaultKv2 {
    http: reqwest::Client,
    address: Url,
    token: Secret<String>,
    mount: String,
    base_path: String,
    location: String,
}

#[derive(Deserialize)]
struct ReadResponse {
    data: ReadData,
}

#[derive(Deserialize)]
struct ReadData {
    // Null when the latest version was soft-deleted.
    data: Option<Value>,
}

#[derive(Deserialize)]
struct ErrorResponse {
    #[serde(default)]
    errors: Vec<String>,
}

impl VaultKv2 {
    pub fn new(config: VaultKv2Config) -> Result<Self, StoreError> {
        validate_path(&config.mount)?;
        validate_path(&config.base_path)?;
        if config.address.cannot_be_a_base() {
            return Err(StoreError::Config(format!(
                "{} cannot be a Vault address",
                config.address
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .build()
            .map_err(|e| StoreError::Config(e.to_string()))?;
        Ok(Self {
            http,
            location: format!("{}/{}", config.mount, config.base_path),
            address: config.address,
            token: config.token,
            mount: config.mount,
            base_path: config.base_path,
        })
    }

    /// `/v1/<mount>/<api>/<base_path>/<name>` where `api` is `data` or `metadata`.
    fn url(&self, api: &str, name: &str) -> Url {
        let mut url = self.address.clone();
        url.path_segments_mut()
            .expect("checked in new: the address can be a base")
            .pop_if_empty()
            .push("v1")
            .extend(self.mount.split('/'))
            .push(api)
            .extend(self.base_path.split('/'))
            .push(name);
        url
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        self.http
            .request(method, url)
            .header("X-Vault-Token", self.token.expose())
    }

    fn own_name<'r>(&self, reference: &'r SecretRef) -> Result<&'r str, StoreError> {
        if reference.prefix() == VAULT_PREFIX && reference.location() == self.location {
            Ok(reference.name())
        } else {
            Err(StoreError::ForeignReference(reference.clone()))
        }
    }
}

async fn send(request: RequestBuilder) -> Result<Response, StoreError> {
    request.send().await.map_err(|e| StoreError::Http(e.without_url()))
}

/// The failure for an unexpected status; Vault's `errors` messages never echo secret data.
async fn failure(response: Response) -> StoreError {
    let status = response.status();
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return StoreError::Unauthorized(status.as_u16());
    }
    let mut message = match response.json::<ErrorResponse>().await {
        Ok(body) if !body.errors.is_empty() => body.errors.join("; "),
        _ => status.canonical_reason().unwrap_or("unexpected status").to_owned(),
    };
    if let Some((cut, _)) = message.char_indices().nth(200) {
        message.truncate(cut);
    }
    StoreError::Backend {
        status: status.as_u16(),
        message,
    }
}

#[async_trait]
impl SecretStore for VaultKv2 {
    async fn put(&self, name: &str, value: &Value) -> Result<SecretRef, StoreError> {
        require_object(value)?;
        let reference = SecretRef::new(VAULT_PREFIX, &self.location, name)?;
        let response = send(
            self.request(Method::POST, self.url("data", name))
                .json(&json!({ "data": value })),
        )
        .await?;
        if !response.status().is_success() {
            return Err(failure(response).await);
        }
        tracing::debug!(secret_ref = %reference, "stored secret in Vault");
        Ok(reference)
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<Value>, StoreError> {
        let name = self.own_name(reference)?;
        let response = send(self.request(Method::GET, self.url("data", name))).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let body: ReadResponse = response
                    .json()
                    .await
                    .map_err(|_| StoreError::CorruptValue(reference.clone()))?;
                Ok(body.data.data)
            }
            _ => Err(failure(response).await),
        }
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), StoreError> {
        let name = self.own_name(reference)?;
        let response = send(self.request(Method::DELETE, self.url("metadata", name))).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(()),
            status if status.is_success() => {
                tracing::debug!(secret_ref = %reference, "deleted secret from Vault");
                Ok(())
            }
            _ => Err(failure(response).await),
        }
    }
}
