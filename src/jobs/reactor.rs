//! Reactors on the incident event tail that turn one kind of event into a background job (the
//! analyses, the postmortems and the merges of bridged incidents are each one).

use async_trait::async_trait;
use sqlx::PgPool;
use vigil_projections::{EventConsumer, Payloads, ProjectionError, StoredEvent};

use super::{enqueue_many_in, NewJob};

/// What a reactor makes of one event: the jobs to enqueue (often one, possibly none).
pub type JobsOf = Box<dyn Fn(&StoredEvent) -> Vec<NewJob> + Send + Sync>;

/// Enqueues the jobs `jobs` makes of every `event_type` event (often one, possibly none). Each
/// job's unique key, derived from the event, makes reading an event again enqueue nothing new.
pub struct JobReactor {
    pub name: &'static str,
    pub db: PgPool,
    pub event_type: &'static str,
    pub jobs: JobsOf,
}

#[async_trait]
impl EventConsumer for JobReactor {
    fn name(&self) -> &'static str {
        self.name
    }

    fn aggregate_type(&self) -> &'static str {
        "Incident"
    }

    fn payloads(&self) -> Payloads<'_> {
        Payloads::OfTypes(std::slice::from_ref(&self.event_type))
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let jobs: Vec<NewJob> = events
            .iter()
            .filter(|event| event.event_type == self.event_type)
            .flat_map(|event| (self.jobs)(event))
            .collect();
        enqueue_many_in(&self.db, &jobs)
            .await
            .map_err(|error| ProjectionError::Reaction {
                consumer: self.name,
                reason: error.to_string(),
            })
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        Ok(())
    }
}
