//! `vigil replay --online` rebuilds the read tables beside the live ones while the service serves
//! and writes, and switches them in: no request fails meanwhile, the tables it leaves equal a
//! fresh replay's, and a rebuild that dies half-way leaves the live tables as they were.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use async_trait::async_trait;
use reqwest::Method;
use serde_json::Value;
use tokio::sync::Notify;
use vigil::event_store::EventStore;
use vigil_projections::{checksums, rebuild, EventConsumer, Payloads, ProjectionError, ReplayProgress, StoredEvent};

use crate::{
    correlation::alert_of,
    helpers::{eventually, spawn_app_with, TestApp},
    metrics::scrape,
    replay::{a_day_of_work, settled_checksums},
};

/// Alerts posted and incidents read, over and over until `stop`: the failures (anything but the
/// status each answers when all is well), and how many requests were made.
async fn keep_serving(app: &TestApp, user: &str, stop: &AtomicBool) -> (Vec<String>, usize) {
    let (mut failures, mut requests) = (Vec::new(), 0);
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        // New services open incidents, repeated ones join them.
        let service = format!("svc-{}", n % 7);
        let alert = alert_of(&service, &format!("{service} timeouts, attempt {n}"), 30 * n);
        let posted = app
            .send_as(user, Method::POST, "/api/source_a/alerts", Some(&alert))
            .await;
        let listed = app.send_as(user, Method::GET, "/api/incidents", None).await;
        requests += 2;
        for (what, response, wanted) in [("post", posted, 202), ("list", listed, 200)] {
            if response.status() != wanted {
                failures.push(format!("{what}: {} {:?}", response.status(), response.text().await));
            }
        }
        let list: Value = app
            .send_as(user, Method::GET, "/api/incidents", None)
            .await
            .json()
            .await
            .unwrap_or_default();
        requests += 1;
        if let Some(id) = list["incidents"][0]["id"].as_str() {
            let detail = app
                .send_as(user, Method::GET, &format!("/api/incidents/{id}"), None)
                .await;
            requests += 1;
            if detail.status() != 200 {
                failures.push(format!("detail: {}", detail.status()));
            }
        }
    }
    (failures, requests)
}

async fn schema_exists(app: &TestApp, name: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(name)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

async fn generous_app() -> TestApp {
    spawn_app_with(|config| {
        config.rate_limit_per_minute = 1_000_000;
        config.ingest_rate_limit_per_minute = 1_000_000;
    })
    .await
}

#[tokio::test]
async fn an_online_rebuild_under_load_switches_in_tables_equal_to_a_fresh_replay() {
    let app = generous_app().await;
    a_day_of_work(&app).await;
    let user = app.new_user().await.id;
    let stop = AtomicBool::new(false);
    let progress = Arc::new(ReplayProgress::default());

    let serving = keep_serving(&app, &user, &stop);
    let rebuilding = async {
        // Writes land in the live tables before, during and after the rebuild.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let rebuilt = app.state.events.rebuild_online(&app.db, None, &progress).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        stop.store(true, Ordering::SeqCst);
        rebuilt
    };
    let ((failures, requests), rebuilt) = tokio::join!(serving, rebuilding);
    let rebuilt = rebuilt.expect("the online rebuild completes");
    assert!(
        failures.is_empty(),
        "{} of {requests} requests failed: {failures:?}",
        failures.len()
    );
    assert!(requests > 20, "the service was used throughout ({requests} requests)");
    let names: Vec<&str> = rebuilt.iter().map(|(name, _)| *name).collect();
    assert!(
        names.contains(&"incidents") && names.contains(&"chat_sessions"),
        "{names:?}"
    );
    let replayed: u64 = progress.snapshot().iter().map(|p| p.done).sum();
    assert!(replayed > 0, "the progress counted the events replayed");
    for schema in [rebuild::SCHEMA, "vigil_retired"] {
        assert!(
            !schema_exists(&app, schema).await,
            "{schema} is dropped after the switch"
        );
    }
    let published: i64 = sqlx::query_scalar("SELECT count(*) FROM projection_rebuilds")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(published, 0, "a finished rebuild reports no progress");

    // The switched-in tables keep what the live ones had: the analyses' foreign keys, checked,
    // and their id sequences.
    let keys: Vec<(String, bool)> = sqlx::query_as(
        "SELECT conrelid::regclass::text, convalidated FROM pg_constraint
         WHERE contype = 'f' AND confrelid = 'public.incidents'::regclass ORDER BY 1",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    let tables: Vec<&str> = keys.iter().map(|(table, _)| table.as_str()).collect();
    assert_eq!(
        tables,
        ["incident_citations", "incident_suggestions", "incident_thoughts"]
    );
    assert!(keys.iter().all(|(_, validated)| *validated), "{keys:?}");
    let sequence: Option<String> =
        sqlx::query_scalar("SELECT pg_get_serial_sequence('public.incident_thoughts', 'id')")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(sequence.as_deref(), Some("public.incident_thoughts_id_seq"));

    // Alerts posted after the switch reached the new tables through the live write path.
    let after = settled_checksums(&app).await;
    app.state.events.replay(&app.db, None).await.unwrap();
    let fresh = checksums(&app.db, &app.state.events.consumers).await.unwrap();
    assert_eq!(after, fresh, "the rebuilt tables, kept current, equal a fresh replay");
}

/// Hands batches to the projection until it reaches `stall_at`, then tells `stalled` and never
/// returns: a rebuild killed while it replays.
struct StallsAt {
    inner: Arc<dyn EventConsumer>,
    stall_at: &'static str,
    stalled: Arc<Notify>,
}

#[async_trait]
impl EventConsumer for StallsAt {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn aggregate_type(&self) -> &'static str {
        self.inner.aggregate_type()
    }

    fn payloads(&self) -> Payloads<'_> {
        self.inner.payloads()
    }

    fn tables(&self) -> &'static [&'static str] {
        self.inner.tables()
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        if self.inner.name() == self.stall_at {
            self.stalled.notify_one();
            std::future::pending::<()>().await;
        }
        self.inner.consume(events).await
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        self.inner.reset().await
    }
}

#[tokio::test]
async fn a_rebuild_killed_half_way_leaves_the_live_tables_and_the_next_one_starts_clean() {
    let app = generous_app().await;
    a_day_of_work(&app).await;
    let live = settled_checksums(&app).await;

    let shadow = rebuild::pool(&app.db);
    let stalled = Arc::new(Notify::new());
    let consumers: Vec<Arc<dyn EventConsumer>> = EventStore::projections(&shadow)
        .into_iter()
        .map(|inner| {
            Arc::new(StallsAt {
                inner,
                stall_at: "incident_analysis",
                stalled: stalled.clone(),
            }) as Arc<dyn EventConsumer>
        })
        .collect();
    let rebuilding = tokio::spawn({
        let (db, shadow, consumers) = (app.db.clone(), shadow.clone(), consumers.clone());
        async move {
            let progress = Arc::new(ReplayProgress::default());
            rebuild::rebuild_online(&db, &shadow, &consumers, &progress).await
        }
    });
    stalled.notified().await;
    // Every instance's /metrics shows how far it has come: incidents replayed whole, the
    // analyses not yet.
    let exposition = eventually("the rebuild's progress on /metrics", || async {
        let exposition = scrape(&app).await;
        let shown = exposition
            .matching(RATIO, &[("projection", "incident_analysis")])
            .next()
            .is_some();
        shown.then_some(exposition)
    })
    .await;
    assert_eq!(exposition.sum(RATIO, &[("projection", "incidents")]), 1.0);
    assert_eq!(exposition.sum(REMAINING, &[("projection", "incidents")]), 0.0);
    assert!(exposition.sum(REMAINING, &[("projection", "incident_analysis")]) > 0.0);
    // Killed: none of its own clean-up runs.
    rebuilding.abort();
    let _ = rebuilding.await;
    shadow.close().await;
    assert!(schema_exists(&app, rebuild::SCHEMA).await, "it died half-built");
    let rebuilt_incidents: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.incidents", rebuild::SCHEMA))
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(rebuilt_incidents > 0, "incidents were replayed before it died");
    assert_eq!(
        checksums(&app.db, &app.state.events.consumers).await.unwrap(),
        live,
        "the live tables are untouched"
    );

    // The next rebuild drops what the dead one left (once its connection's lock is gone).
    let progress = Arc::new(ReplayProgress::default());
    let mut tries = 0;
    loop {
        match app.state.events.rebuild_online(&app.db, None, &progress).await {
            Ok(_) => break,
            Err(error) if error.to_string().contains("another online rebuild") && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the second rebuild failed: {error:#}"),
        }
    }
    assert!(!schema_exists(&app, rebuild::SCHEMA).await);
    assert_eq!(checksums(&app.db, &app.state.events.consumers).await.unwrap(), live);
    assert!(
        scrape(&app).await.matching(RATIO, &[]).next().is_none(),
        "no rebuild runs"
    );
}

const RATIO: &str = "vigil_projection_rebuild_progress_ratio";
const REMAINING: &str = "vigil_projection_rebuild_events_remaining";
