use thiserror::Error;

/// Errors of the queue API and of a worker's setup.
#[derive(Debug, Error)]
pub enum JobError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("invalid job: {0}")]
    InvalidJob(String),
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    #[error("job {job_id} is no longer held by this worker (its lease expired)")]
    LeaseLost { job_id: i64 },
    #[error("job {job_id} cannot be requeued: another live job holds its unique key")]
    UniqueKeyInUse { job_id: i64 },
}
