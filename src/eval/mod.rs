//! `vigil eval DIR`: replays labelled scenarios through the real service (its HTTP ingestion
//! path, its workers and analyses) on a scratch database, and scores what it made of them:
//! grouping by pairwise precision/recall/F1, root-cause analysis by the scenario rule.
//!
//! Two modes, as the format describes: `tenant` gives each scenario a user of its own; `storm`
//! posts every scenario's events for one user, merged by offset, so that all incidents overlap.

mod report;
mod runner;
pub mod scenario;
pub mod score;

use std::{path::PathBuf, time::Duration};

pub use report::{Report, ScenarioResult};
pub use runner::run;

/// How scenarios are replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A user per scenario: nothing else is open.
    Tenant,
    /// One user for every scenario, events merged by offset.
    Storm,
}

#[derive(Debug, Clone, clap::Args)]
pub struct EvalOptions {
    /// Directory of scenarios in the format of `shared/scenarios`.
    pub dir: PathBuf,
    /// Which replays to run (both by default).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Mode::Tenant, Mode::Storm])]
    pub modes: Vec<Mode>,
    /// How long to wait for the analyses of one mode's incidents; an analysis still running then
    /// scores as an error.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Print each scenario's incidents and analysis text, not only its scores.
    #[arg(long)]
    pub verbose: bool,
    /// Keep the scratch database afterwards (its name is logged), to inspect the incidents.
    #[arg(long)]
    pub keep_database: bool,
}

impl EvalOptions {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}
