//! The silences placement applies, kept in memory per user, compiled. Placement's lookup reads
//! each user's silence generation (how many times their silences changed) with every batch, and
//! a user's silences are read and compiled again only when it moved: a new or expired silence
//! applies from the next batch of any instance, and 100 silences cost a batch one number.

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::silence::{CompiledSilence, SilenceDefinition};

use super::{kept::KeptByGeneration, parsers::NormalizedAlert};

/// Each user's silences that may apply, compiled, with the generation they are of.
#[derive(Default)]
pub struct SilenceCache {
    kept: KeptByGeneration<CompiledSilence>,
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
            let silences = match self.kept.get(user_id, *generation) {
                Some(silences) => silences,
                None => {
                    let (generation, definitions) = vigil_projections::silences::in_force(&mut *conn, user_id).await?;
                    self.kept
                        .keep_compiled(user_id, generation, definitions, SilenceDefinition::compile, "silence")
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
        let facts = alert.facts();
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
