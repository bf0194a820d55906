//! Users' service topologies as placement reads them, kept in memory per user: built from the
//! declared catalog and the learned evidence, dropped when the user declares a new catalog (in
//! this instance), and read again after [`TTL`] in any case (another instance's declaration, and
//! the learned edges, which change as the incidents' events are projected).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use dashmap::DashMap;
use sqlx::PgConnection;
use vigil_aggregates::correlation::topology::Topology;

/// How long a user's topology is used before it is read again.
pub const TTL: Duration = Duration::from_secs(10);
/// Users kept at most before the cache starts over.
const MAX_USERS: usize = 50_000;

#[derive(Default)]
pub struct TopologyCache {
    entries: DashMap<String, (Instant, Arc<Topology>)>,
}

impl TopologyCache {
    /// Each of `users`' topologies: from memory when fresh, else read (one round trip per user
    /// not in memory) on `conn`.
    pub async fn for_users(
        &self,
        conn: &mut PgConnection,
        users: &[&str],
    ) -> sqlx::Result<HashMap<String, Arc<Topology>>> {
        let mut found = HashMap::new();
        for &user in users {
            if found.contains_key(user) {
                continue;
            }
            let fresh = self
                .entries
                .get(user)
                .filter(|entry| entry.0.elapsed() < TTL)
                .map(|entry| entry.1.clone());
            let topology = match fresh {
                Some(topology) => topology,
                None => {
                    let (catalog, observations) = vigil_projections::topology::load(&mut *conn, user).await?;
                    let topology = Arc::new(Topology::new(&catalog, &observations));
                    if self.entries.len() >= MAX_USERS {
                        self.entries.clear();
                    }
                    self.entries.insert(user.to_owned(), (Instant::now(), topology.clone()));
                    topology
                }
            };
            found.insert(user.to_owned(), topology);
        }
        Ok(found)
    }

    /// Forgets `user_id`'s topology: the next placement reads it again.
    pub fn invalidate(&self, user_id: &str) {
        self.entries.remove(user_id);
    }
}
