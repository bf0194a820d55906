//! Running one claimed job: the handler in its own task, the lease kept alive beside it, and the
//! outcome written back under the lease's fence.

use std::any::Any;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use tokio::task::JoinError;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::handler::{Cancelled, JobContext, JobFailure, JobHandler};
use super::lease::{Lease, LeaseStatus};
use super::model::JobRecord;
use super::task::AbortOnDrop;

/// What every job run by one worker shares.
pub(super) struct ExecutionSettings {
    pub pool: PgPool,
    pub worker_id: Arc<str>,
    pub lease: Duration,
    pub lease_renewal_interval: Duration,
    pub backoff: Backoff,
}

enum Outcome {
    Succeeded(Value),
    Failed(JobFailure),
    Panicked(String),
    /// The worker shut down and its grace period ran out before the handler finished.
    Interrupted,
}

/// Runs `job` (already claimed by this worker) to an outcome and records it. `hard_stop` aborts
/// the handler.
pub(super) async fn execute(
    settings: Arc<ExecutionSettings>,
    handler: Arc<dyn JobHandler>,
    job: JobRecord,
    hard_stop: CancellationToken,
) {
    let lease = Lease {
        job_id: job.id,
        worker_id: settings.worker_id.clone(),
        attempt: job.attempt,
        duration: settings.lease,
    };
    let max_attempts = job.max_attempts;
    let lease_lost = Arc::new(AtomicBool::new(false));
    let context = JobContext::new(job, settings.pool.clone(), lease.clone(), lease_lost.clone());
    let outcome = supervise(&settings, handler, context, &lease, &lease_lost, &hard_stop).await;
    record(&settings, &lease, max_attempts, outcome).await;
}

async fn supervise(
    settings: &ExecutionSettings,
    handler: Arc<dyn JobHandler>,
    context: JobContext,
    lease: &Lease,
    lease_lost: &AtomicBool,
    hard_stop: &CancellationToken,
) -> Outcome {
    let mut handler_task = AbortOnDrop(tokio::spawn(async move { handler.run(&context).await }));
    let first_renewal = Instant::now() + settings.lease_renewal_interval;
    let mut renewals = interval_at(first_renewal, settings.lease_renewal_interval);
    renewals.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // A handler that has finished wins over a renewal or a hard stop due at the same time.
            biased;
            joined = &mut handler_task.0 => return outcome_of(joined),
            _ = renewals.tick() => renew(&settings.pool, lease, lease_lost).await,
            // Dropping `handler_task` on return aborts the handler.
            _ = hard_stop.cancelled() => return Outcome::Interrupted,
        }
    }
}

/// Extends the lease so that a long job is not taken over. A cancellation request is left for
/// the handler's next checkpoint to find.
async fn renew(pool: &PgPool, lease: &Lease, lease_lost: &AtomicBool) {
    match lease.extend(pool).await {
        Ok(LeaseStatus::Held { .. }) => {}
        Ok(LeaseStatus::Lost) => {
            if !lease_lost.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    job_id = lease.job_id,
                    "lease lost: the job was taken over or ended elsewhere"
                );
            }
        }
        Err(error) => tracing::warn!(job_id = lease.job_id, %error, "could not extend the lease"),
    }
}

fn outcome_of(joined: Result<Result<Value, JobFailure>, JoinError>) -> Outcome {
    match joined {
        Ok(Ok(result)) => Outcome::Succeeded(result),
        Ok(Err(failure)) => Outcome::Failed(failure),
        Err(error) if error.is_panic() => Outcome::Panicked(panic_message(error.into_panic())),
        // Only this module aborts the handler task, and it stops awaiting it when it does.
        Err(_) => Outcome::Interrupted,
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-string payload".to_owned())
}

async fn record(settings: &ExecutionSettings, lease: &Lease, max_attempts: i32, outcome: Outcome) {
    let pool = &settings.pool;
    let has_attempts_left = lease.attempt < max_attempts;
    let backoff = has_attempts_left.then(|| settings.backoff.delay(lease.attempt));
    let written = match outcome {
        Outcome::Succeeded(result) => persist(|| lease.complete(pool, &result)).await,
        Outcome::Failed(JobFailure::Cancelled(Cancelled::Requested)) => persist(|| lease.mark_cancelled(pool)).await,
        // Another worker may own the job now; this attempt has nothing left to say.
        Outcome::Failed(JobFailure::Cancelled(Cancelled::LeaseLost)) => Some(false),
        Outcome::Failed(JobFailure::Retryable(error)) => fail(pool, lease, &error, backoff).await,
        Outcome::Failed(JobFailure::Permanent(error)) => fail(pool, lease, &error, None).await,
        Outcome::Panicked(message) => fail(pool, lease, &format!("handler panicked: {message}"), backoff).await,
        Outcome::Interrupted => {
            let message = format!(
                "interrupted: worker {} shut down before the attempt finished",
                lease.worker_id
            );
            // Not the job's fault: let another worker retry at once.
            fail(pool, lease, &message, has_attempts_left.then_some(Duration::ZERO)).await
        }
    };
    match written {
        Some(true) => {}
        Some(false) => tracing::warn!(job_id = lease.job_id, "outcome dropped: the job's lease was lost"),
        None => tracing::error!(job_id = lease.job_id, "outcome lost: the database could not be reached"),
    }
}

async fn fail(pool: &PgPool, lease: &Lease, error: &str, retry_after: Option<Duration>) -> Option<bool> {
    tracing::info!(
        job_id = lease.job_id,
        attempt = lease.attempt,
        error,
        "job attempt failed"
    );
    persist(|| lease.fail(pool, error, retry_after))
        .await
        .map(|state| state.is_some())
}

const PERSIST_TRIES: u32 = 3;
const PERSIST_RETRY_DELAY: Duration = Duration::from_millis(500);

/// Runs a final write, retrying a few times: losing it would make the job run again once its
/// lease expires. `None` when every try failed.
async fn persist<T, F, Fut>(mut write: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    for try_number in 1..=PERSIST_TRIES {
        match write().await {
            Ok(value) => return Some(value),
            Err(error) => {
                tracing::warn!(%error, try_number, "could not record a job's outcome");
                if try_number < PERSIST_TRIES {
                    tokio::time::sleep(PERSIST_RETRY_DELAY).await;
                }
            }
        }
    }
    None
}
