//! `user_connections`: the read model of the Connection aggregate, and the queries the API serves.

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{PgConnection, PgPool};
use vigil_aggregates::connection::{Connection, ConnectionEvent};

use crate::{ProjectionError, ReadModel};

pub struct ConnectionsReadModel;

impl ReadModel<Connection> for ConnectionsReadModel {
    const NAME: &'static str = "user_connections";
    const TABLES: &'static [&'static str] = &["user_connections"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, i64>, ProjectionError> {
        // One primary-key probe per id, whatever the statistics were when the plan was made
        // (see `versions_by_uuid`).
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT wanted.id, found.version FROM unnest($1::text[]) AS wanted(id)
             CROSS JOIN LATERAL (SELECT version FROM user_connections WHERE id = wanted.id LIMIT 1) found",
        )
        .bind(aggregate_ids)
        .fetch_all(conn)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<Connection>) -> Result<(), ProjectionError> {
        use ConnectionEvent as E;
        let version = event.sequence as i64;
        let status = event.payload.status().as_str();
        match &event.payload {
            E::ConnectionPending {
                user_id,
                provider,
                account_id,
                account_name,
                at,
            }
            | E::ConnectionEstablished {
                user_id,
                provider,
                account_id,
                account_name,
                at,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO user_connections
                       (id, user_id, provider, account_id, account_name, status, created_at, updated_at, version)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)
                     ON CONFLICT (id) DO UPDATE
                     SET account_name = EXCLUDED.account_name, status = EXCLUDED.status,
                         updated_at = EXCLUDED.updated_at, version = EXCLUDED.version",
                )
                .bind(&event.aggregate_id)
                .bind(user_id)
                .bind(provider.as_str())
                .bind(account_id)
                .bind(account_name)
                .bind(status)
                .bind(at)
                .bind(version)
                .execute(conn)
                .await?;
            }
            E::ConnectionFailed { at, .. } | E::ConnectionDisconnected { at, .. } => {
                sqlx::query("UPDATE user_connections SET status = $2, updated_at = $3, version = $4 WHERE id = $1")
                    .bind(&event.aggregate_id)
                    .bind(status)
                    .bind(at)
                    .bind(version)
                    .execute(conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// A connection as the read table holds it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ConnectionRow {
    pub id: String,
    pub user_id: String,
    pub provider: String,
    pub account_id: String,
    pub account_name: Option<String>,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

const COLUMNS: &str = "id, user_id, provider, account_id, account_name, status, created_at, updated_at, version";

/// The user's connections, by provider then account.
pub async fn list(db: &PgPool, user_id: &str) -> sqlx::Result<Vec<ConnectionRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM user_connections WHERE user_id = $1 ORDER BY provider, account_id"
    ))
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// The user's connections to one provider, by account.
pub async fn of_provider(db: &PgPool, user_id: &str, provider: &str) -> sqlx::Result<Vec<ConnectionRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM user_connections WHERE user_id = $1 AND provider = $2 ORDER BY account_id"
    ))
    .bind(user_id)
    .bind(provider)
    .fetch_all(db)
    .await
}

/// One connection of the user; `None` for unknown accounts and other users' connections.
pub async fn find(db: &PgPool, user_id: &str, provider: &str, account_id: &str) -> sqlx::Result<Option<ConnectionRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM user_connections WHERE user_id = $1 AND provider = $2 AND account_id = $3"
    ))
    .bind(user_id)
    .bind(provider)
    .bind(account_id)
    .fetch_optional(db)
    .await
}
