//! `silences`: the read model of the Silence aggregate, and the queries the API and ingestion
//! serve from it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::silence::{Silence, SilenceDefinition, SilenceEvent};

use crate::{ProjectionError, ReadModel};

pub struct SilencesReadModel;

impl ReadModel<Silence> for SilencesReadModel {
    const NAME: &'static str = "silences";
    const TABLES: &'static [&'static str] = &["silences", "silence_generations"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<HashMap<String, i64>, ProjectionError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT id::text, version FROM silences WHERE id = ANY($1::text[]::uuid[])")
                .bind(aggregate_ids)
                .fetch_all(conn)
                .await?;
        Ok(rows.into_iter().collect())
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<Silence>) -> Result<(), ProjectionError> {
        let version = event.sequence as i64;
        match &event.payload {
            SilenceEvent::SilenceCreated {
                silence_id,
                user_id,
                definition,
                created_by,
                at,
            } => {
                let (starts_at, ends_at) = definition.schedule.span();
                sqlx::query(
                    "INSERT INTO silences (id, user_id, definition, created_by, created_at, starts_at, ends_at, version)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (id) DO NOTHING",
                )
                .bind(silence_id)
                .bind(user_id)
                .bind(Json(definition))
                .bind(created_by)
                .bind(at)
                .bind(starts_at)
                .bind(ends_at)
                .bind(version)
                .execute(&mut *conn)
                .await?;
            }
            SilenceEvent::SilenceExpired { expired_by, at } => {
                sqlx::query("UPDATE silences SET expired_at = $2, expired_by = $3, version = $4 WHERE id = $1::uuid")
                    .bind(&event.aggregate_id)
                    .bind(at)
                    .bind(expired_by)
                    .bind(version)
                    .execute(&mut *conn)
                    .await?;
            }
        }
        crate::generation::bump(conn, "silence_generations", "silences", &event.aggregate_id).await?;
        Ok(())
    }
}

/// A silence as last projected.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SilenceRow {
    pub id: Uuid,
    pub definition: Json<SilenceDefinition>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expired_at: Option<DateTime<Utc>>,
    pub expired_by: Option<String>,
}

const COLUMNS: &str = "id, definition, created_by, created_at, expired_at, expired_by";

/// `user_id`'s silence `id`, if it is theirs.
pub async fn find(db: impl sqlx::PgExecutor<'_>, user_id: &str, id: Uuid) -> sqlx::Result<Option<SilenceRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM silences WHERE id = $1 AND user_id = $2"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

/// `user_id`'s silences, newest first: those after silence `after` when given (none when it is
/// not one of theirs), at most `limit`.
pub async fn list(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
    after: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<SilenceRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM silences
         WHERE user_id = $1
           AND ($2::uuid IS NULL
                OR (created_at, id) < (SELECT c.created_at, c.id FROM silences c WHERE c.id = $2 AND c.user_id = $1))
         ORDER BY created_at DESC, id DESC LIMIT $3"
    ))
    .bind(user_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// `user_id`'s silences that may still apply (not expired, not ended), with the generation they
/// are of (0 when the user never had one): ingestion compiles them.
pub async fn in_force(
    db: impl sqlx::PgExecutor<'_>,
    user_id: &str,
) -> sqlx::Result<(i64, Vec<(Uuid, SilenceDefinition)>)> {
    let (generation, silences): (i64, Json<Vec<(Uuid, SilenceDefinition)>>) = sqlx::query_as(
        "SELECT COALESCE((SELECT generation FROM silence_generations WHERE user_id = $1), 0),
                (SELECT COALESCE(json_agg(json_build_array(id, definition)), '[]') FROM silences
                 WHERE user_id = $1 AND expired_at IS NULL AND (ends_at IS NULL OR ends_at > now()))",
    )
    .bind(user_id)
    .fetch_one(db)
    .await?;
    Ok((generation, silences.0))
}
