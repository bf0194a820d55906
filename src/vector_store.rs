//! The vector store behind correlation's semantic score and similar-incident search. Vectors are
//! kept in PostgreSQL (`embeddings`) and compared in process; the embedding is the built-in
//! feature-hashing one, which needs no model and gives the same vector on every machine.

use sqlx::{PgExecutor, PgPool};
use vigil_aggregates::correlation::{cosine, Embedder, HashedNgramEmbedder};

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

impl VectorStore {
    pub fn embed(&self, text: &str) -> Vec<f32> {
        self.embedder.embed(text)
    }

    pub async fn upsert(
        &self,
        executor: impl PgExecutor<'_>,
        kind: &str,
        owner_id: &str,
        user_id: &str,
        content: &str,
        vector: &[f32],
    ) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO embeddings (owner_kind, owner_id, user_id, content, vector) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (owner_kind, owner_id) DO UPDATE SET content = EXCLUDED.content, vector = EXCLUDED.vector",
        )
        .bind(kind)
        .bind(owner_id)
        .bind(user_id)
        .bind(content)
        .bind(vector)
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
        let rows: Vec<(String, String, Vec<f32>)> =
            sqlx::query_as("SELECT owner_id, content, vector FROM embeddings WHERE user_id = $1 AND owner_kind = $2")
                .bind(user_id)
                .bind(kind)
                .fetch_all(db)
                .await?;
        let mut neighbors: Vec<Neighbor> = rows
            .into_iter()
            .map(|(owner_id, content, vector)| Neighbor {
                similarity: cosine(&query, &vector),
                owner_id,
                content,
            })
            .collect();
        neighbors.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
        neighbors.truncate(limit);
        Ok(neighbors)
    }
}
