//! The bounded queue between a connection's workflows and its socket writer.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ws::protocol::ServerMessage;

/// Where a workflow puts what the client should see. Sending never waits: when the client reads
/// too slowly for the queue, the connection is dropped (`overflowed` fires) instead of letting
/// memory grow or a slow reader stall the model stream.
#[derive(Clone)]
pub struct Outbox {
    sender: mpsc::Sender<ServerMessage>,
    overflowed: CancellationToken,
}

impl Outbox {
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<ServerMessage>) {
        let (sender, receiver) = mpsc::channel(capacity);
        let outbox = Self {
            sender,
            overflowed: CancellationToken::new(),
        };
        (outbox, receiver)
    }

    pub fn send(&self, message: ServerMessage) {
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
