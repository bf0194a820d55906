use reqwest::Response;

use crate::helpers::{assert_error, spawn_app, spawn_app_with, TestApp};

async fn logout_as(app: &TestApp, user_id: &str) -> Response {
    app.client
        .post(app.url("/api/auth/logout"))
        .header("X-User-ID", user_id)
        .send()
        .await
        .unwrap()
}

fn header(response: &Response, name: &str) -> u64 {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("{name} present"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_101st_request_in_a_minute_is_refused_with_headers() {
    let app = spawn_app().await;
    for spent in 1..=100u64 {
        let response = logout_as(&app, "rate-limited-user").await;
        assert_eq!(response.status(), 200, "request {spent}");
        assert_eq!(header(&response, "x-ratelimit-limit"), 100);
        assert_eq!(header(&response, "x-ratelimit-remaining"), 100 - spent);
        assert!((1..=60).contains(&header(&response, "x-ratelimit-reset")));
    }
    let refused = logout_as(&app, "rate-limited-user").await;
    assert_eq!(header(&refused, "x-ratelimit-remaining"), 0);
    let retry_after = header(&refused, "retry-after");
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    assert_error(refused, 429, "rate_limited").await;

    assert_eq!(
        logout_as(&app, "someone-else").await.status(),
        200,
        "budgets are per user"
    );
    let health = app
        .client
        .get(app.url("/health/liveness"))
        .header("X-User-ID", "rate-limited-user")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "health endpoints are exempt");
    assert!(health.headers().get("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn health_metrics_and_openapi_are_exempt() {
    let app = spawn_app_with(|config| config.rate_limit_per_minute = 2).await;
    for path in [
        "/health/liveness",
        "/health/readiness",
        "/health",
        "/metrics",
        "/api/openapi.json",
    ] {
        for _ in 0..4 {
            let response = app
                .client
                .get(app.url(path))
                .header("X-User-ID", "u")
                .send()
                .await
                .unwrap();
            assert_ne!(response.status(), 429, "{path} is exempt");
        }
    }
    assert_eq!(logout_as(&app, "u").await.status(), 200);
    assert_eq!(logout_as(&app, "u").await.status(), 200);
    assert_eq!(logout_as(&app, "u").await.status(), 429);
}

#[tokio::test]
async fn chat_endpoints_have_a_budget_of_twenty() {
    let app = spawn_app().await;
    let chat = |n: usize| {
        let app = &app;
        async move {
            let response = app
                .client
                .get(app.url("/chat_api/sessions"))
                .header("X-User-ID", "chatty")
                .send()
                .await
                .unwrap();
            (n, response)
        }
    };
    for n in 1..=20 {
        let (_, response) = chat(n).await;
        assert_ne!(response.status(), 429, "chat request {n}");
        assert_eq!(header(&response, "x-ratelimit-limit"), 20);
    }
    let (_, refused) = chat(21).await;
    assert_error(refused, 429, "rate_limited").await;
    assert_eq!(
        logout_as(&app, "chatty").await.status(),
        200,
        "the API budget is separate"
    );
}

/// Two instances on one Redis spend one budget (needs REDIS_URL; `make test` sets it).
#[tokio::test]
async fn instances_sharing_redis_share_the_budget() {
    let Ok(redis_url) = std::env::var("REDIS_URL") else {
        eprintln!("REDIS_URL not set: shared-budget test needs Redis");
        return;
    };
    let prefix = format!("vigil-test-shared-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut vigil::Config| {
        config.redis_url = Some(vigil::config::Secret::new(redis_url.clone()));
        config.redis_key_prefix = prefix.clone();
        config.rate_limit_per_minute = 10;
    };
    let first = spawn_app_with(configure).await;
    let second = spawn_app_with(configure).await;
    for n in 0..10 {
        let app = if n % 2 == 0 { &first } else { &second };
        assert_eq!(logout_as(app, "shared").await.status(), 200, "request {n}");
    }
    assert_eq!(logout_as(&first, "shared").await.status(), 429);
    assert_eq!(logout_as(&second, "shared").await.status(), 429);
}

async fn anonymous_logout(app: &TestApp) -> Response {
    app.client.post(app.url("/api/auth/logout")).send().await.unwrap()
}

#[tokio::test]
async fn anonymous_requests_have_a_larger_budget_per_address() {
    let app = spawn_app().await;
    for n in 1..=150u64 {
        let response = anonymous_logout(&app).await;
        assert_eq!(
            response.status(),
            200,
            "anonymous request {n} is not cut at a user's 100"
        );
        assert_eq!(header(&response, "x-ratelimit-limit"), 1000);
        assert_eq!(header(&response, "x-ratelimit-remaining"), 1000 - n);
    }
}

#[tokio::test]
async fn anonymous_requests_are_refused_past_their_own_budget() {
    let app = spawn_app_with(|config| {
        config.anonymous_rate_limit_per_minute = 5;
        config.rate_limit_per_minute = 2;
    })
    .await;
    for n in 1..=5 {
        assert_eq!(anonymous_logout(&app).await.status(), 200, "anonymous request {n}");
    }
    let refused = anonymous_logout(&app).await;
    assert_eq!(header(&refused, "x-ratelimit-limit"), 5);
    assert_error(refused, 429, "rate_limited").await;
    assert_eq!(
        logout_as(&app, "identified").await.status(),
        200,
        "a user from the same address spends the user's budget"
    );
}

#[tokio::test]
async fn a_users_sessions_and_header_spend_one_budget() {
    use reqwest::header::COOKIE;

    let app = spawn_app_with(|config| config.rate_limit_per_minute = 6).await;
    let user = app.new_user().await;
    // A client without a cookie jar: each request carries only the credentials given to it.
    let client = reqwest::Client::new();
    let mut cookies = Vec::new();
    for _ in 0..2 {
        let login = client
            .post(app.url("/api/auth/login"))
            .json(&serde_json::json!({ "email": user.email, "password": crate::helpers::PASSWORD }))
            .send()
            .await
            .unwrap();
        assert_eq!(login.status(), 200);
        let cookie = login.headers()["set-cookie"].to_str().unwrap();
        cookies.push(cookie.split(';').next().unwrap().to_owned());
    }
    let with_cookie = |cookie: &str| client.get(app.url("/api/incidents")).header(COOKIE, cookie);
    let with_header = || client.get(app.url("/api/incidents")).header("X-User-ID", &user.id);
    let requests = [
        with_cookie(&cookies[0]),
        with_cookie(&cookies[1]),
        with_header(),
        with_cookie(&cookies[0]),
        with_cookie(&cookies[1]),
        with_header(),
    ];
    for (spent, request) in requests.into_iter().enumerate() {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "request {}", spent + 1);
        assert_eq!(header(&response, "x-ratelimit-remaining"), 5 - spent as u64);
    }
    for request in [with_cookie(&cookies[0]), with_cookie(&cookies[1]), with_header()] {
        assert_error(request.send().await.unwrap(), 429, "rate_limited").await;
    }
}

/// Credentials that identify no one (a made-up bearer token or cookie, an unverified
/// `X-User-ID` in strict mode) are counted against the client's address, like no credentials at
/// all: a fresh made-up value per request must not open a fresh budget (password guessing would
/// go unthrottled).
#[tokio::test]
async fn credentials_that_identify_no_one_spend_the_address_budget() {
    let app = spawn_app_with(|config| {
        config.auth_mode = vigil::config::AuthMode::Strict;
        config.anonymous_rate_limit_per_minute = 3;
    })
    .await;
    let user = app.new_user().await;
    let guess = |n: usize| serde_json::json!({ "email": user.email, "password": format!("guess number {n}") });
    let client = reqwest::Client::new();
    let login = || client.post(app.url("/api/auth/login"));
    // Registering the user spent one of the address's three.
    for n in 0..2 {
        assert_eq!(login().json(&guess(n)).send().await.unwrap().status(), 401);
    }
    let made_up = [
        login().bearer_auth(format!("vgi_{}", uuid::Uuid::new_v4().simple())),
        login().header("Cookie", format!("vigil_session={}", uuid::Uuid::new_v4().simple())),
        login().header("X-User-ID", uuid::Uuid::new_v4().to_string()),
        login().header("X-User-ID", &user.id),
    ];
    for (n, request) in made_up.into_iter().enumerate() {
        let refused = request.json(&guess(n + 2)).send().await.unwrap();
        assert_eq!(header(&refused, "x-ratelimit-limit"), 3, "request {n}");
        assert_error(refused, 429, "rate_limited").await;
    }
}

/// In strict mode an `X-User-ID` the gateway did not sign is not the user: it must not spend the
/// user's budget, or anyone could lock them out without credentials.
#[tokio::test]
async fn an_unverified_user_id_does_not_spend_that_users_budget() {
    let app = spawn_app_with(|config| {
        config.auth_mode = vigil::config::AuthMode::Strict;
        config.gateway_signing_secret = Some(vigil::config::Secret::new("gateway-secret"));
        config.rate_limit_per_minute = 2;
    })
    .await;
    let user = app.new_user().await;
    let connections = || {
        app.client
            .get(app.url("/api/user_connections"))
            .header("X-User-ID", &user.id)
    };
    for _ in 0..4 {
        assert_error(connections().send().await.unwrap(), 401, "unauthorized").await;
    }
    let signature = vigil::auth::gateway::sign("gateway-secret", &user.id, chrono::Utc::now().timestamp());
    let signed = connections()
        .header("X-User-Signature", signature)
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 200);
    assert_eq!(
        header(&signed, "x-ratelimit-remaining"),
        1,
        "the first request of the user's own budget"
    );
}

/// Redis out of reach (nothing listens on its port): the API neither stops nor goes unlimited.
/// Requests do not wait for Redis one after another (at a second each they ran past the request
/// timeout), and each instance counts the budgets on its own meanwhile.
#[tokio::test]
async fn without_redis_requests_are_answered_at_once_and_still_limited() {
    let app = spawn_app_with(|config| {
        config.redis_url = Some(vigil::config::Secret::new("redis://127.0.0.1:1"));
        config.rate_limit_per_minute = 10;
        config.request_timeout_secs = 3;
    })
    .await;
    let concurrent = futures::future::join_all((0..8).map(|_| logout_as(&app, "redis-less-user"))).await;
    let statuses: Vec<u16> = concurrent.iter().map(|response| response.status().as_u16()).collect();
    assert_eq!(statuses, [200; 8]);
    for _ in 0..2 {
        assert_eq!(logout_as(&app, "redis-less-user").await.status(), 200);
    }
    let refused = logout_as(&app, "redis-less-user").await;
    assert_eq!(header(&refused, "X-RateLimit-Remaining"), 0);
    assert_error(refused, 429, "rate_limited").await;
}
