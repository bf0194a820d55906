use std::{str::FromStr, time::Duration};

use anyhow::Context;
use sqlx::{
    migrate::MigrateDatabase,
    postgres::{PgConnectOptions, PgPoolOptions, PgSslMode},
    PgPool, Postgres,
};

use crate::config::Config;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// How the service's pooled connections name themselves in `pg_stat_activity` (its ingestion
/// lanes say what they are), so that `vigil replay` can tell that a service is running.
pub const SERVICE_APPLICATION_NAME: &str = "vigil";
/// How the ingestion lanes' own connections name themselves (`pg_stat_activity`).
pub const LANE_APPLICATION_NAME: &str = "vigil ingestion lane";
/// How `vigil replay`'s connections name themselves.
pub const REPLAY_APPLICATION_NAME: &str = "vigil replay";

/// A pool that connects lazily, so the service starts (and reports itself unready) while the
/// database is briefly away. Its connections are named `application_name`.
pub fn pool(config: &Config, application_name: &str) -> anyhow::Result<PgPool> {
    let url = config.database_url.expose();
    let mut options = PgConnectOptions::from_str(url)
        .context("DATABASE_URL is not a valid PostgreSQL URL")?
        .application_name(application_name);
    if plain_on_loopback(url, std::env::var_os("PGSSLMODE").is_some()) {
        options = options.ssl_mode(PgSslMode::Disable);
    }
    Ok(PgPoolOptions::new()
        .max_connections(config.database_max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .after_release(|conn, _| Box::pin(outside_any_transaction(conn)))
        .connect_lazy_with(options))
}

/// Whether a connection coming back to the pool is outside any transaction; one still inside one
/// is closed rather than lent to the next borrower, whose statements would run in it. sqlx 0.8
/// returns such a connection when a future is dropped while its `BEGIN` is in flight (a request
/// past its timeout, a client gone: sqlx issue #4393, fixed upstream after 0.8.6, and seen here in
/// a scale audit as PostgreSQL's "there is already a transaction in progress"). Its own count of
/// open transactions is then zero, so the check asks the server: the first command of a
/// transaction, as this one is outside any, sees `now()` equal to `statement_timestamp()`. Sent
/// as a simple query, whose one command is exactly that.
async fn outside_any_transaction(conn: &mut sqlx::PgConnection) -> sqlx::Result<bool> {
    use sqlx::{Executor, Row};
    let row = conn
        .fetch_one(sqlx::raw_sql("SELECT now() = statement_timestamp()"))
        .await?;
    row.try_get(0)
}

/// Whether connections to `url` skip TLS: when it names a server on this host (loopback or a
/// Unix socket) and neither it nor `PGSSLMODE` asks for a mode. Traffic that never leaves the host
/// gains nothing from encryption, and paid for it on every statement (PostgreSQL's default
/// `prefer` encrypts whenever the server has a certificate, as Debian's has): 7% of an alert
/// storm's throughput. An explicit `sslmode` is always obeyed.
pub fn plain_on_loopback(url: &str, sslmode_in_environment: bool) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    if sslmode_in_environment || parsed.query_pairs().any(|(key, _)| key == "sslmode") {
        return false;
    }
    let socket = parsed
        .query_pairs()
        .any(|(key, value)| key == "host" && value.starts_with('/'));
    // A `postgres:` URL's host is opaque to the URL parser: an IPv4 address comes as a name.
    let loopback = match parsed.host() {
        Some(url::Host::Domain(name)) => {
            name.is_empty()
                || name.eq_ignore_ascii_case("localhost")
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|address| address.is_loopback())
        }
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        None => true,
    };
    socket || loopback
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

/// Connections of a running service (`vigil serve` or `vigil worker`, any instance) to this
/// database, other than the caller's own.
pub async fn service_connections(db: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ANY($1)",
    )
    .bind([SERVICE_APPLICATION_NAME, LANE_APPLICATION_NAME])
    .fetch_one(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::plain_on_loopback;

    #[test]
    fn a_server_on_this_host_is_reached_without_tls_unless_a_mode_is_asked_for() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/vigil",
            "postgres://postgres@localhost/vigil",
            "postgres://postgres@[::1]:5432/vigil",
            "postgres://postgres@127.0.0.2/vigil",
            "postgres:///vigil?host=/var/run/postgresql",
            "postgres:///vigil",
        ] {
            assert!(plain_on_loopback(url, false), "{url}");
        }
        for (url, sslmode_in_environment) in [
            ("postgres://postgres@db.internal:5432/vigil", false),
            ("postgres://postgres@10.0.0.5/vigil", false),
            ("postgres://postgres@127.0.0.1/vigil?sslmode=require", false),
            ("postgres://postgres@127.0.0.1/vigil?sslmode=prefer", false),
            ("postgres://postgres@127.0.0.1/vigil", true),
            ("not a url", false),
        ] {
            assert!(!plain_on_loopback(url, sslmode_in_environment), "{url}");
        }
    }
}
