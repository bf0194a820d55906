use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{json, Value};
use vigil::event_store::{execute, Actor};
use vigil_aggregates::chat_session::ChatSessionCommand;

use crate::helpers::{assert_error, spawn_app, spawn_app_with, TestApp};

async fn alice(app: &TestApp) -> String {
    app.new_user().await.id
}

/// Sends `body` as it is, labelled JSON (empty: no body at all).
async fn send_raw(app: &TestApp, user: &str, method: Method, path: &str, body: &'static str) -> reqwest::Response {
    let request = app.client.request(method, app.url(path)).header("X-User-ID", user);
    let request = if body.is_empty() {
        request
    } else {
        request.header("Content-Type", "application/json").body(body)
    };
    request.send().await.unwrap()
}

fn timestamp(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn create_returns_the_session_in_the_spec_shape() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let body = app
        .create_session(
            &user,
            &json!({ "title": "Disk usage", "ui_state": { "selectedMode": "ask" } }),
        )
        .await;
    assert!(uuid::Uuid::parse_str(body["id"].as_str().unwrap()).is_ok());
    assert_eq!(body["title"], "Disk usage");
    assert_eq!(body["messages"], json!([]));
    assert_eq!(body["ui_state"], json!({ "selectedMode": "ask" }));
    assert_eq!(body["status"], "active");
    assert_eq!(timestamp(&body["created_at"]), timestamp(&body["updated_at"]));
    let mut keys: Vec<_> = body.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "created_at",
            "id",
            "messages",
            "status",
            "title",
            "ui_state",
            "updated_at"
        ]
    );
}

#[tokio::test]
async fn an_empty_create_is_a_new_chat() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let body = app.create_session(&user, &json!({})).await;
    assert_eq!(body["title"], "New Chat");
}

#[tokio::test]
async fn an_empty_body_creates_and_updates_as_if_it_were_an_empty_object() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let created = send_raw(&app, &user, Method::POST, "/chat_api/sessions", "").await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["title"], "New Chat");
    assert_eq!(created["messages"], json!([]));
    assert_eq!(created["ui_state"], json!({}));

    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());
    let updated = send_raw(&app, &user, Method::PUT, &path, "").await;
    assert_eq!(updated.status(), 200);
    let updated: Value = updated.json().await.unwrap();
    assert_eq!(updated["title"], "New Chat");
    assert!(timestamp(&updated["updated_at"]) >= timestamp(&created["updated_at"]));
}

#[tokio::test]
async fn a_null_body_creates_as_if_it_were_an_empty_object() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let created = send_raw(&app, &user, Method::POST, "/chat_api/sessions", "null").await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["title"], "New Chat");
    assert_eq!(created["ui_state"], json!({}));
}

/// PostgreSQL's jsonb writes 1.7976931348623157e308 back as a 309-digit integer, which a JSON
/// reader that rounds carelessly takes for infinity: the session was stored, then every read,
/// update and delete of the user's sessions failed.
#[tokio::test]
async fn numbers_at_the_ends_of_the_float_range_are_stored_and_read_back() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let ui_state = json!({ "largest": f64::MAX, "most_negative": -1.7976931348623155e308, "smallest": 5e-324 });
    let created = app
        .create_session(
            &user,
            &json!({ "ui_state": ui_state, "messages": [{ "sender": "user", "text": "hi", "weight": f64::MAX }] }),
        )
        .await;
    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());

    let fetched = app.send_as(&user, Method::GET, &path, None).await;
    assert_eq!(fetched.status(), 200);
    let fetched: Value = fetched.json().await.unwrap();
    assert_eq!(fetched["ui_state"], ui_state);
    assert_eq!(fetched["messages"][0]["weight"], json!(f64::MAX));
    let listed = app.send_as(&user, Method::GET, "/chat_api/sessions", None).await;
    assert_eq!(listed.status(), 200);
    let renamed = app
        .send_as(&user, Method::PUT, &path, Some(&json!({ "title": "renamed" })))
        .await;
    assert_eq!(renamed.status(), 200);
    assert_eq!(app.send_as(&user, Method::DELETE, &path, None).await.status(), 200);
    assert_eq!(app.send_as(&user, Method::GET, &path, None).await.status(), 404);
}

#[tokio::test]
async fn generated_titles_follow_the_rules() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let forty_nine = "a".repeat(44) + " bcde";
    let fifty = "a".repeat(45) + " bcde";
    let cases = [
        (forty_nine.clone(), forty_nine),
        (fifty.clone(), fifty.clone()),
        (fifty + "x", "a".repeat(45) + "..."),
        ("a".repeat(40) + " bcdefghijklmn", "a".repeat(40) + "..."),
    ];
    for (text, expected) in cases {
        let messages = json!([{ "sender": "assistant", "text": "Hi!" }, { "sender": "user", "text": text }]);
        let body = app.create_session(&user, &json!({ "messages": messages })).await;
        assert_eq!(body["title"], expected, "title of {text:?}");
    }
}

#[tokio::test]
async fn get_list_update_delete() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let first = app.create_session(&user, &json!({ "title": "first" })).await;
    let second = app.create_session(&user, &json!({ "title": "second" })).await;
    let first_path = format!("/chat_api/sessions/{}", first["id"].as_str().unwrap());

    let messages = json!([
        { "sender": "user", "text": "why is it slow?", "timestamp": "2026-11-20T10:00:00Z" },
        { "sender": "assistant", "text": "Looking.", "tool_calls": [{ "tool_name": "kubectl", "input": { "args": "get pods" }, "output": "ok" }] }
    ]);
    let updated = app
        .send_as(&user, Method::PUT, &first_path, Some(&json!({ "messages": messages })))
        .await;
    assert_eq!(updated.status(), 200);
    let updated: Value = updated.json().await.unwrap();
    assert_eq!(updated["title"], "first", "title not provided: unchanged");
    assert_eq!(updated["messages"], messages);
    assert!(timestamp(&updated["updated_at"]) > timestamp(&first["updated_at"]));

    let fetched: Value = app
        .send_as(&user, Method::GET, &first_path, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(fetched, updated);

    let list: Value = app
        .send_as(&user, Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["id"], first["id"], "most recently updated first");
    assert_eq!(sessions[0]["message_count"], 2);
    assert_eq!(sessions[1]["id"], second["id"]);
    assert_eq!(sessions[1]["message_count"], 0);
    assert_eq!(sessions[1]["status"], "active");
    assert!(sessions[0].get("messages").is_none(), "the list carries no messages");

    let deleted = app.send_as(&user, Method::DELETE, &first_path, None).await;
    assert_eq!(deleted.status(), 200);
    assert!(deleted.json::<Value>().await.unwrap()["message"].is_string());
    assert_error(
        app.send_as(&user, Method::GET, &first_path, None).await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        app.send_as(&user, Method::PUT, &first_path, Some(&json!({}))).await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        app.send_as(&user, Method::DELETE, &first_path, None).await,
        404,
        "not_found",
    )
    .await;
    let list: Value = app
        .send_as(&user, Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn put_changes_only_provided_fields_and_always_moves_updated_at() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let created = app
        .create_session(&user, &json!({ "title": "keep me", "ui_state": { "a": 1 } }))
        .await;
    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());

    let touched: Value = app
        .send_as(&user, Method::PUT, &path, Some(&json!({})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(touched["title"], "keep me");
    assert_eq!(touched["ui_state"], json!({ "a": 1 }));
    assert!(timestamp(&touched["updated_at"]) > timestamp(&created["updated_at"]));

    let renamed: Value = app
        .send_as(&user, Method::PUT, &path, Some(&json!({ "title": "renamed" })))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(renamed["title"], "renamed");
    assert_eq!(renamed["ui_state"], json!({ "a": 1 }));

    let too_long = app
        .send_as(&user, Method::PUT, &path, Some(&json!({ "title": "x".repeat(256) })))
        .await;
    assert_error(too_long, 400, "invalid_request").await;
    let bad_sender = json!({ "messages": [{ "sender": "robot", "text": "hi" }] });
    assert_error(
        app.send_as(&user, Method::PUT, &path, Some(&bad_sender)).await,
        400,
        "invalid_request",
    )
    .await;
}

#[tokio::test]
async fn put_without_title_on_a_new_chat_generates_the_title() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let created = app.create_session(&user, &json!({})).await;
    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());
    let body = json!({ "messages": [{ "sender": "user", "text": "Checkout latency doubled after the 14:00 deploy" }] });
    let updated: Value = app
        .send_as(&user, Method::PUT, &path, Some(&body))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(updated["title"], "Checkout latency doubled after the 14:00 deploy");
}

#[tokio::test]
async fn inline_images_are_split_on_retrieval() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let text = "What is this error? ![shot](data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==)";
    let created = app
        .create_session(&user, &json!({ "messages": [{ "sender": "user", "text": text }] }))
        .await;
    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());
    let fetched: Value = app.send_as(&user, Method::GET, &path, None).await.json().await.unwrap();
    let message = &fetched["messages"][0];
    assert_eq!(message["text"], "What is this error?");
    assert_eq!(
        message["images"],
        json!([{
            "displayData": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==",
            "type": "image/png",
            "data": "iVBORw0KGgoAAAANSUhEUg==",
            "name": "image_1.png",
        }])
    );
    assert_eq!(
        fetched["title"], "What is this error?",
        "inline images stay out of titles"
    );
}

#[tokio::test]
async fn an_unregistered_user_id_has_sessions_of_its_own() {
    let app = spawn_app().await;
    let created = app.create_session("gateway-user-7", &json!({ "title": "mine" })).await;
    let list: Value = app
        .send_as("gateway-user-7", Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["sessions"][0]["id"], created["id"]);
    let path = format!("/chat_api/sessions/{}", created["id"].as_str().unwrap());
    assert_error(
        app.send_as("gateway-user-8", Method::GET, &path, None).await,
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn identity_is_required() {
    let app = spawn_app().await;
    let id = uuid::Uuid::new_v4();
    for (method, path) in [
        (Method::GET, "/chat_api/sessions".to_owned()),
        (Method::POST, "/chat_api/sessions".to_owned()),
        (Method::GET, format!("/chat_api/sessions/{id}")),
        (Method::PUT, format!("/chat_api/sessions/{id}")),
        (Method::DELETE, format!("/chat_api/sessions/{id}")),
        (Method::DELETE, "/chat_api/sessions/bulk-delete".to_owned()),
    ] {
        let response = app
            .client
            .request(method.clone(), app.url(&path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_error(response, 401, "unauthorized").await;
        let over_long = app.send_as(&"u".repeat(256), method, &path, Some(&json!({}))).await;
        assert_error(over_long, 401, "unauthorized").await;
    }
}

#[tokio::test]
async fn a_user_id_beyond_ascii_is_an_id_and_bytes_that_are_not_utf8_are_refused() {
    let app = spawn_app().await;
    let request = |id: &[u8], method: Method, path: &str| {
        app.client
            .request(method, app.url(path))
            .header("X-User-ID", reqwest::header::HeaderValue::from_bytes(id).unwrap())
    };
    let created = request("üser-ß-東京".as_bytes(), Method::POST, "/chat_api/sessions")
        .json(&json!({ "title": "unicode owner" }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed: Value = request("üser-ß-東京".as_bytes(), Method::GET, "/chat_api/sessions")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["sessions"][0]["id"], json!(id));
    let other = request(
        "user-ss-東京".as_bytes(),
        Method::GET,
        &format!("/chat_api/sessions/{id}"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(other.status(), 404, "another id does not see it");

    let not_utf8 = request(b"user-\xff\xfe", Method::GET, "/chat_api/sessions")
        .send()
        .await
        .unwrap();
    let error = assert_error(not_utf8, 401, "unauthorized").await;
    assert!(error["error"].as_str().unwrap().contains("UTF-8"), "{error}");
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_not_found() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    for path in [
        format!("/chat_api/sessions/{}", uuid::Uuid::new_v4()),
        "/chat_api/sessions/not-a-uuid".to_owned(),
    ] {
        assert_error(app.send_as(&user, Method::GET, &path, None).await, 404, "not_found").await;
        assert_error(
            app.send_as(&user, Method::PUT, &path, Some(&json!({}))).await,
            404,
            "not_found",
        )
        .await;
        assert_error(app.send_as(&user, Method::DELETE, &path, None).await, 404, "not_found").await;
    }
}

#[tokio::test]
async fn other_users_sessions_are_invisible() {
    let app = spawn_app().await;
    let owner = alice(&app).await;
    let intruder = app.new_user().await.id;
    let session = app.create_session(&owner, &json!({ "title": "private" })).await;
    let path = format!("/chat_api/sessions/{}", session["id"].as_str().unwrap());

    assert_error(app.send_as(&intruder, Method::GET, &path, None).await, 404, "not_found").await;
    let hijack = app
        .send_as(&intruder, Method::PUT, &path, Some(&json!({ "title": "mine" })))
        .await;
    assert_error(hijack, 404, "not_found").await;
    assert_error(
        app.send_as(&intruder, Method::DELETE, &path, None).await,
        404,
        "not_found",
    )
    .await;
    let list: Value = app
        .send_as(&intruder, Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["sessions"], json!([]));
    let bulk = app
        .send_as(&intruder, Method::DELETE, "/chat_api/sessions/bulk-delete", None)
        .await;
    assert_eq!(bulk.json::<Value>().await.unwrap()["deleted_count"], 0);

    let still: Value = app
        .send_as(&owner, Method::GET, &path, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(still["title"], "private");
}

#[tokio::test]
async fn bulk_delete_keeps_the_current_session() {
    // More sessions than a bulk delete deletes at once.
    let app = spawn_app_with(|config| config.chat_rate_limit_per_minute = 100).await;
    let user = alice(&app).await;
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(
            app.create_session(&user, &json!({ "title": format!("s{n}") })).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let path = format!("/chat_api/sessions/bulk-delete?current_session_id={}", ids[1]);
    let response = app.send_as(&user, Method::DELETE, &path, None).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["deleted_count"], 19);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("19") && message.contains("preserved"), "{message}");
    let list: Value = app
        .send_as(&user, Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    let remaining: Vec<_> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(remaining, [json!(ids[1])]);

    let all = app
        .send_as(&user, Method::DELETE, "/chat_api/sessions/bulk-delete", None)
        .await;
    let body: Value = all.json().await.unwrap();
    assert_eq!(body["deleted_count"], 1);
    assert!(!body["message"].as_str().unwrap().contains("preserved"));
    let list: Value = app
        .send_as(&user, Method::GET, "/chat_api/sessions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["sessions"], json!([]));

    let bad = app
        .send_as(
            &user,
            Method::DELETE,
            "/chat_api/sessions/bulk-delete?current_session_id=nope",
            None,
        )
        .await;
    assert_error(bad, 400, "invalid_query").await;
}

#[tokio::test]
async fn bulk_delete_reports_kept_only_a_session_of_the_callers_that_was_there() {
    let app = spawn_app().await;
    let (user, other) = (alice(&app).await, format!("other-{}", uuid::Uuid::new_v4()));
    let others_session = app.create_session(&other, &json!({ "title": "theirs" })).await["id"].clone();
    app.create_session(&user, &json!({ "title": "mine" })).await;
    for named in [
        others_session.as_str().unwrap().to_owned(),
        uuid::Uuid::new_v4().to_string(),
    ] {
        let path = format!("/chat_api/sessions/bulk-delete?current_session_id={named}");
        let body: Value = app
            .send_as(&user, Method::DELETE, &path, None)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["preserved_session_id"], Value::Null, "{body}");
        assert!(!body["message"].as_str().unwrap().contains("preserved"), "{body}");
    }
    let theirs = app
        .send_as(
            &other,
            Method::GET,
            &format!("/chat_api/sessions/{}", others_session.as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(theirs.status(), 200, "the other user's session is untouched");
}

#[tokio::test]
async fn completed_and_cancelled_sessions_refuse_put() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    for close in ["complete", "cancel"] {
        let session = app.create_session(&user, &json!({ "title": close })).await;
        let id = session["id"].as_str().unwrap();
        let command = match close {
            "complete" => ChatSessionCommand::Complete {
                user_id: user.clone(),
                at: Utc::now(),
            },
            _ => ChatSessionCommand::Cancel {
                user_id: user.clone(),
                at: Utc::now(),
            },
        };
        execute(&app.state.events.chat_sessions, id, command, Actor::User(&user))
            .await
            .unwrap();
        let path = format!("/chat_api/sessions/{id}");
        let refused = app
            .send_as(&user, Method::PUT, &path, Some(&json!({ "title": "more" })))
            .await;
        assert_error(refused, 403, "forbidden").await;
        let fetched: Value = app.send_as(&user, Method::GET, &path, None).await.json().await.unwrap();
        assert_eq!(
            fetched["status"],
            if close == "complete" { "completed" } else { "cancelled" }
        );
        assert_eq!(fetched["title"], close);
        assert_eq!(
            app.send_as(&user, Method::DELETE, &path, None).await.status(),
            200,
            "closed sessions can still be deleted"
        );
    }
}

#[tokio::test]
async fn delete_removes_the_session_storage_folder() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let session = app.create_session(&user, &json!({})).await;
    let id = session["id"].as_str().unwrap();
    let folder = app.state.config.data_dir.join("sessions").join(id);
    std::fs::create_dir_all(folder.join("terraform")).unwrap();
    std::fs::write(folder.join("terraform/main.tf"), "resource {}").unwrap();
    let response = app
        .send_as(&user, Method::DELETE, &format!("/chat_api/sessions/{id}"), None)
        .await;
    assert_eq!(response.status(), 200);
    assert!(!folder.exists(), "storage folder removed");
}

/// A client re-sends the whole conversation after each message; the store keeps only what
/// changed, and the session reads back exactly as sent each time.
#[tokio::test]
async fn put_records_only_the_messages_that_changed() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let question = json!({ "sender": "user", "text": "Why is checkout slow?", "id": "m1" });
    let session = app.create_session(&user, &json!({ "messages": [question] })).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let path = format!("/chat_api/sessions/{id}");
    let long_answer = "Traces show the payment call waiting on a lock. ".repeat(200);
    let conversations = [
        json!([question, { "sender": "assistant", "text": long_answer }]),
        json!([question, { "sender": "assistant", "text": long_answer }, { "sender": "user", "text": "And payments?" }]),
        json!([question, { "sender": "assistant", "text": "Edited answer" }, { "sender": "user", "text": "And payments?" }]),
        json!([question]),
        json!([]),
    ];
    for messages in &conversations {
        let response = app
            .send_as(&user, Method::PUT, &path, Some(&json!({ "messages": messages })))
            .await;
        assert_eq!(response.status(), 200);
        let read: Value = app.send_as(&user, Method::GET, &path, None).await.json().await.unwrap();
        assert_eq!(&read["messages"], messages);
    }
    let recorded: Vec<(String, Value)> = sqlx::query_as(
        "SELECT event_type, payload::jsonb FROM events
         WHERE aggregate_type = 'ChatSession' AND aggregate_id = $1 AND sequence > 1 ORDER BY sequence",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    let revisions: Vec<(u64, usize)> = recorded
        .iter()
        .map(|(event_type, payload)| {
            assert_eq!(event_type, "MessagesRevised");
            let revised = &payload["MessagesRevised"];
            (
                revised["from"].as_u64().unwrap(),
                revised["messages"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        revisions,
        [(1, 1), (2, 1), (1, 2), (1, 0), (0, 0)],
        "(from, messages recorded) per PUT"
    );
    let count: i32 = sqlx::query_scalar("SELECT message_count FROM chat_sessions WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn concurrent_puts_lose_no_update() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    let session = app.create_session(&user, &json!({ "title": "race" })).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let path = format!("/chat_api/sessions/{id}");
    let writers = (0..12).map(|n| {
        let (app, user, path) = (&app, user.clone(), path.clone());
        async move {
            app.send_as(&user, Method::PUT, &path, Some(&json!({ "ui_state": { "writer": n } })))
                .await
                .status()
        }
    });
    let statuses = futures::future::join_all(writers).await;
    assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_type = 'ChatSession' AND aggregate_id = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(events, 13, "one created + twelve updates, none lost");
    let version: i64 = sqlx::query_scalar("SELECT version FROM chat_sessions WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(version, 13, "the read row reflects every event");
}

/// The command path projects a new session before answering, so the create can answer with the
/// session it made. Its first try failing (a connection cut mid-write) must not make the answer
/// a 404 for a session that exists: the projection is tried again.
#[tokio::test]
async fn a_create_whose_first_projection_fails_still_answers_with_the_session() {
    let app = spawn_app().await;
    let user = alice(&app).await;
    // Fails the first insert into the read table only (a sequence is not rolled back).
    sqlx::raw_sql(
        "CREATE SEQUENCE projection_attempts;
         CREATE FUNCTION fail_first_projection() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('projection_attempts') = 1 THEN RAISE EXCEPTION 'injected failure'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER fail_first_projection BEFORE INSERT ON chat_sessions
             FOR EACH ROW EXECUTE FUNCTION fail_first_projection();",
    )
    .execute(&app.db)
    .await
    .unwrap();

    let created = app.create_session(&user, &json!({ "title": "kept" })).await;
    assert_eq!(created["title"], "kept");
    let attempts: i64 = sqlx::query_scalar("SELECT last_value FROM projection_attempts")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(attempts, 2, "the failure was injected, and the projection tried again");
}
