//! `grouping_rules`: the read model of the GroupingRule aggregate, and the queries the API and
//! ingestion serve from it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::grouping_rule::{GroupingRule, GroupingRuleDefinition, GroupingRuleEvent};

use crate::{ProjectionError, ReadModel};

pub struct GroupingRulesReadModel;

impl ReadModel<GroupingRule> for GroupingRulesReadModel {
    const NAME: &'static str = "grouping_rules";
    const TABLES: &'static [&'static str] = &["grouping_rules", "grouping_rule_generations"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<HashMap<String, i64>, ProjectionError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT id::text, version FROM grouping_rules WHERE id = ANY($1::text[]::uuid[])")
                .bind(aggregate_ids)
                .fetch_all(conn)
                .await?;
        Ok(rows.into_iter().collect())
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<GroupingRule>) -> Result<(), ProjectionError> {
        let version = event.sequence as i64;
        match &event.payload {
            GroupingRuleEvent::GroupingRuleCreated {
                rule_id,
                user_id,
                definition,
                created_by,
                at,
            } => {
                sqlx::query(
                    "INSERT INTO grouping_rules (id, user_id, definition, created_by, created_at, version)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (id) DO NOTHING",
                )
                .bind(rule_id)
                .bind(user_id)
                .bind(Json(definition))
                .bind(created_by)
                .bind(at)
                .bind(version)
                .execute(&mut *conn)
                .await?;
            }
            GroupingRuleEvent::GroupingRuleDeleted { deleted_by, at } => {
                sqlx::query(
                    "UPDATE grouping_rules SET deleted_at = $2, deleted_by = $3, version = $4 WHERE id = $1::uuid",
                )
                .bind(&event.aggregate_id)
                .bind(at)
                .bind(deleted_by)
                .bind(version)
                .execute(&mut *conn)
                .await?;
            }
        }
        crate::generation::bump(conn, "grouping_rule_generations", "grouping_rules", &event.aggregate_id).await?;
        Ok(())
    }
}

/// A grouping rule in force, as projected (a deleted one is never read back).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GroupingRuleRow {
    pub id: Uuid,
    pub definition: Json<GroupingRuleDefinition>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, definition, created_by, created_at";

/// `user_id`'s grouping rule `id`, if it is theirs and not deleted.
pub async fn find(db: impl sqlx::PgExecutor<'_>, user_id: &str, id: Uuid) -> sqlx::Result<Option<GroupingRuleRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM grouping_rules WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

/// `user_id`'s grouping rules not deleted, newest first: those after rule `after` when given
/// (none when it is not one of theirs; one deleted since still marks its place), at most
/// `limit`.
pub async fn list(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    after: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<GroupingRuleRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM grouping_rules
         WHERE user_id = $1 AND deleted_at IS NULL
           AND ($2::uuid IS NULL
                OR (created_at, id) < (SELECT c.created_at, c.id FROM grouping_rules c WHERE c.id = $2 AND c.user_id = $1))
         ORDER BY created_at DESC, id DESC LIMIT $3"
    ))
    .bind(user_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// `user_id`'s grouping rules not deleted, oldest first (by `created_at`, then id: the first
/// that matches an alert governs it), with the generation they are of (0 when the user never had
/// one): ingestion compiles them.
pub async fn in_force(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
) -> sqlx::Result<(i64, Vec<(Uuid, GroupingRuleDefinition)>)> {
    let (generation, rules): (i64, Json<Vec<(Uuid, GroupingRuleDefinition)>>) = sqlx::query_as(
        "SELECT COALESCE((SELECT generation FROM grouping_rule_generations WHERE user_id = $1), 0),
                (SELECT COALESCE(json_agg(json_build_array(id, definition) ORDER BY created_at, id), '[]')
                 FROM grouping_rules WHERE user_id = $1 AND deleted_at IS NULL)",
    )
    .bind(user_id)
    .fetch_one(db)
    .await?;
    Ok((generation, rules.0))
}
