//! Postmortems: resolving an incident writes exactly one, however often it is resolved; it is
//! 202 while being written, 404 before and for other users; the list is the caller's.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{
    helpers::{eventually, spawn_app, spawn_app_without_workers, TestApp},
    incidents::resolve,
    ingestion::{fixture, post_alert},
};

async fn incident_of(app: &TestApp, user: &str) -> String {
    let placed = post_alert(app, user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    post_alert(app, user, "/api/source_a/alerts", &fixture("source_a", "related")).await;
    placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned()
}

async fn postmortem_jobs(app: &TestApp, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = 'postmortem' AND unique_key LIKE $1")
        .bind(format!("postmortem:incident:{id}:%"))
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn resolving_writes_one_postmortem_however_often() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let id = incident_of(&app, &user).await;
    let path = format!("/api/incidents/{id}/postmortem");
    let before = app.send_as(&user, Method::GET, &path, None).await;
    assert_eq!(before.status(), 404, "no postmortem before the incident is resolved");

    resolve(&app, &user, &id).await;
    resolve(&app, &user, &id).await;
    let postmortem: Value = eventually("the postmortem to be written", || async {
        let response = app.send_as(&user, Method::GET, &path, None).await;
        (response.status() == 200).then_some(response)?.json().await.ok()
    })
    .await;

    let content = postmortem["content"].as_str().unwrap();
    for section in [
        "## Summary",
        "## Timeline",
        "## Root Cause",
        "## Impact",
        "## Resolution",
        "## Action Items",
        "## Lessons Learned",
    ] {
        assert!(content.contains(section), "{section} missing:\n{content}");
    }
    assert!(content.contains("correlated"), "{content}");
    assert!(
        content.contains("status set to resolved"),
        "the timeline comes from the events:\n{content}"
    );
    assert_eq!(postmortem["incidentId"], json!(id));
    assert_eq!(
        postmortem_jobs(&app, &id).await,
        1,
        "resolving twice asks for one postmortem"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM postmortems")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 1);

    let list: Value = app
        .send_as(&user, Method::GET, "/api/postmortems", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["postmortems"].as_array().unwrap().len(), 1);
    assert_eq!(list["postmortems"][0]["incidentId"], json!(id));

    let stranger = app.new_user().await.id;
    let theirs = app.send_as(&stranger, Method::GET, &path, None).await;
    assert_eq!(theirs.status(), 404);
    let their_list: Value = app
        .send_as(&stranger, Method::GET, "/api/postmortems", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(their_list["postmortems"], json!([]));
}

#[tokio::test]
async fn while_the_job_waits_the_postmortem_is_generating() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let id = incident_of(&app, &user).await;
    resolve(&app, &user, &id).await;
    eventually("the postmortem job to be enqueued", || async {
        (postmortem_jobs(&app, &id).await == 1).then_some(())
    })
    .await;

    let response = app
        .send_as(&user, Method::GET, &format!("/api/incidents/{id}/postmortem"), None)
        .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "status": "generating" })
    );

    let malformed = app
        .send_as(&user, Method::GET, "/api/incidents/not-a-uuid/postmortem", None)
        .await;
    assert_eq!(malformed.status(), 400);

    // A job that failed for good: there will be no postmortem of this resolution.
    sqlx::query("UPDATE jobs SET state = 'discarded', finished_at = now() WHERE kind = 'postmortem'")
        .execute(&app.db)
        .await
        .unwrap();
    let path = format!("/api/incidents/{id}/postmortem");
    assert_eq!(app.send_as(&user, Method::GET, &path, None).await.status(), 404);
    // Resolved, the job not queued yet (the reactor reads the resolution moments after the
    // PATCH's answer): a client polling from that answer is told to wait, not "none".
    sqlx::query("DELETE FROM jobs WHERE kind = 'postmortem'")
        .execute(&app.db)
        .await
        .unwrap();
    let response = app.send_as(&user, Method::GET, &path, None).await;
    assert_eq!(response.status(), 202);
}
