use serde_json::Value;

use crate::helpers::{spawn_app, spawn_app_with};

#[tokio::test]
async fn liveness_is_alive() {
    let app = spawn_app().await;
    let response = app.get("/health/liveness").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        serde_json::json!({ "status": "alive" })
    );
}

#[tokio::test]
async fn health_reports_five_checks_all_healthy_with_a_worker_running() {
    let app = spawn_app().await;
    let body = crate::helpers::eventually("the in-process worker to register", || async {
        let response = app.get("/health").await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        (body["checks"]["task_queue"]["status"] == "healthy").then_some(body)
    })
    .await;
    let checks = body["checks"].as_object().unwrap();
    let mut names: Vec<_> = checks.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["cache", "chatbot_websocket", "database", "task_queue", "vector_store"]
    );
    for name in names {
        assert_eq!(checks[name]["status"], "healthy", "{name}: {body}");
        assert!(checks[name]["message"].is_string(), "{name} has a message");
    }
    assert_eq!(checks["task_queue"]["message"], "1 active worker");
    assert_eq!(body["overall_status"], "healthy");
    assert!(body["response_time_ms"].as_f64().unwrap() >= 0.0);
    assert!(chrono::DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap()).is_ok());
}

#[tokio::test]
async fn without_workers_the_task_queue_is_degraded_and_health_still_200() {
    let app = spawn_app_with(|config| config.run_workers = false).await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["checks"]["task_queue"]["status"], "degraded");
    assert_eq!(body["checks"]["task_queue"]["message"], "0 active workers");
    assert!(body["checks"]["task_queue"]["warning"].is_string());
    assert_eq!(body["overall_status"], "degraded");
}

#[tokio::test]
async fn a_dependency_down_makes_health_unhealthy_503_and_readiness_503() {
    // Nothing listens on port 1: the cache is down from the start.
    let app = spawn_app_with(|config| config.redis_url = Some(vigil::config::Secret::new("redis://127.0.0.1:1"))).await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["overall_status"], "unhealthy");
    assert_eq!(body["checks"]["cache"]["status"], "unhealthy");
    assert!(body["checks"]["cache"]["error"].is_string());
    assert_eq!(body["checks"]["database"]["status"], "healthy");

    let readiness = app.get("/health/readiness").await;
    assert_eq!(readiness.status(), 503);
    let body: Value = readiness.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["cache"]["status"], "unhealthy");
    assert_eq!(body["checks"]["database"]["status"], "healthy");
}

#[tokio::test]
async fn when_the_database_goes_away_readiness_and_requests_that_need_it_answer_503() {
    let app = spawn_app().await;
    let ready = app.get("/health/readiness").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["status"], "ready");

    app.take_database_away().await;
    let response = app.get("/health/readiness").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["database"]["status"], "unhealthy");
    assert!(body["checks"]["database"]["error"].is_string());

    let health = app.get("/health").await;
    assert_eq!(health.status(), 503);
    assert_eq!(health.json::<Value>().await.unwrap()["overall_status"], "unhealthy");

    // An endpoint that needs the database says it is unavailable (retry), not that it failed.
    let incidents = app
        .client
        .get(app.url("/api/incidents"))
        .header("X-User-ID", "someone")
        .send()
        .await
        .unwrap();
    assert_eq!(incidents.headers()["retry-after"], "5");
    crate::helpers::assert_error(incidents, 503, "service_unavailable").await;
    // So does ingestion: an alert sender retries a 503 instead of losing the alert.
    let alert: Value = serde_json::from_str(include_str!("../fixtures/alerts/source_a/firing.json")).expect("fixture");
    let ingested = app
        .client
        .post(app.url("/api/source_a/alerts"))
        .header("X-User-ID", "someone")
        .json(&alert)
        .send()
        .await
        .unwrap();
    crate::helpers::assert_error(ingested, 503, "service_unavailable").await;
}

/// A server that answers but refuses the connection (`database is not currently accepting
/// connections`), or ends it mid-request, is as out of reach as one that is gone: 503 and a
/// retry, on reads, on commands through the event store, and on ingestion.
#[tokio::test]
async fn a_database_refusing_connections_is_unavailable_not_a_failure() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    app.refuse_database_connections().await;

    let alert: Value = serde_json::from_str(include_str!("../fixtures/alerts/source_a/firing.json")).expect("fixture");
    let requests = [
        (reqwest::Method::GET, "/api/incidents", None),
        (reqwest::Method::POST, "/api/source_a/alerts", Some(alert)),
        (
            reqwest::Method::POST,
            "/chat_api/sessions",
            Some(serde_json::json!({ "title": "t" })),
        ),
    ];
    for (method, path, body) in requests {
        let response = app.send_as(&user, method, path, body.as_ref()).await;
        assert_eq!(
            response.headers().get("retry-after").map(|v| v.to_str().unwrap()),
            Some("5"),
            "{path}"
        );
        crate::helpers::assert_error(response, 503, "service_unavailable").await;
    }
    let registration = app.register("new@example.com", "long enough password").await;
    crate::helpers::assert_error(registration, 503, "service_unavailable").await;
}

#[tokio::test]
async fn chatbot_check_is_unhealthy_when_the_socket_does_not_answer() {
    // A listener that accepts and never answers stands in for a hung chat channel.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let check = vigil::health::check_chatbot_websocket(addr, std::time::Duration::from_millis(300)).await;
    assert_eq!(check.status, vigil::health::HealthStatus::Unhealthy);
    assert!(check.error.unwrap().contains("no answer"));
}

/// A pooled connection given back inside a transaction (a `BEGIN` whose future was dropped, or
/// one sent as raw SQL: sqlx counts neither) is closed, not lent to the next borrower, whose
/// statements would run in it and commit or lose with it.
#[tokio::test]
async fn a_connection_given_back_inside_a_transaction_is_not_lent_again() {
    use sqlx::{Executor, Row};
    let app = spawn_app().await;
    let mut config = (*app.state.config).clone();
    config.database_max_connections = 1;
    let pool = vigil::db::pool(&config, vigil::db::SERVICE_APPLICATION_NAME).unwrap();
    let backend = |row: sqlx::postgres::PgRow| row.get::<i32, _>(0);

    let mut conn = pool.acquire().await.unwrap();
    let first = backend(conn.fetch_one("SELECT pg_backend_pid()").await.unwrap());
    drop(conn);
    let mut conn = pool.acquire().await.unwrap();
    let idle = backend(conn.fetch_one("SELECT pg_backend_pid()").await.unwrap());
    assert_eq!(idle, first, "a connection outside any transaction is lent again");
    drop(conn);
    let mut committed = pool.begin().await.unwrap();
    committed.execute("SELECT 1").await.unwrap();
    committed.commit().await.unwrap();
    let rolled_back = pool.begin().await.unwrap();
    drop(rolled_back);
    let mut conn = pool.acquire().await.unwrap();
    let after_transactions = backend(conn.fetch_one("SELECT pg_backend_pid()").await.unwrap());
    assert_eq!(after_transactions, first, "so is one whose transactions ended");

    conn.execute(sqlx::raw_sql("BEGIN")).await.unwrap();
    drop(conn);
    let mut conn = pool.acquire().await.unwrap();
    let next = backend(conn.fetch_one("SELECT pg_backend_pid()").await.unwrap());
    assert_ne!(next, first, "the connection left inside a transaction was closed");
    let outside: bool = conn
        .fetch_one(sqlx::raw_sql("SELECT now() = statement_timestamp()"))
        .await
        .unwrap()
        .get(0);
    assert!(outside, "the new one is outside any transaction");
}
