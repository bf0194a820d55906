//! Read models of the service topology: `topology`, each user's declared catalog (from the
//! Topology aggregate), and `topology_learned`, the evidence for and against edges that the
//! incidents' events hold: people's merges and splits. (Alerts naming another service are not
//! read here: that would take every correlated alert through the tail's reactions index, an
//! index entry per ingested alert; correlation relates such alerts directly instead.)
//!
//! The learned table keeps one row per observation, keyed by the event it came from, so that an
//! event read twice counts once and `vigil replay` rebuilds it row for row; the counts and the
//! confidence are worked out when a user's topology is read (`correlation::topology`).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, EventEnvelope};
use serde_json::Value;
use sqlx::{types::Json, PgConnection, PgPool};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::topology::{service_key, Observation, Observed},
    incident::{alerts_in, Incident, IncidentEvent},
    topology::{Catalog, Topology, TopologyEvent},
};

use crate::{EventConsumer, Payloads, ProjectionError, ReadModel, StoredEvent};

pub struct TopologyReadModel;

impl ReadModel<Topology> for TopologyReadModel {
    const NAME: &'static str = "topology";
    const TABLES: &'static [&'static str] = &["topology_catalogs"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<HashMap<String, i64>, ProjectionError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT user_id, version FROM topology_catalogs WHERE user_id = ANY($1)")
                .bind(aggregate_ids)
                .fetch_all(conn)
                .await?;
        Ok(rows.into_iter().collect())
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<Topology>) -> Result<(), ProjectionError> {
        match &event.payload {
            TopologyEvent::CatalogDeclared { user_id, catalog, at } => {
                sqlx::query(
                    "INSERT INTO topology_catalogs (user_id, catalog, version, declared_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (user_id) DO UPDATE
                     SET catalog = EXCLUDED.catalog, version = EXCLUDED.version, declared_at = EXCLUDED.declared_at",
                )
                .bind(user_id)
                .bind(Json(catalog))
                .bind(event.sequence as i64)
                .bind(at)
                .execute(conn)
                .await?;
            }
        }
        Ok(())
    }
}

/// A user's declared catalog as last projected.
#[derive(Debug, Clone)]
pub struct DeclaredCatalog {
    pub catalog: Catalog,
    pub version: i64,
    pub declared_at: DateTime<Utc>,
}

pub async fn declared(db: impl sqlx::PgExecutor<'_>, user_id: &str) -> sqlx::Result<Option<DeclaredCatalog>> {
    let row: Option<(Json<Catalog>, i64, DateTime<Utc>)> =
        sqlx::query_as("SELECT catalog, version, declared_at FROM topology_catalogs WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(db)
            .await?;
    Ok(row.map(|(catalog, version, declared_at)| DeclaredCatalog {
        catalog: catalog.0,
        version,
        declared_at,
    }))
}

/// `(from, to, kind, count)` of the learned observations.
type CountedRow = (String, String, String, i64);

/// What a user's topology is built from, in one round trip: the declared catalog (empty when
/// none) and the learned observations, counted by pair and kind.
pub async fn load(db: impl sqlx::PgExecutor<'_>, user_id: &str) -> sqlx::Result<(Catalog, Vec<Observation>)> {
    let (catalog, observed): (Option<Json<Catalog>>, Json<Vec<CountedRow>>) = sqlx::query_as(
        "SELECT (SELECT catalog FROM topology_catalogs WHERE user_id = $1),
                (SELECT COALESCE(json_agg(json_build_array(from_service, to_service, kind, n)
                                          ORDER BY from_service, to_service, kind), '[]')
                 FROM (SELECT from_service, to_service, kind, count(*) AS n FROM topology_evidence
                       WHERE user_id = $1 GROUP BY 1, 2, 3) counted)",
    )
    .bind(user_id)
    .fetch_one(db)
    .await?;
    let observations = observed
        .0
        .into_iter()
        .filter_map(|(from, to, kind, n)| {
            let kind = match kind.as_str() {
                "merge" => Observed::Merge,
                "split" => Observed::Split,
                "mention" => Observed::Mention,
                _ => return None,
            };
            Some(Observation {
                from,
                to,
                kind,
                count: u32::try_from(n).unwrap_or(u32::MAX),
            })
        })
        .collect();
    Ok((catalog.map(|c| c.0).unwrap_or_default(), observations))
}

/// The learned side: reads the incidents' merges and splits.
pub struct LearnedTopology {
    pool: PgPool,
}

impl LearnedTopology {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

/// One observation row, before its user is known (a correlation's event does not name it).
struct Row {
    user_id: Option<String>,
    incident_id: String,
    sequence: i64,
    from: String,
    to: String,
    kind: &'static str,
}

#[async_trait]
impl EventConsumer for LearnedTopology {
    fn name(&self) -> &'static str {
        "topology_learned"
    }

    fn aggregate_type(&self) -> &'static str {
        Incident::TYPE
    }

    fn payloads(&self) -> Payloads<'_> {
        Payloads::OfTypes(&["IncidentAbsorbed", "AlertSplitOff"])
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut conn = self.pool.acquire().await?;
        let mut rows = Vec::new();
        for event in events {
            let user = user_actor(&event.metadata_value());
            let row = |from: &str, to: &str, kind| Row {
                user_id: user.clone(),
                incident_id: event.aggregate_id.clone(),
                sequence: event.sequence,
                from: from.trim().to_owned(),
                to: to.trim().to_owned(),
                kind,
            };
            match event.event_type.as_str() {
                // Only people's merges and splits are labels; the correlator's own merges are not.
                _ if user.is_none() => {}
                "AlertSplitOff" => {
                    if let IncidentEvent::AlertSplitOff {
                        service: Some(service),
                        remaining_services,
                        ..
                    } = event.envelope::<Incident>()?.payload
                    {
                        for stayed in &remaining_services {
                            rows.push(row(&service, stayed, "split"));
                        }
                    }
                }
                "IncidentAbsorbed" => {
                    let IncidentEvent::IncidentAbsorbed { alerts, .. } = event.envelope::<Incident>()?.payload else {
                        continue;
                    };
                    let target = services_before(&mut conn, &event.aggregate_id, event.sequence).await?;
                    for merged in services(alerts.iter().filter_map(|a| a.service.as_deref())) {
                        for kept in &target {
                            rows.push(row(&merged, kept, "merge"));
                        }
                    }
                }
                _ => {}
            }
        }
        rows.retain(|row| !row.from.is_empty() && !row.to.is_empty() && service_key(&row.from) != service_key(&row.to));
        fill_owners(&mut conn, &mut rows).await?;
        insert(&mut conn, &rows).await
    }

    fn tables(&self) -> &'static [&'static str] {
        &["topology_evidence"]
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("TRUNCATE topology_evidence").execute(&self.pool).await?;
        Ok(())
    }
}

/// The user id of an event's `user:<id>` actor.
fn user_actor(metadata: &Value) -> Option<String> {
    metadata["actor"].as_str()?.strip_prefix("user:").map(str::to_owned)
}

/// Distinct services, in order of first appearance.
fn services<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .filter(|name| seen.insert(service_key(name)))
        .map(str::to_owned)
        .collect()
}

/// The services of an incident's alerts before its event at `sequence`.
async fn services_before(
    conn: &mut PgConnection,
    incident_id: &str,
    sequence: i64,
) -> Result<Vec<String>, ProjectionError> {
    let history: Vec<Json<IncidentEvent>> = sqlx::query_scalar(
        "SELECT payload FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence < $3 ORDER BY sequence",
    )
    .bind(Incident::TYPE)
    .bind(incident_id)
    .bind(sequence)
    .fetch_all(conn)
    .await?;
    let alerts = alerts_in(history.into_iter().map(|event| event.0));
    Ok(services(alerts.iter().filter_map(|a| a.service.as_deref())))
}

/// Rows whose user is unknown (correlations, recorded by the system) get their incident's owner,
/// from the event that opened it.
async fn fill_owners(conn: &mut PgConnection, rows: &mut [Row]) -> Result<(), ProjectionError> {
    let wanted: Vec<&str> = rows
        .iter()
        .filter(|row| row.user_id.is_none())
        .map(|row| row.incident_id.as_str())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let owners = crate::incidents::owners(conn, &wanted).await?;
    for row in rows.iter_mut().filter(|row| row.user_id.is_none()) {
        row.user_id = owners.get(&row.incident_id).cloned();
    }
    Ok(())
}

async fn insert(conn: &mut PgConnection, rows: &[Row]) -> Result<(), ProjectionError> {
    let rows: Vec<&Row> = rows.iter().filter(|row| row.user_id.is_some()).collect();
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO topology_evidence (user_id, incident_id, sequence, from_service, to_service, kind)
         SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[])
         ON CONFLICT DO NOTHING",
    )
    .bind(rows.iter().map(|r| r.user_id.as_deref()).collect::<Vec<_>>())
    .bind(
        rows.iter()
            .map(|r| Uuid::parse_str(&r.incident_id).unwrap_or_default())
            .collect::<Vec<_>>(),
    )
    .bind(rows.iter().map(|r| r.sequence).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.from.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.to.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.kind).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_people_are_labellers() {
        assert_eq!(
            user_actor(&serde_json::json!({ "actor": "user:u-1" })).as_deref(),
            Some("u-1")
        );
        assert_eq!(user_actor(&serde_json::json!({ "actor": "system:correlation" })), None);
        assert_eq!(user_actor(&Value::Null), None);
    }
}
