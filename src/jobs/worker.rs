//! The consumer's side: a worker claims jobs of the kinds it has handlers for and runs them.

use std::collections::HashMap;
use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::backoff::Backoff;
use super::claim::{claim, finish_abandoned};
use super::deferral::{Deferral, Gate};
use super::error::JobError;
use super::execution::{execute, ExecutionSettings};
use super::handler::JobHandler;
use super::model::JobRecord;
use super::registry::{hostname, Heartbeat, WorkerRegistration};
use super::task::AbortOnDrop;
use super::JOBS_AVAILABLE_CHANNEL;

/// How often the claim loop looks for work while deferred kinds wait.
const HOLDING_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unique among running workers; recorded in `jobs.locked_by` and `job_workers`.
    pub worker_id: String,
    /// How many jobs run at once.
    pub concurrency: usize,
    /// How often to look for due jobs without a notification (scheduled jobs, retries, jobs
    /// whose lease expired, and notifications missed while reconnecting).
    pub poll_interval: Duration,
    /// Visibility timeout: how long a claimed job stays ours without renewal. A worker that dies
    /// holds its jobs up to this long.
    pub lease: Duration,
    /// How often the worker renews the leases of its running jobs and its `job_workers`
    /// heartbeat; well below `lease`.
    pub heartbeat_interval: Duration,
    /// On shutdown, how long running jobs may take to finish before they are interrupted (and
    /// made retryable at once, the interrupted attempt counting as a failed one).
    pub shutdown_grace: Duration,
    pub backoff: Backoff,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            worker_id: default_worker_id(),
            concurrency: 4,
            poll_interval: Duration::from_secs(1),
            lease: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            backoff: Backoff::default(),
        }
    }
}

/// `<host>-<pid>-<random>`: readable in `locked_by`, and unique even across restarts.
pub fn default_worker_id() -> String {
    let random = Uuid::new_v4().simple().to_string();
    format!("{}-{}-{}", hostname(), std::process::id(), &random[..8])
}

impl WorkerConfig {
    fn validate(&self) -> Result<(), JobError> {
        let invalid = |reason: &str| Err(JobError::InvalidConfig(reason.to_owned()));
        if self.worker_id.is_empty() {
            return invalid("worker_id is empty");
        }
        if self.concurrency == 0 {
            return invalid("concurrency must be at least 1");
        }
        if self.poll_interval.is_zero() || self.heartbeat_interval.is_zero() {
            return invalid("poll_interval and heartbeat_interval must be positive");
        }
        if self.heartbeat_interval >= self.lease {
            return invalid("heartbeat_interval must be shorter than the lease, or leases would expire while held");
        }
        self.backoff.validate().map_err(JobError::InvalidConfig)
    }
}

/// Runs jobs until its shutdown token is cancelled. Needs from the pool about
/// `concurrency + 3` connections: one held for LISTEN, the rest for claims, heartbeats and the
/// handlers' own queries.
pub struct Worker {
    pool: PgPool,
    config: WorkerConfig,
    handlers: HashMap<&'static str, Arc<dyn JobHandler>>,
    deferral: Option<Deferral>,
}

impl Worker {
    pub fn new(pool: PgPool, config: WorkerConfig) -> Result<Self, JobError> {
        config.validate()?;
        Ok(Self {
            pool,
            config,
            handlers: HashMap::new(),
            deferral: None,
        })
    }

    /// Adds the handler for one kind of job; two handlers for one kind are an error.
    pub fn with_handler(mut self, handler: impl JobHandler) -> Result<Self, JobError> {
        let kind = handler.kind();
        if kind.is_empty() || self.handlers.contains_key(kind) {
            return Err(JobError::InvalidConfig(format!(
                "handler kind {kind:?} is empty or already registered"
            )));
        }
        self.handlers.insert(kind, Arc::new(handler));
        Ok(self)
    }

    /// Lets the jobs of some kinds give way under pressure ([`Deferral`]).
    pub fn with_deferral(mut self, deferral: Deferral) -> Self {
        self.deferral = Some(deferral);
        self
    }

    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// The kinds of job this worker runs, sorted.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.handlers.keys().map(|kind| (*kind).to_owned()).collect();
        kinds.sort();
        kinds
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, gives running jobs
    /// `shutdown_grace` to finish, interrupts the rest and unregisters. Fails only if it cannot
    /// start; database errors later are logged and retried. Dropping the future (or aborting its
    /// task) stops everything at once, like a crash: its jobs are taken over when their leases
    /// expire.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), JobError> {
        if self.handlers.is_empty() {
            return Err(JobError::InvalidConfig("the worker has no handlers".into()));
        }
        let kinds = self.kinds();
        let wake = Arc::new(Notify::new());
        // Listen before the first claim, so that no job enqueued after that claim goes unnoticed.
        let _listening = self.listen_for_new_jobs(&kinds, wake.clone()).await?;
        let heartbeat = Heartbeat::start(
            self.pool.clone(),
            self.registration(&kinds),
            self.config.heartbeat_interval,
        )
        .await?;
        tracing::info!(worker_id = %self.config.worker_id, ?kinds, "job worker started");

        let mut running = JoinSet::new();
        let hard_stop = CancellationToken::new();
        self.claim_until(&shutdown, &kinds, &wake, &mut running, &hard_stop)
            .await;
        self.drain(&mut running, &hard_stop).await;
        heartbeat.stop().await;
        tracing::info!(worker_id = %self.config.worker_id, "job worker stopped");
        Ok(())
    }

    /// Wakes `wake` whenever a job of one of `kinds` is enqueued, until the returned task is
    /// dropped.
    async fn listen_for_new_jobs(&self, kinds: &[String], wake: Arc<Notify>) -> Result<AbortOnDrop<()>, JobError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(JOBS_AVAILABLE_CHANNEL).await?;
        let forwarding = forward_wake_ups(listener, kinds.to_vec(), wake, self.config.poll_interval);
        Ok(AbortOnDrop(tokio::spawn(forwarding)))
    }

    fn registration(&self, kinds: &[String]) -> WorkerRegistration {
        WorkerRegistration {
            worker_id: self.config.worker_id.clone(),
            hostname: hostname(),
            pid: std::process::id(),
            kinds: kinds.to_vec(),
            concurrency: self.config.concurrency,
        }
    }

    async fn claim_until(
        &self,
        shutdown: &CancellationToken,
        kinds: &[String],
        wake: &Notify,
        running: &mut JoinSet<()>,
        hard_stop: &CancellationToken,
    ) {
        let settings = Arc::new(ExecutionSettings {
            pool: self.pool.clone(),
            worker_id: Arc::from(self.config.worker_id.as_str()),
            lease: self.config.lease,
            lease_renewal_interval: self.config.heartbeat_interval,
            backoff: self.config.backoff,
        });
        let mut gate = Gate::new(self.deferral.clone());
        while !shutdown.is_cancelled() {
            let holding = gate.holding();
            let free_slots = self.config.concurrency.saturating_sub(running.len());
            if free_slots > 0 {
                let (claimable, most) = gate.claimable(kinds, holding);
                if !claimable.is_empty() {
                    for job in self.claim_batch(&claimable, free_slots.min(most)).await {
                        let deferred = gate.start(&job.kind);
                        self.start(job, &settings, running, hard_stop, deferred);
                    }
                }
            }
            let all_busy = running.len() >= self.config.concurrency;
            // While deferred kinds wait, every new job's notification would be one more claim
            // in the middle of the work they wait for: the loop looks again at a steady pace.
            let pause = if holding {
                self.config.poll_interval.min(HOLDING_POLL)
            } else {
                self.config.poll_interval
            };
            tokio::select! {
                _ = shutdown.cancelled() => {}
                Some(finished) = join_next(running) => log_task_failure(finished),
                _ = wake.notified(), if !all_busy && !holding => {}
                _ = sleep(pause), if !all_busy => {}
            }
        }
    }

    /// Claims up to `limit` jobs; on a database error logs it and returns none (the next poll
    /// tries again).
    async fn claim_batch(&self, kinds: &[String], limit: usize) -> Vec<JobRecord> {
        match finish_abandoned(&self.pool, kinds).await {
            Ok(0) => {}
            Ok(count) => tracing::warn!(
                count,
                "ended abandoned jobs that had no attempts left or were cancelled"
            ),
            Err(error) => tracing::warn!(%error, "could not end abandoned jobs"),
        }
        let worker_id = &self.config.worker_id;
        claim(&self.pool, kinds, worker_id, self.config.lease, limit)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "could not claim jobs");
                Vec::new()
            })
    }

    fn start(
        &self,
        job: JobRecord,
        settings: &Arc<ExecutionSettings>,
        running: &mut JoinSet<()>,
        hard_stop: &CancellationToken,
        deferred: Option<super::deferral::Running>,
    ) {
        let Some(handler) = self.handlers.get(job.kind.as_str()) else {
            // Unreachable: claims only ask for the kinds in `handlers`.
            tracing::error!(job_id = job.id, kind = %job.kind, "claimed a job without a handler");
            return;
        };
        let span = tracing::info_span!(
            "job",
            job_id = job.id,
            kind = %job.kind,
            attempt = job.attempt,
            user_id = tracing::field::Empty,
            incident_id = tracing::field::Empty,
            session_id = tracing::field::Empty,
        );
        // The ids its payload names, as a request's span names them (docs/operations.md).
        for key in ["user_id", "incident_id", "session_id"] {
            if let Some(id) = job.payload.get(key).and_then(serde_json::Value::as_str) {
                span.record(key, id);
            }
        }
        let task = execute(settings.clone(), handler.clone(), job, hard_stop.clone());
        running.spawn(
            async move {
                task.await;
                drop(deferred);
            }
            .instrument(span),
        );
    }

    /// Waits up to the grace period for running jobs, then interrupts the rest and waits for
    /// their interruption to be recorded.
    async fn drain(&self, running: &mut JoinSet<()>, hard_stop: &CancellationToken) {
        let all_finished = async {
            while let Some(finished) = running.join_next().await {
                log_task_failure(finished);
            }
        };
        if timeout(self.config.shutdown_grace, all_finished).await.is_ok() {
            return;
        }
        tracing::warn!(
            count = running.len(),
            "shutdown grace period over: interrupting running jobs"
        );
        hard_stop.cancel();
        while let Some(finished) = running.join_next().await {
            log_task_failure(finished);
        }
    }
}

/// Like `JoinSet::join_next`, but pending (instead of `None`) while the set is empty.
async fn join_next(running: &mut JoinSet<()>) -> Option<Result<(), tokio::task::JoinError>> {
    if running.is_empty() {
        pending().await
    } else {
        running.join_next().await
    }
}

fn log_task_failure(finished: Result<(), tokio::task::JoinError>) {
    if let Err(error) = finished {
        tracing::error!(%error, "a job's supervising task failed");
    }
}

/// Turns notifications for our kinds into wake-ups of the claim loop.
async fn forward_wake_ups(mut listener: PgListener, kinds: Vec<String>, wake: Arc<Notify>, retry_after: Duration) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                if kinds.iter().any(|kind| kind == notification.payload()) {
                    wake.notify_one();
                }
            }
            // The connection dropped and is being re-established; notifications sent meanwhile
            // are lost, so look for work now.
            Ok(None) => wake.notify_one(),
            Err(error) => {
                tracing::warn!(%error, "job notification listener failed; relying on polling");
                sleep(retry_after).await;
            }
        }
    }
}
