//! How far behind the event store each consumer's checkpoint is, for the service's metrics: read
//! at scrape time, in one statement, from the same index range each tail reads.

use std::sync::Arc;

use sqlx::PgPool;

use crate::{EventConsumer, Tail};

/// One consumer's backlog: the events its tail has yet to hand over (counted up to a cap), and
/// the age of the oldest of them in seconds (0 when there is none).
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumerLag {
    pub consumer: &'static str,
    pub events: i64,
    pub seconds: f64,
}

/// Each consumer's backlog, counting at most `cap` events each: a consumer far behind costs a
/// bounded read (its lag in seconds says the rest).
pub async fn lag(pool: &PgPool, consumers: &[Arc<dyn EventConsumer>], cap: i64) -> sqlx::Result<Vec<ConsumerLag>> {
    if consumers.is_empty() {
        return Ok(Vec::new());
    }
    // The consumers' names and types are parameters; their selections (like the tail's) are
    // written out so that the planner can use the partial indexes made for them.
    let parts: Vec<String> = consumers
        .iter()
        .enumerate()
        .map(|(index, consumer)| {
            let (name, aggregate_type) = (2 * index + 2, 2 * index + 3);
            let selection = Tail::new(pool.clone(), consumer.clone()).selection();
            format!(
                "SELECT {index} AS consumer_index, count(*) AS events,
                        COALESCE(EXTRACT(EPOCH FROM now() - min(recorded_at)), 0)::float8 AS seconds
                 FROM (SELECT recorded_at FROM events
                       WHERE aggregate_type = ${aggregate_type}{selection}
                         AND (transaction_id, global_position) > (
                             COALESCE((SELECT transaction_id FROM event_consumer_checkpoints WHERE name = ${name}),
                                      '0'::xid8),
                             COALESCE((SELECT global_position FROM event_consumer_checkpoints WHERE name = ${name}),
                                      0))
                       ORDER BY transaction_id, global_position
                       LIMIT $1) AS behind"
            )
        })
        .collect();
    let statement = parts.join("\nUNION ALL\n");
    let mut query = sqlx::query_as::<_, (i32, i64, f64)>(&statement).bind(cap);
    for consumer in consumers {
        query = query.bind(consumer.name()).bind(consumer.aggregate_type());
    }
    let rows = query.fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(index, events, seconds)| {
            let consumer = consumers.get(usize::try_from(index).ok()?)?;
            Some(ConsumerLag {
                consumer: consumer.name(),
                events,
                seconds: seconds.max(0.0),
            })
        })
        .collect())
}
