//! The silences placement applies, kept in memory per user, compiled. Placement's lookup reads
//! each user's silence generation (how many times their silences changed) with every batch, and
//! a user's silences are read and compiled again only when it moved: a new or expired silence
//! applies from the next batch of any instance, and 100 silences cost a batch one number.

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::silence::{AlertFacts, CompiledSilence};

use super::parsers::NormalizedAlert;

/// Users whose silences are kept at most before the cache starts over.
const MAX_USERS: usize = 50_000;

/// Each user's silences that may apply, compiled, with the generation they are of.
#[derive(Default)]
pub struct SilenceCache {
    by_user: DashMap<String, (i64, Arc<[CompiledSilence]>)>,
}

/// The silences in force for each user of a batch, at the batch's time: each user's kept
/// silences and which of them are active then.
#[derive(Default)]
pub struct InForce<'a> {
    by_user: HashMap<&'a str, (Arc<[CompiledSilence]>, Vec<usize>)>,
}

impl SilenceCache {
    /// The silences of the users `generations` names (`(user, generation)`, from placement's
    /// lookup; a user without silences is not named), read and compiled again for a user whose
    /// generation moved since they were kept (one round trip per such user).
    pub async fn in_force<'a>(
        &self,
        conn: &mut PgConnection,
        generations: &'a [(String, i64)],
        at: DateTime<Utc>,
    ) -> sqlx::Result<InForce<'a>> {
        let mut by_user = HashMap::new();
        for (user_id, generation) in generations {
            let kept = self
                .by_user
                .get(user_id)
                .filter(|entry| entry.0 == *generation)
                .map(|entry| entry.1.clone());
            let silences = match kept {
                Some(silences) => silences,
                None => {
                    let (generation, definitions) = vigil_projections::silences::in_force(&mut *conn, user_id).await?;
                    let silences: Arc<[CompiledSilence]> = definitions
                        .into_iter()
                        .filter_map(|(id, definition)| match definition.compile(id) {
                            Ok(silence) => Some(silence),
                            // Validated when created: only a rule made stricter since can refuse it.
                            Err(error) => {
                                tracing::warn!(silence_id = %id, %error, "a stored silence does not compile");
                                None
                            }
                        })
                        .collect();
                    if self.by_user.len() >= MAX_USERS {
                        self.by_user.clear();
                    }
                    self.by_user.insert(user_id.clone(), (generation, silences.clone()));
                    silences
                }
            };
            let active: Vec<usize> = (0..silences.len()).filter(|&i| silences[i].is_active(at)).collect();
            if !active.is_empty() {
                by_user.insert(user_id.as_str(), (silences, active));
            }
        }
        Ok(InForce { by_user })
    }
}

impl InForce<'_> {
    /// The ids of `user_id`'s silences active at the batch's time that match `alert`, in id
    /// order; `None` when none does.
    pub fn matching(&self, user_id: &str, alert: &NormalizedAlert) -> Option<Vec<Uuid>> {
        let (silences, active) = self.by_user.get(user_id)?;
        let facts = AlertFacts {
            source: alert.source.as_str(),
            service: alert.service.as_deref(),
            environment: alert.environment.as_deref(),
            severity: alert.severity.as_deref(),
            title: &alert.title,
            labels: &alert.labels,
        };
        let mut ids: Vec<Uuid> = active
            .iter()
            .map(|&i| &silences[i])
            .filter(|silence| silence.matches(&facts))
            .map(|silence| silence.id)
            .collect();
        ids.sort_unstable();
        (!ids.is_empty()).then_some(ids)
    }
}
