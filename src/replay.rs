//! `vigil replay --online`: the rebuild beside the live tables, with its progress shown as a bar
//! on a terminal (log lines otherwise, every few seconds, from the replay itself).

use std::{io::IsTerminal, sync::Arc, time::Duration};

use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use vigil_projections::ReplayProgress;

use crate::event_store::EventStore;

/// Rebuilds `only` (every projection when `None`) while the service serves, and switches the
/// rebuilt tables in. Returns each projection with the events its replay read.
pub async fn online(events: &EventStore, db: &PgPool, only: Option<&str>) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let progress = Arc::new(ReplayProgress::default());
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| tokio::spawn(show(progress.clone())));
    let rebuilt = events.rebuild_online(db, only, &progress).await;
    if let Some(bar) = bar {
        bar.abort();
    }
    rebuilt
}

/// Redraws a bar of the projection being replayed: its events, the rate and the time left.
async fn show(progress: Arc<ReplayProgress>) {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{msg:>22} [{bar:40}] {percent:>3}% {human_pos}/{human_len} events, {per_sec}, ETA {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut showing = String::new();
    loop {
        if let Some(current) = progress.snapshot().pop() {
            if current.projection != showing {
                bar.reset();
                bar.set_message(current.projection.clone());
                showing = current.projection;
            }
            bar.set_length(current.total);
            bar.set_position(current.done);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
