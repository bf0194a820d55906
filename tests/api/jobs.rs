//! The durable job queue against a real PostgreSQL server (`DATABASE_URL`, or the local default).
//! Every test gets a fresh database with the migrations applied, dropped when the test ends.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::helpers::CapturedLogs;
use async_trait::async_trait;
use chrono::Utc;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use vigil::jobs::{
    cancel, enqueue, enqueue_in, find_by_unique_key, get, live_workers, requeue, Backoff, CancelOutcome, Enqueued,
    JobContext, JobError, JobFailure, JobHandler, JobRecord, JobState, NewJob, Worker, WorkerConfig,
};

/// Tables the test handlers write their side effects to.
const TEST_TABLES: &str = r#"
    CREATE TABLE processed (job_id bigint PRIMARY KEY, worker_note text);
    CREATE TABLE attempt_log (job_id bigint NOT NULL, attempt integer NOT NULL, started_at timestamptz NOT NULL);
    CREATE TABLE completions (job_id bigint NOT NULL, attempt integer NOT NULL);
"#;

// ---------------------------------------------------------------------------------------------
// Database per test
// ---------------------------------------------------------------------------------------------

struct TestDb {
    pool: PgPool,
    admin: PgConnectOptions,
    name: String,
}

impl TestDb {
    async fn new() -> Self {
        let server =
            std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let admin = PgConnectOptions::from_str(&server)
            .expect("DATABASE_URL parses")
            .database("postgres")
            .disable_statement_logging();
        let name = format!("jobs_test_{}", Uuid::new_v4().simple());
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .expect("PostgreSQL reachable at DATABASE_URL");
        sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
            .expect("create test database");
        conn.close().await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(30)
            .connect_with(admin.clone().database(&name))
            .await
            .expect("connect to test database");
        vigil::db::migrate(&pool).await.expect("apply migrations");
        sqlx::raw_sql(TEST_TABLES)
            .execute(&pool)
            .await
            .expect("create test tables");
        Self { pool, admin, name }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // The test's runtime may be shutting down; drop the database from a runtime of our own.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database");
            runtime.block_on(async {
                if let Ok(mut conn) = PgConnection::connect_with(&admin).await {
                    let drop = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
                    let _ = sqlx::query(&drop).execute(&mut conn).await;
                }
            });
        })
        .join()
        .ok();
    }
}

// ---------------------------------------------------------------------------------------------
// Test handlers
// ---------------------------------------------------------------------------------------------

/// Records the job in `processed` (primary key: a second run of one job fails) and echoes the
/// payload. Payload `{"sleep_ms": n}` makes it take a while.
struct Record {
    pool: PgPool,
}

#[async_trait]
impl JobHandler for Record {
    fn kind(&self) -> &'static str {
        "record"
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        if let Some(ms) = job.payload()["sleep_ms"].as_u64() {
            sleep(Duration::from_millis(ms)).await;
        }
        sqlx::query("INSERT INTO processed (job_id) VALUES ($1)")
            .bind(job.id())
            .execute(&self.pool)
            .await?;
        Ok(json!({ "echo": job.payload(), "attempt": job.attempt() }))
    }
}

/// Fails attempts before `fail_until` in the way `how` says ("retryable", "permanent" or
/// "panic"), then succeeds. Logs every attempt's start in `attempt_log`.
struct Flaky {
    pool: PgPool,
}

#[derive(serde::Deserialize)]
struct FlakyPayload {
    fail_until: i32,
    how: String,
}

#[async_trait]
impl JobHandler for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let payload: FlakyPayload = job.payload_as()?;
        sqlx::query("INSERT INTO attempt_log (job_id, attempt, started_at) VALUES ($1, $2, clock_timestamp())")
            .bind(job.id())
            .bind(job.attempt())
            .execute(&self.pool)
            .await?;
        if job.attempt() >= payload.fail_until {
            return Ok(json!({ "succeeded_on": job.attempt() }));
        }
        let message = format!("attempt {} failed", job.attempt());
        match payload.how.as_str() {
            "permanent" => Err(JobFailure::permanent(message)),
            "panic" => panic!("{message}"),
            _ => Err(JobFailure::retryable(message)),
        }
    }
}

/// A handler the test steers through the payload's `mode`, reporting each start on `started`.
struct Controlled {
    pool: PgPool,
    started: mpsc::UnboundedSender<(i64, i32)>,
    release: Arc<Notify>,
}

#[async_trait]
impl JobHandler for Controlled {
    fn kind(&self) -> &'static str {
        "controlled"
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let _ = self.started.send((job.id(), job.attempt()));
        match job.payload()["mode"].as_str().unwrap_or_default() {
            // Hangs on its first attempt (the worker is then killed or stopped); completes after.
            "hang_first_attempt" if job.attempt() == 1 => std::future::pending().await,
            "until_cancelled" => loop {
                job.checkpoint().await?;
                sleep(Duration::from_millis(20)).await;
            },
            "progress" => {
                job.report_progress(json!({ "step": 1, "total_steps": 2 })).await?;
                self.release.notified().await;
            }
            "sleep" => {
                let ms = job.payload()["ms"].as_u64().unwrap_or(0);
                sleep(Duration::from_millis(ms)).await;
            }
            _ => {}
        }
        sqlx::query("INSERT INTO completions (job_id, attempt) VALUES ($1, $2)")
            .bind(job.id())
            .bind(job.attempt())
            .execute(&self.pool)
            .await?;
        Ok(json!({ "completed_on": job.attempt() }))
    }
}

struct Probe {
    started: mpsc::UnboundedReceiver<(i64, i32)>,
    release: Arc<Notify>,
}

impl Probe {
    /// The next (job id, attempt) whose handler started.
    async fn next_start(&mut self) -> (i64, i32) {
        timeout(Duration::from_secs(10), self.started.recv())
            .await
            .expect("a handler started within 10 s")
            .expect("handler channel open")
    }
}

fn controlled(pool: &PgPool) -> (Controlled, Probe) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let handler = Controlled {
        pool: pool.clone(),
        started: sender,
        release: release.clone(),
    };
    (
        handler,
        Probe {
            started: receiver,
            release,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Workers and waiting
// ---------------------------------------------------------------------------------------------

fn fast_config(worker_id: &str) -> WorkerConfig {
    WorkerConfig {
        worker_id: worker_id.to_owned(),
        concurrency: 4,
        poll_interval: Duration::from_millis(25),
        lease: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(200),
        shutdown_grace: Duration::from_secs(5),
        backoff: Backoff {
            base: Duration::from_millis(50),
            max: Duration::from_millis(500),
            jitter: 0.0,
        },
    }
}

struct RunningWorker {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), JobError>>,
}

impl RunningWorker {
    fn spawn(worker: Worker) -> Self {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(worker.run(shutdown.clone()));
        Self { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        timeout(Duration::from_secs(20), self.task)
            .await
            .expect("worker stopped in time")
            .expect("worker task did not panic")
            .expect("worker ran without error");
    }

    /// Kills the worker as a crash would: no outcome written, nothing unregistered.
    async fn crash(self) {
        self.task.abort();
        assert!(self.task.await.expect_err("aborted").is_cancelled());
    }
}

fn worker(pool: &PgPool, config: WorkerConfig) -> Worker {
    Worker::new(pool.clone(), config).expect("valid worker config")
}

async fn job(pool: &PgPool, id: i64) -> JobRecord {
    get(pool, id).await.expect("get job").expect("job exists")
}

async fn wait_for_state(pool: &PgPool, id: i64, state: JobState) -> JobRecord {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let current = job(pool, id).await;
        if current.state == state {
            return current;
        }
        assert!(Instant::now() < deadline, "job never became {state}: {current:#?}");
        sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_until_live_workers(pool: &PgPool, within: Duration, expected: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live = live_workers(pool, within).await.expect("count live workers");
        if live == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "live workers stayed {live}, expected {expected}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

async fn enqueue_new(pool: &PgPool, new_job: NewJob) -> i64 {
    match enqueue(pool, new_job).await.expect("enqueue") {
        Enqueued::Inserted(id) => id,
        Enqueued::Duplicate(id) => panic!("unexpected duplicate of job {id}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Enqueueing and unique keys
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_to_completion_with_its_result() {
    let db = TestDb::new().await;
    let id = enqueue_new(&db.pool, NewJob::new("record", json!({ "incident": 42 }))).await;
    let queued = job(&db.pool, id).await;
    assert_eq!(
        (queued.state, queued.attempt, queued.max_attempts),
        (JobState::Available, 0, 5)
    );

    let running = RunningWorker::spawn(
        worker(&db.pool, fast_config("w1"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;

    assert_eq!(done.result, Some(json!({ "echo": { "incident": 42 }, "attempt": 1 })));
    assert_eq!(done.attempt, 1);
    assert_eq!(done.locked_by.as_deref(), Some("w1"));
    assert_eq!(done.locked_until, None);
    assert!(done.errors.is_empty());
    assert!(done.finished_at.is_some_and(|finished| finished >= done.created_at));
    assert_eq!(count(&db.pool, "SELECT count(*) FROM processed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_unique_key_returns_the_existing_job() {
    let db = TestDb::new().await;
    let first = enqueue(
        &db.pool,
        NewJob::new("rca", json!({ "n": 1 })).unique_key("rca:incident:7"),
    )
    .await
    .unwrap();
    let second = enqueue(
        &db.pool,
        NewJob::new("rca", json!({ "n": 2 })).unique_key("rca:incident:7"),
    )
    .await
    .unwrap();
    let other_key = enqueue(&db.pool, NewJob::new("rca", json!({})).unique_key("rca:incident:8"))
        .await
        .unwrap();
    let no_key = enqueue(&db.pool, NewJob::new("rca", json!({}))).await.unwrap();

    assert!(matches!(first, Enqueued::Inserted(_)));
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    assert!(matches!(other_key, Enqueued::Inserted(id) if id != first.id()));
    assert!(matches!(no_key, Enqueued::Inserted(_)));
    let rows = count(
        &db.pool,
        "SELECT count(*) FROM jobs WHERE unique_key = 'rca:incident:7'",
    )
    .await;
    assert_eq!(rows, 1);
    let kept = find_by_unique_key(&db.pool, "rca:incident:7").await.unwrap().unwrap();
    assert_eq!((kept.id, kept.payload), (first.id(), json!({ "n": 1 })));
    assert!(find_by_unique_key(&db.pool, "nope").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_with_one_unique_key_insert_exactly_once() {
    let db = TestDb::new().await;
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let pool = db.pool.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                enqueue(
                    &pool,
                    NewJob::new("rca", json!({ "n": n })).unique_key("rca:incident:1"),
                )
                .await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap().expect("enqueue succeeded"));
    }

    let inserted: Vec<i64> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Enqueued::Inserted(id) => Some(*id),
            Enqueued::Duplicate(_) => None,
        })
        .collect();
    assert_eq!(inserted.len(), 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|outcome| outcome.id() == inserted[0]),
        "{outcomes:?}"
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM jobs").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_job_keeps_its_unique_key_until_requeued() {
    let db = TestDb::new().await;
    let id = enqueue_new(&db.pool, NewJob::new("record", json!({})).unique_key("postmortem:3")).await;
    let running = RunningWorker::spawn(
        worker(&db.pool, fast_config("w1"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    wait_for_state(&db.pool, id, JobState::Completed).await;

    let again = enqueue(&db.pool, NewJob::new("record", json!({})).unique_key("postmortem:3"))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Duplicate(id));
    assert!(!requeue(&db.pool, 999_999).await.unwrap(), "unknown job");

    // The handler refuses a second run (primary key on processed): clear it so the rerun can pass.
    sqlx::query("DELETE FROM processed").execute(&db.pool).await.unwrap();
    assert!(requeue(&db.pool, id).await.unwrap());
    let rerun = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;
    assert_eq!(rerun.attempt, 1, "attempts start over");
    assert_eq!(rerun.result, Some(json!({ "echo": {}, "attempt": 1 })));
    assert_eq!(count(&db.pool, "SELECT count(*) FROM jobs").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_job_frees_its_unique_key() {
    let db = TestDb::new().await;
    let first = enqueue_new(&db.pool, NewJob::new("rca", json!({})).unique_key("rca:incident:9")).await;
    assert_eq!(cancel(&db.pool, first).await.unwrap(), CancelOutcome::Cancelled);

    let second = enqueue_new(&db.pool, NewJob::new("rca", json!({})).unique_key("rca:incident:9")).await;
    assert_ne!(first, second);
    let holder = find_by_unique_key(&db.pool, "rca:incident:9").await.unwrap().unwrap();
    assert_eq!((holder.id, holder.state), (second, JobState::Available));

    // Requeueing the cancelled one would give the key two live jobs.
    let refused = requeue(&db.pool, first).await;
    assert!(
        matches!(refused, Err(JobError::UniqueKeyInUse { job_id }) if job_id == first),
        "{refused:?}"
    );
    assert_eq!(job(&db.pool, first).await.state, JobState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_a_transaction_follows_commit_and_rollback() {
    let db = TestDb::new().await;
    let mut rolled_back = db.pool.begin().await.unwrap();
    let lost = enqueue_in(&mut *rolled_back, NewJob::new("rca", json!({ "tx": "rollback" })))
        .await
        .unwrap();
    rolled_back.rollback().await.unwrap();

    let mut committed = db.pool.begin().await.unwrap();
    let kept = enqueue_in(
        &mut *committed,
        NewJob::new("rca", json!({ "tx": "commit" })).unique_key("k"),
    )
    .await
    .unwrap();
    let duplicate_in_same_tx = enqueue_in(&mut *committed, NewJob::new("rca", json!({})).unique_key("k"))
        .await
        .unwrap();
    committed.commit().await.unwrap();

    assert!(get(&db.pool, lost.id()).await.unwrap().is_none());
    assert_eq!(job(&db.pool, kept.id()).await.payload, json!({ "tx": "commit" }));
    assert_eq!(duplicate_in_same_tx, Enqueued::Duplicate(kept.id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_jobs_and_worker_configs_are_rejected() {
    let db = TestDb::new().await;
    for bad in [
        NewJob::new("", json!({})),
        NewJob::new("rca", json!({})).max_attempts(0),
        NewJob::new("rca", json!({})).unique_key(""),
    ] {
        let outcome = enqueue(&db.pool, bad.clone()).await;
        assert!(matches!(outcome, Err(JobError::InvalidJob(_))), "{bad:?}: {outcome:?}");
    }
    assert_eq!(count(&db.pool, "SELECT count(*) FROM jobs").await, 0);

    let lease_too_short = WorkerConfig {
        lease: Duration::from_millis(100),
        ..fast_config("w")
    };
    assert!(matches!(
        Worker::new(db.pool.clone(), lease_too_short),
        Err(JobError::InvalidConfig(_))
    ));
    let no_concurrency = WorkerConfig {
        concurrency: 0,
        ..fast_config("w")
    };
    assert!(Worker::new(db.pool.clone(), no_concurrency).is_err());
    let same_kind_twice = worker(&db.pool, fast_config("w"))
        .with_handler(Record { pool: db.pool.clone() })
        .unwrap()
        .with_handler(Record { pool: db.pool.clone() });
    assert!(matches!(same_kind_twice, Err(JobError::InvalidConfig(_))));
    let no_handlers = worker(&db.pool, fast_config("w")).run(CancellationToken::new()).await;
    assert!(matches!(no_handlers, Err(JobError::InvalidConfig(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_job_waits_for_its_run_at() {
    let db = TestDb::new().await;
    let run_at = Utc::now() + chrono::Duration::milliseconds(1_500);
    let id = enqueue_new(&db.pool, NewJob::new("record", json!({})).run_at(run_at)).await;
    let running = RunningWorker::spawn(
        worker(&db.pool, fast_config("w1"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    sleep(Duration::from_millis(500)).await;
    let early = job(&db.pool, id).await;
    assert_eq!((early.state, early.attempt), (JobState::Available, 0));

    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;
    assert!(done.finished_at.unwrap() >= run_at);
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

fn flaky_worker(pool: &PgPool) -> Worker {
    worker(pool, fast_config("w1"))
        .with_handler(Flaky { pool: pool.clone() })
        .unwrap()
}

async fn attempt_starts(pool: &PgPool, id: i64) -> Vec<(i32, chrono::DateTime<Utc>)> {
    sqlx::query_as("SELECT attempt, started_at FROM attempt_log WHERE job_id = $1 ORDER BY attempt")
        .bind(id)
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_failures_back_off_then_succeed_on_attempt_3() {
    let db = TestDb::new().await;
    let payload = json!({ "fail_until": 3, "how": "retryable" });
    let id = enqueue_new(&db.pool, NewJob::new("flaky", payload)).await;
    let running = RunningWorker::spawn(flaky_worker(&db.pool));
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;

    assert_eq!(done.attempt, 3);
    assert_eq!(done.result, Some(json!({ "succeeded_on": 3 })));
    let failed: Vec<(i32, &str)> = done.errors.iter().map(|e| (e.attempt, e.error.as_str())).collect();
    assert_eq!(failed, vec![(1, "attempt 1 failed"), (2, "attempt 2 failed")]);
    assert_eq!(done.last_error.as_deref(), Some("attempt 2 failed"));

    // Backoff with a 50 ms base and no jitter: 100 ms after attempt 1, 200 ms after attempt 2.
    let starts = attempt_starts(&db.pool, id).await;
    assert_eq!(
        starts.iter().map(|(attempt, _)| *attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let second_delay = starts[1].1 - done.errors[0].at;
    let third_delay = starts[2].1 - done.errors[1].at;
    assert!(second_delay >= chrono::Duration::milliseconds(100), "{second_delay}");
    assert!(third_delay >= chrono::Duration::milliseconds(200), "{third_delay}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_attempts_discard_the_job_with_every_error() {
    let db = TestDb::new().await;
    let payload = json!({ "fail_until": 99, "how": "retryable" });
    let id = enqueue_new(&db.pool, NewJob::new("flaky", payload).max_attempts(3)).await;
    let running = RunningWorker::spawn(flaky_worker(&db.pool));
    let dead = wait_for_state(&db.pool, id, JobState::Discarded).await;
    sleep(Duration::from_millis(200)).await;
    running.stop().await;

    assert_eq!(dead.attempt, 3);
    let failed: Vec<i32> = dead.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(failed, vec![1, 2, 3]);
    assert_eq!(dead.errors[2].error, "attempt 3 failed");
    assert_eq!(dead.last_error.as_deref(), Some("attempt 3 failed"));
    assert!(dead.finished_at.is_some());
    assert_eq!(dead.result, None);
    assert_eq!(attempt_starts(&db.pool, id).await.len(), 3, "no attempt after the last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_discards_after_one_attempt() {
    let db = TestDb::new().await;
    let payload = json!({ "fail_until": 99, "how": "permanent" });
    let id = enqueue_new(&db.pool, NewJob::new("flaky", payload)).await;
    let bad_payload = enqueue_new(&db.pool, NewJob::new("flaky", json!({ "unexpected": true }))).await;
    let running = RunningWorker::spawn(flaky_worker(&db.pool));
    let dead = wait_for_state(&db.pool, id, JobState::Discarded).await;
    let unreadable = wait_for_state(&db.pool, bad_payload, JobState::Discarded).await;
    running.stop().await;

    assert_eq!((dead.attempt, dead.max_attempts), (1, 5));
    assert_eq!(dead.errors.len(), 1);
    assert_eq!(dead.errors[0].error, "attempt 1 failed");
    assert_eq!(unreadable.attempt, 1);
    assert!(
        unreadable.errors[0].error.starts_with("invalid payload for flaky"),
        "{unreadable:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_is_caught_and_retried() {
    let db = TestDb::new().await;
    let payload = json!({ "fail_until": 2, "how": "panic" });
    let id = enqueue_new(&db.pool, NewJob::new("flaky", payload)).await;
    let running = RunningWorker::spawn(flaky_worker(&db.pool));
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;

    assert_eq!(done.attempt, 2);
    assert_eq!(done.errors.len(), 1);
    assert_eq!(done.errors[0].error, "handler panicked: attempt 1 failed");
}

// ---------------------------------------------------------------------------------------------
// Leases and crashed workers
// ---------------------------------------------------------------------------------------------

fn short_lease_config(worker_id: &str) -> WorkerConfig {
    WorkerConfig {
        lease: Duration::from_secs(1),
        ..fast_config(worker_id)
    }
}

// On the current thread, where `CapturedLogs` sees what the workers log.
#[tokio::test]
async fn crashed_workers_job_is_taken_over_after_its_lease_and_completes_once() {
    let logs = CapturedLogs::start();
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "hang_first_attempt" })),
    )
    .await;
    let (handler, mut probe) = controlled(&db.pool);
    let doomed = RunningWorker::spawn(
        worker(&db.pool, short_lease_config("doomed"))
            .with_handler(handler)
            .unwrap(),
    );
    assert_eq!(probe.next_start().await, (id, 1));
    doomed.crash().await;
    let crashed_at = Utc::now();
    let held = job(&db.pool, id).await;
    assert_eq!(
        (held.state, held.locked_by.as_deref()),
        (JobState::Running, Some("doomed"))
    );

    let (handler, mut probe) = controlled(&db.pool);
    let rescuer = RunningWorker::spawn(worker(&db.pool, fast_config("rescuer")).with_handler(handler).unwrap());
    assert_eq!(probe.next_start().await, (id, 2));
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    rescuer.stop().await;

    assert!(
        Utc::now() - crashed_at >= chrono::Duration::milliseconds(500),
        "not before the lease expired"
    );
    assert_eq!(done.attempt, 2);
    assert_eq!(done.locked_by.as_deref(), Some("rescuer"));
    assert_eq!(done.result, Some(json!({ "completed_on": 2 })));
    assert_eq!(done.errors.len(), 1);
    assert_eq!(done.errors[0].attempt, 1);
    assert_eq!(done.errors[0].error, "lease expired while held by worker doomed");
    let completions: Vec<(i64, i32)> = sqlx::query_as("SELECT job_id, attempt FROM completions")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(completions, vec![(id, 2)], "the side effect happened exactly once");
    let logged = logs.text();
    let takeover = logged
        .lines()
        .find(|line| line.contains("took over a job whose worker stopped renewing its lease"))
        .unwrap_or_else(|| panic!("the takeover is logged: {logged}"));
    assert!(
        takeover.contains("WARN") && takeover.contains("lost_by=doomed"),
        "{takeover}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_job_on_its_last_attempt_is_discarded() {
    let db = TestDb::new().await;
    let new_job = NewJob::new("controlled", json!({ "mode": "hang_first_attempt" })).max_attempts(1);
    let id = enqueue_new(&db.pool, new_job).await;
    let (handler, mut probe) = controlled(&db.pool);
    let doomed = RunningWorker::spawn(
        worker(&db.pool, short_lease_config("doomed"))
            .with_handler(handler)
            .unwrap(),
    );
    probe.next_start().await;
    doomed.crash().await;

    let (handler, _probe) = controlled(&db.pool);
    let rescuer = RunningWorker::spawn(worker(&db.pool, fast_config("rescuer")).with_handler(handler).unwrap());
    let dead = wait_for_state(&db.pool, id, JobState::Discarded).await;
    rescuer.stop().await;

    assert_eq!(dead.attempt, 1);
    assert_eq!(dead.errors.len(), 1);
    assert_eq!(dead.errors[0].error, "lease expired while held by worker doomed");
    assert_eq!(count(&db.pool, "SELECT count(*) FROM completions").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_job_keeps_its_lease_while_it_runs() {
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "sleep", "ms": 2_500 })),
    )
    .await;
    let (first_handler, mut probe) = controlled(&db.pool);
    let (second_handler, _second_probe) = controlled(&db.pool);
    let first = RunningWorker::spawn(
        worker(&db.pool, short_lease_config("first"))
            .with_handler(first_handler)
            .unwrap(),
    );
    assert_eq!(probe.next_start().await, (id, 1));
    let second = RunningWorker::spawn(
        worker(&db.pool, short_lease_config("second"))
            .with_handler(second_handler)
            .unwrap(),
    );
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    first.stop().await;
    second.stop().await;

    assert_eq!(done.attempt, 1, "never taken over: {done:?}");
    assert_eq!(done.locked_by.as_deref(), Some("first"));
    assert!(done.errors.is_empty());
    assert_eq!(count(&db.pool, "SELECT count(*) FROM completions").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_whose_job_was_taken_over_cannot_complete_it() {
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "sleep", "ms": 600 })),
    )
    .await;
    let (handler, mut probe) = controlled(&db.pool);
    let running = RunningWorker::spawn(worker(&db.pool, fast_config("slow")).with_handler(handler).unwrap());
    assert_eq!(probe.next_start().await, (id, 1));
    // What a claim by another worker does once the lease has expired.
    sqlx::query(
        "UPDATE jobs SET locked_by = 'thief', attempt = 2, locked_until = now() + interval '1 hour' WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    sleep(Duration::from_millis(1_200)).await;
    running.stop().await;

    let taken = job(&db.pool, id).await;
    assert_eq!(
        (taken.state, taken.locked_by.as_deref(), taken.attempt),
        (JobState::Running, Some("thief"), 2)
    );
    assert_eq!(
        (taken.result, taken.finished_at),
        (None, None),
        "the old attempt's completion was dropped"
    );
    let handler_finished = count(&db.pool, "SELECT count(*) FROM completions").await;
    assert_eq!(handler_finished, 1, "the old attempt did run to its end");
}

// ---------------------------------------------------------------------------------------------
// Cancellation and progress
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_job_is_immediate() {
    let db = TestDb::new().await;
    let id = enqueue_new(&db.pool, NewJob::new("record", json!({}))).await;
    assert_eq!(cancel(&db.pool, id).await.unwrap(), CancelOutcome::Cancelled);
    let cancelled = job(&db.pool, id).await;
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(cancelled.finished_at.is_some());
    assert!(!cancelled.cancel_requested);
    assert_eq!(
        cancel(&db.pool, id).await.unwrap(),
        CancelOutcome::AlreadyFinished(JobState::Cancelled)
    );
    assert_eq!(cancel(&db.pool, 999_999).await.unwrap(), CancelOutcome::NotFound);

    let running = RunningWorker::spawn(
        worker(&db.pool, fast_config("w1"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    let marker = enqueue_new(&db.pool, NewJob::new("record", json!({}))).await;
    wait_for_state(&db.pool, marker, JobState::Completed).await;
    running.stop().await;
    let after = job(&db.pool, id).await;
    assert_eq!((after.state, after.attempt), (JobState::Cancelled, 0), "never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_job_stops_it_at_its_next_checkpoint() {
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "until_cancelled" })),
    )
    .await;
    let (handler, mut probe) = controlled(&db.pool);
    let running = RunningWorker::spawn(worker(&db.pool, fast_config("w1")).with_handler(handler).unwrap());
    assert_eq!(probe.next_start().await, (id, 1));

    assert_eq!(cancel(&db.pool, id).await.unwrap(), CancelOutcome::CancelRequested);
    let cancelled = wait_for_state(&db.pool, id, JobState::Cancelled).await;
    running.stop().await;

    assert!(cancelled.cancel_requested);
    assert_eq!(cancelled.attempt, 1);
    assert!(cancelled.errors.is_empty(), "a cancellation is not a failure");
    assert_eq!(cancelled.result, None);
    assert!(cancelled.finished_at.is_some());
    assert_eq!(count(&db.pool, "SELECT count(*) FROM completions").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_visible_while_the_job_runs() {
    let db = TestDb::new().await;
    let id = enqueue_new(&db.pool, NewJob::new("controlled", json!({ "mode": "progress" }))).await;
    let (handler, mut probe) = controlled(&db.pool);
    let running = RunningWorker::spawn(worker(&db.pool, fast_config("w1")).with_handler(handler).unwrap());
    probe.next_start().await;

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = job(&db.pool, id).await;
    while seen.progress.is_none() && Instant::now() < deadline {
        sleep(Duration::from_millis(20)).await;
        seen = job(&db.pool, id).await;
    }
    assert_eq!(seen.state, JobState::Running);
    assert_eq!(seen.progress, Some(json!({ "step": 1, "total_steps": 2 })));

    probe.release.notify_one();
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    running.stop().await;
    assert_eq!(done.progress, Some(json!({ "step": 1, "total_steps": 2 })));
}

// ---------------------------------------------------------------------------------------------
// Many workers, wake-ups, liveness, shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_process_200_jobs_exactly_once() {
    let db = TestDb::new().await;
    for n in 0..200 {
        enqueue_new(&db.pool, NewJob::new("record", json!({ "n": n, "sleep_ms": 5 }))).await;
    }
    let workers: Vec<RunningWorker> = ["a", "b"]
        .into_iter()
        .map(|id| {
            let config = WorkerConfig {
                concurrency: 4,
                ..fast_config(id)
            };
            RunningWorker::spawn(
                worker(&db.pool, config)
                    .with_handler(Record { pool: db.pool.clone() })
                    .unwrap(),
            )
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&db.pool, "SELECT count(*) FROM jobs WHERE state = 'completed'").await < 200 {
        assert!(Instant::now() < deadline, "200 jobs not completed in 60 s");
        sleep(Duration::from_millis(50)).await;
    }
    for running in workers {
        running.stop().await;
    }

    assert_eq!(count(&db.pool, "SELECT count(*) FROM processed").await, 200);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM jobs WHERE attempt = 1 AND errors = '[]'"
        )
        .await,
        200,
        "no job ran twice or failed"
    );
    assert_eq!(
        count(&db.pool, "SELECT count(DISTINCT locked_by) FROM jobs").await,
        2,
        "both workers took part"
    );
}

/// One tenant's backlog does not hold up the others: with one worker slot, queued jobs take
/// turns by the user their payload names (least recently served first), each user's oldest
/// first; jobs that name no user share one turn of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_take_turns_by_tenant() {
    let db = TestDb::new().await;
    let mut enqueued = Vec::new();
    for (user, jobs) in [(Some("storm"), 6), (Some("bob"), 2), (Some("carol"), 1), (None, 1)] {
        for _ in 0..jobs {
            let mut payload = json!({ "mode": "sleep", "ms": 5 });
            if let Some(user) = user {
                payload["user_id"] = json!(user);
            }
            let id = enqueue_new(&db.pool, NewJob::new("controlled", payload)).await;
            enqueued.push((id, user.unwrap_or("no one")));
        }
    }
    let owner = |id: i64| enqueued.iter().find(|(job, _)| *job == id).unwrap().1;
    let (handler, mut probe) = controlled(&db.pool);
    let config = WorkerConfig {
        concurrency: 1,
        ..fast_config("fair")
    };
    let running = RunningWorker::spawn(worker(&db.pool, config).with_handler(handler).unwrap());
    let mut order = Vec::new();
    for _ in 0..enqueued.len() {
        let (id, _) = probe.next_start().await;
        order.push(owner(id));
    }
    running.stop().await;
    assert_eq!(
        order,
        ["storm", "bob", "carol", "no one", "storm", "bob", "storm", "storm", "storm", "storm"],
        "first come first served would run the storm's six first"
    );
    let storm_order: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE payload ->> 'user_id' = 'storm' ORDER BY heartbeat_at, id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let mut oldest_first = storm_order.clone();
    oldest_first.sort_unstable();
    assert_eq!(storm_order, oldest_first, "a tenant's own jobs run oldest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_wakes_an_idle_worker_long_before_its_poll() {
    let db = TestDb::new().await;
    let config = WorkerConfig {
        poll_interval: Duration::from_secs(60),
        ..fast_config("listener")
    };
    let running = RunningWorker::spawn(
        worker(&db.pool, config)
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    wait_until_live_workers(&db.pool, Duration::from_secs(5), 1).await;
    sleep(Duration::from_millis(300)).await; // past its first claim: now only a wake-up helps

    let enqueued_at = Instant::now();
    let id = enqueue_new(&db.pool, NewJob::new("record", json!({}))).await;
    wait_for_state(&db.pool, id, JobState::Completed).await;
    assert!(
        enqueued_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        enqueued_at.elapsed()
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_workers_counts_running_workers_only() {
    let db = TestDb::new().await;
    let within = Duration::from_millis(600);
    assert_eq!(live_workers(&db.pool, within).await.unwrap(), 0);

    let stopping = RunningWorker::spawn(
        worker(&db.pool, fast_config("stopping"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    let crashing = RunningWorker::spawn(
        worker(&db.pool, fast_config("crashing"))
            .with_handler(Record { pool: db.pool.clone() })
            .unwrap(),
    );
    wait_until_live_workers(&db.pool, within, 2).await;
    sleep(Duration::from_millis(800)).await;
    assert_eq!(
        live_workers(&db.pool, within).await.unwrap(),
        2,
        "heartbeats keep them live"
    );

    stopping.stop().await;
    assert_eq!(
        live_workers(&db.pool, within).await.unwrap(),
        1,
        "a stopped worker unregisters"
    );
    let rows = count(
        &db.pool,
        "SELECT count(*) FROM job_workers WHERE worker_id = 'stopping'",
    )
    .await;
    assert_eq!(rows, 0);

    crashing.crash().await;
    wait_until_live_workers(&db.pool, within, 0).await;
    let stale = live_workers(&db.pool, Duration::from_secs(3600)).await.unwrap();
    assert_eq!(stale, 1, "a crashed worker's row stays, with a stale heartbeat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_running_jobs_finish() {
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "sleep", "ms": 500 })),
    )
    .await;
    let (handler, mut probe) = controlled(&db.pool);
    let running = RunningWorker::spawn(worker(&db.pool, fast_config("w1")).with_handler(handler).unwrap());
    probe.next_start().await;
    running.shutdown.cancel();
    sleep(Duration::from_millis(100)).await;
    let later = enqueue_new(&db.pool, NewJob::new("controlled", json!({}))).await;
    running.stop().await;

    let done = job(&db.pool, id).await;
    assert_eq!((done.state, done.attempt), (JobState::Completed, 1));
    let untouched = job(&db.pool, later).await;
    assert_eq!(
        (untouched.state, untouched.attempt),
        (JobState::Available, 0),
        "a stopping worker claims nothing"
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_workers").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_grace_period_interrupts_and_hands_the_job_over() {
    let db = TestDb::new().await;
    let id = enqueue_new(
        &db.pool,
        NewJob::new("controlled", json!({ "mode": "hang_first_attempt" })),
    )
    .await;
    let (handler, mut probe) = controlled(&db.pool);
    let config = WorkerConfig {
        shutdown_grace: Duration::from_millis(200),
        ..fast_config("leaving")
    };
    let leaving = RunningWorker::spawn(worker(&db.pool, config).with_handler(handler).unwrap());
    probe.next_start().await;
    leaving.stop().await;

    let interrupted = job(&db.pool, id).await;
    assert_eq!((interrupted.state, interrupted.attempt), (JobState::Retryable, 1));
    assert!(interrupted.run_at <= Utc::now(), "retried at once, without backoff");
    assert_eq!(
        interrupted.errors[0].error,
        "interrupted: worker leaving shut down before the attempt finished"
    );

    let (handler, mut probe) = controlled(&db.pool);
    let next = RunningWorker::spawn(worker(&db.pool, fast_config("next")).with_handler(handler).unwrap());
    assert_eq!(probe.next_start().await, (id, 2));
    let done = wait_for_state(&db.pool, id, JobState::Completed).await;
    next.stop().await;
    assert_eq!(done.locked_by.as_deref(), Some("next"));
}
