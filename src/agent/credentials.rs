//! The user's connected cloud credentials as the environment of a provider CLI. Each program
//! gets its own provider's standard variables, fresh (tokens within the refresh window are renewed
//! first), and nothing else. A provider program the user has not connected does not run at all:
//! with no credentials in its environment it could fall back on the server's own identity (an
//! instance role, say). Connected means a `connected` connection: credentials kept after a DELETE
//! (for a reconnect), or behind a failed or pending connection, are not used.

use serde_json::Value;
use vigil_aggregates::connection::{ConnectionStatus, Provider};
use vigil_projections::connections as read;

use crate::{
    connections::{self as conn, cloud_a_setup::fresh_tokens, cloud_b},
    state::AppState,
};

/// What the command may do with the credentials: read-only work (ask mode, the RCA) uses the
/// read-only identity a connection carries when it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

pub type Environment = Vec<(&'static str, String)>;

/// The provider whose credentials `program` acts with; `None` for programs of no provider.
pub fn provider_of(program: &str) -> Option<Provider> {
    match program {
        "gcloud" | "gsutil" | "bq" => Some(Provider::CloudA),
        "aws" => Some(Provider::CloudB),
        "az" => Some(Provider::CloudC),
        "scw" => Some(Provider::CloudD),
        _ => None,
    }
}

fn not_connected_message(program: &str, provider: Provider) -> String {
    format!("{program} acts with a {provider} connection, and {provider} is not connected: connect it first")
}

fn unavailable_message(provider: Provider, error: impl std::fmt::Display) -> String {
    format!("the {provider} credentials are unavailable: {error}")
}

/// Whether the command `argv` may act as the user: a provider program only while the user's
/// credentials for its provider serve a `connected` account (see
/// [`conn::credentials_account`]), and every account of that provider the command names is
/// connected too. The error is for the model and the user.
pub async fn check_connected(state: &AppState, user_id: &str, argv: &[String]) -> Result<(), String> {
    let program = &argv[0];
    let Some(provider) = provider_of(program) else {
        return Ok(());
    };
    let record = conn::tokens::find(&state.db, user_id, provider.as_str())
        .await
        .map_err(|error| unavailable_message(provider, error))?
        .ok_or_else(|| not_connected_message(program, provider))?;
    conn::credentials_account(&state.db, &record)
        .await
        .map_err(|error| unavailable_message(provider, error))?
        .ok_or_else(|| not_connected_message(program, provider))?;
    let named = named_accounts(provider, argv);
    if named.is_empty() {
        return Ok(());
    }
    let rows = read::of_provider(&state.db, user_id, provider.as_str())
        .await
        .map_err(|error| unavailable_message(provider, error))?;
    let is_connected = |account: &str| {
        rows.iter().any(|row| {
            row.status == ConnectionStatus::Connected.as_str()
                && (row.account_id == account || row.account_name.as_deref() == Some(account))
        })
    };
    match named.into_iter().find(|account| !is_connected(account)) {
        Some(account) => Err(format!(
            "{program} names the {provider} account {account}, which is not connected: connect it first"
        )),
        None => Ok(()),
    }
}

/// The accounts of its provider a command names: gcloud's `--project`, az's `--subscription`,
/// scw's `organization-id=` (either `--flag value` or `--flag=value`).
fn named_accounts(provider: Provider, argv: &[String]) -> Vec<&str> {
    let flag = match provider {
        Provider::CloudA => "--project",
        Provider::CloudC => "--subscription",
        Provider::CloudD => "organization-id",
        _ => return Vec::new(),
    };
    let mut named = Vec::new();
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        if word == flag {
            named.extend(words.next().map(String::as_str));
        } else if let Some(value) = word.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')) {
            named.push(value);
        }
    }
    named
}

/// The variables the command `argv` needs to act as the user; an error (for the model and the
/// user) when [`check_connected`] refuses it.
pub async fn environment(
    state: &AppState,
    user_id: &str,
    argv: &[String],
    access: Access,
) -> Result<Environment, String> {
    check_connected(state, user_id, argv).await?;
    let program = &argv[0];
    let Some(provider) = provider_of(program) else {
        return Ok(Vec::new());
    };
    let not_connected = || not_connected_message(program, provider);
    let unavailable = |error: &dyn std::fmt::Display| unavailable_message(provider, error);
    // Connected, as `check_connected` found above.
    let stored = || async {
        let found = state.connections.load(&state.db, user_id, provider).await;
        Ok::<Value, String>(found.map_err(|error| unavailable(&error))?.ok_or_else(not_connected)?.1)
    };
    match provider {
        Provider::CloudA => {
            let client = state.connections.cloud_a.as_ref().ok_or_else(not_connected)?;
            let (_, tokens) = fresh_tokens(&state.connection_handles(), client, user_id)
                .await
                .map_err(|error| unavailable(&error))?
                .ok_or_else(not_connected)?;
            Ok(vec![(
                "CLOUDSDK_AUTH_ACCESS_TOKEN",
                tokens.access_token.expose().clone(),
            )])
        }
        Provider::CloudB => {
            let (stored, _) = cloud_b::fresh(&state.connection_handles(), user_id)
                .await
                .map_err(|error| unavailable(&error))?
                .ok_or_else(not_connected)?;
            let read_only_role = stored["read_only_role_arn"].as_str().and_then(|arn| arn.parse().ok());
            let (key_id, secret, token) = match (access, read_only_role) {
                (Access::ReadOnly, Some(role)) => {
                    let external_id = state.connections.external_id(user_id);
                    let assumed = cloud_b::assume(&state.connection_handles(), user_id, &role, &external_id)
                        .await
                        .map_err(|error| unavailable(&error))?;
                    (
                        assumed.access_key_id,
                        assumed.secret_access_key.expose().to_owned(),
                        assumed.session_token.expose().to_owned(),
                    )
                }
                _ => {
                    let field = |name: &str| text(&stored["credentials"], name);
                    (
                        field("access_key_id"),
                        field("secret_access_key"),
                        field("session_token"),
                    )
                }
            };
            Ok(vec![
                ("AWS_ACCESS_KEY_ID", key_id),
                ("AWS_SECRET_ACCESS_KEY", secret),
                ("AWS_SESSION_TOKEN", token),
                // Never the server's own identity from the instance metadata service.
                ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ])
        }
        Provider::CloudC => {
            let stored = stored().await?;
            let principal = match (access, stored.get("read_only_credentials")) {
                (Access::ReadOnly, Some(read_only)) if read_only.is_object() => read_only,
                _ => &stored,
            };
            Ok(vec![
                ("AZURE_TENANT_ID", text(&stored, "tenant_id")),
                ("AZURE_CLIENT_ID", text(principal, "client_id")),
                ("AZURE_CLIENT_SECRET", text(principal, "client_secret")),
                ("AZURE_SUBSCRIPTION_ID", text(&stored, "subscription_id")),
            ])
        }
        Provider::CloudD => {
            let stored = stored().await?;
            Ok(vec![
                ("SCW_ACCESS_KEY", text(&stored, "access_key")),
                ("SCW_SECRET_KEY", text(&stored, "secret_key")),
                ("SCW_DEFAULT_ORGANIZATION_ID", text(&stored, "organization_id")),
                ("SCW_DEFAULT_PROJECT_ID", text(&stored, "project_id")),
            ])
        }
        Provider::CloudE | Provider::CloudF => Ok(Vec::new()),
    }
}

fn text(value: &Value, name: &str) -> String {
    value.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_map_to_their_providers() {
        assert_eq!(provider_of("aws"), Some(Provider::CloudB));
        assert_eq!(provider_of("gcloud"), Some(Provider::CloudA));
        assert_eq!(provider_of("az"), Some(Provider::CloudC));
        assert_eq!(provider_of("scw"), Some(Provider::CloudD));
        assert_eq!(provider_of("kubectl"), None);
    }

    #[test]
    fn commands_name_accounts_by_their_providers_flags() {
        let argv = |command: &str| crate::agent::cli::parse(command).unwrap();
        let gcloud = argv("gcloud compute instances list --project p-1 --project=p-2 --format json");
        assert_eq!(named_accounts(Provider::CloudA, &gcloud), ["p-1", "p-2"]);
        let az = argv("az vm list --subscription s-1");
        assert_eq!(named_accounts(Provider::CloudC, &az), ["s-1"]);
        let scw = argv("scw instance server list organization-id=o-1 project-id=p-1");
        assert_eq!(named_accounts(Provider::CloudD, &scw), ["o-1"]);
        assert!(named_accounts(Provider::CloudB, &argv("aws s3 ls --profile x")).is_empty());
        assert!(named_accounts(Provider::CloudA, &argv("gcloud projects list --project")).is_empty());
    }
}
