use reqwest::header::{HeaderMap, COOKIE};
use serde_json::{json, Value};

use crate::helpers::{assert_error, spawn_app, spawn_app_with, user_header, CapturedLogs, PASSWORD};

#[tokio::test]
async fn register_returns_the_user_without_any_password() {
    let app = spawn_app().await;
    let response = app.register("Alice@Example.com", PASSWORD).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert!(uuid::Uuid::parse_str(body["id"].as_str().unwrap()).is_ok());
    assert_eq!(body["email"], "Alice@Example.com");
    assert_eq!(body["name"], "Test User");
    assert_eq!(body.as_object().unwrap().len(), 3, "only id, email, name: {body}");

    let stored: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE id = $1")
        .bind(body["id"].as_str().unwrap())
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(stored.starts_with("$2"), "bcrypt hash stored");
    assert!(!stored.contains(PASSWORD));
}

#[tokio::test]
async fn register_validation() {
    let app = spawn_app().await;
    assert_error(app.register("bob@example.com", "short").await, 400, "invalid_request").await;
    assert_error(app.register("not-an-email", PASSWORD).await, 400, "invalid_request").await;
    assert_error(app.register("two@@example.com", PASSWORD).await, 400, "invalid_request").await;
    assert_eq!(
        app.register("admin@localhost", PASSWORD).await.status(),
        201,
        "a dotless domain is valid"
    );
    assert_error(app.register("", PASSWORD).await, 400, "invalid_request").await;
    let missing_email = app
        .post_json("/api/auth/register", &json!({ "password": PASSWORD }))
        .await;
    assert_error(missing_email, 400, "invalid_request").await;
    let missing_password = app
        .post_json("/api/auth/register", &json!({ "email": "bob@example.com" }))
        .await;
    assert_error(missing_password, 400, "invalid_request").await;
    let wrong_type = app
        .post_json("/api/auth/register", &json!({ "email": 5, "password": PASSWORD }))
        .await;
    let body = assert_error(wrong_type, 400, "invalid_request").await;
    assert!(
        body["error"].as_str().unwrap().contains("email"),
        "names the field: {body}"
    );
}

#[tokio::test]
async fn duplicate_email_is_a_conflict_regardless_of_case() {
    let app = spawn_app().await;
    assert_eq!(app.register("carol@example.com", PASSWORD).await.status(), 201);
    assert_error(app.register("carol@example.com", PASSWORD).await, 409, "conflict").await;
    assert_error(app.register("CAROL@example.com", PASSWORD).await, 409, "conflict").await;
}

#[tokio::test]
async fn login_succeeds_and_sets_an_http_only_session_cookie() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let response = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": user.email.to_uppercase(), "password": PASSWORD }),
        )
        .await;
    assert_eq!(response.status(), 200);
    let cookie = response
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("vigil_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Max-Age="));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({ "id": user.id, "email": user.email, "name": "Test User" }));
}

#[tokio::test]
async fn failed_logins_share_one_message() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let wrong = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": user.email, "password": "wrong password" }),
        )
        .await;
    let wrong = assert_error(wrong, 401, "unauthorized").await;
    let unknown = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": "nobody@example.com", "password": PASSWORD }),
        )
        .await;
    let unknown = assert_error(unknown, 401, "unauthorized").await;
    assert_eq!(wrong, unknown, "no hint whether the account exists");
}

#[tokio::test(flavor = "current_thread")]
async fn failed_login_is_logged_without_the_password() {
    let logs = CapturedLogs::start();

    let app = spawn_app().await;
    let user = app.new_user().await;
    let secret_attempt = "Sup3r-secret-attempt";
    let response = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": user.email, "password": secret_attempt }),
        )
        .await;
    assert_eq!(response.status(), 401);

    let text = logs.text();
    assert!(
        text.contains("failed login") && text.contains(&user.email),
        "failed login logged: {text}"
    );
    assert!(
        !text.contains(secret_attempt) && !text.contains(PASSWORD),
        "no password in logs: {text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_login_cannot_write_a_line_of_its_own_into_the_log() {
    let logs = CapturedLogs::start();

    let app = spawn_app().await;
    let forged = "2026-01-01T00:00:00Z  INFO vigil: FORGED LINE";
    let response = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": format!("evil@example.com\n{forged}\r"), "password": "12345678" }),
        )
        .await;
    assert_eq!(response.status(), 401);

    let text = logs.text();
    let failed: Vec<&str> = text.lines().filter(|line| line.contains("failed login")).collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains(r"evil@example.com\n2026"),
        "escaped in its own line: {text}"
    );
    assert!(
        !text.lines().any(|line| line.starts_with(forged)),
        "no line of the caller's making: {text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_login_logs_a_bounded_line_whatever_the_email_size() {
    let logs = CapturedLogs::start();

    let app = spawn_app().await;
    let huge = format!("{}@example.com", "é".repeat(500_000));
    let response = app
        .post_json("/api/auth/login", &json!({ "email": huge, "password": "12345678" }))
        .await;
    assert_error(response, 401, "unauthorized").await;

    let text = logs.text();
    let failed: Vec<&str> = text.lines().filter(|line| line.contains("failed login")).collect();
    assert_eq!(failed.len(), 1, "logged once");
    assert!(failed[0].len() < 2_000, "a bounded line, not {} bytes", failed[0].len());
    assert!(failed[0].contains("éé"), "the address's start is logged: {}", failed[0]);
}

#[tokio::test]
async fn change_password_error_table() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let no_identity = app.change_password(HeaderMap::new(), PASSWORD, "new password 1").await;
    assert_error(no_identity, 401, "unauthorized").await;
    let wrong_current = app
        .change_password(user_header(&user.id), "not my password", "new password 1")
        .await;
    assert_error(wrong_current, 401, "unauthorized").await;
    let too_short = app.change_password(user_header(&user.id), PASSWORD, "short").await;
    assert_error(too_short, 400, "invalid_request").await;
    let missing_user = app
        .change_password(user_header("no-such-user"), PASSWORD, "new password 1")
        .await;
    assert_error(missing_user, 404, "not_found").await;
    let over_long_id = app
        .change_password(user_header(&"u".repeat(256)), PASSWORD, "new password 1")
        .await;
    assert_error(over_long_id, 401, "unauthorized").await;
}

#[tokio::test]
async fn passwords_longer_than_bcrypt_reads_count_in_full() {
    let app = spawn_app().await;
    let shared_start = "p".repeat(72);
    let password = format!("{shared_start}{}", "a".repeat(28));
    assert_eq!(app.register("long@example.com", &password).await.status(), 201);
    let login = |password: String| {
        let app = &app;
        async move {
            app.post_json(
                "/api/auth/login",
                &json!({ "email": "long@example.com", "password": password }),
            )
            .await
            .status()
        }
    };
    assert_eq!(login(password.clone()).await, 200);
    assert_eq!(login(format!("{shared_start}{}", "b".repeat(28))).await, 401);
    assert_eq!(login(shared_start).await, 401);

    let too_long = app.register("longest@example.com", &"x".repeat(1025)).await;
    assert_error(too_long, 400, "invalid_request").await;
}

#[tokio::test]
async fn change_password_replaces_the_password() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let response = app
        .change_password(user_header(&user.id), PASSWORD, "brand new password")
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["message"].as_str().is_some());

    let old = app
        .post_json("/api/auth/login", &json!({ "email": user.email, "password": PASSWORD }))
        .await;
    assert_eq!(old.status(), 401);
    let new = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": user.email, "password": "brand new password" }),
        )
        .await;
    assert_eq!(new.status(), 200);
}

#[tokio::test]
async fn concurrent_changes_with_one_current_password_let_only_one_through() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let attempts = (0..8).map(|n| {
        let (app, id) = (&app, user.id.clone());
        async move {
            let new_password = format!("new password {n}");
            let status = app
                .change_password(user_header(&id), PASSWORD, &new_password)
                .await
                .status();
            (status, new_password)
        }
    });
    let outcomes = futures::future::join_all(attempts).await;
    let accepted: Vec<&String> = outcomes
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, password)| password)
        .collect();
    assert_eq!(accepted.len(), 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|(status, _)| *status == 200 || *status == 401),
        "{outcomes:?}"
    );
    let login = app
        .post_json(
            "/api/auth/login",
            &json!({ "email": user.email, "password": accepted[0] }),
        )
        .await;
    assert_eq!(login.status(), 200, "the accepted password is the one in force");
}

#[tokio::test]
async fn session_cookie_identifies_the_user_until_logout() {
    let app = spawn_app().await;
    let user = app.new_user().await;
    let login = app
        .post_json("/api/auth/login", &json!({ "email": user.email, "password": PASSWORD }))
        .await;
    let cookie = login.headers().get("set-cookie").unwrap().to_str().unwrap();
    let session = cookie.split(';').next().unwrap().to_owned();
    let mut with_cookie = HeaderMap::new();
    with_cookie.insert(COOKIE, session.parse().unwrap());

    let changed = app
        .change_password(with_cookie.clone(), PASSWORD, "second password")
        .await;
    assert_eq!(changed.status(), 200, "cookie alone authenticates");

    let logout = app
        .client
        .post(app.url("/api/auth/logout"))
        .headers(with_cookie.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), 200);
    let cleared = logout.headers().get("set-cookie").unwrap().to_str().unwrap();
    assert!(
        cleared.starts_with("vigil_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );

    let after = app
        .change_password(with_cookie, "second password", "third password")
        .await;
    assert_error(after, 401, "unauthorized").await;
}

#[tokio::test]
async fn strict_mode_needs_a_session_or_a_gateway_signature() {
    let app = spawn_app_with(|config| {
        config.auth_mode = vigil::config::AuthMode::Strict;
        config.gateway_signing_secret = Some(vigil::config::Secret::new("gateway-secret"));
    })
    .await;
    let user = app.new_user().await;

    let bare = app
        .change_password(user_header(&user.id), PASSWORD, "next password 1")
        .await;
    assert_error(bare, 401, "unauthorized").await;

    let mut forged = user_header(&user.id);
    let signature = vigil::auth::gateway::sign("wrong-secret", &user.id, chrono::Utc::now().timestamp());
    forged.insert("X-User-Signature", signature.parse().unwrap());
    assert_error(
        app.change_password(forged, PASSWORD, "next password 1").await,
        401,
        "unauthorized",
    )
    .await;

    let mut signed = user_header(&user.id);
    let signature = vigil::auth::gateway::sign("gateway-secret", &user.id, chrono::Utc::now().timestamp());
    signed.insert("X-User-Signature", signature.parse().unwrap());
    assert_eq!(
        app.change_password(signed, PASSWORD, "next password 1").await.status(),
        200
    );

    let mut signed_without_account = user_header("gateway-only-user");
    let signature = vigil::auth::gateway::sign("gateway-secret", "gateway-only-user", chrono::Utc::now().timestamp());
    signed_without_account.insert("X-User-Signature", signature.parse().unwrap());
    assert_error(
        app.change_password(signed_without_account, PASSWORD, "next password 1")
            .await,
        404,
        "not_found",
    )
    .await;
}

/// Two `X-User-ID` headers name no one in particular (a gateway appending its own after the
/// client's would otherwise let the client's through): refused, whichever comes first.
#[tokio::test]
async fn an_identity_sent_twice_is_refused() {
    let app = spawn_app().await;
    let (first, second) = (app.new_user().await.id, app.new_user().await.id);
    for path in ["/api/incidents", "/api/user_connections", "/chat_api/sessions"] {
        let response = app
            .client
            .get(app.url(path))
            .header("X-User-ID", &first)
            .header("X-User-ID", &second)
            .send()
            .await
            .unwrap();
        assert_error(response, 400, "invalid_request").await;
    }
}
