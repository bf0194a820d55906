//! Incidents an alert bridged become one: when an alert relates as strongly to another open
//! incident as to the one it joined (a caller's incident names it, a dependency's incident shares
//! its address), the two are one failure seen from two sides. Placement records the bridges (an
//! `AlertBridged` event beside the `AlertCorrelated`); a reactor on the incident tail turns each
//! into a job, and the job merges
//! the younger incident into the older one, as the correlator (`system:correlation`).

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;
use vigil_aggregates::correlation::CorrelationConfig;
use vigil_projections::{incidents as read, StoredEvent};

use crate::{
    error::AppError,
    event_store::{Actor, EventStore},
    incident_merge,
    jobs::{JobContext, JobFailure, JobHandler, JobReactor, NewJob},
};

pub use crate::jobs::kinds::BRIDGE_JOB;
const ACTOR: Actor<'static> = Actor::System("correlation");

#[derive(Debug, Serialize, Deserialize)]
struct BridgePayload {
    /// The incident the alert joined (its user owns both: correlation never crosses users).
    joined: Uuid,
    /// The other incident it related to as strongly.
    bridged: Uuid,
}

/// AlertBridged → one merge job per bridged incident, keyed by the pair so that reading the event
/// again, or another alert bridging the same pair, enqueues nothing new.
pub fn bridge_reactor(db: sqlx::PgPool) -> JobReactor {
    JobReactor {
        name: "reactor_bridges",
        db,
        event_type: "AlertBridged",
        jobs: Box::new(bridge_jobs),
    }
}

fn bridge_jobs(event: &StoredEvent) -> Vec<NewJob> {
    let Ok(joined) = Uuid::parse_str(&event.aggregate_id) else {
        return Vec::new();
    };
    event.payload_value()["AlertBridged"]["incident_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str()?.parse::<Uuid>().ok())
        .filter(|bridged| *bridged != joined)
        .map(|bridged| {
            let (low, high) = if joined < bridged {
                (joined, bridged)
            } else {
                (bridged, joined)
            };
            let payload = json!({ "joined": joined, "bridged": bridged });
            NewJob::new(BRIDGE_JOB, payload).unique_key(format!("bridge:{low}:{high}"))
        })
        .collect()
}

/// Whether a user split one incident's alert off into the other: the correlator must not undo
/// that by merging them back (a user still may).
async fn split_apart(db: &sqlx::PgPool, a: Uuid, b: Uuid) -> sqlx::Result<bool> {
    let ids = [a.to_string(), b.to_string()];
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM events
                        WHERE aggregate_type = 'Incident' AND aggregate_id = ANY($1) AND event_type = 'AlertSplitOff'
                          AND payload->'AlertSplitOff'->>'new_incident_id' = ANY($1))",
    )
    .bind(&ids[..])
    .fetch_one(db)
    .await
}

/// The job that merges two incidents an alert bridged, with the handles it uses.
pub struct BridgeHandler {
    pub db: sqlx::PgPool,
    pub events: Arc<EventStore>,
    pub correlation: Arc<CorrelationConfig>,
}

#[async_trait]
impl JobHandler for BridgeHandler {
    fn kind(&self) -> &'static str {
        BRIDGE_JOB
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let payload: BridgePayload = job.payload_as()?;
        let state = self;
        let user_id: Option<String> = sqlx::query_scalar("SELECT user_id FROM incidents WHERE id = $1")
            .bind(payload.joined)
            .fetch_optional(&state.db)
            .await?;
        let Some(user_id) = user_id else {
            return Err(JobFailure::retryable("the incident is not projected yet"));
        };
        let incidents = read::find_incidents(&state.db, &user_id, &[payload.joined, payload.bridged]).await?;
        let [first, second] = incidents.as_slice() else {
            return Err(JobFailure::retryable("an incident of the bridge is not projected yet"));
        };
        // Only open incidents are merged (one a user resolved or merged meanwhile stays as it is),
        // and not past the cap of alerts an incident takes.
        let open = |incident: &read::IncidentRow| {
            incident.status == "investigating" && incident.merged_into_incident_id.is_none()
        };
        if !(open(first) && open(second)) {
            return Ok(json!({ "skipped": "an incident of the bridge is no longer open" }));
        }
        if split_apart(&state.db, first.id, second.id).await? {
            return Ok(json!({ "skipped": "a user split one of these incidents off the other" }));
        }
        let alerts = first.correlated_alert_count + second.correlated_alert_count + 1;
        if alerts > state.correlation.max_alerts_per_incident() as i32 {
            return Ok(json!({ "skipped": "together they would hold more alerts than an incident takes" }));
        }
        // The older incident takes the younger one's alerts: its first alert stays the first.
        let (target, source) = if (first.started_at, first.id) <= (second.started_at, second.id) {
            (first, second)
        } else {
            (second, first)
        };
        let merged = incident_merge::merge(&state.db, &state.events, ACTOR, &user_id, source.id, target.id).await;
        match merged {
            Ok(()) => Ok(json!({ "merged": source.id, "into": target.id })),
            // Merged meanwhile (by a user, or by another bridge): nothing left to do.
            Err(AppError::Conflict(reason)) => Ok(json!({ "skipped": reason })),
            Err(error) => Err(JobFailure::retryable(error)),
        }
    }
}
