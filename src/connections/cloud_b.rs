//! cloud_b's credential lifecycle: assuming the user's role through STS (with the user's one
//! external ID), storing the temporary credentials, and assuming it again when they expire within
//! the refresh window.

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use vigil_aggregates::connection::Provider;
use vigil_providers::{
    cloud_b::{RoleArn, StsClient, StsError, TemporaryCredentials},
    needs_refresh,
};

use super::ConnectionHandles;
use super::{mark_failed, not_configured, provider_unavailable};
use crate::error::AppError;

const PROVIDER: Provider = Provider::CloudB;
/// STS's default, and the most a role allows unless its owner raised it.
const SESSION_SECONDS: u32 = 3600;

pub fn sts(state: &ConnectionHandles) -> Result<&StsClient, AppError> {
    state.connections.sts.as_ref().ok_or_else(|| not_configured(PROVIDER))
}

pub async fn assume(
    state: &ConnectionHandles,
    user_id: &str,
    role_arn: &RoleArn,
    external_id: &str,
) -> Result<TemporaryCredentials, AppError> {
    sts(state)?
        .assume_role(role_arn, external_id, &session_name(user_id), SESSION_SECONDS)
        .await
        .map_err(sts_error)
}

/// `vigil-<user>`, cut to STS's 64 characters of `[\w+=,.@-]`; it shows in the user's audit log.
fn session_name(user_id: &str) -> String {
    let cleaned: String = user_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(*c))
        .take(58)
        .collect();
    format!("vigil-{cleaned}")
}

pub fn stored_credentials(
    role_arn: &RoleArn,
    external_id: &str,
    read_only_role_arn: Option<&RoleArn>,
    credentials: &TemporaryCredentials,
) -> Value {
    json!({
        "role_arn": role_arn.as_str(),
        "external_id": external_id,
        "read_only_role_arn": read_only_role_arn.map(RoleArn::as_str),
        "credentials": {
            "access_key_id": credentials.access_key_id,
            "secret_access_key": credentials.secret_access_key.expose(),
            "session_token": credentials.session_token.expose(),
            "expiration": credentials.expiration,
        },
    })
}

pub fn sts_error(error: StsError) -> AppError {
    match error {
        StsError::AccessDenied(_) => AppError::bad_request(
            "role_assumption_denied",
            "the role could not be assumed: check that it exists, trusts this service's account and requires your external ID",
        ),
        StsError::Rejected { code, message } => {
            AppError::bad_request("role_assumption_rejected", format!("STS rejected the request: {code}: {message}"))
        }
        StsError::ServiceCredentialsRejected { .. } | StsError::Signing(_) => AppError::Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "provider_not_configured",
            message: "cloud_b rejected this service's own credentials; check its configuration".into(),
        },
        other => provider_unavailable(PROVIDER, other),
    }
}

/// The stored role while its account is connected, with credentials assumed again first when they
/// expire within five minutes.
pub async fn fresh(state: &ConnectionHandles, user_id: &str) -> Result<Option<(Value, DateTime<Utc>)>, AppError> {
    let Some((_, mut stored)) = state.connections.load_connected(&state.db, user_id, PROVIDER).await? else {
        return Ok(None);
    };
    let expiration = stored["credentials"]["expiration"]
        .as_str()
        .and_then(|at| at.parse::<DateTime<Utc>>().ok())
        .unwrap_or_default();
    if !needs_refresh(expiration, Utc::now()) {
        return Ok(Some((stored, expiration)));
    }
    let role_arn: RoleArn = stored["role_arn"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(|_| AppError::Internal(anyhow::anyhow!("stored cloud_b role ARN does not parse")))?;
    let external_id = state.connections.external_id(user_id);
    let credentials = match assume(state, user_id, &role_arn, &external_id).await {
        Ok(credentials) => credentials,
        Err(error) => {
            if matches!(&error, AppError::BadRequest { .. }) {
                mark_failed(state, user_id, PROVIDER, "the role can no longer be assumed").await?;
            }
            return Err(error);
        }
    };
    let read_only: Option<RoleArn> = stored["read_only_role_arn"].as_str().and_then(|arn| arn.parse().ok());
    stored = stored_credentials(&role_arn, &external_id, read_only.as_ref(), &credentials);
    state.connections.resave(user_id, PROVIDER, &stored).await?;
    Ok(Some((stored, credentials.expiration)))
}
