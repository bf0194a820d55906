//! Batched placement: one batch places several users' notifications exactly as placing them one
//! by one would, a read row that lags its events never loses an alert, and two instances placing
//! for one user at once decide as if one after the other.

use reqwest::Method;
use serde_json::{json, Value};
use vigil::ingest::{
    parsers::{self, Source},
    placement::{Notification, Placer},
    service::IngestedAlert,
};
use vigil_aggregates::correlation::CorrelationConfig;
use vigil_projections::incidents::all_incidents;

use crate::{
    helpers::{eventually, spawn_app_with, spawn_app_without_workers, TestApp},
    ingestion::{fixture, post_alert},
};

fn notification(user: &str, name: &str) -> Notification {
    let payload = fixture("source_a", name);
    let alerts = parsers::parse(Source::SourceA, &payload, chrono::Utc::now()).unwrap();
    Notification::new(
        user.to_owned(),
        alerts,
        &payload.to_string().into(),
        &Default::default(),
    )
}

fn placer(app: &TestApp) -> Placer {
    Placer::new(
        app.db.clone(),
        std::sync::Arc::new(CorrelationConfig::default()),
        Default::default(),
        vigil_projections::AppendAnnouncer::start(app.db.clone()),
        Default::default(),
    )
}

/// Places `batch` on a connection of the placer's own, as a lane does.
async fn place(app: &TestApp, batch: &[Notification]) -> Vec<Vec<IngestedAlert>> {
    let placer = placer(app);
    let mut conn = placer.connect().await.unwrap();
    placer.place(&mut conn, batch).await.unwrap()
}

async fn event_types(app: &TestApp, user: &str, incident: &str) -> Vec<String> {
    app.incident_events(user, incident)
        .await
        .iter()
        .map(|event| event["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Another writer appends to the incident: a PATCH marks its analysis running.
async fn mark_running(app: &TestApp, user: &str, incident: &str) {
    let patched = app
        .send_as(
            user,
            Method::PATCH,
            &format!("/api/incidents/{incident}"),
            Some(&json!({ "auroraStatus": "running" })),
        )
        .await;
    assert_eq!(patched.status(), 200);
}

/// Takes [`mark_running`]'s event back out of the incident's read row (not its events).
async fn unproject_running(app: &TestApp, incident: &str) {
    sqlx::query("UPDATE incidents SET version = version - 1, aurora_status = 'idle' WHERE id = $1::uuid")
        .bind(incident)
        .execute(&app.db)
        .await
        .unwrap();
}

#[tokio::test]
async fn one_batch_places_as_one_by_one_would() {
    let app = spawn_app_without_workers().await;
    let (alice, bob, carol) = (
        app.new_user().await.id,
        app.new_user().await.id,
        app.new_user().await.id,
    );
    let sequence = ["firing", "firing", "related", "resolved"];

    let mut batch: Vec<Notification> = sequence.iter().map(|name| notification(&alice, name)).collect();
    batch.push(notification(&bob, "firing"));
    let outcomes = place(&app, &batch).await;
    let one_by_one: Vec<Vec<IngestedAlert>> = {
        let mut outcomes = Vec::new();
        for name in sequence {
            outcomes.push(place(&app, &[notification(&carol, name)]).await.remove(0));
        }
        outcomes
    };

    let [opened, redelivered, related, resolved, bobs] = [0, 1, 2, 3, 4].map(|n| outcomes[n][0].clone());
    let incident = opened.incident_id.expect("the first alert opens an incident");
    assert!(!opened.correlated);
    assert_eq!(redelivered, opened, "a redelivery in the same batch is the same alert");
    assert_eq!((related.incident_id, related.correlated), (Some(incident), true));
    assert_eq!((resolved.incident_id, resolved.correlated), (Some(incident), false));
    assert_ne!(
        bobs.incident_id,
        Some(incident),
        "another user's alert is never correlated"
    );

    let shape = |outcomes: &[IngestedAlert]| -> Vec<(bool, bool)> {
        outcomes
            .iter()
            .map(|o| (o.incident_id == outcomes[0].incident_id, o.correlated))
            .collect()
    };
    let batched: Vec<IngestedAlert> = outcomes[..4].iter().map(|o| o[0].clone()).collect();
    let separate: Vec<IngestedAlert> = one_by_one.iter().map(|o| o[0].clone()).collect();
    assert_eq!(shape(&batched), shape(&separate));

    let incident = incident.to_string();
    assert_eq!(
        event_types(&app, &alice, &incident).await,
        ["IncidentOpened", "AlertCorrelated", "AlertResolved"]
    );
    let detail: Value = app
        .send_as(&alice, Method::GET, &format!("/api/incidents/{incident}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["incident"]["correlatedAlertCount"], 1);
    assert_eq!(detail["incident"]["correlatedAlerts"].as_array().unwrap().len(), 1);

    // The read rows written with the batch are exactly what the projection makes of the events.
    app.assert_incidents_replay_as_live().await;
}

#[tokio::test]
async fn a_batch_opening_and_growing_several_incidents_writes_each_its_own_rows() {
    let app = spawn_app_without_workers().await;
    let titles = [
        "Checkout latency high",
        "Disk almost full on db-1",
        "Payment webhook failures",
    ];
    let mut batch = Vec::new();
    let mut users = Vec::new();
    for title in titles {
        let user = app.new_user().await.id;
        for name in ["firing", "related"] {
            let mut notification = notification(&user, name);
            if name == "firing" {
                notification.alerts[0].title = title.to_owned();
            }
            batch.push(notification);
        }
        users.push(user);
    }

    let outcomes = place(&app, &batch).await;

    let vectors = vigil::vector_store::VectorStore::default();
    for (n, title) in titles.iter().enumerate() {
        let (opened, related) = (&outcomes[2 * n][0], &outcomes[2 * n + 1][0]);
        let incident = opened.incident_id.expect("each user's first alert opens an incident");
        assert_eq!((related.incident_id, related.correlated), (Some(incident), true));
        let stored: Vec<f32> = eventually("the incident's embedding, from the event tail", || async {
            sqlx::query_scalar(
                "SELECT vector FROM embeddings WHERE owner_kind = 'incident' AND owner_id = $1 AND user_id = $2",
            )
            .bind(incident.to_string())
            .bind(&users[n])
            .fetch_optional(&app.db)
            .await
            .unwrap()
        })
        .await;
        assert_eq!(stored, vectors.embed(title), "{title}: the embedding of its own title");
        let detail: Value = app
            .send_as(&users[n], Method::GET, &format!("/api/incidents/{incident}"), None)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(detail["incident"]["correlatedAlertCount"], 1, "{title}");
        assert_eq!(detail["incident"]["alert"]["title"], *title);
    }

    app.assert_incidents_replay_as_live().await;

    let embeddings = || async {
        sqlx::query_as::<_, (String, String, Vec<f32>, chrono::DateTime<chrono::Utc>)>(
            "SELECT owner_id, content, vector, created_at FROM embeddings WHERE owner_kind = 'incident' ORDER BY owner_id",
        )
        .fetch_all(&app.db)
        .await
        .unwrap()
    };
    let kept = embeddings().await;
    assert_eq!(kept.len(), titles.len());
    app.state
        .events
        .replay(&app.db, Some("incident_embeddings"))
        .await
        .unwrap();
    assert_eq!(embeddings().await, kept, "replay rebuilds the embeddings as they were");
}

#[tokio::test]
async fn a_lagging_read_row_never_loses_an_alert() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let opened = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let incident = opened["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    let resolved = app
        .send_as(
            &user,
            Method::PATCH,
            &format!("/api/incidents/{incident}"),
            Some(&json!({ "status": "resolved" })),
        )
        .await;
    assert_eq!(resolved.status(), 200);
    // The read row still says investigating, as it would before a lagging projection caught up.
    sqlx::query("UPDATE incidents SET status = 'investigating' WHERE id = $1::uuid")
        .bind(&incident)
        .execute(&app.db)
        .await
        .unwrap();

    let related = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "related")).await;
    let placed = &related["alerts"][0];
    assert_eq!(placed["correlated"], false, "{related}");
    assert_ne!(
        placed["incident_id"],
        json!(incident),
        "a resolved incident takes no alert"
    );
    assert!(!event_types(&app, &user, &incident)
        .await
        .contains(&"AlertCorrelated".to_owned()));
}

#[tokio::test]
async fn a_read_row_behind_its_events_is_filled_in_before_a_batch_projects() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let opened = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let incident = opened["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    mark_running(&app, &user, &incident).await;
    // The read row misses the PATCH's event, as when its projection was deferred to the tail.
    unproject_running(&app, &incident).await;

    let related = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "related")).await;
    assert_eq!(related["alerts"][0]["incident_id"], json!(incident), "{related}");

    let detail: Value = app
        .send_as(&user, Method::GET, &format!("/api/incidents/{incident}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        detail["incident"]["auroraStatus"], "running",
        "the missed event is applied first"
    );
    assert_eq!(detail["incident"]["correlatedAlertCount"], 1);
    app.assert_incidents_replay_as_live().await;
}

/// The correlated alert that fills an incident says so: its read row stops being offered to
/// correlation (placement no longer fetches it), and the next related alert opens a new incident.
#[tokio::test]
async fn a_full_incident_leaves_the_candidates_and_the_next_alert_opens_another() {
    let app = spawn_app_with(|config| {
        config.correlation_max_alerts = 2;
        config.run_workers = false;
    })
    .await;
    let user = app.new_user().await.id;
    let mut placed = Vec::new();
    for n in 0..4 {
        let mut body = fixture("source_a", "related");
        body["alerts"][0]["fingerprint"] = json!(format!("{n:016x}"));
        let outcome = post_alert(&app, &user, "/api/source_a/alerts", &body).await;
        placed.push(outcome["alerts"][0]["incident_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(placed[1..3], [placed[0].clone(), placed[0].clone()]);
    assert_ne!(
        placed[3], placed[0],
        "the full incident takes no third correlated alert"
    );

    let takes_alerts = || async {
        let rows: Vec<(String, bool)> =
            sqlx::query_as("SELECT id::text, takes_alerts FROM incidents ORDER BY correlated_alert_count DESC")
                .fetch_all(&app.db)
                .await
                .unwrap();
        rows
    };
    let live = takes_alerts().await;
    assert_eq!(live, [(placed[0].clone(), false), (placed[3].clone(), true)]);
    app.state.events.replay(&app.db, Some("incidents")).await.unwrap();
    assert_eq!(takes_alerts().await, live, "a replay reads the same from the events");
}

/// Two instances deciding for one user at once, each reading before the other writes: both would
/// open an incident. The write that comes second finds the user's cursor moved on, writes
/// nothing, and its batch is placed again, into the first one's incident.
#[tokio::test]
async fn two_instances_placing_for_one_user_at_once_open_one_incident() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    sqlx::query("INSERT INTO ingestion_cursors (user_id, placed) VALUES ($1, 0)")
        .bind(&user)
        .execute(&app.db)
        .await
        .unwrap();
    // Holds both writes back (they move the cursor) until both reads are done.
    let mut hold = app.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM ingestion_cursors WHERE user_id = $1 FOR UPDATE")
        .bind(&user)
        .execute(&mut *hold)
        .await
        .unwrap();
    let race = |placer: Placer, notification: Notification| {
        tokio::spawn(async move {
            let mut conn = placer.connect().await.unwrap();
            let mut placed = placer.place(&mut conn, &[notification]).await.unwrap();
            placed.remove(0).remove(0)
        })
    };
    let firing = race(placer(&app), notification(&user, "firing"));
    let related = race(placer(&app), notification(&user, "related"));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    hold.commit().await.unwrap();
    let (firing, related) = (firing.await.unwrap(), related.await.unwrap());

    let incidents = all_incidents(&app.db).await.unwrap();
    assert_eq!(incidents.len(), 1, "{firing:?} {related:?}");
    assert_eq!(firing.incident_id, related.incident_id);
    assert_eq!(
        [firing.correlated, related.correlated].iter().filter(|c| **c).count(),
        1,
        "one opened the incident, the other joined it"
    );
    assert_eq!(incidents[0].correlated_alert_count, 1);
    let placed: i64 = sqlx::query_scalar("SELECT placed FROM ingestion_cursors WHERE user_id = $1")
        .bind(&user)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(placed, 2, "each batch moved the cursor on once");
}

#[tokio::test]
async fn a_lane_whose_connection_died_places_the_next_notification_on_a_new_one() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let firing = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;

    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = $1",
    )
    .bind(vigil::db::LANE_APPLICATION_NAME)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(terminated, [true], "the lane holds one connection of its own");

    let related = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "related")).await;
    assert_eq!(related["alerts"][0]["incident_id"], firing["alerts"][0]["incident_id"]);
    assert_eq!(related["alerts"][0]["correlated"], true);
}

#[tokio::test]
async fn a_new_incident_written_with_what_joined_it_in_its_batch_equals_its_events_applied_one_by_one() {
    use vigil_projections::{incidents::IncidentsReadModel, ReadModel, StoredEvent};

    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let batch = [
        notification(&user, "firing"),
        notification(&user, "related"),
        notification(&user, "resolved"),
    ];
    let outcomes = place(&app, &batch).await;
    let id = outcomes[0][0].incident_id.unwrap();
    assert_eq!(
        outcomes[1][0].incident_id,
        Some(id),
        "the related alert joins in the same batch"
    );
    assert_eq!(outcomes[2][0].incident_id, Some(id), "and the firing one's recovery");
    let live = vigil_projections::incidents::find_incident(&app.db, &user, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live.correlated_alert_count, 1);

    let mut tx = app.db.begin().await.unwrap();
    sqlx::query("DELETE FROM incidents WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let events: Vec<StoredEvent> = sqlx::query_as(&format!(
        "{} WHERE aggregate_id = $1 ORDER BY sequence",
        StoredEvent::SELECT
    ))
    .bind(id.to_string())
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert_eq!(events.len(), 3, "opened, correlated, resolved");
    for event in &events {
        let envelope = event.envelope::<vigil_aggregates::incident::Incident>().unwrap();
        IncidentsReadModel.apply(&mut tx, &envelope).await.unwrap();
    }
    let one_by_one = vigil_projections::incidents::find_incident(&mut *tx, &user, id)
        .await
        .unwrap()
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(one_by_one, live);
}

/// A nearest-neighbour search compares the user's most recent entries only, so that its cost
/// does not grow with the user's whole history.
#[tokio::test]
async fn nearest_neighbours_are_searched_among_the_most_recent_entries() {
    use vigil::vector_store::{EmbeddingEntry, VectorStore, INCIDENT, NEAREST_AMONG};
    let app = spawn_app_without_workers().await;
    let vectors = VectorStore::default();
    let start = chrono::Utc::now() - chrono::Duration::days(30);
    let titles: Vec<String> = (0..=NEAREST_AMONG)
        .map(|n| match n {
            0 => "checkout-api disk full".to_owned(),
            1 => "checkout-api disk almost full".to_owned(),
            n => format!("unrelated alert number {n}"),
        })
        .collect();
    let embedded: Vec<Vec<f32>> = titles.iter().map(|title| vectors.embed(title)).collect();
    let ids: Vec<String> = (0..titles.len()).map(|n| format!("entry-{n}")).collect();
    let entries: Vec<EmbeddingEntry> = (0..titles.len())
        .map(|n| EmbeddingEntry {
            owner_id: &ids[n],
            user_id: "neighbour",
            content: &titles[n],
            vector: &embedded[n],
            created_at: start + chrono::Duration::seconds(n as i64),
        })
        .collect();
    vectors.upsert_many(&app.db, INCIDENT, &entries).await.unwrap();

    let nearest = vectors
        .nearest(&app.db, "neighbour", INCIDENT, "checkout-api disk full", 2)
        .await
        .unwrap();
    let found: Vec<&str> = nearest.iter().map(|neighbor| neighbor.owner_id.as_str()).collect();
    assert_eq!(found[0], "entry-1", "the most similar of the recent entries");
    assert!(
        !found.contains(&"entry-0"),
        "the oldest entry, one past the most recent {NEAREST_AMONG}, is not compared: {found:?}"
    );
}

/// Placement keeps the incidents it placed into; another writer's events (an analysis marking
/// itself running) are read after what it kept, whether the read row shows them already or
/// not yet, and the next alert follows on from them.
#[tokio::test]
async fn an_incident_another_writer_appended_to_is_caught_up_from_what_placement_kept() {
    let app = spawn_app_without_workers().await;
    let placer = placer(&app);
    let mut conn = placer.connect().await.unwrap();
    for row_lags in [false, true] {
        let user = app.new_user().await.id;
        let opened = placer.place(&mut conn, &[notification(&user, "firing")]).await.unwrap();
        let incident = opened[0][0].incident_id.unwrap().to_string();
        mark_running(&app, &user, &incident).await;
        if row_lags {
            unproject_running(&app, &incident).await;
        }

        let related = placer
            .place(&mut conn, &[notification(&user, "related")])
            .await
            .unwrap();
        assert_eq!(
            related[0][0].incident_id.map(|id| id.to_string()),
            Some(incident.clone())
        );
        assert_eq!(
            event_types(&app, &user, &incident).await,
            ["IncidentOpened", "AnalysisStatusChanged", "AlertCorrelated"],
            "row lags: {row_lags}"
        );
        let detail: Value = app
            .send_as(&user, Method::GET, &format!("/api/incidents/{incident}"), None)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(detail["incident"]["auroraStatus"], "running", "row lags: {row_lags}");
        assert_eq!(detail["incident"]["correlatedAlertCount"], 1, "row lags: {row_lags}");
    }
    app.assert_incidents_replay_as_live().await;
}
