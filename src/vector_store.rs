//! The vector store behind correlation's semantic score and similar-incident search. Vectors are
//! kept in PostgreSQL (`embeddings`) and compared in process; the embedding is the built-in
//! feature-hashing one, which needs no model and gives the same vector on every machine.

use std::collections::HashMap;

use cqrs_es::Aggregate;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;
use vigil_aggregates::{
    correlation::{cosine, Embedder, HashedNgramEmbedder},
    incident::{Incident, IncidentEvent},
};
use vigil_projections::{
    incidents::{find_incidents, IncidentRow},
    EventConsumer, Payloads, ProjectionError, StoredEvent,
};

pub const INCIDENT: &str = "incident";

#[derive(Clone, Debug, Default)]
pub struct VectorStore {
    embedder: HashedNgramEmbedder,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Neighbor {
    pub owner_id: String,
    pub content: String,
    pub similarity: f32,
}

/// How many of a user's most recent entries a nearest-neighbour search compares.
pub const NEAREST_AMONG: usize = 2_000;

/// One row of the `embeddings` table.
pub struct EmbeddingEntry<'a> {
    pub owner_id: &'a str,
    pub user_id: &'a str,
    /// The text embedded.
    pub content: &'a str,
    pub vector: &'a [f32],
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl VectorStore {
    pub fn embed(&self, text: &str) -> Vec<f32> {
        self.embedder.embed(text)
    }

    /// Inserts or replaces several entries of one kind, in one statement: `(owner id, user id,
    /// content, vector)`.
    pub async fn upsert_many(
        &self,
        executor: impl PgExecutor<'_>,
        kind: &str,
        entries: &[EmbeddingEntry<'_>],
    ) -> sqlx::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        // Vectors travel as one flat array (PostgreSQL arrays of arrays must be rectangular, and
        // `unnest` would flatten them anyway); each row slices out its own.
        let mut starts = Vec::with_capacity(entries.len());
        let mut flat = Vec::new();
        for entry in entries {
            starts.push(flat.len() as i32 + 1);
            flat.extend_from_slice(entry.vector);
        }
        sqlx::query(
            "INSERT INTO embeddings (owner_kind, owner_id, user_id, content, vector, created_at)
             SELECT $1, e.owner_id, e.user_id, e.content, ($5::real[])[e.start : e.start + e.length - 1], e.created_at
             FROM unnest($2::text[], $3::text[], $4::text[], $6::int[], $7::int[], $8::timestamptz[])
                 AS e(owner_id, user_id, content, start, length, created_at)
             ON CONFLICT (owner_kind, owner_id) DO UPDATE SET content = EXCLUDED.content, vector = EXCLUDED.vector",
        )
        .bind(kind)
        .bind(entries.iter().map(|e| e.owner_id).collect::<Vec<_>>())
        .bind(entries.iter().map(|e| e.user_id).collect::<Vec<_>>())
        .bind(entries.iter().map(|e| e.content).collect::<Vec<_>>())
        .bind(flat)
        .bind(starts)
        .bind(entries.iter().map(|e| e.vector.len() as i32).collect::<Vec<_>>())
        .bind(entries.iter().map(|e| e.created_at).collect::<Vec<_>>())
        .execute(executor)
        .await
        .map(drop)
    }

    /// The user's `limit` most similar entries of `kind`, most similar first.
    pub async fn nearest(
        &self,
        db: &PgPool,
        user_id: &str,
        kind: &str,
        text: &str,
        limit: usize,
    ) -> sqlx::Result<Vec<Neighbor>> {
        let query = self.embed(text);
        // The user's most recent entries only: every analysis reads them, and all of a user's
        // 21,000 incidents (21 MB of vectors) took a second per analysis. Their texts are read,
        // not their vectors: the built-in embedding is a function of the text alone, and a
        // storm's incidents share a few texts, each embedded and compared once here. Decoding
        // 2,000 stored arrays was most of an analysis's CPU (benches/README.md, "analyses").
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT owner_id, content FROM embeddings WHERE user_id = $1 AND owner_kind = $2
             ORDER BY created_at DESC LIMIT $3",
        )
        .bind(user_id)
        .bind(kind)
        .bind(NEAREST_AMONG as i64)
        .fetch_all(db)
        .await?;
        let mut similarities: HashMap<&str, f32> = HashMap::new();
        for (_, content) in &rows {
            similarities
                .entry(content)
                .or_insert_with(|| cosine(&query, &self.embed(content)));
        }
        let mut ranked: Vec<(f32, &(String, String))> =
            rows.iter().map(|row| (similarities[row.1.as_str()], row)).collect();
        // Stable: among equals, the newest first.
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(ranked
            .into_iter()
            .take(limit)
            .map(|(similarity, (owner_id, content))| Neighbor {
                owner_id: owner_id.clone(),
                content: content.clone(),
                similarity,
            })
            .collect())
    }

    /// The user's incidents whose titles are nearest `text`, most similar first, with their
    /// similarity (read in one query; incidents gone from the read table are left out).
    pub async fn nearest_incidents(
        &self,
        db: &PgPool,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> sqlx::Result<Vec<(IncidentRow, f32)>> {
        let neighbors: Vec<(Uuid, f32)> = self
            .nearest(db, user_id, INCIDENT, text, limit)
            .await?
            .into_iter()
            .filter_map(|neighbor| Some((neighbor.owner_id.parse().ok()?, neighbor.similarity)))
            .collect();
        let ids: Vec<Uuid> = neighbors.iter().map(|&(id, _)| id).collect();
        let mut rows = find_incidents(db, user_id, &ids).await?.into_iter().peekable();
        // Both lists are in similarity order, the rows a subsequence of the neighbours.
        Ok(neighbors
            .into_iter()
            .filter_map(|(id, similarity)| rows.next_if(|row| row.id == id).map(|row| (row, similarity)))
            .collect())
    }
}

/// Keeps the title embedding of every incident, which similar-incident search reads. Fed by the
/// incident event tail rather than written by placement: off an alert's path, in batches of up
/// to a tail's read, and rebuilt by `vigil replay` like any read model.
pub struct IncidentEmbeddings {
    db: PgPool,
    vectors: VectorStore,
}

impl IncidentEmbeddings {
    pub fn new(db: PgPool) -> Self {
        Self {
            db,
            vectors: VectorStore::default(),
        }
    }
}

#[async_trait::async_trait]
impl EventConsumer for IncidentEmbeddings {
    fn name(&self) -> &'static str {
        "incident_embeddings"
    }

    fn aggregate_type(&self) -> &'static str {
        Incident::TYPE
    }

    fn payloads(&self) -> Payloads<'_> {
        Payloads::OfTypes(&["IncidentOpened"])
    }

    fn tables(&self) -> &'static [&'static str] {
        &["embeddings WHERE owner_kind = 'incident'"]
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        let mut opened = Vec::new();
        for event in events.iter().filter(|event| event.event_type == "IncidentOpened") {
            if let IncidentEvent::IncidentOpened { user_id, alert, .. } = event.envelope::<Incident>()?.payload {
                let vector = self.vectors.embed(&alert.title);
                opened.push((event, user_id, alert.title, vector));
            }
        }
        // Dated by the event, so that a replay writes the rows as they were.
        let entries: Vec<EmbeddingEntry> = opened
            .iter()
            .map(|(event, user_id, title, vector)| EmbeddingEntry {
                owner_id: &event.aggregate_id,
                user_id,
                content: title,
                vector,
                created_at: event.recorded_at,
            })
            .collect();
        self.vectors.upsert_many(&self.db, INCIDENT, &entries).await?;
        Ok(())
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        sqlx::query("DELETE FROM embeddings WHERE owner_kind = $1")
            .bind(INCIDENT)
            .execute(&self.db)
            .await?;
        Ok(())
    }
}
