//! Users' cloud connections: the secrets store and cache, the provider clients built from the
//! configuration, token records, and the credential lifecycle the HTTP handlers share (save,
//! load, forget, and the Connection commands that go with them).

pub mod cloud_a_setup;
pub mod cloud_b;
pub mod tokens;

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{
    body::Body,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use base64::{engine::general_purpose::STANDARD, Engine};
use chrono::Utc;
use cqrs_es::AggregateError;
use hmac::{Hmac, Mac};
use reqwest::Url;
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;
use sqlx::PgPool;
use vigil_aggregates::connection::{
    check_account_id, checked_name, connection_id, ConnectionCommand, ConnectionError, ConnectionStatus, Provider,
};
use vigil_projections::connections as read;
use vigil_providers::{
    cloud_b::{external_id_for, ServiceCredentials, StsClient},
    cloud_c::AzureClient,
    cloud_d::ScalewayClient,
};
use vigil_secrets::{
    cloud_a::{CloudAClient, CloudAConfig},
    cloud_e::{CloudEClient, CloudEConfig},
    secret_name, CredentialCache, EmbeddedStore, EncryptionKey, PgNonceStore, SecretRef, SecretStore, Secrets,
    StateSigner, StoreError, VaultKv2, VaultKv2Config,
};

pub use cloud_a_setup::{CloudASetupHandler, CLOUD_A_SETUP_JOB};
pub use tokens::{TokenFields, TokenRecord};

use crate::{
    config::Config,
    error::AppError,
    event_store::{execute, Actor, EventStore},
};

/// What the connection use cases work with: the pool, the credential stores and provider
/// clients, and the event store (`AppState::connection_handles` hands them out).
#[derive(Clone)]
pub struct ConnectionHandles {
    pub db: sqlx::PgPool,
    pub connections: std::sync::Arc<Connectors>,
    pub events: std::sync::Arc<EventStore>,
}

/// Name of the master key file in the data directory.
pub const KEY_FILE: &str = "secrets.key";

/// Everything the connection endpoints need, built once from the configuration.
pub struct Connectors {
    /// Deployment environment, the first part of secret names.
    pub environment: String,
    pub secrets: Secrets,
    pub nonces: PgNonceStore,
    pub state_signer: StateSigner,
    /// `None` until the service's OAuth client is configured.
    pub cloud_a: Option<CloudAClient>,
    /// `None` until the service's own cloud_b credentials are configured.
    pub sts: Option<StsClient>,
    external_id_key: vigil_secrets::Secret<Vec<u8>>,
    pub azure: AzureClient,
    pub scaleway: ScalewayClient,
    pub cloud_e: CloudEClient,
    pub cloud_f_enabled: bool,
    /// `None` until the flag is on and the service's cloud_f OAuth client is configured.
    pub cloud_f: Option<CloudAClient>,
    /// cloud_f's own state key, so a state issued for one provider's callback fails at the other's.
    pub cloud_f_state_signer: StateSigner,
}

impl Connectors {
    pub fn from_config(config: &Config, db: &PgPool) -> anyhow::Result<Self> {
        let settings = &config.connections;
        let master = master_key(config)?;
        let encryption_key = EncryptionKey::from_base64(&STANDARD.encode(master.expose()))?;
        let timeout = Duration::from_secs(settings.provider_timeout_secs);

        let store: Arc<dyn SecretStore> = match &settings.vault_addr {
            Some(address) => {
                let token = settings
                    .vault_token
                    .as_ref()
                    .filter(|token| !token.is_empty())
                    .context("VAULT_ADDR is set but VAULT_TOKEN is not")?;
                let mut vault = VaultKv2Config::new(
                    Url::parse(address).context("VAULT_ADDR is not a URL")?,
                    vigil_secrets::Secret::new(token.expose().to_owned()),
                    settings.vault_mount.clone(),
                );
                vault.base_path = settings.secrets_base_path.clone();
                vault.timeout = timeout;
                Arc::new(VaultKv2::new(vault)?)
            }
            None => Arc::new(EmbeddedStore::new(
                db.clone(),
                encryption_key.clone(),
                &settings.vault_mount,
                &settings.secrets_base_path,
            )?),
        };
        let ttl = Duration::from_secs(settings.credential_cache_ttl_secs);
        let cache = match &config.redis_url {
            Some(url) => CredentialCache::redis(
                redis::Client::open(url.expose()).context("REDIS_URL is not a Redis URL")?,
                format!("{}:credentials:", config.redis_key_prefix),
                encryption_key,
                ttl,
            ),
            None => CredentialCache::in_process(ttl),
        };

        let cloud_a = oauth_config(
            &settings.cloud_a_client_id,
            &settings.cloud_a_client_secret,
            [
                (&settings.cloud_a_auth_url, "CLOUD_A_AUTH_URL"),
                (&settings.cloud_a_token_url, "CLOUD_A_TOKEN_URL"),
                (&settings.cloud_a_redirect_url, "CLOUD_A_REDIRECT_URL"),
                (&settings.cloud_a_api_base, "CLOUD_A_API_BASE"),
            ],
            timeout,
        )?
        .map(CloudAClient::new)
        .transpose()?;
        // cloud_f speaks the same authorization-code flow as cloud_a, with its own scopes.
        let cloud_f = if settings.cloud_f_enabled {
            oauth_config(
                &settings.cloud_f_client_id,
                &settings.cloud_f_client_secret,
                [
                    (&settings.cloud_f_auth_url, "CLOUD_F_AUTH_URL"),
                    (&settings.cloud_f_token_url, "CLOUD_F_TOKEN_URL"),
                    (&settings.cloud_f_redirect_url, "CLOUD_F_REDIRECT_URL"),
                    (&settings.cloud_f_api_base, "CLOUD_F_API_BASE"),
                ],
                timeout,
            )?
            .map(|mut cloud_f| {
                cloud_f.scopes = settings
                    .cloud_f_scopes
                    .iter()
                    .map(|scope| scope.trim().to_owned())
                    .filter(|scope| !scope.is_empty())
                    .collect();
                CloudAClient::new(cloud_f)
            })
            .transpose()?
        } else {
            None
        };
        let sts = match (&settings.cloud_b_access_key_id, &settings.cloud_b_secret_access_key) {
            (Some(id), Some(secret)) if !id.is_empty() && !secret.is_empty() => Some(
                StsClient::new(ServiceCredentials::new(
                    id.clone(),
                    secret.expose(),
                    settings
                        .cloud_b_session_token
                        .as_ref()
                        .map(|token| token.expose().into()),
                ))
                .with_endpoint(url(&settings.cloud_b_sts_endpoint, "CLOUD_B_STS_ENDPOINT")?)
                .with_region(settings.cloud_b_region.clone())
                .with_timeout(timeout),
            ),
            _ => None,
        };
        let external_id_key = match &settings.cloud_b_external_id_key {
            Some(key) if !key.is_empty() => key.expose().as_bytes().to_vec(),
            _ => derive(&master, "vigil cloud_b external id"),
        };
        Ok(Self {
            environment: config.environment.clone(),
            secrets: Secrets::new(store, cache),
            nonces: PgNonceStore::new(db.clone()),
            state_signer: StateSigner::new(vigil_secrets::Secret::new(derive(&master, "vigil oauth state")))?,
            cloud_a,
            sts,
            external_id_key: vigil_secrets::Secret::new(external_id_key),
            azure: AzureClient::new()
                .with_authority_base(url(&settings.cloud_c_login_base, "CLOUD_C_LOGIN_BASE")?)
                .with_management_base(url(&settings.cloud_c_management_base, "CLOUD_C_MANAGEMENT_BASE")?)
                .with_timeout(timeout),
            scaleway: ScalewayClient::new()
                .with_base(url(&settings.cloud_d_api_base, "CLOUD_D_API_BASE")?)
                .with_timeout(timeout),
            cloud_e: CloudEClient::new(CloudEConfig {
                api_base_url: url(&settings.cloud_e_api_base, "CLOUD_E_API_BASE")?,
                timeout,
            })?,
            cloud_f_enabled: settings.cloud_f_enabled,
            cloud_f,
            cloud_f_state_signer: StateSigner::new(vigil_secrets::Secret::new(derive(
                &master,
                "vigil cloud_f oauth state",
            )))?,
        })
    }

    /// The one external id `user_id`'s cloud_b roles must require.
    pub fn external_id(&self, user_id: &str) -> String {
        external_id_for(self.external_id_key.expose(), user_id)
    }

    /// Whether `provider` is offered at all (cloud_f only behind its flag).
    pub fn offers(&self, provider: Provider) -> bool {
        provider != Provider::CloudF || self.cloud_f_enabled
    }

    /// Stores `credentials` (a JSON object) in the secrets store and the reference, with the
    /// non-secret `fields`, in the user's token record.
    pub async fn save(
        &self,
        db: &PgPool,
        user_id: &str,
        provider: Provider,
        credentials: &Value,
        fields: &TokenFields,
    ) -> Result<SecretRef, AppError> {
        let name = secret_name(&self.environment, user_id, provider.as_str());
        let reference = self.secrets.save(&name, credentials).await.map_err(store_error)?;
        tokens::upsert(db, user_id, provider.as_str(), &reference.to_string(), fields).await?;
        Ok(reference)
    }

    /// Replaces the stored credentials behind an existing record (after a refresh).
    pub async fn resave(&self, user_id: &str, provider: Provider, credentials: &Value) -> Result<(), AppError> {
        let name = secret_name(&self.environment, user_id, provider.as_str());
        self.secrets.save(&name, credentials).await.map_err(store_error)?;
        Ok(())
    }

    /// The user's token record for `provider` and the credentials behind it; `None` when the
    /// user has none (or the secret is gone from the store).
    pub async fn load(
        &self,
        db: &PgPool,
        user_id: &str,
        provider: Provider,
    ) -> Result<Option<(TokenRecord, Value)>, AppError> {
        match tokens::find(db, user_id, provider.as_str()).await? {
            Some(record) => self.credentials_of(db, record).await,
            None => Ok(None),
        }
    }

    /// The credentials `record` refers to, from the secrets store.
    async fn credentials_of(&self, db: &PgPool, record: TokenRecord) -> Result<Option<(TokenRecord, Value)>, AppError> {
        let Some(reference) = record.secret_ref.as_deref() else {
            return Ok(None);
        };
        let reference: SecretRef = reference
            .parse()
            .map_err(|error| AppError::Internal(anyhow::anyhow!("stored secret reference: {error}")))?;
        let credentials = self.secrets.load(&reference).await.map_err(store_error)?;
        tokens::touch(db, &record.user_id, &record.provider).await?;
        Ok(credentials.map(|credentials| (record, credentials)))
    }

    /// [`Self::load`], only while the credentials serve a connected account (see
    /// [`credentials_account`]).
    pub async fn load_connected(
        &self,
        db: &PgPool,
        user_id: &str,
        provider: Provider,
    ) -> Result<Option<(TokenRecord, Value)>, AppError> {
        let Some(record) = tokens::find(db, user_id, provider.as_str()).await? else {
            return Ok(None);
        };
        if credentials_account(db, &record).await?.is_none() {
            return Ok(None);
        }
        self.credentials_of(db, record).await
    }

    /// Deletes the user's credentials for `provider` from the store, the cache and the token
    /// records. Returns whether there were any.
    pub async fn forget(&self, db: &PgPool, user_id: &str, provider: Provider) -> Result<bool, AppError> {
        let Some(record) = tokens::find(db, user_id, provider.as_str()).await? else {
            return Ok(false);
        };
        if let Some(reference) = record.secret_ref.as_deref().and_then(|r| r.parse::<SecretRef>().ok()) {
            self.secrets.remove(&reference).await.map_err(store_error)?;
        }
        tokens::delete(db, user_id, provider.as_str()).await?;
        Ok(true)
    }
}

/// A provider's authorization-code client settings, or `None` until the service's client id and
/// secret are set. `urls`: authorization, token, redirect and API base, each with its variable.
fn oauth_config(
    client_id: &Option<String>,
    client_secret: &Option<crate::config::Secret>,
    urls: [(&str, &str); 4],
    timeout: Duration,
) -> anyhow::Result<Option<CloudAConfig>> {
    let (Some(id), Some(secret)) = (client_id, client_secret) else {
        return Ok(None);
    };
    if id.is_empty() || secret.is_empty() {
        return Ok(None);
    }
    let [auth, token, redirect, api_base] = urls.map(|(value, name)| url(value, name));
    let mut config = CloudAConfig::new(
        id.clone(),
        vigil_secrets::Secret::new(secret.expose().to_owned()),
        auth?,
        token?,
        redirect?,
        api_base?,
    );
    config.timeout = timeout;
    Ok(Some(config))
}

fn url(value: &str, name: &str) -> anyhow::Result<Url> {
    Url::parse(value).with_context(|| format!("{name} is not a URL"))
}

/// The 32-byte master key: `SECRETS_KEY`, or the key file in the data directory (created with
/// mode 0600 on first start).
fn master_key(config: &Config) -> anyhow::Result<vigil_secrets::Secret<Vec<u8>>> {
    let encoded = match &config.connections.secrets_key {
        Some(key) if !key.is_empty() => key.expose().to_owned(),
        _ => {
            let path = config.data_dir.join(KEY_FILE);
            std::fs::create_dir_all(&config.data_dir)
                .with_context(|| format!("creating the data directory {}", config.data_dir.display()))?;
            EncryptionKey::load_or_create(&path)?;
            read_key_file(&path)?
        }
    };
    let bytes = STANDARD
        .decode(encoded.trim())
        .ok()
        .filter(|bytes| bytes.len() == 32)
        .context("the secrets master key is not the base64 encoding of 32 bytes")?;
    Ok(vigil_secrets::Secret::new(bytes))
}

fn read_key_file(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the key file {}", path.display()))
}

/// A key for one purpose, derived from the master key.
fn derive(master: &vigil_secrets::Secret<Vec<u8>>, purpose: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(master.expose()).expect("HMAC accepts keys of any length");
    mac.update(purpose.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Secrets-store failures: the store being away or refusing the service is a 503; the rest is
/// internal. No variant carries a credential.
pub fn store_error(error: StoreError) -> AppError {
    match error {
        StoreError::Http(_) | StoreError::Unauthorized(_) | StoreError::Backend { .. } | StoreError::Cache(_) => {
            AppError::Refused {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "secrets_store_unavailable",
                message: format!("the secrets store cannot be used right now: {error}"),
            }
        }
        other => AppError::unexpected(other),
    }
}

/// 502: the provider did not answer usefully; the user may retry.
pub fn provider_unavailable(provider: Provider, error: impl std::fmt::Display) -> AppError {
    AppError::Refused {
        status: StatusCode::BAD_GATEWAY,
        code: "provider_unavailable",
        message: format!("{provider} could not be reached or answered unexpectedly: {error}"),
    }
}

/// 503: the service has no configuration for this provider.
pub fn not_configured(provider: Provider) -> AppError {
    AppError::Refused {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "provider_not_configured",
        message: format!("{provider} is not configured on this service"),
    }
}

/// Checks a body's `userId` (required by the spec): blank is a 400 like a missing one; someone
/// other than the caller is a 403.
pub fn check_user_id(claimed: &str, user_id: &str) -> Result<(), AppError> {
    if crate::error::required(claimed, "userId")? != user_id {
        return Err(AppError::Forbidden(
            "userId does not match the authenticated user".into(),
        ));
    }
    Ok(())
}

/// The failure of an endpoint whose spec'd answer is `status` (`success` or `error`) and
/// `message`: the service's `{error, code}` body (same status, headers and logging) plus
/// `status: "error"` and `message`, so a client reading either shape understands it.
#[derive(Debug)]
pub struct StatusError(pub AppError);

impl From<AppError> for StatusError {
    fn from(error: AppError) -> Self {
        Self(error)
    }
}

/// The body of a [`StatusError`].
#[derive(Serialize, utoipa::ToSchema)]
pub struct StatusErrorBody {
    /// Always `error`.
    pub status: &'static str,
    /// What went wrong, for a person (the same text as `error`).
    pub message: String,
    pub error: String,
    /// Stable machine-readable code.
    pub code: String,
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let message = self.0.public_message();
        let body = StatusErrorBody {
            status: "error",
            error: message.clone(),
            message,
            code: self.0.code().to_owned(),
        };
        let (mut parts, _) = self.0.into_response().into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        let json = serde_json::to_vec(&body).expect("the error body serialises");
        Response::from_parts(parts, Body::from(json))
    }
}

impl From<AggregateError<ConnectionError>> for AppError {
    fn from(error: AggregateError<ConnectionError>) -> Self {
        match error {
            AggregateError::UserError(ConnectionError::NotFound) => Self::NotFound("connection not found".into()),
            AggregateError::UserError(ConnectionError::Invalid(message)) => Self::invalid(message),
            AggregateError::AggregateConflict => {
                Self::Conflict("the connection was changed concurrently too many times; retry".into())
            }
            other => Self::Internal(anyhow::anyhow!("event store: {other}")),
        }
    }
}

/// Stores `user_id`'s credentials for `provider` and records its `account_id` as connected with them.
#[allow(clippy::too_many_arguments)]
pub async fn save_and_connect(
    state: &ConnectionHandles,
    user_id: &str,
    provider: Provider,
    credentials: &Value,
    fields: &TokenFields,
    account_id: &str,
    account_name: Option<String>,
) -> Result<(), AppError> {
    // Checked before the credentials are stored, so that a refused connection leaves none behind.
    fields.check().map_err(AppError::invalid)?;
    check_account_id(account_id)
        .and_then(|()| checked_name(account_name.clone()).map(drop))
        .map_err(|error| AppError::from(AggregateError::UserError(error)))?;
    let replaced = tokens::find(&state.db, user_id, provider.as_str()).await?;
    let secret_ref = state
        .connections
        .save(&state.db, user_id, provider, credentials, fields)
        .await?;
    let command = ConnectionCommand::Connect {
        user_id: user_id.to_owned(),
        provider,
        account_id: account_id.to_owned(),
        account_name,
        secret_ref: secret_ref.to_string(),
        at: Utc::now(),
    };
    let id = connection_id(user_id, provider, account_id);
    execute(&state.events.connections, &id, command, Actor::User(user_id)).await?;
    // One credential per user and provider: the provider's other accounts lose theirs, unless
    // the same cloud_c principal reaches them too.
    let same_principal = provider == Provider::CloudC
        && replaced.is_some_and(|old| old.tenant_id == fields.tenant_id && old.client_id == fields.client_id);
    if !same_principal {
        for row in read::of_provider(&state.db, user_id, provider.as_str()).await? {
            if row.account_id == account_id || row.status == ConnectionStatus::NotConnected.as_str() {
                continue;
            }
            let command = ConnectionCommand::Disconnect {
                user_id: user_id.to_owned(),
                credentials_kept: false,
                at: Utc::now(),
            };
            execute(&state.events.connections, &row.id, command, Actor::User(user_id)).await?;
        }
    }
    Ok(())
}

/// Marks every live connection of `provider` as `error` (the credentials stopped working).
pub async fn mark_failed(
    state: &ConnectionHandles,
    user_id: &str,
    provider: Provider,
    reason: &str,
) -> Result<(), AppError> {
    for row in read::of_provider(&state.db, user_id, provider.as_str()).await? {
        let command = ConnectionCommand::Fail {
            user_id: user_id.to_owned(),
            reason: reason.to_owned(),
            at: Utc::now(),
        };
        execute(
            &state.events.connections,
            &row.id,
            command,
            Actor::System("connections"),
        )
        .await?;
    }
    Ok(())
}

/// The provider-specific disconnect: deletes the credentials (store, cache, token record) and
/// marks every connection of the provider `not_connected`.
pub async fn disconnect_provider(
    state: &ConnectionHandles,
    user_id: &str,
    provider: Provider,
) -> Result<bool, AppError> {
    let had_credentials = state.connections.forget(&state.db, user_id, provider).await?;
    let rows = read::of_provider(&state.db, user_id, provider.as_str()).await?;
    for row in &rows {
        let command = ConnectionCommand::Disconnect {
            user_id: user_id.to_owned(),
            credentials_kept: false,
            at: Utc::now(),
        };
        execute(&state.events.connections, &row.id, command, Actor::User(user_id)).await?;
    }
    Ok(had_credentials || !rows.is_empty())
}

/// The account `record`'s credentials act for, while it is `connected`: the one they were stored
/// for or, where a provider's accounts share one credential (cloud_a projects, cloud_f), another
/// connected one. `None` while there is none: credentials kept after a DELETE (for a reconnect),
/// or behind a connection that failed or is still being set up, serve neither the agent nor the
/// provider endpoints, which answer as their status does (not connected).
pub async fn credentials_account(db: &PgPool, record: &TokenRecord) -> Result<Option<String>, AppError> {
    let Ok(provider) = record.provider.parse::<Provider>() else {
        return Ok(None);
    };
    let connected = connected_accounts(db, &record.user_id, provider).await?;
    if let Some(account) = record.account_id().filter(|id| connected.iter().any(|c| c == id)) {
        return Ok(Some(account.to_owned()));
    }
    let shared = matches!(provider, Provider::CloudA | Provider::CloudF);
    Ok(connected.into_iter().next().filter(|_| shared))
}

/// Whether the user's token record of a provider (if any) has credentials in use (see
/// [`credentials_account`]).
pub async fn has_connected_credentials(db: &PgPool, record: Option<&TokenRecord>) -> Result<bool, AppError> {
    match record {
        Some(record) => Ok(credentials_account(db, record).await?.is_some()),
        None => Ok(false),
    }
}

/// Whether any of the user's connections to `provider` is in `error` (its credentials stopped working).
pub async fn has_failed_connection(db: &PgPool, user_id: &str, provider: Provider) -> Result<bool, AppError> {
    let rows = read::of_provider(db, user_id, provider.as_str()).await?;
    Ok(rows.iter().any(|row| row.status == ConnectionStatus::Error.as_str()))
}

/// The account ids of the user's `connected` connections to `provider`.
pub async fn connected_accounts(db: &PgPool, user_id: &str, provider: Provider) -> Result<Vec<String>, AppError> {
    let rows = read::of_provider(db, user_id, provider.as_str()).await?;
    Ok(rows
        .into_iter()
        .filter(|row| row.status == ConnectionStatus::Connected.as_str())
        .map(|row| row.account_id)
        .collect())
}
