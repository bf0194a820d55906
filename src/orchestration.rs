//! Orchestration resources (spec: Orchestration resource records) as the agent's inventory tool
//! finds them: pods and nodes of users' clusters, upserted on their natural keys, so that every
//! scan updates the rows it saw instead of adding new ones.

use sqlx::PgPool;

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Pod {
    pub namespace: String,
    pub pod_name: String,
    pub status: String,
    pub project_id: String,
    pub cluster_name: String,
    pub user_id: String,
    pub provider: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Node {
    pub node_name: String,
    pub status: String,
    pub project_id: String,
    pub cluster_name: String,
    pub user_id: String,
    pub provider: Option<String>,
}

/// Inserts the pod or updates its status and provider; returns the row id.
pub async fn upsert_pod(db: &PgPool, pod: &Pod) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO orchestration_pods (namespace, pod_name, status, project_id, cluster_name, user_id, provider)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT ON CONSTRAINT orchestration_pods_key DO UPDATE
         SET status = EXCLUDED.status, provider = EXCLUDED.provider, updated_at = now()
         RETURNING id",
    )
    .bind(&pod.namespace)
    .bind(&pod.pod_name)
    .bind(&pod.status)
    .bind(&pod.project_id)
    .bind(&pod.cluster_name)
    .bind(&pod.user_id)
    .bind(&pod.provider)
    .fetch_one(db)
    .await
}

/// Inserts the node or updates its status and provider; returns the row id.
pub async fn upsert_node(db: &PgPool, node: &Node) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO orchestration_nodes (node_name, status, project_id, cluster_name, user_id, provider)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT ON CONSTRAINT orchestration_nodes_key DO UPDATE
         SET status = EXCLUDED.status, provider = EXCLUDED.provider, updated_at = now()
         RETURNING id",
    )
    .bind(&node.node_name)
    .bind(&node.status)
    .bind(&node.project_id)
    .bind(&node.cluster_name)
    .bind(&node.user_id)
    .bind(&node.provider)
    .fetch_one(db)
    .await
}

/// The user's pods in one cluster, by namespace and name.
pub async fn pods(db: &PgPool, user_id: &str, project_id: &str, cluster_name: &str) -> sqlx::Result<Vec<Pod>> {
    sqlx::query_as(
        "SELECT namespace, pod_name, status, project_id, cluster_name, user_id, provider FROM orchestration_pods
         WHERE user_id = $1 AND project_id = $2 AND cluster_name = $3 ORDER BY namespace, pod_name",
    )
    .bind(user_id)
    .bind(project_id)
    .bind(cluster_name)
    .fetch_all(db)
    .await
}

/// The user's nodes in one cluster, by name.
pub async fn nodes(db: &PgPool, user_id: &str, project_id: &str, cluster_name: &str) -> sqlx::Result<Vec<Node>> {
    sqlx::query_as(
        "SELECT node_name, status, project_id, cluster_name, user_id, provider FROM orchestration_nodes
         WHERE user_id = $1 AND project_id = $2 AND cluster_name = $3 ORDER BY node_name",
    )
    .bind(user_id)
    .bind(project_id)
    .bind(cluster_name)
    .fetch_all(db)
    .await
}
