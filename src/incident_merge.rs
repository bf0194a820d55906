//! Merging one incident into another: two aggregates' events, committed together or not at all.
//!
//! A merge is `MergedInto` on the source and `IncidentAbsorbed` (the source's alerts) on the
//! target. Run as two commands, the first could commit and the second be refused (the target
//! merged meanwhile, say into the source itself), leaving the source merged into an incident that
//! never took its alerts, and the caller told the merge failed. Here both streams are read, both
//! commands decided by the Incident aggregate, and both events appended in one transaction: the
//! store's unique `(aggregate_type, aggregate_id, sequence)` makes a writer that got to either
//! stream first win, and the merge is decided again from what it wrote.

use std::time::Duration;

use chrono::Utc;
use cqrs_es::{Aggregate, DomainEvent, EventEnvelope};
use rand::Rng;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::incident::{alerts_in, Incident, IncidentCommand, IncidentError, IncidentEvent};
use vigil_projections::{incidents::IncidentsReadModel, load_all, ProjectionError, Projector};

use crate::{
    error::AppError,
    event_store::{Actor, EventStore},
};

/// How often a merge is decided again after another writer appended to either incident first.
pub(crate) const MAX_ATTEMPTS: u32 = 8;
/// What PostgreSQL raises for a unique violation and for a deadlock.
const UNIQUE_VIOLATION: &str = "23505";
const DEADLOCK_DETECTED: &str = "40P01";

/// Merges `source_id` into `target_id` for `user_id`, as `actor` (the user, or the correlator
/// merging incidents an alert bridged): both events or neither. 404 when either is not the
/// user's, 409 when either is merged already, 400 for a self-merge.
pub async fn merge(
    db: &PgPool,
    events: &EventStore,
    actor: Actor<'_>,
    user_id: &str,
    source_id: Uuid,
    target_id: Uuid,
) -> Result<(), AppError> {
    let projector = Projector::new(db.clone(), IncidentsReadModel);
    for attempt in 1..=MAX_ATTEMPTS {
        let mut tx = db.begin().await?;
        let merged = match try_merge(&mut tx, &projector, &actor, user_id, source_id, target_id).await {
            Ok(appended) => tx.commit().await.map(|()| appended).map_err(Attempt::from),
            Err(failed) => {
                // Now, not when dropped: a lost race waits below, and must not hold its locks.
                let _ = tx.rollback().await;
                Err(failed)
            }
        };
        match merged {
            Ok(appended) => {
                events.incident_events_appended.inc_by(appended as u64);
                events.announcer.announce(Incident::TYPE);
                return Ok(());
            }
            Err(Attempt::LostRace) if attempt < MAX_ATTEMPTS => {
                let backoff_ms = rand::rng().random_range(1..=5 * u64::from(attempt));
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            }
            Err(Attempt::LostRace) => break,
            Err(Attempt::Failed(error)) => return Err(error),
        }
    }
    Err(AppError::Conflict(
        "the incidents were changed concurrently too many times; retry".into(),
    ))
}

pub(crate) enum Attempt {
    /// Another writer appended to one of the incidents first: decide again.
    LostRace,
    Failed(AppError),
}

impl From<sqlx::Error> for Attempt {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(database)
                if matches!(database.code().as_deref(), Some(UNIQUE_VIOLATION | DEADLOCK_DETECTED)) =>
            {
                Self::LostRace
            }
            _ => Self::Failed(error.into()),
        }
    }
}

/// A projection that met another writer (a deadlock with a placement batch writing the same
/// incidents in another order, say) lost a race too.
impl From<ProjectionError> for Attempt {
    fn from(error: ProjectionError) -> Self {
        match error {
            ProjectionError::Database(database) => database.into(),
            other => Self::Failed(AppError::Internal(other.into())),
        }
    }
}

impl From<IncidentError> for Attempt {
    fn from(error: IncidentError) -> Self {
        Self::Failed(cqrs_es::AggregateError::UserError(error).into())
    }
}

async fn try_merge(
    conn: &mut PgConnection,
    projector: &Projector<Incident, IncidentsReadModel>,
    actor: &Actor<'_>,
    user_id: &str,
    source_id: Uuid,
    target_id: Uuid,
) -> Result<usize, Attempt> {
    let (source_history, source, source_sequence) = load(conn, source_id).await?;
    let (_, target, target_sequence) = load(conn, target_id).await?;
    let at = Utc::now();
    let merged = source.decide(IncidentCommand::MergeInto {
        user_id: user_id.to_owned(),
        target_incident_id: target_id,
        at,
    })?;
    let absorbed = target
        .decide(IncidentCommand::Absorb {
            user_id: user_id.to_owned(),
            source_incident_id: source_id,
            alerts: alerts_in(source_history.into_iter().map(|event| event.payload)),
            at,
        })
        .map_err(|error| match error {
            IncidentError::AlreadyMerged => Attempt::Failed(AppError::Conflict(
                "the target incident is itself merged into another incident".into(),
            )),
            other => other.into(),
        })?;
    let mut streams = [
        (source_id, envelopes(source_id, source_sequence, merged, actor)),
        (target_id, envelopes(target_id, target_sequence, absorbed, actor)),
    ];
    // One order for every writer of a pair, so that two merges of the same incidents in opposite
    // directions meet on the first stream (one waits, then loses) rather than deadlock.
    streams.sort_by_key(|(id, _)| *id);
    for (_, envelopes) in &streams {
        append(conn, envelopes).await?;
    }
    for (id, envelopes) in &streams {
        projector.project_in(conn, &id.to_string(), envelopes).await?;
    }
    Ok(streams.iter().map(|(_, envelopes)| envelopes.len()).sum())
}

/// An incident's events, its state after them, and its last sequence.
pub(crate) async fn load(
    conn: &mut PgConnection,
    incident_id: Uuid,
) -> Result<(Vec<EventEnvelope<Incident>>, Incident, usize), Attempt> {
    let history = load_all::<Incident>(conn, &incident_id.to_string()).await?;
    let mut incident = Incident::default();
    for event in &history {
        incident.apply_event(&event.payload);
    }
    let sequence = history.last().map_or(0, |event| event.sequence);
    Ok((history, incident, sequence))
}

/// `events` as the next ones of `incident_id`'s stream, after sequence `after`.
pub(crate) fn envelopes(
    incident_id: Uuid,
    after: usize,
    events: Vec<IncidentEvent>,
    actor: &Actor<'_>,
) -> Vec<EventEnvelope<Incident>> {
    let metadata = actor.metadata();
    (after + 1..)
        .zip(events)
        .map(|(sequence, payload)| EventEnvelope {
            aggregate_id: incident_id.to_string(),
            sequence,
            payload,
            metadata: metadata.clone(),
        })
        .collect()
}

/// Appends events as postgres-es does (same columns, same JSON).
pub(crate) async fn append(conn: &mut PgConnection, events: &[EventEnvelope<Incident>]) -> Result<(), Attempt> {
    for event in events {
        let payload =
            serde_json::to_value(&event.payload).map_err(|error| Attempt::Failed(AppError::Internal(error.into())))?;
        let metadata =
            serde_json::to_value(&event.metadata).map_err(|error| Attempt::Failed(AppError::Internal(error.into())))?;
        sqlx::query(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(Incident::TYPE)
        .bind(&event.aggregate_id)
        .bind(event.sequence as i64)
        .bind(event.payload.event_type())
        .bind(event.payload.event_version())
        .bind(payload)
        .bind(metadata)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
