//! The cache: Redis when `REDIS_URL` is set (shared by every instance), otherwise in-process.
//! The Redis connection is made on first use and remade after a failure, so the service starts
//! and reports `cache: unhealthy` while Redis is down instead of refusing to start.

use std::time::Duration;

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
                let mut conn = redis.connection().await?;
                let pong: String = redis::cmd("PING").query_async(&mut conn).await.context("PING")?;
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
    connection: std::sync::Arc<Mutex<Option<ConnectionManager>>>,
    key_prefix: String,
}

impl RedisHandle {
    fn new(url: &str, key_prefix: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("REDIS_URL is not a valid Redis URL")?;
        Ok(Self {
            client,
            connection: Default::default(),
            key_prefix: key_prefix.to_owned(),
        })
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    pub fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.key_prefix)
    }

    pub async fn connection(&self) -> anyhow::Result<ConnectionManager> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT)
            .set_number_of_retries(1);
        let connection = tokio::time::timeout(
            CONNECT_TIMEOUT * 2,
            self.client.get_connection_manager_with_config(config),
        )
        .await
        .context("connecting to Redis timed out")?
        .context("connecting to Redis")?;
        *slot = Some(connection.clone());
        Ok(connection)
    }
}
