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
        match &event.payload {
            E::ThoughtRecorded {
                incident_id,
                kind,
                content,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_thoughts (incident_id, timestamp, content, thought_type, created_at) VALUES ($1, $2, $3, $4, $2)",
                )
                .bind(incident_id)
                .bind(at)
                .bind(content)
                .bind(kind.as_str())
                .execute(&mut *conn)
                .await?;
            }
            E::CitationRecorded {
                incident_id, citation, ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_citations (incident_id, citation_key, tool_name, command, output, executed_at, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(incident_id)
                .bind(&citation.key)
                .bind(&citation.tool_name)
                .bind(&citation.command)
                .bind(&citation.output)
                .bind(citation.executed_at)
                .bind(at)
                .execute(&mut *conn)
                .await?;
            }
            E::SuggestionProposed {
                incident_id,
                suggestion,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO incident_suggestions (incident_id, title, description, type, risk, command, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(incident_id)
                .bind(&suggestion.title)
                .bind(&suggestion.description)
                .bind(suggestion.kind.as_str())
                .bind(suggestion.risk.as_str())
                .bind(&suggestion.command)
                .bind(at)
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
