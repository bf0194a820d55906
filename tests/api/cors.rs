use crate::helpers::spawn_app;

#[tokio::test]
async fn preflight_allows_the_frontend_with_credentials() {
    let app = spawn_app().await;
    let response = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/api/auth/login"))
        .header("Origin", "http://localhost:3000")
        .header("Access-Control-Request-Method", "PATCH")
        .header(
            "Access-Control-Request-Headers",
            "content-type,x-user-id,x-provider-preference",
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
    };
    assert_eq!(
        header("access-control-allow-origin").as_deref(),
        Some("http://localhost:3000")
    );
    assert_eq!(header("access-control-allow-credentials").as_deref(), Some("true"));
    let methods = header("access-control-allow-methods").unwrap();
    for method in ["get", "post", "put", "delete", "options", "patch"] {
        assert!(methods.contains(method), "{method} in {methods}");
    }
    let headers = header("access-control-allow-headers").unwrap();
    for allowed in [
        "content-type",
        "x-provider",
        "x-requested-with",
        "x-user-id",
        "authorization",
        "x-provider-preference",
    ] {
        assert!(
            headers.split(',').any(|h| h.trim() == allowed),
            "{allowed} in {headers}"
        );
    }
    assert!(
        response.headers().get("x-ratelimit-limit").is_none(),
        "preflight spends no budget"
    );
}

#[tokio::test]
async fn other_origins_are_not_allowed() {
    let app = spawn_app().await;
    let response = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/api/auth/login"))
        .header("Origin", "http://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn simple_requests_carry_the_cors_headers() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/health/liveness"))
        .header("Origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers().get("access-control-allow-origin").unwrap(),
        "http://localhost:3000"
    );
    assert_eq!(
        response.headers().get("access-control-allow-credentials").unwrap(),
        "true"
    );
}

#[tokio::test]
async fn the_frontend_may_read_the_rate_limit_headers() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/chat_api/sessions"))
        .header("Origin", "http://localhost:3000")
        .header("X-User-ID", "cors-reader")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-ratelimit-remaining").is_some());
    let exposed = response
        .headers()
        .get("access-control-expose-headers")
        .expect("exposed headers listed")
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "retry-after",
        "x-request-id",
    ] {
        assert!(exposed.split(',').any(|h| h.trim() == name), "{name} in {exposed}");
    }
}
