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

mod fates;
mod noise;
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
    correlation::{
        best_match_in, evidence::Evidence, is_minor_severity, topology::Topology, CandidateIncident, CorrelationConfig,
        Match, NewAlert,
    },
    incident::{Correlation, Incident, IncidentCommand, IncidentError},
    received_alert::{AlertFate, ReceivedAlert, ReceivedAlertCommand, ReceivedAlertError},
};
use vigil_projections::{
    incidents::{CandidateRow, IncidentsReadModel, RowWrites, UserCandidateRow},
    AppendAnnouncer, ProjectionError, Projector, StoredEvent,
};

use super::{
    grouping::RuleCache,
    parsers::{AlertKind, NormalizedAlert, RawPayload},
    service::{alert_evidence, alert_info, event_kind, IngestedAlert},
    silences::SilenceCache,
};
use crate::{
    error::AppError,
    event_store::Actor,
    metrics::{AlertTally, Fate, PhaseClock, PlacementMetrics, PlacementPhase},
    topology::TopologyCache,
    vector_store::VectorStore,
};

use fates::{inbox_entries, received_alert_events, Redelivery};
use noise::{changed_groups, AlertKey, Flaps, GroupKey, RuleGroup};
use statements::{look_up, write_batch, CandidateWindow, EventRow, Writes};

const ACTOR: Actor<'static> = Actor::System("ingestion");
/// What `placement_conflict` raises (the migration `ingestion_cursors`).
const SERIALIZATION_FAILURE: &str = "40001";
/// How often a batch is re-placed after losing a race with another writer of an incident.
const MAX_ATTEMPTS: u32 = 8;

/// One notification's alerts, from one user.
pub struct Notification {
    pub user_id: String,
    pub alerts: Vec<NormalizedAlert>,
    /// What placement needs of each alert (in the order of `alerts`), worked out when the
    /// notification is made, by the task that submits it: a lane places one batch after another,
    /// so whatever is done before is taken off every batch's critical path.
    prepared: Vec<Prepared>,
}

struct Prepared {
    /// The raw payload as JSON text (`source_alerts.payload`), shared by a notification's
    /// alerts that keep it whole.
    raw_json: Arc<str>,
    /// The title's embedding (correlation's semantic score).
    title_embedding: Vec<f32>,
    /// What the alert names, and its keys sorted (correlation's relation score).
    evidence: Evidence,
    evidence_keys: Vec<String>,
}

impl Notification {
    /// Normalizes what the store would otherwise round or refuse: PostgreSQL keeps microseconds,
    /// and the state column 50 characters, so a redelivery must compare equal in both; an index
    /// entry holds at most ~2.7 kB, so an over-long key is kept as its digest (the same key, the
    /// same digest: deduplication and recoveries still match). Titles are embedded with
    /// `vectors`, which must be the placer's. `posted` is the notification's text: the raw
    /// payload of every alert that keeps it whole.
    pub fn new(user_id: String, mut alerts: Vec<NormalizedAlert>, posted: &Arc<str>, vectors: &VectorStore) -> Self {
        for alert in &mut alerts {
            alert.fired_at = chrono::SubsecRound::trunc_subsecs(alert.fired_at, 6);
            alert.state = alert.state.chars().take(50).collect();
            indexable_key(&mut alert.key);
            indexable_key(&mut alert.group_key);
        }
        let prepared = alerts
            .iter_mut()
            .map(|alert| {
                let evidence = alert_evidence(alert);
                Prepared {
                    // A narrowed copy is taken, not cloned: placement needs only its text, and the
                    // tree is freed here, by the task that built it, rather than by the lane.
                    raw_json: match std::mem::replace(&mut alert.raw, RawPayload::Whole) {
                        RawPayload::Whole => posted.clone(),
                        RawPayload::Narrowed(narrowed) => narrowed.to_string().into(),
                    },
                    title_embedding: vectors.embed(&alert.title),
                    evidence_keys: evidence.sorted_keys(),
                    evidence,
                }
            })
            .collect();
        Self {
            user_id,
            alerts,
            prepared,
        }
    }
}

/// The longest key stored as it came (bytes); longer ones are stored as [`indexable_key`]'s digest.
const MAX_STORED_KEY_BYTES: usize = 512;

/// Replaces a key too long for the delivery indexes by `sha256:` and its digest in hex.
fn indexable_key(key: &mut String) {
    use sha2::{Digest, Sha256};
    if key.len() > MAX_STORED_KEY_BYTES {
        *key = format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())));
    }
}

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
            cycles: 4,
            window: chrono::Duration::minutes(30),
        }
    }
}

/// How placement's connections name themselves to the database (`pg_stat_activity`).
pub const LANE_APPLICATION_NAME: &str = "vigil ingestion lane";

/// Incidents [`Placer::known`] keeps at most before it starts over.
const KNOWN_INCIDENTS: usize = 20_000;

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
            .application_name(LANE_APPLICATION_NAME);
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
        loop {
            match self.try_place(conn, batch, &stale, mode).await {
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
                    self.forget(batch);
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
    ) -> Result<Vec<Vec<IngestedAlert>>, Abort> {
        let mut clock = PhaseClock::start();
        let placed = match mode {
            Mode::Fast => self.decide_and_write(conn, batch, stale, mode, &mut clock).await?,
            Mode::Careful => {
                let mut tx = sqlx::Connection::begin_with(conn, begin_locking_users(batch)).await?;
                clock.lap(PlacementPhase::Begin);
                let placed = self.decide_and_write(&mut tx, batch, stale, mode, &mut clock).await?;
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
        let found = look_up(conn, &items, &windows, self.max_correlated(), self.flapping.window).await?;
        let users: Vec<&str> = windows.iter().map(|window| window.0).collect();
        let topologies = self.topologies.for_users(conn, &users).await?;
        let no_topology = Topology::default();
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
        // The first item of each delivery not recorded before places it (with the id reserved
        // for it); later copies in the batch and earlier deliveries only report where it went.
        let mut claimed: HashMap<&Delivery, i64> = HashMap::new();
        let fresh: Vec<Option<i64>> = deliveries
            .iter()
            .zip(&found.deliveries)
            .map(|(delivery, row)| match (row.recorded, claimed.entry(delivery)) {
                (false, std::collections::hash_map::Entry::Vacant(first)) => Some(*first.insert(row.id)),
                _ => None,
            })
            .collect();
        let keyed = |incidents: &mut dyn Iterator<Item = (usize, Uuid)>, part: fn(&NormalizedAlert) -> &str| {
            incidents
                .map(|(index, incident_id)| {
                    let item = &items[index];
                    (
                        (item.user_id, item.alert.source.as_str(), part(item.alert)),
                        incident_id,
                    )
                })
                .collect::<HashMap<(&str, &str, &str), Uuid>>()
        };
        let recoveries = keyed(
            &mut found.group_incidents.iter().map(|&(index, id, _)| (index, id)),
            |alert| alert.group_key.as_str(),
        );
        let holders: HashMap<Occurrence, Uuid> = found
            .key_holders
            .iter()
            .map(|&(index, incident_id)| (items[index].occurrence(), incident_id))
            .collect();
        // Where each key was last placed, kept current through the batch: a new incident a key
        // opens names the one it fired in before.
        let mut last_placed: HashMap<(&str, &str, &str), Uuid> =
            keyed(&mut found.earlier.iter().copied(), |alert| alert.key.as_str());
        let mut versions_seen = found.versions_seen();
        versions_seen.extend(noise::versions_seen(&groups));
        let mut candidates = self.candidates(found.candidates, &windows, stale);
        let mut plan = Plan::default();
        let mut placed_groups: HashMap<(&str, &str, &str), (Uuid, DateTime<Utc>)> = HashMap::new();
        let mut placed_occurrences: HashMap<Occurrence, Uuid> = HashMap::new();
        let mut adopted = HashSet::new();
        for (index, (item, alert_id)) in items.iter().zip(&fresh).enumerate() {
            let alert = item.alert;
            let group = (item.user_id, alert.source.as_str(), alert.group_key.as_str());
            // A deployment's success resolves only a failure that came before it.
            let recovery_target = || {
                placed_groups
                    .get(&group)
                    .filter(|&&(_, fired_at)| alert.kind != AlertKind::Deployment || fired_at <= alert.fired_at)
                    .map(|&(incident_id, _)| incident_id)
                    .or_else(|| recoveries.get(&group).copied())
            };
            let Some(alert_id) = *alert_id else {
                // A recovery recorded while no incident held its alert (it came ahead of its
                // firing), delivered again now that one does: it resolves that incident, once.
                let row = &found.deliveries[index];
                let mut fate = Fate::Deduplicated;
                let mut went_to = row.incident_id;
                if alert.resolved && row.recorded && row.incident_id.is_none() && adopted.insert(row.id) {
                    if let Some(incident_id) = recovery_target() {
                        plan.command(incident_id, item.resolve_alert(row.id));
                        plan.adoptions.push((row.id, incident_id));
                        fate = Fate::Resolved;
                        went_to = Some(incident_id);
                    }
                }
                plan.tally.count(alert.source, fate);
                // Recorded as an inbox entry of its own: one from an earlier batch under an id to
                // be reserved, a copy within this batch under the id reserved for it and unused.
                let redelivery = if row.recorded {
                    Redelivery {
                        index,
                        entry: None,
                        of: row.id,
                        incident_id: went_to,
                    }
                } else {
                    let of = claimed[&deliveries[index]];
                    Redelivery {
                        index,
                        entry: Some(row.id),
                        of,
                        incident_id: plan
                            .placements
                            .iter()
                            .find(|placed| placed.1 == of)
                            .and_then(|placed| placed.2.map(|(id, _)| id)),
                    }
                };
                plan.redelivered.push(redelivery);
                continue;
            };
            let occurrence = item.occurrence();
            let flapping_in = flaps
                .flapping_in(&item.key())
                .filter(|_| alert.kind == AlertKind::Alert);
            let placement = if let (true, Some(incident_id)) = (alert.resolved, flapping_in) {
                plan.flap(item, alert_id, incident_id)
            } else if alert.resolved {
                let incident = recovery_target();
                if let Some(incident_id) = incident {
                    plan.command(incident_id, item.resolve_alert(alert_id));
                    let recoveries = (alert.kind == AlertKind::Alert)
                        .then(|| flaps.recovered(item.key()))
                        .flatten();
                    if let Some(recoveries) = recoveries {
                        plan.command(incident_id, item.mark_flapping(recoveries, self.flapping.window));
                        flaps.flagged(item.key(), incident_id);
                    }
                }
                let fate = if incident.is_some() {
                    Fate::Resolved
                } else {
                    plan.recorded.push(item.record(alert_id, AlertFate::Unmatched));
                    Fate::Unmatched
                };
                plan.tally.count(alert.source, fate);
                incident.map(|incident_id| (incident_id, false))
            } else if let Some(&incident_id) = placed_occurrences.get(&occurrence).or_else(|| holders.get(&occurrence))
            {
                // A state change of an alert an open incident already holds (acknowledged, re-notified).
                plan.tally.count(alert.source, Fate::Updated);
                plan.recorded
                    .push(item.record(alert_id, AlertFate::Updated { incident_id }));
                Some((incident_id, false))
            } else if let Some(silence_ids) = silences.matching(item.user_id, alert) {
                plan.recorded
                    .push(item.record(alert_id, AlertFate::Silenced { silence_ids }));
                plan.tally.count(alert.source, Fate::Silenced);
                None
            } else if let Some(incident_id) = flapping_in {
                plan.flap(item, alert_id, incident_id)
            } else if let Some((rule, key)) = &rule_hits[index] {
                let user_candidates = candidates.entry(item.user_id).or_default();
                let group = groups.entry(key.clone()).or_default();
                let by_rule = rules::ByRule {
                    rule,
                    group,
                    stale,
                    max_correlated: self.correlation.max_alerts_per_incident() as usize,
                    now,
                };
                by_rule.place(&mut plan, user_candidates, item, alert_id, &self.vectors)
            } else {
                let user_candidates = candidates.entry(item.user_id).or_default();
                let new_alert = item.new_alert();
                let topology = topologies.get(item.user_id).map_or(&no_topology, |t| t.as_ref());
                match best_match_in(&new_alert, &user_candidates.scored, &self.correlation, topology) {
                    Some(found) => {
                        let details = user_candidates.details(&found, &item.prepared.evidence);
                        let bridges = found
                            .bridges
                            .iter()
                            .map(|&(index, _)| user_candidates.ids[index])
                            .collect();
                        let (score, strategy) = (found.score.total, found.score.strategy);
                        plan.tally.correlated(alert.source, strategy, score);
                        let incident_id = user_candidates.took_alert(found.index, new_alert);
                        plan.command(
                            incident_id,
                            IncidentCommand::CorrelateAlert {
                                user_id: item.user_id.to_owned(),
                                alert: alert_info(alert_id, alert, &item.prepared.evidence),
                                correlation: Correlation {
                                    strategy: strategy.as_str().to_owned(),
                                    score: score.clamp(0.0, 1.0),
                                    details,
                                },
                                max_correlated_alerts: self.correlation.max_alerts_per_incident() as usize,
                                bridges,
                                at: Utc::now(),
                            },
                        );
                        Some((incident_id, true))
                    }
                    None => {
                        let incident_id = Uuid::new_v4();
                        let key = (item.user_id, alert.source.as_str(), alert.key.as_str());
                        plan.command(
                            incident_id,
                            IncidentCommand::Open {
                                incident_id,
                                user_id: item.user_id.to_owned(),
                                alert: alert_info(alert_id, alert, &item.prepared.evidence),
                                previous_incident_id: last_placed.get(&key).copied(),
                                at: Utc::now(),
                            },
                        );
                        plan.opened.push(incident_id);
                        plan.tally.count(alert.source, Fate::Opened);
                        user_candidates.opened(incident_id, new_alert);
                        Some((incident_id, false))
                    }
                }
            };
            if let (Some((incident_id, _)), false) = (placement, alert.resolved) {
                placed_occurrences.insert(occurrence, incident_id);
                placed_groups.insert(group, (incident_id, alert.fired_at));
                last_placed.insert((item.user_id, alert.source.as_str(), alert.key.as_str()), incident_id);
            }
            plan.placements.push((index, alert_id, placement));
        }
        let (streams, states) = self
            .run_commands(conn, std::mem::take(&mut plan.commands), &plan.opened)
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

    /// Runs each incident's commands through the aggregate, in order, from its current state
    /// (`opened`: the incidents the commands open). Returns the events to append and the
    /// incidents' states after them.
    async fn run_commands(
        &self,
        conn: &mut PgConnection,
        commands: Vec<(Uuid, Vec<IncidentCommand>)>,
        opened: &[Uuid],
    ) -> Result<Commanded, Abort> {
        let opened: HashSet<Uuid> = opened.iter().copied().collect();
        // Taken out rather than cloned: an attempt that does not commit leaves them to be read
        // again from their events.
        let mut current: HashMap<Uuid, (Incident, usize)> = {
            let mut known = self.known.lock().expect("placement cache lock");
            commands
                .iter()
                .filter_map(|(id, _)| Some((*id, known.remove(id)?)))
                .collect()
        };
        let remembered: HashSet<Uuid> = current.keys().copied().collect();
        let unknown: Vec<String> = commands
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !opened.contains(id) && !current.contains_key(id))
            .map(|id| id.to_string())
            .collect();
        if !unknown.is_empty() {
            let stored: Vec<StoredEvent> = sqlx::query_as(&format!(
                "{} WHERE aggregate_type = $1 AND aggregate_id = ANY($2) ORDER BY aggregate_id, sequence",
                StoredEvent::SELECT
            ))
            .bind(Incident::TYPE)
            .bind(&unknown)
            .fetch_all(&mut *conn)
            .await?;
            for event in &stored {
                let envelope = event.envelope::<Incident>()?;
                let Ok(id) = Uuid::parse_str(&envelope.aggregate_id) else {
                    continue;
                };
                let (incident, sequence) = current.entry(id).or_default();
                incident.apply(envelope.payload);
                *sequence = envelope.sequence;
            }
        }
        let metadata = ACTOR.metadata();
        let mut streams = Vec::with_capacity(commands.len());
        for (incident_id, commands) in commands {
            let aggregate_id = incident_id.to_string();
            let (incident, sequence) = current.entry(incident_id).or_default();
            let mut events = Vec::new();
            for command in commands {
                let decided = match incident.decide(command) {
                    Ok(decided) => decided,
                    Err(IncidentError::NotCorrelatable(_)) => {
                        return Err(Abort::StaleCandidate {
                            incident_id,
                            remembered: remembered.contains(&incident_id),
                        })
                    }
                    Err(source) => return Err(Abort::Failed(PlacementError::Refused { incident_id, source })),
                };
                for event in decided {
                    *sequence += 1;
                    incident.apply_event(&event);
                    events.push(EventEnvelope {
                        aggregate_id: aggregate_id.clone(),
                        sequence: *sequence,
                        payload: event,
                        metadata: metadata.clone(),
                    });
                }
            }
            if !events.is_empty() {
                streams.push((aggregate_id, events));
            }
        }
        Ok((streams, current))
    }

    fn remember(&self, states: HashMap<Uuid, (Incident, usize)>) {
        let mut known = self.known.lock().expect("placement cache lock");
        if known.len() + states.len() > KNOWN_INCIDENTS {
            known.clear();
        }
        known.extend(states);
    }

    /// Drops what placement knows of every user's incidents in the batch (another writer got there first).
    fn forget(&self, batch: &[Notification]) {
        let users: HashSet<&str> = batch.iter().map(|n| n.user_id.as_str()).collect();
        let mut known = self.known.lock().expect("placement cache lock");
        known.retain(|_, (incident, _)| !users.contains(incident.user_id()));
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

type Commanded = (
    Vec<(String, Vec<EventEnvelope<Incident>>)>,
    HashMap<Uuid, (Incident, usize)>,
);

struct Item<'a> {
    notification: usize,
    user_id: &'a str,
    alert: &'a NormalizedAlert,
    prepared: &'a Prepared,
}

/// What makes a delivery unique (the `source_alerts_delivery` constraint).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Delivery<'a> {
    user_id: &'a str,
    source_type: &'a str,
    alert_key: &'a str,
    alert_state: &'a str,
    fired_at: DateTime<Utc>,
}

/// An occurrence of an alert: its key and when it fired. The same key firing again (after its
/// recovery, or with its recovery never sent) is a new alert, correlated or opening an incident
/// like any other; only an occurrence's state changes (acknowledged, notified again) stay with the
/// incident that holds it, as they are.
type Occurrence<'a> = (&'a str, &'a str, &'a str, DateTime<Utc>);

impl<'a> Item<'a> {
    fn occurrence(&self) -> Occurrence<'a> {
        (
            self.user_id,
            self.alert.source.as_str(),
            &self.alert.key,
            self.alert.fired_at,
        )
    }

    /// The recovery this item is, as the command that resolves its alert in an incident.
    fn resolve_alert(&self, source_alert_id: i64) -> IncidentCommand {
        IncidentCommand::ResolveAlert {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            source_alert_id,
            at: Utc::now(),
        }
    }

    fn key(&self) -> AlertKey<'a> {
        (self.user_id, self.alert.source.as_str(), &self.alert.key)
    }

    /// A later firing or recovery of this item's flapping key, as the command recording it.
    fn record_flap(&self, source_alert_id: i64) -> IncidentCommand {
        IncidentCommand::RecordFlap {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            source_alert_id,
            resolved: self.alert.resolved,
            fired_at: self.alert.fired_at,
            at: Utc::now(),
        }
    }

    /// This recovery made its key flapping: the `recoveries`th within `window`.
    fn mark_flapping(&self, recoveries: u32, window: chrono::Duration) -> IncidentCommand {
        IncidentCommand::MarkFlapping {
            user_id: self.user_id.to_owned(),
            source_type: self.alert.source.as_str().to_owned(),
            alert_key: self.alert.key.clone(),
            recoveries,
            window_seconds: window.num_seconds(),
            at: Utc::now(),
        }
    }

    /// The alert as the correlator scores it.
    fn new_alert(&self) -> NewAlert {
        let alert = self.alert;
        NewAlert {
            title: alert.title.clone(),
            service: alert.service.clone(),
            fired_at: alert.fired_at,
            kind: event_kind(alert.kind),
            embedding: self.prepared.title_embedding.clone(),
            evidence: self.prepared.evidence_keys.clone(),
            minor: is_minor_severity(alert.severity.as_deref()),
        }
    }

    fn delivery(&self) -> Delivery<'a> {
        Delivery {
            user_id: self.user_id,
            source_type: self.alert.source.as_str(),
            alert_key: &self.alert.key,
            alert_state: &self.alert.state,
            fired_at: self.alert.fired_at,
        }
    }
}

#[derive(Default)]
struct Plan {
    /// Commands per incident, incidents in the order first commanded.
    commands: Vec<(Uuid, Vec<IncidentCommand>)>,
    /// Incidents the batch opens.
    opened: Vec<Uuid>,
    placements: Vec<Placement>,
    /// Recoveries recorded before any incident held their alert (delivered ahead of its firing),
    /// delivered again now that one does: each row's id and the incident it now resolves.
    adoptions: Vec<(i64, Uuid)>,
    /// Fates no incident's events record (silenced, unmatched, updated, redelivered): each
    /// entry's id, and the command recording it on the entry's own stream.
    recorded: Vec<(i64, ReceivedAlertCommand)>,
    /// Deliveries received before (or earlier in the batch), each to be recorded as an entry.
    redelivered: Vec<Redelivery>,
    /// Alerts held by a grouping rule in an earlier batch, released into the incident their
    /// group opened: each delivery's id and that incident.
    released: Vec<(i64, Uuid)>,
    /// Alerts this batch held: each delivery's id and its placement's position in `placements`.
    held_here: HashMap<i64, usize>,
    tally: AlertTally,
}

impl Plan {
    /// A later firing or recovery of a flapping key: recorded on the incident it flaps in, where
    /// it opens, joins and resolves nothing.
    fn flap(&mut self, item: &Item, alert_id: i64, incident_id: Uuid) -> Option<(Uuid, bool)> {
        self.command(incident_id, item.record_flap(alert_id));
        self.tally.count(item.alert.source, Fate::Flapping);
        Some((incident_id, false))
    }

    fn command(&mut self, incident_id: Uuid, command: IncidentCommand) {
        match self.commands.iter_mut().find(|(id, _)| *id == incident_id) {
            Some((_, commands)) => commands.push(command),
            None => self.commands.push((incident_id, vec![command])),
        }
    }
}

/// Item index, its alert id, and the incident it went to (with whether it correlated).
type Placement = (usize, i64, Option<(Uuid, bool)>);

/// One user's open incidents as the correlator scores them, kept current while the batch is
/// placed (counts, services and alert times grow as alerts join; new incidents are added).
#[derive(Default)]
struct Candidates {
    ids: Vec<Uuid>,
    scored: Vec<CandidateIncident>,
}

impl Candidates {
    fn push(&mut self, row: CandidateRow, vectors: &VectorStore) {
        let title = row.alert_title.unwrap_or_default();
        self.ids.push(row.id);
        self.scored.push(CandidateIncident {
            // Computed again rather than read back: an incident's title never changes, the stored
            // vector (`IncidentEmbeddings`) is this one, and it is a few kilobytes of JSON per
            // candidate per batch where computing it takes microseconds.
            embedding: vectors.embed(&title),
            title,
            primary_service: row.alert_service,
            affected_services: row.affected_services,
            alert_times: vec![row.started_at, row.last_alert_at],
            correlated_alert_count: row.correlated_alert_count.max(0) as u32,
            // Kept in byte order by the projection (`COLLATE "C"`): sorted again only if not.
            evidence: if row.evidence.is_sorted() {
                row.evidence
            } else {
                sorted_keys(row.evidence)
            },
        });
    }

    fn opened(&mut self, incident_id: Uuid, alert: NewAlert) {
        self.ids.push(incident_id);
        self.scored.push(CandidateIncident {
            title: alert.title,
            affected_services: alert.service.iter().cloned().collect(),
            primary_service: alert.service,
            alert_times: vec![alert.fired_at, alert.fired_at],
            correlated_alert_count: 0,
            embedding: alert.embedding,
            evidence: alert.evidence,
        });
    }

    /// Folds a correlated alert in as the projection will: one more alert, its service among the
    /// affected ones, its evidence among the incident's, and the latest alert time moved on.
    fn took_alert(&mut self, index: usize, alert: NewAlert) -> Uuid {
        let candidate = &mut self.scored[index];
        candidate.correlated_alert_count += 1;
        if let Some(service) = &alert.service {
            if !candidate.affected_services.contains(service) {
                candidate.affected_services.push(service.clone());
                candidate.affected_services.sort();
            }
        }
        if let Some(last) = candidate.alert_times.last_mut() {
            *last = (*last).max(alert.fired_at);
        }
        let evidence = std::mem::take(&mut candidate.evidence);
        candidate.evidence = merged(evidence, alert.evidence);
        self.ids[index]
    }

    /// The stored `correlation_details` of a match: the score, the entities the alert names, the
    /// runner-up incident and the incidents the alert bridges (merged by `ingest::bridging`).
    fn details(&self, found: &Match, evidence: &Evidence) -> serde_json::Value {
        let mut details = found.score.to_details();
        details["entities"] = serde_json::json!(evidence.entities);
        if let Some((index, total)) = found.runner_up {
            details["runner_up"] = serde_json::json!({ "incident_id": self.ids[index], "total": total });
        }
        if !found.bridges.is_empty() {
            let bridges: Vec<_> = found
                .bridges
                .iter()
                .map(|&(index, total)| serde_json::json!({ "incident_id": self.ids[index], "total": total }))
                .collect();
            details["bridges"] = serde_json::json!(bridges);
        }
        details
    }
}

/// Two sorted, deduplicated key lists as one, in one pass (an incident taking an alert: its
/// thousands of keys are not sorted again).
fn merged(a: Vec<String>, b: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.cmp(y) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    b.next();
                    a.next()
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Sorted and deduplicated, as the correlator looks keys up ([`CandidateIncident::evidence`]).
fn sorted_keys(keys: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut keys: Vec<String> = keys.into_iter().collect();
    keys.sort_unstable();
    keys.dedup();
    keys
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

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn merged_keys_stay_sorted_and_unique() {
        let keys = |list: &[&str]| list.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            merged(keys(&["a", "c", "e"]), keys(&["b", "c", "f"])),
            keys(&["a", "b", "c", "e", "f"])
        );
        assert_eq!(merged(Vec::new(), keys(&["x"])), keys(&["x"]));
        assert_eq!(merged(keys(&["x"]), Vec::new()), keys(&["x"]));
    }
}
