//! Open after N (grouping rules) and flapping (issue #30, items 3 and 4): what placement does
//! with the alerts, what the inbox shows, and that a replay rebuilds it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{
    correlation::alert_of,
    helpers::{eventually, spawn_app, spawn_app_with, spawn_app_without_workers, TestApp},
    replay::settled_checksums,
    silences::{get, inbox, incident_count, place, recovery_of},
};

/// Creates a grouping rule holding alerts of services matching `services` (a regex) until
/// `threshold` arrive within `window_seconds`; its id.
async fn rule(app: &TestApp, user: &str, services: &str, threshold: u32, window_seconds: u32) -> String {
    let body = json!({
        "name": format!("open after {threshold}"),
        "matchers": [{ "name": "service", "value": services, "isRegex": true }],
        "threshold": threshold,
        "windowSeconds": window_seconds,
    });
    let response = app
        .send_as(user, Method::POST, "/api/grouping-rules", Some(&body))
        .await;
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn fates(alerts: &[Value]) -> Vec<&str> {
    alerts.iter().map(|a| a["fate"].as_str().unwrap()).collect()
}

async fn incident_events(app: &TestApp, incident_id: &str, event_type: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE aggregate_type = 'Incident' AND aggregate_id = $1 AND event_type = $2",
    )
    .bind(incident_id)
    .bind(event_type)
    .fetch_one(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn alerts_are_held_until_the_nth_opens_one_incident_with_all_of_them_analysed_once() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let rule_id = rule(&app, &user, "db-.*", 3, 600).await;

    let (first, first_id) = place(&app, &user, &alert_of("db-1", "disk latency above 50ms", 0)).await;
    let (second, _) = place(&app, &user, &alert_of("db-2", "replication lag above 30s", 10)).await;
    assert_eq!(
        (&first, &second),
        (&Value::Null, &Value::Null),
        "held alerts open nothing"
    );
    let held = inbox(&app, &user, 2).await;
    assert_eq!(fates(&held), ["held", "held"]);
    assert_eq!(held[1]["ruleId"], json!(rule_id));
    assert!(held[1]["heldUntil"].is_string(), "{}", held[1]);
    assert_eq!(incident_count(&app, &user).await, 0);

    let (opened, _) = place(&app, &user, &alert_of("db-3", "connections refused", 20)).await;
    let incident = opened.as_str().expect("the third alert opens the incident").to_owned();
    let (joined, _) = place(&app, &user, &alert_of("db-4", "checkpoint too slow", 30)).await;
    assert_eq!(joined, opened, "later matching alerts join the group's incident");
    let (other, _) = place(&app, &user, &alert_of("web", "p99 above 2s", 7200)).await;
    assert!(
        other.is_string() && other != opened,
        "an alert no rule matches opens its own"
    );

    let detail = get(&app, &user, &format!("/api/incidents/{incident}")).await;
    let correlated = detail["incident"]["correlatedAlerts"].as_array().unwrap();
    assert_eq!(correlated.len(), 3, "{detail}");
    assert!(
        correlated.iter().all(|a| a["correlationStrategy"] == "rule"),
        "{correlated:?}"
    );
    let alerts = inbox(&app, &user, 5).await;
    assert_eq!(fates(&alerts), ["opened", "joined", "joined", "joined", "opened"]);
    assert_eq!(alerts[4]["id"], json!(first_id), "the first held alert opened it");
    assert_eq!(alerts[4]["incidentId"], json!(incident));
    let still_held = get(&app, &user, "/api/alerts?fate=held").await;
    assert_eq!(still_held["alerts"], json!([]));

    let analyses = eventually("both incidents' analyses queued", || async {
        let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = 'rca'")
            .fetch_one(&app.db)
            .await
            .unwrap();
        (jobs >= 2).then_some(jobs)
    })
    .await;
    assert_eq!(analyses, 2, "one analysis per incident, not one per alert");
}

#[tokio::test]
async fn fifty_matching_alerts_at_once_with_n_5_make_exactly_one_incident_holding_all() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    rule(&app, &user, "svc-.*", 5, 600).await;
    let placed = futures::future::join_all((0..50).map(|i| {
        let (app, user) = (&app, &user);
        async move {
            place(app, user, &alert_of(&format!("svc-{i}"), "queue depth above 10k", i))
                .await
                .0
        }
    }))
    .await;
    let incidents: std::collections::HashSet<&str> = placed.iter().filter_map(Value::as_str).collect();
    assert_eq!(incidents.len(), 1, "{placed:?}");
    let incident = incidents.into_iter().next().unwrap();
    assert_eq!(incident_count(&app, &user).await, 1);
    let detail = get(&app, &user, &format!("/api/incidents/{incident}")).await;
    assert_eq!(
        detail["incident"]["correlatedAlerts"].as_array().unwrap().len(),
        49,
        "the opening alert and 49 correlated"
    );
    assert_eq!(incident_events(&app, incident, "IncidentOpened").await, 1);
    let alerts = inbox(&app, &user, 50).await;
    assert!(
        alerts.iter().all(|a| a["incidentId"] == json!(incident)),
        "every alert ends in the incident"
    );
    let source_rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM source_alerts WHERE user_id = $1 AND incident_id = $2::uuid")
            .bind(&user)
            .bind(incident)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(source_rows, 50, "each delivery names the incident it went to");
}

#[tokio::test]
async fn held_alerts_expire_when_the_window_passes_without_the_threshold() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    rule(&app, &user, "batch-.*", 2, 1).await;
    place(&app, &user, &alert_of("batch-1", "export failed", 0)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (second, _) = place(&app, &user, &alert_of("batch-2", "export failed", 5)).await;
    assert_eq!(
        second,
        Value::Null,
        "an expired alert no longer counts towards the threshold"
    );
    assert_eq!(incident_count(&app, &user).await, 0);

    let expired = get(&app, &user, "/api/alerts?fate=held_expired").await;
    assert_eq!(expired["alerts"].as_array().unwrap().len(), 1, "{expired}");
    assert_eq!(expired["alerts"][0]["service"], "batch-1");
    let held = get(&app, &user, "/api/alerts?fate=held").await;
    assert_eq!(held["alerts"].as_array().unwrap().len(), 1, "{held}");
    assert_eq!(held["alerts"][0]["service"], "batch-2");
}

/// One firing of the flapping key `fp-flappy` (the `cycle`th, a minute after the last), or its
/// recovery.
pub(crate) fn cycle(cycle: i64, resolved: bool) -> Value {
    let description = "health check failing";
    let mut payload = if resolved {
        recovery_of("edge-proxy", description, cycle * 60)
    } else {
        alert_of("edge-proxy", description, cycle * 60)
    };
    payload["alerts"][0]["fingerprint"] = json!("fp-flappy");
    payload
}

async fn resolve(app: &TestApp, user: &str, incident: &str) {
    let body = json!({ "status": "resolved" });
    let path = format!("/api/incidents/{incident}");
    let response = app.send_as(user, Method::PATCH, &path, Some(&body)).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_flapping_alert_is_marked_once_and_its_later_cycles_open_nothing() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    for n in 0..4 {
        place(&app, &user, &cycle(n, false)).await;
        place(&app, &user, &cycle(n, true)).await;
    }
    let incidents = incident_count(&app, &user).await;
    let (flapping_in, fifth) = place(&app, &user, &cycle(4, false)).await;
    let incident = flapping_in
        .as_str()
        .expect("the fifth firing is recorded on an incident")
        .to_owned();
    place(&app, &user, &cycle(4, true)).await;
    assert_eq!(incident_count(&app, &user).await, incidents, "no new incident");
    let detail = get(&app, &user, &format!("/api/incidents/{incident}")).await;
    assert_eq!(detail["incident"]["flapping"], true, "{detail}");
    assert_eq!(incident_events(&app, &incident, "FlappingDetected").await, 1);

    // Even once resolved, the incident takes the key's cycles rather than a new one opening.
    resolve(&app, &user, &incident).await;
    let (again, _) = place(&app, &user, &cycle(5, false)).await;
    assert_eq!(again, json!(incident));
    assert_eq!(incident_count(&app, &user).await, incidents);
    assert_eq!(incident_events(&app, &incident, "FlapRecorded").await, 3);
    assert_eq!(
        incident_events(&app, &incident, "FlappingDetected").await,
        1,
        "marked once"
    );
    let opened: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE aggregate_type = 'Incident' AND event_type = 'IncidentOpened'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(opened as usize, incidents, "and so no analysis");

    let alerts = inbox(&app, &user, 11).await;
    let fifth = alerts.iter().find(|a| a["id"] == json!(fifth)).unwrap();
    assert_eq!(fifth["fate"], "flapping");
    assert_eq!(fifth["incidentId"], json!(incident));
    assert_eq!(fifth["service"], "edge-proxy");
}

#[tokio::test]
async fn a_flapping_key_quiet_for_the_window_opens_incidents_again() {
    let app = spawn_app_with(|config| {
        config.run_workers = false;
        config.flapping_cycles = 2;
        config.flapping_window_secs = 3;
    })
    .await;
    let user = app.new_user().await.id;
    for n in 0..2 {
        place(&app, &user, &cycle(n, false)).await;
        place(&app, &user, &cycle(n, true)).await;
    }
    let (flapping_in, _) = place(&app, &user, &cycle(2, false)).await;
    let incident = flapping_in.as_str().unwrap().to_owned();
    assert_eq!(
        incident_events(&app, &incident, "FlapRecorded").await,
        1,
        "flapping after two cycles"
    );
    resolve(&app, &user, &incident).await;

    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    let (after, _) = place(&app, &user, &cycle(3, false)).await;
    let after = after.as_str().expect("a quiet key's firing is placed as any other");
    assert_ne!(after, incident, "the resolved incident is not reopened");
    let detail = get(&app, &user, &format!("/api/incidents/{after}")).await;
    assert_eq!(detail["incident"]["previousIncidentId"], json!(incident));
    assert_eq!(detail["incident"]["flapping"], false);
}

#[tokio::test]
async fn held_released_and_flapping_alerts_replay_identically() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    rule(&app, &user, "db-.*", 2, 600).await;
    place(&app, &user, &alert_of("db-1", "disk latency above 50ms", 0)).await;
    place(&app, &user, &alert_of("db-2", "disk latency above 50ms", 10)).await;
    place(&app, &user, &alert_of("db-9", "disk latency above 50ms", 20)).await;
    for n in 0..5 {
        place(&app, &user, &cycle(n, false)).await;
        place(&app, &user, &cycle(n, true)).await;
    }
    inbox(&app, &user, 13).await;
    let live = settled_checksums(&app).await;
    app.state.events.replay(&app.db, None).await.unwrap();
    let replayed = vigil_projections::checksums(&app.db, &app.state.events.consumers)
        .await
        .unwrap();
    assert_eq!(replayed, live);
}
