//! The incident API: list and detail shapes, the PATCH and merge rules and their error table,
//! isolation between users, and the audit history.

use reqwest::Method;
use serde_json::{json, Value};
use vigil::event_store::{execute, Actor};
use vigil_aggregates::chat_session::{ChatSessionCommand, Message};

use crate::{
    helpers::{assert_error, spawn_app_with, spawn_app_without_workers, TestApp},
    ingestion::{fixture, post_alert},
};

/// A user with one incident opened from `source`'s firing fixture; returns (user, incident id).
pub async fn user_with_incident(app: &TestApp, source: &str, path: &str) -> (String, String) {
    let user = app.new_user().await.id;
    let incident = incident_of_fixture(app, &user, source, path).await;
    (user, incident)
}

pub async fn detail(app: &TestApp, user: &str, id: &str) -> Value {
    let response = app
        .send_as(user, Method::GET, &format!("/api/incidents/{id}"), None)
        .await;
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()["incident"].clone()
}

/// `GET /api/incidents/:id?as_of=<as_of>`, the time as given.
async fn get_as_of(app: &TestApp, user: &str, id: &str, as_of: &str) -> reqwest::Response {
    app.send_as(user, Method::GET, &format!("/api/incidents/{id}?as_of={as_of}"), None)
        .await
}

/// The incident as it stood at `as_of`, which the service must answer.
async fn detail_as_of(app: &TestApp, user: &str, id: &str, as_of: chrono::DateTime<chrono::Utc>) -> Value {
    let as_of = as_of.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let response = get_as_of(app, user, id, &as_of).await;
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()["incident"].clone()
}

async fn patch(app: &TestApp, user: &str, id: &str, body: Value) -> reqwest::Response {
    app.send_as(user, Method::PATCH, &format!("/api/incidents/{id}"), Some(&body))
        .await
}

/// Resolves the incident; the answer must be 200.
pub(crate) async fn resolve(app: &TestApp, user: &str, id: &str) {
    let response = patch(app, user, id, json!({ "status": "resolved" })).await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
}

/// Asks to merge `source` into `target`.
async fn merge(app: &TestApp, user: &str, target: &str, source: &str) -> reqwest::Response {
    let body = json!({ "sourceIncidentId": source });
    app.send_as(
        user,
        Method::POST,
        &format!("/api/incidents/{target}/merge-alert"),
        Some(&body),
    )
    .await
}

/// The incident a fixture's first alert went to.
async fn incident_of_fixture(app: &TestApp, user: &str, source: &str, path: &str) -> String {
    let placed = post_alert(app, user, path, &fixture(source, "firing")).await;
    placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn list_and_detail_have_the_spec_shape() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    let list: Value = app
        .send_as(&user, Method::GET, "/api/incidents", None)
        .await
        .json()
        .await
        .unwrap();
    let incident = &list["incidents"][0];
    for field in [
        "id",
        "sourceType",
        "sourceAlertId",
        "status",
        "alert",
        "auroraStatus",
        "startedAt",
        "createdAt",
        "updatedAt",
    ] {
        assert!(!incident[field].is_null(), "{field} in {incident}");
    }
    assert!(incident["sourceAlertId"].is_string(), "sourceAlertId is a string");
    assert_eq!(incident["auroraStatus"], "idle");
    assert_eq!(incident["severity"], "critical");
    assert_eq!(incident["alert"]["title"], "CheckoutApiHighLatency");
    assert_eq!(incident["alert"]["service"], "checkout-api");
    assert_eq!(incident["alert"]["source"], "source_a");
    assert_eq!(incident["startedAt"], "2026-11-20T14:02:10Z");
    assert!(incident["analyzedAt"].is_null());
    assert_eq!(incident["affectedServices"], json!(["checkout-api"]));

    let detail = detail(&app, &user, &id).await;
    for array in [
        "suggestions",
        "streamingThoughts",
        "citations",
        "correlatedAlerts",
        "chatSessions",
    ] {
        assert!(detail[array].is_array(), "{array}");
    }
    assert_eq!(detail["alert"]["triggeredAt"], "2026-11-20T14:02:10Z");
    let raw: Value = serde_json::from_str(detail["alert"]["rawPayload"].as_str().unwrap()).unwrap();
    assert_eq!(
        raw,
        fixture("source_a", "firing"),
        "the original notification, complete"
    );
}

#[tokio::test]
async fn identity_and_id_errors() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    for (method, path) in [
        (Method::GET, "/api/incidents".to_owned()),
        (Method::GET, format!("/api/incidents/{id}")),
        (Method::PATCH, format!("/api/incidents/{id}")),
    ] {
        let response = app
            .client
            .request(method.clone(), app.url(&path))
            .json(&json!({ "status": "analyzed" }))
            .send()
            .await
            .unwrap();
        assert_error(response, 400, "identity_required").await;
    }
    assert_error(
        app.send_as(&user, Method::GET, "/api/incidents/not-a-uuid", None).await,
        400,
        "invalid_incident_id",
    )
    .await;
    assert_error(
        patch(&app, &user, "not-a-uuid", json!({ "status": "analyzed" })).await,
        400,
        "invalid_incident_id",
    )
    .await;
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_error(
        app.send_as(&user, Method::GET, &format!("/api/incidents/{unknown}"), None)
            .await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        patch(&app, &user, &unknown, json!({ "status": "analyzed" })).await,
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn other_users_cannot_see_patch_or_merge() {
    let app = spawn_app_without_workers().await;
    let (owner, id) = user_with_incident(&app, "source_b", "/api/source_b/webhook").await;
    let (intruder, own_id) = user_with_incident(&app, "source_c", "/api/source_c/alerts").await;
    assert_error(
        app.send_as(&intruder, Method::GET, &format!("/api/incidents/{id}"), None)
            .await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        patch(&app, &intruder, &id, json!({ "status": "resolved" })).await,
        404,
        "not_found",
    )
    .await;
    assert_error(merge(&app, &intruder, &own_id, &id).await, 404, "not_found").await;
    assert_error(
        app.send_as(&intruder, Method::GET, &format!("/api/incidents/{id}/events"), None)
            .await,
        404,
        "not_found",
    )
    .await;
    let list: Value = app
        .send_as(&intruder, Method::GET, "/api/incidents", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["incidents"].as_array().unwrap().len(), 1);
    assert_eq!(detail(&app, &owner, &id).await["status"], "investigating", "untouched");
}

#[tokio::test]
async fn patch_validation_table() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_e", "/api/source_e/alerts").await;
    let empty = app
        .client
        .patch(app.url(&format!("/api/incidents/{id}")))
        .header("X-User-ID", &user)
        .send()
        .await
        .unwrap();
    assert_error(empty, 400, "missing_body").await;
    for body in [
        json!({ "status": "closed" }),
        json!({ "auroraStatus": "done" }),
        json!({ "activeTab": "graphs" }),
        json!({ "status": 3 }),
        json!({ "summary": "x".repeat(10_001) }),
        json!({}),
        json!({ "analyzedAt": "2026-11-20T00:00:00Z" }),
        json!(["status"]),
    ] {
        assert_error(patch(&app, &user, &id, body.clone()).await, 400, "invalid_request").await;
    }
    // A megabyte sent as a status is quoted, not sent back whole.
    let huge = patch(
        &app,
        &user,
        &id,
        json!({ "status": format!("closed{}", "x".repeat(1 << 20)) }),
    )
    .await;
    let body = assert_error(huge, 400, "invalid_request").await;
    let message = body["error"].as_str().unwrap();
    assert!(message.len() < 300 && message.contains("`closedxxx"), "{message}");
    let ok = patch(&app, &user, &id, json!({ "summary": "x".repeat(10_000) })).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.json::<Value>().await.unwrap(), json!({ "success": true, "id": id }));
}

#[tokio::test]
async fn patch_transitions_and_side_effects() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_h", "/api/source_h/problems").await;
    let before = detail(&app, &user, &id).await;

    let response = patch(
        &app,
        &user,
        &id,
        json!({ "auroraStatus": "running", "activeTab": "chat", "summary": "Looking" }),
    )
    .await;
    assert_eq!(response.status(), 200);
    let after = detail(&app, &user, &id).await;
    assert_eq!(after["auroraStatus"], "running");
    assert_eq!(after["activeTab"], "chat");
    assert_eq!(after["summary"], "Looking");
    assert!(after["updatedAt"].as_str() > before["updatedAt"].as_str());

    assert_eq!(
        patch(&app, &user, &id, json!({ "status": "analyzed" })).await.status(),
        200
    );
    let analyzed = detail(&app, &user, &id).await;
    assert_eq!(analyzed["status"], "analyzed");
    let analyzed_at = analyzed["analyzedAt"].as_str().unwrap().to_owned();

    assert_eq!(
        patch(&app, &user, &id, json!({ "status": "resolved" })).await.status(),
        200
    );
    let resolved = detail(&app, &user, &id).await;
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["analyzedAt"], analyzed_at, "analyzedAt is set once");

    let untouched = resolved["updatedAt"].as_str().unwrap().to_owned();
    assert_eq!(
        patch(&app, &user, &id, json!({ "status": "resolved" })).await.status(),
        200
    );
    let again = detail(&app, &user, &id).await;
    assert!(
        again["updatedAt"].as_str().unwrap() > untouched.as_str(),
        "updatedAt moves on every PATCH"
    );

    let history = app.incident_events(&user, &id).await;
    let kinds: Vec<&str> = history.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "ResolutionRequested").count(),
        1,
        "one postmortem request: {kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"IncidentTouched"));
}

#[tokio::test]
async fn merge_moves_the_source_into_the_target() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let target = incident_of_fixture(&app, &user, "source_a", "/api/source_a/alerts").await;
    let source = incident_of_fixture(&app, &user, "source_g", "/api/source_g/deployment").await;
    assert_ne!(target, source);

    let merged = merge(&app, &user, &target, &source).await;
    assert_eq!(merged.status(), 200);
    assert_eq!(
        merged.json::<Value>().await.unwrap(),
        json!({ "success": true, "targetIncidentId": target, "sourceIncidentId": source })
    );

    let list: Value = app
        .send_as(&user, Method::GET, "/api/incidents", None)
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = list["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [target.as_str()], "the merged incident leaves the default list");

    let source_detail = detail(&app, &user, &source).await;
    assert_eq!(source_detail["status"], "merged");
    assert_eq!(source_detail["mergedIntoIncidentId"], target);
    assert_eq!(source_detail["mergedIntoTitle"], "CheckoutApiHighLatency");
    let as_of = detail_as_of(&app, &user, &source, chrono::Utc::now()).await;
    assert_eq!(as_of["status"], "merged");
    assert_eq!(as_of["mergedIntoTitle"], "CheckoutApiHighLatency");

    let target_detail = detail(&app, &user, &target).await;
    assert_eq!(target_detail["correlatedAlertCount"], 1);
    let manual = &target_detail["correlatedAlerts"][0];
    assert_eq!(manual["correlationStrategy"], "manual");
    assert_eq!(manual["correlationScore"], 1.0);
    assert_eq!(manual["sourceType"], "source_g");
    assert_eq!(target_detail["affectedServices"], json!(["checkout-api", "orders-api"]));

    assert_error(merge(&app, &user, &target, &source).await, 409, "conflict").await;
    assert_error(merge(&app, &user, &target, &target).await, 400, "invalid_request").await;
    assert_error(merge(&app, &user, &target, "nope").await, 400, "invalid_request").await;
    assert_error(merge(&app, &user, &source, &target).await, 409, "conflict").await;
}

#[tokio::test]
async fn the_event_history_names_its_actors() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_i", "/api/source_i/webhook").await;
    post_alert(&app, &user, "/api/source_i/webhook", &fixture("source_i", "related")).await;
    patch(&app, &user, &id, json!({ "status": "analyzed" })).await;
    let events = app.incident_events(&user, &id).await;
    let summary: Vec<(i64, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["sequence"].as_i64().unwrap(),
                e["type"].as_str().unwrap(),
                e["actor"].as_str().unwrap(),
            )
        })
        .collect();
    let user_actor = format!("user:{user}");
    assert_eq!(
        summary,
        [
            (1, "IncidentOpened", "system:ingestion"),
            (2, "AlertCorrelated", "system:ingestion"),
            (3, "StatusChanged", user_actor.as_str()),
        ]
    );
    assert!(events[0]["recorded_at"].is_string());
    assert_eq!(events[2]["payload"]["StatusChanged"]["status"], "analyzed");
}

#[tokio::test]
async fn replay_rebuilds_the_incident_tables() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "related")).await;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "resolved")).await;
    let other_id = incident_of_fixture(&app, &user, "source_f", "/api/source_f/deployment").await;
    merge(&app, &user, &id, &other_id).await;
    patch(
        &app,
        &user,
        &id,
        json!({ "status": "resolved", "summary": "done", "activeTab": "chat", "auroraStatus": "complete" }),
    )
    .await;

    app.assert_incidents_replay_as_live().await;
    // The joined alerts are read from the events themselves, replay or not.
    let correlated = vigil_projections::incidents::correlated_alerts(&app.db, id.parse().unwrap())
        .await
        .unwrap();
    let joined: Vec<(&str, &str)> = correlated
        .iter()
        .map(|row| (row.source_type.as_str(), row.correlation_strategy.as_str()))
        .collect();
    assert_eq!(joined.len(), 2, "{joined:?}");
    assert_eq!(joined[0].0, "source_a");
    assert_ne!(joined[0].1, "manual");
    assert_eq!(joined[1], ("source_f", "manual"));
}

/// The replay hands each incident's events over in the order incidents first appear, so an
/// incident merged into one opened after it is written before its target's row exists.
#[tokio::test]
async fn replay_rebuilds_a_merge_into_a_later_incident() {
    let app = spawn_app_without_workers().await;
    let (user, earlier) = user_with_incident(&app, "source_c", "/api/source_c/alerts").await;
    let later = incident_of_fixture(&app, &user, "source_f", "/api/source_f/deployment").await;
    assert_eq!(merge(&app, &user, &later, &earlier).await.status(), 200);

    app.assert_incidents_replay_as_live().await;
    assert_eq!(
        detail(&app, &user, &earlier).await["mergedIntoIncidentId"],
        later.as_str()
    );
}

/// A writer whose transaction began before another's append, and appends after it (it waited,
/// or retried on the conflict), records a later time: `as_of` folds a prefix of the history, so
/// times must not go back along the sequence.
#[tokio::test]
async fn event_times_follow_the_sequence_whenever_their_transactions_began() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    let mut slow_writer = app.db.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *slow_writer).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        patch(&app, &user, &id, json!({ "status": "analyzed" })).await.status(),
        200
    );
    // The slow writer appends the next event (a copy of the status change) only now.
    sqlx::query(
        "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
         SELECT aggregate_type, aggregate_id, sequence + 1, event_type, event_version, payload, metadata
         FROM events WHERE aggregate_type = 'Incident' AND aggregate_id = $1 AND sequence = 2",
    )
    .bind(&id)
    .execute(&mut *slow_writer)
    .await
    .unwrap();
    slow_writer.commit().await.unwrap();

    let times: Vec<chrono::DateTime<chrono::Utc>> = app
        .incident_events(&user, &id)
        .await
        .iter()
        .map(|event| event["recorded_at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), 3);
    assert!(times.is_sorted(), "{times:?}");
}

/// One PATCH appends several events, recorded microseconds apart: a time between them shows the
/// incident before the PATCH, never half of it.
#[tokio::test]
async fn as_of_between_the_events_of_one_command_shows_none_of_them() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    patch(
        &app,
        &user,
        &id,
        json!({ "status": "analyzed", "summary": "cart-service saturation" }),
    )
    .await;
    let history = app.incident_events(&user, &id).await;
    let patched: Vec<&Value> = history.iter().skip(1).collect();
    assert!(patched.len() >= 2, "the PATCH appended several events: {history:?}");
    let first: chrono::DateTime<chrono::Utc> = patched[0]["recorded_at"].as_str().unwrap().parse().unwrap();
    let last: chrono::DateTime<chrono::Utc> = patched[patched.len() - 1]["recorded_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(first < last, "its events were recorded at different times");
    let then = detail_as_of(&app, &user, &id, first).await;
    assert_eq!(then["status"], "investigating");
    assert!(then["summary"].is_null());
}

/// A finding carries the time its analysis made it, which may come before the store recorded
/// it: `as_of` shows the findings recorded by then, as it does every other event.
#[tokio::test]
async fn as_of_shows_the_findings_recorded_by_then() {
    use vigil::event_store::{execute, Actor};
    use vigil_aggregates::incident_analysis::{AnalysisCommand, ThoughtKind};

    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    let before_recording: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let thought = AnalysisCommand::RecordThought {
        incident_id: id.parse().unwrap(),
        kind: ThoughtKind::Analysis,
        content: "the cart cache evicts under load".into(),
        at: before_recording - chrono::Duration::minutes(1),
    };
    execute(&app.state.events.analyses, &id, thought, Actor::System("analysis"))
        .await
        .unwrap();
    let thoughts_as_of = |as_of: chrono::DateTime<chrono::Utc>| {
        let (app, user, id) = (&app, &user, &id);
        async move {
            detail_as_of(app, user, id, as_of).await["streamingThoughts"]
                .as_array()
                .unwrap()
                .len()
        }
    };
    assert_eq!(
        thoughts_as_of(before_recording).await,
        0,
        "not recorded yet at that time"
    );
    assert_eq!(thoughts_as_of(chrono::Utc::now()).await, 1);
}

/// `as_of` also shows the incident's chat sessions as they stood then: renamed and written to
/// since, or deleted since (it was there then).
#[tokio::test]
async fn as_of_shows_the_chat_sessions_as_they_stood_then() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    let mut sessions = Vec::new();
    for title in ["Cart latency", "Scratch notes"] {
        let session_id = uuid::Uuid::new_v4();
        let create = ChatSessionCommand::Create {
            session_id,
            user_id: user.clone(),
            title: Some(title.into()),
            messages: vec![Message::user("What broke?")],
            ui_state: serde_json::Map::new(),
            incident_id: Some(id.parse().unwrap()),
            at: chrono::Utc::now(),
        };
        execute(
            &app.state.events.chat_sessions,
            &session_id.to_string(),
            create,
            Actor::User(&user),
        )
        .await
        .unwrap();
        sessions.push(session_id.to_string());
    }
    let then: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(recorded_at) FROM events WHERE aggregate_type = 'ChatSession'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    let answered = json!({ "title": "Cart cache eviction", "messages": [
        { "sender": "user", "text": "What broke?" }, { "sender": "assistant", "text": "The cart cache." }] });
    let path = format!("/chat_api/sessions/{}", sessions[0]);
    assert_eq!(
        app.send_as(&user, Method::PUT, &path, Some(&answered)).await.status(),
        200
    );
    let path = format!("/chat_api/sessions/{}", sessions[1]);
    assert_eq!(app.send_as(&user, Method::DELETE, &path, None).await.status(), 200);

    let titles_and_messages = |incident: &Value| -> Vec<(String, usize)> {
        incident["chatSessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["title"].as_str().unwrap().to_owned(),
                    s["messages"].as_array().unwrap().len(),
                )
            })
            .collect()
    };
    let now = detail(&app, &user, &id).await;
    assert_eq!(titles_and_messages(&now), [("Cart cache eviction".to_owned(), 2)]);
    let at_then = detail_as_of(&app, &user, &id, then).await;
    assert_eq!(
        titles_and_messages(&at_then),
        [("Cart latency".to_owned(), 1), ("Scratch notes".to_owned(), 1)]
    );
    assert_eq!(
        titles_and_messages(&detail(&app, &user, &id).await),
        titles_and_messages(&now),
        "the scratch projection left the live table alone"
    );
}

#[tokio::test]
async fn as_of_shows_the_incident_as_it_stood_then() {
    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_d", "/api/source_d/webhook").await;
    post_alert(&app, &user, "/api/source_d/webhook", &fixture("source_d", "related")).await;
    patch(
        &app,
        &user,
        &id,
        json!({ "status": "analyzed", "summary": "cart-service saturation" }),
    )
    .await;

    let history = app.incident_events(&user, &id).await;
    let opened_at = history[0]["recorded_at"].as_str().unwrap().to_owned();
    let at_opening: Value = get_as_of(&app, &user, &id, &opened_at).await.json().await.unwrap();
    let then = &at_opening["incident"];
    assert_eq!(then["status"], "investigating");
    assert_eq!(then["correlatedAlertCount"], 0);
    assert_eq!(then["correlatedAlerts"], json!([]));
    assert!(then["summary"].is_null());

    let now = detail(&app, &user, &id).await;
    assert_eq!(now["status"], "analyzed");
    assert_eq!(now["correlatedAlertCount"], 1);
    let live = vigil_projections::incidents::find_incident(&app.db, &user, id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        live.unwrap().status,
        "analyzed",
        "the scratch projection left the live tables alone"
    );

    let before = get_as_of(&app, &user, &id, "2000-01-01T00:00:00Z").await;
    assert_error(before, 404, "not_found").await;
    let garbage = get_as_of(&app, &user, &id, "yesterday").await;
    assert_error(garbage, 400, "invalid_query").await;
    // The query is checked before the incident is looked up, as the id is.
    let garbage_for_unknown = get_as_of(&app, &user, &uuid::Uuid::new_v4().to_string(), "yesterday").await;
    assert_error(garbage_for_unknown, 400, "invalid_query").await;
}

#[tokio::test]
async fn analysis_products_appear_in_the_detail_and_survive_replay() {
    use vigil::event_store::{execute, Actor};
    use vigil_aggregates::incident_analysis::{
        AnalysisCommand, Citation, Risk, Suggestion, SuggestionKind, ThoughtKind,
    };

    let app = spawn_app_without_workers().await;
    let (user, id) = user_with_incident(&app, "source_f", "/api/source_f/deployment").await;
    let incident_id: uuid::Uuid = id.parse().unwrap();
    let analyses = &app.state.events.analyses;
    let run = |command| execute(analyses, &id, command, Actor::System("analysis"));
    let at = |second: u32| chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2026, 11, 20, 18, 0, second).unwrap();
    for (second, kind, content) in [
        (1, ThoughtKind::Analysis, "first"),
        (2, ThoughtKind::Hypothesis, "second"),
        (3, ThoughtKind::Conclusion, "third"),
    ] {
        run(AnalysisCommand::RecordThought {
            incident_id,
            kind,
            content: content.into(),
            at: at(second),
        })
        .await
        .unwrap();
    }
    for key in ["10", "2", "note", "1"] {
        let citation = Citation {
            key: key.into(),
            tool_name: Some("kubectl".into()),
            command: None,
            output: format!("output {key}"),
            executed_at: None,
        };
        run(AnalysisCommand::RecordCitation {
            incident_id,
            citation,
            at: at(4),
        })
        .await
        .unwrap();
    }
    let duplicate = Citation {
        key: "2".into(),
        tool_name: None,
        command: None,
        output: "again".into(),
        executed_at: None,
    };
    assert!(run(AnalysisCommand::RecordCitation {
        incident_id,
        citation: duplicate,
        at: at(5)
    })
    .await
    .is_err());
    let rollback = Suggestion {
        title: "Roll back inventory-service".into(),
        description: None,
        kind: SuggestionKind::Mitigation,
        risk: Risk::Safe,
        command: Some("kubectl rollout undo deployment/inventory-service".into()),
    };
    run(AnalysisCommand::ProposeSuggestion {
        incident_id,
        suggestion: rollback,
        at: at(6),
    })
    .await
    .unwrap();

    let incident = detail(&app, &user, &id).await;
    let thoughts: Vec<&str> = incident["streamingThoughts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["content"].as_str().unwrap())
        .collect();
    assert_eq!(thoughts, ["first", "second", "third"]);
    assert_eq!(incident["streamingThoughts"][1]["type"], "hypothesis");
    let keys: Vec<&str> = incident["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["1", "2", "10"], "numeric keys only, in key order");
    assert_eq!(incident["suggestions"][0]["risk"], "high", "a rollback is never safe");
    assert_eq!(
        incident["suggestions"][0]["type"], "fix",
        "a stored mitigation shows as one of the detail's two types"
    );

    // Replaying the incidents alone empties the analysis tables too (they refer to incidents),
    // so it rebuilds them as well: ids included (an id is its event's position in the store).
    for only in [None, Some("incidents"), Some("incident_analysis")] {
        app.state.events.replay(&app.db, only).await.unwrap();
        let rebuilt = detail(&app, &user, &id).await;
        for field in [
            "streamingThoughts",
            "citations",
            "suggestions",
            "correlatedAlerts",
            "status",
            "updatedAt",
        ] {
            assert_eq!(
                rebuilt[field],
                incident[field],
                "{field} after replaying {}",
                only.unwrap_or("everything")
            );
        }
    }
}

/// Two incidents merged into each other at once: one merge wins, whole (the other's alerts
/// join it); the other is refused and leaves nothing behind. Run as two commands, both were
/// refused, and both incidents ended up merged into each other with neither holding the other's
/// alerts.
#[tokio::test]
async fn merges_racing_in_opposite_directions_leave_one_whole_merge() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    for round in 0..4 {
        let mut ids = Vec::new();
        for (offset, service) in [(0, "checkout-api"), (7_200, "billing-worker")] {
            let fired = chrono::DateTime::from_timestamp(1_795_000_000 + round * 20_000 + offset, 0).unwrap();
            let body = json!({ "status": "firing", "alerts": [{
                "status": "firing", "fingerprint": format!("race-{round}-{service}"),
                "labels": { "alertname": "HighErrorRate", "service": service },
                "startsAt": fired.to_rfc3339(), "endsAt": "0001-01-01T00:00:00Z" }] });
            let placed = post_alert(&app, &user, "/api/source_a/alerts", &body).await;
            ids.push(placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned());
        }
        let (a, b) = (ids[0].clone(), ids[1].clone());
        assert_ne!(a, b);
        let (b_into_a, a_into_b) = tokio::join!(merge(&app, &user, &a, &b), merge(&app, &user, &b, &a));
        let statuses = [b_into_a.status().as_u16(), a_into_b.status().as_u16()];
        assert!(
            statuses == [200, 409] || statuses == [409, 200],
            "one merge wins, the other is refused: {statuses:?}"
        );
        let (winner, absorbed) = if statuses[0] == 200 { (&a, &b) } else { (&b, &a) };
        let winner_detail = detail(&app, &user, winner).await;
        let absorbed_detail = detail(&app, &user, absorbed).await;
        assert_ne!(winner_detail["status"], "merged");
        assert_eq!(winner_detail["mergedIntoIncidentId"], Value::Null);
        assert_eq!(absorbed_detail["status"], "merged");
        assert_eq!(absorbed_detail["mergedIntoIncidentId"], json!(winner));
        let correlated = winner_detail["correlatedAlerts"].as_array().unwrap();
        assert_eq!(correlated.len(), 1, "the absorbed incident's alert joined the winner");
        assert_eq!(correlated[0]["correlationStrategy"], "manual");
    }
}

/// Many people (or scripts) changing one incident at once, through three instances: every PATCH
/// lands, none gives up on the race (the spec's PATCH answers only 400 and 404 for errors), and
/// the history holds each exactly once.
#[tokio::test]
async fn concurrent_patches_through_three_instances_all_land() {
    const PATCHES: usize = 120;
    let app = spawn_app_with(|config| {
        config.run_workers = false;
        config.rate_limit_per_minute = 10_000;
    })
    .await;
    let others = [app.spawn_beside(|_| {}).await, app.spawn_beside(|_| {}).await];
    let (user, id) = user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    let tabs = ["thoughts", "chat"];
    let statuses: Vec<u16> = futures::future::join_all((0..PATCHES).map(|n| {
        let base = [app.addr, others[0].addr, others[1].addr][n % 3];
        let request = app
            .client
            .patch(format!("http://{base}/api/incidents/{id}"))
            .header("X-User-ID", &user)
            .json(&json!({ "activeTab": tabs[n / 2 % 2], "summary": format!("take {n}") }));
        async move { request.send().await.unwrap().status().as_u16() }
    }))
    .await;
    assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");

    let summaries = app
        .incident_events(&user, &id)
        .await
        .iter()
        .filter(|event| event["type"] == "SummaryWritten")
        .count();
    assert_eq!(summaries, PATCHES);
}

/// The spec's transition table merges a source in any state; an incident PATCHed to `merged`
/// names no target yet, so it is not "already merged".
#[tokio::test]
async fn an_incident_patched_to_merged_can_still_be_merged_into_another() {
    let app = spawn_app_without_workers().await;
    let (user, target) = user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    let source = incident_of_fixture(&app, &user, "source_f", "/api/source_f/deployment").await;
    let marked = patch(&app, &user, &source, json!({ "status": "merged" })).await;
    assert_eq!(marked.status(), 200);

    assert_eq!(merge(&app, &user, &target, &source).await.status(), 200);
    let source = detail(&app, &user, &source).await;
    assert_eq!(source["mergedIntoIncidentId"], target.as_str());
    assert_eq!(detail(&app, &user, &target).await["correlatedAlertCount"], 1);
}

/// PATCHing a merged incident back to `investigating` does not undo the merge (its target keeps
/// the alerts), so a second merge would list its alerts in two incidents: 409.
#[tokio::test]
async fn an_incident_patched_back_after_a_merge_is_not_merged_again() {
    let app = spawn_app_without_workers().await;
    let (user, target) = user_with_incident(&app, "source_a", "/api/source_a/alerts").await;
    let source = incident_of_fixture(&app, &user, "source_f", "/api/source_f/deployment").await;
    let other = incident_of_fixture(&app, &user, "source_c", "/api/source_c/alerts").await;
    assert_eq!(merge(&app, &user, &target, &source).await.status(), 200);
    let reopened = patch(&app, &user, &source, json!({ "status": "investigating" })).await;
    assert_eq!(reopened.status(), 200);

    assert_error(merge(&app, &user, &other, &source).await, 409, "conflict").await;
    assert_error(merge(&app, &user, &target, &source).await, 409, "conflict").await;
    assert_error(merge(&app, &user, &source, &other).await, 409, "conflict").await;
    assert_eq!(detail(&app, &user, &other).await["correlatedAlertCount"], 0);
    assert_eq!(detail(&app, &user, &target).await["correlatedAlertCount"], 1);
    assert_eq!(
        detail(&app, &user, &source).await["mergedIntoIncidentId"],
        target.as_str()
    );

    // Nor does it take new alerts: the next failure of its service joins the target, which holds
    // that service's alerts now.
    let related = post_alert(&app, &user, "/api/source_f/deployment", &fixture("source_f", "related")).await;
    assert_eq!(related["alerts"][0]["incident_id"], target.as_str(), "{related}");
    assert_eq!(detail(&app, &user, &source).await["correlatedAlertCount"], 0);
}
