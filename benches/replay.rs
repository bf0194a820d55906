//! `vigil replay` on a generated store of a realistic mix, against a full read of the store.
//!
//!   cargo bench --bench replay          (DATABASE_URL: a PostgreSQL server; `make bench` sets it)
//!   REPLAY_BENCH_EVENTS=1000000 REPLAY_BENCH_RUNS=3 REPLAY_BENCH_SEED_ALERTS=2000 cargo bench --bench replay
//!
//! It creates a database of its own on `DATABASE_URL`'s server and generates the store in two
//! steps:
//! 1. **Seed**: the service runs in-process, workers on, and four tenants send
//!    `REPLAY_BENCH_SEED_ALERTS` source_a alerts through the real ingestion endpoint (services
//!    failing alone, dependency outages whose callers name one endpoint, recoveries); every
//!    incident is analysed by the built-in analyst (thoughts, suggestions, verdicts, incident chat
//!    sessions). The service is then stopped.
//! 2. **Copies**: the seed's events (and its users) are copied until the store holds
//!    `REPLAY_BENCH_EVENTS` (1,000,000), each copy under other ids: every UUID gets the copy's
//!    number as its first eight digits, every user id a prefix of its own.
//!
//! Then, `REPLAY_BENCH_RUNS` (3) times in alternation, it times a full read of the store
//! (`count(*)` and the length of every payload) and a replay of every projection, and prints
//! events/s of each and their ratio. The read tables of the seed's tenants, as the live service
//! wrote them, must come out of every replay with equal checksums; the bench fails otherwise.
//! With `REPLAY_BENCH_ONLINE` set, an online rebuild under load follows (`replay/online.rs`).
//! `REPLAY_BENCH_REUSE=<url>` runs on a store a run kept, without seeding or copying.
//! With `REPLAY_BENCH_KEEP` set, the database is kept (its URL printed) for another build's
//! `vigil replay` to be timed on the same store.

#[path = "replay/online.rs"]
mod online;
#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{json, Value};
use sqlx::PgPool;
use support::env_or;
use tokio_util::sync::CancellationToken;
use vigil::{event_store::EventStore, Application, Config};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ALERT_FIXTURE: &str = include_str!("../tests/fixtures/alerts/source_a/firing.json");
const USER_PREFIX: &str = "replaybench-";
const TENANTS: usize = 4;

/// Alert `i` of a tenant: one in five is a dependency outage's caller naming the shared endpoint
/// of its group, the others a service failing on its own; one in six is a recovery of the alert
/// six before it.
fn alert(i: usize) -> Value {
    let mut body: Value = serde_json::from_str(ALERT_FIXTURE).unwrap();
    let (fingerprint, status) = if i % 6 == 5 { (i - 5, "resolved") } else { (i, "firing") };
    let group = fingerprint / 25;
    let (service, description) = if fingerprint % 5 == 0 {
        (
            format!("caller-{}-{}", group, fingerprint % 3),
            format!("dial tcp 10.{}.{}.7:6379: i/o timeout", group / 200, group % 200),
        )
    } else {
        (
            format!("service-{}", fingerprint % 97),
            format!("error rate of service-{} above 5% for 10 minutes", fingerprint % 97),
        )
    };
    let element = &mut body["alerts"][0];
    element["status"] = json!(status);
    element["fingerprint"] = json!(format!("{fingerprint:016x}"));
    element["labels"] = json!({ "alertname": format!("{service} errors"), "service": service,
        "severity": "critical", "environment": "production" });
    element["annotations"] = json!({ "summary": format!("{service} errors"), "description": description });
    let fired = Utc::now() - chrono::Duration::seconds(7200 - (fingerprint as i64 % 7200));
    element["startsAt"] = json!(fired.to_rfc3339());
    if status == "resolved" {
        element["endsAt"] = json!(Utc::now().to_rfc3339());
    }
    body["status"] = json!(status);
    body
}

fn bench_config(url: &str) -> Config {
    let mut config = support::bench_config(url, "vigil-replay-bench");
    config.rca_settle_secs = 0;
    config.run_workers = true;
    config
}

/// The seed: alerts through the real endpoint, and every analysis they cause, finished.
async fn seed(url: &str, alerts: usize) {
    let app = Application::build(bench_config(url)).await.expect("service starts");
    let db = app.state().db.clone();
    let base = format!("http://{}", app.http_addr());
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let client = reqwest::Client::new();
    let senders: Vec<_> = (0..TENANTS)
        .map(|tenant| {
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move {
                for i in 0..alerts / TENANTS {
                    let response = client
                        .post(format!("{base}/api/source_a/alerts"))
                        .header("X-User-ID", format!("{USER_PREFIX}u{tenant}"))
                        .json(&alert(i))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 202);
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
    let started = Instant::now();
    loop {
        let (unfinished, queued): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM incidents
                     WHERE status <> 'merged' AND aurora_status NOT IN ('complete', 'error')),
                    (SELECT count(*) FROM jobs WHERE state IN ('available', 'retryable', 'running'))",
        )
        .fetch_one(&db)
        .await
        .unwrap();
        if unfinished == 0 && queued == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the analyses never finished"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The tails apply the last events.
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

/// Copies of the seed's users and events, under other ids, until the store holds `target` events.
async fn copy_seed(db: &PgPool, target: i64) -> i64 {
    let (seed, seed_last): (i64, i64) = sqlx::query_as("SELECT count(*), max(global_position) FROM events")
        .fetch_one(db)
        .await
        .unwrap();
    let copies = (target - seed + seed - 1) / seed.max(1);
    let renamed = |column: &str, copy: i64| {
        format!(
            "replace(regexp_replace({column}, '[0-9a-f]{{8}}(-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}})', \
             '{copy:08x}\\1', 'g'), '{USER_PREFIX}', '{USER_PREFIX}k{copy}-')"
        )
    };
    for copy in 1..=copies {
        sqlx::query(&format!(
            "INSERT INTO users
             SELECT (jsonb_populate_record(NULL::users, to_jsonb(u) || jsonb_build_object(
                 'id', {id}, 'email', 'k{copy}-' || u.email))).*
             FROM users u WHERE u.id LIKE '{USER_PREFIX}u%'",
            id = renamed("u.id", copy),
        ))
        .execute(db)
        .await
        .unwrap();
        sqlx::query(&format!(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata,
                                 recorded_at)
             SELECT aggregate_type, {aggregate_id}, sequence, event_type, event_version, ({payload})::json,
                    ({metadata})::json, recorded_at
             FROM events WHERE global_position <= $1
             ORDER BY global_position",
            aggregate_id = renamed("aggregate_id", copy),
            payload = renamed("payload::text", copy),
            metadata = renamed("metadata::text", copy),
        ))
        .bind(seed_last)
        .execute(db)
        .await
        .unwrap();
    }
    sqlx::query("VACUUM ANALYZE events").execute(db).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(db)
        .await
        .unwrap()
}

/// Checksums of the seed tenants' read rows (the copies' rows are only ever written by replays).
async fn seed_checksums(db: &PgPool) -> Vec<(String, i64, String)> {
    let mut sums = Vec::new();
    for (table, rows) in [
        (
            "incidents",
            format!("SELECT t::text FROM incidents t WHERE user_id LIKE '{USER_PREFIX}u%'"),
        ),
        (
            "chat_sessions",
            format!("SELECT t::text FROM chat_sessions t WHERE user_id LIKE '{USER_PREFIX}u%'"),
        ),
        (
            "embeddings",
            format!("SELECT t::text FROM embeddings t WHERE user_id LIKE '{USER_PREFIX}u%'"),
        ),
        (
            "incident_thoughts",
            format!(
                "SELECT t::text FROM incident_thoughts t JOIN incidents i ON i.id = t.incident_id
                 WHERE i.user_id LIKE '{USER_PREFIX}u%'"
            ),
        ),
        (
            "incident_suggestions",
            format!(
                "SELECT t::text FROM incident_suggestions t JOIN incidents i ON i.id = t.incident_id
                 WHERE i.user_id LIKE '{USER_PREFIX}u%'"
            ),
        ),
    ] {
        let (count, md5): (i64, String) = sqlx::query_as(&format!(
            "SELECT count(*), md5(COALESCE(string_agg(line, E'\\n' ORDER BY line COLLATE \"C\"), ''))
             FROM ({rows}) AS lines(line)"
        ))
        .fetch_one(db)
        .await
        .unwrap();
        sums.push((table.to_owned(), count, md5));
    }
    sums
}

/// `runs` times in alternation, a full read of the store and a replay of every projection; the
/// seed tenants' rows must come out of each replay as `live`.
async fn offline_runs(db: &PgPool, events: i64, runs: usize, live: &[(String, i64, String)]) {
    let store = EventStore::new(db);
    println!("run   full read (s)   events/s      replay (s)   events/s    replay ÷ read");
    for run in 1..=runs {
        let started = Instant::now();
        let (_, bytes): (i64, i64) = sqlx::query_as("SELECT count(*), sum(length(payload::text))::bigint FROM events")
            .fetch_one(db)
            .await
            .unwrap();
        let read = started.elapsed().as_secs_f64();
        let started = Instant::now();
        store.replay(db, None).await.expect("replay");
        let replay = started.elapsed().as_secs_f64();
        println!(
            "{run:>3}   {read:>13.2}   {:>10.0}   {replay:>11.1}   {:>8.0}   {:>12.4}   ({} MB of payloads)",
            events as f64 / read,
            events as f64 / replay,
            read / replay,
            bytes / 1_000_000
        );
        assert_eq!(
            seed_checksums(db).await,
            live,
            "the replayed seed rows equal the live ones"
        );
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo bench -- --list` and test discovery: nothing to list here.
    }
    let target = env_or("REPLAY_BENCH_EVENTS", 1_000_000i64);
    let runs = env_or("REPLAY_BENCH_RUNS", 3usize);
    let alerts = env_or("REPLAY_BENCH_SEED_ALERTS", 2_000usize);
    if let Ok(kept) = std::env::var("REPLAY_BENCH_REUSE") {
        // A store an earlier run kept (REPLAY_BENCH_KEEP): no seed, no copies.
        let db = PgPool::connect(&kept).await.unwrap();
        let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
            .fetch_one(&db)
            .await
            .unwrap();
        println!("store: {events} events, kept by an earlier run");
        let live = seed_checksums(&db).await;
        offline_runs(&db, events, runs, &live).await;
        if std::env::var_os("REPLAY_BENCH_ONLINE").is_some() {
            online::run(&db, &kept, events).await;
        }
        return;
    }
    let (mut conn, name, url) = support::scratch_database("vigil_replay_bench").await;

    let started = Instant::now();
    seed(url.as_str(), alerts).await;
    let db = PgPool::connect(url.as_str()).await.unwrap();
    let seeded: Vec<(String, i64)> =
        sqlx::query_as("SELECT aggregate_type || '/' || event_type, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC")
            .fetch_all(&db)
            .await
            .unwrap();
    let seed_events: i64 = seeded.iter().map(|(_, n)| n).sum();
    println!(
        "seed: {alerts} alerts, {seed_events} events in {:.0} s; mix:",
        started.elapsed().as_secs_f64()
    );
    for (kind, count) in &seeded {
        println!(
            "  {kind:<45} {count:>8} ({:.1}%)",
            *count as f64 * 100.0 / seed_events as f64
        );
    }
    let live = seed_checksums(&db).await;

    let started = Instant::now();
    let events = copy_seed(&db, target).await;
    println!(
        "store: {events} events, copied in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    offline_runs(&db, events, runs, &live).await;
    if std::env::var_os("REPLAY_BENCH_ONLINE").is_some() {
        online::run(&db, url.as_str(), events).await;
    }
    db.close().await;
    if std::env::var_os("REPLAY_BENCH_KEEP").is_some() {
        println!("kept: {url}");
        return;
    }
    sqlx::query(&format!(r#"DROP DATABASE "{name}" WITH (FORCE)"#))
        .execute(&mut conn)
        .await
        .unwrap();
}
