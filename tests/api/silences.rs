//! Silences and maintenance windows, and the alert inbox that shows what became of every alert
//! (issue #30, items 1, 2 and 6).

use std::collections::HashSet;

use chrono::{Duration, Utc};
use reqwest::Method;
use serde_json::{json, Value};

use crate::{
    correlation::{alert_of, alert_with_severity},
    helpers::{assert_error, eventually, spawn_app, spawn_app_without_workers, TestApp},
    ingestion::{fixture, post_alert},
    replay::settled_checksums,
};

const PATH: &str = "/api/source_a/alerts";

/// Creates a silence; its id.
pub(crate) async fn silence(app: &TestApp, user: &str, body: &Value) -> String {
    let response = app.send_as(user, Method::POST, "/api/silences", Some(body)).await;
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    let created: Value = response.json().await.unwrap();
    created["id"].as_str().unwrap().to_owned()
}

/// A silence of one service for the next hour.
pub(crate) fn silence_of_service(service: &str) -> Value {
    json!({
        "matchers": [{ "name": "service", "value": service }],
        "endsAt": (Utc::now() + Duration::hours(1)).to_rfc3339(),
        "comment": "database failover",
    })
}

/// Posts the alert; where its first alert went (`null` when nowhere) and its alert id.
pub(crate) async fn place(app: &TestApp, user: &str, body: &Value) -> (Value, i64) {
    let answer = post_alert(app, user, PATH, body).await;
    let alert = &answer["alerts"][0];
    (alert["incident_id"].clone(), alert["alert_id"].as_i64().unwrap())
}

/// [`alert_of`]'s recovery.
pub(crate) fn recovery_of(service: &str, description: &str, seconds: i64) -> Value {
    let mut payload = alert_of(service, description, seconds);
    payload["status"] = json!("resolved");
    payload["alerts"][0]["status"] = json!("resolved");
    payload["alerts"][0]["endsAt"] = json!("2026-11-20T15:00:00Z");
    payload
}

pub(crate) async fn get(app: &TestApp, user: &str, path: &str) -> Value {
    let response = app.send_as(user, Method::GET, path, None).await;
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

/// The user's inbox once it lists `count` alerts (newest first).
pub(crate) async fn inbox(app: &TestApp, user: &str, count: usize) -> Vec<Value> {
    eventually(&format!("{count} alerts in the inbox"), || async {
        let page = get(app, user, "/api/alerts?limit=100").await;
        let alerts = page["alerts"].as_array().unwrap().clone();
        (alerts.len() == count).then_some(alerts)
    })
    .await
}

pub(crate) async fn incident_count(app: &TestApp, user: &str) -> usize {
    get(app, user, "/api/incidents").await["incidents"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_silenced_alert_opens_nothing_and_the_inbox_says_which_silence() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let silence_id = silence(&app, &user, &silence_of_service("batch-jobs")).await;
    let shown = get(&app, &user, &format!("/api/silences/{silence_id}")).await;
    assert_eq!(shown["status"]["state"], "active", "{shown}");
    assert_eq!(shown["createdBy"], json!(user));
    assert_eq!(
        shown["matchers"][0],
        json!({ "name": "service", "value": "batch-jobs", "isRegex": false, "isEqual": true })
    );

    let (incident, silenced_id) = place(&app, &user, &alert_of("batch-jobs", "nightly export failed", 0)).await;
    assert_eq!(incident, Value::Null, "a silenced alert opens no incident");
    let (opened, opened_id) = place(&app, &user, &alert_of("orders-api", "p99 above 2s", 30)).await;
    assert!(opened.is_string(), "another service's alert still opens one");
    assert_eq!(incident_count(&app, &user).await, 1);

    let alerts = inbox(&app, &user, 2).await;
    assert_eq!(alerts[0]["id"], json!(opened_id), "newest first");
    assert_eq!(alerts[0]["fate"], "opened");
    assert_eq!(alerts[0]["incidentId"], opened);
    let silenced = &alerts[1];
    assert_eq!(silenced["id"], json!(silenced_id));
    assert_eq!(silenced["fate"], "silenced");
    assert_eq!(silenced["silenceIds"], json!([silence_id]));
    assert_eq!(silenced["incidentId"], Value::Null);
    assert_eq!(silenced["service"], "batch-jobs");
    assert_eq!(silenced["source"], "source_a");

    let detail = get(&app, &user, silenced["url"].as_str().unwrap()).await;
    assert_eq!(detail["fate"], "silenced");
    assert_eq!(detail["rawPayload"]["alerts"][0]["labels"]["service"], "batch-jobs");
    let filtered = get(&app, &user, "/api/alerts?fate=silenced").await;
    assert_eq!(filtered["alerts"].as_array().unwrap().len(), 1);
    let by_service = get(&app, &user, "/api/alerts?service=orders-api&source=source_a").await;
    assert_eq!(by_service["alerts"][0]["id"], json!(opened_id));
    assert_eq!(by_service["alerts"].as_array().unwrap().len(), 1);

    // The silence's own stream and the alert's record who did what.
    let actors: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_type, metadata->>'actor' FROM events
         WHERE (aggregate_type = 'Silence' AND aggregate_id = $1) OR (aggregate_type = 'ReceivedAlert' AND aggregate_id = $2)
         ORDER BY global_position",
    )
    .bind(&silence_id)
    .bind(silenced_id.to_string())
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        actors,
        vec![
            ("SilenceCreated".to_owned(), format!("user:{user}")),
            ("AlertSilenced".to_owned(), "system:ingestion".to_owned()),
        ]
    );

    // Another user sees none of it.
    let stranger = app.new_user().await.id;
    for path in [
        format!("/api/silences/{silence_id}"),
        format!("/api/alerts/{silenced_id}"),
    ] {
        assert_error(app.send_as(&stranger, Method::GET, &path, None).await, 404, "not_found").await;
    }
    let expired = app
        .send_as(&stranger, Method::DELETE, &format!("/api/silences/{silence_id}"), None)
        .await;
    assert_error(expired, 404, "not_found").await;
    assert_eq!(get(&app, &stranger, "/api/alerts").await["alerts"], json!([]));
    assert_eq!(get(&app, &stranger, "/api/silences").await["silences"], json!([]));
}

#[tokio::test]
async fn a_recovery_passes_a_silence_and_still_resolves_its_alert() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let description = "checkout latency above 2s";
    let (incident, _) = place(&app, &user, &alert_of("checkout-api", description, 0)).await;
    silence(&app, &user, &silence_of_service("checkout-api")).await;

    let (resolved, recovery_id) = place(&app, &user, &recovery_of("checkout-api", description, 0)).await;
    assert_eq!(resolved, incident, "the recovery resolved the alert of its incident");
    let (another, _) = place(&app, &user, &alert_of("checkout-api", "checkout 5xx above 1%", 60)).await;
    assert_eq!(another, Value::Null, "a new firing of the service is silenced");

    let alerts = inbox(&app, &user, 3).await;
    let fates: Vec<&str> = alerts.iter().map(|a| a["fate"].as_str().unwrap()).collect();
    assert_eq!(fates, ["silenced", "resolved", "opened"]);
    assert_eq!(alerts[1]["id"], json!(recovery_id));
    assert_eq!(alerts[1]["incidentId"], incident);
    assert_eq!(alerts[1]["service"], "checkout-api", "a recovery's row names its alert");
}

#[tokio::test]
async fn a_silence_expired_mid_storm_lets_later_alerts_through_and_replays_nothing() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let body = json!({
        "matchers": [
            { "name": "team", "value": "pay.*", "isRegex": true },
            { "name": "severity", "value": "info", "isEqual": false },
        ],
        "endsAt": (Utc::now() + Duration::hours(2)).to_rfc3339(),
    });
    let silence_id = silence(&app, &user, &body).await;
    let storm = |from: i64| {
        (from..from + 20).map(|i| {
            let mut alert = alert_with_severity(&format!("payments-{i}"), "ledger write timeout", i * 600, "critical");
            alert["alerts"][0]["labels"]["team"] = json!("payments");
            alert
        })
    };
    let placed = futures::future::join_all(storm(0).map(|alert| {
        let (app, user) = (&app, &user);
        async move { place(app, user, &alert).await.0 }
    }))
    .await;
    assert!(
        placed.iter().all(Value::is_null),
        "every alert of the storm is silenced: {placed:?}"
    );

    let expire = app
        .send_as(&user, Method::DELETE, &format!("/api/silences/{silence_id}"), None)
        .await;
    assert_eq!(expire.status(), 204);
    let shown = get(&app, &user, &format!("/api/silences/{silence_id}")).await;
    assert_eq!(shown["status"]["state"], "expired");
    assert_eq!(shown["expiredBy"], json!(user));
    let again = app
        .send_as(&user, Method::DELETE, &format!("/api/silences/{silence_id}"), None)
        .await;
    assert_eq!(again.status(), 204, "expiring it again changes nothing");

    let placed = futures::future::join_all(storm(20).map(|alert| {
        let (app, user) = (&app, &user);
        async move { place(app, user, &alert).await.0 }
    }))
    .await;
    assert!(
        placed.iter().all(Value::is_string),
        "after it, alerts open incidents again"
    );
    let alerts = inbox(&app, &user, 40).await;
    let silenced = alerts.iter().filter(|a| a["fate"] == "silenced").count();
    assert_eq!(silenced, 20, "the alerts silenced before stay silenced, none replayed");
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_type = 'Silence' AND aggregate_id = $1")
            .bind(&silence_id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(events, 2, "created and expired, once each");
}

#[tokio::test]
async fn a_weekly_maintenance_window_silences_only_inside_its_hours() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let zone = "Asia/Kolkata";
    // India keeps +05:30 all year round.
    let local = Utc::now().with_timezone(&chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap());
    let window = |from: Duration, to: Duration| {
        json!({
            "matchers": [{ "name": "environment", "value": "staging" }],
            "weekly": {
                "timeZone": zone,
                "days": ["mon", "tue", "wednesday", "thu", "fri", "sat", "sunday"],
                "start": (local + from).format("%H:%M").to_string(),
                "end": (local + to).format("%H:%M").to_string(),
            },
        })
    };
    let later = silence(&app, &user, &window(Duration::hours(3), Duration::hours(4))).await;
    let shown = get(&app, &user, &format!("/api/silences/{later}")).await;
    assert_eq!(shown["status"]["state"], "pending", "{shown}");
    assert_eq!(shown["weekly"]["days"][2], "wednesday");
    assert_eq!(shown["endsAt"], Value::Null);

    let mut staging = alert_of("search-api", "staging index rebuild slow", 0);
    staging["alerts"][0]["labels"]["environment"] = json!("staging");
    let (outside, _) = place(&app, &user, &staging).await;
    assert!(outside.is_string(), "outside its hours the window silences nothing");

    let now = silence(&app, &user, &window(Duration::minutes(-60), Duration::minutes(60))).await;
    assert_eq!(
        get(&app, &user, &format!("/api/silences/{now}")).await["status"]["state"],
        "active"
    );
    staging["alerts"][0]["fingerprint"] = json!("fp-staging-2");
    let (inside, _) = place(&app, &user, &staging).await;
    assert_eq!(inside, Value::Null, "inside its hours it silences");
    let listed = get(&app, &user, "/api/silences").await;
    let ids: Vec<&str> = listed["silences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [now.as_str(), later.as_str()], "newest first");
    let first = get(&app, &user, "/api/silences?limit=1").await;
    assert_eq!(first["silences"][0]["id"], json!(now));
    let cursor = first["nextCursor"].as_str().unwrap();
    let second = get(&app, &user, &format!("/api/silences?limit=1&cursor={cursor}")).await;
    assert_eq!(second["silences"][0]["id"], json!(later));
    assert_eq!(second["nextCursor"], Value::Null, "the last page");
    let stranger = app.new_user().await.id;
    let theirs = get(&app, &stranger, &format!("/api/silences?cursor={cursor}")).await;
    assert_eq!(theirs["silences"], json!([]), "another user's cursor pages nothing");
}

#[tokio::test]
async fn bad_silences_get_a_400_naming_the_field() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let in_an_hour = (Utc::now() + Duration::hours(1)).to_rfc3339();
    let cases = [
        (
            json!({ "matchers": [{ "name": "service", "value": "(db", "isRegex": true }], "endsAt": in_an_hour }),
            "matchers[0].value",
        ),
        (
            json!({ "matchers": [{ "name": "service", "value": ".*", "isRegex": true }], "endsAt": in_an_hour }),
            "matchers",
        ),
        (json!({ "matchers": [], "endsAt": in_an_hour }), "matchers"),
        (json!({ "matchers": [{ "name": "service", "value": "db" }] }), "endsAt"),
        (
            json!({ "matchers": [{ "name": "service", "value": "db" }], "startsAt": in_an_hour,
                 "endsAt": (Utc::now() + Duration::minutes(5)).to_rfc3339() }),
            "endsAt",
        ),
        (
            json!({ "matchers": [{ "name": "service", "value": "db" }], "endsAt": "2020-01-01T00:00:00Z" }),
            "endsAt",
        ),
        (
            json!({ "matchers": [{ "name": "service", "value": "db" }],
                 "weekly": { "timeZone": "Mars/Olympus", "days": ["mon"], "start": "01:00", "end": "02:00" } }),
            "weekly.timeZone",
        ),
        (
            json!({ "matchers": [{ "name": "service", "value": "db" }],
                 "weekly": { "timeZone": "UTC", "days": ["someday"], "start": "01:00", "end": "02:00" } }),
            "weekly.days[0]",
        ),
        (
            json!({ "matchers": [{ "name": "service", "value": "db" }],
                 "weekly": { "timeZone": "UTC", "days": ["mon"], "start": "25:00", "end": "02:00" } }),
            "weekly.start",
        ),
    ];
    for (body, field) in cases {
        let response = app.send_as(&user, Method::POST, "/api/silences", Some(&body)).await;
        let error = assert_error(response, 400, "invalid_silence").await;
        assert!(error["error"].as_str().unwrap().starts_with(field), "{field}: {error}");
    }
    let unknown = json!({ "matchers": [{ "name": "service", "value": "db" }], "endsAt": in_an_hour, "createdBy": "x" });
    let response = app.send_as(&user, Method::POST, "/api/silences", Some(&unknown)).await;
    assert_eq!(response.status(), 400, "the creator is the caller, never the body");
    for path in [
        "/api/silences/not-a-uuid",
        "/api/alerts/abc",
        "/api/alerts?fate=lost",
        "/api/alerts?source=x",
        "/api/alerts?limit=0",
    ] {
        assert_eq!(
            app.send_as(&user, Method::GET, path, None).await.status(),
            400,
            "{path}"
        );
    }
    assert_eq!(
        get(&app, &user, "/api/silences").await["silences"],
        json!([]),
        "nothing was created"
    );
}

#[tokio::test]
async fn inbox_pages_stay_stable_while_alerts_keep_arriving() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    for i in 0..30 {
        place(
            &app,
            &user,
            &alert_of(&format!("svc-{i}"), "queue depth above 10k", i * 900),
        )
        .await;
    }
    let first = inbox(&app, &user, 30).await;
    let before: HashSet<i64> = first.iter().map(|a| a["id"].as_i64().unwrap()).collect();

    let arriving = async {
        for i in 30..50 {
            place(
                &app,
                &user,
                &alert_of(&format!("svc-{i}"), "queue depth above 10k", i * 900),
            )
            .await;
        }
    };
    let paging = async {
        let mut seen = Vec::new();
        let mut page = get(&app, &user, "/api/alerts?limit=7").await;
        let newest = page["alerts"][0]["id"].as_i64().unwrap();
        loop {
            seen.extend(
                page["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["id"].as_i64().unwrap()),
            );
            let Some(cursor) = page["nextCursor"].as_str() else {
                break;
            };
            tokio::task::yield_now().await;
            page = get(&app, &user, &format!("/api/alerts?limit=7&cursor={cursor}")).await;
        }
        (newest, seen)
    };
    let ((), (newest, seen)) = tokio::join!(arriving, paging);
    assert!(
        seen.windows(2).all(|w| w[0] > w[1]),
        "strictly newest first, no repeats: {seen:?}"
    );
    assert!(
        seen.iter().all(|&id| id <= newest),
        "a page never shows what arrived after the first"
    );
    assert!(
        before.iter().all(|id| seen.contains(id)),
        "every alert listed before the paging began is on a page"
    );
}

#[tokio::test]
async fn every_delivery_is_in_the_inbox_with_its_fate_and_a_replay_rebuilds_it() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let recovery = fixture("source_d", "resolved");
    let early = post_alert(&app, &user, "/api/source_d/webhook", &recovery).await;
    let early_id = early["alerts"][0]["alert_id"].as_i64().unwrap();
    let unmatched = inbox(&app, &user, 1).await;
    assert_eq!(unmatched[0]["fate"], "unmatched", "a recovery no incident holds");

    let firing = post_alert(&app, &user, "/api/source_d/webhook", &fixture("source_d", "firing")).await;
    let incident = firing["alerts"][0]["incident_id"].clone();
    let again = post_alert(&app, &user, "/api/source_d/webhook", &recovery).await;
    assert_eq!(
        again["alerts"][0]["incident_id"], incident,
        "delivered again, it resolves"
    );

    let triggered = fixture("source_b", "firing");
    let opened = post_alert(&app, &user, "/api/source_b/webhook", &triggered).await;
    let mut acknowledged = triggered.clone();
    acknowledged["event"]["event_type"] = json!("incident.acknowledged");
    acknowledged["event"]["data"]["status"] = json!("acknowledged");
    post_alert(&app, &user, "/api/source_b/webhook", &acknowledged).await;
    post_alert(&app, &user, "/api/source_b/webhook", &triggered).await;

    // The early recovery, its firing, its redelivery, the paging tool's trigger, its
    // acknowledgement and the trigger's redelivery.
    let alerts = inbox(&app, &user, 6).await;
    let fates: Vec<&str> = alerts.iter().map(|a| a["fate"].as_str().unwrap()).collect();
    assert_eq!(
        fates,
        [
            "deduplicated",
            "updated",
            "opened",
            "deduplicated",
            "opened",
            "resolved"
        ],
        "{alerts:#?}"
    );
    let opened_id = opened["alerts"][0]["alert_id"].as_i64().unwrap();
    assert_eq!(alerts[0]["redeliveryOf"], json!(opened_id));
    assert_eq!(alerts[0]["incidentId"], opened["alerts"][0]["incident_id"]);
    assert_eq!(
        alerts[1]["incidentId"], opened["alerts"][0]["incident_id"],
        "the state change stays with its incident"
    );
    assert_eq!(alerts[3]["redeliveryOf"], json!(early_id));
    assert_eq!(
        alerts[3]["incidentId"], incident,
        "the redelivery that resolved it names the incident"
    );
    let resolved = &alerts[5];
    assert_eq!(resolved["id"], json!(early_id));
    assert_eq!(
        resolved["incidentId"], incident,
        "the early recovery now resolves an incident"
    );
    let redelivered = get(&app, &user, alerts[0]["url"].as_str().unwrap()).await;
    assert_eq!(
        redelivered["rawPayload"], triggered,
        "a redelivery shows the payload it repeats"
    );

    let live = settled_checksums(&app).await;
    app.state.events.replay(&app.db, None).await.unwrap();
    let replayed = vigil_projections::checksums(&app.db, &app.state.events.consumers)
        .await
        .unwrap();
    assert_eq!(replayed, live);
    assert_eq!(
        inbox(&app, &user, 6).await,
        alerts,
        "the replayed inbox is the live one"
    );
}

#[tokio::test]
async fn creating_silences_spends_the_api_budget() {
    let app = crate::helpers::spawn_app_with(|config| config.rate_limit_per_minute = 3).await;
    let user = "silencer";
    let body = silence_of_service("orders-db");
    for _ in 0..3 {
        let created = app.send_as(user, Method::POST, "/api/silences", Some(&body)).await;
        assert_eq!(created.status(), 201);
    }
    let refused = app.send_as(user, Method::POST, "/api/silences", Some(&body)).await;
    assert_error(refused, 429, "rate_limited").await;
}
