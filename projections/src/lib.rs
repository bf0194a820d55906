//! Read models of vigil and the machinery that keeps them in step with the event store:
//! a versioned, idempotent [`Projector`] (run in the command path for read-your-writes) and a
//! checkpointed [`Tail`] that applies whatever the command path missed and drives replays.

pub mod chat_sessions;
pub mod connections;
mod error;
pub mod incident_analysis;
pub mod incidents;
mod projector;
mod tail;

pub use error::ProjectionError;
pub use projector::{Projector, ReadModel};
pub use tail::{
    listen_for_appends, replay, AppendAnnouncer, EventConsumer, Payloads, StoredEvent, Tail, TailWakers, EVENTS_CHANNEL,
};
