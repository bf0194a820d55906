use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use quick_xml::escape::escape;
use reqwest::Url;

use super::{lock, Failure, FakeServer, RecordedRequest};
use crate::cloud_b::{RoleArn, ServiceCredentials, StsClient};
use crate::Secret;

/// How far the signing time may be from the fake's clock, as STS allows.
const MAX_CLOCK_SKEW: TimeDelta = TimeDelta::minutes(15);
const SERVICE_USER_ARN: &str = "arn:aws:iam::000000000000:user/vigil-service";

/// A fake STS answering `AssumeRole` at `POST /`.
///
/// It checks the SigV4 signature as STS does: the `Authorization` header must name the service access key
/// with a `<date>/us-east-1/sts/aws4_request` scope, and the signature recomputed from the request with
/// the service secret must match (else `SignatureDoesNotMatch`). A role assumes only with the external ID it
/// was registered with (else `AccessDenied`, also for unknown roles). Credentials expire after
/// `DurationSeconds` unless [`FakeSts::set_expiration`] fixed the expiration.
pub struct FakeSts {
    server: FakeServer,
    state: Arc<Mutex<StsState>>,
}

/// Credentials the fake handed out.
#[derive(Clone, Debug)]
pub struct IssuedCredentials {
    pub role_arn: String,
    pub session_name: String,
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Secret,
    pub expiration: DateTime<Utc>,
}

struct StsState {
    service: ServiceCredentials,
    /// Role ARN to the external ID its trust policy requires.
    roles: HashMap<String, String>,
    expiration: Option<DateTime<Utc>>,
    issued: Vec<IssuedCredentials>,
}

impl FakeSts {
    /// Starts a fake that trusts requests signed with `service`.
    pub async fn start(service: ServiceCredentials) -> Self {
        let state = Arc::new(Mutex::new(StsState {
            service,
            roles: HashMap::new(),
            expiration: None,
            issued: Vec::new(),
        }));
        let router = Router::new().route("/", post(assume_role)).with_state(state.clone());
        Self {
            server: FakeServer::start(router).await,
            state,
        }
    }

    pub fn url(&self) -> Url {
        self.server.url.clone()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    pub fn set_failure(&self, failure: Option<Failure>) {
        self.server.set_failure(failure);
    }

    /// Lets `role_arn` be assumed by the service when it proves `external_id`.
    pub fn add_role(&self, role_arn: &RoleArn, external_id: &str) {
        lock(&self.state)
            .roles
            .insert(role_arn.to_string(), external_id.to_owned());
    }

    /// Fixes the expiration of the credentials handed out from now on; `None` goes back to `DurationSeconds`.
    pub fn set_expiration(&self, expiration: Option<DateTime<Utc>>) {
        lock(&self.state).expiration = expiration;
    }

    pub fn issued(&self) -> Vec<IssuedCredentials> {
        lock(&self.state).issued.clone()
    }
}

/// An STS error document and its status.
struct Fault {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Fault {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn signature_mismatch(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", message)
    }

    fn incomplete_signature(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "IncompleteSignature", message)
    }

    fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "ValidationError", message)
    }
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        let body = format!(
            "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <Error>\n    <Type>Sender</Type>\n    \
             <Code>{}</Code>\n    <Message>{}</Message>\n  </Error>\n  <RequestId>{}</RequestId>\n</ErrorResponse>\n",
            self.code,
            escape(self.message.as_str()),
            uuid::Uuid::new_v4()
        );
        (self.status, [(CONTENT_TYPE, "text/xml")], body).into_response()
    }
}

async fn assume_role(
    State(state): State<Arc<Mutex<StsState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Fault> {
    let service = lock(&state).service.clone();
    verify_signature(&service, &method, &uri, &headers, &body)?;

    let form: HashMap<String, String> = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body)
        .map_err(|_| Fault::validation("The request body is not form-encoded"))?
        .into_iter()
        .collect();
    let field = |name: &str| form.get(name).map(String::as_str);
    if field("Action") != Some("AssumeRole") || field("Version") != Some("2011-06-15") {
        return Err(Fault::new(
            StatusCode::BAD_REQUEST,
            "InvalidAction",
            "Could not find operation for this version",
        ));
    }
    let role_arn = field("RoleArn").ok_or_else(|| Fault::validation("RoleArn is required"))?;
    let session_name = field("RoleSessionName")
        .filter(|name| {
            (2..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c))
        })
        .ok_or_else(|| Fault::validation("RoleSessionName must be 2 to 64 characters of [\\w+=,.@-]"))?;
    let duration_secs = match field("DurationSeconds") {
        None => 3600,
        Some(value) => value
            .parse::<i64>()
            .ok()
            .filter(|secs| (900..=43_200).contains(secs))
            .ok_or_else(|| Fault::validation("DurationSeconds must be between 900 and 43200"))?,
    };

    let mut state = lock(&state);
    let trusted = state
        .roles
        .get(role_arn)
        .is_some_and(|required| field("ExternalId") == Some(required.as_str()));
    if !trusted {
        return Err(Fault::new(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            format!("User: {SERVICE_USER_ARN} is not authorized to perform: sts:AssumeRole on resource: {role_arn}"),
        ));
    }
    let role: RoleArn = role_arn.parse().expect("registered roles are valid ARNs");
    let expiration = state
        .expiration
        .unwrap_or_else(|| Utc::now() + TimeDelta::seconds(duration_secs));
    let random = || uuid::Uuid::new_v4().simple().to_string().to_ascii_uppercase();
    let issued = IssuedCredentials {
        role_arn: role_arn.to_owned(),
        session_name: session_name.to_owned(),
        access_key_id: format!("ASIA{}", &random()[..16]),
        secret_access_key: format!("{}/{}", &random()[..20], &random()[..19]).into(),
        session_token: format!("FwoGZXIvYXdzE{}{}{}", random(), random(), random()).into(),
        expiration,
    };
    let body = format!(
        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <AssumeRoleResult>\n    \
         <AssumedRoleUser>\n      <AssumedRoleId>AROA{role_id}:{session}</AssumedRoleId>\n      \
         <Arn>arn:aws:sts::{account}:assumed-role/{name}/{session}</Arn>\n    </AssumedRoleUser>\n    \
         <Credentials>\n      <AccessKeyId>{access_key}</AccessKeyId>\n      <SecretAccessKey>{secret}</SecretAccessKey>\n      \
         <SessionToken>{token}</SessionToken>\n      <Expiration>{expiration}</Expiration>\n    </Credentials>\n    \
         <PackedPolicySize>6</PackedPolicySize>\n  </AssumeRoleResult>\n  <ResponseMetadata>\n    \
         <RequestId>{request_id}</RequestId>\n  </ResponseMetadata>\n</AssumeRoleResponse>\n",
        role_id = &random()[..17],
        session = escape(session_name),
        account = role.account_id(),
        name = escape(role.role_name()),
        access_key = issued.access_key_id,
        secret = issued.secret_access_key.expose(),
        token = issued.session_token.expose(),
        expiration = expiration.format("%Y-%m-%dT%H:%M:%SZ"),
        request_id = uuid::Uuid::new_v4(),
    );
    state.issued.push(issued);
    Ok(([(CONTENT_TYPE, "text/xml")], body).into_response())
}

/// The parts of `AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request,
/// SignedHeaders=<a;b>, Signature=<hex>`.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Option<Authorization<'_>> {
    let fields = value.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for field in fields.split(',') {
        match field.trim().split_once('=')? {
            ("Credential", value) => credential = Some(value),
            ("SignedHeaders", value) => signed_headers = Some(value),
            ("Signature", value) => signature = Some(value),
            _ => return None,
        }
    }
    let mut scope = credential?.split('/');
    let authorization = Authorization {
        access_key_id: scope.next()?,
        date: scope.next()?,
        region: scope.next()?,
        service: scope.next()?,
        signed_headers: signed_headers?.split(';').collect(),
        signature: signature?,
    };
    (scope.next()? == "aws4_request" && scope.next().is_none()).then_some(authorization)
}

fn verify_signature(
    service: &ServiceCredentials,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Fault> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let authorization = header(AUTHORIZATION.as_str()).ok_or_else(|| {
        Fault::new(
            StatusCode::FORBIDDEN,
            "MissingAuthenticationToken",
            "Request is missing Authentication Token",
        )
    })?;
    let auth = parse_authorization(authorization).ok_or_else(|| {
        Fault::incomplete_signature("Authorization header requires Credential, SignedHeaders and Signature")
    })?;
    let invalid_token = || {
        Fault::new(
            StatusCode::FORBIDDEN,
            "InvalidClientTokenId",
            "The security token included in the request is invalid.",
        )
    };
    if auth.access_key_id != service.access_key_id
        || header("x-amz-security-token") != service.session_token.as_ref().map(Secret::expose)
    {
        return Err(invalid_token());
    }
    if auth.service != "sts" || auth.region != StsClient::DEFAULT_REGION {
        return Err(Fault::signature_mismatch(format!(
            "Credential should be scoped to a valid region and service: {}/{}",
            auth.region, auth.service
        )));
    }
    let amz_date = header("x-amz-date").ok_or_else(|| Fault::incomplete_signature("x-amz-date is required"))?;
    let signed_at = NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ")
        .map_err(|_| Fault::incomplete_signature("x-amz-date is not yyyyMMddTHHmmssZ"))?
        .and_utc();
    if !amz_date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err(Fault::signature_mismatch("Credential date does not match x-amz-date"));
    }
    if (Utc::now() - signed_at).abs() > MAX_CLOCK_SKEW {
        return Err(Fault::signature_mismatch("Signature expired"));
    }
    if !auth.signed_headers.contains(&HOST.as_str()) || !auth.signed_headers.contains(&"x-amz-date") {
        return Err(Fault::signature_mismatch("host and x-amz-date must be signed"));
    }
    let mut signed_headers = Vec::with_capacity(auth.signed_headers.len());
    for name in &auth.signed_headers {
        let value =
            header(name).ok_or_else(|| Fault::signature_mismatch(format!("signed header {name} is missing")))?;
        signed_headers.push((*name, value));
    }

    let identity = Credentials::new(
        &service.access_key_id,
        service.secret_access_key.expose(),
        service.session_token.as_ref().map(|token| token.expose().to_owned()),
        None,
        "fake-sts",
    )
    .into();
    let expected = v4::SigningParams::builder()
        .identity(&identity)
        .region(auth.region)
        .name(auth.service)
        .time(SystemTime::from(signed_at))
        .settings(SigningSettings::default())
        .build()
        .map(Into::into)
        .ok()
        .and_then(|params| {
            let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
            let request = SignableRequest::new(
                method.as_str(),
                path,
                signed_headers.into_iter(),
                SignableBody::Bytes(body),
            )
            .ok()?;
            let (_, signature) = sign(request, &params).ok()?.into_parts();
            Some(signature)
        });
    if expected.as_deref() == Some(auth.signature) {
        Ok(())
    } else {
        Err(Fault::signature_mismatch(
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret \
             Access Key and signing method. Consult the service documentation for details.",
        ))
    }
}
