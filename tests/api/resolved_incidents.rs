//! A resolved incident stays resolved (issue #30, item 5): a new firing of an alert whose incident
//! is resolved or merged opens a new incident that names the earlier one (`previousIncidentId`),
//! and its analysis is told about it; a redelivery of the very same payload stays deduplicated,
//! before the resolution and after it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{
    correlation::{alert_of, alert_with_severity, post},
    helpers::{eventually, spawn_app, spawn_app_without_workers, TestApp},
    incidents::{detail, resolve},
    ingestion::{fixture, post_alert},
};

const PATH: &str = "/api/source_a/alerts";

/// The source_a fixture's alert (same fingerprint) firing at `starts_at`.
fn firing_at(starts_at: &str) -> Value {
    let mut body = fixture("source_a", "firing");
    body["alerts"][0]["startsAt"] = json!(starts_at);
    body
}

/// Where a notification's first alert went: its alert id, incident and whether it correlated.
fn placed(answer: &Value) -> (i64, String, bool) {
    let alert = &answer["alerts"][0];
    (
        alert["alert_id"].as_i64().unwrap(),
        alert["incident_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned(),
        alert["correlated"].as_bool().unwrap(),
    )
}

async fn event_types(app: &TestApp, user: &str, id: &str) -> Vec<String> {
    app.incident_events(user, id)
        .await
        .iter()
        .map(|event| event["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_new_firing_after_resolution_opens_a_new_incident_naming_the_resolved_one() {
    // No analysis running meanwhile: the replay is compared with the live rows as they stand.
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let first = post_alert(&app, &user, PATH, &fixture("source_a", "firing")).await;
    let (alert_id, resolved_id, _) = placed(&first);
    let again = post_alert(&app, &user, PATH, &fixture("source_a", "firing")).await;
    assert_eq!(
        again["alerts"], first["alerts"],
        "a redelivery before the resolution is deduplicated"
    );
    assert_eq!(
        detail(&app, &user, &resolved_id).await["previousIncidentId"],
        Value::Null
    );

    // The alert's recovery, then the user resolving the incident (spec: status is set by PATCH).
    let recovery = post_alert(&app, &user, PATH, &fixture("source_a", "resolved")).await;
    assert_eq!(placed(&recovery).1, resolved_id);
    resolve(&app, &user, &resolved_id).await;
    let history = event_types(&app, &user, &resolved_id).await;

    let redelivered = post_alert(&app, &user, PATH, &fixture("source_a", "firing")).await;
    assert_eq!(
        redelivered["alerts"], first["alerts"],
        "a redelivery after the resolution is still the same delivery"
    );

    // Two minutes on: near enough that an open incident would have taken it.
    let refired = post_alert(&app, &user, PATH, &firing_at("2026-11-20T14:04:10Z")).await;
    let (refired_alert, reopened_id, correlated) = placed(&refired);
    assert_ne!(reopened_id, resolved_id, "{refired}");
    assert_ne!(refired_alert, alert_id);
    assert!(!correlated, "it opened the incident: {refired}");

    let new = detail(&app, &user, &reopened_id).await;
    assert_eq!(new["previousIncidentId"], json!(resolved_id), "{new}");
    assert_eq!(new["status"], "investigating");
    assert_eq!(new["sourceAlertId"], refired_alert.to_string());
    let old = detail(&app, &user, &resolved_id).await;
    assert_eq!(old["status"], "resolved", "it stays resolved");
    assert_eq!(old["correlatedAlertCount"], 0);
    assert_eq!(old["correlatedAlerts"], json!([]));
    assert_eq!(
        event_types(&app, &user, &resolved_id).await,
        history,
        "nothing was appended to it"
    );
    let opened = &app.incident_events(&user, &reopened_id).await[0];
    assert_eq!(
        opened["payload"]["IncidentOpened"]["previous_incident_id"],
        json!(resolved_id)
    );
    assert_eq!(opened["actor"], "system:ingestion");

    // Resolved in turn, the alert firing a third time names the newest incident it fired in.
    resolve(&app, &user, &reopened_id).await;
    let third = post_alert(&app, &user, PATH, &firing_at("2026-11-20T16:00:00Z")).await;
    let (_, third_id, _) = placed(&third);
    assert!(![&resolved_id, &reopened_id].contains(&&third_id), "{third}");
    assert_eq!(
        detail(&app, &user, &third_id).await["previousIncidentId"],
        json!(reopened_id)
    );

    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM source_alerts WHERE user_id = $1")
        .bind(&user)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(
        rows, 4,
        "the firing, its recovery and two new firings; no redelivery is a row"
    );

    app.assert_incidents_replay_as_live().await;
    let links: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT id::text, previous_incident_id::text FROM incidents WHERE user_id = $1 ORDER BY started_at",
    )
    .bind(&user)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        links,
        [
            (resolved_id.clone(), None),
            (reopened_id.clone(), Some(resolved_id)),
            (third_id, Some(reopened_id))
        ],
        "the replayed rows keep the links"
    );
}

/// One notification holding the alert's firing, and its firing again two hours on: the second
/// (out of the first's reach) opens an incident naming the one the batch just opened.
#[tokio::test]
async fn a_key_firing_twice_in_one_notification_links_its_second_incident_to_the_first() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let mut body = fixture("source_a", "firing");
    let mut later = body["alerts"][0].clone();
    later["startsAt"] = json!("2026-11-20T16:02:10Z");
    body["alerts"].as_array_mut().unwrap().push(later);
    let answer = post_alert(&app, &user, PATH, &body).await;
    let (first, second) = (&answer["alerts"][0], &answer["alerts"][1]);
    assert_ne!(first["incident_id"], second["incident_id"], "{answer}");
    let second_id = second["incident_id"].as_str().unwrap();
    assert_eq!(
        detail(&app, &user, second_id).await["previousIncidentId"],
        first["incident_id"]
    );
}

#[tokio::test]
async fn a_merged_incidents_alert_firing_again_does_not_go_into_it() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let orders = "GET /orders failed: dial tcp 10.9.8.7:6379: i/o timeout";
    let merged = post(&app, &user, &alert_of("orders-api", orders, 0)).await;
    let disk = alert_with_severity("backup-01", "disk /srv/backups is 91% full", 10, "warning");
    let target = post(&app, &user, &disk).await;
    assert_ne!(merged, target);
    let response = app
        .send_as(
            &user,
            Method::POST,
            &format!("/api/incidents/{target}/merge-alert"),
            Some(&json!({ "sourceIncidentId": merged })),
        )
        .await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    let history = event_types(&app, &user, &merged).await;

    // The same fingerprint (`fp-orders-api-0`) firing again, two hours on.
    let mut refiring = alert_of("orders-api", orders, 0);
    refiring["alerts"][0]["startsAt"] = json!("2026-11-20T16:02:10Z");
    let answer = post_alert(&app, &user, PATH, &refiring).await;
    let (_, placed_in, _) = placed(&answer);
    assert!(![&merged, &target].contains(&&placed_in), "{answer}");
    assert_eq!(
        detail(&app, &user, &placed_in).await["previousIncidentId"],
        json!(merged)
    );
    let old = detail(&app, &user, &merged).await;
    assert_eq!(old["status"], "merged");
    assert_eq!(old["mergedIntoIncidentId"], json!(target));
    assert_eq!(
        event_types(&app, &user, &merged).await,
        history,
        "nothing was appended to it"
    );

    // Firing again a minute after the first time: near the merge target, which holds the merged
    // incident's alerts and is open, so it takes it; the merged incident still takes nothing.
    refiring["alerts"][0]["startsAt"] = json!("2026-11-20T14:03:10Z");
    let answer = post_alert(&app, &user, PATH, &refiring).await;
    assert_eq!(placed(&answer).1, target, "{answer}");
    assert!(placed(&answer).2, "correlated: {answer}");
    assert_eq!(event_types(&app, &user, &merged).await, history);
    app.assert_incidents_replay_as_live().await;
}

/// The analysis of the new incident is told that its alert came back, and how the earlier
/// incident ended.
#[tokio::test]
async fn the_analysis_of_the_new_incident_is_told_about_the_resolved_one() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let first = post_alert(&app, &user, PATH, &fixture("source_a", "firing")).await;
    let (_, resolved_id, _) = placed(&first);
    resolve(&app, &user, &resolved_id).await;
    let refired = post_alert(&app, &user, PATH, &firing_at("2026-11-20T14:04:10Z")).await;
    let (_, new_id, _) = placed(&refired);
    assert_ne!(new_id, resolved_id);

    let analysed = eventually("the new incident's analysis to complete", || async {
        let incident = detail(&app, &user, &new_id).await;
        (incident["auroraStatus"] == "complete").then_some(incident)
    })
    .await;
    let told = format!("This alert fired before, in incident {resolved_id} (\"CheckoutApiHighLatency\"");
    let thoughts = analysed["streamingThoughts"].as_array().unwrap();
    let fact = thoughts
        .iter()
        .find(|thought| thought["content"].as_str().unwrap().starts_with(&told))
        .unwrap_or_else(|| panic!("no thought tells of the earlier incident: {thoughts:?}"));
    assert_eq!(fact["type"], "evidence");
    let resolution = app
        .incident_events(&user, &resolved_id)
        .await
        .into_iter()
        .find(|event| event["type"] == "ResolutionRequested")
        .unwrap();
    let resolved_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(resolution["payload"]["ResolutionRequested"]["at"].clone()).unwrap();
    let content = fact["content"].as_str().unwrap();
    let when = format!(
        "resolved at {}: it has come back.",
        resolved_at.format("%Y-%m-%d %H:%M UTC")
    );
    // (Followed by the earlier incident's summary when its own analysis had ended by then.)
    assert!(content.contains(&when), "{content}");
    assert!(analysed["summary"].as_str().unwrap().contains(&told), "{analysed}");

    let earlier = eventually("the first incident's analysis to complete", || async {
        let incident = detail(&app, &user, &resolved_id).await;
        (incident["auroraStatus"] == "complete").then_some(incident)
    })
    .await;
    let thoughts = earlier["streamingThoughts"].as_array().unwrap();
    assert!(
        !thoughts
            .iter()
            .any(|thought| thought["content"].as_str().unwrap().contains("fired before")),
        "the first incident had no earlier one: {thoughts:?}"
    );
}
