//! What alert placement reports: its batches and their phases, and what became of each alert.
//! Counted per batch in plain integers ([`AlertTally`]) and added to the atomic counters once the
//! batch commits, so that the hot path takes no lock and makes no label lookup.

use std::time::{Duration, Instant};

use cqrs_es::Aggregate;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};
use vigil_aggregates::{correlation::Strategy, incident::Incident, received_alert::ReceivedAlert};

use super::registered;
use crate::event_store::EventMetrics;
use vigil_aggregates::source::Source;

/// How alert placement spends a batch (see `ingest::placement`): how many alerts each committed
/// batch held, and the wall time of each of its steps, from the lane's side (a database step
/// includes its round trip). Under load these say where a lane's time goes, and so what bounds
/// ingestion: `sum / count` of a phase is its mean time per batch.
#[derive(Clone)]
pub struct PlacementMetrics {
    batch_alerts: Histogram,
    /// One series per phase, in [`PlacementPhase::ALL`]'s order (resolved once, not per batch).
    phase_seconds: [Histogram; PlacementPhase::COUNT],
    /// `[source][fate]`, resolved once: a batch adds its counts without a label lookup.
    alerts: [[IntCounter; Fate::COUNT]; SOURCES],
    incidents_opened: IntCounter,
    /// Per [`Strategy`], in [`STRATEGIES`]' order.
    correlated: [IntCounter; STRATEGIES.len()],
    scores: [Histogram; STRATEGIES.len()],
    events_appended: IntCounter,
    received_events_appended: IntCounter,
}

/// The steps of a batch, in order (the `phase` label). A batch on the fast path has no
/// transaction to begin or commit and writes its read rows with the rest: its `begin`, `project`
/// and `commit` are zero, and `record` includes the write's commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementPhase {
    /// `BEGIN` and the users' locks (the careful path).
    Begin,
    /// The one statement every decision reads from.
    Lookup,
    /// Decisions and the aggregate's commands, in memory (reading an incident's events when
    /// placement has not kept its state).
    Decide,
    /// The deliveries and events written (on the fast path, the read rows too).
    Record,
    /// The incidents' read rows written (the careful path).
    Project,
    Commit,
}

impl PlacementPhase {
    const COUNT: usize = 6;
    pub const ALL: [Self; Self::COUNT] = [
        Self::Begin,
        Self::Lookup,
        Self::Decide,
        Self::Record,
        Self::Project,
        Self::Commit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::Lookup => "lookup",
            Self::Decide => "decide",
            Self::Record => "record",
            Self::Project => "project",
            Self::Commit => "commit",
        }
    }
}

impl PlacementMetrics {
    pub(super) fn registered_in(registry: &Registry, events: &EventMetrics) -> Self {
        let batch_alerts = Histogram::with_opts(
            HistogramOpts::new("ingest_placement_batch_alerts", "Alerts per committed placement batch")
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0]),
        )
        .expect("valid metric");
        let phase_seconds = HistogramVec::new(
            HistogramOpts::new(
                "ingest_placement_phase_seconds",
                "Wall time of each step of a committed placement batch",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
            ]),
            &["phase"],
        )
        .expect("valid metric");
        let phase_seconds = registered(registry, phase_seconds);
        let alerts = registered(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "vigil_alerts_received_total",
                    "Alerts placed or refused by ingestion, by source and by what became of each",
                ),
                &["source", "fate"],
            )
            .expect("valid metric"),
        );
        let correlated = registered(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "vigil_alerts_correlated_total",
                    "Alerts that joined an open incident, by the strategy that matched them",
                ),
                &["strategy"],
            )
            .expect("valid metric"),
        );
        let scores = registered(
            registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "vigil_correlation_score",
                    "Score (0 to 1) of each correlation that placed an alert, by strategy",
                )
                .buckets(vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
                &["strategy"],
            )
            .expect("valid metric"),
        );
        let incidents_opened = registered(
            registry,
            IntCounter::new("vigil_incidents_opened_total", "Incidents opened by an alert").expect("valid metric"),
        );
        Self {
            batch_alerts: registered(registry, batch_alerts),
            phase_seconds: PlacementPhase::ALL.map(|phase| phase_seconds.with_label_values(&[phase.as_str()])),
            alerts: Source::ALL
                .map(|source| Fate::ALL.map(|fate| alerts.with_label_values(&[source.as_str(), fate.as_str()]))),
            incidents_opened,
            correlated: STRATEGIES.map(|strategy| correlated.with_label_values(&[strategy.as_str()])),
            scores: STRATEGIES.map(|strategy| scores.with_label_values(&[strategy.as_str()])),
            events_appended: events.appended(Incident::TYPE),
            received_events_appended: events.appended(ReceivedAlert::TYPE),
        }
    }

    /// Records a committed batch of `alerts` alerts, the time each phase took, and what became
    /// of its alerts (`tally`).
    pub fn observe_batch(&self, alerts: usize, clock: &PhaseClock, tally: &AlertTally) {
        self.batch_alerts.observe(alerts as f64);
        for (histogram, took) in self.phase_seconds.iter().zip(clock.laps) {
            histogram.observe(took.as_secs_f64());
        }
        for (counters, counts) in self.alerts.iter().zip(&tally.counts) {
            for (counter, &count) in counters.iter().zip(counts) {
                if count > 0 {
                    counter.inc_by(count);
                }
            }
        }
        let opened: u64 = tally.counts.iter().map(|counts| counts[Fate::Opened as usize]).sum();
        self.incidents_opened.inc_by(opened);
        for &(strategy, score) in &tally.correlations {
            let index = strategy_index(strategy);
            self.correlated[index].inc();
            self.scores[index].observe(score);
        }
        self.events_appended.inc_by(tally.events);
        self.received_events_appended.inc_by(tally.received_events);
    }

    /// Counts the alerts of a notification placement refused (its batch failed).
    pub fn refused(&self, sources: impl IntoIterator<Item = Source>) {
        for source in sources {
            self.alerts[source as usize][Fate::Refused as usize].inc();
        }
    }
}

const SOURCES: usize = Source::ALL.len();
const STRATEGIES: [Strategy; 3] = [Strategy::ServiceMatch, Strategy::TimeWindow, Strategy::Semantic];

fn strategy_index(strategy: Strategy) -> usize {
    match strategy {
        Strategy::ServiceMatch => 0,
        Strategy::TimeWindow => 1,
        Strategy::Semantic => 2,
    }
}

/// What became of an alert handed to placement (the `fate` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It opened a new incident.
    Opened,
    /// It joined an open incident by correlation.
    Correlated,
    /// A state change (acknowledged, notified again) of an alert an open incident holds: kept there.
    Updated,
    /// A delivery recorded before: nothing changed.
    Deduplicated,
    /// A recovery that resolved its alert in an incident.
    Resolved,
    /// A recovery of an alert no incident holds.
    Unmatched,
    /// A firing alert a silence in force matched: it opened and joined nothing.
    Silenced,
    /// A grouping rule holds it until enough alerts like it arrive.
    Held,
    /// A firing or recovery of a flapping key: recorded on the incident it flaps in.
    Flapping,
    /// Placement failed: the sender got an error and may retry.
    Refused,
}

impl Fate {
    const COUNT: usize = 10;
    const ALL: [Self; Self::COUNT] = [
        Self::Opened,
        Self::Correlated,
        Self::Updated,
        Self::Deduplicated,
        Self::Resolved,
        Self::Unmatched,
        Self::Silenced,
        Self::Held,
        Self::Flapping,
        Self::Refused,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Opened => "opened",
            Self::Correlated => "correlated",
            Self::Updated => "updated",
            Self::Deduplicated => "deduplicated",
            Self::Resolved => "resolved",
            Self::Unmatched => "unmatched",
            Self::Silenced => "silenced",
            Self::Held => "held",
            Self::Flapping => "flapping",
            Self::Refused => "refused",
        }
    }
}

/// What one attempt at a batch decided, counted in memory and added to the metrics only once the
/// batch commits (an attempt that loses a race is decided again).
#[derive(Default)]
pub struct AlertTally {
    counts: [[u64; Fate::COUNT]; SOURCES],
    /// Each correlation's strategy and score (empty, so unallocated, for a batch without one).
    correlations: Vec<(Strategy, f64)>,
    events: u64,
    received_events: u64,
}

impl AlertTally {
    pub fn count(&mut self, source: Source, fate: Fate) {
        self.counts[source as usize][fate as usize] += 1;
    }

    pub fn correlated(&mut self, source: Source, strategy: Strategy, score: f64) {
        self.count(source, Fate::Correlated);
        self.correlations.push((strategy, score));
    }

    /// The events the batch appends: to incidents, and to received alerts' streams.
    pub fn appended(&mut self, incident_events: usize, received_events: usize) {
        self.events += incident_events as u64;
        self.received_events += received_events as u64;
    }
}

impl Default for PlacementMetrics {
    /// Metrics no registry exposes (placement outside a serving process: tests, tools).
    fn default() -> Self {
        Self::registered_in(&Registry::new(), &EventMetrics::default())
    }
}

/// Times the phases of one batch, each from the end of the one before.
pub struct PhaseClock {
    last: Instant,
    laps: [Duration; PlacementPhase::COUNT],
}

impl PhaseClock {
    pub fn start() -> Self {
        Self {
            last: Instant::now(),
            laps: [Duration::ZERO; PlacementPhase::COUNT],
        }
    }

    /// Ends `phase` now.
    pub fn lap(&mut self, phase: PlacementPhase) {
        let now = Instant::now();
        self.laps[phase as usize] = now - self.last;
        self.last = now;
    }
}
