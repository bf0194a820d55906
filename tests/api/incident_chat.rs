//! `POST /api/incidents/:id/chat`: 202 at once, the answer lands in the chat session.

use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{
    helpers::{assert_error, eventually, spawn_app, TestApp},
    ingestion::{fixture, post_alert},
};

async fn incident(app: &TestApp, user: &str) -> String {
    let placed = post_alert(app, user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned()
}

async fn completed_session(app: &TestApp, user: &str, session_id: &str) -> Value {
    eventually("the answer to be saved", || async {
        let body: Value = app
            .send_as(user, Method::GET, &format!("/chat_api/sessions/{session_id}"), None)
            .await
            .json()
            .await
            .unwrap();
        (body["status"] == "completed").then_some(body)
    })
    .await
}

#[tokio::test]
async fn a_question_is_answered_into_a_new_session_then_continued() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let id = incident(&app, &user).await;
    let path = format!("/api/incidents/{id}/chat");

    let response = app
        .send_as(
            &user,
            Method::POST,
            &path,
            Some(&json!({ "question": "What broke?", "mode": "ask" })),
        )
        .await;
    assert_eq!(response.status(), 202);
    let accepted: Value = response.json().await.unwrap();
    assert_eq!(accepted["status"], "processing");
    assert_eq!(accepted["is_new_session"], true);
    let session_id = accepted["session_id"].as_str().unwrap().to_owned();

    let session = completed_session(&app, &user, &session_id).await;
    assert_eq!(session["incident_id"], id);
    let messages = session["messages"].as_array().unwrap();
    assert_eq!(messages[0]["text"], "What broke?");
    let answer = messages[1]["text"].as_str().unwrap();
    assert!(
        answer.contains("built-in assistant") && answer.contains("started"),
        "{answer}"
    );
    assert_eq!(messages[1]["tool_calls"][0]["tool_name"], "get_incident");

    let again = app
        .send_as(
            &user,
            Method::POST,
            &format!("{path}?session_id={session_id}"),
            Some(&json!({ "question": "And now?" })),
        )
        .await;
    assert_eq!(again.status(), 202);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["is_new_session"], false);
    assert_eq!(again["session_id"], session_id);
    let continued = eventually("the second answer", || async {
        let body: Value = app
            .send_as(&user, Method::GET, &format!("/chat_api/sessions/{session_id}"), None)
            .await
            .json()
            .await
            .unwrap();
        (body["status"] == "completed" && body["messages"].as_array().unwrap().len() == 4).then_some(body)
    })
    .await;
    assert_eq!(continued["messages"][2]["text"], "And now?");
}

#[tokio::test]
async fn bad_requests_and_other_users_are_refused() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let other = app.new_user().await.id;
    let id = incident(&app, &user).await;
    let path = format!("/api/incidents/{id}/chat");
    let question = json!({ "question": "What broke?" });

    let theirs = app.send_as(&other, Method::POST, &path, Some(&question)).await;
    assert_error(theirs, 404, "not_found").await;
    let unknown = app
        .send_as(
            &user,
            Method::POST,
            &format!("/api/incidents/{}/chat", Uuid::new_v4()),
            Some(&question),
        )
        .await;
    assert_error(unknown, 404, "not_found").await;
    let empty = app
        .send_as(&user, Method::POST, &path, Some(&json!({ "question": "  " })))
        .await;
    assert_error(empty, 400, "empty_question").await;
    let too_long = app
        .send_as(
            &user,
            Method::POST,
            &path,
            Some(&json!({ "question": "why? ".repeat(20_000) })),
        )
        .await;
    let body = assert_error(too_long, 400, "message_too_long").await;
    assert!(body["error"].as_str().unwrap().contains("20,000 tokens"), "{body}");
    let mode = app
        .send_as(
            &user,
            Method::POST,
            &path,
            Some(&json!({ "question": "q", "mode": "write" })),
        )
        .await;
    assert_error(mode, 400, "invalid_mode").await;
    let no_session = app
        .send_as(
            &user,
            Method::POST,
            &format!("{path}?session_id={}", Uuid::new_v4()),
            Some(&question),
        )
        .await;
    assert_error(no_session, 404, "not_found").await;
    let malformed = app
        .send_as(&user, Method::POST, &format!("{path}?session_id=nope"), Some(&question))
        .await;
    assert_error(malformed, 400, "invalid_query").await;
}

/// A session continues only under its own incident: one about another incident, or a plain chat
/// session, would get this incident's question while listed elsewhere.
#[tokio::test]
async fn a_session_about_another_incident_or_none_does_not_continue_here() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let first = incident(&app, &user).await;
    let plain = app.create_session(&user, &json!({ "title": "general" })).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let accepted: Value = app
        .send_as(
            &user,
            Method::POST,
            &format!("/api/incidents/{first}/chat"),
            Some(&json!({ "question": "What broke?" })),
        )
        .await
        .json()
        .await
        .unwrap();
    let about_first = accepted["session_id"].as_str().unwrap().to_owned();
    completed_session(&app, &user, &about_first).await;

    let placed = post_alert(&app, &user, "/api/source_d/webhook", &fixture("source_d", "firing")).await;
    let second = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    for session in [&about_first, &plain] {
        let refused = app
            .send_as(
                &user,
                Method::POST,
                &format!("/api/incidents/{second}/chat?session_id={session}"),
                Some(&json!({ "question": "And this one?" })),
            )
            .await;
        assert_error(refused, 404, "not_found").await;
    }
    let untouched = completed_session(&app, &user, &about_first).await;
    assert_eq!(untouched["messages"].as_array().unwrap().len(), 2, "{untouched}");
}
