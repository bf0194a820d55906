//! What placement keeps in memory per user and reads again only when the user's generation (a
//! count of changes, read with every batch) moved: silences and grouping rules, compiled.

use std::sync::Arc;

use dashmap::DashMap;
use vigil_aggregates::silence::AlertFacts;

use super::parsers::NormalizedAlert;

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

    pub fn keep(&self, user_id: &str, generation: i64, items: Vec<T>) -> Arc<[T]> {
        let items: Arc<[T]> = items.into();
        if self.by_user.len() >= MAX_USERS {
            self.by_user.clear();
        }
        self.by_user.insert(user_id.to_owned(), (generation, items.clone()));
        items
    }
}

/// What matchers see of an alert.
pub fn facts(alert: &NormalizedAlert) -> AlertFacts<'_> {
    AlertFacts {
        source: alert.source.as_str(),
        service: alert.service.as_deref(),
        environment: alert.environment.as_deref(),
        severity: alert.severity.as_deref(),
        title: &alert.title,
        labels: &alert.labels,
    }
}
