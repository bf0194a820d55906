//! The analyses' side of ingestion (`LOAD_SCENARIOS=analyses`, the workers on): how soon each
//! new incident's analysis completes at a steady rate of new incidents, and how long the backlog
//! of a storm of new incidents takes to drain.
//!
//! Times are the incidents' own: from `created_at` (the incident opened, as its first alert was
//! placed) to `analyzed_at` (the analysis completed). The analysis waits `RCA_SETTLE_SECS` after
//! the incident opens; run with `RCA_SETTLE_SECS=0` to measure the analysis alone.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::{Connection, PgConnection};

use super::{alert_post, drive_posts, register, AlertMix};

/// One alert of its own service, hours from any other: each opens an incident.
fn new_incident_alert(round: &str, n: u64) -> String {
    let service = format!("service-{round}-{n}");
    let fired = chrono::DateTime::from_timestamp(1_795_000_000 + (n as i64) * 7_200, 0)
        .unwrap()
        .to_rfc3339();
    format!(
        r#"{{"status":"firing","alerts":[{{"status":"firing","fingerprint":"{round}-{n:016x}","labels":{{"alertname":"HighLatency","service":"{service}","severity":"critical"}},"annotations":{{"summary":"{service} p99 latency above 2s"}},"startsAt":"{fired}","endsAt":"0001-01-01T00:00:00Z"}}]}}"#
    )
}

/// The analyses of one user's incidents: how many there are, how many ended, and the time each
/// ended one took from opening.
struct Analyses {
    incidents: i64,
    ended: i64,
    errors: i64,
    seconds: Vec<f64>,
}

impl Analyses {
    async fn read(db: &mut PgConnection, users: &[String]) -> Self {
        let (incidents, ended, errors): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE aurora_status IN ('complete', 'error')),
                    count(*) FILTER (WHERE aurora_status = 'error')
             FROM incidents WHERE user_id = ANY($1)",
        )
        .bind(users)
        .fetch_one(&mut *db)
        .await
        .unwrap();
        let seconds: Vec<f64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM analyzed_at - created_at)::float8 FROM incidents
             WHERE user_id = ANY($1) AND analyzed_at IS NOT NULL ORDER BY 1",
        )
        .bind(users)
        .fetch_all(&mut *db)
        .await
        .unwrap();
        Self {
            incidents,
            ended,
            errors,
            seconds,
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        let index = ((self.seconds.len() as f64 * p).ceil() as usize).saturating_sub(1);
        self.seconds.get(index).copied().unwrap_or(f64::NAN)
    }

    /// Waits until every incident's analysis has ended, up to `limit`; returns how long it took.
    async fn wait_all_ended(db: &mut PgConnection, users: &[String], limit: Duration) -> (Self, Duration) {
        let started = Instant::now();
        loop {
            let analyses = Self::read(db, users).await;
            if analyses.ended == analyses.incidents || started.elapsed() > limit {
                return (analyses, started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// New incidents at `per_second` for `seconds`, each alert sent on its own schedule; then the
/// time from each incident's opening to its analysis's completion.
async fn steady(client: &reqwest::Client, base: &str, db: &mut PgConnection, per_second: u32, seconds: u64) {
    let round = format!("steady{per_second}");
    let user_id = register(client, base, &format!("{round}@example.com")).await;
    let url = format!("{base}/api/source_a/alerts");
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / per_second);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sends = tokio::task::JoinSet::new();
    for n in 0..u64::from(per_second) * seconds {
        ticks.tick().await;
        let (client, url, user_id, body) = (
            client.clone(),
            url.clone(),
            user_id.clone(),
            new_incident_alert(&round, n),
        );
        sends.spawn(async move {
            let response = client
                .post(url)
                .header("x-user-id", user_id)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            response.is_ok_and(|r| r.status() == reqwest::StatusCode::ACCEPTED)
        });
    }
    let failed = sends.join_all().await.into_iter().filter(|accepted| !accepted).count();
    let (analyses, waited) = Analyses::wait_all_ended(db, &[user_id], Duration::from_secs(300)).await;
    println!(
        "{:>20}: {} incidents at {per_second}/s for {seconds} s ({failed} alerts refused): opened → analysis ended \
         p50 {:.3} s  p99 {:.3} s  max {:.3} s; {} of {} ended ({} as error) {:.1} s after the last alert",
        format!("analyses {per_second}/s"),
        analyses.incidents,
        analyses.percentile(0.50),
        analyses.percentile(0.99),
        analyses.percentile(1.0),
        analyses.ended,
        analyses.incidents,
        analyses.errors,
        waited.as_secs_f64(),
    );
}

/// The `ingest` scenario's alert storm from `concurrency` senders for `duration`; then how long
/// the analyses of the incidents it opened take to drain, and how many ended.
async fn storm_drain(
    client: &reqwest::Client,
    base: &str,
    db: &mut PgConnection,
    concurrency: usize,
    duration: Duration,
) {
    let mut users = Vec::new();
    for n in 0..concurrency.div_ceil(4) {
        users.push(register(client, base, &format!("storm-drain-{n}@example.com")).await);
    }
    let users = Arc::new(users);
    let addr = base.trim_start_matches("http://").to_owned();
    let senders = users.clone();
    let mut outcome = drive_posts(concurrency, duration, &addr, move |n| {
        alert_post(AlertMix::Storm, &senders, n)
    })
    .await;
    let at_end = Analyses::read(db, &users).await;
    let (analyses, drained) = Analyses::wait_all_ended(db, &users, Duration::from_secs(600)).await;
    println!(
        "{:>20}: {:.0} alerts/s p99 {:.2} ms for {} s opened {} incidents; {} analyses had ended when it stopped; \
         the rest drained in {:.1} s ({:.0} analyses/s); {} of {} ended ({} as error)",
        "analyses storm",
        outcome.per_second(),
        outcome.percentile_ms(0.99),
        duration.as_secs(),
        analyses.incidents,
        at_end.ended,
        drained.as_secs_f64(),
        (analyses.ended - at_end.ended) as f64 / drained.as_secs_f64().max(0.001),
        analyses.ended,
        analyses.incidents,
        analyses.errors,
    );
}

/// The steady rates, then the storm and its drain.
pub async fn run(base: &str, db_url: &reqwest::Url, concurrency: usize, storm: Duration) {
    let client = reqwest::Client::new();
    let mut db = PgConnection::connect(db_url.as_str())
        .await
        .expect("bench database reachable");
    for per_second in [10, 100] {
        steady(&client, base, &mut db, per_second, 10).await;
    }
    storm_drain(&client, base, &mut db, concurrency, storm).await;
}
