#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("event {aggregate_type}/{aggregate_id}#{sequence} does not deserialize: {source}")]
    Deserialize {
        aggregate_type: String,
        aggregate_id: String,
        sequence: i64,
        source: serde_json::Error,
    },
    #[error("{consumer} could not read every event within {waited:?}: a transaction stays open")]
    Stalled {
        consumer: &'static str,
        waited: std::time::Duration,
    },
    /// A reactor could not carry out its reaction (the batch comes again).
    #[error("{consumer}: {reason}")]
    Reaction { consumer: &'static str, reason: String },
    /// An online rebuild cannot start or go on (see [`crate::rebuild`]).
    #[error("online rebuild: {0}")]
    Rebuild(String),
    #[error("stream {aggregate_id} misses events {from}..={to}")]
    MissingEvents { aggregate_id: String, from: i64, to: i64 },
}
