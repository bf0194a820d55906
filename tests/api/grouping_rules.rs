//! Open-after-N grouping rules: their HTTP API and read model (issue #30, item 3).

use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;
use vigil_projections::grouping_rules::in_force;

use crate::helpers::{assert_error, spawn_app_with, spawn_app_without_workers, TestApp};

const PATH: &str = "/api/grouping-rules";

/// Creates a grouping rule; its view.
pub(crate) async fn grouping_rule(app: &TestApp, user: &str, body: &Value) -> Value {
    let response = app.send_as(user, Method::POST, PATH, Some(body)).await;
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response.json().await.unwrap()
}

/// Five disk alerts of one service within ten minutes open an incident.
pub(crate) fn disk_rule(name: &str) -> Value {
    json!({
        "name": name,
        "matchers": [{ "name": "title", "value": "disk.*", "isRegex": true }],
        "threshold": 5,
        "windowSeconds": 600,
        "groupBy": ["service"],
    })
}

async fn get(app: &TestApp, user: &str, path: &str) -> Value {
    let response = app.send_as(user, Method::GET, path, None).await;
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["groupingRules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| rule["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_grouping_rule_is_created_shown_and_deleted_by_its_owner_alone() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    assert_eq!(in_force(&app.db, &user).await.unwrap(), (0, vec![]), "no rules yet");

    let created = grouping_rule(&app, &user, &disk_rule("disk storms")).await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["name"], "disk storms");
    assert_eq!(
        created["matchers"],
        json!([{ "name": "title", "value": "disk.*", "isRegex": true, "isEqual": true }])
    );
    assert_eq!(created["threshold"], 5);
    assert_eq!(created["windowSeconds"], 600);
    assert_eq!(created["groupBy"], json!(["service"]));
    assert_eq!(created["createdBy"], json!(user));
    assert!(created["createdAt"].is_string(), "{created}");
    let shown = get(&app, &user, &format!("{PATH}/{id}")).await;
    assert_eq!(shown, created, "GET shows what POST answered");
    assert_eq!(get(&app, &user, PATH).await["groupingRules"], json!([created]));

    // Without matchers a rule takes every alert; without groupBy, in one group.
    let every = json!({ "name": "any alert", "matchers": [], "threshold": 2, "windowSeconds": 1 });
    let every = grouping_rule(&app, &user, &every).await;
    assert_eq!(every["groupBy"], json!([]));
    assert_eq!(every["matchers"], json!([]));

    // Ingestion reads the rules oldest first (the first that matches governs), and the
    // generation counts every change.
    let (generation, rules) = in_force(&app.db, &user).await.unwrap();
    assert_eq!(generation, 2);
    let order: Vec<String> = rules.iter().map(|(id, _)| id.to_string()).collect();
    assert_eq!(order, [id.clone(), every["id"].as_str().unwrap().to_owned()]);
    assert_eq!(rules[0].1.threshold, 5);
    assert_eq!(rules[0].1.window_seconds, 600);
    assert_eq!(rules[0].1.group_by, ["service"]);

    // Another user sees none of it and deletes nothing.
    let stranger = app.new_user().await.id;
    let theirs = format!("{PATH}/{id}");
    assert_error(
        app.send_as(&stranger, Method::GET, &theirs, None).await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        app.send_as(&stranger, Method::DELETE, &theirs, None).await,
        404,
        "not_found",
    )
    .await;
    assert_eq!(get(&app, &stranger, PATH).await["groupingRules"], json!([]));
    assert_eq!(in_force(&app.db, &stranger).await.unwrap(), (0, vec![]));
    let never = format!("{PATH}/{}", Uuid::new_v4());
    assert_error(app.send_as(&user, Method::DELETE, &never, None).await, 404, "not_found").await;
    assert_error(app.send_as(&user, Method::GET, &never, None).await, 404, "not_found").await;

    let deleted = app.send_as(&user, Method::DELETE, &theirs, None).await;
    assert_eq!(deleted.status(), 204);
    assert_error(app.send_as(&user, Method::GET, &theirs, None).await, 404, "not_found").await;
    let again = app.send_as(&user, Method::DELETE, &theirs, None).await;
    assert_error(again, 404, "not_found").await;
    assert_eq!(ids(&get(&app, &user, PATH).await), [every["id"].as_str().unwrap()]);
    let (generation, rules) = in_force(&app.db, &user).await.unwrap();
    assert_eq!(generation, 3, "the deletion moved the generation");
    assert_eq!(rules.len(), 1, "a deleted rule is no longer in force");
    assert_eq!(rules[0].0.to_string(), every["id"].as_str().unwrap());

    // The rule's stream records who did what, once each; the deleted row stays, marked.
    let actors: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_type, metadata->>'actor' FROM events
         WHERE aggregate_type = 'GroupingRule' AND aggregate_id = $1 ORDER BY sequence",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    let by_user = format!("user:{user}");
    assert_eq!(
        actors,
        [
            ("GroupingRuleCreated".to_owned(), by_user.clone()),
            ("GroupingRuleDeleted".to_owned(), by_user),
        ]
    );
    let (deleted_by, version): (Option<String>, i64) =
        sqlx::query_as("SELECT deleted_by, version FROM grouping_rules WHERE id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!((deleted_by, version), (Some(user.clone()), 2));
}

#[tokio::test]
async fn bad_grouping_rules_get_a_400_naming_the_field() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let with = |field: &str, value: Value| {
        let mut body = disk_rule("disk storms");
        body[field] = value;
        body
    };
    let too_many: Vec<Value> = (0..33)
        .map(|i| json!({ "name": format!("l{i}"), "value": "x" }))
        .collect();
    let cases = [
        (with("threshold", json!(1)), "threshold"),
        (with("threshold", json!(1001)), "threshold"),
        (with("windowSeconds", json!(0)), "windowSeconds"),
        (with("windowSeconds", json!(86_401)), "windowSeconds"),
        (
            with(
                "matchers",
                json!([{ "name": "service", "value": "(db", "isRegex": true }]),
            ),
            "matchers[0].value",
        ),
        (
            with("matchers", json!([{ "name": " ", "value": "db" }])),
            "matchers[0].name",
        ),
        (with("matchers", json!(too_many)), "matchers"),
        (with("groupBy", json!(["service", "service"])), "groupBy[1]"),
        (with("groupBy", json!([""])), "groupBy[0]"),
        (with("name", json!("  ")), "name"),
    ];
    for (body, field) in cases {
        let response = app.send_as(&user, Method::POST, PATH, Some(&body)).await;
        let error = assert_error(response, 400, "invalid_grouping_rule").await;
        let message = error["error"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{field}: {error}");
    }
    // Shapes the JSON reader refuses before the rule sees them.
    let mut unknown = disk_rule("disk storms");
    unknown["createdBy"] = json!("someone else");
    let mut missing = disk_rule("disk storms");
    missing.as_object_mut().unwrap().remove("threshold");
    for body in [
        unknown,
        missing,
        with("threshold", json!(-3)),
        with("windowSeconds", json!("600")),
    ] {
        let response = app.send_as(&user, Method::POST, PATH, Some(&body)).await;
        assert_eq!(response.status(), 400, "{body}");
    }
    for path in [
        "/api/grouping-rules/not-a-uuid",
        "/api/grouping-rules?limit=0",
        "/api/grouping-rules?limit=101",
        "/api/grouping-rules?limit=+5",
        "/api/grouping-rules?cursor=abc",
    ] {
        assert_eq!(
            app.send_as(&user, Method::GET, path, None).await.status(),
            400,
            "{path}"
        );
    }
    assert_eq!(
        get(&app, &user, PATH).await["groupingRules"],
        json!([]),
        "nothing was created"
    );
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_type = 'GroupingRule'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(events, 0, "no refused rule reached the event store");
}

#[tokio::test]
async fn grouping_rules_page_newest_first_with_a_cursor() {
    let app = spawn_app_without_workers().await;
    let user = app.new_user().await.id;
    let mut created = Vec::new();
    for name in ["first", "second", "third"] {
        created.push(
            grouping_rule(&app, &user, &disk_rule(name)).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    assert_eq!(ids(&get(&app, &user, PATH).await), newest_first);

    let first = get(&app, &user, &format!("{PATH}?limit=2")).await;
    assert_eq!(ids(&first), newest_first[..2]);
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    assert_eq!(cursor, created[1]);
    let second = get(&app, &user, &format!("{PATH}?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&second), [created[0].clone()]);
    assert_eq!(second["nextCursor"], Value::Null, "the last page");
    let whole = get(&app, &user, &format!("{PATH}?limit=3")).await;
    assert_eq!(whole["nextCursor"], Value::Null, "a page holding the rest is the last");

    // A rule deleted since it was a cursor still marks its place; it is listed no more.
    let deleted = app
        .send_as(&user, Method::DELETE, &format!("{PATH}/{cursor}"), None)
        .await;
    assert_eq!(deleted.status(), 204);
    let after = get(&app, &user, &format!("{PATH}?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&after), [created[0].clone()]);
    assert_eq!(
        ids(&get(&app, &user, PATH).await),
        [created[2].clone(), created[0].clone()]
    );

    let stranger = app.new_user().await.id;
    let theirs = get(&app, &stranger, &format!("{PATH}?cursor={}", created[2])).await;
    assert_eq!(
        theirs["groupingRules"],
        json!([]),
        "another user's cursor pages nothing"
    );
    let unknown = get(&app, &user, &format!("{PATH}?cursor={}", Uuid::new_v4())).await;
    assert_eq!(unknown["groupingRules"], json!([]), "an unknown cursor pages nothing");
}

#[tokio::test]
async fn creating_grouping_rules_spends_the_api_budget() {
    let app = spawn_app_with(|config| config.rate_limit_per_minute = 3).await;
    let user = "grouper";
    let body = disk_rule("disk storms");
    for _ in 0..3 {
        let created = app.send_as(user, Method::POST, PATH, Some(&body)).await;
        assert_eq!(created.status(), 201);
    }
    let refused = app.send_as(user, Method::POST, PATH, Some(&body)).await;
    assert_error(refused, 429, "rate_limited").await;
    let rules: i64 = sqlx::query_scalar("SELECT count(*) FROM grouping_rules WHERE user_id = $1")
        .bind(user)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rules, 3, "the refused request created nothing");
}
