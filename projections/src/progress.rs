//! How far a replay has come: logged every few seconds, and readable while it runs by whoever
//! shows it (a terminal's progress bar, the online rebuild's gauge).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// The replays of one rebuild, each projection's events handed over of those found at its start.
#[derive(Default)]
pub struct ReplayProgress {
    projections: Mutex<Vec<ProjectionProgress>>,
}

/// One projection's replay, as [`ReplayProgress::snapshot`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionProgress {
    pub projection: String,
    pub done: u64,
    pub total: u64,
}

impl ReplayProgress {
    /// Every projection whose replay has started, in the order they started.
    pub fn snapshot(&self) -> Vec<ProjectionProgress> {
        self.projections.lock().expect("not poisoned").clone()
    }

    fn update(&self, projection: &'static str, done: u64, total: u64) {
        let mut projections = self.projections.lock().expect("not poisoned");
        match projections.iter_mut().find(|p| p.projection == projection) {
            Some(entry) => {
                entry.done = done;
                entry.total = total.max(done);
            }
            None => projections.push(ProjectionProgress {
                projection: projection.to_owned(),
                done,
                total: total.max(done),
            }),
        }
    }
}

/// A replay's progress, logged every few seconds: events handed over, the share of those the
/// replay found at its start, the rate and the time left at that rate.
pub(crate) struct Progress<'a> {
    consumer: &'static str,
    total: u64,
    handed_over: u64,
    started: Instant,
    reported: Instant,
    observer: Option<&'a Arc<ReplayProgress>>,
}

impl<'a> Progress<'a> {
    const EVERY: Duration = Duration::from_secs(5);

    pub(crate) fn new(consumer: &'static str, total: u64, observer: Option<&'a Arc<ReplayProgress>>) -> Self {
        tracing::info!(consumer, events = total, "replay started");
        if let Some(observer) = observer {
            observer.update(consumer, 0, total);
        }
        let now = Instant::now();
        Self {
            consumer,
            total,
            handed_over: 0,
            started: now,
            reported: now,
            observer,
        }
    }

    pub(crate) fn advance(&mut self, events: u64) {
        self.handed_over += events;
        if let Some(observer) = self.observer {
            observer.update(self.consumer, self.handed_over, self.total);
        }
        if self.reported.elapsed() < Self::EVERY {
            return;
        }
        self.reported = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = self.handed_over as f64 / elapsed.max(f64::EPSILON);
        let left = self.total.saturating_sub(self.handed_over) as f64 / rate.max(f64::EPSILON);
        tracing::info!(
            consumer = self.consumer,
            events = self.handed_over,
            of = self.total,
            percent = format!("{:.1}", self.handed_over as f64 * 100.0 / self.total.max(1) as f64),
            events_per_second = rate as u64,
            eta_seconds = left.ceil() as u64,
            "replaying"
        );
    }

    pub(crate) fn done(&self) -> u64 {
        let elapsed = self.started.elapsed().as_secs_f64();
        tracing::info!(
            consumer = self.consumer,
            events = self.handed_over,
            seconds = format!("{elapsed:.1}"),
            events_per_second = (self.handed_over as f64 / elapsed.max(f64::EPSILON)) as u64,
            "replay done"
        );
        self.handed_over
    }
}
