//! The silences placement applies, compiled once each and kept in memory: a silence never
//! changes once created (it is only expired), so its id names its matchers for good. Which
//! silences are in force is read with every batch (placement's lookup), so a new or expired one
//! applies to the next batch of any instance.

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::silence::{AlertFacts, CompiledSilence};

use super::parsers::NormalizedAlert;

/// Compiled silences kept at most before the cache starts over.
const MAX_SILENCES: usize = 100_000;

#[derive(Default)]
pub struct SilenceCache {
    compiled: DashMap<Uuid, Arc<CompiledSilence>>,
}

/// The silences in force for each user of a batch, at the batch's time.
#[derive(Default)]
pub struct InForce {
    by_user: HashMap<String, Vec<Arc<CompiledSilence>>>,
}

impl SilenceCache {
    /// The silences `in_force` names (`(user, silence id)`, from placement's lookup) that are
    /// active at `at` (a weekly window between its slots is not), compiling those not met before
    /// (one round trip when there are any).
    pub async fn in_force(
        &self,
        conn: &mut PgConnection,
        in_force: &[(String, Uuid)],
        at: DateTime<Utc>,
    ) -> sqlx::Result<InForce> {
        if in_force.is_empty() {
            return Ok(InForce::default());
        }
        let missing: Vec<Uuid> = in_force
            .iter()
            .map(|&(_, id)| id)
            .filter(|id| !self.compiled.contains_key(id))
            .collect();
        if !missing.is_empty() {
            if self.compiled.len() + missing.len() > MAX_SILENCES {
                self.compiled.clear();
            }
            for (id, definition) in vigil_projections::silences::definitions(&mut *conn, &missing).await? {
                match definition.0.compile(id) {
                    Ok(silence) => {
                        self.compiled.insert(id, Arc::new(silence));
                    }
                    // Validated when created: only a rule made stricter since can refuse it.
                    Err(error) => tracing::warn!(silence_id = %id, %error, "a stored silence does not compile"),
                }
            }
        }
        let mut by_user: HashMap<String, Vec<Arc<CompiledSilence>>> = HashMap::new();
        for (user_id, id) in in_force {
            if let Some(silence) = self.compiled.get(id).filter(|s| s.is_active(at)) {
                by_user.entry(user_id.clone()).or_default().push(silence.clone());
            }
        }
        Ok(InForce { by_user })
    }
}

impl InForce {
    /// The ids of `user_id`'s silences that match `alert`, in id order; `None` when none does.
    pub fn matching(&self, user_id: &str, alert: &NormalizedAlert) -> Option<Vec<Uuid>> {
        let silences = self.by_user.get(user_id)?;
        let facts = AlertFacts {
            source: alert.source.as_str(),
            service: alert.service.as_deref(),
            environment: alert.environment.as_deref(),
            severity: alert.severity.as_deref(),
            title: &alert.title,
            labels: &alert.labels,
        };
        let mut ids: Vec<Uuid> = silences
            .iter()
            .filter(|silence| silence.matches(&facts))
            .map(|silence| silence.id)
            .collect();
        ids.sort_unstable();
        (!ids.is_empty()).then_some(ids)
    }
}
