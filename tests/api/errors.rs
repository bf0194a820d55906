use serde_json::json;

use crate::helpers::{assert_error, spawn_app, PASSWORD};

#[tokio::test]
async fn malformed_json_is_a_json_400() {
    let app = spawn_app().await;
    let response = app
        .client
        .post(app.url("/api/auth/register"))
        .header("content-type", "application/json")
        .body("{\"email\": ")
        .send()
        .await
        .unwrap();
    assert_error(response, 400, "invalid_json").await;
}

#[tokio::test]
async fn a_compressed_body_is_refused_saying_so() {
    let app = spawn_app().await;
    // The gzip header's magic bytes: what a sender that compresses its webhooks posts.
    let response = app
        .client
        .post(app.url("/api/source_a/alerts"))
        .header("X-User-ID", "compressing-sender")
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(vec![0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00])
        .send()
        .await
        .unwrap();
    let body = assert_error(response, 400, "unsupported_encoding").await;
    assert!(body["error"].as_str().unwrap().contains("gzip"), "{body}");
    let identity = app
        .client
        .post(app.url("/api/auth/register"))
        .header("content-encoding", "identity")
        .json(&json!({ "email": "identity@example.com", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(identity.status(), 201);
}

#[tokio::test]
async fn a_json_body_is_read_without_a_json_content_type() {
    let app = spawn_app().await;
    for (n, content_type) in [
        None,
        Some("text/plain"),
        Some("text/plain; charset=utf-8"),
        // What `curl -d` sends unless told otherwise.
        Some("application/x-www-form-urlencoded"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({ "email": format!("plain-{n}@example.com"), "password": PASSWORD }).to_string();
        let mut request = app.client.post(app.url("/api/auth/register")).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 201, "Content-Type {content_type:?}");
    }
    let broken = app
        .client
        .post(app.url("/api/auth/register"))
        .body("{\"email\": ")
        .send()
        .await
        .unwrap();
    assert_error(broken, 400, "invalid_json").await;
}

#[tokio::test]
async fn a_form_body_is_a_json_400_that_asks_for_json() {
    let app = spawn_app().await;
    for content_type in ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let response = app
            .client
            .post(app.url("/api/auth/register"))
            .header("content-type", content_type)
            .body("email=a%40example.com&password=long+enough")
            .send()
            .await
            .unwrap();
        let body = assert_error(response, 400, "invalid_json").await;
        assert!(
            body["error"].as_str().unwrap().contains("expected a JSON body"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn text_after_the_json_document_is_a_json_400() {
    let app = spawn_app().await;
    let document = json!({ "email": "trailing@example.com", "password": PASSWORD }).to_string();
    for trailing in [" garbage", "{\"x\": 1}", "}", ","] {
        let response = app
            .client
            .post(app.url("/api/auth/register"))
            .header("content-type", "application/json")
            .body(format!("{document}{trailing}"))
            .send()
            .await
            .unwrap();
        assert_error(response, 400, "invalid_json").await;
    }
    let response = app
        .client
        .post(app.url("/api/auth/register"))
        .header("content-type", "application/json")
        .body(format!("{document} \n"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "trailing whitespace is fine");
}

#[tokio::test]
async fn missing_body_is_a_json_400() {
    let app = spawn_app().await;
    let response = app.client.post(app.url("/api/auth/login")).send().await.unwrap();
    assert_error(response, 400, "missing_body").await;
}

#[tokio::test]
async fn unknown_route_and_wrong_method_keep_the_json_shape() {
    let app = spawn_app().await;
    assert_error(app.get("/api/no-such-thing").await, 404, "not_found").await;
    assert_error(app.get("/api/auth/login").await, 405, "method_not_allowed").await;
}

#[tokio::test]
async fn oversized_body_is_a_json_413() {
    let app = vigil_app_with_small_body_limit().await;
    let big = json!({ "email": "a@example.com", "password": "x".repeat(4096) });
    assert_error(
        app.post_json("/api/auth/register", &big).await,
        413,
        "payload_too_large",
    )
    .await;
}

async fn vigil_app_with_small_body_limit() -> crate::helpers::TestApp {
    crate::helpers::spawn_app_with(|config| config.max_body_bytes = 1024).await
}

/// PostgreSQL stores no NUL character, in text or jsonb: a `\u0000` in any string of a body is
/// dropped instead of failing the request late, as a 500 (an alert sender would retry forever).
#[tokio::test]
async fn nul_characters_in_bodies_are_dropped_not_a_500() {
    let app = spawn_app().await;
    let user = uuid::Uuid::new_v4().to_string();
    let send = |method, path: &str, body: String| {
        app.client
            .request(method, app.url(path))
            .header("x-user-id", &user)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let session = send(
        reqwest::Method::POST,
        "/chat_api/sessions",
        r#"{"title":"a\u0000b","messages":[{"sender":"user","text":"x\u0000y"}]}"#.into(),
    )
    .await
    .unwrap();
    assert_eq!(session.status(), 201);
    let session: serde_json::Value = session.json().await.unwrap();
    assert_eq!(session["title"], "ab");
    assert_eq!(session["messages"][0]["text"], "xy");

    let mut alert = crate::ingestion::fixture("source_a", "firing");
    alert["unknown"] = json!("PLACEHOLDER");
    let alert = alert.to_string().replace("PLACEHOLDER", "x\\u0000y");
    let ingested = send(reqwest::Method::POST, "/api/source_a/alerts", alert)
        .await
        .unwrap();
    assert_eq!(ingested.status(), 202);
    let incident_id = ingested.json::<serde_json::Value>().await.unwrap()["alerts"][0]["incident_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let patched = send(
        reqwest::Method::PATCH,
        &format!("/api/incidents/{incident_id}"),
        r#"{"summary":"root\u0000cause"}"#.into(),
    )
    .await
    .unwrap();
    assert_eq!(patched.status(), 200);
    let detail: serde_json::Value = send(
        reqwest::Method::GET,
        &format!("/api/incidents/{incident_id}"),
        String::new(),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(detail["incident"]["summary"], "rootcause");
    let raw: serde_json::Value =
        serde_json::from_str(detail["incident"]["alert"]["rawPayload"].as_str().unwrap()).unwrap();
    assert_eq!(raw["unknown"], "xy");
}

#[tokio::test]
async fn an_array_body_is_refused_not_read_field_by_field() {
    let app = spawn_app().await;
    let register = app
        .post_json("/api/auth/register", &json!(["array@example.com", PASSWORD, "Array"]))
        .await;
    let body = assert_error(register, 400, "invalid_request").await;
    assert!(body["error"].as_str().unwrap().contains("JSON object"), "{body}");
    let user = app.new_user().await;
    let create = app
        .send_as(
            &user.id,
            reqwest::Method::POST,
            "/chat_api/sessions",
            Some(&json!(["a title"])),
        )
        .await;
    assert_error(create, 400, "invalid_request").await;
    let login = app
        .post_json("/api/auth/login", &json!(["array@example.com", PASSWORD]))
        .await;
    assert_error(login, 400, "invalid_request").await;
}

#[tokio::test]
async fn a_secret_of_the_wrong_type_is_not_echoed_in_the_error() {
    let app = spawn_app().await;
    let login = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": "who@example.com", "password": 98765432101u64 }),
        )
        .await;
    let body = assert_error(login, 400, "invalid_request").await;
    let message = body["error"].as_str().unwrap();
    assert!(!message.contains("98765432101"), "{message}");
    assert!(message.contains("password") && message.contains("integer"), "{message}");
}
