use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// Where a job is in its life; see the module documentation for the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for a worker (from `run_at` on).
    Available,
    /// Claimed by a worker that holds its lease.
    Running,
    /// Failed, and will run again from `run_at` on.
    Retryable,
    /// Ran to the end; `result` holds what the handler returned.
    Completed,
    /// Failed for good: a permanent error, or its last attempt failed.
    Discarded,
    /// Cancelled before it ran, or stopped at a checkpoint after a cancellation request.
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Available,
        JobState::Running,
        JobState::Retryable,
        JobState::Completed,
        JobState::Discarded,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Retryable => "retryable",
            JobState::Completed => "completed",
            JobState::Discarded => "discarded",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job will never run again unless requeued.
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Completed | JobState::Discarded | JobState::Cancelled)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state {0:?}")]
pub struct UnknownJobState(pub String);

impl FromStr for JobState {
    type Err = UnknownJobState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownJobState(s.to_owned()))
    }
}

// The state column is text (not a PostgreSQL enum), so decode it through &str.
impl Type<Postgres> for JobState {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for JobState {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Postgres>>::decode(value)?;
        Ok(text.parse()?)
    }
}

/// One failed attempt, as recorded in `jobs.errors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    pub attempt: i32,
    pub at: DateTime<Utc>,
    pub error: String,
}

/// A row of the `jobs` table.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct JobRecord {
    pub id: i64,
    pub kind: String,
    pub unique_key: Option<String>,
    pub payload: Value,
    pub state: JobState,
    /// Attempts started so far (the running one included); 0 before the first claim.
    pub attempt: i32,
    pub max_attempts: i32,
    pub run_at: DateTime<Utc>,
    pub locked_by: Option<String>,
    pub locked_until: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    #[sqlx(json)]
    pub errors: Vec<AttemptError>,
    pub progress: Option<Value>,
    pub result: Option<Value>,
    pub cancel_requested: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;

/// A job to enqueue. `NewJob::new` fills in the defaults (5 attempts, runs now, no unique key).
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub kind: String,
    pub payload: Value,
    /// At most one job that is not cancelled or discarded may hold a key, for its whole life.
    pub unique_key: Option<String>,
    pub max_attempts: i32,
    /// `None` runs the job as soon as a worker is free.
    pub run_at: Option<DateTime<Utc>>,
}

impl NewJob {
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        Self {
            kind: kind.into(),
            payload,
            unique_key: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            run_at: None,
        }
    }

    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    pub fn run_at(mut self, run_at: DateTime<Utc>) -> Self {
        self.run_at = Some(run_at);
        self
    }
}

/// What `enqueue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was inserted with this id.
    Inserted(i64),
    /// A job holding the same unique key already exists; nothing was inserted.
    Duplicate(i64),
}

impl Enqueued {
    /// The id of the job that now stands for the request, new or existing.
    pub fn id(self) -> i64 {
        match self {
            Enqueued::Inserted(id) | Enqueued::Duplicate(id) => id,
        }
    }
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job had not started (available or retryable) and is now cancelled.
    Cancelled,
    /// The job is running; it stops at its handler's next checkpoint.
    CancelRequested,
    /// The job had already finished in this state; nothing changed.
    AlreadyFinished(JobState),
    NotFound,
}
