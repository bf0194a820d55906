//! The bounded queue between a connection's workflows and its socket writer.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::ws::{fanout::SessionFanout, protocol::ServerMessage};

/// Where a workflow puts what the client should see. Sending never waits: when the client reads
/// too slowly for the queue, the connection is dropped (`overflowed` fires) instead of letting
/// memory grow or a slow reader stall the model stream.
#[derive(Clone)]
pub struct Outbox {
    sender: mpsc::Sender<ServerMessage>,
    overflowed: CancellationToken,
    relay: Option<Relay>,
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
        };
        (outbox, receiver)
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

    /// The asking connection follows the reply's session from now on: call it once the session is
    /// known to be the asker's.
    pub fn follow_session(&self) {
        if let Some(Relay {
            fanout,
            session,
            origin: Some(connection),
        }) = &self.relay
        {
            let plain = Self {
                relay: None,
                ..self.clone()
            };
            fanout.follow(*session, *connection, &plain);
        }
    }

    pub fn send(&self, message: ServerMessage) {
        if let Some(relay) = &self.relay {
            relay.fanout.publish(relay.session, relay.origin, &message);
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = self.sender.try_send(message) {
            if !self.overflowed.is_cancelled() {
                tracing::warn!("websocket client reads too slowly; dropping the connection");
            }
            self.overflowed.cancel();
        }
    }

    /// Whether nobody reads any more (the client left, or a background run never had one).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Fires once a message could not be queued.
    pub fn overflowed(&self) -> &CancellationToken {
        &self.overflowed
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
}
