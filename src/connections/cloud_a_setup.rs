//! The cloud_a post-auth setup (spec: 7 steps), run as a background job after a successful
//! callback. Progress is the job's `progress`: `{"step", "total_steps", "status"}`.
//!
//! Steps 2 to 4 (enable APIs, create service accounts, configure IAM) are recorded as done
//! without calls to the provider yet: the agent's tools that need them do not exist so far.

use async_trait::async_trait;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use vigil_aggregates::connection::{connection_id, ConnectionCommand, Provider};
use vigil_secrets::cloud_a::{CloudAClient, CloudAError, CloudATokens, Freshness, Project};

use super::ConnectionHandles;
use crate::{
    event_store::{execute, Actor},
    jobs::{JobContext, JobFailure, JobHandler},
};

pub use crate::jobs::kinds::CLOUD_A_SETUP_JOB;
pub const TOTAL_STEPS: u32 = 7;

/// What each step reports while it runs.
pub const STEPS: [&str; TOTAL_STEPS as usize] = [
    "Fetching your projects",
    "Enabling required APIs",
    "Creating service accounts",
    "Configuring IAM permissions",
    "Setting up billing exports",
    "Initialising project metadata",
    "Completing setup",
];

/// The APIs the agent reads through, enabled on the connected project (step 2).
pub const REQUIRED_SERVICES: [&str; 5] = [
    "cloudresourcemanager.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
];
/// The service account the agent acts as in the connected project (step 3), and its role there
/// (step 4): read-only, as the agent changes infrastructure only with the user's own credentials
/// and confirmation.
pub const AGENT_SERVICE_ACCOUNT: &str = "vigil-agent";
pub const AGENT_ROLE: &str = "roles/viewer";

#[derive(Debug, Serialize, Deserialize)]
pub struct SetupPayload {
    pub user_id: String,
}

pub struct CloudASetupHandler {
    pub state: ConnectionHandles,
}

/// The user's cloud_a tokens, refreshed first when they expire within the refresh window (and
/// then saved again).
pub async fn fresh_tokens(
    state: &ConnectionHandles,
    client: &CloudAClient,
    user_id: &str,
) -> Result<Option<(crate::connections::TokenRecord, CloudATokens)>, FreshError> {
    fresh_oauth_tokens(state, client, Provider::CloudA, user_id).await
}

/// [`fresh_tokens`] of any provider connected by the authorization-code flow (cloud_a, cloud_f).
pub async fn fresh_oauth_tokens(
    state: &ConnectionHandles,
    client: &CloudAClient,
    provider: Provider,
    user_id: &str,
) -> Result<Option<(crate::connections::TokenRecord, CloudATokens)>, FreshError> {
    let connectors = &state.connections;
    let Some((record, stored)) = connectors
        .load(&state.db, user_id, provider)
        .await
        .map_err(FreshError::Store)?
    else {
        return Ok(None);
    };
    let mut tokens: CloudATokens = serde_json::from_value(stored)
        .map_err(|_| FreshError::Store(anyhow::anyhow!("stored OAuth credentials have an unexpected shape").into()))?;
    if client
        .fresh_access_token(&mut tokens, Utc::now())
        .await
        .map_err(FreshError::OAuth)?
        == Freshness::Refreshed
    {
        let value = serde_json::to_value(&tokens).expect("tokens serialise");
        connectors
            .resave(user_id, provider, &value)
            .await
            .map_err(FreshError::Store)?;
    }
    Ok(Some((record, tokens)))
}

#[derive(Debug, thiserror::Error)]
pub enum FreshError {
    #[error(transparent)]
    OAuth(CloudAError),
    #[error("{0}")]
    Store(crate::error::AppError),
}

#[async_trait]
impl JobHandler for CloudASetupHandler {
    fn kind(&self) -> &'static str {
        CLOUD_A_SETUP_JOB
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let SetupPayload { user_id } = job.payload_as()?;
        let state = &self.state;
        let client = state
            .connections
            .cloud_a
            .as_ref()
            .ok_or_else(|| JobFailure::permanent("cloud_a is not configured"))?;
        let progress = |step: u32| async move {
            job.checkpoint().await?;
            job.report_progress(json!({
                "step": step,
                "total_steps": TOTAL_STEPS,
                "status": STEPS[step as usize - 1],
            }))
            .await?;
            Ok::<(), JobFailure>(())
        };

        progress(1).await?;
        let (_, tokens) = match fresh_tokens(state, client, &user_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(JobFailure::permanent("the user has no cloud_a credentials")),
            Err(FreshError::OAuth(error @ (CloudAError::Network(_) | CloudAError::Api(_)))) => {
                return Err(JobFailure::retryable(error))
            }
            Err(error) => return Err(JobFailure::permanent(error)),
        };
        let projects: Vec<_> = client
            .list_projects(&tokens.access_token)
            .await
            .map_err(setup_failure)?
            .into_iter()
            .filter(|project| project.lifecycle_state.as_deref().is_none_or(|s| s == "ACTIVE"))
            .collect();
        if projects.is_empty() {
            return Err(JobFailure::permanent(
                "no active cloud_a project is visible to this account",
            ));
        }
        for project in &projects {
            let command = ConnectionCommand::Begin {
                user_id: user_id.clone(),
                provider: Provider::CloudA,
                account_id: project.project_id.clone(),
                account_name: project.name.clone(),
                at: Utc::now(),
            };
            connection_command(state, &user_id, &project.project_id, command).await?;
        }

        match configure(state, client, &user_id, &tokens, &projects, &progress).await {
            Ok(outcome) => Ok(outcome),
            Err(failure) => {
                // A setup that will not run again leaves its connections in `error` (reconnection
                // needed), not pending for ever; a cancelled one was disconnected by the user.
                let last = match &failure {
                    JobFailure::Permanent(_) => true,
                    JobFailure::Retryable(_) => job.is_last_attempt(),
                    JobFailure::Cancelled(_) => false,
                };
                if last {
                    for project in &projects {
                        let command = ConnectionCommand::Fail {
                            user_id: user_id.clone(),
                            reason: format!("cloud_a setup failed: {failure}"),
                            at: Utc::now(),
                        };
                        connection_command(state, &user_id, &project.project_id, command).await?;
                    }
                }
                Err(failure)
            }
        }
    }
}

/// Steps 2 to 7, once the projects are known and their connections pending.
async fn configure<F, Fut>(
    state: &ConnectionHandles,
    client: &CloudAClient,
    user_id: &str,
    tokens: &CloudATokens,
    projects: &[Project],
    progress: &F,
) -> Result<Value, JobFailure>
where
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = Result<(), JobFailure>>,
{
    let first = &projects[0];
    let token = &tokens.access_token;
    progress(2).await?;
    client
        .enable_services(token, &first.project_id, &REQUIRED_SERVICES)
        .await
        .map_err(setup_failure)?;
    progress(3).await?;
    let service_account = client
        .ensure_service_account(
            token,
            &first.project_id,
            AGENT_SERVICE_ACCOUNT,
            "vigil agent (read-only)",
        )
        .await
        .map_err(setup_failure)?;
    progress(4).await?;
    client
        .grant_project_role(
            token,
            &first.project_id,
            AGENT_ROLE,
            &format!("serviceAccount:{service_account}"),
        )
        .await
        .map_err(setup_failure)?;

    progress(5).await?;
    let has_billing = client
        .has_billing(token, &first.project_id)
        .await
        .map_err(setup_failure)?;

    progress(6).await?;
    let metadata = json!({
        "project_id": first.project_id,
        "project_name": first.name,
        "projects": projects.iter().map(|p| &p.project_id).collect::<Vec<_>>(),
        "has_billing": has_billing,
        "service_account": service_account,
    });
    crate::connections::tokens::merge_token_data(&state.db, user_id, Provider::CloudA.as_str(), &metadata).await?;

    progress(7).await?;
    let Some(record) = crate::connections::tokens::find(&state.db, user_id, Provider::CloudA.as_str()).await? else {
        return Err(JobFailure::permanent(
            "the cloud_a credentials were removed during setup",
        ));
    };
    let secret_ref = record.secret_ref.unwrap_or_default();
    for project in projects {
        // Only what is still pending: a project the user disconnected meanwhile stays so.
        let command = ConnectionCommand::CompleteSetup {
            user_id: user_id.to_owned(),
            secret_ref: secret_ref.clone(),
            at: Utc::now(),
        };
        connection_command(state, user_id, &project.project_id, command).await?;
    }
    Ok(json!({ "projects": projects.len(), "project_id": first.project_id, "has_billing": has_billing }))
}

async fn connection_command(
    state: &ConnectionHandles,
    user_id: &str,
    project_id: &str,
    command: ConnectionCommand,
) -> Result<(), JobFailure> {
    let id = connection_id(user_id, Provider::CloudA, project_id);
    execute(&state.events.connections, &id, command, Actor::System("cloud_a_setup"))
        .await
        .map_err(|error| JobFailure::retryable(format!("recording the connection: {error}")))
}

/// Network trouble, a server error, throttling or a concurrent IAM change (409) may pass on a
/// retry; any other refusal (403: the user may not enable APIs, say) will not.
fn setup_failure(error: CloudAError) -> JobFailure {
    match error {
        CloudAError::Api(status) if (400..500).contains(&status) && status != 409 && status != 429 => {
            JobFailure::permanent(error)
        }
        CloudAError::Network(_) | CloudAError::Api(_) | CloudAError::UnexpectedResponse(_) => {
            JobFailure::retryable(error)
        }
        other => JobFailure::permanent(other),
    }
}
