//! The `job_workers` table: which workers are alive, for health checks.

use std::time::Duration;

use sqlx::PgPool;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

use super::task::AbortOnDrop;

#[derive(Debug, Clone)]
pub(super) struct WorkerRegistration {
    pub worker_id: String,
    pub hostname: String,
    pub pid: u32,
    pub kinds: Vec<String>,
    pub concurrency: usize,
}

impl WorkerRegistration {
    /// Registers the worker, or refreshes its heartbeat (re-creating the row if it was pruned).
    pub async fn beat(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        sqlx::query(
            r#"
            INSERT INTO job_workers (worker_id, hostname, pid, kinds, concurrency)
            VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now()
            "#,
        )
        .bind(&self.worker_id)
        .bind(&self.hostname)
        .bind(i64::from(self.pid))
        .bind(&self.kinds)
        .bind(i32::try_from(self.concurrency).unwrap_or(i32::MAX))
        .execute(pool)
        .await?;
        Ok(())
    }

    pub async fn remove(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM job_workers WHERE worker_id = $1")
            .bind(&self.worker_id)
            .execute(pool)
            .await?;
        Ok(())
    }
}

/// Keeps a worker's `job_workers` row fresh from `start` to `stop`.
pub(super) struct Heartbeat {
    registration: WorkerRegistration,
    pool: PgPool,
    stop: CancellationToken,
    task: AbortOnDrop<()>,
}

impl Heartbeat {
    /// Registers the worker, then refreshes its heartbeat `every` so often.
    pub async fn start(pool: PgPool, registration: WorkerRegistration, every: Duration) -> Result<Self, sqlx::Error> {
        registration.beat(&pool).await?;
        let stop = CancellationToken::new();
        let task = AbortOnDrop(tokio::spawn(beat_until_stopped(
            pool.clone(),
            registration.clone(),
            every,
            stop.clone(),
        )));
        Ok(Self {
            registration,
            pool,
            stop,
            task,
        })
    }

    /// Stops beating, then unregisters: in the other order a late beat could re-create the row.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.join().await;
        if let Err(error) = self.registration.remove(&self.pool).await {
            tracing::warn!(%error, "could not unregister the worker; its row will go stale");
        }
    }
}

async fn beat_until_stopped(pool: PgPool, registration: WorkerRegistration, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = sleep(every) => {}
        }
        if let Err(error) = registration.beat(&pool).await {
            tracing::warn!(%error, "could not record the worker's heartbeat");
        }
    }
}

/// The host's name, from `$HOSTNAME` or `/etc/hostname`.
pub(super) fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
