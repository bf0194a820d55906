//! cloud_a: a cloud platform connected with the OAuth 2.0 authorization-code flow.
//!
//! The user's e-mail comes from the userinfo endpoint (`GET {api}/oauth2/v3/userinfo`), asked
//! with the new access token: unlike an unverified id_token it needs no signature checking, and
//! the answer comes from the provider over TLS.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use oauth2::basic::{BasicClient, BasicErrorResponseType, BasicRequestTokenError};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet, HttpClientError,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use reqwest::StatusCode;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{json, Value};
use url::Url;

use crate::Secret;

/// The spec's full platform access, compute and resource management (projects), and the user's
/// e-mail (for the connection's `email`).
pub const DEFAULT_SCOPES: &[&str] = &[
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/compute",
    "https://www.googleapis.com/auth/cloudplatformprojects",
    "openid",
    "email",
];
/// Access tokens expiring within this window are refreshed before use.
pub const REFRESH_WINDOW: TimeDelta = TimeDelta::minutes(5);
/// Assumed when the token endpoint does not say how long an access token lives.
const DEFAULT_ACCESS_TOKEN_LIFETIME: TimeDelta = TimeDelta::hours(1);
/// A bound on project-list pages, against a server that keeps handing out page tokens.
const MAX_PROJECT_PAGES: usize = 100;

/// OAuth failures (spec: Errors §4) and API failures.
#[derive(Debug, thiserror::Error)]
pub enum CloudAError {
    #[error("the authorization code is invalid or expired; restart the sign-in")]
    InvalidGrant,
    #[error("access was denied on the consent screen; the user may try again")]
    AccessDenied,
    #[error("cloud_a rejected the OAuth client; check the service's OAuth client id and secret")]
    InvalidClient,
    #[error("the refresh token has expired or was revoked; the user must sign in again")]
    RefreshExpired,
    #[error("could not reach cloud_a; retry: {0}")]
    Network(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cloud_a returned no refresh token")]
    NoRefreshToken,
    #[error("cloud_a OAuth error `{0}`")]
    OAuth(String),
    #[error("cloud_a rejected the access token")]
    Unauthorized,
    #[error("cloud_a API answered HTTP {0}")]
    Api(u16),
    #[error("unexpected response from the cloud_a {0}")]
    UnexpectedResponse(&'static str),
    #[error("invalid cloud_a configuration: {0}")]
    Config(String),
}

impl CloudAError {
    /// The error for a callback that came back with `error=<code>` instead of a code.
    pub fn from_callback(error: &str) -> Self {
        match error {
            "access_denied" => Self::AccessDenied,
            // The query is the visitor's to choose: keep only what an error code is made of.
            other => Self::OAuth(
                other
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .take(64)
                    .collect(),
            ),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CloudAConfig {
    pub client_id: String,
    pub client_secret: Secret<String>,
    pub auth_url: Url,
    pub token_url: Url,
    pub redirect_url: Url,
    /// Base of the userinfo and projects endpoints.
    pub api_base_url: Url,
    pub scopes: Vec<String>,
    pub timeout: Duration,
}

impl CloudAConfig {
    /// With [`DEFAULT_SCOPES`] and a 15-second timeout.
    pub fn new(
        client_id: impl Into<String>,
        client_secret: Secret<String>,
        auth_url: Url,
        token_url: Url,
        redirect_url: Url,
        api_base_url: Url,
    ) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret,
            auth_url,
            token_url,
            redirect_url,
            api_base_url,
            scopes: DEFAULT_SCOPES.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_secs(15),
        }
    }
}

/// What is stored for a cloud_a connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CloudATokens {
    pub access_token: Secret<String>,
    pub refresh_token: Secret<String>,
    pub expires_at: DateTime<Utc>,
    pub email: Option<String>,
}

/// The result of a refresh. Providers may rotate the refresh token too.
#[derive(Debug, Clone)]
pub struct RefreshedAccess {
    pub access_token: Secret<String>,
    pub expires_at: DateTime<Utc>,
    pub refresh_token: Option<Secret<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The access token is good for more than [`REFRESH_WINDOW`].
    Current,
    /// The tokens were refreshed and should be saved again.
    Refreshed,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub project_id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub lifecycle_state: Option<String>,
}

type OAuthClient = BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

#[derive(Debug, Clone)]
pub struct CloudAClient {
    oauth: OAuthClient,
    http: reqwest::Client,
    api_base_url: Url,
    scopes: Vec<String>,
}

#[derive(Deserialize)]
struct ServiceAccount {
    email: String,
}

#[derive(Deserialize)]
struct UserInfo {
    email: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProjectPage {
    #[serde(default)]
    projects: Vec<Project>,
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BillingInfo {
    #[serde(default)]
    billing_enabled: bool,
}

impl CloudAClient {
    pub fn new(config: CloudAConfig) -> Result<Self, CloudAError> {
        if config.api_base_url.cannot_be_a_base() {
            return Err(CloudAError::Config("the API base URL cannot have paths".into()));
        }
        let oauth = BasicClient::new(ClientId::new(config.client_id))
            .set_client_secret(ClientSecret::new(config.client_secret.into_inner()))
            .set_auth_uri(AuthUrl::from_url(config.auth_url))
            .set_token_uri(TokenUrl::from_url(config.token_url))
            .set_redirect_uri(RedirectUrl::from_url(config.redirect_url));
        let http = reqwest::Client::builder()
            // Following redirects from the token endpoint would open the door to SSRF.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .build()
            .map_err(|e| CloudAError::Config(e.to_string()))?;
        Ok(Self {
            oauth,
            http,
            api_base_url: config.api_base_url,
            scopes: config.scopes,
        })
    }

    /// The consent-screen URL carrying `state` (see [`crate::StateSigner`]). It asks for offline
    /// access with a fresh consent, so the code always yields a refresh token.
    pub fn login_url(&self, state: &str) -> Url {
        let (url, _) = self
            .oauth
            .authorize_url(|| CsrfToken::new(state.to_owned()))
            .add_scopes(self.scopes.iter().cloned().map(Scope::new))
            .add_extra_param("access_type", "offline")
            .add_extra_param("prompt", "consent")
            .url();
        url
    }

    /// Exchanges the callback's code for tokens and looks up the user's e-mail.
    pub async fn exchange_code(&self, code: &str) -> Result<CloudATokens, CloudAError> {
        let response = self
            .oauth
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| token_error(e, Grant::AuthorizationCode))?;
        let refresh_token = response.refresh_token().ok_or(CloudAError::NoRefreshToken)?;
        let access_token = Secret::new(response.access_token().secret().clone());
        let email = self.user_email(&access_token).await?;
        Ok(CloudATokens {
            access_token,
            refresh_token: Secret::new(refresh_token.secret().clone()),
            expires_at: expires_at(response.expires_in()),
            email,
        })
    }

    pub async fn refresh(&self, refresh_token: &Secret<String>) -> Result<RefreshedAccess, CloudAError> {
        let response = self
            .oauth
            .exchange_refresh_token(&RefreshToken::new(refresh_token.expose().clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| token_error(e, Grant::RefreshToken))?;
        Ok(RefreshedAccess {
            access_token: Secret::new(response.access_token().secret().clone()),
            expires_at: expires_at(response.expires_in()),
            refresh_token: response.refresh_token().map(|t| Secret::new(t.secret().clone())),
        })
    }

    /// Refreshes `tokens` in place when the access token expires within [`REFRESH_WINDOW`] of `now`.
    pub async fn fresh_access_token(
        &self,
        tokens: &mut CloudATokens,
        now: DateTime<Utc>,
    ) -> Result<Freshness, CloudAError> {
        if tokens.expires_at - now > REFRESH_WINDOW {
            return Ok(Freshness::Current);
        }
        let refreshed = self.refresh(&tokens.refresh_token).await?;
        tokens.access_token = refreshed.access_token;
        tokens.expires_at = refreshed.expires_at;
        if let Some(refresh_token) = refreshed.refresh_token {
            tokens.refresh_token = refresh_token;
        }
        tracing::debug!(expires_at = %tokens.expires_at, "refreshed cloud_a access token");
        Ok(Freshness::Refreshed)
    }

    /// Every project the user can see (following page tokens).
    pub async fn list_projects(&self, access_token: &Secret<String>) -> Result<Vec<Project>, CloudAError> {
        let mut projects = Vec::new();
        let mut page_token: Option<String> = None;
        for _ in 0..MAX_PROJECT_PAGES {
            let mut url = self.api_url(&["v1", "projects"]);
            if let Some(token) = &page_token {
                url.query_pairs_mut().append_pair("pageToken", token);
            }
            let page: ProjectPage = self.get_json(url, access_token, "project list").await?;
            projects.extend(page.projects);
            page_token = page.next_page_token.filter(|t| !t.is_empty());
            if page_token.is_none() {
                return Ok(projects);
            }
        }
        Err(CloudAError::UnexpectedResponse("project list (too many pages)"))
    }

    pub async fn has_billing(&self, access_token: &Secret<String>, project_id: &str) -> Result<bool, CloudAError> {
        let url = self.api_url(&["v1", "projects", project_id, "billingInfo"]);
        let info: BillingInfo = self.get_json(url, access_token, "billing info").await?;
        Ok(info.billing_enabled)
    }

    /// Enables `services` (`compute.googleapis.com`, ...) on the project (Service Usage
    /// `services:batchEnable`). Enabling an enabled service changes nothing.
    pub async fn enable_services(
        &self,
        access_token: &Secret<String>,
        project_id: &str,
        services: &[&str],
    ) -> Result<(), CloudAError> {
        let url = self.api_url(&["v1", "projects", project_id, "services:batchEnable"]);
        let _: Value = self
            .post_json(
                url,
                access_token,
                &json!({ "serviceIds": services }),
                "service enablement",
            )
            .await?;
        Ok(())
    }

    /// Creates the service account `account_id` in the project, or finds it when an earlier
    /// attempt created it; returns its e-mail.
    pub async fn ensure_service_account(
        &self,
        access_token: &Secret<String>,
        project_id: &str,
        account_id: &str,
        display_name: &str,
    ) -> Result<String, CloudAError> {
        let url = self.api_url(&["v1", "projects", project_id, "serviceAccounts"]);
        let body = json!({ "accountId": account_id, "serviceAccount": { "displayName": display_name } });
        match self
            .post_json::<ServiceAccount>(url, access_token, &body, "service account")
            .await
        {
            Ok(account) => Ok(account.email),
            Err(CloudAError::Api(409)) => {
                let email = format!("{account_id}@{project_id}.iam.gserviceaccount.com");
                let url = self.api_url(&["v1", "projects", project_id, "serviceAccounts", &email]);
                let account: ServiceAccount = self.get_json(url, access_token, "service account").await?;
                Ok(account.email)
            }
            Err(error) => Err(error),
        }
    }

    /// Grants `role` to `member` on the project: reads the IAM policy and writes it back with the
    /// binding added (the policy's `etag` makes a concurrent change fail instead of being lost).
    pub async fn grant_project_role(
        &self,
        access_token: &Secret<String>,
        project_id: &str,
        role: &str,
        member: &str,
    ) -> Result<(), CloudAError> {
        let resource = format!("{project_id}:getIamPolicy");
        let url = self.api_url(&["v1", "projects", &resource]);
        let mut policy: Value = self.post_json(url, access_token, &json!({}), "IAM policy").await?;
        let bindings = policy
            .as_object_mut()
            .ok_or(CloudAError::UnexpectedResponse("IAM policy"))?
            .entry("bindings")
            .or_insert_with(|| json!([]));
        let bindings = bindings
            .as_array_mut()
            .ok_or(CloudAError::UnexpectedResponse("IAM policy"))?;
        match bindings.iter_mut().find(|binding| binding["role"] == role) {
            Some(binding) => {
                let members = binding["members"]
                    .as_array_mut()
                    .ok_or(CloudAError::UnexpectedResponse("IAM policy"))?;
                if members.iter().any(|m| m == member) {
                    return Ok(());
                }
                members.push(json!(member));
            }
            None => bindings.push(json!({ "role": role, "members": [member] })),
        }
        let resource = format!("{project_id}:setIamPolicy");
        let url = self.api_url(&["v1", "projects", &resource]);
        let _: Value = self
            .post_json(url, access_token, &json!({ "policy": policy }), "IAM policy update")
            .await?;
        Ok(())
    }

    async fn user_email(&self, access_token: &Secret<String>) -> Result<Option<String>, CloudAError> {
        let url = self.api_url(&["oauth2", "v3", "userinfo"]);
        let info: UserInfo = self.get_json(url, access_token, "userinfo endpoint").await?;
        Ok(info.email)
    }

    fn api_url(&self, segments: &[&str]) -> Url {
        let mut url = self.api_base_url.clone();
        url.path_segments_mut()
            .expect("checked in new: the API base can be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    async fn post_json<T: DeserializeOwned>(
        &self,
        url: Url,
        access_token: &Secret<String>,
        body: &Value,
        what: &'static str,
    ) -> Result<T, CloudAError> {
        let response = self
            .http
            .post(url)
            .bearer_auth(access_token.expose())
            .json(body)
            .send()
            .await
            .map_err(|e| CloudAError::Network(Box::new(e)))?;
        Self::read_json(response, what).await
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        url: Url,
        access_token: &Secret<String>,
        what: &'static str,
    ) -> Result<T, CloudAError> {
        let response = self
            .http
            .get(url)
            .bearer_auth(access_token.expose())
            .send()
            .await
            .map_err(|e| CloudAError::Network(Box::new(e)))?;
        Self::read_json(response, what).await
    }

    async fn read_json<T: DeserializeOwned>(response: reqwest::Response, what: &'static str) -> Result<T, CloudAError> {
        match response.status() {
            StatusCode::UNAUTHORIZED => Err(CloudAError::Unauthorized),
            status if !status.is_success() => Err(CloudAError::Api(status.as_u16())),
            _ => response.json().await.map_err(|_| CloudAError::UnexpectedResponse(what)),
        }
    }
}

fn expires_at(expires_in: Option<Duration>) -> DateTime<Utc> {
    let lifetime = expires_in
        .and_then(|d| TimeDelta::from_std(d).ok())
        .unwrap_or(DEFAULT_ACCESS_TOKEN_LIFETIME);
    Utc::now() + lifetime
}

#[derive(Clone, Copy)]
enum Grant {
    AuthorizationCode,
    RefreshToken,
}

fn token_error(error: BasicRequestTokenError<HttpClientError<reqwest::Error>>, grant: Grant) -> CloudAError {
    match error {
        RequestTokenError::ServerResponse(response) => match (response.error(), grant) {
            (BasicErrorResponseType::InvalidGrant, Grant::AuthorizationCode) => CloudAError::InvalidGrant,
            (BasicErrorResponseType::InvalidGrant, Grant::RefreshToken) => CloudAError::RefreshExpired,
            (BasicErrorResponseType::InvalidClient | BasicErrorResponseType::UnauthorizedClient, _) => {
                CloudAError::InvalidClient
            }
            (other, _) => CloudAError::OAuth(other.to_string()),
        },
        RequestTokenError::Request(error) => CloudAError::Network(Box::new(error)),
        // The body of a response that failed to parse may hold tokens: it is dropped here.
        RequestTokenError::Parse(..) | RequestTokenError::Other(_) => CloudAError::UnexpectedResponse("token endpoint"),
    }
}
