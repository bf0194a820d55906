//! Token records (spec: Token record): per user and provider, the reference to the credentials
//! in the secrets store and the details of the connection that are not secret.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{types::Json, PgPool};
use vigil_aggregates::connection::Provider;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRecord {
    pub id: i32,
    pub user_id: String,
    pub provider: String,
    pub token_data: Option<Json<Value>>,
    pub secret_ref: Option<String>,
    pub tenant_id: Option<String>,
    pub client_id: Option<String>,
    pub subscription_name: Option<String>,
    pub subscription_id: Option<String>,
    pub email: Option<String>,
    pub timestamp: DateTime<Utc>,
    pub last_activity: DateTime<Utc>,
    pub is_active: bool,
}

impl TokenRecord {
    /// A string field of `token_data`.
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.token_data.as_ref()?.0.get(key)?.as_str()
    }

    /// The account the credentials were stored for, as its connection names it: cloud_a the
    /// project the setup configured (none before it ran), cloud_b the role's account, cloud_c the
    /// subscription, cloud_d the organization, cloud_e the client, cloud_f the e-mail.
    pub fn account_id(&self) -> Option<&str> {
        match self.provider.parse::<Provider>().ok()? {
            Provider::CloudA => self.data_str("project_id"),
            Provider::CloudB => self.data_str("account_id"),
            Provider::CloudC => self.subscription_id.as_deref(),
            Provider::CloudD => self.data_str("organization_id"),
            Provider::CloudE => self.client_id.as_deref(),
            Provider::CloudF => self.email.as_deref(),
        }
    }

    pub fn data(&self) -> Value {
        self.token_data
            .as_ref()
            .map(|data| data.0.clone())
            .unwrap_or_else(|| Value::Object(Default::default()))
    }
}

/// The columns of a record besides its owner, provider and reference. Never a secret.
#[derive(Debug, Clone, Default)]
pub struct TokenFields {
    pub token_data: Option<Value>,
    pub tenant_id: Option<String>,
    pub client_id: Option<String>,
    pub subscription_name: Option<String>,
    pub subscription_id: Option<String>,
    pub email: Option<String>,
}

/// The longest value a token record's text columns hold (`varchar(255)`).
const MAX_FIELD_CHARS: usize = 255;

impl TokenFields {
    /// Checks that every value fits its column, before anything is stored: an over-long value is
    /// the caller's mistake (400), not a failed write.
    pub fn check(&self) -> Result<(), String> {
        let fields = [
            ("tenantId", &self.tenant_id),
            ("clientId", &self.client_id),
            ("subscriptionName", &self.subscription_name),
            ("subscriptionId", &self.subscription_id),
            ("email", &self.email),
        ];
        match fields
            .iter()
            .find(|(_, value)| value.as_ref().is_some_and(|v| v.chars().count() > MAX_FIELD_CHARS))
        {
            Some((name, _)) => Err(format!("{name} must be at most {MAX_FIELD_CHARS} characters")),
            None => Ok(()),
        }
    }
}

const COLUMNS: &str = "id, user_id, provider, token_data, secret_ref, tenant_id, client_id, subscription_name, \
                       subscription_id, email, \"timestamp\", last_activity, is_active";

/// Inserts or replaces the user's record for `provider`.
pub async fn upsert(
    db: &PgPool,
    user_id: &str,
    provider: &str,
    secret_ref: &str,
    fields: &TokenFields,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO user_tokens (user_id, provider, secret_ref, token_data, tenant_id, client_id,
                                  subscription_name, subscription_id, email)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT ON CONSTRAINT user_tokens_user_provider DO UPDATE
         SET secret_ref = EXCLUDED.secret_ref, token_data = EXCLUDED.token_data, tenant_id = EXCLUDED.tenant_id,
             client_id = EXCLUDED.client_id, subscription_name = EXCLUDED.subscription_name,
             subscription_id = EXCLUDED.subscription_id, email = EXCLUDED.email,
             \"timestamp\" = now(), last_activity = now(), is_active = true",
    )
    .bind(user_id)
    .bind(provider)
    .bind(secret_ref)
    .bind(fields.token_data.as_ref().map(Json))
    .bind(&fields.tenant_id)
    .bind(&fields.client_id)
    .bind(&fields.subscription_name)
    .bind(&fields.subscription_id)
    .bind(&fields.email)
    .execute(db)
    .await?;
    Ok(())
}

pub async fn find(db: &PgPool, user_id: &str, provider: &str) -> sqlx::Result<Option<TokenRecord>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM user_tokens WHERE user_id = $1 AND provider = $2 AND is_active"
    ))
    .bind(user_id)
    .bind(provider)
    .fetch_optional(db)
    .await
}

/// Adds the keys of `patch` to the record's `token_data`.
pub async fn merge_token_data(db: &PgPool, user_id: &str, provider: &str, patch: &Value) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE user_tokens SET token_data = coalesce(token_data, '{}'::jsonb) || $3, last_activity = now()
         WHERE user_id = $1 AND provider = $2",
    )
    .bind(user_id)
    .bind(provider)
    .bind(Json(patch))
    .execute(db)
    .await?;
    Ok(())
}

pub async fn touch(db: &PgPool, user_id: &str, provider: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE user_tokens SET last_activity = now() WHERE user_id = $1 AND provider = $2")
        .bind(user_id)
        .bind(provider)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn delete(db: &PgPool, user_id: &str, provider: &str) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM user_tokens WHERE user_id = $1 AND provider = $2")
        .bind(user_id)
        .bind(provider)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}
