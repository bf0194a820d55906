use tokio::task::{JoinError, JoinHandle};

/// Aborts the task when dropped, so that cancelling a worker also stops its handlers.
pub(super) struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// Waits for the task to end by itself.
    pub async fn join(mut self) -> Result<T, JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
