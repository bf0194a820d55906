//! Local fakes of the providers: real HTTP on `127.0.0.1:<ephemeral port>`, speaking the providers' real
//! request and answer shapes, for this crate's tests and the main project's integration tests.
//!
//! Each fake records every request it gets ([`RecordedRequest`], secrets included: these are test
//! credentials) and can be told to misbehave ([`Failure`]). A fake stops when dropped. Fakes panic on
//! setup errors (no loopback port), as test fixtures do.

mod azure;
mod scaleway;
mod sts;

pub use azure::FakeAzure;
pub use scaleway::FakeScaleway;
pub use sts::{FakeSts, IssuedCredentials};

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use reqwest::Url;
use tokio::task::JoinHandle;

/// A request as a fake received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Names in lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.as_str())
    }

    /// The first value of `name` in the query string.
    pub fn query_value(&self, name: &str) -> Option<String> {
        first_value(self.query.as_deref().unwrap_or_default().as_bytes(), name)
    }

    /// The first value of `name` in a form-encoded body.
    pub fn form_value(&self, name: &str) -> Option<String> {
        first_value(&self.body, name)
    }
}

fn first_value(encoded: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(encoded)
        .ok()?
        .into_iter()
        .find_map(|(n, value)| (n == name).then_some(value))
}

/// Misbehaviour applied to every request after it is recorded, until cleared.
#[derive(Clone, Debug)]
pub enum Failure {
    /// Wait this long, then answer normally (to run a client into its timeout).
    Delay(Duration),
    /// Answer this instead (a 5xx, or a malformed document).
    Respond { status: u16, body: String },
}

/// The part every fake shares: the listener, the request log and the failure switch.
struct FakeServer {
    url: Url,
    shared: Shared,
    task: JoinHandle<()>,
}

#[derive(Clone, Default)]
struct Shared {
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    failure: Arc<Mutex<Option<Failure>>>,
}

impl FakeServer {
    async fn start(router: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake server binds a loopback port");
        let address = listener.local_addr().expect("bound listener has an address");
        let shared = Shared::default();
        let app = router.layer(middleware::from_fn_with_state(shared.clone(), intercept));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake server runs");
        });
        let url = Url::parse(&format!("http://{address}/")).expect("loopback address makes a URL");
        Self { url, shared, task }
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    fn set_failure(&self, failure: Option<Failure>) {
        *lock(&self.shared.failure) = failure;
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn intercept(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    lock(&shared.requests).push(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    });
    let failure = lock(&shared.failure).clone();
    match failure {
        Some(Failure::Delay(delay)) => tokio::time::sleep(delay).await,
        Some(Failure::Respond { status, body }) => {
            return (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body,
            )
                .into_response()
        }
        None => {}
    }
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// Locks `mutex`, going on after a panic elsewhere: the fakes' state stays consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
