use sqlx::PgPool;

use crate::{EventConsumer, ProjectionError};

/// One read table's content, as a replay must reproduce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableChecksum {
    /// The `FROM` item ([`EventConsumer::tables`]).
    pub table: &'static str,
    pub rows: i64,
    /// MD5 of every row's text form, in order of that text: equal only when the rows are.
    pub md5: String,
}

/// The checksums of every table `consumers` write: two databases (or one before and after a
/// replay) hold the same read rows exactly when these are equal.
pub async fn checksums(
    pool: &PgPool,
    consumers: &[std::sync::Arc<dyn EventConsumer>],
) -> Result<Vec<TableChecksum>, ProjectionError> {
    let mut sums = Vec::new();
    for table in consumers.iter().flat_map(|consumer| consumer.tables()) {
        let (rows, md5): (i64, String) = sqlx::query_as(&format!(
            "SELECT count(*), md5(COALESCE(string_agg(line, E'\\n' ORDER BY line COLLATE \"C\"), ''))
             FROM (SELECT rows::text AS line FROM (SELECT * FROM {table}) rows) lines"
        ))
        .fetch_one(pool)
        .await?;
        sums.push(TableChecksum { table, rows, md5 });
    }
    Ok(sums)
}
