//! The bounded queue between a connection's workflows and its socket writer.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::ws::{
    fanout::SessionFanout,
    protocol::{ServerMessage, Severity},
};

/// Where a workflow puts what the client should see. Sending never waits: when the client reads
/// too slowly for the queue, the connection is dropped (`overflowed` fires) instead of letting
/// memory grow or a slow reader stall the model stream.
#[derive(Clone)]
pub struct Outbox {
    sender: mpsc::Sender<ServerMessage>,
    overflowed: CancellationToken,
    relay: Option<Relay>,
    /// Sessions in which this connection's own replies are being written, with how many (a query
    /// after a cancel waits for the cancelled reply to wind down): other replies' messages for them
    /// are not interleaved into them (a late END of the previous reply, say).
    answering: Arc<Mutex<HashMap<Uuid, usize>>>,
    /// Fires when the connection no longer speaks for the user whose reply this outbox carries
    /// (its socket sent `init` as someone else): the reply's messages then reach only the
    /// session's other followers.
    detached: Option<CancellationToken>,
}

/// Where a reply's messages go besides this outbox: the session's other followers.
#[derive(Clone)]
struct Relay {
    fanout: Arc<SessionFanout>,
    session: Uuid,
    /// The connection this outbox belongs to, which has its copy already.
    origin: Option<Uuid>,
}

impl Outbox {
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<ServerMessage>) {
        let (sender, receiver) = mpsc::channel(capacity);
        let outbox = Self {
            sender,
            overflowed: CancellationToken::new(),
            relay: None,
            answering: Arc::default(),
            detached: None,
        };
        (outbox, receiver)
    }

    /// Marks this connection's own reply in `session` as running until the guard drops.
    pub fn answering(&self, session: Uuid) -> AnsweringGuard {
        *self.answering.lock().expect("not poisoned").entry(session).or_default() += 1;
        AnsweringGuard {
            answering: self.answering.clone(),
            session,
        }
    }

    /// A message of another connection's (or instance's) reply in `session`.
    pub fn send_relayed(&self, session: Uuid, message: ServerMessage) {
        if !self.answering.lock().expect("not poisoned").contains_key(&session) {
            self.send(message);
        }
    }

    /// An outbox for one reply in `session`, whose messages also reach every other socket that
    /// follows the session (`origin` is the asking connection, if a socket asked).
    pub fn relaying(&self, fanout: Arc<SessionFanout>, session: Uuid, origin: Option<Uuid>) -> Self {
        Self {
            relay: Some(Relay {
                fanout,
                session,
                origin,
            }),
            ..self.clone()
        }
    }

    /// This outbox, reaching its connection only until `detached` fires.
    pub fn detachable(&self, detached: CancellationToken) -> Self {
        Self {
            detached: Some(detached),
            ..self.clone()
        }
    }

    fn is_detached(&self) -> bool {
        self.detached.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// The asking connection follows the reply's session from now on: call it once the session is
    /// known to be the asker's.
    pub fn follow_session(&self) {
        if self.is_detached() {
            return;
        }
        if let Some(Relay {
            fanout,
            session,
            origin: Some(connection),
        }) = &self.relay
        {
            fanout.follow(*session, *connection, &self.unrelayed());
        }
    }

    /// This outbox without its relay: for what only the asking connection may see.
    pub fn unrelayed(&self) -> Self {
        Self {
            relay: None,
            ..self.clone()
        }
    }

    pub fn send(&self, message: ServerMessage) {
        if let Some(relay) = &self.relay {
            relay.fanout.publish(relay.session, relay.origin, &message);
        }
        if self.is_detached() {
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = self.sender.try_send(message) {
            if !self.overflowed.is_cancelled() {
                tracing::warn!("websocket client reads too slowly; dropping the connection");
            }
            self.overflowed.cancel();
        }
    }

    /// Answers a query that will not be processed: the error, then the `status END` (incomplete)
    /// its asker waits for.
    pub fn refuse(&self, session_id: &str, text: impl Into<String>, code: Option<&str>) {
        self.send(ServerMessage::session_error(session_id, text, Severity::Error, code));
        self.send(ServerMessage::status_end(session_id, false));
    }

    /// Whether nobody reads any more (the client left, or speaks for someone else now, or a
    /// background run never had one).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed() || self.is_detached()
    }

    /// Fires once a message could not be queued.
    pub fn overflowed(&self) -> &CancellationToken {
        &self.overflowed
    }
}

/// A reply's outbox that holds its messages back until the question they answer is saved: the
/// model is asked while the save commits, so the save no longer delays the first chunk by its
/// whole length, and yet no client sees an answer to a question that was not saved.
pub struct HeldOutbox {
    outbox: Outbox,
    /// `Some` while held.
    held: Mutex<Option<Vec<ServerMessage>>>,
}

impl HeldOutbox {
    pub fn new(outbox: Outbox) -> Self {
        Self {
            outbox,
            held: Mutex::new(Some(Vec::new())),
        }
    }

    pub fn send(&self, message: ServerMessage) {
        // Sent under the lock, so that a release and a send never swap two messages.
        let mut held = self.held.lock().expect("not poisoned");
        match held.as_mut() {
            Some(held) => held.push(message),
            None => self.outbox.send(message),
        }
    }

    /// The question is saved: what was held goes out, in order, and the rest as it comes.
    pub fn release(&self) {
        let mut held = self.held.lock().expect("not poisoned");
        for message in held.take().into_iter().flatten() {
            self.outbox.send(message);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.outbox.is_closed()
    }
}

pub struct AnsweringGuard {
    answering: Arc<Mutex<HashMap<Uuid, usize>>>,
    session: Uuid,
}

impl Drop for AnsweringGuard {
    fn drop(&mut self) {
        let mut answering = self.answering.lock().expect("not poisoned");
        if let Some(count) = answering.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                answering.remove(&self.session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_marks_the_connection_for_dropping() {
        let (outbox, mut receiver) = Outbox::new(2);
        outbox.send(ServerMessage::status_start());
        outbox.send(ServerMessage::status_start());
        assert!(!outbox.overflowed().is_cancelled());
        outbox.send(ServerMessage::status_start());
        assert!(outbox.overflowed().is_cancelled());
        assert!(receiver.try_recv().is_ok());
    }

    #[test]
    fn a_held_outbox_sends_nothing_until_released_then_everything_in_order() {
        let (outbox, mut receiver) = Outbox::new(8);
        let held = HeldOutbox::new(outbox);
        held.send(ServerMessage::chunk("s", "one"));
        held.send(ServerMessage::chunk("s", "two"));
        assert!(receiver.try_recv().is_err(), "held until released");
        held.release();
        held.send(ServerMessage::chunk("s", "three"));
        let texts: Vec<_> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|message| serde_json::to_value(&message).unwrap()["data"]["text"].clone())
            .collect();
        assert_eq!(texts, ["one", "two", "three"]);
    }

    #[test]
    fn a_detached_outbox_no_longer_reaches_its_connection() {
        let (connection, mut receiver) = Outbox::new(8);
        let detached = CancellationToken::new();
        let reply = connection.detachable(detached.clone());
        reply.send(ServerMessage::status_start());
        assert!(receiver.try_recv().is_ok());
        assert!(!reply.is_closed());

        detached.cancel();
        reply.send(ServerMessage::status_start());
        assert!(receiver.try_recv().is_err(), "nothing reaches the connection any more");
        assert!(reply.is_closed(), "nobody there answers a confirmation");
        connection.send(ServerMessage::status_start());
        assert!(
            receiver.try_recv().is_ok(),
            "the connection's own messages still go out"
        );
    }
}
