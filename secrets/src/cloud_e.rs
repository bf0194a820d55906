//! cloud_e: a private mesh network connected with OAuth client credentials, and the SSH key pair
//! the agent uses to reach the network's machines.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::json;
use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, LineEnding, PrivateKey, PublicKey};
use url::Url;

use crate::Secret;

pub const SCOPES: &str = "devices devices:write acl acl:write keys";
/// Assumed when the token endpoint does not say how long an access token lives.
pub const DEFAULT_TOKEN_LIFETIME: TimeDelta = TimeDelta::days(90);
/// The path segment that names the client's default network.
const DEFAULT_NETWORK: &str = "-";

#[derive(Debug, thiserror::Error)]
pub enum CloudEError {
    #[error("cloud_e rejected the client id or secret")]
    InvalidClient,
    #[error("cloud_e rejected the access token; request a new one")]
    Unauthorized,
    #[error("cloud_e network not found")]
    NetworkNotFound,
    #[error("cloud_e API answered HTTP {0}")]
    Api(u16),
    #[error("could not reach cloud_e; retry: {0}")]
    Network(#[source] reqwest::Error),
    #[error("unexpected response from the cloud_e {0}")]
    UnexpectedResponse(&'static str),
    #[error("invalid cloud_e configuration: {0}")]
    Config(String),
    #[error("SSH key: {0}")]
    SshKey(String),
}

#[derive(Debug, Clone)]
pub struct CloudEConfig {
    pub api_base_url: Url,
    pub timeout: Duration,
}

impl CloudEConfig {
    /// With a 15-second timeout.
    pub fn new(api_base_url: Url) -> Self {
        Self {
            api_base_url,
            timeout: Duration::from_secs(15),
        }
    }
}

/// An access token obtained with the client credentials.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CloudEToken {
    pub access_token: Secret<String>,
    pub expires_at: DateTime<Utc>,
    pub scope: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub last_seen: Option<String>,
}

/// A reusable, pre-authorised key that joins machines to the network.
#[derive(Debug, Clone, Deserialize)]
pub struct AuthKey {
    pub id: String,
    pub key: Secret<String>,
    #[serde(default)]
    pub expires: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct SshKeyPair {
    /// OpenSSH private key format (`-----BEGIN OPENSSH PRIVATE KEY-----`).
    pub private_key: Secret<String>,
    /// One `authorized_keys` line: `ssh-ed25519 <base64> <comment>`.
    pub public_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSetup {
    pub instructions: Vec<String>,
    /// Appends the public key to `~/.ssh/authorized_keys` unless it is already there.
    pub command: String,
}

#[derive(Debug, Clone)]
pub struct CloudEClient {
    http: reqwest::Client,
    api_base_url: Url,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: Secret<String>,
    expires_in: Option<u64>,
    scope: Option<String>,
}

#[derive(Deserialize)]
struct OAuthError {
    error: Option<String>,
}

#[derive(Deserialize)]
struct DeviceList {
    #[serde(default)]
    devices: Vec<Device>,
}

impl CloudEClient {
    pub fn new(config: CloudEConfig) -> Result<Self, CloudEError> {
        if config.api_base_url.cannot_be_a_base() {
            return Err(CloudEError::Config("the API base URL cannot have paths".into()));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .build()
            .map_err(|e| CloudEError::Config(e.to_string()))?;
        Ok(Self {
            http,
            api_base_url: config.api_base_url,
        })
    }

    /// `POST /api/v2/oauth/token` with `grant_type=client_credentials`.
    pub async fn token(&self, client_id: &str, client_secret: &Secret<String>) -> Result<CloudEToken, CloudEError> {
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_secret", client_secret.expose()),
            ("scope", SCOPES),
        ];
        let request = self.http.post(self.url(&["oauth", "token"])).form(&form);
        let response = send(request).await?;
        let status = response.status();
        if !status.is_success() {
            let error = response.json::<OAuthError>().await.ok().and_then(|body| body.error);
            return Err(match (status, error.as_deref()) {
                (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _)
                | (_, Some("invalid_client" | "unauthorized_client")) => CloudEError::InvalidClient,
                _ => CloudEError::Api(status.as_u16()),
            });
        }
        let token: TokenResponse = parse(response, "token endpoint").await?;
        let lifetime = token
            .expires_in
            .and_then(|s| TimeDelta::try_seconds(i64::try_from(s).ok()?))
            .unwrap_or(DEFAULT_TOKEN_LIFETIME);
        Ok(CloudEToken {
            access_token: token.access_token,
            expires_at: Utc::now() + lifetime,
            scope: token.scope,
        })
    }

    /// The devices of `network`, or of the client's default network when `None`.
    pub async fn list_devices(
        &self,
        access_token: &Secret<String>,
        network: Option<&str>,
    ) -> Result<Vec<Device>, CloudEError> {
        let url = self.url(&["tailnet", network.unwrap_or(DEFAULT_NETWORK), "devices"]);
        let response = api_response(send(self.http.get(url).bearer_auth(access_token.expose())).await?)?;
        let list: DeviceList = parse(response, "device list").await?;
        Ok(list.devices)
    }

    /// Creates a reusable, non-ephemeral, pre-authorised auth key, tagged with `tags` if any.
    pub async fn create_auth_key(
        &self,
        access_token: &Secret<String>,
        network: Option<&str>,
        tags: &[String],
    ) -> Result<AuthKey, CloudEError> {
        let mut create = json!({ "reusable": true, "ephemeral": false, "preauthorized": true });
        if !tags.is_empty() {
            create["tags"] = json!(tags);
        }
        let body = json!({ "capabilities": { "devices": { "create": create } } });
        let url = self.url(&["tailnet", network.unwrap_or(DEFAULT_NETWORK), "keys"]);
        let request = self.http.post(url).bearer_auth(access_token.expose()).json(&body);
        let response = api_response(send(request).await?)?;
        let key: AuthKey = parse(response, "auth key response").await?;
        tracing::debug!(key_id = %key.id, "created cloud_e auth key");
        Ok(key)
    }

    /// `{base}/api/v2/<segments>`
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.api_base_url.clone();
        url.path_segments_mut()
            .expect("checked in new: the API base can be a base")
            .pop_if_empty()
            .extend(["api", "v2"])
            .extend(segments);
        url
    }
}

async fn send(request: RequestBuilder) -> Result<Response, CloudEError> {
    request.send().await.map_err(CloudEError::Network)
}

fn api_response(response: Response) -> Result<Response, CloudEError> {
    match response.status() {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(CloudEError::Unauthorized),
        StatusCode::NOT_FOUND => Err(CloudEError::NetworkNotFound),
        status if !status.is_success() => Err(CloudEError::Api(status.as_u16())),
        _ => Ok(response),
    }
}

/// The body's parse error is dropped: it could quote a token.
async fn parse<T: DeserializeOwned>(response: Response, what: &'static str) -> Result<T, CloudEError> {
    response.json().await.map_err(|_| CloudEError::UnexpectedResponse(what))
}

/// A new Ed25519 key pair in OpenSSH formats. The comment ends the public key line.
pub fn generate_ssh_keypair(comment: &str) -> Result<SshKeyPair, CloudEError> {
    if comment.chars().any(char::is_control) {
        return Err(CloudEError::SshKey(
            "the comment must not contain control characters".into(),
        ));
    }
    let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).map_err(|e| CloudEError::SshKey(e.to_string()))?;
    key.set_comment(comment);
    let private_key = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| CloudEError::SshKey(e.to_string()))?;
    let public_key = key
        .public_key()
        .to_openssh()
        .map_err(|e| CloudEError::SshKey(e.to_string()))?;
    Ok(SshKeyPair {
        private_key: Secret::new(private_key.to_string()),
        public_key,
    })
}

/// What the user runs on a machine of `network` so the agent can log in with `public_key`.
pub fn ssh_setup(public_key: &str, network: &str) -> Result<SshSetup, CloudEError> {
    // Re-encoding the parsed key guarantees one well-formed line; quoting keeps its comment inert.
    let line = PublicKey::from_openssh(public_key.trim())
        .and_then(|key| key.to_openssh())
        .map_err(|e| CloudEError::SshKey(format!("not an OpenSSH public key: {e}")))?;
    let quoted = shell_quote(&line);
    let command = format!(
        "mkdir -p ~/.ssh && chmod 700 ~/.ssh && touch ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys \
         && (grep -qxF {quoted} ~/.ssh/authorized_keys || echo {quoted} >> ~/.ssh/authorized_keys)"
    );
    let instructions = vec![
        format!("Make sure the machine is connected to the cloud_e network {network}."),
        "Log in to the machine as the user the agent should connect as.".to_owned(),
        "Run the command below; it adds the agent's public key to ~/.ssh/authorized_keys.".to_owned(),
        "Make sure the SSH server is running and allows public-key authentication.".to_owned(),
    ];
    Ok(SshSetup { instructions, command })
}

/// POSIX single-quoting: `'` becomes `'\''`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_key_pair_parses_back() {
        let pair = generate_ssh_keypair("vigil-agent@user-1").unwrap();
        let private = PrivateKey::from_openssh(pair.private_key.expose()).unwrap();
        assert_eq!(private.algorithm(), Algorithm::Ed25519);
        assert!(pair
            .private_key
            .expose()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        let public = PublicKey::from_openssh(&pair.public_key).unwrap();
        assert_eq!(&public, private.public_key());
        assert!(pair.public_key.starts_with("ssh-ed25519 "));
        assert!(pair.public_key.ends_with(" vigil-agent@user-1"));
        assert!(!format!("{pair:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn ssh_setup_appends_the_key_once() {
        let pair = generate_ssh_keypair("vigil").unwrap();
        let setup = ssh_setup(&pair.public_key, "example.com").unwrap();
        let quoted = format!("'{}'", pair.public_key);
        assert!(setup
            .command
            .contains(&format!("grep -qxF {quoted} ~/.ssh/authorized_keys")));
        assert!(setup
            .command
            .contains(&format!("echo {quoted} >> ~/.ssh/authorized_keys")));
        assert!(setup.instructions[0].contains("example.com"));
    }

    #[test]
    fn ssh_setup_quotes_hostile_comments() {
        let pair = generate_ssh_keypair("x'; rm -rf / #").unwrap();
        let setup = ssh_setup(&pair.public_key, "-").unwrap();
        assert!(setup.command.contains(r"x'\''; rm -rf / #'"), "{}", setup.command);
        assert!(ssh_setup("ssh-ed25519 not-base64", "-").is_err());
        assert!(generate_ssh_keypair("a\nb").is_err());
    }
}
