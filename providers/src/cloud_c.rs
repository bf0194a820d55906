//! cloud_c: Azure-like service principal (tenant id, client id, client secret).
//!
//! A client-credentials token for the management API ([`AzureClient::token`]) proves the secret; listing
//! subscriptions ([`AzureClient::list_subscriptions`]) proves the principal can see something, and
//! [`choose_subscription`] picks the one to connect.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use reqwest::Url;
use serde::Deserialize;

use crate::transport::{self, Unavailable};
use crate::Secret;

const MANAGEMENT_SCOPE: &str = "https://management.azure.com/.default";
const SUBSCRIPTIONS_API_VERSION: &str = "2020-01-01";
/// Pages followed at most: far beyond any real tenant, it stops a `nextLink` that loops.
const MAX_PAGES: usize = 100;
/// AADSTS90002 (tenant not found) and AADSTS900023 (tenant id neither a GUID nor a domain).
const UNKNOWN_TENANT_CODES: [u64; 2] = [90002, 900023];

/// A bearer token for the management API.
#[derive(Clone, Debug)]
pub struct AccessToken {
    pub token: Secret,
    pub expires_at: DateTime<Utc>,
}

impl AccessToken {
    /// See [`crate::needs_refresh`].
    pub fn needs_refresh(&self, now: DateTime<Utc>) -> bool {
        crate::needs_refresh(self.expires_at, now)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub subscription_id: String,
    pub display_name: String,
    /// `Enabled`, `Warned`, `PastDue`, `Disabled` or `Deleted`.
    pub state: String,
}

impl Subscription {
    pub fn is_enabled(&self) -> bool {
        self.state == "Enabled"
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// The client id or secret was refused (`invalid_client`, `unauthorized_client`), or the management
    /// API refused the token. The caller answers 4xx.
    #[error("invalid credentials: {code}: {description}")]
    InvalidCredentials { code: String, description: String },
    /// The tenant does not exist or is not a GUID or domain name. The caller answers 4xx.
    #[error("invalid tenant: {0}")]
    InvalidTenant(String),
    /// The principal is authenticated but may not do this. The caller answers 4xx.
    #[error("access denied: {0}")]
    AccessDenied(String),
    #[error("subscription {0} is not visible to this service principal")]
    SubscriptionNotFound(String),
    /// The principal sees no enabled subscription: it has no role assignment on one.
    #[error("no enabled subscription is visible to this service principal")]
    NoEnabledSubscription,
    /// Any other error the provider answered.
    #[error("the provider rejected the request: HTTP {status}: {code}: {description}")]
    Rejected {
        status: u16,
        code: String,
        description: String,
    },
    #[error("provider unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    #[error("malformed provider response: {0}")]
    Malformed(String),
}

/// Client of the identity platform's token endpoint and of the management API.
#[derive(Clone, Debug)]
pub struct AzureClient {
    http: reqwest::Client,
    authority_base: Url,
    management_base: Url,
    timeout: Duration,
}

impl Default for AzureClient {
    fn default() -> Self {
        Self::new()
    }
}

impl AzureClient {
    pub const DEFAULT_AUTHORITY_BASE: &'static str = "https://login.microsoftonline.com";
    pub const DEFAULT_MANAGEMENT_BASE: &'static str = "https://management.azure.com";

    pub fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
            authority_base: Url::parse(Self::DEFAULT_AUTHORITY_BASE).expect("default authority is a valid URL"),
            management_base: Url::parse(Self::DEFAULT_MANAGEMENT_BASE).expect("default management is a valid URL"),
            timeout: transport::DEFAULT_TIMEOUT,
        }
    }

    pub fn with_authority_base(mut self, base: Url) -> Self {
        self.authority_base = base;
        self
    }

    pub fn with_management_base(mut self, base: Url) -> Self {
        self.management_base = base;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A management API token for the service principal, by the client-credentials grant.
    pub async fn token(
        &self,
        tenant_id: &str,
        client_id: &str,
        client_secret: &Secret,
    ) -> Result<AccessToken, AzureError> {
        check_tenant_id(tenant_id)?;
        let url = transport::endpoint(&self.authority_base, &[tenant_id, "oauth2", "v2.0", "token"]);
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_secret", client_secret.expose()),
            ("scope", MANAGEMENT_SCOPE),
        ];
        let requested_at = Utc::now();
        let reply = transport::send(self.http.post(url).form(&form), self.timeout).await?;
        if !reply.status.is_success() {
            return Err(token_error(reply.status.as_u16(), &reply.body));
        }
        // The parser's message is left out on purpose: on this document it could quote the token.
        let answer: TokenAnswer = serde_json::from_slice(&reply.body)
            .map_err(|_| AzureError::Malformed("token answer is not the expected JSON".into()))?;
        let lifetime = TimeDelta::try_seconds(answer.expires_in)
            .ok_or_else(|| AzureError::Malformed(format!("token lifetime of {}s", answer.expires_in)))?;
        Ok(AccessToken {
            token: answer.access_token.into(),
            expires_at: requested_at + lifetime,
        })
    }

    /// Every subscription the token's principal can see, following `nextLink` pages.
    pub async fn list_subscriptions(&self, token: &AccessToken) -> Result<Vec<Subscription>, AzureError> {
        let mut url = transport::endpoint(&self.management_base, &["subscriptions"]);
        url.query_pairs_mut()
            .append_pair("api-version", SUBSCRIPTIONS_API_VERSION);
        let mut subscriptions = Vec::new();
        for _ in 0..MAX_PAGES {
            let request = self.http.get(url).bearer_auth(token.token.expose());
            let reply = transport::send(request, self.timeout).await?;
            if !reply.status.is_success() {
                return Err(management_error(reply.status.as_u16(), &reply.body));
            }
            let page: SubscriptionPage = serde_json::from_slice(&reply.body)
                .map_err(|e| AzureError::Malformed(format!("subscription list: {e}")))?;
            subscriptions.extend(page.value.into_iter().map(|raw| Subscription {
                subscription_id: raw.subscription_id,
                display_name: raw.display_name,
                state: raw.state,
            }));
            let Some(next) = page.next_link else {
                return Ok(subscriptions);
            };
            url = Url::parse(&next).map_err(|e| AzureError::Malformed(format!("nextLink: {e}")))?;
            // The bearer token follows the link: never to anywhere but the management API.
            if url.origin() != self.management_base.origin() {
                return Err(AzureError::Malformed("nextLink leaves the management API".into()));
            }
        }
        Err(AzureError::Malformed(format!(
            "subscription list goes on past {MAX_PAGES} pages"
        )))
    }
}

/// The subscription to connect: `requested_id` (compared without case) if given, which must be among
/// `subscriptions`, else the first enabled one.
pub fn choose_subscription(
    subscriptions: Vec<Subscription>,
    requested_id: Option<&str>,
) -> Result<Subscription, AzureError> {
    match requested_id {
        Some(id) => subscriptions
            .into_iter()
            .find(|s| s.subscription_id.eq_ignore_ascii_case(id))
            .ok_or_else(|| AzureError::SubscriptionNotFound(id.to_owned())),
        None => subscriptions
            .into_iter()
            .find(Subscription::is_enabled)
            .ok_or(AzureError::NoEnabledSubscription),
    }
}

/// The tenant goes into the token URL's path, so only GUIDs and domain names get there.
fn check_tenant_id(tenant_id: &str) -> Result<(), AzureError> {
    let well_formed = !tenant_id.is_empty()
        && tenant_id.len() <= 253
        && tenant_id
            .split('.')
            .all(|label| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if well_formed {
        Ok(())
    } else {
        Err(AzureError::InvalidTenant(
            "a tenant id is a GUID or a domain name".into(),
        ))
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: i64,
}

#[derive(Deserialize)]
struct TokenErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: String,
    #[serde(default)]
    error_codes: Vec<u64>,
}

fn token_error(status: u16, body: &[u8]) -> AzureError {
    let Ok(TokenErrorAnswer {
        error,
        error_description,
        error_codes,
    }) = serde_json::from_slice(body)
    else {
        return AzureError::Malformed(format!("HTTP {status} without an OAuth error document"));
    };
    // The description ends with trace and correlation ids on further lines; the first line says it all.
    let description = error_description.lines().next().unwrap_or_default().to_owned();
    match error.as_str() {
        "invalid_client" | "unauthorized_client" => AzureError::InvalidCredentials {
            code: error,
            description,
        },
        "invalid_request" if error_codes.iter().any(|code| UNKNOWN_TENANT_CODES.contains(code)) => {
            AzureError::InvalidTenant(description)
        }
        _ => AzureError::Rejected {
            status,
            code: error,
            description,
        },
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionPage {
    value: Vec<RawSubscription>,
    next_link: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSubscription {
    subscription_id: String,
    display_name: String,
    state: String,
}

#[derive(Deserialize)]
struct ManagementErrorAnswer {
    error: ManagementErrorDetail,
}

#[derive(Deserialize)]
struct ManagementErrorDetail {
    code: String,
    #[serde(default)]
    message: String,
}

fn management_error(status: u16, body: &[u8]) -> AzureError {
    let Ok(ManagementErrorAnswer {
        error: ManagementErrorDetail { code, message },
    }) = serde_json::from_slice(body)
    else {
        return AzureError::Malformed(format!("HTTP {status} without a management error document"));
    };
    match status {
        401 => AzureError::InvalidCredentials {
            code,
            description: message,
        },
        403 => AzureError::AccessDenied(message),
        _ => AzureError::Rejected {
            status,
            code,
            description: message,
        },
    }
}
