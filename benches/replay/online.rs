//! `REPLAY_BENCH_ONLINE=1`: an online rebuild of the generated store while the service, running in
//! this process, takes `REPLAY_BENCH_ALERTS_PER_SECOND` (500) alerts/s of eight tenants of its own
//! (at most 64 requests in flight, as a sender's queue would) and
//! serves incident lists and details to readers. It reports the rebuild's time and events/s, the
//! readers' latency before and during the rebuild, and every failed request; then, once the load
//! has stopped and the tails have caught up, it checks that the read tables equal a fresh offline
//! replay's. The bench fails on any failed request or unequal checksum.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use vigil::Application;
use vigil_projections::{checksums, ReplayProgress};

use super::{alert, bench_config, USER_PREFIX};
use crate::support::env_or;

const READERS: usize = 4;
/// Alert requests in flight at once: past it the load waits, and the achieved rate shows it.
const SENDERS_IN_FLIGHT: usize = 64;
/// Each reader's pause between requests: ~4 × 50 reads/s, a dashboard's worth of users.
const READ_PAUSE: Duration = Duration::from_millis(20);
/// The live load's tenants, its alerts dealt among them in turn.
const LIVE_TENANTS: usize = 8;

/// Latencies (ms) of the reads, failures, and alerts accepted while a phase lasts.
#[derive(Default)]
struct Observed {
    reads: Vec<f64>,
    failures: Vec<String>,
    alerts: usize,
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}

pub async fn run(db: &PgPool, url: &str, events: i64) {
    let rate = env_or("REPLAY_BENCH_ALERTS_PER_SECOND", 500u64);
    let warm_up = Duration::from_secs(env_or("REPLAY_BENCH_WARM_UP_SECS", 10u64));
    // The store's copies were written behind the service's back: its reactors would start an
    // analysis for every incident in them. They start where the store ends, as they would have.
    sqlx::query("DELETE FROM jobs WHERE state IN ('available', 'retryable')")
        .execute(db)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO event_consumer_checkpoints (name, transaction_id, global_position, updated_at)
         SELECT name, last.transaction_id, last.global_position, now()
         FROM unnest($1::text[]) AS name,
              (SELECT transaction_id, global_position FROM events
               ORDER BY transaction_id DESC, global_position DESC LIMIT 1) AS last
         ON CONFLICT (name) DO UPDATE SET transaction_id = EXCLUDED.transaction_id,
             global_position = EXCLUDED.global_position, updated_at = now()",
    )
    .bind(["reactor_rca", "reactor_postmortem", "reactor_bridges"])
    .execute(db)
    .await
    .unwrap();
    let app = Application::build(bench_config(url)).await.expect("service starts");
    let state = app.state().clone();
    let base = format!("http://{}", app.http_addr());
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let client = reqwest::Client::new();
    let incident_ids: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT user_id, id::text FROM incidents WHERE user_id LIKE '{USER_PREFIX}u%' ORDER BY id LIMIT 200"
    ))
    .fetch_all(db)
    .await
    .unwrap();

    let observed = Arc::new(Mutex::new(Observed::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    // Alerts at a steady rate, each its own request (recoveries among them).
    load.push(tokio::spawn({
        let (client, base, observed, stop) = (client.clone(), base.clone(), observed.clone(), stop.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // As a sender's webhook queue does: so many in flight at most, the rest waits.
            let in_flight = Arc::new(tokio::sync::Semaphore::new(SENDERS_IN_FLIGHT));
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let permit = in_flight.clone().acquire_owned().await.unwrap();
                let (client, base, observed) = (client.clone(), base.clone(), observed.clone());
                let body = alert(1_000_000 + i / LIVE_TENANTS);
                let tenant = i % LIVE_TENANTS;
                i += 1;
                tokio::spawn(async move {
                    let sent = client
                        .post(format!("{base}/api/source_a/alerts"))
                        .header("X-User-ID", format!("replaybench-live{tenant}"))
                        .json(&body)
                        .send()
                        .await;
                    drop(permit);
                    let mut observed = observed.lock().unwrap();
                    match sent {
                        Ok(response) if response.status() == 202 => observed.alerts += 1,
                        Ok(response) => observed.failures.push(format!("alert: {}", response.status())),
                        Err(error) => observed.failures.push(format!("alert: {error}")),
                    }
                });
            }
        }
    }));
    for reader in 0..READERS {
        let (client, base, observed, stop, ids) = (
            client.clone(),
            base.clone(),
            observed.clone(),
            stop.clone(),
            incident_ids.clone(),
        );
        load.push(tokio::spawn(async move {
            let mut n = reader;
            while !stop.load(Ordering::SeqCst) {
                let (user, id) = &ids[n % ids.len().max(1)];
                n += READERS;
                let path = if n % 2 == 0 {
                    "/api/incidents".to_owned()
                } else {
                    format!("/api/incidents/{id}")
                };
                let started = Instant::now();
                let answered = client
                    .get(format!("{base}{path}"))
                    .header("X-User-ID", user)
                    .send()
                    .await;
                let ok = match answered {
                    Ok(response) if response.status() == 200 => response.bytes().await.is_ok(),
                    _ => false,
                };
                {
                    let mut observed = observed.lock().unwrap();
                    match ok {
                        true => observed.reads.push(started.elapsed().as_secs_f64() * 1000.0),
                        false => observed.failures.push(format!("read {path}")),
                    }
                }
                tokio::time::sleep(READ_PAUSE).await;
            }
        }));
    }

    tokio::time::sleep(warm_up).await;
    let before = std::mem::take(&mut *observed.lock().unwrap());
    let progress = Arc::new(ReplayProgress::default());
    let started = Instant::now();
    let rebuilt = state
        .events
        .rebuild_online(&state.db, None, &progress)
        .await
        .expect("the online rebuild completes");
    let took = started.elapsed().as_secs_f64();
    let during = std::mem::take(&mut *observed.lock().unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = std::mem::take(&mut *observed.lock().unwrap());

    let replayed: u64 = rebuilt.iter().map(|(_, events)| events).sum();
    println!(
        "online rebuild of {events} events: {took:.1} s, {:.0} events/s replayed ({replayed} handed over)",
        replayed as f64 / took
    );
    println!("phase                 alerts/s   reads   read p50 (ms)   read p99 (ms)   max (ms)   failures");
    for (phase, mut observed, seconds) in [
        ("before (warm-up)", before, warm_up.as_secs_f64()),
        ("during the rebuild", during, took),
    ] {
        let (p50, p99) = (
            percentile(&mut observed.reads, 0.50),
            percentile(&mut observed.reads, 0.99),
        );
        let max = observed.reads.last().copied().unwrap_or(f64::NAN);
        println!(
            "{phase:<20} {:>9.0} {:>7} {p50:>15.1} {p99:>15.1} {max:>10.1} {:>10}",
            observed.alerts as f64 / seconds,
            observed.reads.len(),
            observed.failures.len()
        );
        assert!(observed.failures.is_empty(), "{phase}: {:?}", observed.failures);
    }
    assert!(after.failures.is_empty(), "after the switch: {:?}", after.failures);

    // The tails apply what the last requests wrote; then the tables must equal a fresh replay's.
    let settled = settled(&state.db, &state.events.consumers).await;
    shutdown.cancel();
    server.await.unwrap().unwrap();
    state.events.replay(db, None).await.expect("replay");
    let fresh = checksums(db, &state.events.consumers).await.unwrap();
    assert_eq!(settled, fresh, "the rebuilt tables, kept current, equal a fresh replay");
    println!("checksums: the {} read tables equal a fresh replay's", fresh.len());
}

async fn settled(
    db: &PgPool,
    consumers: &[Arc<dyn vigil_projections::EventConsumer>],
) -> Vec<vigil_projections::TableChecksum> {
    let mut last = checksums(db, consumers).await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let unfinished: i64 =
            sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state IN ('available', 'retryable', 'running')")
                .fetch_one(db)
                .await
                .unwrap();
        let now = checksums(db, consumers).await.unwrap();
        if now == last && unfinished == 0 {
            return now;
        }
        last = now;
    }
}
