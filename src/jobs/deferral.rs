//! Jobs that give way: while the process has more urgent work (an alert storm being placed),
//! jobs of some kinds start one at a time and at most one per `trickle`, so that they neither
//! take the cores the urgent work needs nor wait forever under a load that never lets up.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

/// Whether the process is busy with more urgent work right now.
pub trait Pressure: Send + Sync + 'static {
    fn pressed(&self) -> bool;
}

impl<F: Fn() -> bool + Send + Sync + 'static> Pressure for F {
    fn pressed(&self) -> bool {
        self()
    }
}

/// The kinds of job that give way, and what they give way to.
#[derive(Clone)]
pub struct Deferral {
    kinds: Vec<String>,
    pressure: Arc<dyn Pressure>,
    trickle: Duration,
}

impl Deferral {
    /// Jobs of `kinds` give way while `pressure` says so; one of them still starts every
    /// `trickle` when none is running.
    pub fn new(kinds: &[&str], pressure: impl Pressure, trickle: Duration) -> Self {
        Self {
            kinds: kinds.iter().map(|&kind| kind.to_owned()).collect(),
            pressure: Arc::new(pressure),
            trickle,
        }
    }

    pub(super) fn defers(&self, kind: &str) -> bool {
        self.kinds.iter().any(|deferred| deferred == kind)
    }
}

/// What a worker's claim loop asks of its deferral: which kinds it may claim now.
pub(super) struct Gate {
    deferral: Option<Deferral>,
    /// Deferred jobs running now (their tasks hold a [`Running`]).
    running: Arc<AtomicUsize>,
    last_start: Option<Instant>,
}

/// Counts a deferred job as running until dropped.
pub(super) struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    pub(super) fn new(deferral: Option<Deferral>) -> Self {
        Self {
            deferral,
            running: Arc::default(),
            last_start: None,
        }
    }

    /// Whether deferred kinds must wait now (the loop then looks again soon rather than on
    /// every new job's notification).
    pub(super) fn holding(&self) -> bool {
        self.deferral
            .as_ref()
            .is_some_and(|deferral| deferral.pressure.pressed())
    }

    /// The kinds of `kinds` the worker may claim now, and at most how many jobs in this claim.
    /// Under pressure, a deferred job may start when none is running and the last started a
    /// `trickle` ago (that claim takes one job); otherwise only the other kinds are claimed.
    pub(super) fn claimable(&self, kinds: &[String], holding: bool) -> (Vec<String>, usize) {
        let Some(deferral) = self.deferral.as_ref().filter(|_| holding) else {
            return (kinds.to_vec(), usize::MAX);
        };
        let trickle_due = self.running.load(Ordering::Relaxed) == 0
            && self.last_start.is_none_or(|at| at.elapsed() >= deferral.trickle);
        if trickle_due {
            return (kinds.to_vec(), 1);
        }
        let urgent = kinds.iter().filter(|kind| !deferral.defers(kind)).cloned().collect();
        (urgent, usize::MAX)
    }

    /// Notes that a job of `kind` starts; a deferred one is counted until the returned guard
    /// is dropped.
    pub(super) fn start(&mut self, kind: &str) -> Option<Running> {
        let deferral = self.deferral.as_ref()?;
        if !deferral.defers(kind) {
            return None;
        }
        self.last_start = Some(Instant::now());
        self.running.fetch_add(1, Ordering::Relaxed);
        Some(Running(self.running.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn kinds() -> Vec<String> {
        vec!["rca".to_owned(), "chat".to_owned()]
    }

    fn gate(pressed: Arc<AtomicBool>, trickle: Duration) -> Gate {
        let pressure = move || pressed.load(Ordering::Relaxed);
        Gate::new(Some(Deferral::new(&["rca"], pressure, trickle)))
    }

    #[test]
    fn without_pressure_every_kind_is_claimable() {
        let gate = gate(Arc::new(AtomicBool::new(false)), Duration::from_secs(60));
        assert!(!gate.holding());
        assert_eq!(gate.claimable(&kinds(), false), (kinds(), usize::MAX));
    }

    #[test]
    fn under_pressure_one_deferred_job_trickles_then_only_urgent_kinds_until_it_ends() {
        let pressed = Arc::new(AtomicBool::new(true));
        let mut gate = gate(pressed.clone(), Duration::ZERO);
        assert!(gate.holding());
        assert_eq!(gate.claimable(&kinds(), true), (kinds(), 1));
        let running = gate.start("rca");
        assert!(running.is_some());
        assert_eq!(gate.claimable(&kinds(), true), (vec!["chat".to_owned()], usize::MAX));
        drop(running);
        assert_eq!(gate.claimable(&kinds(), true), (kinds(), 1));
        pressed.store(false, Ordering::Relaxed);
        assert!(!gate.holding());
    }

    #[test]
    fn the_trickle_waits_its_interval_after_a_start() {
        let mut gate = gate(Arc::new(AtomicBool::new(true)), Duration::from_secs(60));
        drop(gate.start("rca"));
        assert_eq!(gate.claimable(&kinds(), true), (vec!["chat".to_owned()], usize::MAX));
        assert!(gate.start("chat").is_none(), "urgent kinds are not counted");
    }
}
