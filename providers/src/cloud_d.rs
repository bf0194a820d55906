//! cloud_d: Scaleway-like access key and secret key.
//!
//! The secret key authenticates every call (`X-Auth-Token`); the access key names the key pair, which
//! leads to its organization ([`ScalewayClient::organization_of`]) and so to the projects
//! ([`ScalewayClient::list_projects`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::transport::{self, Unavailable};
use crate::Secret;

const AUTH_HEADER: &str = "X-Auth-Token";
const ACCESS_KEY_PREFIX: &str = "SCW";
const ACCESS_KEY_LEN: usize = 20;
/// The largest page the provider serves.
const PAGE_SIZE: u32 = 100;
/// Pages followed at most: 10,000 projects, far beyond the provider's quota, it stops a listing that never ends.
const MAX_PAGES: u32 = 100;

/// The public half of a key pair: `SCW` followed by 17 characters from `A`-`Z` and `0`-`9`, 20 in all
/// (as the console issues them: `SCWXXXXXXXXXXXXXXXXX`). Not a secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AccessKey(String);

/// The secret half of a key pair: a UUID in its hyphenated 36-character form, any case.
#[derive(Clone, Debug)]
pub struct SecretKey(Secret);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    #[error("an access key begins with SCW followed by 17 uppercase letters or digits, 20 characters in all")]
    AccessKey,
    #[error("a secret key is a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")]
    SecretKey,
}

impl AccessKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AccessKey {
    type Err = KeyFormatError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let well_formed = value.len() == ACCESS_KEY_LEN
            && value.starts_with(ACCESS_KEY_PREFIX)
            && value.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
        if well_formed {
            Ok(Self(value.to_owned()))
        } else {
            Err(KeyFormatError::AccessKey)
        }
    }
}

impl fmt::Display for AccessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl SecretKey {
    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

impl FromStr for SecretKey {
    type Err = KeyFormatError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        // `Uuid` also takes the simple, braced and URN forms; the provider issues only the hyphenated one.
        let hyphenated = value.len() == 36 && uuid::Uuid::try_parse(value).is_ok();
        if hyphenated {
            Ok(Self(value.into()))
        } else {
            Err(KeyFormatError::SecretKey)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    pub project_id: String,
    pub project_name: String,
    pub organization_id: String,
    pub description: String,
    /// Always true: the provider has no disabled projects; the field is in the connection's project list.
    pub enabled: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ScalewayError {
    /// The secret key was refused (HTTP 401), or the access key does not exist. The caller answers 4xx.
    #[error("invalid credentials: {0}")]
    InvalidCredentials(String),
    /// The key pair is valid but lacks a permission (HTTP 403). The caller answers 4xx.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// Any other error the provider answered.
    #[error("the provider rejected the request: HTTP {status}: {message}")]
    Rejected { status: u16, message: String },
    #[error("provider unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    #[error("malformed provider response: {0}")]
    Malformed(String),
}

/// Client of the provider's IAM and Account APIs.
#[derive(Clone, Debug)]
pub struct ScalewayClient {
    http: reqwest::Client,
    base: Url,
    timeout: Duration,
}

impl Default for ScalewayClient {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalewayClient {
    pub const DEFAULT_BASE: &'static str = "https://api.scaleway.com";

    pub fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
            base: Url::parse(Self::DEFAULT_BASE).expect("default base is a valid URL"),
            timeout: transport::DEFAULT_TIMEOUT,
        }
    }

    pub fn with_base(mut self, base: Url) -> Self {
        self.base = base;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The id of the organization that owns `access_key`, read from the key itself or, as the API key object
    /// does not carry it today, from the key's default project.
    pub async fn organization_of(&self, access_key: &AccessKey, secret: &SecretKey) -> Result<String, ScalewayError> {
        let key_url = transport::endpoint(&self.base, &["iam", "v1alpha1", "api-keys", access_key.as_str()]);
        let key: ApiKey = match self.get(key_url, secret).await {
            Err(ScalewayError::Rejected { status: 404, .. }) => {
                return Err(ScalewayError::InvalidCredentials(format!("no access key {access_key}")))
            }
            result => result?,
        };
        if let Some(organization_id) = key.organization_id {
            return Ok(organization_id);
        }
        let project_url = transport::endpoint(&self.base, &["account", "v3", "projects", &key.default_project_id]);
        let project: RawProject = self.get(project_url, secret).await?;
        Ok(project.organization_id)
    }

    /// Every project of `organization_id`, following pages.
    pub async fn list_projects(
        &self,
        secret: &SecretKey,
        organization_id: &str,
    ) -> Result<Vec<Project>, ScalewayError> {
        let mut projects = Vec::new();
        for page in 1..=MAX_PAGES {
            let listing = self.projects_page(secret, organization_id, page, PAGE_SIZE).await?;
            let received = listing.projects.len();
            projects.extend(listing.projects.into_iter().map(|raw| Project {
                project_id: raw.id,
                project_name: raw.name,
                organization_id: raw.organization_id,
                description: raw.description,
                enabled: true,
            }));
            if received == 0 || projects.len() as u64 >= listing.total_count {
                return Ok(projects);
            }
        }
        Err(ScalewayError::Malformed(format!(
            "project list goes on past {MAX_PAGES} pages"
        )))
    }

    /// Checks that the secret key still works for `organization_id` (the one stored at connection) with the
    /// cheapest authenticated call: the first project of one.
    pub async fn validate(&self, secret: &SecretKey, organization_id: &str) -> Result<(), ScalewayError> {
        self.projects_page(secret, organization_id, 1, 1).await.map(drop)
    }

    async fn projects_page(
        &self,
        secret: &SecretKey,
        organization_id: &str,
        page: u32,
        page_size: u32,
    ) -> Result<ProjectPage, ScalewayError> {
        let mut url = transport::endpoint(&self.base, &["account", "v3", "projects"]);
        url.query_pairs_mut()
            .append_pair("organization_id", organization_id)
            .append_pair("page", &page.to_string())
            .append_pair("page_size", &page_size.to_string());
        self.get(url, secret).await
    }

    async fn get<T: DeserializeOwned>(&self, url: Url, secret: &SecretKey) -> Result<T, ScalewayError> {
        let request = self.http.get(url).header(AUTH_HEADER, secret.expose());
        let reply = transport::send(request, self.timeout).await?;
        if !reply.status.is_success() {
            return Err(error_from(reply.status, &reply.body));
        }
        serde_json::from_slice(&reply.body).map_err(|e| ScalewayError::Malformed(e.to_string()))
    }
}

#[derive(Deserialize)]
struct ApiKey {
    /// Absent from the provider's API key object today; taken if it ever comes.
    organization_id: Option<String>,
    default_project_id: String,
}

#[derive(Deserialize)]
struct ProjectPage {
    projects: Vec<RawProject>,
    total_count: u64,
}

#[derive(Deserialize)]
struct RawProject {
    id: String,
    name: String,
    organization_id: String,
    #[serde(default)]
    description: String,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    #[serde(default)]
    message: String,
}

fn error_from(status: StatusCode, body: &[u8]) -> ScalewayError {
    let message = serde_json::from_slice::<ErrorAnswer>(body)
        .map(|answer| answer.message)
        .unwrap_or_default();
    match status {
        StatusCode::UNAUTHORIZED => ScalewayError::InvalidCredentials(message),
        StatusCode::FORBIDDEN => ScalewayError::AccessDenied(message),
        _ => ScalewayError::Rejected {
            status: status.as_u16(),
            message,
        },
    }
}
