//! User connections, the credentials lifecycle and where credentials may (not) appear.

use chrono::{TimeDelta, Utc};
use reqwest::Method;
use serde_json::{json, Value};
use vigil::connections::Connectors;
use vigil_aggregates::connection::Provider;
use vigil_providers::cloud_b::RoleArn;
use vigil_secrets::fake::FakeVault;

use crate::{
    cloud_providers::{
        call, cloud_c_login, cloud_d_connect, cloud_e_connect, connect_cloud_a, connect_cloud_d, spawn_with_fakes,
        spawn_with_fakes_and, token_requests, CLOUD_A_CLIENT_SECRET, CLOUD_C_CLIENT_SECRET, CLOUD_E_CLIENT_ID,
        CLOUD_E_CLIENT_SECRET, ORGANIZATION, ROLE_ARN, SECRET_KEY, STS_SECRET_ACCESS_KEY, SUBSCRIPTION_ID,
    },
    helpers::{assert_error, spawn_app, CapturedLogs, TestApp},
};

async fn connections(app: &TestApp, user: &str) -> Vec<Value> {
    let (status, body) = call(app, user, Method::GET, "/api/user_connections", None).await;
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

async fn delete(app: &TestApp, user: &str, provider: &str, account_id: &str) -> reqwest::Response {
    app.send_as(
        user,
        Method::DELETE,
        "/api/user_connections",
        Some(&json!({ "provider": provider, "account_id": account_id })),
    )
    .await
}

async fn embedded_rows(app: &TestApp) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    sqlx::query_as("SELECT name, nonce, ciphertext FROM embedded_secrets ORDER BY name")
        .fetch_all(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn connections_list_in_the_spec_shape() {
    let (app, _fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;
    assert!(connections(&app, &user).await.is_empty());

    call(&app, &user, Method::POST, "/cloud_c/login", Some(cloud_c_login(&user))).await;
    connect_cloud_d(&app, &user).await;
    let list = connections(&app, &user).await;
    assert_eq!(list.len(), 2);
    let first = &list[0];
    assert_eq!(first["provider"], "cloud_c");
    assert_eq!(first["account_id"], SUBSCRIPTION_ID);
    assert_eq!(first["account_name"], "Production");
    assert_eq!(first["status"], "connected");
    for field in ["created_at", "updated_at"] {
        assert!(
            first[field]
                .as_str()
                .is_some_and(|at| at.parse::<chrono::DateTime<chrono::Utc>>().is_ok()),
            "{first}"
        );
    }
    assert_eq!(list[1]["provider"], "cloud_d");
    assert_eq!(list[1]["account_id"], ORGANIZATION);
}

#[tokio::test]
async fn delete_keeps_credentials_and_provider_disconnect_removes_them() {
    let (app, _fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;
    let (status, _) = connect_cloud_d(&app, &user).await;
    assert_eq!(status, 200);
    let reference: String = sqlx::query_scalar("SELECT secret_ref FROM user_tokens WHERE user_id = $1")
        .bind(&user)
        .fetch_one(&app.db)
        .await
        .unwrap();
    let reference: vigil_secrets::SecretRef = reference.parse().unwrap();
    assert!(
        reference.to_string().starts_with("embedded:kv/data/secret/users/"),
        "{reference}"
    );

    let response = delete(&app, &user, "cloud_d", ORGANIZATION).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "status": "disconnected" })
    );
    assert_eq!(connections(&app, &user).await[0]["status"], "not_connected");
    let kept = app.state.connections.secrets.load(&reference).await.unwrap();
    assert_eq!(kept.unwrap()["secret_key"], SECRET_KEY, "DELETE keeps the credentials");
    let (_, status) = call(&app, &user, Method::GET, "/cloud_d_api/cloud_d/status", None).await;
    assert_eq!(status["connected"], false);

    // Reconnecting with the same keys needs nothing more than connecting again.
    let (status, _) = connect_cloud_d(&app, &user).await;
    assert_eq!(status, 200);
    assert_eq!(connections(&app, &user).await[0]["status"], "connected");

    let (_, body) = call(&app, &user, Method::POST, "/cloud_d_api/cloud_d/disconnect", None).await;
    assert_eq!(body["success"], true);
    assert_eq!(connections(&app, &user).await[0]["status"], "not_connected");
    assert!(app.state.connections.secrets.load(&reference).await.unwrap().is_none());
    assert!(app
        .state
        .connections
        .secrets
        .cache()
        .get(&reference)
        .await
        .unwrap()
        .is_none());
    assert!(embedded_rows(&app).await.is_empty());
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM user_tokens")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(records, 0);
}

#[tokio::test]
async fn kept_credentials_serve_no_endpoint_until_the_account_is_connected_again() {
    let (app, fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;
    let (_, body) = call(&app, &user, Method::GET, "/cloud_b/external-id", None).await;
    let external_id = body["external_id"].as_str().unwrap().to_owned();
    fakes.sts.add_role(&ROLE_ARN.parse::<RoleArn>().unwrap(), &external_id);
    // Credentials due for renewal: reading them would assume the role again.
    fakes.sts.set_expiration(Some(Utc::now() + TimeDelta::minutes(3)));
    let cloud_b_auth = json!({ "userId": user, "role_arn": ROLE_ARN, "external_id": external_id });
    let connect = || {
        let (app, user, cloud_b_auth) = (&app, &user, &cloud_b_auth);
        async move {
            let (status, body) = call(app, user, Method::POST, "/cloud_b/auth", Some(cloud_b_auth.clone())).await;
            assert_eq!(status, 200, "{body}");
            let (status, body) = connect_cloud_d(app, user).await;
            assert_eq!(status, 200, "{body}");
            let connect = Some(cloud_e_connect());
            let (status, body) = call(app, user, Method::POST, "/cloud_e_api/cloud_e/connect", connect).await;
            assert_eq!(status, 200, "{body}");
        }
    };
    connect().await;
    fakes.sts.set_expiration(None);
    for (provider, account_id) in [
        ("cloud_b", "123456789012"),
        ("cloud_d", ORGANIZATION),
        ("cloud_e", CLOUD_E_CLIENT_ID),
    ] {
        assert_eq!(delete(&app, &user, provider, account_id).await.status(), 200);
    }

    let (assumed, tokens) = (fakes.sts.issued().len(), token_requests(&fakes));
    for (method, path) in [
        (Method::GET, "/cloud_d_api/cloud_d/projects"),
        (Method::GET, "/cloud_e_api/cloud_e/ssh-setup"),
        (Method::POST, "/cloud_e_api/cloud_e/refresh-token"),
    ] {
        let response = app.send_as(&user, method, path, None).await;
        let body = assert_error(response, 404, "not_found").await;
        assert!(
            body["error"].as_str().unwrap().contains("not connected"),
            "{path}: {body}"
        );
    }
    let (status, body) = call(&app, &user, Method::GET, "/cloud_b/get-credentials", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(body["has_credentials"], false, "{body}");
    for path in [
        "/cloud_b/status",
        "/cloud_d_api/cloud_d/status",
        "/cloud_e_api/cloud_e/status",
    ] {
        let (_, body) = call(&app, &user, Method::GET, path, None).await;
        assert_eq!(body["connected"], false, "{path}: {body}");
    }
    assert_eq!(fakes.sts.issued().len(), assumed, "the kept role was not assumed again");
    assert_eq!(token_requests(&fakes), tokens, "no cloud_e token was asked for");

    connect().await;
    for (method, path) in [
        (Method::GET, "/cloud_d_api/cloud_d/projects"),
        (Method::GET, "/cloud_e_api/cloud_e/ssh-setup"),
        (Method::POST, "/cloud_e_api/cloud_e/refresh-token"),
    ] {
        let (status, body) = call(&app, &user, method, path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, body) = call(&app, &user, Method::GET, "/cloud_b/get-credentials", None).await;
    assert_eq!(body["has_credentials"], true, "{body}");
}

#[tokio::test]
async fn delete_validates_its_body() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    assert_error(delete(&app, &user, "cloud_z", "x").await, 400, "invalid_provider").await;
    assert_error(delete(&app, &user, "cloud_f", "x").await, 400, "invalid_provider").await;
    assert_error(delete(&app, &user, "cloud_c", " ").await, 400, "invalid_request").await;
    for body in [
        json!({ "provider": "cloud_c" }),
        json!({ "account_id": "sub-1" }),
        json!({ "provider": null, "account_id": "sub-1" }),
        json!({}),
    ] {
        let response = app
            .send_as(&user, Method::DELETE, "/api/user_connections", Some(&body))
            .await;
        assert_error(response, 400, "invalid_request").await;
    }
    let response = app.client.get(app.url("/api/user_connections")).send().await.unwrap();
    assert_error(response, 401, "unauthorized").await;
    let response = app
        .client
        .delete(app.url("/api/user_connections"))
        .json(&json!({ "provider": "cloud_c", "account_id": "sub-1" }))
        .send()
        .await
        .unwrap();
    assert_error(response, 401, "unauthorized").await;
}

async fn connection_events(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_type = 'Connection'")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn delete_is_idempotent_and_answers_the_same_whether_or_not_connected() {
    let (app, _fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;

    // Nothing connected at all: already not_connected, and nothing is recorded.
    for provider in ["cloud_a", "cloud_b", "cloud_c", "cloud_d", "cloud_e"] {
        let response = delete(&app, &user, provider, "never-connected").await;
        assert_eq!(response.status(), 200, "{provider}");
        assert_eq!(
            response.json::<Value>().await.unwrap(),
            json!({ "status": "disconnected" })
        );
    }
    assert!(connections(&app, &user).await.is_empty());
    assert_eq!(connection_events(&app).await, 0);

    let (status, _) = call(&app, &user, Method::POST, "/cloud_c/login", Some(cloud_c_login(&user))).await;
    assert_eq!(status, 200);
    // Another account of a connected provider is not connected either.
    let response = delete(&app, &user, "cloud_c", "99999999-2222-4333-8444-555566667777").await;
    assert_eq!(response.status(), 200);
    assert_eq!(connections(&app, &user).await[0]["status"], "connected");

    let events = connection_events(&app).await;
    for _ in 0..2 {
        let response = delete(&app, &user, "cloud_c", SUBSCRIPTION_ID).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.json::<Value>().await.unwrap(),
            json!({ "status": "disconnected" })
        );
        let list = connections(&app, &user).await;
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["status"], "not_connected");
    }
    assert_eq!(
        connection_events(&app).await,
        events + 1,
        "the second disconnect records nothing"
    );
}

#[tokio::test]
async fn users_never_see_or_disconnect_each_others_connections() {
    let (app, _fakes) = spawn_with_fakes().await;
    let owner = app.new_user().await.id;
    let intruder = app.new_user().await.id;
    call(
        &app,
        &owner,
        Method::POST,
        "/cloud_c/login",
        Some(cloud_c_login(&owner)),
    )
    .await;

    assert!(connections(&app, &intruder).await.is_empty());
    // The intruder's own (absent) connection to that account, not the owner's.
    let response = delete(&app, &intruder, "cloud_c", SUBSCRIPTION_ID).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "status": "disconnected" })
    );
    assert!(connections(&app, &intruder).await.is_empty());
    let (_, body) = call(&app, &intruder, Method::GET, "/cloud_c/status", None).await;
    assert_eq!(body["connected"], false);
    // Logging in with someone else's user id in the body is refused.
    let response = app
        .send_as(&intruder, Method::POST, "/cloud_c/login", Some(&cloud_c_login(&owner)))
        .await;
    assert_error(response, 403, "forbidden").await;
    // A provider disconnect touches only the caller's own credentials.
    call(&app, &intruder, Method::POST, "/cloud_d_api/cloud_d/disconnect", None).await;
    call(&app, &intruder, Method::POST, "/api/cloud_a/force-disconnect", None).await;

    let list = connections(&app, &owner).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["status"], "connected");
}

#[tokio::test]
async fn vault_backend_keeps_credentials_in_kv_v2() {
    let vault = FakeVault::start("vault-root-token").await;
    let (app, _fakes) = spawn_with_fakes_and(|config| {
        config.connections.vault_addr = Some(vault.url().to_string());
        config.connections.vault_token = Some(vigil::config::Secret::new("vault-root-token"));
    })
    .await;
    let user = app.new_user().await.id;
    let (status, body) = call(&app, &user, Method::POST, "/cloud_c/login", Some(cloud_c_login(&user))).await;
    assert_eq!(status, 200, "{body}");

    let reference: String = sqlx::query_scalar("SELECT secret_ref FROM user_tokens WHERE user_id = $1")
        .bind(&user)
        .fetch_one(&app.db)
        .await
        .unwrap();
    let name = vigil_secrets::secret_name("dev", &user, "cloud_c");
    assert_eq!(reference, format!("vault:kv/data/secret/users/{name}"));
    let versions = vault.versions(&format!("secret/users/{name}"));
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["client_secret"], CLOUD_C_CLIENT_SECRET);
    let write = vault.requests().into_iter().find(|r| r.method == "POST").unwrap();
    assert_eq!(write.path, format!("/v1/secret/data/users/{name}"));
    assert_eq!(write.header("x-vault-token"), Some("vault-root-token"));
    assert!(embedded_rows(&app).await.is_empty(), "nothing in the embedded store");
}

#[tokio::test]
async fn embedded_ciphertexts_differ_for_equal_secrets_and_decrypt_after_restart() {
    let (app, _fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;
    connect_cloud_d(&app, &user).await;
    let first = embedded_rows(&app).await;
    connect_cloud_d(&app, &user).await;
    let second = embedded_rows(&app).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, second[0].0, "same secret name");
    assert_ne!(first[0].1, second[0].1, "fresh nonce");
    assert_ne!(first[0].2, second[0].2, "different ciphertext for the same credentials");
    assert!(!String::from_utf8_lossy(&second[0].2).contains(SECRET_KEY));

    // A new process with the same configuration (the key file in the data directory) reads it.
    let restarted = Connectors::from_config(&app.state.config, &app.db).unwrap();
    let record = vigil::connections::tokens::find(&app.db, &user, "cloud_d")
        .await
        .unwrap()
        .unwrap();
    let reference: vigil_secrets::SecretRef = record.secret_ref.unwrap().parse().unwrap();
    // Read from the store itself, not from the (shared) cache.
    restarted.secrets.cache().invalidate(&reference).await.unwrap();
    let (_, stored) = restarted.load(&app.db, &user, Provider::CloudD).await.unwrap().unwrap();
    assert_eq!(stored["secret_key"], SECRET_KEY);
    let key_file = app.state.config.data_dir.join(vigil::connections::KEY_FILE);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(key_file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

async fn dump_database(app: &TestApp) -> String {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert!(tables.len() > 10, "{tables:?}");
    let mut dump = String::new();
    for table in tables {
        let rows: Option<String> = sqlx::query_scalar(&format!(
            r#"SELECT string_agg(row_to_json(t)::text, E'\n') FROM "{table}" t"#
        ))
        .fetch_one(&app.db)
        .await
        .unwrap();
        dump.push_str(&format!("== {table}\n{}\n", rows.unwrap_or_default()));
    }
    dump
}

#[tokio::test]
async fn no_credential_reaches_a_table_a_response_or_a_log_line() {
    let logs = CapturedLogs::start();

    let (app, fakes) = spawn_with_fakes().await;
    let user = app.new_user().await.id;
    let mut responses = String::new();
    connect_cloud_a(&app, &fakes, &user).await;
    let (_, body) = call(&app, &user, Method::GET, "/cloud_a/status", None).await;
    responses.push_str(&body.to_string());
    let (_, external_id) = call(&app, &user, Method::GET, "/cloud_b/external-id", None).await;
    let external_id = external_id["external_id"].as_str().unwrap().to_owned();
    fakes.sts.add_role(&ROLE_ARN.parse::<RoleArn>().unwrap(), &external_id);
    for (path, body) in [
        (
            "/cloud_b/auth",
            json!({ "userId": user, "role_arn": ROLE_ARN, "external_id": external_id }),
        ),
        ("/cloud_c/login", cloud_c_login(&user)),
        ("/cloud_d_api/cloud_d/connect", cloud_d_connect()),
        ("/cloud_e_api/cloud_e/connect", cloud_e_connect()),
    ] {
        let (status, body) = call(&app, &user, Method::POST, path, Some(body)).await;
        assert_eq!(status, 200, "{path}: {body}");
        responses.push_str(&body.to_string());
    }
    for path in [
        "/cloud_b/get-credentials",
        "/cloud_b/status",
        "/cloud_c/status",
        "/cloud_d_api/cloud_d/status",
        "/cloud_e_api/cloud_e/status",
        "/cloud_e_api/cloud_e/ssh-setup",
        "/api/user_connections",
    ] {
        let (status, body) = call(&app, &user, Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        responses.push_str(&body.to_string());
    }
    assert_eq!(connections(&app, &user).await.len(), 3 + 4);

    let mut secrets = vec![
        CLOUD_A_CLIENT_SECRET.to_owned(),
        STS_SECRET_ACCESS_KEY.to_owned(),
        CLOUD_C_CLIENT_SECRET.to_owned(),
        SECRET_KEY.to_owned(),
        CLOUD_E_CLIENT_SECRET.to_owned(),
    ];
    for issued in fakes.sts.issued() {
        secrets.push(issued.secret_access_key.expose().to_owned());
        secrets.push(issued.session_token.expose().to_owned());
    }
    for key in fakes.cloud_e.auth_keys() {
        secrets.push(key["key"].as_str().unwrap().to_owned());
    }
    let stored = |provider| {
        let app = &app;
        let user = &user;
        async move {
            app.state
                .connections
                .load(&app.db, user, provider)
                .await
                .unwrap()
                .unwrap()
                .1
        }
    };
    let cloud_a = stored(Provider::CloudA).await;
    secrets.push(cloud_a["access_token"].as_str().unwrap().to_owned());
    secrets.push(cloud_a["refresh_token"].as_str().unwrap().to_owned());
    let cloud_e = stored(Provider::CloudE).await;
    secrets.push(cloud_e["access_token"].as_str().unwrap().to_owned());
    let private_key = cloud_e["ssh_private_key"].as_str().unwrap();
    // The base64 body of the private key, line by line.
    secrets.extend(
        private_key
            .lines()
            .filter(|line| !line.starts_with("-----") && line.len() >= 16)
            .map(str::to_owned),
    );
    assert!(secrets.iter().all(|secret| secret.len() >= 8), "{secrets:?}");

    let dump = dump_database(&app).await;
    assert!(
        dump.contains("== user_tokens") && dump.contains(SUBSCRIPTION_ID),
        "the dump has the rows"
    );
    let log_text = logs.text();
    assert!(log_text.contains("cloud_a"), "logs were captured");
    for secret in &secrets {
        assert!(
            !dump.contains(secret.as_str()),
            "a credential is in the database: {secret}"
        );
        assert!(
            !log_text.contains(secret.as_str()),
            "a credential is in the logs: {secret}"
        );
        assert!(
            !responses.contains(secret.as_str()),
            "a credential is in a response: {secret}"
        );
    }
}

#[tokio::test]
async fn orchestration_records_are_upserted_on_their_natural_keys() {
    use vigil::orchestration::{nodes, pods, upsert_node, upsert_pod, Node, Pod};

    let app = spawn_app().await;
    let pod = |name: &str, status: &str, user: &str| Pod {
        namespace: "default".into(),
        pod_name: name.into(),
        status: status.into(),
        project_id: "alpha-project".into(),
        cluster_name: "prod".into(),
        user_id: user.into(),
        provider: Some("cloud_a".into()),
    };
    let first = upsert_pod(&app.db, &pod("web-1", "Pending", "u1")).await.unwrap();
    let again = upsert_pod(&app.db, &pod("web-1", "Running", "u1")).await.unwrap();
    assert_eq!(first, again, "same key, same row");
    upsert_pod(&app.db, &pod("web-1", "Running", "u2")).await.unwrap();
    upsert_pod(&app.db, &pod("api-1", "Failed", "u1")).await.unwrap();
    let mine = pods(&app.db, "u1", "alpha-project", "prod").await.unwrap();
    assert_eq!(
        mine.iter()
            .map(|p| (p.pod_name.as_str(), p.status.as_str()))
            .collect::<Vec<_>>(),
        [("api-1", "Failed"), ("web-1", "Running")]
    );

    let node = |status: &str| Node {
        node_name: "node-a".into(),
        status: status.into(),
        project_id: "alpha-project".into(),
        cluster_name: "prod".into(),
        user_id: "u1".into(),
        provider: None,
    };
    let first = upsert_node(&app.db, &node("NotReady")).await.unwrap();
    assert_eq!(upsert_node(&app.db, &node("Ready")).await.unwrap(), first);
    assert_eq!(
        nodes(&app.db, "u1", "alpha-project", "prod").await.unwrap(),
        [node("Ready")]
    );
    assert!(nodes(&app.db, "u2", "alpha-project", "prod").await.unwrap().is_empty());
}

#[tokio::test]
async fn openapi_document_lists_the_connection_endpoints() {
    let app = spawn_app().await;
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let paths = document["paths"].as_object().unwrap();
    for (path, method) in [
        ("/api/user_connections", "get"),
        ("/api/user_connections", "delete"),
        ("/cloud_a/login", "post"),
        ("/login", "post"),
        ("/cloud_a/callback", "get"),
        ("/callback", "get"),
        ("/cloud_a/setup/status/{task_id}", "get"),
        ("/cloud_a/status", "get"),
        ("/api/cloud_a/force-disconnect", "post"),
        ("/cloud_b/external-id", "get"),
        ("/cloud_b/auth", "post"),
        ("/cloud_b/get-credentials", "get"),
        ("/cloud_b/status", "get"),
        ("/cloud_c/login", "post"),
        ("/cloud_c/status", "get"),
        ("/cloud_d_api/cloud_d/connect", "post"),
        ("/cloud_d_api/cloud_d/projects", "get"),
        ("/cloud_d_api/cloud_d/disconnect", "post"),
        ("/cloud_d_api/cloud_d/status", "get"),
        ("/cloud_e_api/cloud_e/connect", "post"),
        ("/cloud_e_api/cloud_e/ssh-setup", "get"),
        ("/cloud_e_api/cloud_e/disconnect", "post"),
        ("/cloud_e_api/cloud_e/status", "get"),
        ("/cloud_e_api/cloud_e/refresh-token", "post"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} documented"
        );
    }

    let responses = |path: &str, method: &str| paths[path][method]["responses"].as_object().unwrap().clone();
    let disconnect = responses("/api/user_connections", "delete");
    assert!(
        disconnect.contains_key("200") && disconnect.contains_key("400"),
        "{disconnect:?}"
    );
    assert!(!disconnect.contains_key("404"), "DELETE is idempotent: {disconnect:?}");
    assert!(!responses("/cloud_a/setup/status/{task_id}", "get").contains_key("404"));

    let schemas = &document["components"]["schemas"];
    let setup = &schemas["SetupStatus"];
    let required: Vec<&str> = setup["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for field in ["state", "status", "complete"] {
        assert!(required.contains(&field), "{field} in {setup}");
    }
    for field in ["progress", "step"] {
        assert!(!required.contains(&field), "{field} is optional: {setup}");
        assert!(
            !setup["properties"][field].to_string().contains("null"),
            "{field} is never null: {setup}"
        );
    }

    let error_ref = |path: &str, method: &str, status: &str| {
        responses(path, method)[status]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for status in ["400", "401", "403", "502", "503"] {
        assert_eq!(
            error_ref("/cloud_b/auth", "post", status),
            "#/components/schemas/StatusErrorBody",
            "{status}"
        );
    }
    assert_eq!(
        error_ref("/cloud_b/get-credentials", "get", "502"),
        "#/components/schemas/StatusErrorBody"
    );
    let body = &schemas["StatusErrorBody"];
    for field in ["status", "message", "error", "code"] {
        assert!(body["properties"].get(field).is_some(), "{field} in {body}");
    }
}
