//! One reply at a time per chat session: a second query while a reply is being written (from
//! another socket of the same user, or an incident-chat job) would interleave the two
//! conversations in the stored session. Within this instance; instances behind a load balancer
//! that route one session's sockets apart can still overlap (the session aggregate keeps each
//! message whole either way).

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;
use uuid::Uuid;

#[derive(Default)]
pub struct ReplyTurns {
    running: Mutex<HashSet<Uuid>>,
    finished: Notify,
}

/// The right to write a reply in a session, given back when dropped.
pub struct ReplyTurn {
    turns: Arc<ReplyTurns>,
    session: Uuid,
}

impl ReplyTurns {
    /// The session's turn, unless a reply is running in it.
    pub fn try_take(self: &Arc<Self>, session: Uuid) -> Option<ReplyTurn> {
        self.running
            .lock()
            .expect("not poisoned")
            .insert(session)
            .then(|| ReplyTurn {
                turns: self.clone(),
                session,
            })
    }

    /// Whether a reply is being written in the session (in this process).
    pub fn is_running(&self, session: Uuid) -> bool {
        self.running.lock().expect("not poisoned").contains(&session)
    }

    /// The session's turn, once the reply running in it (if any) is over.
    pub async fn take(self: &Arc<Self>, session: Uuid) -> ReplyTurn {
        loop {
            // Registered before looking, so that a turn given back in between still wakes us.
            let finished = self.finished.notified();
            if let Some(turn) = self.try_take(session) {
                return turn;
            }
            finished.await;
        }
    }
}

impl Drop for ReplyTurn {
    fn drop(&mut self) {
        self.turns.running.lock().expect("not poisoned").remove(&self.session);
        self.turns.finished.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_session_has_one_turn_and_waiters_get_it_when_it_is_given_back() {
        let turns = Arc::new(ReplyTurns::default());
        let (session, other) = (Uuid::new_v4(), Uuid::new_v4());
        let first = turns.try_take(session).expect("a free session");
        assert!(turns.try_take(session).is_none());
        assert!(turns.try_take(other).is_some(), "sessions do not share turns");

        let waiting = tokio::spawn({
            let turns = turns.clone();
            async move { turns.take(session).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the turn is still taken");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken when the turn is given back")
            .unwrap();
        assert!(turns.try_take(session).is_none());
        drop(second);
        assert!(turns.try_take(session).is_some());
    }
}
