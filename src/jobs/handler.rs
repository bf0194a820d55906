//! What a job handler implements, and what it is handed while it runs.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::PgPool;

use super::error::JobError;
use super::lease::{Lease, LeaseStatus};
use super::model::JobRecord;

/// Runs the jobs of one kind. A worker runs each job in its own task, so a panic fails only
/// that attempt (as a retryable failure).
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// The `jobs.kind` this handler runs.
    fn kind(&self) -> &'static str;

    /// Runs one attempt; the returned value is stored as the job's `result`. Long handlers should
    /// call [`JobContext::checkpoint`] between steps so that they can be cancelled.
    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure>;
}

/// Why an attempt failed, which decides what happens to the job next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobFailure {
    /// Worth trying again (after a backoff) while attempts remain; then the job is discarded.
    #[error("{0}")]
    Retryable(String),
    /// Trying again cannot help (bad payload, incident deleted...): discarded at once.
    #[error("{0}")]
    Permanent(String),
    /// The handler stopped at a checkpoint.
    #[error(transparent)]
    Cancelled(#[from] Cancelled),
}

impl JobFailure {
    pub fn retryable(error: impl Display) -> Self {
        JobFailure::Retryable(error.to_string())
    }

    pub fn permanent(error: impl Display) -> Self {
        JobFailure::Permanent(error.to_string())
    }
}

impl From<JobError> for JobFailure {
    fn from(error: JobError) -> Self {
        JobFailure::retryable(error)
    }
}

impl From<sqlx::Error> for JobFailure {
    fn from(error: sqlx::Error) -> Self {
        JobFailure::retryable(error)
    }
}

/// Returned by [`JobContext::checkpoint`] when the handler should stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cancelled {
    /// Someone called `cancel` on the job.
    #[error("the job was cancelled")]
    Requested,
    /// The lease expired and the job may already run elsewhere; nothing this attempt writes to
    /// the job will be kept.
    #[error("the job's lease was lost")]
    LeaseLost,
}

/// One attempt of a job, as seen by its handler.
pub struct JobContext {
    id: i64,
    kind: String,
    unique_key: Option<String>,
    payload: Value,
    attempt: i32,
    max_attempts: i32,
    pool: PgPool,
    lease: Lease,
    lease_lost: Arc<AtomicBool>,
}

impl JobContext {
    pub(super) fn new(job: JobRecord, pool: PgPool, lease: Lease, lease_lost: Arc<AtomicBool>) -> Self {
        Self {
            id: job.id,
            kind: job.kind,
            unique_key: job.unique_key,
            payload: job.payload,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            pool,
            lease,
            lease_lost,
        }
    }

    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn unique_key(&self) -> Option<&str> {
        self.unique_key.as_deref()
    }

    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// The payload as `T`; a payload that does not fit is a permanent failure.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, JobFailure> {
        serde_json::from_value(self.payload.clone())
            .map_err(|error| JobFailure::permanent(format!("invalid payload for {}: {error}", self.kind)))
    }

    /// 1 on the first attempt.
    pub fn attempt(&self) -> i32 {
        self.attempt
    }

    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Stores `progress` (e.g. `{"step": 3, "total_steps": 7}`) in the job's `progress`,
    /// replacing what was there. Fails with [`JobError::LeaseLost`] once the job is not ours.
    pub async fn report_progress(&self, progress: Value) -> Result<(), JobError> {
        if self.lease.record_progress(&self.pool, &progress).await? {
            Ok(())
        } else {
            self.lease_lost.store(true, Ordering::Relaxed);
            Err(JobError::LeaseLost { job_id: self.id })
        }
    }

    /// Extends the lease and tells whether the handler should stop: `cancel` was called, or the
    /// lease was lost. A database error here does not stop the job (it is logged): the worker
    /// keeps extending the lease in the background, and the final write is fenced anyway.
    pub async fn checkpoint(&self) -> Result<(), Cancelled> {
        if self.lease_lost.load(Ordering::Relaxed) {
            return Err(Cancelled::LeaseLost);
        }
        match self.lease.extend(&self.pool).await {
            Ok(LeaseStatus::Held {
                cancel_requested: false,
            }) => Ok(()),
            Ok(LeaseStatus::Held { cancel_requested: true }) => Err(Cancelled::Requested),
            Ok(LeaseStatus::Lost) => {
                self.lease_lost.store(true, Ordering::Relaxed);
                Err(Cancelled::LeaseLost)
            }
            Err(error) => {
                tracing::warn!(job_id = self.id, %error, "checkpoint could not reach the database");
                Ok(())
            }
        }
    }
}
