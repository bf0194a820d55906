//! The cache: Redis when `REDIS_URL` is set (shared by every instance), otherwise in-process.
//! The Redis connection is made on first use and remade in the background after a failure, so
//! the service starts and reports `cache: unhealthy` while Redis is down instead of refusing to
//! start, and requests meanwhile never wait for Redis.

use std::time::{Duration, Instant};

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub enum Cache {
    Redis(RedisHandle),
    InProcess,
}

impl Cache {
    pub fn new(redis_url: Option<&str>, key_prefix: &str) -> anyhow::Result<Self> {
        Ok(match redis_url {
            Some(url) => Self::Redis(RedisHandle::new(url, key_prefix)?),
            None => Self::InProcess,
        })
    }

    /// Confirms the cache answers; the message says which cache it is.
    pub async fn ping(&self) -> anyhow::Result<String> {
        match self {
            Self::Redis(redis) => {
                let pong: String = redis
                    .run(|mut conn| async move { redis::cmd("PING").query_async(&mut conn).await })
                    .await
                    .context("PING")?;
                anyhow::ensure!(pong == "PONG", "unexpected PING answer");
                Ok("Redis answered PING".into())
            }
            Self::InProcess => Ok("in-process cache (REDIS_URL not set)".into()),
        }
    }
}

#[derive(Clone)]
pub struct RedisHandle {
    client: redis::Client,
    link: std::sync::Arc<Mutex<Link>>,
    key_prefix: String,
}

/// The shared connection, or since when Redis has been out of reach.
#[derive(Default)]
struct Link {
    connection: Option<ConnectionManager>,
    down_since: Option<Instant>,
    reconnecting: bool,
}

const REDIS_DOWN: &str = "Redis is unavailable; reconnecting in the background";

/// How long after a failed attempt the next one is made (in the background).
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

impl RedisHandle {
    fn new(url: &str, key_prefix: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("REDIS_URL is not a valid Redis URL")?;
        Ok(Self {
            client,
            link: Default::default(),
            key_prefix: key_prefix.to_owned(),
        })
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    pub fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.key_prefix)
    }

    /// The shared connection. The first use connects (its callers wait for that one attempt);
    /// once Redis has been found out of reach, callers get an error at once, never a wait of
    /// their own for a timeout, and the connection is remade in the background. Waiting for
    /// each request's own attempt serialized the whole API behind a dead Redis, a second each.
    async fn connection(&self) -> anyhow::Result<ConnectionManager> {
        let mut link = self.link.lock().await;
        if let Some(connection) = &link.connection {
            return Ok(connection.clone());
        }
        let Some(down_since) = link.down_since else {
            return match self.connect().await {
                Ok(connection) => {
                    link.connection = Some(connection.clone());
                    Ok(connection)
                }
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "{REDIS_DOWN}");
                    link.down_since = Some(Instant::now());
                    Err(error)
                }
            };
        };
        if !link.reconnecting && down_since.elapsed() >= RECONNECT_PAUSE {
            link.reconnecting = true;
            let handle = self.clone();
            tokio::spawn(async move { handle.reconnect().await });
        }
        anyhow::bail!(
            "Redis is unavailable (since {:.1?} ago; reconnecting)",
            down_since.elapsed()
        )
    }

    /// Runs `command` on the shared connection; a failure that says Redis is out of reach marks
    /// it so (see [`Self::connection`]).
    pub async fn run<T, F, Fut>(&self, command: F) -> anyhow::Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let connection = self.connection().await?;
        command(connection).await.map_err(|error| {
            if error.is_io_error()
                || error.is_timeout()
                || error.is_connection_dropped()
                || error.is_connection_refusal()
            {
                self.mark_down(&error);
            }
            anyhow::Error::from(error)
        })
    }

    fn mark_down(&self, error: &redis::RedisError) {
        let Ok(mut link) = self.link.try_lock() else {
            return; // being connected or marked by someone else right now
        };
        if link.connection.take().is_some() {
            tracing::warn!(%error, "{REDIS_DOWN}");
            link.down_since = Some(Instant::now());
        }
    }

    async fn reconnect(&self) {
        let connected = self.connect().await;
        let mut link = self.link.lock().await;
        link.reconnecting = false;
        match connected {
            Ok(connection) => {
                tracing::info!("Redis is reachable again");
                link.connection = Some(connection);
                link.down_since = None;
            }
            Err(_) => link.down_since = Some(Instant::now()),
        }
    }

    async fn connect(&self) -> anyhow::Result<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT)
            .set_number_of_retries(1);
        tokio::time::timeout(
            CONNECT_TIMEOUT * 2,
            self.client.get_connection_manager_with_config(config),
        )
        .await
        .context("connecting to Redis timed out")?
        .context("connecting to Redis")
    }
}
