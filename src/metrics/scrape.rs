//! Gauges read when `/metrics` is scraped: the job queue, live workers, each event consumer's
//! lag, an online rebuild's progress, the connection pool, and whether the database answers. Four
//! statements per scrape (the lag's and the rebuild's beside the queue's two), each a bounded
//! read of an index or a small table; nothing is read between scrapes. A database that does not
//! answer within two seconds (or a pool with no connection to lend by then) reads as down.

use std::time::Duration;

use prometheus::{GaugeVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::registered;

/// Events counted at most per consumer; past it the lag in seconds tells how far behind it is.
pub const LAG_EVENTS_CAP: i64 = 10_000;
/// How long a scrape waits for the database before it reports it down.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The job kinds this service enqueues: each shows a depth (0 when none wait), so that a rule
/// over them never lacks a series.
const JOB_KINDS: [&str; 5] = crate::jobs::kinds::ALL;

pub struct ScrapeGauges {
    queue_depth: IntGaugeVec,
    oldest_age: GaugeVec,
    running: IntGaugeVec,
    live_workers: IntGauge,
    lag_events: IntGaugeVec,
    lag_seconds: GaugeVec,
    rebuild_ratio: GaugeVec,
    rebuild_remaining: IntGaugeVec,
    pool_connections: IntGauge,
    pool_idle: IntGauge,
    pool_max: IntGauge,
    database_up: IntGauge,
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, label: &str) -> GaugeVec {
    registered(
        registry,
        GaugeVec::new(Opts::new(name, help), &[label]).expect("valid metric"),
    )
}

fn int_gauge_vec(registry: &Registry, name: &str, help: &str, label: &str) -> IntGaugeVec {
    registered(
        registry,
        IntGaugeVec::new(Opts::new(name, help), &[label]).expect("valid metric"),
    )
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    registered(registry, IntGauge::new(name, help).expect("valid metric"))
}

impl ScrapeGauges {
    pub(super) fn registered_in(registry: &Registry) -> Self {
        Self {
            queue_depth: int_gauge_vec(
                registry,
                "vigil_job_queue_depth",
                "Jobs due and waiting for a worker (available, or retryable with their backoff over), by kind",
                "kind",
            ),
            oldest_age: gauge_vec(
                registry,
                "vigil_job_queue_oldest_age_seconds",
                "How long the longest-waiting due job has been due, by kind (0 when none waits)",
                "kind",
            ),
            running: int_gauge_vec(registry, "vigil_jobs_running", "Jobs running now, by kind", "kind"),
            live_workers: int_gauge(
                registry,
                "vigil_job_workers_live",
                "Job workers (in any instance) whose heartbeat is recent",
            ),
            lag_events: int_gauge_vec(
                registry,
                "vigil_projection_lag_events",
                "Events an event consumer (projection or reactor) has yet to read, counted up to 10000",
                "consumer",
            ),
            lag_seconds: gauge_vec(
                registry,
                "vigil_projection_lag_seconds",
                "Age of the oldest event an event consumer has yet to read (0 when it is caught up)",
                "consumer",
            ),
            rebuild_ratio: gauge_vec(
                registry,
                "vigil_projection_rebuild_progress_ratio",
                "Share of its events an online rebuild (vigil replay --online) has replayed, by projection; only while one runs",
                "projection",
            ),
            rebuild_remaining: int_gauge_vec(
                registry,
                "vigil_projection_rebuild_events_remaining",
                "Events an online rebuild has yet to replay, by projection; only while one runs",
                "projection",
            ),
            pool_connections: int_gauge(
                registry,
                "vigil_db_pool_connections",
                "Connections the database pool holds (idle and in use)",
            ),
            pool_idle: int_gauge(
                registry,
                "vigil_db_pool_idle_connections",
                "Connections of the database pool idle now",
            ),
            pool_max: int_gauge(
                registry,
                "vigil_db_pool_max_connections",
                "Most connections the database pool may hold",
            ),
            database_up: int_gauge(
                registry,
                "vigil_database_up",
                "Whether the database answered this scrape's reads (1) or not (0)",
            ),
        }
    }

    /// Reads every gauge afresh. The pool's numbers are the pool's own; the rest come from the
    /// database, and stay out of the exposition when it does not answer (`vigil_database_up` 0).
    pub async fn refresh(&self, sources: ScrapeSources<'_>) {
        let pool = sources.db;
        self.pool_connections.set(i64::from(pool.size()));
        self.pool_idle.set(pool.num_idle() as i64);
        self.pool_max.set(i64::from(pool.options().get_max_connections()));
        let read = async {
            tokio::try_join!(
                job_queue(pool),
                vigil_projections::lag(pool, &sources.consumers, LAG_EVENTS_CAP),
                rebuilds(pool),
            )
        };
        let read = if sources.database_known_down {
            None
        } else {
            tokio::time::timeout(SCRAPE_TIMEOUT, read).await.ok()
        };
        self.queue_depth.reset();
        self.oldest_age.reset();
        self.running.reset();
        self.lag_events.reset();
        self.lag_seconds.reset();
        self.rebuild_ratio.reset();
        self.rebuild_remaining.reset();
        let Some(Ok(((kinds, workers), lags, rebuilds))) = read else {
            self.database_up.set(0);
            return;
        };
        self.database_up.set(1);
        for kind in JOB_KINDS {
            self.queue_depth.with_label_values(&[kind]).set(0);
            self.oldest_age.with_label_values(&[kind]).set(0.0);
            self.running.with_label_values(&[kind]).set(0);
        }
        for (kind, waiting, oldest, running) in kinds {
            // A kind this build does not enqueue (an older or newer instance's) joins `other`,
            // so that the label keeps to a known set.
            let kind = JOB_KINDS
                .iter()
                .find(|known| **known == kind)
                .copied()
                .unwrap_or("other");
            self.queue_depth.with_label_values(&[kind]).add(waiting);
            let age = self.oldest_age.with_label_values(&[kind]);
            age.set(age.get().max(oldest));
            self.running.with_label_values(&[kind]).add(running);
        }
        self.live_workers.set(workers);
        for lag in lags {
            self.lag_events.with_label_values(&[lag.consumer]).set(lag.events);
            self.lag_seconds.with_label_values(&[lag.consumer]).set(lag.seconds);
        }
        for rebuild in rebuilds {
            let labels = [rebuild.projection.as_str()];
            let ratio = rebuild.done as f64 / rebuild.total.max(1) as f64;
            self.rebuild_ratio.with_label_values(&labels).set(ratio.min(1.0));
            let remaining = rebuild.total.saturating_sub(rebuild.done);
            self.rebuild_remaining.with_label_values(&labels).set(remaining as i64);
        }
    }
}

/// What a scrape reads besides the registry: the pool, the event consumers whose lag it reports,
/// and whether the database is known to be down (its reads are then skipped).
pub struct ScrapeSources<'a> {
    pub db: &'a sqlx::PgPool,
    pub consumers: Vec<std::sync::Arc<dyn vigil_projections::EventConsumer>>,
    pub database_known_down: bool,
}

/// The online rebuild running against the database, per projection (none most of the time).
async fn rebuilds(pool: &sqlx::PgPool) -> sqlx::Result<Vec<vigil_projections::ProjectionProgress>> {
    vigil_projections::rebuild::running(pool)
        .await
        .map_err(|error| match error {
            vigil_projections::ProjectionError::Database(error) => error,
            other => sqlx::Error::Protocol(other.to_string()),
        })
}

/// Per kind with unfinished jobs: the due waiting ones, the age of the oldest, the running ones;
/// and the live workers. Reads only unfinished jobs (the claim index's rows), whatever the
/// number of finished ones kept.
async fn job_queue(pool: &sqlx::PgPool) -> sqlx::Result<(Vec<(String, i64, f64, i64)>, i64)> {
    let kinds = sqlx::query_as(
        "SELECT kind,
                count(*) FILTER (WHERE state IN ('available', 'retryable') AND run_at <= now()),
                COALESCE(EXTRACT(EPOCH FROM now() - min(run_at)
                    FILTER (WHERE state IN ('available', 'retryable') AND run_at <= now())), 0)::float8,
                count(*) FILTER (WHERE state = 'running')
         FROM jobs WHERE state IN ('available', 'retryable', 'running')
         GROUP BY kind",
    )
    .fetch_all(pool)
    .await?;
    let workers = crate::jobs::live_workers(pool, crate::jobs::LIVE_WORKER_WINDOW)
        .await
        .map_err(|error| match error {
            crate::jobs::JobError::Database(error) => error,
            other => sqlx::Error::Protocol(other.to_string()),
        })?;
    Ok((kinds, workers))
}
