//! The agent's tools. Every tool reads only the asking user's rows; `cloud_cli` is the one that can
//! change anything, and only through [`crate::agent::cli`]'s allow-list and classification.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;
use vigil_llm::ToolSpec;
use vigil_projections::incidents as read;

use super::{
    cli::{self, CliConfig, CommandKind},
    credentials::{self, Access},
};
use crate::state::AppState;

/// Most rows a listing tool returns, so one answer cannot flood the model's context.
const MAX_ROWS: i64 = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    SearchIncidents,
    GetIncident,
    CorrelatedAlerts,
    RecentDeployments,
    SimilarIncidents,
    CloudCli,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid input for {tool}: {message}")]
    InvalidInput { tool: &'static str, message: String },
    #[error("{0}")]
    Failed(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

const CLI_NOT_CONFIGURED: &str = "the cloud command tool is not configured on this server";

impl Tool {
    pub const ALL: [Tool; 6] = [
        Tool::SearchIncidents,
        Tool::GetIncident,
        Tool::CorrelatedAlerts,
        Tool::RecentDeployments,
        Tool::SimilarIncidents,
        Tool::CloudCli,
    ];

    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Tool::SearchIncidents => "search_incidents",
            Tool::GetIncident => "get_incident",
            Tool::CorrelatedAlerts => "correlated_alerts",
            Tool::RecentDeployments => "recent_deployments",
            Tool::SimilarIncidents => "similar_incidents",
            Tool::CloudCli => "cloud_cli",
        }
    }

    /// The tools a model may be offered: `cloud_cli` only when a CLI directory is configured.
    pub fn specs(cli: Option<&CliConfig>) -> Vec<ToolSpec> {
        Self::ALL
            .into_iter()
            .filter(|tool| *tool != Tool::CloudCli || cli.is_some())
            .map(|tool| tool.spec(cli))
            .collect()
    }

    fn spec(self, cli: Option<&CliConfig>) -> ToolSpec {
        let (description, parameters) = match self {
            Tool::SearchIncidents => (
                "Search the user's incidents by words of their alert title or service; newest first.".to_owned(),
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "words to look for; empty lists the newest"},
                    "status": {"type": "string", "enum": ["investigating", "analyzed", "resolved", "merged"]}}}),
            ),
            Tool::GetIncident => (
                "One incident in full: status, severity, service, times, analysis summary.".to_owned(),
                json!({"type": "object", "required": ["incident_id"],
                    "properties": {"incident_id": {"type": "string", "format": "uuid"}}}),
            ),
            Tool::CorrelatedAlerts => (
                "The alerts correlated into an incident, with their correlation scores.".to_owned(),
                json!({"type": "object", "required": ["incident_id"],
                    "properties": {"incident_id": {"type": "string", "format": "uuid"}}}),
            ),
            Tool::RecentDeployments => (
                "Deployments (source_f, source_g) of the user's services in the last hours, newest first.".to_owned(),
                json!({"type": "object", "properties": {
                    "service": {"type": "string"},
                    "hours": {"type": "integer", "minimum": 1, "maximum": 168, "default": 24}}}),
            ),
            Tool::SimilarIncidents => (
                "Past incidents whose titles are most similar to a text, from the vector store.".to_owned(),
                json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}),
            ),
            Tool::CloudCli => (
                format!(
                    "Run a cloud provider CLI command with the user's connected credentials. Allowed programs: {}. \
                     Read-only commands run at once; commands that change infrastructure need the user's confirmation \
                     and are refused in ask mode.",
                    cli.map(|cli| cli.allowed.join(", ")).unwrap_or_default()
                ),
                json!({"type": "object", "required": ["command"], "properties": {
                    "command": {"type": "string", "description": "e.g. \"aws ec2 describe-instances --region eu-west-1\""}}}),
            ),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description,
            parameters,
        }
    }

    /// Whether running the tool with `input` may change infrastructure (and so needs a confirmation).
    pub fn classify(self, input: &Value) -> Result<CommandKind, ToolError> {
        match self {
            Tool::CloudCli => Ok(cli::classify(&cli::parse(command_of(input)?).map_err(|message| {
                ToolError::InvalidInput {
                    tool: self.name(),
                    message,
                }
            })?)),
            _ => Ok(CommandKind::ReadOnly),
        }
    }

    /// Refusals that need nothing of the user, decided before a confirmation is asked for:
    /// `cloud_cli` runs only where it is configured, and acts only through a connected account of
    /// its program's provider (checked again when it runs, as the user may disconnect meanwhile).
    pub async fn check(self, state: &AppState, user_id: &str, input: &Value) -> Result<(), ToolError> {
        if self != Tool::CloudCli {
            return Ok(());
        }
        if state.agent_cli.is_none() {
            return Err(ToolError::Failed(CLI_NOT_CONFIGURED.into()));
        }
        let argv = cli::parse(command_of(input)?).map_err(|message| ToolError::InvalidInput {
            tool: self.name(),
            message,
        })?;
        credentials::check_connected(state, user_id, &argv)
            .await
            .map_err(ToolError::Failed)
    }

    pub async fn run(
        self,
        state: &AppState,
        user_id: &str,
        session_id: Uuid,
        access: Access,
        input: &Value,
    ) -> Result<Value, ToolError> {
        let db = &state.db;
        match self {
            Tool::SearchIncidents => {
                #[derive(Deserialize)]
                struct Input {
                    #[serde(default)]
                    query: String,
                    status: Option<String>,
                }
                let input: Input = self.input(input)?;
                search_incidents(db, user_id, &input.query, input.status.as_deref()).await
            }
            Tool::GetIncident => {
                let id = self.incident_id(input)?;
                let incident = read::find_incident(db, user_id, id)
                    .await?
                    .ok_or_else(|| ToolError::Failed(format!("no incident {id} among the user's incidents")))?;
                Ok(incident_json(&incident, true))
            }
            Tool::CorrelatedAlerts => {
                let id = self.incident_id(input)?;
                if read::find_incident(db, user_id, id).await?.is_none() {
                    return Err(ToolError::Failed(format!(
                        "no incident {id} among the user's incidents"
                    )));
                }
                let alerts = read::correlated_alerts(db, id).await?;
                Ok(Value::Array(
                    alerts
                        .into_iter()
                        .map(|alert| {
                            json!({
                                "title": alert.alert_title, "service": alert.alert_service,
                                "severity": alert.alert_severity, "source": alert.source_type,
                                "fired_at": alert.fired_at, "strategy": alert.correlation_strategy,
                                "score": alert.correlation_score,
                            })
                        })
                        .collect(),
                ))
            }
            Tool::RecentDeployments => {
                #[derive(Deserialize)]
                struct Input {
                    service: Option<String>,
                    hours: Option<i64>,
                }
                let input: Input = self.input(input)?;
                let hours = input.hours.unwrap_or(24).clamp(1, 168);
                recent_deployments(db, user_id, input.service.as_deref(), hours).await
            }
            Tool::SimilarIncidents => {
                #[derive(Deserialize)]
                struct Input {
                    text: String,
                }
                let input: Input = self.input(input)?;
                let similar: Vec<Value> = state
                    .vectors
                    .nearest_incidents(db, user_id, &input.text, 5)
                    .await?
                    .iter()
                    .map(|(incident, similarity)| {
                        let mut entry = incident_json(incident, false);
                        entry["similarity"] = json!((f64::from(*similarity) * 100.0).round() / 100.0);
                        entry
                    })
                    .collect();
                Ok(Value::Array(similar))
            }
            Tool::CloudCli => {
                let Some(cli) = state.agent_cli.as_ref() else {
                    return Err(ToolError::Failed(CLI_NOT_CONFIGURED.into()));
                };
                let argv = cli::parse(command_of(input)?).map_err(|message| ToolError::InvalidInput {
                    tool: self.name(),
                    message,
                })?;
                // Boxed: the credential refreshes are deep futures, and the agent's own is deep already.
                let environment = Box::pin(credentials::environment(state, user_id, &argv, access))
                    .await
                    .map_err(ToolError::Failed)?;
                let timeout = Duration::from_secs(state.config.agent_tool_timeout_secs);
                let output = cli
                    .run(&argv, &state.config.data_dir, session_id, &environment, timeout)
                    .await
                    .map_err(ToolError::Failed)?;
                Ok(json!({ "exit_code": output.exit_code, "stdout": output.stdout, "stderr": output.stderr }))
            }
        }
    }

    fn input<T: serde::de::DeserializeOwned>(self, input: &Value) -> Result<T, ToolError> {
        T::deserialize(input).map_err(|error| ToolError::InvalidInput {
            tool: self.name(),
            message: error.to_string(),
        })
    }

    fn incident_id(self, input: &Value) -> Result<Uuid, ToolError> {
        #[derive(Deserialize)]
        struct Input {
            incident_id: Uuid,
        }
        self.input::<Input>(input).map(|input| input.incident_id)
    }
}

fn command_of(input: &Value) -> Result<&str, ToolError> {
    input
        .get("command")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidInput {
            tool: "cloud_cli",
            message: "command (a string) is required".into(),
        })
}

fn incident_json(incident: &read::IncidentRow, with_summary: bool) -> Value {
    let mut value = json!({
        "id": incident.id, "title": incident.alert_title, "status": incident.status,
        "severity": incident.severity, "service": incident.alert_service,
        "environment": incident.alert_environment, "source": incident.source_type,
        "started_at": incident.started_at, "correlated_alert_count": incident.correlated_alert_count,
        "analysis_status": incident.aurora_status,
    });
    if with_summary {
        value["summary"] = json!(incident.aurora_summary);
        value["affected_services"] = json!(incident.affected_services);
        value["source_url"] = json!(incident.alert_source_url);
    }
    value
}

async fn search_incidents(
    db: &sqlx::PgPool,
    user_id: &str,
    query: &str,
    status: Option<&str>,
) -> Result<Value, ToolError> {
    // Words of three letters or more, so "the" or "is" in a question do not match everything.
    let patterns: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
        .filter(|word| word.chars().count() >= 3)
        .map(|word| {
            format!(
                "%{}%",
                word.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
            )
        })
        .collect();
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM incidents
         WHERE user_id = $1 AND ($2::text IS NULL OR status = $2)
           AND (cardinality($3::text[]) = 0
                OR alert_title ILIKE ANY ($3) OR alert_service ILIKE ANY ($3))
         ORDER BY started_at DESC LIMIT $4",
    )
    .bind(user_id)
    .bind(status)
    .bind(&patterns)
    .bind(MAX_ROWS)
    .fetch_all(db)
    .await?;
    let found = read::find_incidents(db, user_id, &ids).await?;
    Ok(Value::Array(
        found.iter().map(|incident| incident_json(incident, false)).collect(),
    ))
}

#[derive(sqlx::FromRow)]
struct Deployment {
    source_type: String,
    alert_title: String,
    alert_service: Option<String>,
    alert_environment: Option<String>,
    resolved: bool,
    fired_at: DateTime<Utc>,
}

async fn recent_deployments(
    db: &sqlx::PgPool,
    user_id: &str,
    service: Option<&str>,
    hours: i64,
) -> Result<Value, ToolError> {
    let rows: Vec<Deployment> = sqlx::query_as(
        "SELECT source_type, alert_title, alert_service, alert_environment, resolved, fired_at FROM source_alerts
         WHERE user_id = $1 AND kind = 'deployment' AND fired_at > now() - make_interval(hours => $2::int)
           AND ($3::text IS NULL OR alert_service = $3)
         ORDER BY fired_at DESC LIMIT $4",
    )
    .bind(user_id)
    .bind(hours as i32)
    .bind(service)
    .bind(MAX_ROWS)
    .fetch_all(db)
    .await?;
    Ok(Value::Array(
        rows.into_iter()
            .map(|row| {
                json!({
                    "source": row.source_type, "title": row.alert_title, "service": row.alert_service,
                    "environment": row.alert_environment,
                    "outcome": if row.resolved { "succeeded" } else { "failed" },
                    "at": row.fired_at,
                })
            })
            .collect(),
    ))
}
