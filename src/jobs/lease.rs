//! Writes a worker makes to a job it claimed. Each is fenced by (job, worker, attempt): once the
//! lease has expired and another worker claimed the job again, the old attempt's writes match no
//! row, so a job is never completed (or failed) twice.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use super::millis;
use super::model::JobState;

#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub job_id: i64,
    pub worker_id: Arc<str>,
    pub attempt: i32,
    pub duration: Duration,
}

/// What extending a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseStatus {
    Held { cancel_requested: bool },
    Lost,
}

impl Lease {
    /// Pushes `locked_until` a full lease duration ahead.
    pub async fn extend(&self, pool: &PgPool) -> Result<LeaseStatus, sqlx::Error> {
        let cancel_requested: Option<bool> = sqlx::query_scalar(
            r#"
            UPDATE jobs
            SET locked_until = now() + $4 * interval '1 millisecond',
                heartbeat_at = now(),
                updated_at   = now()
            WHERE id = $1 AND state = 'running' AND locked_by = $2 AND attempt = $3
            RETURNING cancel_requested
            "#,
        )
        .bind(self.job_id)
        .bind(&*self.worker_id)
        .bind(self.attempt)
        .bind(millis(self.duration))
        .fetch_optional(pool)
        .await?;
        Ok(match cancel_requested {
            Some(cancel_requested) => LeaseStatus::Held { cancel_requested },
            None => LeaseStatus::Lost,
        })
    }

    /// Returns false when the lease was lost.
    pub async fn record_progress(&self, pool: &PgPool, progress: &Value) -> Result<bool, sqlx::Error> {
        let updated = sqlx::query(
            r#"
            UPDATE jobs
            SET progress = $4, updated_at = now()
            WHERE id = $1 AND state = 'running' AND locked_by = $2 AND attempt = $3
            "#,
        )
        .bind(self.job_id)
        .bind(&*self.worker_id)
        .bind(self.attempt)
        .bind(progress)
        .execute(pool)
        .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Returns false when the lease was lost and nothing was written.
    pub async fn complete(&self, pool: &PgPool, result: &Value) -> Result<bool, sqlx::Error> {
        let updated = sqlx::query(
            r#"
            UPDATE jobs
            SET state        = 'completed',
                result       = $4,
                locked_until = NULL,
                finished_at  = now(),
                updated_at   = now()
            WHERE id = $1 AND state = 'running' AND locked_by = $2 AND attempt = $3
            "#,
        )
        .bind(self.job_id)
        .bind(&*self.worker_id)
        .bind(self.attempt)
        .bind(result)
        .execute(pool)
        .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Records a failed attempt. With `retry_after` the job becomes retryable after that delay,
    /// without it discarded; either way a pending cancellation request wins and cancels it.
    /// Returns the job's new state, or `None` when the lease was lost.
    pub async fn fail(
        &self,
        pool: &PgPool,
        error: &str,
        retry_after: Option<Duration>,
    ) -> Result<Option<JobState>, sqlx::Error> {
        sqlx::query_scalar(
            r#"
            UPDATE jobs
            SET state        = CASE
                                   WHEN cancel_requested THEN 'cancelled'
                                   WHEN $5::bigint IS NULL THEN 'discarded'
                                   ELSE 'retryable'
                               END,
                run_at       = CASE
                                   WHEN cancel_requested OR $5::bigint IS NULL THEN run_at
                                   ELSE now() + $5::bigint * interval '1 millisecond'
                               END,
                finished_at  = CASE WHEN cancel_requested OR $5::bigint IS NULL THEN now() END,
                errors       = errors || jsonb_build_array(
                                   jsonb_build_object('attempt', attempt, 'at', now(), 'error', $4::text)),
                last_error   = $4::text,
                locked_until = NULL,
                updated_at   = now()
            WHERE id = $1 AND state = 'running' AND locked_by = $2 AND attempt = $3
            RETURNING state
            "#,
        )
        .bind(self.job_id)
        .bind(&*self.worker_id)
        .bind(self.attempt)
        .bind(error)
        .bind(retry_after.map(millis))
        .fetch_optional(pool)
        .await
    }

    /// Returns false when the lease was lost.
    pub async fn mark_cancelled(&self, pool: &PgPool) -> Result<bool, sqlx::Error> {
        let updated = sqlx::query(
            r#"
            UPDATE jobs
            SET state        = 'cancelled',
                locked_until = NULL,
                finished_at  = now(),
                updated_at   = now()
            WHERE id = $1 AND state = 'running' AND locked_by = $2 AND attempt = $3
            "#,
        )
        .bind(self.job_id)
        .bind(&*self.worker_id)
        .bind(self.attempt)
        .execute(pool)
        .await?;
        Ok(updated.rows_affected() == 1)
    }
}
