//! Users' feedback to correlation: splitting an alert off an incident, and the service topology
//! they declare (and what is learned from their merges and splits).

use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{
    correlation::{alert_of, alert_with_severity, post},
    helpers::{assert_error, eventually, spawn_app, spawn_app_without_workers, TestApp},
    incidents::detail,
};

async fn split(app: &TestApp, user: &str, incident: &str, body: Value) -> reqwest::Response {
    app.send_as(
        user,
        Method::POST,
        &format!("/api/incidents/{incident}/split"),
        Some(&body),
    )
    .await
}

async fn put_topology(app: &TestApp, user: &str, body: Value) -> reqwest::Response {
    app.send_as(user, Method::PUT, "/api/topology", Some(&body)).await
}

async fn topology(app: &TestApp, user: &str) -> Value {
    let response = app.send_as(user, Method::GET, "/api/topology", None).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// An incident of orders-api that a billing-sync alert joined (both name one Redis endpoint),
/// then another orders-api alert: (user, incident, the billing-sync alert's id in it).
async fn incident_with_three_alerts(app: &TestApp) -> (String, String, String) {
    let user = app.new_user().await.id;
    let redis = "dial tcp 10.9.8.7:6379: i/o timeout";
    let incident = post(app, &user, &alert_of("orders-api", redis, 0)).await;
    let joined = post(app, &user, &alert_of("billing-sync", "redis 10.9.8.7:6379 refused", 60)).await;
    let again = post(app, &user, &alert_of("orders-api", redis, 90)).await;
    assert_eq!((&joined, &again), (&incident, &incident), "one incident to start with");
    let correlated = detail(app, &user, &incident).await["correlatedAlerts"].clone();
    let billing = correlated
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertService"] == "billing-sync")
        .expect("billing-sync joined")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (user, incident, billing)
}

async fn evidence_of(app: &TestApp, incident: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT evidence FROM incidents WHERE id = $1")
        .bind(incident.parse::<Uuid>().unwrap())
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_split_moves_the_alert_into_a_new_incident_of_its_own() {
    // No analyses appending meanwhile: the replay is compared with the live tables.
    let app = spawn_app_without_workers().await;
    let (user, source, billing) = incident_with_three_alerts(&app).await;

    let response = split(&app, &user, &source, json!({ "alertId": billing })).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["sourceIncidentId"], source);
    let created = body["incident"]["id"].as_str().unwrap().to_owned();
    assert_ne!(created, source);
    assert_eq!(body["incident"]["alert"]["service"], "billing-sync");
    assert_eq!(body["incident"]["status"], "investigating");
    assert_eq!(body["incident"]["correlatedAlertCount"], 0);

    let left = detail(&app, &user, &source).await;
    assert_eq!(left["correlatedAlertCount"], 1);
    assert_eq!(left["affectedServices"], json!(["orders-api"]));
    let services: Vec<&str> = left["correlatedAlerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["alertService"].as_str().unwrap())
        .collect();
    assert_eq!(services, ["orders-api"]);
    assert!(
        !evidence_of(&app, &source).await.contains(&"t:billing-sync".to_owned()),
        "the source's evidence no longer holds the alert's"
    );
    let list: Value = app
        .send_as(&user, Method::GET, "/api/incidents", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["incidents"].as_array().unwrap().len(), 2);

    // The history shows who split what, on both sides.
    let actor = format!("user:{user}");
    let source_history = app.incident_events(&user, &source).await;
    let split_off = source_history
        .iter()
        .find(|e| e["type"] == "AlertSplitOff")
        .expect("the split is in the source's history");
    assert_eq!(split_off["actor"], actor);
    assert_eq!(split_off["payload"]["AlertSplitOff"]["new_incident_id"], created);
    let created_history = app.incident_events(&user, &created).await;
    assert_eq!(created_history[0]["type"], "IncidentOpened");
    assert_eq!(created_history[0]["actor"], actor);
    assert_eq!(created_history[0]["payload"]["IncidentOpened"]["split_from"], source);

    // The next billing-sync alert goes to the new incident, not back to the old one.
    let next = post(
        &app,
        &user,
        &alert_of("billing-sync", "redis 10.9.8.7:6379 refused", 150),
    )
    .await;
    assert_eq!(next, created);
    assert_eq!(detail(&app, &user, &source).await["correlatedAlertCount"], 1);

    // The split is evidence against the edge between the two services.
    let learned = eventually("the split is learned", || async {
        let topology = topology(&app, &user).await;
        topology["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["source"] == "learned" && e["support"]["splits"] == 1)
            .cloned()
    })
    .await;
    let ends = [learned["from"].as_str().unwrap(), learned["to"].as_str().unwrap()];
    assert!(
        ends.contains(&"billing-sync") && ends.contains(&"orders-api"),
        "{learned}"
    );

    // Replayed, the tables are as they were.
    let evidence = evidence_of(&app, &source).await;
    app.assert_incidents_replay_as_live().await;
    assert_eq!(evidence_of(&app, &source).await, evidence);
    let edges = topology(&app, &user).await["edges"].clone();
    app.state
        .events
        .replay(&app.db, Some("topology_learned"))
        .await
        .unwrap();
    assert_eq!(topology(&app, &user).await["edges"], edges);
}

#[tokio::test]
async fn split_refusals() {
    let app = spawn_app().await;
    let (user, source, billing) = incident_with_three_alerts(&app).await;
    let path = format!("/api/incidents/{source}/split");

    assert_error(
        split(&app, &user, "nope", json!({ "alertId": billing })).await,
        400,
        "invalid_incident_id",
    )
    .await;
    assert_error(
        split(&app, &user, &source, json!({ "alertId": "x" })).await,
        400,
        "invalid_request",
    )
    .await;
    assert_error(split(&app, &user, &source, json!({})).await, 400, "invalid_request").await;
    let empty = app
        .client
        .post(app.url(&path))
        .header("X-User-ID", &user)
        .send()
        .await
        .unwrap();
    assert_error(empty, 400, "missing_body").await;
    let broken = app
        .client
        .post(app.url(&path))
        .header("X-User-ID", &user)
        .body("{\"alertId\":")
        .send()
        .await
        .unwrap();
    assert_error(broken, 400, "invalid_json").await;
    let anonymous = app
        .client
        .post(app.url(&path))
        .json(&json!({ "alertId": billing }))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 400, "no identity on /api/incidents*");

    // Another user's incident, or an alert that is not the incident's.
    let stranger = app.new_user().await.id;
    assert_error(
        split(&app, &stranger, &source, json!({ "alertId": billing })).await,
        404,
        "not_found",
    )
    .await;
    let unknown = Uuid::new_v4().to_string();
    assert_error(
        split(&app, &user, &source, json!({ "alertId": unknown })).await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        split(&app, &user, &Uuid::new_v4().to_string(), json!({ "alertId": billing })).await,
        404,
        "not_found",
    )
    .await;

    // The opening alert (an incident with no other alert has only that one) stays.
    let opening_alert_id: i64 = detail(&app, &user, &source).await["sourceAlertId"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let opening =
        vigil_projections::incidents::correlated_alert_id(source.parse().unwrap(), "source_a", opening_alert_id);
    let refused = assert_error(
        split(&app, &user, &source, json!({ "alertId": opening })).await,
        409,
        "conflict",
    )
    .await;
    assert!(
        refused["error"].as_str().unwrap().contains("opened the incident"),
        "{refused}"
    );

    // A merged incident keeps its alerts where the merge put them.
    let other = post(&app, &user, &alert_of("inventory", "stock sync lagging", 4000)).await;
    assert_ne!(other, source);
    let merged = app
        .send_as(
            &user,
            Method::POST,
            &format!("/api/incidents/{other}/merge-alert"),
            Some(&json!({ "sourceIncidentId": source })),
        )
        .await;
    assert_eq!(merged.status(), 200);
    assert_error(
        split(&app, &user, &source, json!({ "alertId": billing })).await,
        409,
        "conflict",
    )
    .await;

    // The merged incident's opening alert, now the target's, cannot open a second incident.
    let absorbed =
        vigil_projections::incidents::correlated_alert_id(other.parse().unwrap(), "source_a", opening_alert_id);
    let refused = assert_error(
        split(&app, &user, &other, json!({ "alertId": absorbed })).await,
        409,
        "conflict",
    )
    .await;
    assert!(
        refused["error"].as_str().unwrap().contains("merged into this one"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_topology_is_declared_validated_and_kept_per_user() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let empty = topology(&app, &user).await;
    assert_eq!(
        empty,
        json!({ "services": [], "edges": [], "version": 0, "declaredAt": null })
    );

    let catalog = json!({ "services": [
        { "name": "storefront", "dependsOn": ["Ledger"], "addresses": ["10.0.0.5:8080"] },
        { "name": "ledger-db", "addresses": ["10.7.7.7:5432", "Ledger.DB.internal"], "aliases": ["ledger"] },
    ]});
    let response = put_topology(&app, &user, catalog.clone()).await;
    assert_eq!(response.status(), 200);
    let declared: Value = response.json().await.unwrap();
    assert_eq!(declared["version"], 1);
    assert_eq!(declared["services"][0]["dependsOn"], json!(["ledger-db"]));
    assert_eq!(
        declared["services"][1]["addresses"],
        json!(["10.7.7.7:5432", "ledger.db.internal"])
    );
    assert_eq!(
        declared["edges"],
        json!([{ "from": "storefront", "to": "ledger-db", "confidence": 1.0, "source": "declared",
                 "support": { "merges": 0, "splits": 0, "mentions": 0 } }])
    );
    assert_eq!(topology(&app, &user).await, declared);
    // The same catalog again is no new version; the history names the user.
    assert_eq!(
        put_topology(&app, &user, catalog).await.json::<Value>().await.unwrap()["version"],
        1
    );
    let actor: String = sqlx::query_scalar(
        "SELECT metadata->>'actor' FROM events WHERE aggregate_type = 'Topology' AND aggregate_id = $1",
    )
    .bind(&user)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(actor, format!("user:{user}"));

    // Isolated per user, and unauthenticated callers get nothing.
    let other = app.new_user().await.id;
    assert_eq!(topology(&app, &other).await["services"], json!([]));
    assert_eq!(app.get("/api/topology").await.status(), 401);

    let service = |name: &str| json!({ "name": name });
    for (body, names) in [
        (json!({ "services": [service("a"), service("A ")] }), "services[1].name"),
        (
            json!({ "services": [{ "name": "a", "dependsOn": ["a"] }] }),
            "cannot depend on itself",
        ),
        (
            json!({ "services": [{ "name": "a", "dependsOn": ["b"] }] }),
            "not a declared service",
        ),
        (
            json!({ "services": [{ "name": "a", "addresses": ["10.0.0.1:70000"] }] }),
            "services[0].addresses[0]",
        ),
        (
            json!({ "services": [{ "name": "a", "addresses": ["x"] }, { "name": "b", "addresses": ["X"] }] }),
            "already owned",
        ),
        (json!({ "services": [{ "name": "" }] }), "must not be blank"),
        (json!({ "services": [{ "name": "a".repeat(129) }] }), "at most 128"),
        (json!({ "services": [{ "name": "a", "owner": "me" }] }), "owner"),
        (json!({ "services": "all" }), "services"),
        (
            json!({ "services": (0..501).map(|i| service(&format!("s{i}"))).collect::<Vec<_>>() }),
            "at most 500",
        ),
    ] {
        let refused = assert_error(put_topology(&app, &user, body).await, 400, "invalid_request").await;
        assert!(
            refused["error"].as_str().unwrap().contains(names),
            "{refused} should name {names}"
        );
    }
    assert_eq!(
        topology(&app, &user).await["version"],
        1,
        "refused catalogs change nothing"
    );

    // Replayed, the catalog is as it was.
    app.state.events.replay(&app.db, Some("topology")).await.unwrap();
    assert_eq!(topology(&app, &user).await, declared);
}

/// Two services whose alerts name nothing in common: a caller's page errors, its database's lag
/// (a warning, which the only open incident does not take without evidence).
async fn storefront_and_ledger(app: &TestApp, user: &str) -> (String, String) {
    let front = post(
        app,
        user,
        &alert_of("storefront", "checkout page returns 502 for 12% of requests", 0),
    )
    .await;
    let lag = alert_with_severity("ledger-db", "replication lag above 30s on the primary", 60, "warning");
    let ledger = post(app, user, &lag).await;
    (front, ledger)
}

#[tokio::test]
async fn a_declared_dependency_joins_alerts_only_for_its_user() {
    let app = spawn_app().await;
    let (declaring, bystander) = (app.new_user().await.id, app.new_user().await.id);
    let catalog = json!({ "services": [
        { "name": "storefront", "dependsOn": ["ledger-db"] },
        { "name": "ledger-db", "addresses": ["10.7.7.7:5432"] },
    ]});
    assert_eq!(put_topology(&app, &declaring, catalog).await.status(), 200);

    let (front, ledger) = storefront_and_ledger(&app, &bystander).await;
    assert_ne!(front, ledger, "without a topology they are two incidents");

    let (front, ledger) = storefront_and_ledger(&app, &declaring).await;
    assert_eq!(front, ledger, "the declared dependency joins them");
    let joined = &detail(&app, &declaring, &front).await["correlatedAlerts"][0];
    let relation = &joined["correlationDetails"]["relation"];
    assert_eq!(relation["kind"], "dependency");
    assert_eq!(relation["path"], "storefront -> ledger-db (declared)");
    assert_eq!(joined["correlationStrategy"], "service_match");

    // An alert naming an address the incident's service owns joins it too.
    let billing = post(
        &app,
        &declaring,
        &alert_of(
            "billing",
            "ledger writes fail: connect 10.7.7.7:5432: connection refused",
            90,
        ),
    )
    .await;
    assert_eq!(billing, front);
    let correlated = detail(&app, &declaring, &front).await["correlatedAlerts"].clone();
    let by_address = correlated
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertService"] == "billing")
        .unwrap();
    assert_eq!(by_address["correlationDetails"]["relation"]["kind"], "owned_address");
}
