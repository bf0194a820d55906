//! The read side: the tail applies what the command path missed, a lost read row is rebuilt
//! from the event store, and a replay reproduces the live table row for row.

use std::str::FromStr;

use chrono::Utc;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Connection;
use vigil::event_store::{execute, Actor};
use vigil_aggregates::chat_session::{ChatSession, ChatSessionCommand, Message};
use vigil_projections::chat_sessions::all_rows;

use crate::helpers::{eventually, spawn_app};

#[tokio::test]
async fn the_tail_applies_events_whose_projection_never_ran() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let session = app.create_session(&user, &json!({ "title": "before the crash" })).await;
    let id = session["id"].as_str().unwrap();

    // A framework with no queries commits the event and never projects it, as a process that
    // died between commit and dispatch would.
    let crashing = postgres_es::postgres_cqrs::<ChatSession>(app.db.clone(), vec![], ());
    let command = ChatSessionCommand::AppendMessage {
        user_id: user.clone(),
        message: Message::user("still here?"),
        at: Utc::now(),
    };
    crashing.execute(id, command).await.unwrap();

    let path = format!("/chat_api/sessions/{id}");
    let restored = eventually("the tail to apply the appended message", || async {
        let body: Value = app.send_as(&user, Method::GET, &path, None).await.json().await.unwrap();
        (body["messages"].as_array().map(Vec::len) == Some(1)).then_some(body)
    })
    .await;
    assert_eq!(restored["messages"][0]["text"], "still here?");
}

#[tokio::test]
async fn a_dropped_read_row_is_rebuilt_from_the_event_store() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let messages = json!([{ "sender": "user", "text": "one" }, { "sender": "assistant", "text": "two" }]);
    let session = app
        .create_session(&user, &json!({ "title": "durable", "messages": messages }))
        .await;
    let id = session["id"].as_str().unwrap();
    // Let the tail pass the creation first: it is the PUT below, not the tail, that must find the
    // row missing and rebuild it.
    let sessions = app
        .state
        .events
        .consumers
        .iter()
        .find(|consumer| consumer.name() == "chat_sessions")
        .unwrap()
        .clone();
    vigil_projections::Tail::new(app.db.clone(), sessions)
        .catch_up()
        .await
        .unwrap();

    sqlx::query("DELETE FROM chat_sessions WHERE id = $1::uuid")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    let path = format!("/chat_api/sessions/{id}");
    assert_eq!(
        app.send_as(&user, Method::GET, &path, None).await.status(),
        404,
        "the row is gone"
    );

    let renamed = app
        .send_as(&user, Method::PUT, &path, Some(&json!({ "title": "durable again" })))
        .await;
    assert_eq!(renamed.status(), 200);
    let body: Value = renamed.json().await.unwrap();
    assert_eq!(body["title"], "durable again");
    assert_eq!(body["messages"], messages, "history restored from the event store");
    assert_eq!(body["created_at"], session["created_at"]);
}

#[tokio::test]
async fn replay_rebuilds_the_table_row_for_row() {
    let app = spawn_app().await;
    let alice = app.new_user().await.id;
    let bob = app.new_user().await.id;
    for (user, n) in [(&alice, 0), (&alice, 1), (&bob, 2)] {
        let session = app
            .create_session(
                user,
                &json!({ "messages": [{ "sender": "user", "text": format!("question {n}") }] }),
            )
            .await;
        let path = format!("/chat_api/sessions/{}", session["id"].as_str().unwrap());
        let update = json!({ "ui_state": { "selectedProviders": ["cloud_a"] }, "messages": [{ "sender": "user", "text": "edited" }] });
        app.send_as(user, Method::PUT, &path, Some(&update)).await;
        if n == 0 {
            // Every other kind of event: touched, renamed, messages revised past the first, message
            // appended, status changed.
            app.send_as(user, Method::PUT, &path, Some(&json!({}))).await;
            app.send_as(user, Method::PUT, &path, Some(&json!({ "title": "renamed" })))
                .await;
            let grown =
                json!({ "messages": [{ "sender": "user", "text": "edited" }, { "sender": "user", "text": "more" }] });
            app.send_as(user, Method::PUT, &path, Some(&grown)).await;
            let id = session["id"].as_str().unwrap();
            let append = ChatSessionCommand::AppendMessage {
                user_id: user.clone(),
                message: Message::assistant("answer"),
                at: Utc::now(),
            };
            execute(&app.state.events.chat_sessions, id, append, Actor::User(user))
                .await
                .unwrap();
            let complete = ChatSessionCommand::Complete {
                user_id: user.clone(),
                at: Utc::now(),
            };
            execute(&app.state.events.chat_sessions, id, complete, Actor::User(user))
                .await
                .unwrap();
        }
        if n == 1 {
            app.send_as(user, Method::DELETE, &path, None).await;
        }
    }
    let live = all_rows(&app.db).await.unwrap();
    assert_eq!(live.len(), 3);
    let versions: Vec<i64> = live.iter().map(|row| row.version).collect();
    let expected_versions = [8, 4, 3];
    let mut sorted = versions.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sorted, expected_versions, "the live table is current with every event");

    let rebuilt = app.state.events.replay(&app.db, Some("chat_sessions")).await.unwrap();
    // 3 created, 3 × (messages revised + ui state changed), 5 more on the first, 1 deleted.
    assert_eq!(rebuilt, [("chat_sessions", 15)]);
    assert_eq!(all_rows(&app.db).await.unwrap(), live);

    assert!(app
        .state
        .events
        .replay(&app.db, Some("no_such_projection"))
        .await
        .is_err());
}

#[tokio::test]
async fn the_replay_command_rebuilds_a_truncated_table() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    app.create_session(&user, &json!({ "title": "one" })).await;
    app.create_session(&user, &json!({ "title": "two" })).await;
    let live = all_rows(&app.db).await.unwrap();
    sqlx::query("TRUNCATE chat_sessions").execute(&app.db).await.unwrap();

    // Awaited, not blocked on: the app under test runs on this test's runtime and must keep
    // serving (and releasing its tails' locks) while the command waits for them.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["replay", "--projection", "chat_sessions"])
        .env("DATABASE_URL", app.state.config.database_url.expose())
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("vigil replay runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(all_rows(&app.db).await.unwrap(), live);
}

#[tokio::test]
async fn the_replay_command_refuses_while_a_service_is_connected_unless_online() {
    let app = spawn_app().await;
    // A running service's connections, as `vigil serve` names them.
    let options = sqlx::postgres::PgConnectOptions::from_str(app.state.config.database_url.expose())
        .unwrap()
        .application_name(vigil::db::SERVICE_APPLICATION_NAME);
    let _service = sqlx::PgConnection::connect_with(&options).await.unwrap();
    let replay = |online: bool| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"));
        command
            .args(["replay", "--projection", "chat_sessions"])
            .args(online.then_some("--online"))
            .env("DATABASE_URL", app.state.config.database_url.expose())
            .env("RUST_LOG", "warn");
        command.output()
    };

    let refused = replay(false).await.expect("vigil replay runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "refused while a service runs");
    assert!(
        stderr.contains("a service is running") && stderr.contains("--online"),
        "{stderr}"
    );

    let online = replay(true).await.expect("vigil replay runs");
    assert!(online.status.success(), "{}", String::from_utf8_lossy(&online.stderr));
}

/// Records the positions of the events it is handed.
struct Recorder(std::sync::Mutex<Vec<i64>>);

#[async_trait::async_trait]
impl vigil_projections::EventConsumer for Recorder {
    fn name(&self) -> &'static str {
        "gap_probe"
    }
    fn aggregate_type(&self) -> &'static str {
        "GapProbe"
    }
    async fn consume(
        &self,
        events: &[vigil_projections::StoredEvent],
    ) -> Result<(), vigil_projections::ProjectionError> {
        self.0
            .lock()
            .unwrap()
            .extend(events.iter().map(|event| event.global_position));
        Ok(())
    }
    async fn reset(&self) -> Result<(), vigil_projections::ProjectionError> {
        self.0.lock().unwrap().clear();
        Ok(())
    }
}

const INSERT_PROBE: &str =
    "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
     VALUES ('GapProbe', $1, 1, 'Probed', '1', '{}', '{}') RETURNING global_position";

#[tokio::test]
async fn the_tail_never_skips_an_event_committed_after_a_later_position() {
    let app = spawn_app().await;
    let recorder = std::sync::Arc::new(Recorder(Default::default()));
    let tail = vigil_projections::Tail::new(app.db.clone(), recorder.clone());

    // Transaction A takes the lower position and stays open; B takes a higher one and commits.
    let mut slow = app.db.begin().await.unwrap();
    let first: i64 = sqlx::query_scalar(INSERT_PROBE)
        .bind("slow")
        .fetch_one(&mut *slow)
        .await
        .unwrap();
    let second: i64 = sqlx::query_scalar(INSERT_PROBE)
        .bind("fast")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(first < second);

    tail.catch_up().await.unwrap();
    assert_eq!(
        *recorder.0.lock().unwrap(),
        Vec::<i64>::new(),
        "nothing past an open transaction's event"
    );

    slow.commit().await.unwrap();
    let seen = eventually("both events delivered", || async {
        tail.catch_up().await.unwrap();
        let seen = recorder.0.lock().unwrap().clone();
        (seen.len() == 2).then_some(seen)
    })
    .await;
    assert_eq!(seen, [first, second], "delivered once each, in transaction order");
    tail.catch_up().await.unwrap();
    assert_eq!(
        recorder.0.lock().unwrap().len(),
        2,
        "the checkpoint holds: no redelivery"
    );
}

/// Reads only `Wanted` events' payloads; records what it is handed.
struct WantedOnly(std::sync::Mutex<Vec<(String, serde_json::Value)>>);

#[async_trait::async_trait]
impl vigil_projections::EventConsumer for WantedOnly {
    fn name(&self) -> &'static str {
        "wanted_only"
    }
    fn aggregate_type(&self) -> &'static str {
        "TypeProbe"
    }
    fn payloads(&self) -> vigil_projections::Payloads<'_> {
        vigil_projections::Payloads::OfTypes(&["Wanted"])
    }
    async fn consume(
        &self,
        events: &[vigil_projections::StoredEvent],
    ) -> Result<(), vigil_projections::ProjectionError> {
        self.0.lock().unwrap().extend(
            events
                .iter()
                .map(|event| (event.event_type.clone(), event.payload_value())),
        );
        Ok(())
    }
    async fn reset(&self) -> Result<(), vigil_projections::ProjectionError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_consumer_of_some_event_types_is_handed_only_those() {
    let app = spawn_app().await;
    let consumer = std::sync::Arc::new(WantedOnly(Default::default()));
    let tail = vigil_projections::Tail::new(app.db.clone(), consumer.clone());
    let append = |sequence: i64, event_type: &'static str| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             VALUES ('TypeProbe', 'probe', $1, $2, '1', json_build_object('n', $1), '{}')
             RETURNING global_position",
        )
        .bind(sequence)
        .bind(event_type)
        .fetch_one(&app.db)
    };
    let mut wanted_position = 0;
    for (sequence, event_type) in [(1, "Other"), (2, "Wanted"), (3, "Other")] {
        let position = append(sequence, event_type).await.unwrap();
        if event_type == "Wanted" {
            wanted_position = position;
        }
    }
    let checkpoint = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT global_position FROM event_consumer_checkpoints WHERE name = 'wanted_only'",
        )
        .fetch_optional(&app.db)
        .await
        .unwrap()
    };

    eventually("the checkpoint at the wanted event", || async {
        tail.catch_up().await.unwrap();
        (checkpoint().await == Some(wanted_position)).then_some(())
    })
    .await;
    assert_eq!(
        *consumer.0.lock().unwrap(),
        [("Wanted".to_owned(), serde_json::json!({ "n": 2 }))],
        "only the wanted event, whole"
    );

    append(4, "Wanted").await.unwrap();
    eventually("the next wanted event handed over", || async {
        tail.catch_up().await.unwrap();
        (consumer.0.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        consumer.0.lock().unwrap()[1],
        ("Wanted".to_owned(), serde_json::json!({ "n": 4 })),
        "nothing before the checkpoint comes again"
    );
}

/// The incidents projection's consumer, as the running app registered it.
fn incidents_projection(app: &crate::helpers::TestApp) -> std::sync::Arc<dyn vigil_projections::EventConsumer> {
    app.state
        .events
        .consumers
        .iter()
        .find(|consumer| consumer.name() == "incidents")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn the_incidents_tail_passes_over_what_placement_projected_and_a_replay_does_not() {
    let app = crate::helpers::spawn_app_without_workers().await;
    let (user, id) = crate::incidents::user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    let projected: Vec<bool> = sqlx::query_scalar("SELECT projected FROM events WHERE aggregate_id = $1")
        .bind(&id)
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(projected, [true], "placement marks the events it projected");

    // A read row lost behind the tail's back: the tail, which looks only for what a command
    // path missed, leaves it lost; a replay reads every event and restores it.
    sqlx::query("DELETE FROM incidents WHERE id = $1::uuid")
        .bind(&id)
        .execute(&app.db)
        .await
        .unwrap();
    let handed_over = vigil_projections::Tail::new(app.db.clone(), incidents_projection(&app))
        .catch_up()
        .await
        .unwrap();
    assert_eq!(handed_over, 0, "no unprojected event to hand over");
    app.state.events.replay(&app.db, Some("incidents")).await.unwrap();
    let restored = app
        .send_as(&user, Method::GET, &format!("/api/incidents/{id}"), None)
        .await;
    assert_eq!(restored.status(), 200);
}

#[tokio::test]
async fn the_incidents_tail_applies_an_unprojected_event() {
    let app = crate::helpers::spawn_app_without_workers().await;
    let (user, id) = crate::incidents::user_with_incident(&app, "source_a", "/api/source_a/alerts").await;

    // Committed by a framework without queries, as by a process that died before projecting.
    let crashing = postgres_es::postgres_cqrs::<vigil_aggregates::incident::Incident>(app.db.clone(), vec![], ());
    let summary = vigil_aggregates::incident::IncidentCommand::Patch {
        user_id: user.clone(),
        status: None,
        analysis_status: None,
        summary: Some("written while nobody projected".into()),
        active_tab: None,
        at: Utc::now(),
    };
    crashing.execute(&id, summary).await.unwrap();

    let path = format!("/api/incidents/{id}");
    eventually("the tail to apply the summary", || async {
        let body: Value = app.send_as(&user, Method::GET, &path, None).await.json().await.unwrap();
        (body["incident"]["summary"] == "written while nobody projected").then_some(())
    })
    .await;
}

#[tokio::test]
async fn every_consumer_of_some_event_types_reads_them_through_the_reactions_index() {
    let app = spawn_app().await;
    let definition: String = sqlx::query_scalar("SELECT pg_get_indexdef('events_tail_reactions'::regclass)")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let events = &app.state.events;
    let mut checked = 0;
    for consumer in events.consumers.iter().chain(&events.reactors) {
        if let vigil_projections::Payloads::OfTypes(types) = consumer.payloads() {
            for event_type in types {
                assert!(
                    definition.contains(&format!("'{event_type}'")),
                    "{} reads {event_type} events, which events_tail_reactions does not hold: {definition}",
                    consumer.name()
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 3,
        "the RCA and postmortem reactors and the embeddings consumer"
    );
}
