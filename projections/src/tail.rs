use std::{collections::HashMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, EventEnvelope};
use serde_json::{value::RawValue, Value};
use sqlx::{PgConnection, PgPool};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{
    progress::{Progress, ReplayProgress},
    scoped_lock_key, ProjectionError,
};

/// The channel on which appends are announced (see [`AppendAnnouncer`]).
pub const EVENTS_CHANNEL: &str = "vigil_events";
/// How long a woken tail lets further appends gather before it reads.
const COALESCE: Duration = Duration::from_millis(50);

/// The lowest transaction id that may still append events to this database, as of the reading
/// statement's own snapshot: events below it are all committed and none can appear among them
/// later, so a checkpoint may pass them.
///
/// It is the oldest transaction the snapshot sees running, skipping those that pg_stat_activity
/// shows connected to another database: transaction ids are cluster-wide, and a long transaction
/// in a neighbouring database (another service, another test) must not stall this one's tails.
/// A transaction that ended between the snapshot and the pg_stat_activity read is not skipped,
/// so the horizon can only err on the early side.
const SAFE_HORIZON: &str = "(SELECT COALESCE(
           (SELECT min(running) FROM pg_snapshot_xip(snapshot) AS running
            WHERE xid(running) NOT IN (
                SELECT backend_xid FROM pg_stat_activity
                WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database())),
           pg_snapshot_xmax(snapshot))
       FROM (SELECT pg_current_snapshot() AS snapshot) AS current)";

/// One row of the event store, as the tail reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub global_position: i64,
    pub transaction_id: i64,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    /// The payload's JSON as the store holds it (`null` when the tail handed the event over
    /// without it): decoded once, straight into the consumer's event type, by [`Self::envelope`].
    /// Building a `serde_json::Value` first and the event from it was most of a replay's CPU.
    #[sqlx(json)]
    pub payload: Box<RawValue>,
    #[sqlx(json)]
    pub metadata: Box<RawValue>,
    pub recorded_at: DateTime<Utc>,
}

impl StoredEvent {
    pub const SELECT: &'static str = "SELECT global_position, transaction_id::text::bigint AS transaction_id, \
         aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata, recorded_at FROM events";

    pub fn envelope<A: Aggregate>(&self) -> Result<EventEnvelope<A>, ProjectionError> {
        let payload =
            serde_json::from_str::<A::Event>(self.payload.get()).map_err(|source| ProjectionError::Deserialize {
                aggregate_type: self.aggregate_type.clone(),
                aggregate_id: self.aggregate_id.clone(),
                sequence: self.sequence,
                source,
            })?;
        let metadata = serde_json::from_str::<HashMap<String, String>>(self.metadata.get()).unwrap_or_default();
        Ok(EventEnvelope {
            aggregate_id: self.aggregate_id.clone(),
            sequence: self.sequence as usize,
            payload,
            metadata,
        })
    }

    /// Whether the event was handed over with its payload.
    pub fn has_payload(&self) -> bool {
        self.payload.get() != "null"
    }

    /// The payload as a JSON value, for a consumer that reads a field or two of it.
    pub fn payload_value(&self) -> Value {
        serde_json::from_str(self.payload.get()).unwrap_or(Value::Null)
    }

    /// The metadata as a JSON value (the actor, `user:<id>` or `system:<part>`, under `actor`).
    pub fn metadata_value(&self) -> Value {
        serde_json::from_str(self.metadata.get()).unwrap_or(Value::Null)
    }
}

/// Something that reads one aggregate type's events in commit-safe order: a projection or a reactor.
#[async_trait]
pub trait EventConsumer: Send + Sync {
    fn name(&self) -> &'static str;
    fn aggregate_type(&self) -> &'static str;
    /// Which events the tail hands over, and with what: every event whole (`All`), only the
    /// events of some types (`OfTypes`: the others are never read, and the checkpoint stays at
    /// the last one handed over), or every event without its payload and metadata (`None`, `null`
    /// in both), so that a consumer of one kind of event, or one that usually finds its work
    /// done, does not fetch and parse every event's payload. The types a consumer reads belong
    /// in the `events_tail_reactions` index, which holds just their events.
    fn payloads(&self) -> Payloads<'_> {
        Payloads::All
    }
    /// Whether the tail may pass over the events their appending transaction applied to this
    /// consumer already (marked `projected` in the store; see [`crate::ReadModel::PROJECTED_BY_WRITERS`]).
    /// A replay reads them all the same.
    fn skips_projected(&self) -> bool {
        false
    }
    /// The rows this consumer alone writes, as `FROM` items (a table, or a table and a `WHERE`
    /// condition): what a replay rebuilds and [`crate::checksums`] compares. None for a reactor.
    fn tables(&self) -> &'static [&'static str] {
        &[]
    }
    /// Handles a batch; an error leaves the checkpoint where it was, so the batch comes again.
    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError>;
    /// Forgets everything consumed so far (a projection truncates its tables).
    async fn reset(&self) -> Result<(), ProjectionError>;
}

/// See [`EventConsumer::payloads`].
#[derive(Clone, Copy, Debug)]
pub enum Payloads<'a> {
    All,
    /// Only events of these types, whole.
    OfTypes(&'a [&'static str]),
    /// Every event, without payload or metadata: the consumer fetches what it needs itself.
    None,
}

/// Feeds one consumer every event of its aggregate type exactly in the order the checkpoint
/// can trust, from its checkpoint on.
pub struct Tail {
    pub(crate) pool: PgPool,
    pub(crate) consumer: Arc<dyn EventConsumer>,
    pub(crate) batch_size: i64,
    pub(crate) rounds: Option<Arc<Semaphore>>,
    /// Reads the events marked `projected` too, whatever the consumer says (a replay: its read
    /// tables were emptied).
    pub(crate) includes_projected: bool,
}

impl Tail {
    pub fn new(pool: PgPool, consumer: Arc<dyn EventConsumer>) -> Self {
        Self {
            pool,
            consumer,
            batch_size: 500,
            rounds: None,
            includes_projected: false,
        }
    }

    /// Shares `rounds` with the process's other tails: a round holds one pooled connection (its
    /// reading lock) while it takes others, so tails that all started rounds at once on a small
    /// pool could each hold one and wait for another forever. Bounding the rounds in flight
    /// bounds the connections they can hold.
    pub fn sharing_rounds(mut self, rounds: Arc<Semaphore>) -> Self {
        self.rounds = Some(rounds);
        self
    }

    /// Applies every event that is safe to read now; returns how many it handed over. Waits for
    /// any other reader of this consumer (another instance's tail, a replay) to finish first.
    pub async fn catch_up(&self) -> Result<u64, ProjectionError> {
        let reading = self.exclusive(Wait::Yes).await?;
        let read = self.read_available().await;
        release(reading).await?;
        read
    }

    /// Everything readable now, batch after batch, each read and checkpointed on a connection
    /// apart from the reading lock's (whose transaction then never writes: a long catch-up or
    /// replay holding a transaction id would hold back every other tail's safe horizon).
    async fn read_available(&self) -> Result<u64, ProjectionError> {
        let mut conn = self.pool.acquire().await?;
        let mut handed_over = 0;
        loop {
            let batch = self.read_batch(&mut conn).await?;
            handed_over += batch.handed_over;
            if !batch.full {
                return Ok(handed_over);
            }
        }
    }

    /// Holds the consumer's reading lock for as long as the returned transaction lives, so that
    /// only one tail (in any instance) or replay moves a checkpoint at a time. `None` when
    /// `Wait::No` and someone else holds it.
    async fn exclusive(
        &self,
        wait: Wait,
    ) -> Result<Option<sqlx::Transaction<'static, sqlx::Postgres>>, ProjectionError> {
        let mut lock = self.pool.begin().await?;
        let key = format!("event-consumer/{}", self.consumer.name());
        let held = match wait {
            Wait::Yes => {
                sqlx::query(concat!("SELECT pg_advisory_xact_lock(", scoped_lock_key!("$1"), ")"))
                    .bind(key)
                    .execute(&mut *lock)
                    .await?;
                true
            }
            Wait::No => {
                sqlx::query_scalar(concat!(
                    "SELECT pg_try_advisory_xact_lock(",
                    scoped_lock_key!("$1"),
                    ")"
                ))
                .bind(key)
                .fetch_one(&mut *lock)
                .await?
            }
        };
        Ok(held.then_some(lock))
    }

    /// Reads the next batch after the checkpoint, hands it to the consumer, and moves the
    /// checkpoint to its last event, on `conn`, in one read and one write.
    async fn read_batch(&self, conn: &mut PgConnection) -> Result<Batch, ProjectionError> {
        let events: Vec<StoredEvent> = sqlx::query_as(&self.batch_after(
            "(COALESCE((SELECT transaction_id FROM event_consumer_checkpoints WHERE name = $2), '0'::xid8),
              COALESCE((SELECT global_position FROM event_consumer_checkpoints WHERE name = $2), 0))",
            "$3",
        ))
        .bind(self.consumer.aggregate_type())
        .bind(self.consumer.name())
        .bind(self.batch_size)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = events.last() else {
            return Ok(Batch::default());
        };
        let (transaction_id, position) = (last.transaction_id, last.global_position);
        self.consumer.consume(&events).await?;
        save_checkpoint(conn, self.consumer.name(), transaction_id, position).await?;
        Ok(Batch {
            handed_over: events.len() as u64,
            full: events.len() as i64 == self.batch_size,
        })
    }

    /// The next batch after `after` (a transaction id and a position), without reading the
    /// checkpoint: a replay reads a batch while its consumer applies the one before.
    async fn read_after(
        &self,
        conn: &mut PgConnection,
        after: (i64, i64),
    ) -> Result<Vec<StoredEvent>, ProjectionError> {
        Ok(sqlx::query_as(&self.batch_after("($2::bigint::text::xid8, $3)", "$4"))
            .bind(self.consumer.aggregate_type())
            .bind(after.0)
            .bind(after.1)
            .bind(self.batch_size)
            .fetch_all(conn)
            .await?)
    }

    /// The statement that reads the consumer's next `limit` events in tail order after the
    /// `(transaction id, position)` pair `after`: every event whole in a replay (its consumer
    /// applies them all, and would fetch them), without payload and metadata for a consumer that
    /// asks for none.
    fn batch_after(&self, after: &str, limit: &str) -> String {
        self.read_statement(after, limit, true)
    }

    /// [`Self::batch_after`], or without the safe horizon when not `safe` (see [`Self::sweep`]).
    pub(crate) fn read_statement(&self, after: &str, limit: &str, safe: bool) -> String {
        let (payload, metadata) = match self.consumer.payloads() {
            Payloads::None if !self.includes_projected => ("'null'::json", "'null'::json"),
            Payloads::None | Payloads::All | Payloads::OfTypes(_) => ("payload", "metadata"),
        };
        format!(
            "SELECT global_position, transaction_id::text::bigint AS transaction_id, aggregate_type, aggregate_id,
                    sequence, event_type, event_version, {payload} AS payload, {metadata} AS metadata, recorded_at
             FROM events
             WHERE aggregate_type = $1{selection}
               AND (transaction_id, global_position) > {after}{horizon}
             ORDER BY events.transaction_id, events.global_position
             LIMIT {limit}",
            selection = self.selection(),
            horizon = if safe {
                format!("\n               AND transaction_id < {SAFE_HORIZON}")
            } else {
                String::new()
            }
        )
    }

    /// Which of its aggregate type's events the tail reads, as a condition to follow
    /// `aggregate_type = $1`: only a consumer's types when it names some, and outside a replay
    /// not the events already projected when the consumer skips those. The types are written
    /// out rather than bound so that the planner can prove that a partial index made for these
    /// reads (`events_tail_reactions`, `events_tail_unprojected`) holds every event asked for.
    pub(crate) fn selection(&self) -> String {
        let mut condition = String::new();
        if let Payloads::OfTypes(types) = self.consumer.payloads() {
            let listed: Vec<String> = types
                .iter()
                .map(|event_type| format!("'{}'", event_type.replace('\'', "''")))
                .collect();
            if listed.is_empty() {
                condition.push_str(" AND false");
            } else {
                condition.push_str(&format!(" AND event_type IN ({})", listed.join(", ")));
            }
        }
        if self.consumer.skips_projected() && !self.includes_projected {
            condition.push_str(" AND NOT projected");
        }
        condition
    }

    /// Catches up whenever events are appended (or every `poll`), until `shutdown`. A failing
    /// batch is retried with exponential backoff (up to a minute) and never skipped: the read
    /// side stops at the failing event rather than silently diverging from the store.
    pub async fn run(self, wake: Arc<Notify>, poll: Duration, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let round = async {
                let _turn = match &self.rounds {
                    Some(rounds) => Some(rounds.acquire().await.expect("the round semaphore is never closed")),
                    None => None,
                };
                // One batch per round, read and checkpointed inside the reading lock's own
                // transaction: a round is BEGIN, the lock, one read, one write and COMMIT on one
                // connection. A full batch starts the next round at once.
                let Some(mut reading) = self.exclusive(Wait::No).await? else {
                    return Ok(Batch::default()); // another instance is reading this consumer
                };
                match self.read_batch(&mut reading).await {
                    Ok(batch) => {
                        reading.commit().await?;
                        Ok(batch)
                    }
                    Err(error) => {
                        let _ = reading.rollback().await;
                        Err(error)
                    }
                }
            };
            let pause = match round.await {
                Ok(batch) if batch.full && !shutdown.is_cancelled() => {
                    failures = 0;
                    continue;
                }
                Ok(_) => {
                    failures = 0;
                    poll
                }
                Err(error) => {
                    failures += 1;
                    let backoff = (poll * 2u32.saturating_pow(failures.min(7))).min(Duration::from_secs(60));
                    tracing::error!(consumer = self.consumer.name(), %error, failures, ?backoff, "event tail failed");
                    backoff
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = wake.notified(), if failures == 0 => {
                    // Under a write storm appends come every few milliseconds: letting them gather
                    // for a moment turns many small reads into one, at a small cost in freshness.
                    tokio::time::sleep(COALESCE).await;
                }
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    pub(crate) async fn checkpoint(&self) -> Result<(i64, i64), ProjectionError> {
        let row: Option<(i64, i64)> = sqlx::query_as(
            "SELECT transaction_id::text::bigint, global_position FROM event_consumer_checkpoints WHERE name = $1",
        )
        .bind(self.consumer.name())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.unwrap_or((0, 0)))
    }

    /// Whether every event of the consumer's type up to `last` (in tail order) has been handed over.
    async fn has_read_through(&self, last: (i64, i64)) -> Result<bool, ProjectionError> {
        let (transaction_id, checkpoint) = self.checkpoint().await?;
        let unread: bool = sqlx::query_scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM events WHERE aggregate_type = $1{selection}
                AND (transaction_id, global_position) <= ($2::bigint::text::xid8, $3)
                AND (transaction_id, global_position) > ($4::bigint::text::xid8, $5))",
            selection = self.selection()
        ))
        .bind(self.consumer.aggregate_type())
        .bind(last.0)
        .bind(last.1)
        .bind(transaction_id)
        .bind(checkpoint)
        .fetch_one(&self.pool)
        .await?;
        Ok(!unread)
    }

    async fn reset_checkpoint(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM event_consumer_checkpoints WHERE name = $1")
            .bind(self.consumer.name())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Moves a consumer's checkpoint. Without waiting for the WAL flush: a checkpoint lost in a crash
/// only means a few events are read again, which consumers skip (projections by version, reactors
/// by job key).
async fn save_checkpoint(
    conn: &mut PgConnection,
    name: &str,
    transaction_id: i64,
    position: i64,
) -> Result<(), ProjectionError> {
    sqlx::query(
        "INSERT INTO event_consumer_checkpoints (name, transaction_id, global_position, updated_at)
         SELECT $1, $2::bigint::text::xid8, $3, now()
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
         ON CONFLICT (name) DO UPDATE
         SET transaction_id = EXCLUDED.transaction_id, global_position = EXCLUDED.global_position, updated_at = now()",
    )
    .bind(name)
    .bind(transaction_id)
    .bind(position)
    .execute(conn)
    .await?;
    Ok(())
}

/// What one read of a tail did.
#[derive(Default)]
struct Batch {
    handed_over: u64,
    /// The batch was as large as a batch may be: more may be readable at once.
    full: bool,
}

/// Ends a reading lock's transaction now, rather than whenever its pooled connection is next
/// flushed: a lock left pending would keep every other reader of the consumer waiting.
async fn release(reading: Option<sqlx::Transaction<'static, sqlx::Postgres>>) -> Result<(), ProjectionError> {
    if let Some(reading) = reading {
        reading.rollback().await?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Wait {
    Yes,
    No,
}

/// Rebuilds a consumer from the whole event store: forget, then read again every event that
/// exists when the replay starts. Events become readable only once every older transaction in
/// the cluster has ended, so this waits (up to `REPLAY_PATIENCE`) for stragglers.
pub async fn replay(pool: &PgPool, consumer: Arc<dyn EventConsumer>) -> Result<u64, ProjectionError> {
    replay_in_batches(pool, consumer, REPLAY_BATCH).await
}

/// [`replay`], telling `progress` how far it has come.
pub async fn replay_observed(
    pool: &PgPool,
    consumer: Arc<dyn EventConsumer>,
    progress: &Arc<ReplayProgress>,
) -> Result<u64, ProjectionError> {
    replay_with(pool, consumer, REPLAY_BATCH, Some(progress)).await
}

/// [`replay`], handing the consumer `batch_size` events at a time.
pub async fn replay_in_batches(
    pool: &PgPool,
    consumer: Arc<dyn EventConsumer>,
    batch_size: i64,
) -> Result<u64, ProjectionError> {
    replay_with(pool, consumer, batch_size, None).await
}

async fn replay_with(
    pool: &PgPool,
    consumer: Arc<dyn EventConsumer>,
    batch_size: i64,
    observer: Option<&Arc<ReplayProgress>>,
) -> Result<u64, ProjectionError> {
    let tail = Tail {
        includes_projected: true,
        batch_size,
        ..Tail::new(pool.clone(), consumer.clone())
    };
    let reading = tail.exclusive(Wait::Yes).await?;
    // The last event in tail order, read backwards on the tail's index: `max(global_position)`
    // would read every event of the type.
    let last: (i64, i64) = sqlx::query_as(
        "SELECT transaction_id::text::bigint, global_position FROM events WHERE aggregate_type = $1
         ORDER BY events.transaction_id DESC, events.global_position DESC LIMIT 1",
    )
    .bind(consumer.aggregate_type())
    .fetch_optional(pool)
    .await?
    .unwrap_or((0, 0));
    let rebuilt = rebuild(&tail, &consumer, last, observer).await;
    release(reading).await?;
    rebuilt
}

async fn rebuild(
    tail: &Tail,
    consumer: &Arc<dyn EventConsumer>,
    last: (i64, i64),
    observer: Option<&Arc<ReplayProgress>>,
) -> Result<u64, ProjectionError> {
    tail.reset_checkpoint().await?;
    consumer.reset().await?;
    let total: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM events WHERE aggregate_type = $1{}",
        tail.selection()
    ))
    .bind(consumer.aggregate_type())
    .fetch_one(&tail.pool)
    .await?;
    let mut progress = Progress::new(consumer.name(), total as u64, observer);
    let deadline = tokio::time::Instant::now() + REPLAY_PATIENCE;
    // Two connections beside the consumer's: one reads the next batch while the consumer applies
    // the one before, the other moves the checkpoint.
    let (mut reader, mut writer) = (tail.pool.acquire().await?, tail.pool.acquire().await?);
    let mut after = (0, 0);
    let mut next = tail.read_after(&mut reader, after).await?;
    loop {
        let events = std::mem::take(&mut next);
        if let Some(last) = events.last() {
            let position = (last.transaction_id, last.global_position);
            let full = events.len() as i64 == tail.batch_size;
            let following = async {
                match full {
                    true => tail.read_after(&mut reader, position).await,
                    false => Ok(Vec::new()),
                }
            };
            let (consumed, following) = tokio::join!(consumer.consume(&events), following);
            consumed?;
            save_checkpoint(&mut writer, consumer.name(), position.0, position.1).await?;
            progress.advance(events.len() as u64);
            after = position;
            next = following?;
            if full {
                continue;
            }
        }
        if tail.has_read_through(last).await? {
            return Ok(progress.done());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ProjectionError::Stalled {
                consumer: consumer.name(),
                waited: REPLAY_PATIENCE,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        next = tail.read_after(&mut reader, after).await?;
    }
}

const REPLAY_PATIENCE: Duration = Duration::from_secs(60);

/// Events per batch in a replay: a consumer applies a batch in a few statements, so larger
/// batches mean fewer round trips (see benches/README.md, replay).
pub(crate) const REPLAY_BATCH: i64 = 5_000;
