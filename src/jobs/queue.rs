//! The producer's side: enqueue, inspect, cancel and requeue jobs.

use std::time::Duration;

use sqlx::{PgExecutor, PgPool};

use super::error::JobError;
use super::millis;
use super::model::{CancelOutcome, Enqueued, JobRecord, JobState, NewJob};

/// Enqueues a job, or returns the job that already holds its unique key.
pub async fn enqueue(pool: &PgPool, job: NewJob) -> Result<Enqueued, JobError> {
    enqueue_in(pool, job).await
}

/// Like [`enqueue`], on any executor: pass `&mut *transaction` to enqueue atomically with the
/// caller's own writes (the job becomes visible, and workers are notified, on commit).
///
/// On a duplicate key the existing job's row is locked until the caller's transaction ends, so
/// keep such transactions short: the job's worker cannot extend its lease meanwhile.
pub async fn enqueue_in<'c, E: PgExecutor<'c>>(executor: E, job: NewJob) -> Result<Enqueued, JobError> {
    validate(&job)?;
    // DO UPDATE with a no-op assignment rather than DO NOTHING: it returns the existing row even
    // when a concurrent transaction committed it after this statement's snapshot, which no
    // SELECT in the same statement could see. xmax = 0 only on a row this statement inserted.
    let (id, inserted): (i64, bool) = sqlx::query_as(
        r#"
        INSERT INTO jobs (kind, payload, unique_key, max_attempts, run_at)
        VALUES ($1, $2, $3, $4, COALESCE($5, now()))
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state NOT IN ('cancelled', 'discarded')
        DO UPDATE SET updated_at = jobs.updated_at
        RETURNING id, (xmax = 0) AS inserted
        "#,
    )
    .bind(&job.kind)
    .bind(&job.payload)
    .bind(&job.unique_key)
    .bind(job.max_attempts)
    .bind(job.run_at)
    .fetch_one(executor)
    .await?;
    Ok(if inserted {
        Enqueued::Inserted(id)
    } else {
        Enqueued::Duplicate(id)
    })
}

/// Enqueues several jobs in one statement; a job whose unique key is already held is skipped.
pub async fn enqueue_many_in<'c, E: PgExecutor<'c>>(executor: E, jobs: &[NewJob]) -> Result<(), JobError> {
    for job in jobs {
        validate(job)?;
    }
    if jobs.is_empty() {
        return Ok(());
    }
    sqlx::query(
        r#"
        INSERT INTO jobs (kind, payload, unique_key, max_attempts, run_at)
        SELECT kind, payload, unique_key, max_attempts, COALESCE(run_at, now())
        FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::int[], $5::timestamptz[])
            AS j(kind, payload, unique_key, max_attempts, run_at)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state NOT IN ('cancelled', 'discarded')
        DO NOTHING
        "#,
    )
    .bind(jobs.iter().map(|job| job.kind.as_str()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|job| &job.payload).collect::<Vec<_>>())
    .bind(jobs.iter().map(|job| job.unique_key.as_deref()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|job| job.max_attempts).collect::<Vec<_>>())
    .bind(jobs.iter().map(|job| job.run_at).collect::<Vec<_>>())
    .execute(executor)
    .await?;
    Ok(())
}

fn validate(job: &NewJob) -> Result<(), JobError> {
    if job.kind.is_empty() {
        return Err(JobError::InvalidJob("kind is empty".into()));
    }
    if job.unique_key.as_deref() == Some("") {
        return Err(JobError::InvalidJob("unique key is empty".into()));
    }
    if job.max_attempts < 1 {
        return Err(JobError::InvalidJob(format!(
            "max_attempts is {}, must be at least 1",
            job.max_attempts
        )));
    }
    Ok(())
}

pub async fn get(pool: &PgPool, id: i64) -> Result<Option<JobRecord>, JobError> {
    let job = sqlx::query_as("SELECT * FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(job)
}

/// The job holding `key`, or if none does, the latest cancelled or discarded job that had it.
pub async fn find_by_unique_key(pool: &PgPool, key: &str) -> Result<Option<JobRecord>, JobError> {
    let job = sqlx::query_as(
        r#"
        SELECT * FROM jobs
        WHERE unique_key = $1
        ORDER BY state NOT IN ('cancelled', 'discarded') DESC, id DESC
        LIMIT 1
        "#,
    )
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(job)
}

/// Cancels a job that has not started at once; asks a running job to stop at its next checkpoint.
/// A running handler that reaches no checkpoint runs to its end: if it succeeds the job still
/// completes, if it fails the job is cancelled rather than retried.
pub async fn cancel(pool: &PgPool, id: i64) -> Result<CancelOutcome, JobError> {
    let new_state: Option<JobState> = sqlx::query_scalar(
        r#"
        UPDATE jobs
        SET state            = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
            cancel_requested = state = 'running',
            finished_at      = CASE WHEN state = 'running' THEN NULL ELSE now() END,
            updated_at       = now()
        WHERE id = $1 AND state IN ('available', 'retryable', 'running')
        RETURNING state
        "#,
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    match new_state {
        Some(JobState::Running) => Ok(CancelOutcome::CancelRequested),
        Some(_) => Ok(CancelOutcome::Cancelled),
        None => Ok(match get(pool, id).await? {
            Some(job) => CancelOutcome::AlreadyFinished(job.state),
            None => CancelOutcome::NotFound,
        }),
    }
}

/// Makes a finished job (completed, discarded or cancelled) available again as a fresh run:
/// attempts start over, result and progress are cleared, past errors are kept. Returns false
/// when the job does not exist or has not finished.
pub async fn requeue(pool: &PgPool, id: i64) -> Result<bool, JobError> {
    let outcome = sqlx::query(
        r#"
        UPDATE jobs
        SET state            = 'available',
            attempt          = 0,
            run_at           = now(),
            cancel_requested = false,
            result           = NULL,
            progress         = NULL,
            last_error       = NULL,
            locked_until     = NULL,
            heartbeat_at     = NULL,
            finished_at      = NULL,
            updated_at       = now()
        WHERE id = $1 AND state IN ('completed', 'discarded', 'cancelled')
        "#,
    )
    .bind(id)
    .execute(pool)
    .await;
    match outcome {
        Ok(done) => Ok(done.rows_affected() == 1),
        Err(sqlx::Error::Database(error)) if error.constraint() == Some("jobs_unique_key") => {
            Err(JobError::UniqueKeyInUse { job_id: id })
        }
        Err(error) => Err(error.into()),
    }
}

/// How many workers have sent a heartbeat within `within`.
/// Workers whose heartbeat is this recent count as live.
pub const LIVE_WORKER_WINDOW: Duration = Duration::from_secs(30);

pub async fn live_workers(pool: &PgPool, within: Duration) -> Result<i64, JobError> {
    let count = sqlx::query_scalar(
        "SELECT count(*) FROM job_workers WHERE heartbeat_at > now() - $1 * interval '1 millisecond'",
    )
    .bind(millis(within))
    .fetch_one(pool)
    .await?;
    Ok(count)
}
