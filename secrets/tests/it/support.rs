use std::path::PathBuf;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgPool};

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A database of its own for one test, with this crate's tables; dropped with the value.
pub struct TestDb {
    pub pool: PgPool,
    name: String,
    admin: PgConnectOptions,
}

impl TestDb {
    pub async fn new() -> Self {
        let url = std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
        let admin: PgConnectOptions = url.parse().expect("TEST_DATABASE_URL is a PostgreSQL URL");
        let name = format!("vigil_secrets_test_{}", uuid::Uuid::new_v4().simple());
        let mut connection = admin.connect().await.expect("connect to PostgreSQL");
        connection
            .execute(format!(r#"CREATE DATABASE "{name}""#).as_str())
            .await
            .expect("create the test database");
        connection.close().await.expect("close the admin connection");
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(admin.clone().database(&name))
            .await
            .expect("connect to the test database");
        vigil_secrets::migrate(&pool).await.expect("apply migrations");
        Self { pool, name, admin }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // The test's runtime may be shutting down; drop the database from a runtime of our own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut connection = admin.connect().await?;
                connection
                    .execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
                    .await?;
                connection.close().await
            })?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}

/// A Redis client if a Redis answers at `TEST_REDIS_URL` (default 127.0.0.1:6379), else `None`
/// after printing why the caller skips.
pub async fn redis_client() -> Option<redis::Client> {
    let url = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
    let client = redis::Client::open(url.as_str()).ok()?;
    let ping = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut connection).await
    };
    match tokio::time::timeout(Duration::from_secs(2), ping).await {
        Ok(Ok(_)) => Some(client),
        _ => {
            println!("note: Redis is not reachable at {url}; skipping the Redis part of this test");
            None
        }
    }
}

/// A directory of its own for one test, removed with the value.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("vigil-secrets-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&path).expect("create a temporary directory");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An address nothing listens on.
pub async fn closed_port_url() -> url::Url {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    url::Url::parse(&format!("http://{address}/")).unwrap()
}
