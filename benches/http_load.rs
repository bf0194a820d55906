//! HTTP load driver: starts the real service (release build) on a fresh database and measures
//! requests per second and latency percentiles for a scenario against a baseline scenario run
//! in the same process, on the same machine, right before it.
//!
//!   cargo bench --bench http_load            (DATABASE_URL: a PostgreSQL server; `make bench` sets it)
//!   LOAD_SECONDS=10 LOAD_CONCURRENCY=64 cargo bench --bench http_load
//!   RUN_WORKERS=false cargo bench --bench http_load   (the ingestion tier alone, as when `vigil
//!                                                     worker` processes run the analyses elsewhere)
//!   LOAD_SETUP_SQL='DROP INDEX ...' cargo bench --bench http_load   (an experiment: SQL run on the
//!                                                     migrated database before any load)
//!
//! Scenarios (`LOAD_SCENARIOS=liveness,sessions,ingest,ingest-distinct,ingest-recovering,pgbench`,
//! all by default):
//! - `liveness`: baseline, the cheapest route through the whole middleware stack;
//! - `sessions`: POST /chat_api/sessions then GET it (one command through the event store and
//!   projection, one read);
//! - `ingest`: sustained alert ingestion in an alert storm (source_a notifications, four workers
//!   per tenant, three services per tenant, alerts seconds apart: most join open incidents);
//! - `ingest-distinct`: every alert opens an incident of its own (the worst case);
//! - `ingest-recovering`: the storm with every other notification the recovery of the alert sent
//!   just before it (firing, then resolved, as monitoring sends them);
//! - `ingest-silences`: the storm while each tenant has 100 active silences, none matching (what
//!   matching costs), then the storm again without silences to compare it with;
//! - `ingest-silenced`: the storm during a maintenance window: one of each tenant's 100 silences
//!   matches every alert (then checks: no incident, an inbox entry per alert);
//! - `ingest-grouped`: the storm while each tenant's grouping rule opens an incident per service
//!   only after 5 of its alerts (held, then released, then joining by the rule);
//! - `analyses` (not by default; the workers on): new incidents at a steady 10/s and 100/s, each
//!   analysis timed from the incident's opening to its completion, then a 10 s storm of new
//!   incidents and the time its analyses take to drain (`http_load/analyses.rs`);
//! - `pgbench`: the baseline for the ingestion scenarios, pgbench inserting single JSON rows into the same
//!   PostgreSQL with as many clients, for as long, before and after them (the ratio is taken against
//!   the faster run).

#[path = "http_load/analyses.rs"]
mod analyses;
#[path = "http_load/measures.rs"]
mod measures;
#[path = "http_load/noise.rs"]
mod noise;

use std::{
    str::FromStr,
    sync::Arc,
    time::{Duration, Instant},
};

use measures::{pgbench_inserts_per_second, PlacementTotals};
use noise::{check_grouped, check_silenced, Noise};
use serde_json::{json, Value};
use sqlx::{postgres::PgConnectOptions, Connection, PgConnection};
use tokio_util::sync::CancellationToken;
use vigil::{Application, Config};

// The allocator `vigil serve` runs with (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Registers a user with `email`; returns its id.
async fn register(client: &reqwest::Client, base: &str, email: &str) -> String {
    let user: Value = client
        .post(format!("{base}/api/auth/register"))
        .json(&json!({ "email": email, "password": "load test password" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    user["id"].as_str().unwrap().to_owned()
}

#[derive(Default)]
struct Outcome {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Outcome {
    /// Adds one worker's outcome to the total.
    fn absorb(&mut self, worker: Outcome) {
        self.requests += worker.requests;
        self.errors += worker.errors;
        self.latencies_us.extend(worker.latencies_us);
    }

    fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile_ms(&mut self, p: f64) -> f64 {
        self.latencies_us.sort_unstable();
        let index = ((self.latencies_us.len() as f64 * p).ceil() as usize).saturating_sub(1);
        self.latencies_us.get(index).copied().unwrap_or_default() as f64 / 1000.0
    }
}

/// Runs `scenario` from `concurrency` workers for `duration`; each call may send several requests.
async fn drive<F, Fut>(concurrency: usize, duration: Duration, scenario: F) -> Outcome
where
    F: Fn(reqwest::Client) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = (u64, bool)> + Send,
{
    let scenario = Arc::new(scenario);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (scenario, client) = (scenario.clone(), client.clone());
            tokio::spawn(async move {
                let mut outcome = Outcome::default();
                while started.elapsed() < duration {
                    let begun = Instant::now();
                    let (requests, ok) = scenario(client.clone()).await;
                    outcome.latencies_us.push(begun.elapsed().as_micros() as u64);
                    outcome.requests += requests;
                    outcome.errors += u64::from(!ok);
                }
                outcome
            })
        })
        .collect();
    let mut total = Outcome::default();
    for worker in workers {
        total.absorb(worker.await.unwrap());
    }
    total.elapsed = started.elapsed();
    total
}

/// One POST of a load scenario.
struct Post {
    path: &'static str,
    user_id: String,
    body: String,
}

/// Sends the `post(n)` of every n, in turn, from `concurrency` workers for `duration`; a request
/// is counted as failed unless answered 202. Each worker keeps one HTTP/1.1 connection of its own
/// (hyper's client connection: no pool, no URL parsing, no header map per request, as `wrk`
/// would), so that the driver takes as little of the machine as it can.
async fn drive_posts<F>(concurrency: usize, duration: Duration, addr: &str, post: F) -> Outcome
where
    F: Fn(u64) -> Post + Send + Sync + 'static,
{
    use http_body_util::BodyExt;

    let post = Arc::new(post);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("the service accepts connections");
        stream.set_nodelay(true).unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP/1.1 handshake");
        tokio::spawn(connection);
        let (post, next, host) = (post.clone(), next.clone(), addr.to_owned());
        workers.push(tokio::spawn(async move {
            let mut outcome = Outcome::default();
            while started.elapsed() < duration {
                let Post { path, user_id, body } = post(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let request = hyper::Request::post(path)
                    .header(hyper::header::HOST, &host)
                    .header(hyper::header::CONTENT_TYPE, "application/json")
                    .header("x-user-id", user_id)
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap();
                let begun = Instant::now();
                let accepted = match sender.send_request(request).await {
                    Ok(response) => {
                        let status = response.status();
                        response.into_body().collect().await.is_ok() && status == hyper::StatusCode::ACCEPTED
                    }
                    Err(_) => false,
                };
                outcome.latencies_us.push(begun.elapsed().as_micros() as u64);
                outcome.requests += 1;
                outcome.errors += u64::from(!accepted);
                if !accepted && sender.ready().await.is_err() {
                    break; // the connection is gone
                }
            }
            outcome
        }));
    }
    let mut total = Outcome::default();
    for worker in workers {
        total.absorb(worker.await.unwrap());
    }
    total.elapsed = started.elapsed();
    total
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo bench -- --list` and test discovery: nothing to list here.
    }
    let seconds = env_or("LOAD_SECONDS", 5u64);
    let concurrency = env_or("LOAD_CONCURRENCY", 32usize);
    let server = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin = PgConnectOptions::from_str(&server)
        .expect("DATABASE_URL parses")
        .database("postgres");
    let name = format!("vigil_bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect_with(&admin).await.expect("PostgreSQL reachable");
    sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
        .execute(&mut conn)
        .await
        .unwrap();

    let mut config = Config::from_env().expect("configuration");
    let mut url = reqwest::Url::parse(&server).unwrap();
    url.set_path(&format!("/{name}"));
    config.database_url = vigil::config::Secret::new(url.to_string());
    config.bind_address = "127.0.0.1".parse().unwrap();
    config.http_port = 0;
    config.ws_port = 0;
    config.bcrypt_cost = 4;
    config.redis_url = None;
    config.rate_limit_per_minute = u32::MAX;
    config.chat_rate_limit_per_minute = u32::MAX;
    config.ingest_rate_limit_per_minute = u32::MAX;
    config.database_max_connections = 32;
    let run_workers = config.run_workers;
    let app = Application::build(config).await.expect("service starts");
    if let Ok(setup) = std::env::var("LOAD_SETUP_SQL") {
        // Experiments: run against the migrated database before any load.
        let mut bench_db = PgConnection::connect(url.as_str())
            .await
            .expect("bench database reachable");
        sqlx::raw_sql(&setup)
            .execute(&mut bench_db)
            .await
            .expect("LOAD_SETUP_SQL runs");
    }
    let base = format!("http://{}", app.http_addr());
    let shutdown = CancellationToken::new();
    let server_task = tokio::spawn(app.run_until_stopped(shutdown.clone()));

    let client = reqwest::Client::new();
    let user_id = register(&client, &base, "load@example.com").await;
    let duration = Duration::from_secs(seconds);
    let scenarios = std::env::var("LOAD_SCENARIOS")
        .unwrap_or_else(|_| "liveness,sessions,ingest,ingest-distinct,ingest-recovering,pgbench".into());
    let wanted = |name: &str| scenarios.split(',').any(|scenario| scenario.trim() == name);
    println!(
        "http_load: {concurrency} workers, {seconds} s per scenario, release build, in-process cache, \
         background jobs {} (RUN_WORKERS; a new incident's analysis runs on the same cores when on)",
        if run_workers { "on" } else { "off" }
    );

    let mixes: Vec<(&str, AlertMix, Noise)> = [
        // The silence scenarios between two storms they are compared with (a later scenario
        // meets a fuller database), before the incidents of the others leave their tails' work
        // behind.
        ("ingest storm", "ingest", AlertMix::Storm, Noise::None),
        (
            "ingest 100 silences",
            "ingest-silences",
            AlertMix::Storm,
            Noise::NoneMatching,
        ),
        (
            "ingest silenced",
            "ingest-silenced",
            AlertMix::Storm,
            Noise::OneMatching,
        ),
        ("ingest storm again", "ingest-silences", AlertMix::Storm, Noise::None),
        ("ingest grouped", "ingest-grouped", AlertMix::Storm, Noise::Grouped),
        ("ingest distinct", "ingest-distinct", AlertMix::Distinct, Noise::None),
        (
            "ingest recovering",
            "ingest-recovering",
            AlertMix::Recovering,
            Noise::None,
        ),
    ]
    .into_iter()
    .filter(|(_, scenario, ..)| wanted(scenario))
    .map(|(name, _, mix, noise)| (name, mix, noise))
    .collect();
    if !mixes.is_empty() || wanted("pgbench") {
        run_ingest_scenarios(&base, &url, concurrency, duration, &mixes, wanted("pgbench")).await;
    }
    if wanted("analyses") {
        if run_workers {
            analyses::run(&base, &url, concurrency, Duration::from_secs(10)).await;
        } else {
            println!("analyses: skipped, the workers are off (RUN_WORKERS=false)");
        }
    }
    if !wanted("liveness") && !wanted("sessions") {
        shutdown.cancel();
        let _ = server_task.await;
        let _ = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
            .execute(&mut conn)
            .await;
        return;
    }

    let liveness_url = format!("{base}/health/liveness");
    let mut baseline = drive(concurrency, duration, move |client| {
        let url = liveness_url.clone();
        async move { (1, client.get(url).send().await.is_ok_and(|r| r.status().is_success())) }
    })
    .await;

    let (sessions_url, uid) = (format!("{base}/chat_api/sessions"), user_id.clone());
    let mut sessions = drive(concurrency, duration, move |client| {
        let (url, uid) = (sessions_url.clone(), uid.clone());
        async move {
            let body = json!({ "messages": [{ "sender": "user", "text": "Why is checkout slow since the deploy?" }] });
            let Ok(created) = client.post(&url).header("X-User-ID", &uid).json(&body).send().await else {
                return (1, false);
            };
            let Ok(created) = created.json::<Value>().await else {
                return (1, false);
            };
            let Some(id) = created["id"].as_str() else {
                return (1, false);
            };
            let fetched = client.get(format!("{url}/{id}")).header("X-User-ID", &uid).send().await;
            (2, fetched.is_ok_and(|r| r.status().is_success()))
        }
    })
    .await;

    let report = |name: &str, outcome: &mut Outcome| {
        println!(
            "{name:>20}: {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} requests, {} failed iterations)",
            outcome.per_second(),
            outcome.percentile_ms(0.50),
            outcome.percentile_ms(0.99),
            outcome.requests,
            outcome.errors
        );
    };
    report("liveness (baseline)", &mut baseline);
    report("session create+get", &mut sessions);
    println!(
        "ratio: session create+get iterations/s = {:.3} × baseline requests/s",
        sessions.per_second() / 2.0 / baseline.per_second()
    );

    shutdown.cancel();
    let _ = server_task.await;
    let _ = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
        .execute(&mut conn)
        .await;
}

/// How the alerts of an ingestion scenario relate to each other.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AlertMix {
    /// An alert storm: four workers per tenant, three services per tenant, alerts seconds apart,
    /// so most alerts join an open incident (a new one opens when one is full).
    Storm,
    /// Every alert opens an incident of its own (unrelated services, hours apart): the worst case.
    Distinct,
    /// The storm with every other notification the recovery of the alert sent just before it, as
    /// monitoring sends them (firing, then resolved).
    Recovering,
}

/// The `n`th notification of an ingestion scenario: its alert as `mix` relates it to the others,
/// from one of `users`.
fn alert_post(mix: AlertMix, users: &[String], n: u64) -> Post {
    // A recovery is of the alert sent just before it: same tenant, key, service and time.
    let recovery = mix == AlertMix::Recovering && n % 2 == 1;
    let n = if recovery { n - 1 } else { n };
    let tenant = (n as usize) % users.len();
    let (service, fired) = match mix {
        AlertMix::Storm | AlertMix::Recovering => {
            (format!("service-{tenant}-{}", n % 3), 1_795_000_000 + (n as i64) / 64)
        }
        AlertMix::Distinct => (format!("service-{n}"), 1_795_000_000 + (n as i64) * 7_200),
    };
    let ends = if recovery {
        chrono::DateTime::from_timestamp(fired + 60, 0).unwrap().to_rfc3339()
    } else {
        "0001-01-01T00:00:00Z".to_owned()
    };
    let fired = chrono::DateTime::from_timestamp(fired, 0).unwrap().to_rfc3339();
    let alertname = format!("HighLatency{}", n % 3);
    let status = if recovery { "resolved" } else { "firing" };
    // The JSON written out rather than built as a `Value`: the driver shares the service's
    // two cores, so every microsecond it spends is one the service does not get.
    let body = format!(
        r#"{{"status":"{status}","alerts":[{{"status":"{status}","fingerprint":"{n:016x}","labels":{{"alertname":"{alertname}","service":"{service}","severity":"critical"}},"annotations":{{"summary":"{service} p99 latency above 2s"}},"startsAt":"{fired}","endsAt":"{ends}"}}]}}"#
    );
    Post {
        path: "/api/source_a/alerts",
        user_id: users[tenant].clone(),
        body,
    }
}

/// Sustained ingestion against a pgbench single-row-insert baseline on the same database.
async fn run_ingest_scenarios(
    base: &str,
    db_url: &reqwest::Url,
    concurrency: usize,
    duration: Duration,
    mixes: &[(&str, AlertMix, Noise)],
    pgbench: bool,
) {
    let client = reqwest::Client::new();
    // Measured before the ingestion scenarios as well as after: the background work they leave
    // (tails, autovacuum, a checkpoint) may slow the run after them, and the ratio is taken
    // against the faster of the two.
    let pgbench_before = pgbench.then(|| pgbench_inserts_per_second(db_url, concurrency, duration));
    let mut rates = Vec::new();
    for (round, &(name, mix, noise)) in mixes.iter().enumerate() {
        let tenants = match mix {
            AlertMix::Storm | AlertMix::Recovering => concurrency.div_ceil(4),
            AlertMix::Distinct => concurrency,
        };
        let mut users = Vec::new();
        for n in 0..tenants {
            let user_id = register(&client, base, &format!("tenant{round}-{n}@example.com")).await;
            noise.create(&client, base, &user_id).await;
            users.push(user_id);
        }
        let users = Arc::new(users);
        let tenants_of_round = users.clone();
        let placement_before = PlacementTotals::scrape(&client, base).await;
        let addr = base.trim_start_matches("http://").to_owned();
        let mut outcome = drive_posts(concurrency, duration, &addr, move |n| alert_post(mix, &users, n)).await;
        println!(
            "{:>20}: {:>9.0} alerts/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} alerts, {} failed)",
            name,
            outcome.per_second(),
            outcome.percentile_ms(0.50),
            outcome.percentile_ms(0.99),
            outcome.requests,
            outcome.errors
        );
        rates.push((name, outcome.per_second()));
        PlacementTotals::scrape(&client, base)
            .await
            .since(&placement_before)
            .report();
        match noise {
            Noise::OneMatching => check_silenced(db_url, &tenants_of_round, outcome.requests - outcome.errors).await,
            Noise::Grouped => check_grouped(db_url, &tenants_of_round).await,
            Noise::None | Noise::NoneMatching => {}
        }
    }
    let storms: Vec<f64> = rates
        .iter()
        .filter(|(name, _)| name.starts_with("ingest storm"))
        .map(|&(_, rate)| rate)
        .collect();
    if !storms.is_empty() {
        let storm = storms.iter().sum::<f64>() / storms.len() as f64;
        for &(name, rate) in rates
            .iter()
            .filter(|(name, _)| name.contains("silence") || name.contains("grouped"))
        {
            println!(
                "ratio: {name} alerts/s = {:.3} × ingest storm alerts/s (the mean of the storms before and after it)",
                rate / storm
            );
        }
    }
    let Some(before) = pgbench_before else {
        return;
    };
    let after = pgbench_inserts_per_second(db_url, concurrency, duration);
    let mut baseline: Option<f64> = None;
    for (when, measured) in [("before", before), ("after", after)] {
        match measured {
            Ok(tps) => {
                println!(
                    "{:>20}: {:>9.0} inserts/s (single-row JSON insert, {concurrency} clients, {when} the ingestion scenarios)",
                    "pgbench baseline", tps
                );
                baseline = Some(baseline.map_or(tps, |b| b.max(tps)));
            }
            Err(error) => println!("pgbench baseline {when} skipped: {error}"),
        }
    }
    if let Some(tps) = baseline {
        for (name, rate) in rates {
            println!(
                "ratio: {name} alerts/s = {:.3} × pgbench single-row inserts/s (the faster run, {tps:.0}/s)",
                rate / tps
            );
        }
    }
}
