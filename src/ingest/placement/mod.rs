//! Places a batch of notifications (from any number of users) at once: deduplicates each delivery
//! against those recorded before, then attaches a recovery to its incident, or keeps an alert with
//! the incident already holding its key, or correlates it with an open incident, or opens a new
//! one. A resolved or merged incident is never a candidate: a new firing of its alert opens a new
//! incident (unless another open one takes it) that names the incident its key last went to.
//!
//! The decisions are made in memory from set-based reads, the resulting commands run through the
//! Incident aggregate's own rules (`decide`), and their events, read rows and the placements are
//! written with the batch at once. Batching is what makes an alert storm cheap: a commit and its
//! round trips are shared by every alert of the batch. A batch takes two round trips whatever its
//! size, each a statement that commits on its own: every read placement needs (with ids reserved
//! for the new deliveries, the read rows' versions and the users' cursors), and one write of
//! everything (the users' cursors moved on, the new deliveries, each with where it went, the
//! events, the new incidents' rows and the other incidents' updates). Reading an incident's events
//! (when placement has not kept its state) costs one more. A batch with a read row that lags its
//! events, or that lost a race with another instance, takes the careful path: a transaction of
//! five round trips or more ([`Mode`]). The incidents' title embeddings are written by their own
//! consumer of the event tail, off this path.
//!
//! Serialization, so that instances sharing the database never decide for one user at once (100
//! concurrent alerts of one service make one incident): a batch's write requires each of its
//! users' cursors (`ingestion_cursors`) to be where its read found them, and moves them on; a
//! batch overtaken by another is placed again on the careful path, which also takes a
//! transaction-scoped advisory lock on every user of the batch first, so that racing writers take
//! turns. An incident written meanwhile by another path (a PATCH, a merge) surfaces as an
//! event-sequence conflict or a refused correlation; the batch is then re-placed.

mod candidates;
mod commands;
mod decide;
mod fates;
mod item;
mod noise;
mod notification;
mod plan;
mod rules;
mod statements;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, EventEnvelope};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{topology::Topology, CorrelationConfig},
    incident::{Incident, IncidentError},
    received_alert::{ReceivedAlert, ReceivedAlertError},
};
use vigil_projections::{
    incidents::{IncidentsReadModel, RowWrites, UserCandidateRow},
    AppendAnnouncer, ProjectionError, Projector,
};

use super::{
    grouping::RuleCache,
    service::{event_kind, IngestedAlert},
    silences::SilenceCache,
};
use crate::{
    error::AppError,
    event_store::Actor,
    metrics::{AlertTally, PhaseClock, PlacementMetrics, PlacementPhase},
    topology::TopologyCache,
    vector_store::VectorStore,
};

use candidates::Candidates;
use decide::Batch;
use fates::{inbox_entries, received_alert_events};
use item::{Delivery, Item};
use noise::{changed_groups, Flaps, GroupKey, RuleGroup};
pub use notification::Notification;
use plan::Plan;
use statements::{look_up, write_batch, CandidateWindow, EventRow, Writes};

const ACTOR: Actor<'static> = Actor::System("ingestion");
/// What `placement_conflict` raises (the migration `ingestion_cursors`).
const SERIALIZATION_FAILURE: &str = "40001";
/// How often a batch is re-placed after losing a race with another writer of an incident.
const MAX_ATTEMPTS: u32 = 8;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error("incident {incident_id} refused an alert: {source}")]
    Refused { incident_id: Uuid, source: IncidentError },
    #[error("event store: {0}")]
    Serialization(String),
    #[error("a received alert's fate was refused: {0}")]
    FateRefused(#[from] ReceivedAlertError),
    #[error("incidents kept changing while alerts were placed; gave up after {MAX_ATTEMPTS} attempts")]
    Contended,
}

impl From<PlacementError> for AppError {
    fn from(error: PlacementError) -> Self {
        match error {
            // A database out of reach is a 503 that senders retry, as on the rest of the API.
            PlacementError::Database(error) => AppError::from(error),
            other => AppError::unexpected(other),
        }
    }
}

/// Why one attempt at a batch ended without committing.
enum Abort {
    /// Another writer appended to an incident first.
    Conflict,
    /// The incident's read row (or placement's memory of it, when `remembered`) promised it
    /// takes alerts; its events say otherwise.
    StaleCandidate {
        incident_id: Uuid,
        remembered: bool,
    },
    /// The fast path cannot take this batch (see [`Mode`]); the careful one can.
    NeedsCare,
    Failed(PlacementError),
}

impl From<sqlx::Error> for Abort {
    fn from(error: sqlx::Error) -> Self {
        Self::Failed(error.into())
    }
}

impl From<ProjectionError> for Abort {
    fn from(error: ProjectionError) -> Self {
        Self::Failed(error.into())
    }
}

pub struct Placer {
    db: PgPool,
    correlation: std::sync::Arc<CorrelationConfig>,
    vectors: VectorStore,
    projector: Projector<Incident, IncidentsReadModel>,
    announcer: AppendAnnouncer,
    metrics: PlacementMetrics,
    /// Incidents as of their last event committed by placement, so that a batch need not read
    /// their streams again. An entry another writer has passed since is caught when appending
    /// (its next sequence is taken), dropped, and read afresh.
    known: std::sync::Mutex<HashMap<Uuid, (Incident, usize)>>,
    /// The users' service topologies (correlation relates services through them).
    topologies: Arc<TopologyCache>,
    silences: SilenceCache,
    rules: RuleCache,
    flapping: Flapping,
}

/// When an alert key is flapping: `cycles` recoveries within `window`.
#[derive(Clone, Copy, Debug)]
pub struct Flapping {
    pub cycles: u32,
    pub window: chrono::Duration,
}

impl Default for Flapping {
    fn default() -> Self {
        Self {
            cycles: crate::config::DEFAULT_FLAPPING_CYCLES,
            window: chrono::Duration::seconds(crate::config::DEFAULT_FLAPPING_WINDOW_SECS),
        }
    }
}

impl Placer {
    pub fn new(
        db: PgPool,
        correlation: std::sync::Arc<CorrelationConfig>,
        vectors: VectorStore,
        announcer: AppendAnnouncer,
        metrics: PlacementMetrics,
    ) -> Self {
        Self {
            announcer,
            metrics,
            projector: Projector::new(db.clone(), IncidentsReadModel),
            known: Default::default(),
            topologies: Default::default(),
            silences: Default::default(),
            rules: Default::default(),
            flapping: Flapping::default(),
            db,
            correlation,
            vectors,
        }
    }

    /// Shares `topologies` with whoever changes them (the topology API drops a user's entry).
    pub fn with_topologies(mut self, topologies: Arc<TopologyCache>) -> Self {
        self.topologies = topologies;
        self
    }

    pub fn with_flapping(mut self, flapping: Flapping) -> Self {
        self.flapping = flapping;
        self
    }

    /// Counts the alerts of notifications placement refused (their batch failed).
    pub fn refused(&self, notification: &Notification) {
        self.metrics
            .refused(notification.alerts.iter().map(|alert| alert.source));
    }

    /// The vector store whose embeddings placement compares ([`Notification::new`] needs it).
    pub fn vectors(&self) -> &VectorStore {
        &self.vectors
    }

    /// A connection of placement's own, opened with the pool's settings from the runtime that
    /// calls this (a connection's replies wake tasks through the runtime it was opened on).
    ///
    /// Not a pooled one: a pool checks a connection with a round trip when lending it and
    /// another when it comes back, and a placement lane would wait for both on every batch. It
    /// plans as [`LANE_SETTINGS`] says.
    pub async fn connect(&self) -> sqlx::Result<PgConnection> {
        let options = (*self.db.connect_options())
            .clone()
            .application_name(crate::db::LANE_APPLICATION_NAME);
        let mut conn: PgConnection = sqlx::Connection::connect_with(&options).await?;
        sqlx::Executor::execute(&mut conn, LANE_SETTINGS).await?;
        Ok(conn)
    }

    /// Places every alert of every notification; the outcomes are in the notifications' order.
    pub async fn place(
        &self,
        conn: &mut PgConnection,
        batch: &[Notification],
    ) -> Result<Vec<Vec<IngestedAlert>>, PlacementError> {
        let span = tracing::info_span!(
            "placement batch",
            notifications = batch.len(),
            alerts = batch.iter().map(|n| n.alerts.len()).sum::<usize>(),
        );
        tracing::Instrument::instrument(self.place_batch(conn, batch), span).await
    }

    async fn place_batch(
        &self,
        conn: &mut PgConnection,
        batch: &[Notification],
    ) -> Result<Vec<Vec<IngestedAlert>>, PlacementError> {
        let mut stale = HashSet::new();
        let mut conflicts = 0;
        let mut mode = Mode::Fast;
        let mut catch_up = false;
        loop {
            match self.try_place(conn, batch, &stale, mode, catch_up).await {
                Ok(outcomes) => return Ok(outcomes),
                Err(Abort::NeedsCare) => mode = Mode::Careful,
                Err(Abort::StaleCandidate {
                    incident_id,
                    remembered: true,
                }) => {
                    self.known.lock().expect("placement cache lock").remove(&incident_id);
                }
                Err(Abort::StaleCandidate {
                    incident_id,
                    remembered: false,
                }) if stale.len() < 64 => {
                    stale.insert(incident_id);
                }
                Err(Abort::Conflict | Abort::StaleCandidate { .. }) => {
                    catch_up = true;
                    conflicts += 1;
                    if conflicts >= MAX_ATTEMPTS {
                        return Err(PlacementError::Contended);
                    }
                    // Under the users' locks, so that writers racing for the same users take turns.
                    mode = Mode::Careful;
                    let backoff_ms = rand::Rng::random_range(&mut rand::rng(), 1..=5 * u64::from(conflicts));
                    tokio::time::sleep(std::time::Duration::from_millis(backoff_ms)).await;
                }
                Err(Abort::Failed(error)) => return Err(error),
            }
        }
    }

    /// One attempt at the batch: on the fast path, its read and its write (each a statement,
    /// each its own transaction); on the careful path, the same in a transaction that holds the
    /// users' locks from the start, with the read rows projected after the write.
    async fn try_place(
        &self,
        conn: &mut PgConnection,
        batch: &[Notification],
        stale: &HashSet<Uuid>,
        mode: Mode,
        catch_up: bool,
    ) -> Result<Vec<Vec<IngestedAlert>>, Abort> {
        let mut clock = PhaseClock::start();
        let placed = match mode {
            Mode::Fast => {
                self.decide_and_write(conn, batch, stale, mode, catch_up, &mut clock)
                    .await?
            }
            Mode::Careful => {
                let mut tx = sqlx::Connection::begin_with(conn, begin_locking_users(batch)).await?;
                clock.lap(PlacementPhase::Begin);
                let placed = self
                    .decide_and_write(&mut tx, batch, stale, mode, catch_up, &mut clock)
                    .await?;
                tx.commit().await?;
                clock.lap(PlacementPhase::Commit);
                placed
            }
        };
        self.metrics.observe_batch(placed.alerts, &clock, &placed.tally);
        self.announcer.announce(Incident::TYPE);
        if placed.received_alerts {
            self.announcer.announce(ReceivedAlert::TYPE);
        }
        self.remember(placed.states);
        Ok(placed.outcomes)
    }

    /// Reads what the batch needs, decides where each alert goes, and writes it all ([`Mode`]);
    /// on the careful path, in the caller's transaction, which commits it.
    async fn decide_and_write(
        &self,
        conn: &mut PgConnection,
        batch: &[Notification],
        stale: &HashSet<Uuid>,
        mode: Mode,
        catch_up: bool,
        clock: &mut PhaseClock,
    ) -> Result<Placed, Abort> {
        let items: Vec<Item> = batch
            .iter()
            .enumerate()
            .flat_map(|(notification, n)| {
                n.alerts.iter().zip(&n.prepared).map(move |(alert, prepared)| Item {
                    notification,
                    user_id: &n.user_id,
                    alert,
                    prepared,
                })
            })
            .collect();
        let windows = self.candidate_windows(items.iter().filter(|item| !item.alert.resolved));
        let mut found = look_up(conn, &items, &windows, self.max_correlated(), self.flapping.window).await?;
        let users: Vec<&str> = windows.iter().map(|window| window.0).collect();
        let topologies = self.topologies.for_users(conn, &users).await?;
        let _no_topology = Topology::default();
        let now = Utc::now();
        let silences = self.silences.in_force(conn, &found.silences, now).await?;
        let rules = self.rules.in_force(conn, &found.rules).await?;
        // The rule and group each firing alert falls in, and the groups as stored.
        let rule_hits: Vec<_> = items
            .iter()
            .map(|item| {
                let (rule, group) = (!item.alert.resolved)
                    .then(|| rules.matching(item.user_id, item.alert))
                    .flatten()?;
                Some((rule, (item.user_id.to_owned(), rule.id, group)))
            })
            .collect();
        let mut groups: HashMap<GroupKey, RuleGroup> = if rules.is_empty() {
            HashMap::new()
        } else {
            let mut keys: Vec<GroupKey> = rule_hits.iter().flatten().map(|(_, key)| key.clone()).collect();
            keys.sort_unstable();
            keys.dedup();
            noise::read_groups(conn, &keys, self.max_correlated()).await?
        };
        let mut flaps = Flaps::new(
            &found.flaps,
            |index| items[index].key(),
            self.flapping.cycles,
            self.flapping.window,
            now,
        );
        clock.lap(PlacementPhase::Lookup);
        let deliveries: Vec<Delivery> = items.iter().map(Item::delivery).collect();
        let mut versions_seen = found.versions_seen();
        versions_seen.extend(noise::versions_seen(&groups));
        let candidates = self.candidates(std::mem::take(&mut found.candidates), &windows, stale);
        let read = Batch {
            items: &items,
            deliveries: &deliveries,
            found: &found,
            topologies: &topologies,
            silences: &silences,
            rule_hits: &rule_hits,
            stale,
            now,
        };
        let mut plan = self.decide(&read, candidates, &mut groups, &mut flaps);
        let (streams, states) = self
            .run_commands(
                conn,
                std::mem::take(&mut plan.commands),
                &plan.opened,
                &versions_seen,
                catch_up,
            )
            .await?;
        self.record_redeliveries(conn, &items, &mut plan).await?;
        let received = received_alert_events(std::mem::take(&mut plan.recorded))?;
        let groups = changed_groups(&groups);
        clock.lap(PlacementPhase::Decide);
        let runs: Vec<Vec<&EventEnvelope<Incident>>> = match mode {
            Mode::Fast => streams.iter().map(|(_, events)| events.iter().collect()).collect(),
            Mode::Careful => Vec::new(),
        };
        // The fast path writes the read rows itself, from the versions its read found: each
        // incident must be new or follow on from that version, and all its events fold into the
        // row writes.
        let (rows, rest) = RowWrites::split(&runs);
        let rows_follow_reads = || {
            streams.iter().all(|(aggregate_id, events)| {
                events.first().is_none_or(|first| {
                    first.sequence == 1 || versions_seen.get(aggregate_id) == Some(&(first.sequence as i64 - 1))
                })
            })
        };
        if mode == Mode::Fast && !(rest.is_empty() && rows_follow_reads()) {
            return Err(Abort::NeedsCare);
        }
        let inbox = inbox_entries(&items, &plan, &streams, &received, &states);
        let writes = Writes {
            events: &EventRow::all(&streams, &received)?,
            cursors: &found.cursors,
            rows: &rows,
            inbox: &inbox,
            groups: &groups,
        };
        write_batch(conn, &items, &plan, &writes).await?;
        clock.lap(PlacementPhase::Record);
        if mode == Mode::Careful {
            self.projector
                .project_appended_in(conn, &streams, &versions_seen)
                .await?;
            clock.lap(PlacementPhase::Project);
        }
        let placed: HashMap<&Delivery, IngestedAlert> = plan
            .placements
            .iter()
            .map(|&(index, alert_id, placement)| {
                let outcome = IngestedAlert {
                    alert_id,
                    incident_id: placement.map(|(id, _)| id),
                    correlated: placement.is_some_and(|(_, correlated)| correlated),
                };
                (&deliveries[index], outcome)
            })
            .collect();
        let mut outcomes: Vec<Vec<IngestedAlert>> = batch.iter().map(|n| Vec::with_capacity(n.alerts.len())).collect();
        for ((item, delivery), row) in items.iter().zip(&deliveries).zip(&found.deliveries) {
            let outcome = if row.recorded {
                let adopted_by = plan
                    .adoptions
                    .iter()
                    .find(|&&(id, _)| id == row.id)
                    .map(|&(_, incident)| incident);
                IngestedAlert {
                    alert_id: row.id,
                    incident_id: row.incident_id.or(adopted_by),
                    correlated: row.correlated,
                }
            } else {
                placed
                    .get(delivery)
                    .cloned()
                    .ok_or_else(|| sqlx::Error::Protocol("a delivery of the batch was not placed".into()))?
            };
            outcomes[item.notification].push(outcome);
        }
        plan.tally
            .appended(streams.iter().map(|(_, events)| events.len()).sum(), received.len());
        Ok(Placed {
            received_alerts: !received.is_empty(),
            outcomes,
            states,
            alerts: items.len(),
            tally: plan.tally,
        })
    }

    /// For each user of `items`: the span within which open incidents may take their alerts (each
    /// alert reaches as far as its own kind's window: an alert storm need not read the incidents
    /// of the last half hour that only a deployment could still join).
    fn candidate_windows<'a>(&self, items: impl Iterator<Item = &'a Item<'a>>) -> Vec<CandidateWindow<'a>> {
        let mut windows: HashMap<&str, (DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
        for item in items {
            let reach = self.correlation.window_for(event_kind(item.alert.kind));
            let fired = item.alert.fired_at;
            let from = fired.checked_sub_signed(reach).unwrap_or(DateTime::<Utc>::MIN_UTC);
            let to = fired.checked_add_signed(reach).unwrap_or(DateTime::<Utc>::MAX_UTC);
            let window = windows.entry(item.user_id).or_insert((from, to));
            window.0 = window.0.min(from);
            window.1 = window.1.max(to);
        }
        windows.into_iter().map(|(user, (from, to))| (user, from, to)).collect()
    }

    fn max_correlated(&self) -> i32 {
        i32::try_from(self.correlation.max_alerts_per_incident()).unwrap_or(i32::MAX)
    }

    /// Each user's open incidents near the batch's alerts, less those found stale before.
    fn candidates<'a>(
        &self,
        rows: Vec<UserCandidateRow>,
        windows: &[CandidateWindow<'a>],
        stale: &HashSet<Uuid>,
    ) -> HashMap<&'a str, Candidates> {
        let mut candidates: HashMap<&str, Candidates> = HashMap::new();
        for row in rows {
            if stale.contains(&row.candidate.id) {
                continue;
            }
            let Some(&(user, _, _)) = windows.iter().find(|(user, _, _)| *user == row.user_id) else {
                continue;
            };
            candidates.entry(user).or_default().push(row.candidate, &self.vectors);
        }
        candidates
    }
}

/// How an attempt at a batch runs.
///
/// `Fast`: the read (every lookup, in one statement) and the write (the deliveries, the events
/// and the incidents' read rows, in one statement) each commit on their own: two round trips.
/// The users' cursors make it safe: the write goes through only if no batch of these users was
/// placed since the read. It takes a batch whose incidents' read rows are as the read found them
/// (every batch but those of the next paragraph).
///
/// `Careful`: in one transaction that takes the users' locks first, with the read rows projected
/// after the write (a read row behind its events is filled in first): five round trips or more.
/// A batch that lost a race on the fast path is placed again this way, where racing writers take
/// turns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Fast,
    Careful,
}

/// What a written attempt leaves: the outcomes, in the notifications' order; the incidents'
/// states after it, to remember once it is committed; how many alerts it held, and what became
/// of them (counted once it is committed).
struct Placed {
    outcomes: Vec<Vec<IngestedAlert>>,
    /// Whether it appended received alerts' events (fates no incident's event records).
    received_alerts: bool,
    states: HashMap<Uuid, (Incident, usize)>,
    alerts: usize,
    tally: AlertTally,
}

/// `BEGIN`, then a lock on every user of the batch, in one round trip and two statements (a
/// simple query may hold several; the keys are integers, so nothing is spliced in but digits).
/// The locks are taken in one order everywhere (the select list is evaluated in order), so that
/// two batches never deadlock.
fn begin_locking_users(batch: &[Notification]) -> String {
    let keys: std::collections::BTreeSet<i64> = batch.iter().map(|n| user_lock_key(&n.user_id)).collect();
    let locks: Vec<String> = keys.iter().map(|key| format!("pg_advisory_xact_lock({key})")).collect();
    format!("BEGIN; SELECT {}", locks.join(", "))
}

/// How a lane's connection plans: once, for good. The batch's statements are key lookups over
/// arrays of parameters, whose best plan does not depend on the values: a generic plan spares
/// PostgreSQL planning each of them on every batch (a quarter of its time under an alert storm,
/// measured with `log_min_duration_statement`). A generic plan is made once per connection,
/// though, from the statistics of that moment, and kept: made while the tables were young, it
/// scanned them whole and went on doing so as they grew (seen with `auto_explain`). Every join
/// here looks items up by key, so only nested loops over index scans are allowed, whatever the
/// statistics say. Set for the session (the connection is the lane's alone), not per batch.
const LANE_SETTINGS: &str = "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; \
                             SET enable_hashjoin = off; SET enable_mergejoin = off";

/// The advisory lock key that serializes placement for one user (across instances).
fn user_lock_key(user_id: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("ingest/{user_id}").as_bytes());
    i64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 digest has 8 bytes to spare"))
}
