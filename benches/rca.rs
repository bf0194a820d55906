//! One root-cause analysis without a model, end to end, on a realistic incident: p50/p99.
//!
//!   cargo bench --bench rca            (DATABASE_URL: a PostgreSQL server; `make bench` sets it)
//!   RCA_BENCH_RUNS=500 RCA_BENCH_NEARBY=200 cargo bench --bench rca
//!
//! It creates a database of its own on `DATABASE_URL`'s server, starts the service in-process
//! (workers off) and seeds one tenant through the real ingestion endpoints: a failed deployment
//! of inventory-service, then an incident of five alerts (the service's own failures and its
//! callers' errors naming it), and `RCA_BENCH_NEARBY` (200) other alerts of the same minutes from
//! 40 unrelated services, which the analysis reads (up to 200 within ±15 minutes) and must rule
//! out. Then it times:
//! 1. `analysis`: what one RCA job computes, `RCA_BENCH_RUNS` (200) times: the reads (incident,
//!    correlated alerts, linked changes, the alerts re-parsed from their payloads, the nearby
//!    alerts, similar past incidents) and the built-in analyst (ledger, thoughts, summary);
//! 2. `analyst`: the analyst alone on the facts read once (pure CPU), 10× as many times;
//! 3. `job`: every queued RCA job of the seeded tenant (the incident and the ones the nearby
//!    alerts opened, each reading its own ±15 minutes) run by a worker, one at a time, with all
//!    their writes (thoughts, suggestions, verdict, chat session): from its claim
//!    (`heartbeat_at`) to `finished_at`.

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{json, Value};
use support::env_or;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use vigil::{
    analysis::{analyst, rca::RcaHandler},
    Application, Config,
};

// The allocator `vigil serve` runs with (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ALERT_FIXTURE: &str = include_str!("../tests/fixtures/alerts/source_a/firing.json");
const DEPLOY_FIXTURE: &str = include_str!("../tests/fixtures/alerts/source_f/firing.json");
const USER: &str = "rca-bench";

/// `(p50, p99, max)` in milliseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let at = |p: f64| {
        let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[index].as_secs_f64() * 1000.0
    };
    (at(0.50), at(0.99), at(1.0))
}

fn report(name: &str, samples: Vec<Duration>) {
    let runs = samples.len();
    let (p50, p99, max) = percentiles(samples);
    println!("rca {name:<9} runs {runs:>5}   p50 {p50:>8.3} ms   p99 {p99:>8.3} ms   max {max:>8.3} ms");
}

/// A source_a notification of one alert.
fn alert(service: &str, name: &str, description: &str, minutes_ago: i64, fingerprint: usize) -> Value {
    let mut body: Value = serde_json::from_str(ALERT_FIXTURE).unwrap();
    let element = &mut body["alerts"][0];
    element["fingerprint"] = json!(format!("{fingerprint:016x}"));
    element["labels"] = json!({ "alertname": name, "service": service, "namespace": "shop",
        "severity": "critical", "environment": "production" });
    element["annotations"] = json!({ "summary": format!("{service}: {name}"), "description": description });
    element["startsAt"] = json!((Utc::now() - chrono::Duration::minutes(minutes_ago)).to_rfc3339());
    body
}

/// The incident: inventory-service's failed deploy, its crash loop, and its callers' errors.
fn incident_alerts() -> Vec<Value> {
    vec![
        alert(
            "inventory-service",
            "InventoryServiceHighErrorRate",
            "5xx rate of inventory-service has been above 5% for 5 minutes (current 12.4%).",
            6,
            1,
        ),
        alert(
            "inventory-service",
            "InventoryServicePodsCrashLooping",
            "pod inventory-service-7d9c8-abcde is in CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE",
            5,
            2,
        ),
        alert(
            "storefront",
            "StorefrontHighErrorRate",
            "GET /products 502: calls to inventory-service failed: connect: connection refused",
            5,
            3,
        ),
        alert(
            "checkout-api",
            "CheckoutReserveStockFailing",
            "reserve stock failed: dial tcp inventory-service.shop.svc.cluster.local:8080: i/o timeout",
            4,
            4,
        ),
        alert(
            "inventory-service",
            "InventoryServiceReadiness",
            "readiness probe failed for 3 of 6 replicas of inventory-service",
            4,
            5,
        ),
    ]
}

/// Alerts of the same minutes from 40 services unrelated to the incident: batch jobs, hosts,
/// queues, searches, a few with distinctive failures of their own.
fn nearby_alerts(count: usize) -> Vec<Value> {
    let kinds = [
        (
            "analytics-etl",
            "EtlCpuHigh",
            "CPU utilization 93% on analytics-etl-{n} for 10 minutes",
        ),
        (
            "backup-host",
            "BackupDiskFilling",
            "disk /srv/backups on backup-host-{n} is 91% full, no space left on device soon",
        ),
        (
            "search-indexer",
            "SearchLatency",
            "p95 latency of search-indexer-{n} above 800 ms (current 1.2 s)",
        ),
        (
            "billing-consumer",
            "ConsumerLag",
            "consumer group billing-consumer-{n} lag is 12000 messages",
        ),
        (
            "report-worker",
            "ReportJobsSlow",
            "report-worker-{n} queue wait above 5 minutes",
        ),
        (
            "mailer",
            "MailerBounceRate",
            "mailer-{n} bounce rate 4.2% over the last 15 minutes",
        ),
        (
            "ml-scoring",
            "ScoringOom",
            "ml-scoring-{n} container OOMKilled (memory limit 2Gi)",
        ),
        (
            "cdn-edge",
            "EdgeCacheMiss",
            "cache hit ratio of cdn-edge-{n} fell to 61%",
        ),
    ];
    (0..count)
        .map(|i| {
            let (prefix, name, text) = kinds[i % kinds.len()];
            let n = format!("{:02}", (i / kinds.len()) % 5);
            let service = format!("{prefix}-{n}");
            let minutes_ago = 14 - (i as i64 % 14);
            alert(&service, name, &text.replace("{n}", &n), minutes_ago, 1000 + i)
        })
        .collect()
}

fn failed_deploy() -> Value {
    let mut deploy: Value = serde_json::from_str(DEPLOY_FIXTURE).unwrap();
    deploy["timestamp"] = json!((Utc::now() - chrono::Duration::minutes(20)).timestamp_millis());
    deploy
}

async fn post(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> Value {
    let response = client
        .post(format!("{base}{path}"))
        .header("X-User-ID", USER)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{path}");
    response.json().await.unwrap()
}

fn bench_config(url: &str) -> Config {
    support::bench_config(url, "vigil-rca-bench")
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo bench -- --list` and test discovery: nothing to list here.
    }
    let runs = env_or("RCA_BENCH_RUNS", 200usize);
    let nearby = env_or("RCA_BENCH_NEARBY", 200usize);
    let (mut conn, name, url) = support::scratch_database("vigil_bench").await;

    // Seeding: workers off, and analyses not due for an hour, so nothing runs meanwhile.
    let mut config = bench_config(url.as_str());
    config.run_workers = false;
    config.rca_settle_secs = 3600;
    let app = Application::build(config).await.expect("service starts");
    let state = app.state().clone();
    let base = format!("http://{}", app.http_addr());
    let shutdown = CancellationToken::new();
    let server_task = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let client = reqwest::Client::new();
    post(&client, &base, "/api/source_f/deployment", &failed_deploy()).await;
    let mut incident_id = None;
    for body in incident_alerts() {
        let placed = post(&client, &base, "/api/source_a/alerts", &body).await;
        incident_id = incident_id.or_else(|| placed["alerts"][0]["incident_id"].as_str().map(str::to_owned));
    }
    for body in nearby_alerts(nearby) {
        post(&client, &base, "/api/source_a/alerts", &body).await;
    }
    let incident_id: Uuid = incident_id
        .expect("the first alert opened an incident")
        .parse()
        .unwrap();

    let handler = RcaHandler { state: state.clone() };
    let facts = handler
        .read_facts(USER, incident_id)
        .await
        .unwrap()
        .expect("the incident");
    let analysis = analyst::analyze(&facts);
    let conclusion = analysis.ledger.conclusion();
    println!(
        "rca: one incident of {} alerts, {} linked change(s), {} nearby alerts read; {} hypotheses, {} ruled out; \
         verdict {} {}",
        facts.alerts.len(),
        facts.deployments.len(),
        facts.nearby.len(),
        analysis.ledger.hypotheses.len(),
        analysis.ledger.ruled_out.len(),
        conclusion.verdict.as_str(),
        conclusion.component.as_deref().unwrap_or("-"),
    );

    for _ in 0..10 {
        let facts = handler.read_facts(USER, incident_id).await.unwrap().unwrap();
        std::hint::black_box(analyst::analyze(&facts));
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let facts = handler.read_facts(USER, incident_id).await.unwrap().unwrap();
        std::hint::black_box(analyst::analyze(&facts));
        samples.push(started.elapsed());
    }
    report("analysis", samples);
    let samples = (0..runs * 10)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(analyst::analyze(std::hint::black_box(&facts)));
            started.elapsed()
        })
        .collect();
    report("analyst", samples);

    shutdown.cancel();
    server_task.await.unwrap().unwrap();

    // The whole jobs, writes included: one worker, one job at a time, all due now (a job the
    // tail had not enqueued yet is enqueued by this service, due at once).
    sqlx::query("UPDATE jobs SET run_at = now() WHERE kind = 'rca'")
        .execute(&state.db)
        .await
        .unwrap();
    let incidents: i64 = sqlx::query_scalar("SELECT count(*) FROM incidents WHERE user_id = $1")
        .bind(USER)
        .fetch_one(&state.db)
        .await
        .unwrap();
    let mut config = bench_config(url.as_str());
    config.run_workers = true;
    config.worker_concurrency = 1;
    config.rca_settle_secs = 0;
    let workers = Application::build(config).await.expect("service starts");
    let shutdown = CancellationToken::new();
    let worker_task = tokio::spawn(workers.run_until_stopped(shutdown.clone()));
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        let (jobs, finished): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE finished_at IS NOT NULL) FROM jobs WHERE kind = 'rca'",
        )
        .fetch_one(&state.db)
        .await
        .unwrap();
        if jobs >= incidents && finished == jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let durations: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - heartbeat_at)::float8 FROM jobs
         WHERE kind = 'rca' AND state = 'completed'",
    )
    .fetch_all(&state.db)
    .await
    .unwrap();
    println!(
        "rca job: {} analyses completed of {incidents} incidents opened",
        durations.len()
    );
    report("job", durations.into_iter().map(Duration::from_secs_f64).collect());
    shutdown.cancel();
    worker_task.await.unwrap().unwrap();
    state.db.close().await;

    sqlx::query(&format!(r#"DROP DATABASE "{name}" WITH (FORCE)"#))
        .execute(&mut conn)
        .await
        .unwrap();
}
