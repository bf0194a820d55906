//! Every request has an id: the caller's plain `X-Request-Id` or a new UUID, echoed in the
//! response and named, with the user and the incident, by the request's JSON log lines; a
//! background job's lines name what its payload names.

use serde_json::Value;

use crate::{
    helpers::{eventually, spawn_app, CapturedLogs, PASSWORD},
    ingestion::{fixture, post_alert},
};

#[tokio::test]
async fn a_plain_request_id_is_echoed_and_any_other_replaced_by_a_uuid() {
    let app = spawn_app().await;
    let id_of = |response: &reqwest::Response| response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let kept = app
        .client
        .get(app.url("/health"))
        .header("X-Request-Id", "lb-7f3a.42")
        .send()
        .await
        .unwrap();
    assert_eq!(id_of(&kept), "lb-7f3a.42");
    for sent in [Some("two words"), Some(&"x".repeat(200)[..]), None] {
        let mut request = app.client.get(app.url("/health"));
        if let Some(sent) = sent {
            request = request.header("X-Request-Id", sent);
        }
        let response = request.send().await.unwrap();
        assert!(
            uuid::Uuid::parse_str(&id_of(&response)).is_ok(),
            "{sent:?} -> {}",
            id_of(&response)
        );
    }
    let unknown = app.client.get(app.url("/api/no-such-thing")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(uuid::Uuid::parse_str(&id_of(&unknown)).is_ok(), "errors carry one too");
}

#[tokio::test]
async fn a_request_s_log_lines_name_its_id_its_user_and_its_incident() {
    let logs = CapturedLogs::json();
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let incident = uuid::Uuid::new_v4().to_string();
    let response = app
        .client
        .get(app.url(&format!("/api/incidents/{incident}")))
        .header("X-User-ID", &user)
        .header("X-Request-Id", "req-logs-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    let text = logs.text();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let request_span = |line: &Value| -> Option<Value> {
        line["spans"]
            .as_array()?
            .iter()
            .find(|span| span["name"] == "request" && span["request_id"] == "req-logs-1")
            .cloned()
    };
    let spans: Vec<Value> = lines.iter().filter_map(request_span).collect();
    assert!(!spans.is_empty(), "no line of the request in:\n{text}");
    let last = spans.last().unwrap();
    assert_eq!(last["user_id"], user.as_str(), "{last}");
    assert_eq!(last["incident_id"], incident.as_str(), "{last}");
    assert_eq!(last["path"], format!("/api/incidents/{incident}"), "{last}");
    assert!(!text.contains(PASSWORD), "no credential in the logs");
}

#[tokio::test]
async fn an_analysis_job_s_log_lines_name_its_incident_and_user() {
    let logs = CapturedLogs::json();
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let answer = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let incident = answer["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    eventually("a line of the incident's analysis job", || async {
        let text = logs.text();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| {
                line["spans"].as_array().is_some_and(|spans| {
                    spans.iter().any(|span| {
                        span["name"] == "job"
                            && span["incident_id"] == incident.as_str()
                            && span["user_id"] == user.as_str()
                    })
                })
            })
    })
    .await;
}
