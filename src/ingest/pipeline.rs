//! Group commit for alert placement. Handlers hand their notification to a lane and wait for its
//! outcome; each lane places whatever has queued up while its previous batch was being written,
//! in one transaction. An idle lane places a lone notification at once (no added latency); under
//! load a batch grows to share one commit among many alerts (a batch's statements cost about the
//! same for one alert as for a hundred). A lane whose last batch held several notifications may
//! let the next one fill for a moment (`linger`, off by default).
//!
//! A user always maps to the same lane, so one user's notifications are placed in arrival order
//! and never by two lanes at once; lanes let different users' batches overlap their round trips.

use std::{
    hash::{Hash, Hasher},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures::FutureExt;
use sqlx::PgConnection;
use tokio::sync::{mpsc, oneshot};

use super::{
    parsers::NormalizedAlert,
    placement::{Notification, Placer},
    service::IngestedAlert,
};
use crate::{error::AppError, vector_store::VectorStore};

/// Notifications a lane queues before `submit` waits (backpressure on an alert storm).
const LANE_QUEUE: usize = 1024;

type Outcome = Result<Vec<IngestedAlert>, AppError>;

struct Submission {
    notification: Notification,
    reply: oneshot::Sender<Reply>,
}

/// The outcome, and the notification handed back to its submitter: freed there, by the thread that
/// allocated it (the allocator frees another thread's block through an atomic list), and off the
/// lane, whose time is every batch's.
type Reply = (Outcome, Notification);

pub struct IngestPipeline {
    lanes: Vec<mpsc::Sender<Submission>>,
    vectors: VectorStore,
    load: LaneLoad,
}

impl IngestPipeline {
    /// Starts `lanes` placement tasks on a thread of their own; they stop when the pipeline is
    /// dropped.
    ///
    /// Each lane holds a connection of its own (see [`LaneConnection`]); their own runtime means
    /// a lane, a chain of round trips, is resumed as soon as a reply arrives rather than behind
    /// the HTTP connections' tasks. (Measured under an alert storm: the same alerts/s as on the
    /// request runtime, p99 slightly lower.)
    pub fn start(placer: Placer, lanes: usize, max_batch_alerts: usize, linger: Duration) -> Self {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..lanes.max(1)).map(|_| mpsc::channel(LANE_QUEUE)).unzip();
        let max_batch_alerts = max_batch_alerts.max(1);
        let vectors = placer.vectors().clone();
        let load = LaneLoad::new(senders.len());
        let lane_load = load.clone();
        std::thread::Builder::new()
            .name("ingest-lanes".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the ingestion lanes' runtime starts");
                runtime.block_on(async move {
                    let placer = Arc::new(placer);
                    let lanes: Vec<_> = receivers
                        .into_iter()
                        .enumerate()
                        .map(|(lane, receiver)| {
                            let busy = lane_load.clone().of_lane(lane);
                            tokio::spawn(run_lane(placer.clone(), receiver, max_batch_alerts, linger, busy))
                        })
                        .collect();
                    for lane in lanes {
                        let _ = lane.await;
                    }
                });
            })
            .expect("the ingestion lanes' thread starts");
        Self {
            lanes: senders,
            vectors,
            load,
        }
    }

    /// How busy the lanes have been lately ([`LaneLoad::busiest_share`]).
    pub fn load(&self) -> LaneLoad {
        self.load.clone()
    }

    /// Places a notification's alerts (`posted`: its text); resolves once they are committed.
    pub async fn submit(&self, user_id: &str, alerts: Vec<NormalizedAlert>, posted: Arc<str>) -> Outcome {
        if alerts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, outcome) = oneshot::channel();
        let submission = Submission {
            notification: Notification::new(user_id.to_owned(), alerts, &posted, &self.vectors),
            reply,
        };
        let stopped = || AppError::Internal(anyhow::anyhow!("the ingestion pipeline has stopped"));
        self.lanes[self.lane_of(user_id)]
            .send(submission)
            .await
            .map_err(|_| stopped())?;
        let (outcome, _notification) = outcome
            .await
            .map_err(|_| AppError::Internal(anyhow::anyhow!("the ingestion lane failed to place this notification")))?;
        outcome
    }

    fn lane_of(&self, user_id: &str) -> usize {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        user_id.hash(&mut hasher);
        (hasher.finish() % self.lanes.len() as u64) as usize
    }
}

async fn run_lane(
    placer: Arc<Placer>,
    mut queue: mpsc::Receiver<Submission>,
    max_batch_alerts: usize,
    linger: Duration,
    load: LaneBusy,
) {
    let mut busy = false;
    let mut conn = LaneConnection::default();
    while let Some(first) = queue.recv().await {
        let mut alerts = first.notification.alerts.len();
        let mut batch = vec![first];
        while alerts < max_batch_alerts {
            let Ok(next) = queue.try_recv() else { break };
            alerts += next.notification.alerts.len();
            batch.push(next);
        }
        if busy && !linger.is_zero() {
            let filled = tokio::time::sleep(linger);
            tokio::pin!(filled);
            while alerts < max_batch_alerts {
                tokio::select! {
                    next = queue.recv() => {
                        let Some(next) = next else { break };
                        alerts += next.notification.alerts.len();
                        batch.push(next);
                    }
                    _ = &mut filled => break,
                }
            }
        }
        busy = batch.len() > 1;
        // A panic placing one batch must not stop every later alert: its senders get an error
        // (their replies are dropped), the connection is dropped with its transaction, and the
        // lane goes on.
        let began = Instant::now();
        let placed = std::panic::AssertUnwindSafe(place(&placer, &mut conn, batch))
            .catch_unwind()
            .await;
        load.add(began.elapsed());
        if placed.is_err() {
            tracing::error!("placing a batch panicked; its notifications were refused and the lane goes on");
            conn = LaneConnection::default();
        }
    }
}

/// The share of recent time the lanes spent placing batches: what tells background work that
/// an alert storm is being placed and the cores are needed here.
#[derive(Clone)]
pub struct LaneLoad(Arc<Load>);

struct Load {
    /// Nanoseconds each lane has spent placing, in all.
    busy: Vec<AtomicU64>,
    last: Mutex<Sample>,
}

/// The busiest lane's share over the last window, and where the window began.
struct Sample {
    at: Instant,
    busy: Vec<u64>,
    share: f64,
}

/// How long a window [`LaneLoad::busiest_share`] measures over.
const LOAD_WINDOW: Duration = Duration::from_millis(250);

impl LaneLoad {
    fn new(lanes: usize) -> Self {
        Self(Arc::new(Load {
            busy: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
            last: Mutex::new(Sample {
                at: Instant::now(),
                busy: vec![0; lanes],
                share: 0.0,
            }),
        }))
    }

    fn of_lane(self, lane: usize) -> LaneBusy {
        LaneBusy { load: self, lane }
    }

    /// The share of its time the busiest lane spent placing over the last completed window of
    /// [`LOAD_WINDOW`] (a storm of one tenant keeps one lane busy, whatever the others do).
    pub fn busiest_share(&self) -> f64 {
        let mut last = self.0.last.lock().expect("lane load lock");
        let elapsed = last.at.elapsed();
        if elapsed >= LOAD_WINDOW {
            let now: Vec<u64> = self.0.busy.iter().map(|busy| busy.load(Ordering::Relaxed)).collect();
            let busiest = now
                .iter()
                .zip(&last.busy)
                .map(|(now, then)| now - then)
                .max()
                .unwrap_or(0);
            last.share = busiest as f64 / elapsed.as_nanos() as f64;
            last.at = Instant::now();
            last.busy = now;
        }
        last.share
    }
}

/// One lane's share of [`LaneLoad`].
struct LaneBusy {
    load: LaneLoad,
    lane: usize,
}

impl LaneBusy {
    fn add(&self, busy: Duration) {
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        self.load.0.busy[self.lane].fetch_add(nanos, Ordering::Relaxed);
    }
}

/// A lane's connection, opened when first needed. A batch that fails on a connection opened
/// before it is placed once more on a new one: the old one may have died meanwhile (the database
/// restarted, an idle connection was cut), and an attempt that fails commits nothing.
#[derive(Default)]
struct LaneConnection(Option<PgConnection>);

impl LaneConnection {
    async fn place(&mut self, placer: &Placer, batch: &[Notification]) -> Result<Vec<Vec<IngestedAlert>>, AppError> {
        if let Some(conn) = &mut self.0 {
            match placer.place(conn, batch).await {
                Ok(outcomes) => return Ok(outcomes),
                Err(error) => tracing::debug!(%error, "placement failed; trying again on a new connection"),
            }
        }
        self.0 = None;
        let conn = self.0.insert(placer.connect().await.map_err(AppError::from)?);
        let placed = placer.place(conn, batch).await;
        if placed.is_err() {
            self.0 = None;
        }
        placed.map_err(AppError::from)
    }
}

/// Places a batch; when it fails as a whole, each notification is placed on its own, so that
/// one notification's failure is never another's.
async fn place(placer: &Placer, conn: &mut LaneConnection, batch: Vec<Submission>) {
    let (notifications, replies): (Vec<Notification>, Vec<oneshot::Sender<Reply>>) =
        batch.into_iter().map(|s| (s.notification, s.reply)).unzip();
    match conn.place(placer, &notifications).await {
        Ok(outcomes) => {
            for ((reply, outcome), notification) in replies.into_iter().zip(outcomes).zip(notifications) {
                // The caller may have gone (client disconnected); its alerts are placed all the same.
                let _ = reply.send((Ok(outcome), notification));
            }
        }
        Err(error) if notifications.len() == 1 => {
            let only = notifications.into_iter().zip(replies).next();
            let (notification, reply) = only.expect("one reply per notification");
            placer.refused(&notification);
            let _ = reply.send((Err(error), notification));
        }
        Err(error) => {
            tracing::warn!(%error, notifications = notifications.len(), "batch placement failed; placing one by one");
            for (notification, reply) in notifications.into_iter().zip(replies) {
                let outcome = conn
                    .place(placer, std::slice::from_ref(&notification))
                    .await
                    .map(|mut outcomes| outcomes.pop().unwrap_or_default());
                if outcome.is_err() {
                    placer.refused(&notification);
                }
                let _ = reply.send((outcome, notification));
            }
        }
    }
}
