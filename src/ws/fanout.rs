//! A session's messages for every socket following it, on any instance (ARCHITECTURE.md,
//! scale-out). A reply is written by the instance whose socket or worker started it; the other
//! sockets following the session (a second tab, a socket on another instance) get the same
//! messages. Sockets on this instance get them handed over directly; other instances get them
//! through Redis pub/sub, one channel per session, which an instance subscribes to only while one
//! of its sockets follows the session. Without Redis only this instance's sockets are reached.
//!
//! A socket follows the sessions it has sent a query for, for as long as it is connected.

use std::sync::Arc;

use dashmap::DashMap;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::protocol::ServerMessage;
use crate::{
    agent::Outbox,
    cache::{Cache, RedisHandle},
};

/// Messages waiting to be published; a burst beyond this is dropped for other instances (their
/// sockets see a gap; the session itself, saved through the aggregate, is complete).
const PUBLISH_QUEUE: usize = 10_000;

pub struct SessionFanout {
    instance: Uuid,
    followers: DashMap<Uuid, Vec<(Uuid, Outbox)>>,
    redis: Option<RedisRelay>,
}

struct RedisRelay {
    /// The cache's Redis: its reconnecting connection publishes, its client subscribes.
    redis: RedisHandle,
    channel_prefix: String,
    outgoing: mpsc::Sender<(String, String)>,
    /// The live subscription's command half, while connected.
    subscriptions: Mutex<Option<redis::aio::PubSubSink>>,
    /// Taken by [`SessionFanout::run`].
    pending: std::sync::Mutex<Option<mpsc::Receiver<(String, String)>>>,
}

/// What travels between instances: the message, and which instance already delivered it locally.
#[derive(Serialize, Deserialize)]
struct Relayed {
    origin: Uuid,
    session: Uuid,
    message: ServerMessage,
}

impl SessionFanout {
    pub fn new(cache: &Cache) -> Self {
        let redis = match cache {
            Cache::Redis(handle) => {
                let (outgoing, pending) = mpsc::channel(PUBLISH_QUEUE);
                Some(RedisRelay {
                    redis: handle.clone(),
                    channel_prefix: handle.key("session"),
                    outgoing,
                    subscriptions: Mutex::new(None),
                    pending: std::sync::Mutex::new(Some(pending)),
                })
            }
            Cache::InProcess => None,
        };
        Self {
            instance: Uuid::new_v4(),
            followers: DashMap::new(),
            redis,
        }
    }

    /// `connection` (whose client reads `outbox`) follows `session` from now on.
    pub fn follow(self: &Arc<Self>, session: Uuid, connection: Uuid, outbox: &Outbox) {
        let mut followers = self.followers.entry(session).or_default();
        if followers.iter().any(|(id, _)| *id == connection) {
            return;
        }
        followers.push((connection, outbox.clone()));
        if followers.len() == 1 {
            drop(followers);
            self.resubscribe(session);
        }
    }

    /// `connection` is gone: it follows nothing any more.
    pub fn forget(self: &Arc<Self>, connection: Uuid, sessions: impl IntoIterator<Item = Uuid>) {
        for session in sessions {
            let emptied = self
                .followers
                .remove_if_mut(&session, |_, followers| {
                    followers.retain(|(id, _)| *id != connection);
                    followers.is_empty()
                })
                .is_some();
            if emptied {
                self.resubscribe(session);
            }
        }
    }

    /// A message of `session`'s reply, written on this instance: to this instance's other
    /// followers at once (not back to `origin`, the socket that asked), and to other instances.
    pub fn publish(&self, session: Uuid, origin: Option<Uuid>, message: &ServerMessage) {
        self.deliver(session, origin, message);
        let Some(redis) = &self.redis else {
            return;
        };
        let relayed = Relayed {
            origin: self.instance,
            session,
            message: message.clone(),
        };
        let payload = serde_json::to_string(&relayed).expect("server messages serialize");
        let channel = format!("{}:{session}", redis.channel_prefix);
        if redis.outgoing.try_send((channel, payload)).is_err() {
            tracing::warn!(%session, "session fan-out queue is full; other instances miss a message");
        }
    }

    fn deliver(&self, session: Uuid, except: Option<Uuid>, message: &ServerMessage) {
        if let Some(followers) = self.followers.get(&session) {
            for (connection, outbox) in followers.iter() {
                if Some(*connection) != except {
                    outbox.send_relayed(session, message.clone());
                }
            }
        }
    }

    /// Brings the Redis subscription of `session` in line with whether anyone here follows it
    /// (as of when the change runs, so changes that overtake each other still end right).
    fn resubscribe(self: &Arc<Self>, session: Uuid) {
        if self.redis.is_none() {
            return;
        }
        let fanout = self.clone();
        tokio::spawn(async move {
            let redis = fanout.redis.as_ref().expect("checked above");
            let channel = format!("{}:{session}", redis.channel_prefix);
            let mut sink = redis.subscriptions.lock().await;
            let Some(sink) = sink.as_mut() else {
                return; // not connected: the next connection subscribes to what is followed then
            };
            let result = if fanout.followers.contains_key(&session) {
                sink.subscribe(&channel).await
            } else {
                sink.unsubscribe(&channel).await
            };
            if let Err(error) = result {
                tracing::warn!(%error, %session, "session fan-out subscription change failed");
            }
        });
    }

    /// Publishes this instance's messages and delivers other instances' until `shutdown`,
    /// reconnecting to Redis after a failure. Returns at once without Redis.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(redis) = &self.redis else {
            return;
        };
        let Some(mut pending) = redis.pending.lock().expect("not poisoned").take() else {
            return; // already running
        };
        let publisher = async {
            while let Some((channel, payload)) = pending.recv().await {
                // Redis away: other instances miss this message (the session itself is saved).
                let _: anyhow::Result<i64> = redis
                    .redis
                    .run(|mut connection| async move {
                        redis::cmd("PUBLISH")
                            .arg(&channel)
                            .arg(&payload)
                            .query_async(&mut connection)
                            .await
                    })
                    .await;
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = publisher => {}
            _ = self.subscribe_loop(redis) => {}
        }
    }

    async fn subscribe_loop(&self, redis: &RedisRelay) {
        loop {
            match redis.redis.client().get_async_pubsub().await {
                Ok(pubsub) => {
                    let (mut sink, mut stream) = pubsub.split();
                    let followed: Vec<Uuid> = self.followers.iter().map(|entry| *entry.key()).collect();
                    for session in followed {
                        let _ = sink.subscribe(format!("{}:{session}", redis.channel_prefix)).await;
                    }
                    *redis.subscriptions.lock().await = Some(sink);
                    while let Some(message) = stream.next().await {
                        let Ok(relayed) = serde_json::from_slice::<Relayed>(message.get_payload_bytes()) else {
                            continue;
                        };
                        if relayed.origin != self.instance {
                            self.deliver(relayed.session, None, &relayed.message);
                        }
                    }
                    *redis.subscriptions.lock().await = None;
                    tracing::warn!("session fan-out subscription ended; reconnecting");
                }
                Err(error) => tracing::warn!(%error, "session fan-out cannot subscribe; retrying"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}
