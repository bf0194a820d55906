//! `incident_thoughts`, `incident_citations`, `incident_suggestions`: the read model of the
//! IncidentAnalysis aggregate.

use cqrs_es::EventEnvelope;
use sqlx::PgConnection;
use uuid::Uuid;
use vigil_aggregates::incident_analysis::{AnalysisEvent, IncidentAnalysis};

use crate::{ProjectionError, ReadModel};

pub struct IncidentAnalysisReadModel;

impl ReadModel<IncidentAnalysis> for IncidentAnalysisReadModel {
    const NAME: &'static str = "incident_analysis";

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
        use AnalysisEvent as E;
        let at = event.payload.at();
        // A row's id is its event's position in the store, so a replay gives every thought,
        // citation and suggestion the id it had (the API shows them); a sequence renumbered them.
        let id: i64 = sqlx::query_scalar(
            "SELECT global_position FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence = $3",
        )
        .bind(<IncidentAnalysis as cqrs_es::Aggregate>::TYPE)
        .bind(&event.aggregate_id)
        .bind(event.sequence as i64)
        .fetch_one(&mut *conn)
        .await?;
        match &event.payload {
            E::ThoughtRecorded {
                incident_id,
                kind,
                content,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_thoughts (id, incident_id, timestamp, content, thought_type, created_at)
                     VALUES ($5, $1, $2, $3, $4, $2)",
                )
                .bind(incident_id)
                .bind(at)
                .bind(content)
                .bind(kind.as_str())
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
            E::CitationRecorded {
                incident_id, citation, ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_citations (id, incident_id, citation_key, tool_name, command, output, executed_at, created_at)
                     VALUES ($8, $1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(incident_id)
                .bind(&citation.key)
                .bind(&citation.tool_name)
                .bind(&citation.command)
                .bind(&citation.output)
                .bind(citation.executed_at)
                .bind(at)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
            E::SuggestionProposed {
                incident_id,
                suggestion,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_suggestions (id, incident_id, title, description, type, risk, command, created_at)
                     VALUES ($8, $1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(incident_id)
                .bind(&suggestion.title)
                .bind(&suggestion.description)
                .bind(suggestion.kind.as_str())
                .bind(suggestion.risk.as_str())
                .bind(&suggestion.command)
                .bind(at)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
        }
        sqlx::query(
            "INSERT INTO incident_analyses (incident_id, version) VALUES ($1, $2)
             ON CONFLICT (incident_id) DO UPDATE SET version = EXCLUDED.version",
        )
        .bind(Uuid::parse_str(&event.aggregate_id).unwrap_or_default())
        .bind(event.sequence as i64)
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn truncate(&self, conn: &mut PgConnection) -> Result<(), ProjectionError> {
        sqlx::query("TRUNCATE incident_thoughts, incident_citations, incident_suggestions, incident_analyses")
            .execute(conn)
            .await?;
        Ok(())
    }
}
