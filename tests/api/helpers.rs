//! `spawn_app()`: the real router and WebSocket listener on random ports, against a fresh
//! PostgreSQL database made for the one test (migrated, dropped afterwards). Redis is used when
//! `REDIS_URL` is set, with a key prefix of the test's own (deleted afterwards).

use std::{net::SocketAddr, str::FromStr, sync::Once};

use reqwest::{header::HeaderMap, Response, Url};
use serde_json::{json, Value};
use sqlx::{postgres::PgConnectOptions, Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use vigil::{Application, Config};

pub const PASSWORD: &str = "correct horse battery";

pub struct TestApp {
    pub addr: SocketAddr,
    pub ws_addr: SocketAddr,
    pub db: PgPool,
    pub client: reqwest::Client,
    pub redis_prefix: Option<String>,
    /// The running app's state: its event store, pool and configuration.
    pub state: vigil::state::AppState,
    database: TestDatabase,
    shutdown: CancellationToken,
}

pub struct TestUser {
    pub id: String,
    pub email: String,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// An app whose background jobs never run (they wait in the queue), for tests that assert an
/// exact event history and would otherwise race with automatic analysis.
pub async fn spawn_app_without_workers() -> TestApp {
    spawn_app_with(|config| config.run_workers = false).await
}

/// Like [`spawn_app`], letting the test adjust the configuration first.
pub async fn spawn_app_with(customize: impl FnOnce(&mut Config)) -> TestApp {
    let server = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    spawn_app_on(&server, false, customize).await
}

/// An app with a fresh database on the PostgreSQL server at `server` (any database's URL);
/// with `service_pool`, on a pool made as the service makes its own (`vigil::db::pool`: its
/// acquire timeout, its limits) rather than the tests' plain one.
pub async fn spawn_app_on(server: &str, service_pool: bool, customize: impl FnOnce(&mut Config)) -> TestApp {
    init_test_logging();
    let database = TestDatabase::create(server).await;
    let mut config = Config::from_env().expect("configuration from the environment");
    config.bind_address = "127.0.0.1".parse().unwrap();
    config.http_port = 0;
    config.ws_port = 0;
    config.bcrypt_cost = 4;
    // Tests that wait for an analysis wait for it at once; the settle has a test of its own.
    config.rca_settle_secs = 0;
    config.database_url = vigil::config::Secret::new(database.url.to_string());
    config.redis_key_prefix = format!("vigil-test-{}", Uuid::new_v4().simple());
    config.data_dir = std::env::temp_dir().join(format!("vigil-test-{}", Uuid::new_v4().simple()));
    customize(&mut config);
    let redis_prefix = config.redis_url.is_some().then(|| config.redis_key_prefix.clone());

    let db = PgPool::connect(database.url.as_str())
        .await
        .expect("connect to the test database");
    vigil::db::migrate(&db)
        .await
        .expect("migrations apply to a fresh database");
    let db = if service_pool {
        vigil::db::pool(&config, vigil::db::SERVICE_APPLICATION_NAME).expect("the service's pool")
    } else {
        db
    };
    let app = Application::build_with_pool(config, db.clone())
        .await
        .expect("application builds");
    let (addr, ws_addr, state) = (app.http_addr(), app.ws_addr(), app.state().clone());
    let shutdown = CancellationToken::new();
    tokio::spawn(app.run_until_stopped(shutdown.clone()));

    let client = reqwest::Client::builder().cookie_store(true).build().unwrap();
    TestApp {
        addr,
        ws_addr,
        db,
        client,
        redis_prefix,
        state,
        database,
        shutdown,
    }
}

/// Another instance of the service beside a [`TestApp`]: same database, same Redis and key prefix,
/// its own ports (ARCHITECTURE.md, scale-out). Stopped when dropped.
pub struct OtherInstance {
    pub addr: SocketAddr,
    pub ws_addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for OtherInstance {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestApp {
    pub async fn spawn_beside(&self, customize: impl FnOnce(&mut Config)) -> OtherInstance {
        let mut config = (*self.state.config).clone();
        customize(&mut config);
        let app = Application::build_with_pool(config, self.db.clone())
            .await
            .expect("the second instance builds");
        let (addr, ws_addr) = (app.http_addr(), app.ws_addr());
        let shutdown = CancellationToken::new();
        tokio::spawn(app.run_until_stopped(shutdown.clone()));
        OtherInstance {
            addr,
            ws_addr,
            shutdown,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.expect("request sent")
    }

    pub async fn register(&self, email: &str, password: &str) -> Response {
        self.post_json(
            "/api/auth/register",
            &json!({ "email": email, "password": password, "name": "Test User" }),
        )
        .await
    }

    /// Registers a fresh user and returns its id and credentials.
    pub async fn new_user(&self) -> TestUser {
        let email = format!("user-{}@example.com", Uuid::new_v4().simple());
        let response = self.register(&email, PASSWORD).await;
        assert_eq!(response.status(), 201, "registration of {email}");
        let body: Value = response.json().await.unwrap();
        TestUser {
            id: body["id"].as_str().unwrap().to_owned(),
            email,
        }
    }

    pub async fn change_password(&self, headers: HeaderMap, current: &str, new: &str) -> Response {
        self.client
            .post(self.url("/api/auth/change-password"))
            .headers(headers)
            .json(&json!({ "currentPassword": current, "newPassword": new }))
            .send()
            .await
            .unwrap()
    }

    /// Sends a request as `user_id` (the `X-User-ID` header), with a JSON body when given.
    pub async fn send_as(&self, user_id: &str, method: reqwest::Method, path: &str, body: Option<&Value>) -> Response {
        let mut request = self.client.request(method, self.url(path)).header("X-User-ID", user_id);
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await.expect("request sent")
    }

    /// The incident's event history (`GET /api/incidents/:id/events`) as `user_id` sees it.
    pub async fn incident_events(&self, user_id: &str, incident_id: &str) -> Vec<Value> {
        let response = self
            .send_as(
                user_id,
                reqwest::Method::GET,
                &format!("/api/incidents/{incident_id}/events"),
                None,
            )
            .await;
        assert_eq!(response.status(), 200, "event history read");
        let mut history: Value = response.json().await.unwrap();
        match history["events"].take() {
            Value::Array(events) => events,
            other => panic!("no events array: {other}"),
        }
    }

    /// Creates a chat session as `user_id` and returns the response body.
    pub async fn create_session(&self, user_id: &str, body: &Value) -> Value {
        let response = self
            .send_as(user_id, reqwest::Method::POST, "/chat_api/sessions", Some(body))
            .await;
        assert_eq!(response.status(), 201, "session created");
        response.json().await.unwrap()
    }

    /// Replays the incidents projection and checks it rebuilds the live read rows exactly.
    pub async fn assert_incidents_replay_as_live(&self) {
        let live = vigil_projections::incidents::all_incidents(&self.db).await.unwrap();
        self.state.events.replay(&self.db, Some("incidents")).await.unwrap();
        let replayed = vigil_projections::incidents::all_incidents(&self.db).await.unwrap();
        assert_eq!(replayed, live, "the replayed incidents equal the live ones");
    }

    /// Makes the database unreachable for the running app, as an outage would.
    pub async fn take_database_away(&self) {
        self.database.drop_now().await;
    }

    /// Makes the server refuse the app's connections to its database (and drop the ones it
    /// has), as during maintenance: the server answers, with an error of its own.
    pub async fn refuse_database_connections(&self) {
        let mut conn = PgConnection::connect_with(&self.database.admin).await.unwrap();
        let name = &self.database.name;
        sqlx::query(&format!(r#"ALTER DATABASE "{name}" ALLOW_CONNECTIONS false"#))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(name)
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        let database = self.database.clone();
        let redis = self.redis_prefix.clone().zip(std::env::var("REDIS_URL").ok());
        // Drop runs inside the test's runtime; clean up on a thread with a runtime of its own.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                database.drop_now().await;
                if let Some((prefix, url)) = redis {
                    delete_redis_keys(&url, &prefix).await;
                }
            });
        })
        .join()
        .ok();
    }
}

#[derive(Clone)]
struct TestDatabase {
    admin: PgConnectOptions,
    name: String,
    url: Url,
}

impl TestDatabase {
    async fn create(server: &str) -> Self {
        let mut url = Url::parse(server).expect("DATABASE_URL is a URL");
        let admin = PgConnectOptions::from_str(server)
            .expect("DATABASE_URL parses")
            .database("postgres");
        let name = format!("vigil_test_{}", Uuid::new_v4().simple());
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .expect("PostgreSQL reachable at DATABASE_URL");
        sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
            .unwrap();
        url.set_path(&format!("/{name}"));
        Self { admin, name, url }
    }

    async fn drop_now(&self) {
        if let Ok(mut conn) = PgConnection::connect_with(&self.admin).await {
            let _ = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#, self.name))
                .execute(&mut conn)
                .await;
        }
    }
}

async fn delete_redis_keys(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else { return };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}

fn init_test_logging() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            vigil::telemetry::init().expect("telemetry");
        }
    });
}

/// Polls `check` until it returns `Some` or five seconds pass.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

pub fn user_header(user_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("X-User-ID", user_id.parse().unwrap());
    headers
}

/// Asserts the service's error shape and returns the body.
pub async fn assert_error(response: Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/json"), "errors are JSON");
    let body: Value = response.json().await.expect("JSON error body");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "error message in {body}"
    );
    assert_eq!(body["code"], code, "code in {body}");
    body
}

/// Everything the app logs, at every level, while this lives (on the current-thread test runtime,
/// which the app under test shares).
pub struct CapturedLogs {
    buffer: LogBuffer,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    pub fn start() -> Self {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        Self {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// [`CapturedLogs::start`] in the service's JSON format (`LOG_FORMAT=json`).
    pub fn json() -> Self {
        use tracing_subscriber::prelude::*;
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(vigil::telemetry::json_layer(move || writer.clone()));
        Self {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.0.lock().unwrap()).into_owned()
    }
}
