//! Read models of vigil and the machinery that keeps them in step with the event store:
//! a versioned, idempotent [`Projector`] (run in the command path for read-your-writes) and a
//! checkpointed [`Tail`] that applies whatever the command path missed and drives replays.

pub mod alert_inbox;
pub mod chat_sessions;
mod checksum;
pub mod connections;
mod error;
mod generation;
pub mod grouping_rules;
pub mod incident_analysis;
pub mod incidents;
mod lag;
mod progress;
mod projector;
pub mod rebuild;
pub mod silences;
mod tail;
pub mod topology;
mod wake;

pub use checksum::{checksums, TableChecksum};
pub use error::ProjectionError;
pub use lag::{lag, ConsumerLag};
pub use progress::{ProjectionProgress, ReplayProgress};
pub use projector::{load_all, load_ranges, Projector, ReadModel};
pub use tail::{
    replay, replay_in_batches, replay_observed, EventConsumer, Payloads, StoredEvent, Tail, EVENTS_CHANNEL,
};
pub use wake::{listen_for_appends, AppendAnnouncer, TailWakers};

/// The advisory lock key of `$name` (SQL text), as the projections take it: the name alone in
/// the live schema, prefixed with the schema's name where an online rebuild writes its read
/// tables beside the live ones ([`rebuild`]), so that the rebuild's tails and projectors never
/// queue behind the live ones.
macro_rules! scoped_lock_key {
    ($name:literal) => {
        concat!(
            "hashtextextended((CASE current_schema() WHEN 'public' THEN '' ELSE current_schema() || ':' END) || ",
            $name,
            ", 0)"
        )
    };
}
pub(crate) use scoped_lock_key;

/// `sql` with each parameter `$n` renumbered `$(n + offset)`, so that a statement's parts written
/// apart (a read model's row writes, say) can be put in one statement after other parameters.
/// `sql` must hold no `$` but in parameters (no dollar quotes).
pub(crate) fn renumbered(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod renumbered_tests {
    use super::renumbered;

    #[test]
    fn every_parameter_moves_by_the_offset_and_nothing_else_changes() {
        assert_eq!(
            renumbered("unnest($1::uuid[], $10::text[]) WHERE a = $2 AND b = '$'", 27),
            "unnest($28::uuid[], $37::text[]) WHERE a = $29 AND b = '$'"
        );
        assert_eq!(renumbered("SELECT 1", 5), "SELECT 1");
    }
}
