use std::time::Duration;

use anyhow::Context;
use sqlx::{migrate::MigrateDatabase, postgres::PgPoolOptions, PgPool, Postgres};

use crate::config::Config;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// A pool that connects lazily, so the service starts (and reports itself unready) while the
/// database is briefly away.
pub fn pool(config: &Config) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(config.database_max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(config.database_url.expose())
        .context("DATABASE_URL is not a valid PostgreSQL URL")
}

pub async fn migrate(db: &PgPool) -> anyhow::Result<()> {
    MIGRATOR.run(db).await.context("applying database migrations")
}

/// Creates the database named in `DATABASE_URL` when the server does not have it yet.
pub async fn create_if_missing(config: &Config) -> anyhow::Result<()> {
    let url = config.database_url.expose();
    if !Postgres::database_exists(url)
        .await
        .context("checking that the database exists")?
    {
        Postgres::create_database(url).await.context("creating the database")?;
        tracing::info!("created the database");
    }
    Ok(())
}
