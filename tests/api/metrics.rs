//! `/metrics` after real work: alerts placed, analyses run, jobs queued, tails behind, sockets
//! open, model calls made. Values are checked against what was sent and what the database holds.
//! The exposition's label hygiene: `metrics_labels.rs`; the rules and dashboard: `monitoring.rs`.

use std::collections::BTreeMap;

use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::{connect_async, tungstenite::Message};
use vigil_llm::fake::{FakeOpenAi, Reply};

use crate::{
    helpers::{eventually, spawn_app, spawn_app_with, spawn_app_without_workers, TestApp},
    ingestion::{fixture, post_alert},
    rca::app_with_priced_model,
};

/// One sample of the text exposition.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// A parsed exposition: its samples, and each family's type (`# TYPE` lines).
pub struct Exposition {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
    pub text: String,
}

impl Exposition {
    pub fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
                types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            samples.push(parse_sample(line));
        }
        Self {
            samples,
            types,
            text: text.to_owned(),
        }
    }

    /// The sum of the samples named `name` whose labels include every one of `labels`; panics
    /// when there is none (a missing series is a failure, not a zero).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<&Sample> = self.matching(name, labels).collect();
        assert!(!matching.is_empty(), "no {name}{labels:?} in\n{}", self.text);
        matching.iter().map(|sample| sample.value).sum()
    }

    pub fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |sample| {
            sample.name == name
                && labels
                    .iter()
                    .all(|(key, value)| sample.labels.iter().any(|(k, v)| k == key && v == value))
        })
    }

    /// The values the label `label` takes in `name`'s samples.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut values: Vec<String> = self
            .matching(name, &[])
            .filter_map(|sample| sample.labels.iter().find(|(k, _)| k == label).map(|(_, v)| v.clone()))
            .collect();
        values.sort();
        values.dedup();
        values
    }
}

/// `name{a="x",b="y"} value` (label values may hold escaped quotes, backslashes and newlines).
fn parse_sample(line: &str) -> Sample {
    let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("sample line: {line}"));
    let name = line[..name_end].to_owned();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        loop {
            let (at, c) = chars.next().unwrap_or_else(|| panic!("unterminated labels: {line}"));
            match c {
                '}' => {
                    rest = &inner[at + 1..];
                    break;
                }
                ',' => {}
                '=' => {
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "quoted value: {line}");
                    let mut value = String::new();
                    loop {
                        match chars.next().map(|(_, c)| c) {
                            Some('\\') => match chars.next().map(|(_, c)| c) {
                                Some('n') => value.push('\n'),
                                Some(other) => value.push(other),
                                None => panic!("dangling escape: {line}"),
                            },
                            Some('"') => break,
                            Some(other) => value.push(other),
                            None => panic!("unterminated value: {line}"),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                other => key.push(other),
            }
        }
    }
    let value = rest.split_whitespace().next().expect("a value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().unwrap_or_else(|_| panic!("value of {line}")),
    };
    Sample { name, labels, value }
}

pub async fn scrape(app: &TestApp) -> Exposition {
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    Exposition::parse(&response.text().await.unwrap())
}

async fn incident_status(app: &TestApp, user: &str, id: &str) -> Value {
    let body: Value = app
        .send_as(user, Method::GET, &format!("/api/incidents/{id}"), None)
        .await
        .json()
        .await
        .unwrap();
    body["incident"]["auroraStatus"].clone()
}

#[tokio::test]
async fn alerts_analyses_and_appended_events_are_counted_as_they_happened() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let source = "/api/source_a/alerts";
    let firing = fixture("source_a", "firing");
    let first = post_alert(&app, &user, source, &firing).await;
    let incident = first["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    let mut other = fixture("source_a", "firing");
    other["alerts"][0]["fingerprint"] = json!("metrics-other");
    let second = post_alert(&app, &user, source, &other).await;
    let again = post_alert(&app, &user, source, &firing).await;
    assert_eq!(
        again["alerts"][0]["alert_id"], first["alerts"][0]["alert_id"],
        "a redelivery"
    );
    // The analysis first, so that the recovery below cannot race it.
    eventually("the first analysis to complete", || async {
        (incident_status(&app, &user, &incident).await == "complete").then_some(())
    })
    .await;
    let resolved = post_alert(&app, &user, source, &fixture("source_a", "resolved")).await;
    assert_eq!(resolved["alerts"][0]["incident_id"], json!(incident));
    let mut stray = fixture("source_a", "resolved");
    stray["alerts"][0]["fingerprint"] = json!("never-fired");
    let unmatched = post_alert(&app, &user, source, &stray).await;
    assert!(unmatched["alerts"][0]["incident_id"].is_null());

    let correlated = second["alerts"][0]["correlated"] == true;
    let opened = if correlated { 1.0 } else { 2.0 };
    let metrics = scrape(&app).await;
    let fate = |fate: &str| metrics.sum("vigil_alerts_received_total", &[("source", "source_a"), ("fate", fate)]);
    assert_eq!(fate("opened"), opened);
    assert_eq!(fate("correlated"), 2.0 - opened);
    assert_eq!(fate("deduplicated"), 1.0);
    assert_eq!(fate("resolved"), 1.0);
    assert_eq!(fate("unmatched"), 1.0);
    assert_eq!(fate("refused"), 0.0);
    assert_eq!(
        metrics.sum("vigil_alerts_received_total", &[]),
        5.0,
        "every alert sent, once"
    );
    assert_eq!(
        metrics.sum("vigil_alerts_received_total", &[("source", "source_b")]),
        0.0
    );
    assert_eq!(metrics.sum("vigil_incidents_opened_total", &[]), opened);
    assert_eq!(metrics.sum("vigil_alerts_correlated_total", &[]), 2.0 - opened);
    assert_eq!(metrics.sum("vigil_correlation_score_count", &[]), 2.0 - opened);
    let scores = metrics.sum("vigil_correlation_score_sum", &[]);
    assert!((0.0..=2.0 - opened).contains(&scores), "scores lie in [0, 1]: {scores}");

    // Every incident analysed once, none failed; each attempt timed.
    let incidents = opened as i64;
    let metrics = eventually("every incident to be analysed", || async {
        let complete: i64 = sqlx::query_scalar("SELECT count(*) FROM incidents WHERE aurora_status = 'complete'")
            .fetch_one(&app.db)
            .await
            .unwrap();
        let metrics = scrape(&app).await;
        (complete == incidents && metrics.sum("vigil_analyses_total", &[("outcome", "completed")]) == opened)
            .then_some(metrics)
    })
    .await;
    assert_eq!(metrics.sum("vigil_analyses_total", &[("outcome", "failed")]), 0.0);
    assert_eq!(
        metrics.sum("vigil_analysis_duration_seconds_count", &[]),
        metrics.sum("vigil_analyses_total", &[]),
        "each attempt timed"
    );
    let took = metrics.sum("vigil_analysis_duration_seconds_sum", &[("outcome", "completed")]);
    assert!(took > 0.0 && took < 120.0, "{took} s");

    // Each aggregate type's counter equals the events the store holds of it (once the work
    // still appending after the analysis, if any, is done).
    let (stored, metrics) = eventually("the counters to match the store", || async {
        let stored: Vec<(String, i64)> =
            sqlx::query_as("SELECT aggregate_type, count(*) FROM events GROUP BY aggregate_type")
                .fetch_all(&app.db)
                .await
                .unwrap();
        let metrics = scrape(&app).await;
        let matches = stored.iter().all(|(aggregate_type, count)| {
            metrics.sum("vigil_events_appended_total", &[("aggregate_type", aggregate_type)]) == *count as f64
        }) && metrics.sum("vigil_events_appended_total", &[])
            == stored.iter().map(|(_, count)| *count as f64).sum::<f64>();
        matches.then_some((stored, metrics))
    })
    .await;
    for kind in ["Incident", "ChatSession", "IncidentAnalysis"] {
        assert!(
            stored.iter().any(|(stored, _)| stored == kind),
            "{kind} events: {stored:?}"
        );
    }
    // Two requests (this scrape's pool reads included) have been served from the pool at least.
    assert!(metrics.sum("vigil_db_pool_connections", &[]) > 0.0);
    let idle = metrics.sum("vigil_db_pool_idle_connections", &[]);
    assert!(idle <= metrics.sum("vigil_db_pool_connections", &[]));
    assert_eq!(
        metrics.sum("vigil_db_pool_max_connections", &[]),
        f64::from(app.db.options().get_max_connections())
    );
    assert_eq!(metrics.sum("vigil_database_up", &[]), 1.0);
    assert_eq!(metrics.sum("vigil_job_workers_live", &[]), 1.0, "this app's worker");
}

#[tokio::test]
async fn the_queue_and_the_tails_backlog_show_while_nothing_reads_them() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let metrics = scrape(&app).await;
    for kind in [
        "rca",
        "postmortem",
        "incident_chat",
        "cloud_a_setup",
        "merge_bridged_incidents",
    ] {
        assert_eq!(metrics.sum("vigil_job_queue_depth", &[("kind", kind)]), 0.0, "{kind}");
        assert_eq!(
            metrics.sum("vigil_job_queue_oldest_age_seconds", &[("kind", kind)]),
            0.0
        );
    }
    assert_eq!(metrics.sum("vigil_job_workers_live", &[]), 0.0);

    // The chat sessions projection's tail cannot read while the test holds its lock.
    let mut holder = app.db.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('event-consumer/chat_sessions', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    for title in ["one", "two", "three"] {
        app.create_session(&user, &json!({ "title": title })).await;
    }
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    // The reactor enqueues the analysis; no worker takes it.
    let metrics = eventually("the analysis to be queued", || async {
        let metrics = scrape(&app).await;
        (metrics.sum("vigil_job_queue_depth", &[("kind", "rca")]) == 1.0).then_some(metrics)
    })
    .await;
    let age = metrics.sum("vigil_job_queue_oldest_age_seconds", &[("kind", "rca")]);
    assert!((0.0..60.0).contains(&age), "{age}");
    assert_eq!(metrics.sum("vigil_jobs_running", &[("kind", "rca")]), 0.0);
    assert_eq!(
        metrics.sum("vigil_projection_lag_events", &[("consumer", "chat_sessions")]),
        3.0
    );
    let behind = metrics.sum("vigil_projection_lag_seconds", &[("consumer", "chat_sessions")]);
    assert!(behind > 0.0 && behind < 60.0, "{behind}");
    let consumers: Vec<&str> = app
        .state
        .events
        .consumers
        .iter()
        .chain(&app.state.events.reactors)
        .map(|consumer| consumer.name())
        .collect();
    assert_eq!(
        metrics.label_values("vigil_projection_lag_events", "consumer").len(),
        consumers.len(),
        "one series per consumer: {consumers:?}"
    );

    holder.rollback().await.unwrap();
    eventually("every tail to catch up", || async {
        let metrics = scrape(&app).await;
        consumers
            .iter()
            .all(|consumer| {
                metrics.sum("vigil_projection_lag_events", &[("consumer", consumer)]) == 0.0
                    && metrics.sum("vigil_projection_lag_seconds", &[("consumer", consumer)]) == 0.0
            })
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn sockets_and_their_messages_are_counted_and_closed_ones_leave_the_gauge() {
    let app = spawn_app().await;
    let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
    socket
        .send(Message::text(json!({ "type": "init", "user_id": "u-1" }).to_string()))
        .await
        .unwrap();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), socket.next()).await;
    assert!(matches!(answer, Ok(Some(Ok(Message::Text(_))))), "{answer:?}");
    let metrics = scrape(&app).await;
    assert_eq!(metrics.sum("vigil_websocket_connections", &[]), 1.0);
    assert_eq!(
        metrics.sum("vigil_websocket_messages_total", &[("direction", "in")]),
        1.0
    );
    assert_eq!(
        metrics.sum("vigil_websocket_messages_total", &[("direction", "out")]),
        1.0
    );
    socket.close(None).await.unwrap();
    eventually("the socket to leave the gauge", || async {
        (scrape(&app).await.sum("vigil_websocket_connections", &[]) == 0.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn refusals_are_counted_by_budget() {
    let app = spawn_app_with(|config| config.rate_limit_per_minute = 2).await;
    let statuses =
        futures::future::join_all((0..4).map(|_| app.send_as("limited", Method::GET, "/api/incidents", None))).await;
    let refused = statuses.iter().filter(|response| response.status() == 429).count();
    assert_eq!(refused, 2, "two over the budget of two");
    let metrics = scrape(&app).await;
    assert_eq!(metrics.sum("vigil_rate_limit_refusals_total", &[("scope", "api")]), 2.0);
    assert_eq!(
        metrics.sum("vigil_rate_limit_refusals_total", &[("scope", "chat")]),
        0.0
    );
}

#[tokio::test]
async fn model_calls_count_their_tokens_and_cost() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::text("The checkout-api pool is exhausted.").usage(1200, 300));
    let app = app_with_priced_model(&model).await;
    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let metrics = eventually("the model call to be counted", || async {
        let metrics = scrape(&app).await;
        (metrics.sum(
            "vigil_model_requests_total",
            &[("request_type", "rca"), ("outcome", "ok")],
        ) == 1.0)
            .then_some(metrics)
    })
    .await;
    let tokens = |direction: &str| {
        metrics.sum(
            "vigil_model_tokens_total",
            &[("request_type", "rca"), ("direction", direction)],
        )
    };
    assert_eq!(tokens("input"), 1200.0);
    assert_eq!(tokens("output"), 300.0);
    // 1200 × 0.15 + 300 × 0.6 USD per million tokens.
    let cost = metrics.sum("vigil_model_cost_usd_total", &[("request_type", "rca")]);
    assert!((cost - 0.00036).abs() < 1e-9, "{cost}");
    assert_eq!(metrics.sum("vigil_model_requests_total", &[("outcome", "error")]), 0.0);
    assert_eq!(
        metrics.sum("vigil_model_request_duration_seconds_count", &[("request_type", "rca")]),
        1.0
    );
}

#[tokio::test]
async fn a_database_out_of_reach_reads_as_down_and_the_scrape_still_answers() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    assert_eq!(scrape(&app).await.sum("vigil_database_up", &[]), 1.0);
    app.take_database_away().await;
    // An alert placement cannot write is refused (its sender retries), and counted so.
    let mut later = fixture("source_a", "firing");
    later["alerts"][0]["fingerprint"] = json!("during-the-outage");
    let refused = app
        .send_as(&user, Method::POST, "/api/source_a/alerts", Some(&later))
        .await;
    assert_eq!(refused.status(), 503);
    let started = std::time::Instant::now();
    let metrics = scrape(&app).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(metrics.sum("vigil_database_up", &[]), 0.0);
    assert_eq!(
        metrics.matching("vigil_projection_lag_seconds", &[]).count(),
        0,
        "no stale lag reported for a database that did not answer"
    );
    assert!(
        metrics.sum("http_requests_total", &[]) > 0.0,
        "the rest is still served"
    );
}

#[tokio::test]
async fn a_worker_process_serves_the_metrics_of_the_analyses_it_runs() {
    let app = spawn_app_without_workers().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = (*app.state.config).clone();
    config.worker_metrics_port = Some(port);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(vigil::app::run_worker_process(config, stop.clone()));
    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let worker_metrics = || async {
        let response = app
            .client
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .ok()?;
        Some(Exposition::parse(&response.text().await.ok()?))
    };
    let metrics = eventually("the worker to count the analysis", || async {
        let metrics = worker_metrics().await?;
        (metrics.sum("vigil_analyses_total", &[("outcome", "completed")]) == 1.0).then_some(metrics)
    })
    .await;
    assert_eq!(metrics.sum("vigil_job_workers_live", &[]), 1.0);
    assert_eq!(
        scrape(&app)
            .await
            .sum("vigil_analyses_total", &[("outcome", "completed")]),
        0.0,
        "the serving instance ran none"
    );
    let other = app
        .client
        .get(format!("http://127.0.0.1:{port}/api/incidents"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404, "the metrics alone");
    stop.cancel();
}
