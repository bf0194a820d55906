//! Taking jobs: due ones, and running ones whose worker stopped extending the lease.

use std::time::Duration;

use sqlx::PgPool;

use super::millis;
use super::model::JobRecord;

/// Claims up to `limit` jobs of `kinds` for `worker_id`, oldest `run_at` first. A running job
/// whose lease expired is taken over (its lost attempt is recorded as an error) as long as it
/// has attempts left and nobody asked to cancel it; see [`finish_abandoned`] for the others.
pub(super) async fn claim(
    pool: &PgPool,
    kinds: &[String],
    worker_id: &str,
    lease: Duration,
    limit: usize,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    let mut jobs: Vec<JobRecord> = sqlx::query_as(
        r#"
        WITH claimable AS MATERIALIZED (
            SELECT id
            FROM jobs
            WHERE kind = ANY($1)
              AND ((state IN ('available', 'retryable') AND run_at <= now())
                OR (state = 'running' AND locked_until < now() AND attempt < max_attempts AND NOT cancel_requested))
            ORDER BY run_at, id
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        )
        UPDATE jobs
        SET state        = 'running',
            attempt      = jobs.attempt + 1,
            locked_by    = $3,
            locked_until = now() + $4 * interval '1 millisecond',
            heartbeat_at = now(),
            progress     = NULL,
            errors       = CASE WHEN jobs.state = 'running'
                                THEN jobs.errors || jsonb_build_array(jsonb_build_object(
                                    'attempt', jobs.attempt, 'at', now(),
                                    'error', 'lease expired while held by worker ' || jobs.locked_by))
                                ELSE jobs.errors END,
            last_error   = CASE WHEN jobs.state = 'running'
                                THEN 'lease expired while held by worker ' || jobs.locked_by
                                ELSE jobs.last_error END,
            updated_at   = now()
        FROM claimable
        WHERE jobs.id = claimable.id
        RETURNING jobs.*
        "#,
    )
    .bind(kinds)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .bind(worker_id)
    .bind(millis(lease))
    .fetch_all(pool)
    .await?;
    jobs.sort_by_key(|job| (job.run_at, job.id));
    Ok(jobs)
}

/// Ends the abandoned running jobs (lease expired) that must not run again: cancelled if a
/// cancellation was requested, otherwise discarded because their last attempt is spent.
/// Returns how many it ended.
pub(super) async fn finish_abandoned(pool: &PgPool, kinds: &[String]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        r#"
        WITH abandoned AS MATERIALIZED (
            SELECT id
            FROM jobs
            WHERE kind = ANY($1)
              AND state = 'running'
              AND locked_until < now()
              AND (cancel_requested OR attempt >= max_attempts)
            FOR UPDATE SKIP LOCKED
        )
        UPDATE jobs
        SET state        = CASE WHEN jobs.cancel_requested THEN 'cancelled' ELSE 'discarded' END,
            errors       = jobs.errors || jsonb_build_array(jsonb_build_object(
                               'attempt', jobs.attempt, 'at', now(),
                               'error', 'lease expired while held by worker ' || jobs.locked_by)),
            last_error   = 'lease expired while held by worker ' || jobs.locked_by,
            locked_until = NULL,
            finished_at  = now(),
            updated_at   = now()
        FROM abandoned
        WHERE jobs.id = abandoned.id
        "#,
    )
    .bind(kinds)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
