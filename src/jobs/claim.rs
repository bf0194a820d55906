//! Taking jobs: due ones, and running ones whose worker stopped extending the lease.

use std::time::Duration;

use sqlx::PgPool;

use super::millis;
use super::model::JobRecord;

/// Claims up to `limit` jobs of `kinds` for `worker_id`. Running jobs whose lease expired come
/// first (taken over, the lost attempt recorded as an error, as long as they have attempts left
/// and nobody asked to cancel them; see [`finish_abandoned`] for the others). Waiting jobs take
/// turns by tenant (the user the payload names; migration `jobs_take_turns_by_tenant`): the
/// tenant with the fewest jobs running goes first, then the one served least recently, and each
/// tenant's jobs run oldest first. One user's backlog so holds up nobody else's jobs.
pub(super) async fn claim(
    pool: &PgPool,
    kinds: &[String],
    worker_id: &str,
    lease: Duration,
    limit: usize,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    let claimed: Vec<Claimed> = sqlx::query_as(
        r#"
        WITH RECURSIVE waiting (tenant) AS (
            (SELECT tenant FROM jobs
             WHERE state IN ('available', 'retryable') AND run_at <= now() AND kind = ANY($1)
             ORDER BY tenant LIMIT 1)
            UNION ALL
            SELECT (SELECT j.tenant FROM jobs j
                    WHERE j.state IN ('available', 'retryable') AND j.run_at <= now() AND j.kind = ANY($1)
                      AND j.tenant > w.tenant
                    ORDER BY j.tenant LIMIT 1)
            FROM waiting w
            WHERE w.tenant IS NOT NULL
        ), queued AS (
            SELECT head.id, head.run_at, served.last_claimed_at,
                   busy.running + row_number() OVER (PARTITION BY w.tenant ORDER BY head.run_at, head.id) AS turn
            FROM waiting w
            CROSS JOIN LATERAL (
                SELECT count(*) AS running FROM jobs r WHERE r.state = 'running' AND r.tenant = w.tenant
            ) busy
            LEFT JOIN job_tenants served ON served.tenant = w.tenant
            CROSS JOIN LATERAL (
                SELECT j.id, j.run_at FROM jobs j
                WHERE j.tenant = w.tenant AND j.state IN ('available', 'retryable') AND j.run_at <= now()
                  AND j.kind = ANY($1)
                ORDER BY j.run_at, j.id
                LIMIT $2
            ) head
            WHERE w.tenant IS NOT NULL
            UNION ALL
            SELECT j.id, j.run_at, NULL, 0
            FROM jobs j
            WHERE j.kind = ANY($1) AND j.state = 'running' AND j.locked_until < now()
              AND j.attempt < j.max_attempts AND NOT j.cancel_requested
        ), claimable AS MATERIALIZED (
            SELECT jobs.id, jobs.tenant, jobs.state = 'running' AS taken_over, jobs.locked_by AS lost_by
            FROM queued JOIN jobs ON jobs.id = queued.id
            -- Checked again on the row as locked: another worker may have claimed it meanwhile.
            WHERE (jobs.state IN ('available', 'retryable') AND jobs.run_at <= now())
               OR (jobs.state = 'running' AND jobs.locked_until < now() AND jobs.attempt < jobs.max_attempts
                   AND NOT jobs.cancel_requested)
            ORDER BY queued.turn, queued.last_claimed_at NULLS FIRST, queued.run_at, queued.id
            LIMIT $2
            FOR UPDATE OF jobs SKIP LOCKED
        ), served AS (
            -- In one order, so that two claims of the same tenants never wait on each other in turn.
            INSERT INTO job_tenants (tenant, last_claimed_at)
            SELECT tenant, now() FROM (SELECT DISTINCT tenant FROM claimable) claimed ORDER BY tenant
            ON CONFLICT (tenant) DO UPDATE SET last_claimed_at = EXCLUDED.last_claimed_at
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
        RETURNING jobs.*, claimable.taken_over, claimable.lost_by
        "#,
    )
    .bind(kinds)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .bind(worker_id)
    .bind(millis(lease))
    .fetch_all(pool)
    .await?;
    let mut jobs = Vec::with_capacity(claimed.len());
    for Claimed {
        job,
        taken_over,
        lost_by,
    } in claimed
    {
        if taken_over {
            tracing::warn!(
                job_id = job.id,
                kind = %job.kind,
                attempt = job.attempt,
                lost_by = %lost_by.as_deref().unwrap_or_default(),
                "took over a job whose worker stopped renewing its lease"
            );
        }
        jobs.push(job);
    }
    jobs.sort_by_key(|job| (job.run_at, job.id));
    Ok(jobs)
}

/// A claimed job, and whether it was taken over from a worker whose lease expired (and which).
#[derive(sqlx::FromRow)]
struct Claimed {
    #[sqlx(flatten)]
    job: JobRecord,
    taken_over: bool,
    lost_by: Option<String>,
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
