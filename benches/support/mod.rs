//! What the benches that run the service in-process share: their settings from the environment,
//! a scratch database of their own, and the service's configuration for a bench.

use std::str::FromStr;

use sqlx::{postgres::PgConnectOptions, Connection, PgConnection};
use uuid::Uuid;
use vigil::Config;

pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A new database named `{prefix}_{uuid}` on `DATABASE_URL`'s server, with the URL that reaches
/// it and a connection to the server's `postgres` database (to drop it with).
pub async fn scratch_database(prefix: &str) -> (PgConnection, String, reqwest::Url) {
    let server = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin = PgConnectOptions::from_str(&server)
        .expect("DATABASE_URL parses")
        .database("postgres");
    let name = format!("{prefix}_{}", Uuid::new_v4().simple());
    let mut conn = PgConnection::connect_with(&admin).await.expect("PostgreSQL reachable");
    sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
        .execute(&mut conn)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&server).unwrap();
    url.set_path(&format!("/{name}"));
    (conn, name, url)
}

/// The service on `url`, on free ports, without Redis, a model or rate limits.
pub fn bench_config(url: &str, data_dir_prefix: &str) -> Config {
    let mut config = Config::from_env().expect("configuration");
    config.database_url = vigil::config::Secret::new(url);
    config.bind_address = "127.0.0.1".parse().unwrap();
    config.http_port = 0;
    config.ws_port = 0;
    config.redis_url = None;
    config.llm_base_url = None;
    config.rate_limit_per_minute = u32::MAX;
    config.ingest_rate_limit_per_minute = u32::MAX;
    config.data_dir = std::env::temp_dir().join(format!("{data_dir_prefix}-{}", Uuid::new_v4().simple()));
    config
}
