//! The cqrs-es frameworks over the PostgreSQL event store, the projections they feed, and the
//! command retry every write path shares.

use std::{collections::HashMap, hash::BuildHasher, sync::Arc, time::Duration};

use cqrs_es::{Aggregate, AggregateError};
use postgres_es::PostgresCqrs;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use vigil_aggregates::{
    chat_session::ChatSession, connection::Connection, grouping_rule::GroupingRule, incident::Incident,
    incident_analysis::IncidentAnalysis, silence::Silence, topology::Topology,
};
use vigil_projections::{
    alert_inbox::{IncidentAlertsInbox, ReceivedAlertsInbox},
    chat_sessions::ChatSessionsReadModel,
    connections::ConnectionsReadModel,
    grouping_rules::GroupingRulesReadModel,
    incident_analysis::IncidentAnalysisReadModel,
    incidents::IncidentsReadModel,
    silences::SilencesReadModel,
    topology::{LearnedTopology, TopologyReadModel},
    AppendAnnouncer, EventConsumer, Projector, ReadModel, ReplayProgress, Tail, TailWakers,
};

use prometheus::{IntCounter, IntCounterVec, Registry};

/// How often a command is tried before it gives up losing optimistic-concurrency races. Two
/// instances hammering one chat session (20 PUTs at once, split between them) lost about half of
/// their races, so 8 attempts left ~0.3% of PUTs a 409 (12 of 4,400 in an audit); 16 leave about
/// one in 30,000.
const MAX_ATTEMPTS: u32 = 16;
/// Turns commands take in one process (per aggregate store); two aggregates sharing one only
/// wait for each other.
const COMMAND_TURNS: usize = 256;
/// How often tails look for events when no notification came.
pub const TAIL_POLL: Duration = Duration::from_millis(500);
/// Tail rounds in flight at once in one process; each holds at most two pooled connections.
const TAIL_ROUNDS_AT_ONCE: usize = 2;

pub type ChatSessions = AggregateStore<ChatSession>;
pub type Incidents = AggregateStore<Incident>;
pub type Analyses = AggregateStore<IncidentAnalysis>;
pub type Connections = AggregateStore<Connection>;
pub type Topologies = AggregateStore<Topology>;
pub type Silences = AggregateStore<Silence>;
pub type GroupingRules = AggregateStore<GroupingRule>;

/// One aggregate type's command side: the cqrs-es framework, and how its appends are announced
/// to the tails.
pub struct AggregateStore<A: Aggregate> {
    cqrs: PostgresCqrs<A>,
    announcer: AppendAnnouncer,
    /// Commands on one aggregate take turns in this process (see [`execute`]); aggregates are
    /// spread over a fixed set of turns by their id's hash.
    turns: Box<[tokio::sync::Mutex<()>]>,
    turn_of: std::hash::RandomState,
}

impl<A: Aggregate<Services = ()> + 'static> AggregateStore<A> {
    /// The command side of `A`, projecting each command's events into `read_model` as it commits
    /// and counting them in `metrics`.
    fn new<R: ReadModel<A>>(db: &PgPool, announcer: &AppendAnnouncer, read_model: R, metrics: &EventMetrics) -> Self {
        let queries: Vec<Box<dyn cqrs_es::Query<A>>> = vec![
            Box::new(Projector::new(db.clone(), read_model)),
            Box::new(metrics.counting::<A>()),
        ];
        Self {
            cqrs: postgres_es::postgres_cqrs(db.clone(), queries, ()),
            announcer: announcer.clone(),
            turns: (0..COMMAND_TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
            turn_of: std::hash::RandomState::new(),
        }
    }
}

impl<A: Aggregate> AggregateStore<A> {
    async fn take_turn(&self, aggregate_id: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let turn = self.turn_of.hash_one(aggregate_id) as usize % self.turns.len();
        self.turns[turn].lock().await
    }
}

#[derive(Clone)]
pub struct EventStore {
    pub chat_sessions: Arc<ChatSessions>,
    pub incidents: Arc<Incidents>,
    pub analyses: Arc<Analyses>,
    pub connections: Arc<Connections>,
    pub topologies: Arc<Topologies>,
    pub silences: Arc<Silences>,
    pub grouping_rules: Arc<GroupingRules>,
    /// Tells the tails (of every instance) that events were appended.
    pub announcer: AppendAnnouncer,
    /// Incident events appended outside the aggregate store (merges, splits), counted by their writers.
    pub incident_events_appended: prometheus::IntCounter,
    /// Every projection, each fed by its own tail; `vigil replay` rebuilds these.
    pub consumers: Vec<Arc<dyn EventConsumer>>,
    /// Process managers that react to events (enqueue jobs), each fed by its own tail. Never
    /// replayed: their effects are not theirs to undo.
    pub reactors: Vec<Arc<dyn EventConsumer>>,
}

impl EventStore {
    /// An event store whose appends no registry counts (tools: replay, benches).
    pub fn new(db: &PgPool) -> Self {
        Self::observed(db, &EventMetrics::default())
    }

    /// An event store counting its commands' appends in `metrics`, which writers outside the
    /// aggregate stores (merges, splits) count into too.
    pub fn observed(db: &PgPool, metrics: &EventMetrics) -> Self {
        let announcer = AppendAnnouncer::start(db.clone());
        let chat_sessions = AggregateStore::new(db, &announcer, ChatSessionsReadModel, metrics);
        let incidents = AggregateStore::new(db, &announcer, IncidentsReadModel, metrics);
        let analyses = AggregateStore::new(db, &announcer, IncidentAnalysisReadModel, metrics);
        let connections = AggregateStore::new(db, &announcer, ConnectionsReadModel, metrics);
        let topologies = AggregateStore::new(db, &announcer, TopologyReadModel, metrics);
        let silences = AggregateStore::new(db, &announcer, SilencesReadModel, metrics);
        let grouping_rules = AggregateStore::new(db, &announcer, GroupingRulesReadModel, metrics);
        Self {
            incident_events_appended: metrics.appended(Incident::TYPE),
            chat_sessions: Arc::new(chat_sessions),
            incidents: Arc::new(incidents),
            analyses: Arc::new(analyses),
            connections: Arc::new(connections),
            topologies: Arc::new(topologies),
            silences: Arc::new(silences),
            grouping_rules: Arc::new(grouping_rules),
            announcer,
            consumers: Self::projections(db),
            reactors: Vec::new(),
        }
    }

    /// Every projection, built on `db`. Incidents first: other read models refer to them (and
    /// replaying incidents empties the analysis tables, which the analysis projection then
    /// rebuilds).
    pub fn projections(db: &PgPool) -> Vec<Arc<dyn EventConsumer>> {
        vec![
            Arc::new(Projector::new(db.clone(), IncidentsReadModel)),
            Arc::new(crate::vector_store::IncidentEmbeddings::new(db.clone())),
            Arc::new(Projector::new(db.clone(), IncidentAnalysisReadModel)),
            Arc::new(Projector::new(db.clone(), ChatSessionsReadModel)),
            Arc::new(Projector::new(db.clone(), ConnectionsReadModel)),
            Arc::new(Projector::new(db.clone(), TopologyReadModel)),
            Arc::new(LearnedTopology::new(db.clone())),
            Arc::new(Projector::new(db.clone(), SilencesReadModel)),
            Arc::new(Projector::new(db.clone(), GroupingRulesReadModel)),
            Arc::new(IncidentAlertsInbox::new(db.clone())),
            Arc::new(ReceivedAlertsInbox::new(db.clone())),
        ]
    }

    /// The reactors whose tails [`EventStore::spawn_tails`] starts beside the projections' (the
    /// wiring chooses them: the store does not know the features that react to its events).
    pub fn with_reactors(mut self, reactors: Vec<Arc<dyn EventConsumer>>) -> Self {
        self.reactors = reactors;
        self
    }

    /// Starts one tail per projection and reactor, and the listener that wakes them on every append.
    pub fn spawn_tails(&self, db: &PgPool, shutdown: &CancellationToken) {
        let mut wakers = TailWakers::default();
        let rounds = Arc::new(Semaphore::new(TAIL_ROUNDS_AT_ONCE));
        for consumer in self.consumers.iter().chain(&self.reactors) {
            let wake = wakers.of(consumer.aggregate_type());
            let tail = Tail::new(db.clone(), consumer.clone()).sharing_rounds(rounds.clone());
            tokio::spawn(tail.run(wake, TAIL_POLL, shutdown.clone()));
        }
        tokio::spawn(vigil_projections::listen_for_appends(
            db.clone(),
            wakers,
            shutdown.clone(),
        ));
    }
}

impl EventStore {
    /// Truncates and rebuilds read models from the event store: the one named (with those its
    /// truncation empties), or all of them. Returns each rebuilt projection with the number of
    /// events it read.
    pub async fn replay(&self, db: &PgPool, only: Option<&str>) -> anyhow::Result<Vec<(&'static str, u64)>> {
        let chosen = chosen(&self.consumers, only)?;
        // Two lanes at once: incidents, then the projections that refer to them; the others
        // beside them. A replay is mostly PostgreSQL's work, and one lane leaves a core idle.
        let (after_one_another, beside): (Vec<Arc<dyn EventConsumer>>, Vec<_>) = chosen.into_iter().partition(|c| {
            REBUILT_WITH
                .iter()
                .any(|&(first, then)| c.name() == first || c.name() == then)
        });
        let in_order = |consumers: Vec<Arc<dyn EventConsumer>>| async move {
            let mut rebuilt = Vec::new();
            for consumer in consumers {
                let name = consumer.name();
                rebuilt.push((name, vigil_projections::replay(db, consumer).await?));
            }
            Ok::<_, vigil_projections::ProjectionError>(rebuilt)
        };
        let (mut rebuilt, others) = tokio::try_join!(in_order(after_one_another), in_order(beside))?;
        rebuilt.extend(others);
        Ok(rebuilt)
    }
}

impl EventStore {
    /// Rebuilds read models beside the live tables while the service serves (the one named, with
    /// those a replay of it rebuilds, or all of them), then switches them in
    /// ([`vigil_projections::rebuild`]). Returns each rebuilt projection with the number of
    /// events its replay read.
    pub async fn rebuild_online(
        &self,
        db: &PgPool,
        only: Option<&str>,
        progress: &Arc<ReplayProgress>,
    ) -> anyhow::Result<Vec<(&'static str, u64)>> {
        let shadow = vigil_projections::rebuild::pool(db);
        let consumers = chosen(&Self::projections(&shadow), only)?;
        let rebuilt = vigil_projections::rebuild::rebuild_online(db, &shadow, &consumers, progress).await;
        shadow.close().await;
        Ok(rebuilt?)
    }
}

/// The projections that a rebuild of `only` (all when `None`) rebuilds.
fn chosen(consumers: &[Arc<dyn EventConsumer>], only: Option<&str>) -> anyhow::Result<Vec<Arc<dyn EventConsumer>>> {
    let chosen: Vec<_> = consumers
        .iter()
        .filter(|c| only.is_none_or(|name| c.name() == name || REBUILT_WITH.contains(&(name, c.name()))))
        .cloned()
        .collect();
    if chosen.is_empty() {
        let known: Vec<_> = consumers.iter().map(|c| c.name()).collect();
        anyhow::bail!(
            "no projection named {:?}; known: {}",
            only.unwrap_or_default(),
            known.join(", ")
        );
    }
    Ok(chosen)
}

/// (projection, another it empties): the analysis tables refer to incidents, so truncating
/// `incidents` cascades to them, and `incident_analysis` must be rebuilt after it.
const REBUILT_WITH: &[(&str, &str)] = &[("incidents", "incident_analysis")];

/// Who caused an event; kept in the event's metadata for auditors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor<'a> {
    User(&'a str),
    System(&'static str),
}

impl Actor<'_> {
    pub(crate) fn metadata(&self) -> HashMap<String, String> {
        let actor = match self {
            Actor::User(id) => format!("user:{id}"),
            Actor::System(part) => format!("system:{part}"),
        };
        HashMap::from([("actor".to_owned(), actor)])
    }
}

/// Runs a command, reloading and re-handling it when another writer appended to the aggregate
/// first; gives `AggregateConflict` back only after [`MAX_ATTEMPTS`] lost races. The tails are
/// told of the append.
///
/// Commands on one aggregate run one at a time in this process: racing each other they could
/// only conflict, and with enough of them at once some lost every race (18 of 80 PATCHes on one
/// incident through two instances). What remains to race is one command per other instance, and
/// the batch writers. The loser retries at once, without backoff: the winner's instance starts
/// its next command only after projecting the last one, so the retry often comes first (a backoff
/// would only let that instance's next command go ahead).
pub async fn execute<A: Aggregate>(
    store: &AggregateStore<A>,
    aggregate_id: &str,
    command: A::Command,
    actor: Actor<'_>,
) -> Result<(), AggregateError<A::Error>>
where
    A::Command: Clone,
{
    let _turn = store.take_turn(aggregate_id).await;
    let mut attempt = 1;
    loop {
        match store
            .cqrs
            .execute_with_metadata(aggregate_id, command.clone(), actor.metadata())
            .await
        {
            Err(AggregateError::AggregateConflict) if attempt < MAX_ATTEMPTS => {
                attempt += 1;
            }
            result => {
                if result.is_ok() {
                    store.announcer.announce(A::TYPE);
                }
                return result;
            }
        }
    }
}

/// Events appended to the store, per aggregate type (`vigil_events_appended_total`).
#[derive(Clone)]
pub struct EventMetrics {
    appended: IntCounterVec,
}

impl EventMetrics {
    pub(crate) fn registered_in(registry: &Registry) -> Self {
        let appended = IntCounterVec::new(
            prometheus::Opts::new(
                "vigil_events_appended_total",
                "Events appended to the event store, by aggregate type",
            ),
            &["aggregate_type"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(appended.clone()))
            .expect("metric registered once");
        Self { appended }
    }

    /// The counter of `aggregate_type`'s events (resolve it once, then add to it).
    pub fn appended(&self, aggregate_type: &str) -> IntCounter {
        self.appended.with_label_values(&[aggregate_type])
    }

    /// A query for cqrs-es that counts each committed command's events (it runs after the commit).
    pub fn counting<A: Aggregate>(&self) -> CountAppended {
        CountAppended(self.appended(A::TYPE))
    }
}

impl Default for EventMetrics {
    fn default() -> Self {
        Self::registered_in(&Registry::new())
    }
}

/// See [`EventMetrics::counting`].
pub struct CountAppended(IntCounter);

#[async_trait::async_trait]
impl<A: Aggregate> cqrs_es::Query<A> for CountAppended {
    async fn dispatch(&self, _aggregate_id: &str, events: &[cqrs_es::EventEnvelope<A>]) {
        self.0.inc_by(events.len() as u64);
    }
}
