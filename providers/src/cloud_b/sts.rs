use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use chrono::{DateTime, Utc};
use reqwest::header::CONTENT_TYPE;
use reqwest::Url;
use serde::Deserialize;

use super::RoleArn;
use crate::transport::{self, Unavailable};
use crate::Secret;

const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The service's own AWS credentials, the identity that the users' roles trust.
#[derive(Clone, Debug)]
pub struct ServiceCredentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl ServiceCredentials {
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<Secret>,
        session_token: Option<Secret>,
    ) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        }
    }
}

/// Credentials of an assumed role, valid until `expiration`.
#[derive(Clone, Debug)]
pub struct TemporaryCredentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Secret,
    pub expiration: DateTime<Utc>,
    /// The assumed-role ARN STS reports: `arn:aws:sts::<account>:assumed-role/<role name>/<session name>`.
    pub assumed_role_arn: String,
}

impl TemporaryCredentials {
    /// See [`crate::needs_refresh`].
    pub fn needs_refresh(&self, now: DateTime<Utc>) -> bool {
        crate::needs_refresh(self.expiration, now)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StsError {
    /// The role refused to be assumed: wrong or missing external ID, no trust of the service's account, or
    /// no such role (STS does not tell these apart). The user's doing: the caller answers 4xx.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// STS rejected the service's own credentials (`InvalidClientTokenId`, `SignatureDoesNotMatch`,
    /// `ExpiredToken`, ...): the service is misconfigured, not the user.
    #[error("STS rejected the service's credentials: {code}: {message}")]
    ServiceCredentialsRejected { code: String, message: String },
    /// Any other error STS answered, such as `ValidationError` for a duration out of range.
    #[error("STS rejected the request: {code}: {message}")]
    Rejected { code: String, message: String },
    #[error("could not sign the STS request: {0}")]
    Signing(String),
    #[error("STS unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    #[error("malformed STS response: {0}")]
    Malformed(String),
}

/// Client of the STS Query API (`AssumeRole`), SigV4-signed with the service's credentials.
#[derive(Clone, Debug)]
pub struct StsClient {
    http: reqwest::Client,
    endpoint: Url,
    region: String,
    credentials: ServiceCredentials,
    timeout: Duration,
}

impl StsClient {
    pub const DEFAULT_ENDPOINT: &'static str = "https://sts.amazonaws.com";
    /// The signing region of the global endpoint.
    pub const DEFAULT_REGION: &'static str = "us-east-1";

    pub fn new(credentials: ServiceCredentials) -> Self {
        Self {
            http: reqwest::Client::new(),
            endpoint: Url::parse(Self::DEFAULT_ENDPOINT).expect("default endpoint is a valid URL"),
            region: Self::DEFAULT_REGION.to_owned(),
            credentials,
            timeout: transport::DEFAULT_TIMEOUT,
        }
    }

    /// Where requests go; a regional endpoint needs the matching [`StsClient::with_region`].
    pub fn with_endpoint(mut self, endpoint: Url) -> Self {
        self.endpoint = endpoint;
        self
    }

    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = region.into();
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Assumes `role_arn`, proving `external_id`, for `duration_secs` (STS accepts 900 up to the role's
    /// maximum session duration, 3600 by default). `session_name` is 2 to 64 characters of letters, digits
    /// and `+=,.@_-`; it shows in the user's CloudTrail, so name the service and the user in it.
    pub async fn assume_role(
        &self,
        role_arn: &RoleArn,
        external_id: &str,
        session_name: &str,
        duration_secs: u32,
    ) -> Result<TemporaryCredentials, StsError> {
        let duration = duration_secs.to_string();
        let body = serde_urlencoded::to_string([
            ("Action", "AssumeRole"),
            ("Version", "2011-06-15"),
            ("RoleArn", role_arn.as_str()),
            ("RoleSessionName", session_name),
            ("ExternalId", external_id),
            ("DurationSeconds", &duration),
        ])
        .expect("string pairs always encode");

        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, FORM_CONTENT_TYPE);
        for (name, value) in self.signature_headers(&body)? {
            request = request.header(name, value);
        }
        let reply = transport::send(request.body(body), self.timeout).await?;
        if reply.status.is_success() {
            parse_credentials(&reply.body)
        } else {
            Err(parse_error(reply.status.as_u16(), &reply.body))
        }
    }

    /// The headers SigV4 adds to a `POST` of `body` to the endpoint: `authorization`, `x-amz-date` and,
    /// with a session token, `x-amz-security-token`.
    fn signature_headers(&self, body: &str) -> Result<Vec<(&'static str, String)>, StsError> {
        let signing_error = |error: &dyn std::error::Error| StsError::Signing(error.to_string());
        let credentials = &self.credentials;
        let identity = Credentials::new(
            &credentials.access_key_id,
            credentials.secret_access_key.expose(),
            credentials
                .session_token
                .as_ref()
                .map(|token| token.expose().to_owned()),
            None,
            "vigil",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("sts")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| signing_error(&e))?
            .into();
        let request = SignableRequest::new(
            "POST",
            self.endpoint.as_str(),
            [("content-type", FORM_CONTENT_TYPE)].into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| signing_error(&e))?;
        let (instructions, _signature) = sign(request, &params).map_err(|e| signing_error(&e))?.into_parts();
        let (headers, _params) = instructions.into_parts();
        Ok(headers
            .iter()
            .map(|header| (header.name(), header.value().to_owned()))
            .collect())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumeRoleResponse {
    assume_role_result: AssumeRoleResult,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumeRoleResult {
    credentials: RawCredentials,
    assumed_role_user: AssumedRoleUser,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: DateTime<Utc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumedRoleUser {
    arn: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorResponse {
    error: ErrorDetail,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorDetail {
    code: String,
    #[serde(default)]
    message: String,
}

fn parse_credentials(body: &[u8]) -> Result<TemporaryCredentials, StsError> {
    // The parser's message is left out on purpose: on this document it could quote a credential.
    let response: AssumeRoleResponse = std::str::from_utf8(body)
        .ok()
        .and_then(|xml| quick_xml::de::from_str(xml).ok())
        .ok_or_else(|| StsError::Malformed("AssumeRole answer is not the expected XML document".into()))?;
    let AssumeRoleResult {
        credentials,
        assumed_role_user,
    } = response.assume_role_result;
    Ok(TemporaryCredentials {
        access_key_id: credentials.access_key_id,
        secret_access_key: credentials.secret_access_key.into(),
        session_token: credentials.session_token.into(),
        expiration: credentials.expiration,
        assumed_role_arn: assumed_role_user.arn,
    })
}

fn parse_error(status: u16, body: &[u8]) -> StsError {
    let parsed = std::str::from_utf8(body)
        .ok()
        .and_then(|xml| quick_xml::de::from_str::<ErrorResponse>(xml).ok());
    let Some(ErrorResponse {
        error: ErrorDetail { code, message },
    }) = parsed
    else {
        return StsError::Malformed(format!("HTTP {status} without an STS error document"));
    };
    match code.as_str() {
        "AccessDenied" => StsError::AccessDenied(message),
        "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "ExpiredToken" => StsError::ServiceCredentialsRejected { code, message },
        "Throttling" => Unavailable::Throttled.into(),
        _ => StsError::Rejected { code, message },
    }
}
