//! Online rebuild (blue/green): read tables rebuilt from the event store beside the live ones,
//! in a schema of their own, while the service keeps serving and writing; kept current by their
//! own tails; then switched in, in one short transaction that renames them into the live schema.
//! Readers never see an empty or half-built table, and a rebuild that dies before its switch
//! leaves the live tables as they were. The design: docs/event-sourcing.md ("Online rebuild").

use std::{sync::Arc, time::Duration};

use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

use crate::{tail::Tail, EventConsumer, ProjectionError, ProjectionProgress, ReplayProgress};

/// Where the rebuilt tables are written until the switch.
pub const SCHEMA: &str = "vigil_rebuild";
/// Where the switch moves the tables it replaces, until they are dropped.
const RETIRED: &str = "vigil_retired";
const LIVE: &str = "public";
/// How long the switch waits for the live tables' locks before it lets go and tries again:
/// readers queue behind a waiting lock request, so a long wait would stall them all.
const SWITCH_LOCK_TIMEOUT: &str = "200ms";
const SWITCH_ATTEMPTS: u32 = 50;
/// The switch is tried once a catch-up round finds fewer new events than this: what it applies
/// while it holds the live tables' locks is what arrived since.
const SWITCH_WHEN_BEHIND: u64 = 2_000;
/// Catch-up rounds before the switch is tried however far behind the rebuild is.
const CATCH_UP_ROUNDS: u32 = 50;

/// A pool whose connections find the rebuild's tables first and every other table (the event
/// store above all) in the live schema: the consumers built on it write the rebuilt tables with
/// the very statements that write the live ones.
pub fn pool(live: &PgPool) -> PgPool {
    let options = live
        .connect_options()
        .as_ref()
        .clone()
        // A statement of the rebuild that touched a live table the switch holds would otherwise
        // wait for the switch, which waits for it.
        .options([
            ("search_path", format!("{SCHEMA},{LIVE}")),
            ("lock_timeout", "30s".to_owned()),
        ]);
    PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_secs(30))
        .connect_lazy_with(options)
}

/// One table the rebuilt consumers write: all of it, or the rows matching their conditions
/// (from [`EventConsumer::tables`]: `table WHERE condition`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct RebuiltTable {
    name: String,
    /// `None` when the rebuilt consumers own the whole table.
    owned_where: Option<Vec<String>>,
}

fn rebuilt_tables(consumers: &[Arc<dyn EventConsumer>]) -> Vec<RebuiltTable> {
    let mut tables: Vec<RebuiltTable> = Vec::new();
    for item in consumers.iter().flat_map(|consumer| consumer.tables()) {
        let (name, condition) = match item.split_once(" WHERE ") {
            Some((name, condition)) => (name.trim(), Some(condition.trim().to_owned())),
            None => (item.trim(), None),
        };
        let table = match tables.iter_mut().find(|table| table.name == name) {
            Some(table) => table,
            None => {
                tables.push(RebuiltTable {
                    name: name.to_owned(),
                    owned_where: Some(Vec::new()),
                });
                tables.last_mut().expect("just pushed")
            }
        };
        match (condition, &mut table.owned_where) {
            (Some(condition), Some(conditions)) => conditions.push(condition),
            (None, owned) => *owned = None,
            (Some(_), None) => {}
        }
    }
    tables
}

/// Rebuilds the read tables of `consumers` (built on [`pool`]'s `shadow`) while `live` serves,
/// and switches them in. Returns each consumer's name with the events its replay read.
pub async fn rebuild_online(
    live: &PgPool,
    shadow: &PgPool,
    consumers: &[Arc<dyn EventConsumer>],
    progress: &Arc<ReplayProgress>,
) -> Result<Vec<(&'static str, u64)>, ProjectionError> {
    let tables = rebuilt_tables(consumers);
    // One online rebuild at a time: a second would drop the first one's tables under it.
    let mut guard = PgConnection::connect_with(&live.connect_options()).await?;
    let alone: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended('vigil online rebuild', 0))")
        .fetch_one(&mut guard)
        .await?;
    if !alone {
        return Err(ProjectionError::Rebuild(
            "another online rebuild is running against this database".into(),
        ));
    }
    prepare(live, &tables).await?;
    // Stopped however this future ends: dropped (a caller's cancel) as well as returning.
    let publishing = AbortOnDrop(tokio::spawn(publish_progress(live.clone(), progress.clone())));
    let built = build_and_switch(live, shadow, consumers, &tables, progress).await;
    drop(publishing);
    let _ = sqlx::query("DELETE FROM projection_rebuilds").execute(live).await;
    let rebuilt = match built {
        Ok(rebuilt) => rebuilt,
        Err(error) => {
            // The live tables are untouched; what was built beside them goes (a rebuild that
            // died without this leaves it to the next one, which drops it first).
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
                .execute(live)
                .await;
            return Err(error);
        }
    };
    guard.close().await?;
    Ok(rebuilt)
}

async fn build_and_switch(
    live: &PgPool,
    shadow: &PgPool,
    consumers: &[Arc<dyn EventConsumer>],
    tables: &[RebuiltTable],
    progress: &Arc<ReplayProgress>,
) -> Result<Vec<(&'static str, u64)>, ProjectionError> {
    let mut replayed = Vec::new();
    for consumer in consumers {
        let events = crate::tail::replay_observed(shadow, consumer.clone(), progress).await?;
        replayed.push((consumer.name(), events));
    }
    for table in tables {
        sqlx::query(&format!("ANALYZE {SCHEMA}.{}", table.name))
            .execute(shadow)
            .await?;
    }
    let mut rounds = 0;
    while catch_up(shadow, consumers).await? >= SWITCH_WHEN_BEHIND && rounds < CATCH_UP_ROUNDS {
        rounds += 1;
    }
    let mut attempt = 1;
    let foreign_keys = loop {
        match switch(live, shadow, consumers, tables).await {
            Ok(foreign_keys) => break foreign_keys,
            Err(ProjectionError::Database(error)) if lock_not_available(&error) && attempt < SWITCH_ATTEMPTS => {
                tracing::info!(attempt, "the live tables are busy; the switch tries again");
                attempt += 1;
                catch_up(shadow, consumers).await?;
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(10)))).await;
            }
            Err(error) => return Err(error),
        }
    };
    tracing::info!(attempt, "rebuilt read tables switched in");
    // Checked now, outside the switch: a foreign key made again NOT VALID holds for every new row
    // already, and validating it takes no lock that stops readers or writers.
    for key in &foreign_keys {
        sqlx::query(&format!(
            "ALTER TABLE {LIVE}.{} VALIDATE CONSTRAINT {}",
            key.table, key.name
        ))
        .execute(live)
        .await?;
    }
    for schema in [RETIRED, SCHEMA] {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(live)
            .await?;
    }
    Ok(replayed)
}

/// A fresh rebuild schema: what an earlier rebuild left (it died, or it switched and died before
/// dropping the tables it replaced) is dropped; each table is made again empty, with the live
/// one's columns, defaults, constraints and indexes under the same names (so that statements
/// naming a constraint, and later migrations, find them after the switch).
async fn prepare(live: &PgPool, tables: &[RebuiltTable]) -> Result<(), ProjectionError> {
    let mut conn = live.acquire().await?;
    let mut tx = conn.begin().await?;
    for statement in [
        format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"),
        format!("DROP SCHEMA IF EXISTS {RETIRED} CASCADE"),
        format!("CREATE SCHEMA {SCHEMA}"),
        // The rebuild's own checkpoints: its tails read from where they are, not the live ones.
        format!(
            "CREATE TABLE {SCHEMA}.event_consumer_checkpoints (LIKE {LIVE}.event_consumer_checkpoints INCLUDING ALL)"
        ),
    ] {
        sqlx::query(&statement).execute(&mut *tx).await?;
    }
    for table in tables {
        let live_table = format!("{LIVE}.{}", table.name);
        let triggers: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal")
                .bind(&live_table)
                .fetch_one(&mut *tx)
                .await?;
        if triggers > 0 {
            return Err(ProjectionError::Rebuild(format!(
                "{live_table} has triggers, which an online rebuild would not carry over; rebuild offline"
            )));
        }
        sqlx::query(&format!(
            "CREATE TABLE {SCHEMA}.{name} (LIKE {live_table} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING IDENTITY
             INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS)",
            name = table.name
        ))
        .execute(&mut *tx)
        .await?;
        let constraints: Vec<(String, String)> = sqlx::query_as(
            "SELECT quote_ident(conname), pg_get_constraintdef(oid) FROM pg_constraint
             WHERE conrelid = $1::regclass AND contype IN ('p', 'u', 'c', 'x') ORDER BY contype, conname",
        )
        .bind(&live_table)
        .fetch_all(&mut *tx)
        .await?;
        for (name, definition) in constraints {
            sqlx::query(&format!(
                "ALTER TABLE {SCHEMA}.{table} ADD CONSTRAINT {name} {definition}",
                table = table.name
            ))
            .execute(&mut *tx)
            .await?;
        }
        let indexes: Vec<String> = sqlx::query_scalar(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
             WHERE i.indrelid = $1::regclass
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
        )
        .bind(&live_table)
        .fetch_all(&mut *tx)
        .await?;
        for definition in indexes {
            let on_live = format!(" ON {live_table} ");
            if !definition.contains(&on_live) {
                return Err(ProjectionError::Rebuild(format!(
                    "an index of {live_table} reads `{definition}`, which the rebuild cannot copy"
                )));
            }
            let on_rebuilt = format!(" ON {SCHEMA}.{} ", table.name);
            sqlx::query(&definition.replacen(&on_live, &on_rebuilt, 1))
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

impl Tail {
    /// The tail of a consumer whose read tables are being rebuilt: it reads every event, those
    /// marked `projected` too (the writers that marked them wrote the live tables, not these),
    /// in replay-sized batches.
    fn rebuilding(pool: PgPool, consumer: Arc<dyn EventConsumer>) -> Self {
        Self {
            includes_projected: true,
            batch_size: crate::tail::REPLAY_BATCH,
            ..Self::new(pool, consumer)
        }
    }

    /// Hands over every committed event after the checkpoint, those past the safe horizon too,
    /// without moving the checkpoint: the tail will read those again, and the consumer skips
    /// what it has applied. An online rebuild's switch does this while no writer can touch the
    /// live tables, so that the rebuilt ones hold every event the live ones do.
    async fn sweep(&self) -> Result<u64, ProjectionError> {
        let mut conn = self.pool.acquire().await?;
        let mut after = self.checkpoint().await?;
        let mut handed_over = 0;
        loop {
            let events: Vec<crate::StoredEvent> =
                sqlx::query_as(&self.read_statement("($2::bigint::text::xid8, $3)", "$4", false))
                    .bind(self.consumer.aggregate_type())
                    .bind(after.0)
                    .bind(after.1)
                    .bind(self.batch_size)
                    .fetch_all(&mut *conn)
                    .await?;
            let Some(last) = events.last() else {
                return Ok(handed_over);
            };
            after = (last.transaction_id, last.global_position);
            self.consumer.consume(&events).await?;
            handed_over += events.len() as u64;
        }
    }
}

/// Applies to the rebuilt tables what was appended since their replay; returns how much.
async fn catch_up(shadow: &PgPool, consumers: &[Arc<dyn EventConsumer>]) -> Result<u64, ProjectionError> {
    let mut handed_over = 0;
    for consumer in consumers {
        handed_over += Tail::rebuilding(shadow.clone(), consumer.clone()).catch_up().await?;
    }
    Ok(handed_over)
}

/// A foreign key that touches a rebuilt table, made again on the table that replaces it.
struct ForeignKey {
    table: String,
    name: String,
    definition: String,
    /// On a table the rebuild does not replace (it refers to one it does).
    on_kept_table: bool,
}

/// The switch, in one transaction: it waits for the live tails of the rebuilt consumers to finish
/// their rounds and holds them off; locks the live tables (every writer and reader of them waits
/// from here to the commit); applies what was appended since the last catch-up, also what
/// writers that project in their own transaction (placement) committed past the safe horizon;
/// copies the rows of shared tables that other writers own; hands the rebuilt tables'
/// checkpoints to the live tails; and renames the rebuilt tables into the live schema, the live
/// ones out of it. A statement of the service that waited for a lock finds the new table by its
/// name. Gives back the foreign keys it made again, to be validated after the commit.
async fn switch(
    live: &PgPool,
    shadow: &PgPool,
    consumers: &[Arc<dyn EventConsumer>],
    tables: &[RebuiltTable],
) -> Result<Vec<ForeignKey>, ProjectionError> {
    let names: Vec<&str> = consumers.iter().map(|consumer| consumer.name()).collect();
    let live_tables: Vec<String> = tables.iter().map(|table| format!("{LIVE}.{}", table.name)).collect();
    let mut conn = live.acquire().await?;
    let mut tx = conn.begin().await?;
    sqlx::query(&format!("SET LOCAL lock_timeout = '{SWITCH_LOCK_TIMEOUT}'"))
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!("SET LOCAL search_path = {LIVE}"))
        .execute(&mut *tx)
        .await?;
    sqlx::query(concat!(
        "SELECT pg_advisory_xact_lock(",
        crate::scoped_lock_key!("'event-consumer/' || name"),
        ") FROM unnest($1::text[]) AS name"
    ))
    .bind(&names)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        live_tables.join(", ")
    ))
    .execute(&mut *tx)
    .await?;
    for consumer in consumers {
        let tail = Tail::rebuilding(shadow.clone(), consumer.clone());
        tail.catch_up().await?;
        tail.sweep().await?;
    }
    for table in tables {
        let Some(conditions) = &table.owned_where else { continue };
        sqlx::query(&format!(
            "INSERT INTO {SCHEMA}.{name} OVERRIDING SYSTEM VALUE SELECT * FROM {LIVE}.{name} WHERE (({owned})) IS NOT TRUE",
            name = table.name,
            owned = conditions.join(") OR (")
        ))
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(&format!(
        "INSERT INTO {LIVE}.event_consumer_checkpoints (name, transaction_id, global_position, updated_at)
         SELECT name, transaction_id, global_position, updated_at FROM {SCHEMA}.event_consumer_checkpoints
         WHERE name = ANY($1)
         ON CONFLICT (name) DO UPDATE SET transaction_id = EXCLUDED.transaction_id,
             global_position = EXCLUDED.global_position, updated_at = EXCLUDED.updated_at"
    ))
    .bind(&names)
    .execute(&mut *tx)
    .await?;
    let foreign_keys: Vec<ForeignKey> = sqlx::query_as::<_, (String, String, String, bool)>(
        "SELECT quote_ident(t.relname), quote_ident(c.conname), pg_get_constraintdef(c.oid),
                NOT (c.conrelid = ANY($1::text[]::regclass[]))
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
         WHERE c.contype = 'f'
           AND (c.conrelid = ANY($1::text[]::regclass[]) OR c.confrelid = ANY($1::text[]::regclass[]))",
    )
    .bind(&live_tables)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|(table, name, definition, on_kept_table)| ForeignKey {
        table,
        name,
        definition,
        on_kept_table,
    })
    .collect();
    let owned_sequences: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT quote_ident(s.relname), quote_ident(t.relname), quote_ident(a.attname)
         FROM pg_depend d
         JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
         JOIN pg_class t ON t.oid = d.refobjid
         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
         WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'a' AND t.oid = ANY($1::text[]::regclass[])",
    )
    .bind(&live_tables)
    .fetch_all(&mut *tx)
    .await?;
    let mut statements = vec![format!("CREATE SCHEMA {RETIRED}")];
    for key in foreign_keys.iter().filter(|key| key.on_kept_table) {
        statements.push(format!("ALTER TABLE {LIVE}.{} DROP CONSTRAINT {}", key.table, key.name));
    }
    for table in tables {
        statements.push(format!("ALTER TABLE {LIVE}.{} SET SCHEMA {RETIRED}", table.name));
        statements.push(format!("ALTER TABLE {SCHEMA}.{} SET SCHEMA {LIVE}", table.name));
    }
    // A serial column's sequence moved out with the replaced table; the new table's default
    // names the same sequence, which now follows the new table.
    for (sequence, table, column) in &owned_sequences {
        statements.push(format!("ALTER SEQUENCE {RETIRED}.{sequence} OWNED BY NONE"));
        statements.push(format!("ALTER SEQUENCE {RETIRED}.{sequence} SET SCHEMA {LIVE}"));
        statements.push(format!(
            "ALTER SEQUENCE {LIVE}.{sequence} OWNED BY {LIVE}.{table}.{column}"
        ));
    }
    for key in &foreign_keys {
        statements.push(format!(
            "ALTER TABLE {LIVE}.{} ADD CONSTRAINT {} {} NOT VALID",
            key.table, key.name, key.definition
        ));
    }
    for statement in statements {
        sqlx::query(&statement).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(foreign_keys)
}

/// How often the rebuild's progress is written for the service's `/metrics`.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// A progress row written longer ago than this belongs to a rebuild that died.
const PUBLISHED_FRESH: &str = "30 seconds";

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes `progress` to `projection_rebuilds` every [`PUBLISH_EVERY`] until aborted.
async fn publish_progress(live: PgPool, progress: Arc<ReplayProgress>) {
    loop {
        let snapshot = progress.snapshot();
        let written = sqlx::query(
            "INSERT INTO projection_rebuilds (projection, events_done, events_total, updated_at)
             SELECT projection, done, total, now() FROM unnest($1::text[], $2::bigint[], $3::bigint[])
                 AS p(projection, done, total)
             ON CONFLICT (projection) DO UPDATE SET events_done = EXCLUDED.events_done,
                 events_total = EXCLUDED.events_total, updated_at = EXCLUDED.updated_at",
        )
        .bind(snapshot.iter().map(|p| p.projection.as_str()).collect::<Vec<_>>())
        .bind(snapshot.iter().map(|p| p.done as i64).collect::<Vec<_>>())
        .bind(snapshot.iter().map(|p| p.total as i64).collect::<Vec<_>>())
        .execute(&live)
        .await;
        if let Err(error) = written {
            tracing::debug!(%error, "the rebuild's progress was not written");
        }
        tokio::time::sleep(PUBLISH_EVERY).await;
    }
}

/// The progress of an online rebuild running against this database, per projection (none when
/// no rebuild runs).
pub async fn running(pool: &PgPool) -> Result<Vec<ProjectionProgress>, ProjectionError> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
        "SELECT projection, events_done, events_total FROM projection_rebuilds
         WHERE updated_at > now() - interval '{PUBLISHED_FRESH}' ORDER BY projection"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(projection, done, total)| ProjectionProgress {
            projection,
            done: done as u64,
            total: total as u64,
        })
        .collect())
}

/// Whether a statement gave up waiting for a lock (`lock_timeout`).
fn lock_not_available(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .is_some_and(|code| code == "55P03")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_shared_by_conditions_are_owned_by_those_conditions_and_a_plain_name_owns_all() {
        struct Writes(&'static [&'static str]);
        #[async_trait::async_trait]
        impl EventConsumer for Writes {
            fn name(&self) -> &'static str {
                "writes"
            }
            fn aggregate_type(&self) -> &'static str {
                "T"
            }
            fn tables(&self) -> &'static [&'static str] {
                self.0
            }
            async fn consume(&self, _: &[crate::StoredEvent]) -> Result<(), ProjectionError> {
                Ok(())
            }
            async fn reset(&self) -> Result<(), ProjectionError> {
                Ok(())
            }
        }
        let consumers: Vec<Arc<dyn EventConsumer>> = vec![
            Arc::new(Writes(&["incidents", "inbox WHERE kind = 'a'"])),
            Arc::new(Writes(&["inbox WHERE kind = 'b'", "embeddings WHERE kind = 'x'"])),
            Arc::new(Writes(&["embeddings"])),
        ];
        assert_eq!(
            rebuilt_tables(&consumers),
            vec![
                RebuiltTable {
                    name: "incidents".into(),
                    owned_where: None
                },
                RebuiltTable {
                    name: "inbox".into(),
                    owned_where: Some(vec!["kind = 'a'".into(), "kind = 'b'".into()])
                },
                RebuiltTable {
                    name: "embeddings".into(),
                    owned_where: None
                },
            ]
        );
    }
}
