//! A notification as placement takes it: its alerts normalized for the store, and what placement
//! needs of each worked out by the task that submits it.

use std::sync::Arc;

use vigil_aggregates::correlation::evidence::Evidence;

use crate::{
    ingest::{
        parsers::{NormalizedAlert, RawPayload},
        service::alert_evidence,
    },
    vector_store::VectorStore,
};

/// One notification's alerts, from one user.
pub struct Notification {
    pub user_id: String,
    pub alerts: Vec<NormalizedAlert>,
    /// What placement needs of each alert (in the order of `alerts`), worked out when the
    /// notification is made, by the task that submits it: a lane places one batch after another,
    /// so whatever is done before is taken off every batch's critical path.
    pub(super) prepared: Vec<Prepared>,
}

pub(super) struct Prepared {
    /// The raw payload as JSON text (`source_alerts.payload`), shared by a notification's
    /// alerts that keep it whole.
    pub(super) raw_json: Arc<str>,
    /// The title's embedding (correlation's semantic score).
    pub(super) title_embedding: Vec<f32>,
    /// What the alert names, and its keys sorted (correlation's relation score).
    pub(super) evidence: Evidence,
    pub(super) evidence_keys: Vec<String>,
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
