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
async fn a_json_body_is_read_without_a_json_content_type() {
    let app = spawn_app().await;
    for (n, content_type) in [None, Some("text/plain"), Some("text/plain; charset=utf-8")]
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
async fn a_form_body_is_a_json_415() {
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
        assert_error(response, 415, "unsupported_media_type").await;
    }
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
