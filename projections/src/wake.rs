//! Waking the tails when events are appended: an announcement after each commit, and one
//! listener per instance that wakes the tails of the aggregate types named.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sqlx::{postgres::PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::tail::EVENTS_CHANNEL;

/// Tells every instance's tails that events were committed, without making the writer wait. Sent
/// after the commit rather than from a trigger inside it: PostgreSQL commits notifying
/// transactions one at a time (a global lock held across the WAL flush), which would serialize
/// every writer. A lost notification only delays the tails until their next poll.
///
/// At most one notification is in flight; appends announced meanwhile share the one sent after
/// it, so a write storm costs the database a notification per round trip, not one per commit.
/// The notification names the aggregate types appended to, so that only their tails wake.
#[derive(Clone)]
pub struct AppendAnnouncer {
    pending: tokio::sync::mpsc::Sender<()>,
    types: Arc<std::sync::Mutex<std::collections::BTreeSet<&'static str>>>,
}

impl AppendAnnouncer {
    /// Starts the sender; it stops when the last clone of the announcer is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (pending, mut announcements) = tokio::sync::mpsc::channel(1);
        let types: Arc<std::sync::Mutex<std::collections::BTreeSet<&'static str>>> = Arc::default();
        let appended = types.clone();
        tokio::spawn(async move {
            while announcements.recv().await.is_some() {
                let payload = {
                    let mut types = appended.lock().expect("announcer lock");
                    let payload = types.iter().copied().collect::<Vec<_>>().join(",");
                    types.clear();
                    payload
                };
                if let Err(error) = sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(EVENTS_CHANNEL)
                    .bind(payload)
                    .execute(&pool)
                    .await
                {
                    tracing::debug!(%error, "append notification not sent; tails will poll");
                }
            }
        });
        Self { pending, types }
    }

    /// Announces that events of `aggregate_type` were committed.
    pub fn announce(&self, aggregate_type: &'static str) {
        self.types.lock().expect("announcer lock").insert(aggregate_type);
        // Full: a notification is already queued behind the one in flight, and covers this append.
        let _ = self.pending.try_send(());
    }
}

/// Wakes the tails of the aggregate types an append notification names (all of them when it
/// names none).
#[derive(Default)]
pub struct TailWakers {
    by_type: HashMap<&'static str, Arc<Notify>>,
}

impl TailWakers {
    /// The signal that wakes the tails of `aggregate_type`.
    pub fn of(&mut self, aggregate_type: &'static str) -> Arc<Notify> {
        self.by_type.entry(aggregate_type).or_default().clone()
    }

    fn wake(&self, payload: &str) {
        let mut named = payload.split(',').filter(|name| !name.is_empty()).peekable();
        if named.peek().is_none() {
            self.by_type.values().for_each(|wake| wake.notify_waiters());
        }
        for name in named {
            if let Some(wake) = self.by_type.get(name) {
                wake.notify_waiters();
            }
        }
    }
}

/// Listens for the append notification and wakes the tails it concerns. Reconnects after a
/// failure; the tails' polling covers any notification lost meanwhile.
pub async fn listen_for_appends(pool: PgPool, wakers: TailWakers, shutdown: CancellationToken) {
    loop {
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(EVENTS_CHANNEL).await?;
            loop {
                let notification = listener.recv().await?;
                wakers.wake(notification.payload());
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            result = listening => {
                if let Err(error) = result {
                    tracing::warn!(%error, "event notification listener failed; reconnecting");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
