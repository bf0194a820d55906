use std::{collections::HashMap, marker::PhantomData};

use async_trait::async_trait;
use cqrs_es::{Aggregate, EventEnvelope, Query};
use sqlx::{PgConnection, PgPool};

use crate::{tail::StoredEvent, EventConsumer, Payloads, ProjectionError};

/// A read table (or several) kept from one aggregate's events.
pub trait ReadModel<A: Aggregate>: Send + Sync + 'static {
    /// The projection's name: its checkpoint key, and what `vigil replay --projection` takes.
    const NAME: &'static str;

    /// The tables this read model writes, and nothing else does: a replay empties them, and
    /// [`crate::checksums`] compares them.
    const TABLES: &'static [&'static str];

    /// Whether some writer applies events to this read model in the transaction that appends
    /// them and marks them `projected` there (placement does, for incidents), so that the tail,
    /// looking for what a command path missed, passes over them. The mark names no read model:
    /// at most one read model of an aggregate type may say so.
    const PROJECTED_BY_WRITERS: bool = false;

    /// The last event sequence each aggregate's read row reflects, read in one query; an
    /// aggregate without a read row is left out (it counts as version 0).
    fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> impl std::future::Future<Output = Result<HashMap<String, i64>, ProjectionError>> + Send;

    /// The last event sequence of `aggregate_id` the read side reflects (0 when it has none).
    fn version(
        &self,
        conn: &mut PgConnection,
        aggregate_id: &str,
    ) -> impl std::future::Future<Output = Result<i64, ProjectionError>> + Send {
        async move {
            let versions = self.versions(conn, &[aggregate_id]).await?;
            Ok(versions.get(aggregate_id).copied().unwrap_or(0))
        }
    }

    /// Applies one event. The projector guarantees `event.sequence` is the version plus one.
    fn apply(
        &self,
        conn: &mut PgConnection,
        event: &EventEnvelope<A>,
    ) -> impl std::future::Future<Output = Result<(), ProjectionError>> + Send;

    /// Applies consecutive events of one aggregate, in order. A read model may write a run of
    /// them together; the result must equal applying them one by one.
    fn apply_all(
        &self,
        conn: &mut PgConnection,
        events: &[&EventEnvelope<A>],
    ) -> impl std::future::Future<Output = Result<(), ProjectionError>> + Send {
        async move {
            for event in events {
                self.apply(conn, event).await?;
            }
            Ok(())
        }
    }

    /// Applies the pending events of several aggregates (each run consecutive and in order, no
    /// aggregate twice). A read model may write across aggregates together; the result must
    /// equal applying each run with [`Self::apply_all`].
    fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<A>>],
    ) -> impl std::future::Future<Output = Result<(), ProjectionError>> + Send {
        async move {
            for run in runs {
                self.apply_all(conn, run).await?;
            }
            Ok(())
        }
    }

    /// [`Self::apply_runs`] for events read from the store, whose positions there are known:
    /// `positions` holds them in the order of `runs` flattened. A read model that keys rows by
    /// position takes them from here rather than reading them again.
    fn apply_runs_at(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<A>>],
        positions: &[i64],
    ) -> impl std::future::Future<Output = Result<(), ProjectionError>> + Send {
        let _ = positions;
        self.apply_runs(conn, runs)
    }

    /// Empties the read tables (before a replay).
    fn truncate(
        &self,
        conn: &mut PgConnection,
    ) -> impl std::future::Future<Output = Result<(), ProjectionError>> + Send {
        async move {
            sqlx::query(&format!("TRUNCATE {}", Self::TABLES.join(", ")))
                .execute(conn)
                .await?;
            Ok(())
        }
    }
}

/// Applies events to a [`ReadModel`] exactly once and in order, whoever delivers them: the
/// command path (as a cqrs-es `Query`) or the tail. Each aggregate is locked while its events are
/// applied; events already reflected are skipped; a gap (the read row is missing or behind) is
/// filled from the event store before the new events are applied.
pub struct Projector<A, R> {
    pool: PgPool,
    read_model: R,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A: Aggregate, R: ReadModel<A>> Projector<A, R> {
    pub fn new(pool: PgPool, read_model: R) -> Self {
        Self {
            pool,
            read_model,
            _aggregate: PhantomData,
        }
    }

    pub async fn project(&self, aggregate_id: &str, events: &[EventEnvelope<A>]) -> Result<(), ProjectionError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        self.project_in(&mut tx, aggregate_id, events).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Self::project`] inside the caller's transaction, so that a writer can commit its events
    /// and their read rows at once.
    pub async fn project_in(
        &self,
        conn: &mut PgConnection,
        aggregate_id: &str,
        events: &[EventEnvelope<A>],
    ) -> Result<(), ProjectionError> {
        let Some(last) = events.last().map(|event| event.sequence as i64) else {
            return Ok(());
        };
        // A read row's version only grows, so events it already reflects need no lock: the tail
        // passes over what the command path projected without queueing behind its writers.
        if last <= self.read_model.version(conn, aggregate_id).await? {
            return Ok(());
        }
        sqlx::query(concat!(
            "SELECT pg_advisory_xact_lock(",
            crate::scoped_lock_key!("$1"),
            ")"
        ))
        .bind(format!("{}/{aggregate_id}", R::NAME))
        .execute(&mut *conn)
        .await?;
        let version = self.read_model.version(conn, aggregate_id).await?;
        if last <= version {
            return Ok(());
        }
        let unseen: Vec<&EventEnvelope<A>> = events.iter().filter(|event| event.sequence as i64 > version).collect();
        let loaded;
        let pending: Vec<&EventEnvelope<A>> = if unseen.first().is_some_and(|e| e.sequence as i64 == version + 1) {
            unseen
        } else {
            loaded = load_stream::<A>(conn, aggregate_id, version + 1, last).await?;
            loaded.iter().collect()
        };
        self.read_model.apply_all(conn, &pending).await
    }

    /// Projects events that the caller's transaction has just appended to several aggregates,
    /// in a fixed number of statements however many aggregates there are (a batch writer's path).
    ///
    /// An aggregate's stream starting at sequence 1 is new: no other transaction can see its
    /// events, so it needs neither lock nor version. So is one whose appended events follow
    /// straight on from the read model's version as the caller's transaction read it before
    /// appending (`seen`): every earlier event was projected then, and a later one that another
    /// transaction could project would have taken a sequence this append uses (the append would
    /// have failed). The others are locked together, in one order everywhere, and their
    /// versions read at once.
    pub async fn project_appended_in(
        &self,
        conn: &mut PgConnection,
        streams: &[(String, Vec<EventEnvelope<A>>)],
        seen: &HashMap<String, i64>,
    ) -> Result<(), ProjectionError> {
        // The version each stream's read row is at: known for new streams and those that
        // continue from `seen`; read under the projection's lock for the others.
        let mut versions = HashMap::new();
        let mut existing = Vec::new();
        for (aggregate_id, events) in streams {
            let Some(first) = events.first() else { continue };
            let follows = first.sequence as i64 - 1;
            if first.sequence == 1 || seen.get(aggregate_id) == Some(&follows) {
                versions.insert(aggregate_id.clone(), follows);
            } else {
                existing.push(aggregate_id.as_str());
            }
        }
        if !existing.is_empty() {
            lock_aggregates(conn, R::NAME, &existing).await?;
            versions.extend(self.read_model.versions(conn, &existing).await?);
        }
        // Events between a lagging read row and the appended ones.
        let mut gaps: HashMap<&str, Vec<EventEnvelope<A>>> = HashMap::new();
        for (aggregate_id, events) in streams {
            let Some(first) = events.first() else { continue };
            let version = versions.get(aggregate_id).copied().unwrap_or(0);
            if first.sequence as i64 > version + 1 {
                let missing = load_stream::<A>(conn, aggregate_id, version + 1, first.sequence as i64 - 1).await?;
                gaps.insert(aggregate_id, missing);
            }
        }
        let runs: Vec<Vec<&EventEnvelope<A>>> = streams
            .iter()
            .map(|(aggregate_id, events)| {
                let version = versions.get(aggregate_id).copied().unwrap_or(0);
                let gap = gaps.get(aggregate_id.as_str()).into_iter().flatten();
                gap.chain(events.iter().filter(|event| event.sequence as i64 > version))
                    .collect::<Vec<_>>()
            })
            .filter(|run| !run.is_empty())
            .collect();
        self.read_model.apply_runs(conn, &runs).await
    }
}

#[async_trait]
impl<A: Aggregate, R: ReadModel<A>> Query<A> for Projector<A, R> {
    /// Tried again after a failure (a connection cut mid-write, say): the command's caller reads
    /// its own write next, and a read row missing now would answer that a session it has just
    /// created does not exist. Past the retries, the tail applies the events shortly; the
    /// command itself has succeeded.
    async fn dispatch(&self, aggregate_id: &str, events: &[EventEnvelope<A>]) {
        const RETRY_DELAYS: [std::time::Duration; 2] = [
            std::time::Duration::from_millis(10),
            std::time::Duration::from_millis(100),
        ];
        let mut delays = RETRY_DELAYS.iter();
        while let Err(error) = self.project(aggregate_id, events).await {
            let Some(delay) = delays.next() else {
                tracing::warn!(projection = R::NAME, aggregate_id, %error, "projection deferred to the tail");
                return;
            };
            tracing::debug!(projection = R::NAME, aggregate_id, %error, "projection failed; trying again");
            tokio::time::sleep(*delay).await;
        }
    }
}

#[async_trait]
impl<A: Aggregate, R: ReadModel<A>> EventConsumer for Projector<A, R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn aggregate_type(&self) -> &'static str {
        A::TYPE
    }

    /// Most events reached the read side through the command path already, so the tail hands
    /// them over without payloads: one query finds which aggregates are behind, and one more
    /// fetches just the events they miss.
    fn payloads(&self) -> Payloads<'_> {
        Payloads::None
    }

    fn skips_projected(&self) -> bool {
        R::PROJECTED_BY_WRITERS
    }

    fn tables(&self) -> &'static [&'static str] {
        R::TABLES
    }

    /// Applies what the read side misses of a batch in one transaction and a fixed number of
    /// statements, however many aggregates the batch touches: the aggregates behind are locked
    /// together (in one order everywhere, as [`Self::project_appended_in`] does), their versions
    /// read at once, and every event from each one's version on to its last in the batch
    /// fetched in one read, gaps included. A replay, which hands over every event of the store,
    /// goes through here in large batches.
    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut last_in_batch: HashMap<&str, i64> = HashMap::new();
        let mut order = Vec::new();
        for event in events {
            let last = last_in_batch.entry(event.aggregate_id.as_str()).or_insert_with(|| {
                order.push(event.aggregate_id.as_str());
                0
            });
            *last = (*last).max(event.sequence);
        }
        let mut tx = self.pool.begin().await?;
        // Read without the lock first: usually the command path has projected everything.
        let versions = self.read_model.versions(&mut tx, &order).await?;
        let behind: Vec<&str> = order
            .iter()
            .copied()
            .filter(|id| last_in_batch[id] > versions.get(*id).copied().unwrap_or(0))
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        lock_aggregates(&mut tx, R::NAME, &behind).await?;
        let versions = self.read_model.versions(&mut tx, &behind).await?;
        let ranges: Vec<(&str, i64, i64)> = behind
            .iter()
            .map(|id| (*id, versions.get(*id).copied().unwrap_or(0) + 1, last_in_batch[id]))
            .filter(|(_, from, to)| from <= to)
            .collect();
        // The events handed over whole (a replay's) are applied as they are, where they cover
        // what a read row misses; the rest is fetched.
        let mut handed: HashMap<&str, Vec<&StoredEvent>> = HashMap::new();
        for event in events.iter().filter(|event| event.has_payload()) {
            handed.entry(event.aggregate_id.as_str()).or_default().push(event);
        }
        let mut given: HashMap<&str, Vec<&StoredEvent>> = HashMap::new();
        let mut missing = Vec::new();
        for &(aggregate_id, from, to) in &ranges {
            let run: Vec<&StoredEvent> = handed
                .get(aggregate_id)
                .into_iter()
                .flatten()
                .copied()
                .filter(|event| event.sequence >= from)
                .collect();
            if run.first().is_some_and(|event| event.sequence == from) && run.len() as i64 == to - from + 1 {
                given.insert(aggregate_id, run);
            } else {
                missing.push((aggregate_id, from, to));
            }
        }
        let loaded = load_ranges(&mut tx, A::TYPE, &missing).await?;
        for row in &loaded {
            given.entry(row.aggregate_id.as_str()).or_default().push(row);
        }
        let mut envelopes = Vec::with_capacity(ranges.len());
        let mut positions = Vec::with_capacity(events.len());
        for &(aggregate_id, from, to) in &ranges {
            let rows = given.get(aggregate_id).map_or(&[][..], Vec::as_slice);
            if rows.len() as i64 != to - from + 1 {
                return Err(ProjectionError::MissingEvents {
                    aggregate_id: aggregate_id.to_owned(),
                    from,
                    to,
                });
            }
            envelopes.push(
                rows.iter()
                    .map(|row| row.envelope::<A>())
                    .collect::<Result<Vec<_>, _>>()?,
            );
            positions.extend(rows.iter().map(|row| row.global_position));
        }
        let runs: Vec<Vec<&EventEnvelope<A>>> = envelopes.iter().map(|run| run.iter().collect()).collect();
        // Without waiting for the WAL flush: the tail's checkpoint is written after this commit,
        // so a crash that loses this batch loses the checkpoint past it too, and the batch is
        // read again.
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
        self.read_model.apply_runs_at(&mut tx, &runs, &positions).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        let mut conn = self.pool.acquire().await?;
        self.read_model.truncate(&mut conn).await
    }
}

/// The condition "recorded by `$3`" on `events`, by whole transactions: the events one command
/// appends are recorded microseconds apart (`recorded_at` is the clock at each append), and a
/// time between them must not show half of a change no reader ever saw. `$1` is the aggregate
/// type, `$3` the time; `aggregate_ids` says which streams, as the statement does (`= $2`, or
/// `= ANY($2)` for several).
pub(crate) fn recorded_by(aggregate_ids: &str) -> String {
    format!(
        "recorded_at <= $3
         AND transaction_id NOT IN (SELECT later.transaction_id FROM events later
                                    WHERE later.aggregate_type = $1 AND later.aggregate_id {aggregate_ids}
                                      AND later.recorded_at > $3)"
    )
}

/// Applies `read_model` to the events of `aggregate_ids` recorded by `as_of` ([`recorded_by`]),
/// on an empty scratch copy of its table `table`: a temporary table of that
/// name shadows the real one until the caller's transaction `tx` ends. The caller reads the rows
/// as they stood then from it, and rolls back; the rules that fold them are the live
/// projection's own.
pub(crate) async fn project_as_of<A: Aggregate, R: ReadModel<A>>(
    tx: &mut PgConnection,
    read_model: &R,
    table: &str,
    aggregate_ids: &[String],
    as_of: chrono::DateTime<chrono::Utc>,
) -> Result<(), ProjectionError> {
    sqlx::query(&format!(
        "CREATE TEMPORARY TABLE {table} (LIKE public.{table} INCLUDING DEFAULTS) ON COMMIT DROP"
    ))
    .execute(&mut *tx)
    .await?;
    let events: Vec<StoredEvent> = sqlx::query_as(&format!(
        "{} WHERE aggregate_type = $1 AND aggregate_id = ANY($2) AND {}
         ORDER BY aggregate_id, sequence",
        StoredEvent::SELECT,
        recorded_by("= ANY($2)")
    ))
    .bind(A::TYPE)
    .bind(aggregate_ids)
    .bind(as_of)
    .fetch_all(&mut *tx)
    .await?;
    for event in &events {
        read_model.apply(tx, &event.envelope::<A>()?).await?;
    }
    Ok(())
}

/// Every event of one aggregate, oldest first, read on the caller's connection (inside its
/// transaction, for a writer that decides from them).
pub async fn load_all<A: Aggregate>(
    conn: &mut PgConnection,
    aggregate_id: &str,
) -> Result<Vec<EventEnvelope<A>>, ProjectionError> {
    let rows: Vec<StoredEvent> = sqlx::query_as(&format!(
        "{} WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY sequence",
        StoredEvent::SELECT
    ))
    .bind(A::TYPE)
    .bind(aggregate_id)
    .fetch_all(conn)
    .await?;
    rows.iter().map(StoredEvent::envelope).collect()
}

/// Takes the projection's locks on several aggregates, in one order everywhere (two writers
/// locking overlapping sets in different orders could deadlock).
async fn lock_aggregates(
    conn: &mut PgConnection,
    projection: &str,
    aggregate_ids: &[&str],
) -> Result<(), ProjectionError> {
    sqlx::query(concat!(
        "SELECT pg_advisory_xact_lock(key)
         FROM (SELECT DISTINCT ",
        crate::scoped_lock_key!("$1 || '/' || id"),
        " AS key FROM unnest($2::text[]) AS id ORDER BY key) keys"
    ))
    .bind(projection)
    .bind(aggregate_ids)
    .execute(conn)
    .await?;
    Ok(())
}

/// The events of several aggregates, each from one sequence to another (`(id, from, to)`), in one
/// read by the store's primary key; ordered by aggregate and sequence. Each range is read on its
/// own (a lateral subquery, kept from being flattened into a join by its `LIMIT`): planned as a
/// join while the store was small, the read became a scan of every event of the type per batch.
pub async fn load_ranges(
    conn: &mut PgConnection,
    aggregate_type: &str,
    ranges: &[(&str, i64, i64)],
) -> Result<Vec<StoredEvent>, ProjectionError> {
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    let mut rows: Vec<StoredEvent> = sqlx::query_as(&format!(
        "SELECT found.* FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS wanted(id, first, last)
         CROSS JOIN LATERAL ({} WHERE aggregate_type = $1 AND aggregate_id = wanted.id
                                AND sequence BETWEEN wanted.first AND wanted.last
                              LIMIT wanted.last - wanted.first + 1) found",
        StoredEvent::SELECT
    ))
    .bind(aggregate_type)
    .bind(ranges.iter().map(|range| range.0).collect::<Vec<_>>())
    .bind(ranges.iter().map(|range| range.1).collect::<Vec<_>>())
    .bind(ranges.iter().map(|range| range.2).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    // Sorted here rather than by the statement, whose plan then stays a walk of the key.
    rows.sort_unstable_by(|a, b| (&a.aggregate_id, a.sequence).cmp(&(&b.aggregate_id, b.sequence)));
    Ok(rows)
}

async fn load_stream<A: Aggregate>(
    conn: &mut PgConnection,
    aggregate_id: &str,
    from: i64,
    to: i64,
) -> Result<Vec<EventEnvelope<A>>, ProjectionError> {
    let rows: Vec<StoredEvent> = sqlx::query_as(&format!(
        "{} WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence BETWEEN $3 AND $4 ORDER BY sequence",
        StoredEvent::SELECT
    ))
    .bind(A::TYPE)
    .bind(aggregate_id)
    .bind(from)
    .bind(to)
    .fetch_all(conn)
    .await?;
    if rows.len() as i64 != to - from + 1 {
        return Err(ProjectionError::MissingEvents {
            aggregate_id: aggregate_id.to_owned(),
            from,
            to,
        });
    }
    rows.iter().map(StoredEvent::envelope::<A>).collect()
}

/// [`ReadModel::versions`] for read tables keyed by a UUID: `sql` selects `(id, version)` rows
/// for the ids bound as `$1::uuid[]`. Ids that are not UUIDs have no read row.
///
/// Each id is looked up on its own (a lateral subquery with `LIMIT 1`, which the planner does
/// not flatten into a join), so the plan stays a primary-key probe per id: a connection keeps
/// the generic plan it made while the table was young, and `id = ANY($1)` was planned then as a
/// scan of the whole table, kept as the table grew (seen with `auto_explain`; `query_plans`
/// in the API tests checks every such statement).
pub(crate) async fn versions_by_uuid(
    conn: &mut PgConnection,
    sql: &str,
    aggregate_ids: &[&str],
) -> Result<HashMap<String, i64>, ProjectionError> {
    let ids: Vec<uuid::Uuid> = aggregate_ids
        .iter()
        .filter_map(|id| uuid::Uuid::parse_str(id).ok())
        .collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(uuid::Uuid, i64)> = sqlx::query_as(sql).bind(ids).fetch_all(conn).await?;
    // Keyed by the id as the caller spelled it, which may differ from the canonical form.
    let canonical: HashMap<uuid::Uuid, i64> = rows.into_iter().collect();
    Ok(aggregate_ids
        .iter()
        .filter_map(|id| Some(((*id).to_owned(), *canonical.get(&uuid::Uuid::parse_str(id).ok()?)?)))
        .collect())
}
