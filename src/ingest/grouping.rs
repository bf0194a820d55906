//! The grouping rules placement applies (open after N), kept in memory per user, compiled, and
//! read again only when the user's rules changed (their generation moved), as silences are.

use std::{collections::HashMap, sync::Arc};

use sqlx::PgConnection;
use vigil_aggregates::grouping_rule::{CompiledRule, GroupingRuleDefinition};

use super::{kept::KeptByGeneration, parsers::NormalizedAlert};

#[derive(Default)]
pub struct RuleCache {
    kept: KeptByGeneration<CompiledRule>,
}

/// The rules of each user of a batch who has any.
#[derive(Default)]
pub struct Rules<'a> {
    by_user: HashMap<&'a str, Arc<[CompiledRule]>>,
}

impl RuleCache {
    /// The rules of the users `generations` names (`(user, generation)`, from placement's
    /// lookup), read and compiled again for a user whose generation moved (a round trip each).
    pub async fn in_force<'a>(
        &self,
        conn: &mut PgConnection,
        generations: &'a [(String, i64)],
    ) -> sqlx::Result<Rules<'a>> {
        let mut by_user = HashMap::new();
        for (user_id, generation) in generations {
            let rules = match self.kept.get(user_id, *generation) {
                Some(rules) => rules,
                None => {
                    let (generation, definitions) =
                        vigil_projections::grouping_rules::in_force(&mut *conn, user_id).await?;
                    self.kept.keep_compiled(
                        user_id,
                        generation,
                        definitions,
                        GroupingRuleDefinition::compile,
                        "grouping rule",
                    )
                }
            };
            if !rules.is_empty() {
                by_user.insert(user_id.as_str(), rules);
            }
        }
        Ok(Rules { by_user })
    }
}

impl Rules<'_> {
    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    /// The first of `user_id`'s rules (oldest first) that matches `alert`, with the group the
    /// alert falls in.
    pub fn matching(&self, user_id: &str, alert: &NormalizedAlert) -> Option<(&CompiledRule, String)> {
        let rules = self.by_user.get(user_id)?;
        let facts = alert.facts();
        let rule = rules.iter().find(|rule| rule.matches(&facts))?;
        Some((rule, rule.group_of(&facts)))
    }
}
