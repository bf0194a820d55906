//! What placement keeps in memory per user and reads again only when the user's generation (a
//! count of changes, read with every batch) moved: silences and grouping rules, compiled.

use std::sync::Arc;

use dashmap::DashMap;
use uuid::Uuid;
use vigil_aggregates::silence::InvalidField;

/// Users whose items are kept at most before the store starts over.
const MAX_USERS: usize = 50_000;

pub struct KeptByGeneration<T> {
    by_user: DashMap<String, (i64, Arc<[T]>)>,
}

impl<T> Default for KeptByGeneration<T> {
    fn default() -> Self {
        Self {
            by_user: DashMap::new(),
        }
    }
}

impl<T> KeptByGeneration<T> {
    /// `user_id`'s items if they are of `generation`.
    pub fn get(&self, user_id: &str, generation: i64) -> Option<Arc<[T]>> {
        self.by_user
            .get(user_id)
            .filter(|entry| entry.0 == generation)
            .map(|entry| entry.1.clone())
    }

    /// Compiles `user_id`'s stored `definitions` (of `generation`) and keeps them. One that does
    /// not compile is left out with a warning: each was validated when created, so only a rule
    /// made stricter since can refuse it.
    pub fn keep_compiled<D>(
        &self,
        user_id: &str,
        generation: i64,
        definitions: Vec<(Uuid, D)>,
        compile: impl Fn(&D, Uuid) -> Result<T, InvalidField>,
        kind: &str,
    ) -> Arc<[T]> {
        let items: Arc<[T]> = definitions
            .into_iter()
            .filter_map(|(id, definition)| match compile(&definition, id) {
                Ok(item) => Some(item),
                Err(error) => {
                    tracing::warn!(%id, %error, "a stored {kind} does not compile");
                    None
                }
            })
            .collect();
        if self.by_user.len() >= MAX_USERS {
            self.by_user.clear();
        }
        self.by_user.insert(user_id.to_owned(), (generation, items.clone()));
        items
    }
}
