//! Per-user generations: how many times a user's definitions of one kind (silences, grouping
//! rules) changed, projected with them, so that ingestion reads one number per user per batch
//! and reads the definitions again only when it moved.

use sqlx::PgConnection;

/// Counts one more change for the owner of `aggregate_id`'s row in `rows`. The projector applies
/// an event once (it skips what the read row's version shows), so the count is of events, and a
/// replay counts the same. The table names are the caller's constants, never input.
pub(crate) async fn bump(
    conn: &mut PgConnection,
    generations: &'static str,
    rows: &'static str,
    aggregate_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(&format!(
        "INSERT INTO {generations} (user_id, generation)
         SELECT user_id, 1 FROM {rows} WHERE id = $1::uuid
         ON CONFLICT (user_id) DO UPDATE SET generation = {generations}.generation + 1"
    ))
    .bind(aggregate_id)
    .execute(conn)
    .await?;
    Ok(())
}
