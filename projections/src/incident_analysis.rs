//! `incident_thoughts`, `incident_citations`, `incident_suggestions`: the read model of the
//! IncidentAnalysis aggregate.

use std::collections::HashMap;

use cqrs_es::EventEnvelope;
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::incident_analysis::{AnalysisEvent, IncidentAnalysis};

use crate::{ProjectionError, ReadModel};

pub struct IncidentAnalysisReadModel;

impl ReadModel<IncidentAnalysis> for IncidentAnalysisReadModel {
    const NAME: &'static str = "incident_analysis";
    const TABLES: &'static [&'static str] = &[
        "incident_thoughts",
        "incident_citations",
        "incident_suggestions",
        "incident_analyses",
    ];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, i64>, ProjectionError> {
        crate::projector::versions_by_uuid(
            conn,
            "SELECT wanted.id, found.version FROM unnest($1::uuid[]) AS wanted(id)
             CROSS JOIN LATERAL (SELECT version FROM incident_analyses WHERE incident_id = wanted.id LIMIT 1) found",
            aggregate_ids,
        )
        .await
    }

    async fn apply(
        &self,
        conn: &mut PgConnection,
        event: &EventEnvelope<IncidentAnalysis>,
    ) -> Result<(), ProjectionError> {
        self.apply_runs(conn, &[vec![event]]).await
    }

    /// Every run's rows in one insert per table, whatever the number of events.
    async fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<IncidentAnalysis>>],
    ) -> Result<(), ProjectionError> {
        let positions = positions_of(conn, runs).await?;
        insert_rows(conn, runs, &positions).await
    }

    async fn apply_runs_at(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<IncidentAnalysis>>],
        positions: &[i64],
    ) -> Result<(), ProjectionError> {
        insert_rows(conn, runs, positions).await
    }
}

/// The events' positions in the store, in the order of `runs` flattened.
async fn positions_of(
    conn: &mut PgConnection,
    runs: &[Vec<&EventEnvelope<IncidentAnalysis>>],
) -> Result<Vec<i64>, ProjectionError> {
    let events: Vec<&EventEnvelope<IncidentAnalysis>> = runs.iter().flatten().copied().collect();
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let found: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT wanted.id, wanted.sequence, found.global_position
         FROM unnest($2::text[], $3::bigint[]) AS wanted(id, sequence)
         CROSS JOIN LATERAL (SELECT global_position FROM events
                             WHERE aggregate_type = $1 AND aggregate_id = wanted.id
                               AND sequence = wanted.sequence LIMIT 1) found",
    )
    .bind(<IncidentAnalysis as cqrs_es::Aggregate>::TYPE)
    .bind(
        events
            .iter()
            .map(|event| event.aggregate_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(events.iter().map(|event| event.sequence as i64).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await?;
    let found: HashMap<(String, i64), i64> = found
        .into_iter()
        .map(|(aggregate_id, sequence, position)| ((aggregate_id, sequence), position))
        .collect();
    let mut positions = Vec::with_capacity(events.len());
    for event in &events {
        let key = (event.aggregate_id.clone(), event.sequence as i64);
        let Some(&position) = found.get(&key) else {
            return Err(ProjectionError::MissingEvents {
                aggregate_id: key.0,
                from: key.1,
                to: key.1,
            });
        };
        positions.push(position);
    }
    Ok(positions)
}

/// Inserts the runs' thoughts, citations and suggestions, each row keyed by its event's position
/// in the store (`positions`, in the order of `runs` flattened): a replay gives every row the id
/// it had (the API shows them), where a sequence would renumber them.
async fn insert_rows(
    conn: &mut PgConnection,
    runs: &[Vec<&EventEnvelope<IncidentAnalysis>>],
    positions: &[i64],
) -> Result<(), ProjectionError> {
    use AnalysisEvent as E;
    let events: Vec<&EventEnvelope<IncidentAnalysis>> = runs.iter().flatten().copied().collect();
    if events.is_empty() {
        return Ok(());
    }
    let mut thoughts = Rows::default();
    let mut citations = Rows::default();
    let mut suggestions = Rows::default();
    for (event, &id) in events.iter().zip(positions) {
        match &event.payload {
            E::ThoughtRecorded {
                incident_id,
                kind,
                content,
                at,
            } => thoughts.push(id, *incident_id, *at, (content.as_str(), kind.as_str())),
            E::CitationRecorded {
                incident_id,
                citation,
                at,
            } => citations.push(id, *incident_id, *at, citation),
            E::SuggestionProposed {
                incident_id,
                suggestion,
                at,
            } => suggestions.push(id, *incident_id, *at, suggestion),
        }
    }
    if !thoughts.ids.is_empty() {
        sqlx::query(
            "INSERT INTO incident_thoughts (id, incident_id, timestamp, content, thought_type, created_at)
             SELECT id, incident_id, at, content, kind, at
             FROM unnest($1::bigint[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[])
                 AS t(id, incident_id, at, content, kind)",
        )
        .bind(&thoughts.ids)
        .bind(&thoughts.incidents)
        .bind(&thoughts.at)
        .bind(thoughts.of(|(content, _)| *content))
        .bind(thoughts.of(|(_, kind)| *kind))
        .execute(&mut *conn)
        .await?;
    }
    if !citations.ids.is_empty() {
        sqlx::query(
            "INSERT INTO incident_citations
               (id, incident_id, citation_key, tool_name, command, output, executed_at, created_at)
             SELECT id, incident_id, key, tool_name, command, output, executed_at, at
             FROM unnest($1::bigint[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::timestamptz[])
                 AS c(id, incident_id, at, key, tool_name, command, output, executed_at)",
        )
        .bind(&citations.ids)
        .bind(&citations.incidents)
        .bind(&citations.at)
        .bind(citations.of(|c| c.key.as_str()))
        .bind(citations.of(|c| c.tool_name.as_deref()))
        .bind(citations.of(|c| c.command.as_deref()))
        .bind(citations.of(|c| c.output.as_str()))
        .bind(citations.of(|c| c.executed_at))
        .execute(&mut *conn)
        .await?;
    }
    if !suggestions.ids.is_empty() {
        sqlx::query(
            "INSERT INTO incident_suggestions (id, incident_id, title, description, type, risk, command, created_at)
             SELECT id, incident_id, title, description, kind, risk, command, at
             FROM unnest($1::bigint[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::text[])
                 AS s(id, incident_id, at, title, description, kind, risk, command)",
        )
        .bind(&suggestions.ids)
        .bind(&suggestions.incidents)
        .bind(&suggestions.at)
        .bind(suggestions.of(|s| s.title.as_str()))
        .bind(suggestions.of(|s| s.description.as_deref()))
        .bind(suggestions.of(|s| s.kind.as_str()))
        .bind(suggestions.of(|s| s.risk.as_str()))
        .bind(suggestions.of(|s| s.command.as_deref()))
        .execute(&mut *conn)
        .await?;
    }
    let last_of_runs: Vec<&EventEnvelope<IncidentAnalysis>> =
        runs.iter().filter_map(|run| run.last().copied()).collect();
    sqlx::query(
        "INSERT INTO incident_analyses (incident_id, version)
         SELECT * FROM unnest($1::uuid[], $2::bigint[])
         ON CONFLICT (incident_id) DO UPDATE SET version = EXCLUDED.version",
    )
    .bind(
        last_of_runs
            .iter()
            .map(|event| Uuid::parse_str(&event.aggregate_id).unwrap_or_default())
            .collect::<Vec<_>>(),
    )
    .bind(
        last_of_runs
            .iter()
            .map(|event| event.sequence as i64)
            .collect::<Vec<_>>(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The rows of one table, column by column, as `unnest` takes them.
struct Rows<T> {
    ids: Vec<i64>,
    incidents: Vec<Uuid>,
    at: Vec<chrono::DateTime<chrono::Utc>>,
    items: Vec<T>,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Self {
            ids: Vec::new(),
            incidents: Vec::new(),
            at: Vec::new(),
            items: Vec::new(),
        }
    }
}

impl<T> Rows<T> {
    fn push(&mut self, id: i64, incident_id: Uuid, at: chrono::DateTime<chrono::Utc>, item: T) {
        self.ids.push(id);
        self.incidents.push(incident_id);
        self.at.push(at);
        self.items.push(item);
    }

    fn of<'a, V>(&'a self, column: impl Fn(&'a T) -> V) -> Vec<V> {
        self.items.iter().map(column).collect()
    }
}
