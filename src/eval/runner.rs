//! Runs the replays against an in-process service on a scratch database.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{stream, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use sqlx::{migrate::MigrateDatabase, Postgres};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    report::{IncidentOutcome, ModeReport, Report, ScenarioResult},
    scenario::Scenario,
    EvalOptions, Mode,
};
use crate::{config::Secret, Application, Config};

/// Scenarios replayed at once in tenant mode (each has its own user, so they do not interact).
const PARALLEL_SCENARIOS: usize = 8;
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Replays `scenarios` in each of `options.modes` and scores them. The service runs in this
/// process on a database created for the run and dropped after it, whatever the outcome.
pub async fn run(config: &Config, scenarios: &[Scenario], options: &EvalOptions) -> anyhow::Result<Report> {
    let scratch = ScratchDatabase::create(config.database_url.expose()).await?;
    let outcome = run_on(config, &scratch.url, scenarios, options).await;
    if options.keep_database {
        tracing::warn!(database = %scratch.name(), "the scratch database is kept");
    } else {
        scratch.drop().await;
    }
    outcome
}

async fn run_on(config: &Config, url: &str, scenarios: &[Scenario], options: &EvalOptions) -> anyhow::Result<Report> {
    let app = Application::build(eval_config(config, url)).await?;
    let db = app.state().db.clone();
    let base = format!("http://{}", app.http_addr());
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let client = Client {
        http: reqwest::Client::new(),
        base,
    };
    let mut report = Report {
        verbose: options.verbose,
        ..Report::default()
    };
    for &mode in &options.modes {
        let started = Instant::now();
        let placed = match mode {
            Mode::Tenant => replay_each(&client, scenarios).await?,
            Mode::Storm => replay_storm(&client, scenarios).await?,
        };
        let deadline = Instant::now() + options.timeout();
        drain_jobs(&db, deadline).await?;
        let results = collect(&client, scenarios, placed, deadline).await?;
        report.modes.push(ModeReport {
            mode,
            results,
            elapsed: started.elapsed(),
        });
    }
    shutdown.cancel();
    server.await.context("the service task failed")??;
    Ok(report)
}

/// The service as the replay needs it: its own database, free ports, no shared cache, a cheap
/// password hash and budgets that a replay never reaches.
fn eval_config(config: &Config, url: &str) -> Config {
    let mut config = config.clone();
    config.database_url = Secret::new(url);
    config.bind_address = std::net::Ipv4Addr::LOCALHOST.into();
    config.http_port = 0;
    config.ws_port = 0;
    config.redis_url = None;
    config.auth_mode = crate::config::AuthMode::Trusted;
    config.bcrypt_cost = 4;
    config.run_workers = true;
    config.rate_limit_per_minute = 1_000_000;
    config.anonymous_rate_limit_per_minute = 1_000_000;
    config.ingest_rate_limit_per_minute = 1_000_000;
    config.data_dir = std::env::temp_dir().join(format!("vigil-eval-{}", Uuid::new_v4().simple()));
    config
}

/// Where each event of a scenario went: `None` for a deployment or a failed post.
type Placed = Vec<Vec<Option<EventPlacement>>>;

#[derive(Debug, Clone)]
struct EventPlacement {
    user_id: String,
    incident_id: Option<Uuid>,
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn register(&self, name: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/api/auth/register", self.base))
            .json(&json!({
                "email": format!("eval-{}@example.com", Uuid::new_v4().simple()),
                "password": "evaluation-password",
                "name": name,
            }))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        anyhow::ensure!(status.as_u16() == 201, "registering a user: {status} {body}");
        body["id"]
            .as_str()
            .map(str::to_owned)
            .context("the registration answer has no id")
    }

    /// Posts one event; `None` when the service refused it (scored as an unplaced singleton).
    async fn post(&self, user_id: &str, scenario: &Scenario, index: usize) -> anyhow::Result<EventPlacement> {
        let event = &scenario.events[index];
        let response = self
            .http
            .post(format!("{}{}", self.base, event.source.endpoint()))
            .header("X-User-ID", user_id)
            .json(&event.payload)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.as_u16() != 202 {
            tracing::warn!(scenario = scenario.id, index, %status, %body, "an event was refused");
        }
        let incident_id = body["alerts"][0]["incident_id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok());
        Ok(EventPlacement {
            user_id: user_id.to_owned(),
            incident_id,
        })
    }

    async fn incident(&self, user_id: &str, incident_id: Uuid) -> anyhow::Result<Value> {
        let response = self
            .http
            .get(format!("{}/api/incidents/{incident_id}", self.base))
            .header("X-User-ID", user_id)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "reading incident {incident_id}: {}",
            response.status()
        );
        let mut body: Value = response.json().await?;
        Ok(body["incident"].take())
    }
}

async fn replay_each(client: &Client, scenarios: &[Scenario]) -> anyhow::Result<Placed> {
    stream::iter(scenarios)
        .map(|scenario| async move {
            let user_id = client.register(&scenario.id).await?;
            let mut placed = Vec::with_capacity(scenario.events.len());
            for index in 0..scenario.events.len() {
                placed.push(Some(client.post(&user_id, scenario, index).await?));
            }
            anyhow::Ok(placed)
        })
        .buffered(PARALLEL_SCENARIOS)
        .try_collect()
        .await
}

async fn replay_storm(client: &Client, scenarios: &[Scenario]) -> anyhow::Result<Placed> {
    let user_id = client.register("storm").await?;
    let mut order: Vec<(i64, usize, usize)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(s, scenario)| {
            scenario
                .events
                .iter()
                .enumerate()
                .map(move |(e, event)| (event.offset_s, s, e))
        })
        .collect();
    order.sort();
    let mut placed: Placed = scenarios.iter().map(|s| vec![None; s.events.len()]).collect();
    for (_, s, e) in order {
        placed[s][e] = Some(client.post(&user_id, &scenarios[s], e).await?);
    }
    Ok(placed)
}

/// Waits until no background job (analyses, merges of bridged incidents) is waiting or running:
/// the jobs that follow the events from the tail may not be queued yet, so the queue must be
/// seen empty twice, a poll apart.
async fn drain_jobs(db: &sqlx::PgPool, deadline: Instant) -> anyhow::Result<()> {
    let mut empty_polls = 0;
    while empty_polls < 2 && Instant::now() < deadline {
        tokio::time::sleep(POLL_INTERVAL).await;
        let pending: i64 =
            sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state IN ('available', 'running', 'retryable')")
                .fetch_one(db)
                .await?;
        empty_polls = if pending == 0 { empty_polls + 1 } else { 0 };
    }
    Ok(())
}

/// Waits for every incident's analysis, follows merges, and scores each scenario.
async fn collect(
    client: &Client,
    scenarios: &[Scenario],
    placed: Placed,
    deadline: Instant,
) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut finals: HashMap<Uuid, IncidentOutcome> = HashMap::new();
    for placement in placed.iter().flatten().flatten() {
        if let Some(incident_id) = placement.incident_id {
            if let std::collections::hash_map::Entry::Vacant(entry) = finals.entry(incident_id) {
                entry.insert(settle(client, &placement.user_id, incident_id, deadline).await?);
            }
        }
    }
    Ok(scenarios
        .iter()
        .zip(placed)
        .map(|(scenario, placements)| {
            let ended_in: Vec<Option<&IncidentOutcome>> = placements
                .iter()
                .map(|p| p.as_ref().and_then(|p| p.incident_id).and_then(|id| finals.get(&id)))
                .collect();
            ScenarioResult::score(scenario, &ended_in)
        })
        .collect())
}

/// Polls an incident until its analysis ended (following merges to the incident it ended in),
/// or the deadline passed.
async fn settle(
    client: &Client,
    user_id: &str,
    mut incident_id: Uuid,
    deadline: Instant,
) -> anyhow::Result<IncidentOutcome> {
    loop {
        let detail = client.incident(user_id, incident_id).await?;
        if let Some(target) = detail["mergedIntoIncidentId"].as_str().and_then(|id| id.parse().ok()) {
            incident_id = target;
            continue;
        }
        let status = detail["auroraStatus"].as_str().unwrap_or_default();
        let finished = matches!(status, "complete" | "error");
        if finished || Instant::now() >= deadline {
            return Ok(IncidentOutcome::from_detail(
                incident_id,
                &detail,
                finished && status == "complete",
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A database of its own on the server of `DATABASE_URL`.
struct ScratchDatabase {
    url: String,
}

impl ScratchDatabase {
    async fn create(server_url: &str) -> anyhow::Result<Self> {
        let mut url = url::Url::parse(server_url).context("DATABASE_URL is not a URL")?;
        url.set_path(&format!("/vigil_eval_{}", Uuid::new_v4().simple()));
        let url = url.to_string();
        Postgres::create_database(&url)
            .await
            .context("creating the scratch database")?;
        Ok(Self { url })
    }

    fn name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or_default()
    }

    async fn drop(self) {
        if let Err(error) = Postgres::force_drop_database(&self.url).await {
            tracing::warn!(error = %error, "the scratch database could not be dropped");
        }
    }
}
