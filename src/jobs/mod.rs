//! A durable job queue in PostgreSQL, in the style of River, Oban and graphile-worker: root-cause
//! analyses, postmortems, chat answers and cloud setup tasks survive restarts and run once.
//!
//! Producers [`enqueue`] rows into `jobs`; a [`Worker`] claims due rows with
//! `FOR UPDATE SKIP LOCKED` and runs them with the [`JobHandler`] registered for their kind,
//! holding each under a lease (`locked_until`) that it renews while the handler runs. Workers
//! LISTEN on `jobs_available` (a trigger notifies on insert) and poll as a fallback.
//!
//! # States
//!
//! | from | event | to |
//! | --- | --- | --- |
//! | (new) | [`enqueue`] | `available` |
//! | `available`, `retryable` (once `run_at` has passed) | claimed by a worker | `running` |
//! | `running` | handler returns `Ok(result)` | `completed` |
//! | `running` | retryable error, panic, or interrupted at shutdown, attempts left | `retryable` |
//! | `running` | permanent error, or a failure on the last attempt | `discarded` |
//! | `running` | handler stops at a checkpoint after [`cancel`] (or fails after it) | `cancelled` |
//! | `running`, lease expired | claimed by another worker, attempts left | `running` (next attempt) |
//! | `running`, lease expired | no attempts left / cancellation requested | `discarded` / `cancelled` |
//! | `available`, `retryable` | [`cancel`] | `cancelled` |
//! | `completed`, `discarded`, `cancelled` | [`requeue`] | `available` |
//!
//! `discarded` is the dead state: the job's `errors` tell every failed attempt.
//!
//! Every write a worker makes to a claimed job is fenced by (job, worker, attempt), so an
//! attempt whose lease was taken over can neither complete nor fail the job: it completes at
//! most once. Handlers may still run more than once (after a crash, a lost lease or a retry), so
//! their side effects should be idempotent.
//!
//! ```rust,ignore
//! let job = NewJob::new("rca", json!({ "incident_id": id })).unique_key(format!("rca:{id}"));
//! let enqueued = enqueue(&pool, job).await?; // Inserted(id) or Duplicate(existing_id)
//!
//! let worker = Worker::new(pool.clone(), WorkerConfig::default())?.with_handler(RcaHandler::new(..))?;
//! tokio::spawn(worker.run(shutdown_token.clone()));
//! ```
//!
//! A unique key stays taken for its job's whole life, completion included; only cancelled and
//! discarded jobs free it. Re-running a finished job is an explicit [`requeue`].

mod backoff;
mod claim;
mod deferral;
mod error;
mod execution;
mod handler;
mod lease;
mod model;
mod queue;
mod reactor;
mod registry;
mod task;
mod worker;

use std::time::Duration;

pub use self::backoff::Backoff;
pub use self::deferral::{Deferral, Pressure};
pub use self::error::JobError;
pub use self::handler::{Cancelled, JobContext, JobFailure, JobHandler};
pub use self::model::{
    AttemptError, CancelOutcome, Enqueued, JobRecord, JobState, NewJob, UnknownJobState, DEFAULT_MAX_ATTEMPTS,
};
/// The kinds of job this service enqueues, named here so that the queue's gauges (and anything
/// else below the features) can list them without importing the features.
pub mod kinds {
    pub const RCA_JOB: &str = "rca";
    pub const POSTMORTEM_JOB: &str = "postmortem";
    pub const INCIDENT_CHAT_JOB: &str = "incident_chat";
    pub const CLOUD_A_SETUP_JOB: &str = "cloud_a_setup";
    pub const BRIDGE_JOB: &str = "merge_bridged_incidents";
    /// Every kind above.
    pub const ALL: [&str; 5] = [
        RCA_JOB,
        POSTMORTEM_JOB,
        INCIDENT_CHAT_JOB,
        CLOUD_A_SETUP_JOB,
        BRIDGE_JOB,
    ];
}

pub use self::queue::{
    cancel, enqueue, enqueue_in, enqueue_many_in, find_by_unique_key, get, live_workers, requeue, LIVE_WORKER_WINDOW,
};
pub use self::reactor::{JobReactor, JobsOf};
pub use self::worker::{default_worker_id, Worker, WorkerConfig};

/// The channel the `jobs_available` trigger notifies, with the job's kind as payload.
pub const JOBS_AVAILABLE_CHANNEL: &str = "jobs_available";

/// A duration as whole milliseconds for SQL interval arithmetic, saturating.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
