//! Every request carries an id: the caller's `X-Request-Id` when it is a plain token (a proxy's
//! or a load balancer's), else a new UUID. The id names the request's log span, with the user,
//! incident or chat session it is about, and comes back in the response's `X-Request-Id`.

use axum::{
    extract::Request,
    http::{HeaderName, HeaderValue},
    middleware::Next,
    response::Response,
};
use tracing::field::Empty;

pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// Longer ids are replaced: a log field is no place for a caller's essay.
const MAX_ID_BYTES: usize = 128;

/// Keeps a plain caller id or assigns a new one, and echoes it in the response.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .filter(|id| is_plain(id.as_bytes()))
        .cloned()
        .unwrap_or_else(new_id);
    request.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
    let mut response = next.run(request).await;
    response.headers_mut().insert(REQUEST_ID_HEADER, id);
    response
}

fn new_id() -> HeaderValue {
    HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()).expect("a UUID is a header value")
}

fn is_plain(id: &[u8]) -> bool {
    (1..=MAX_ID_BYTES).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The request's span: its id, method and path (never the query string: OAuth callbacks carry
/// the authorization code there), the incident or chat session its path names, and the user,
/// recorded by the identity's extractor once it is known.
pub fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let path = request.uri().path();
    let id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %path,
        user_id = Empty,
        incident_id = Empty,
        session_id = Empty,
    );
    if let Some(incident) = segment_after(path, "/api/incidents/") {
        span.record("incident_id", incident);
    }
    if let Some(session) = segment_after(path, "/chat_api/sessions/") {
        span.record("session_id", session);
    }
    span
}

/// The path segment right after `prefix`, if it is an id-like one.
fn segment_after<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let segment = path.strip_prefix(prefix)?.split('/').next()?;
    is_plain(segment.as_bytes()).then_some(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_are_kept_and_others_replaced() {
        assert!(is_plain(b"9f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"));
        assert!(is_plain(b"lb:1700000000.123_abc"));
        for id in [&b""[..], b"two words", b"quote\"d", &[b'a'; 129]] {
            assert!(!is_plain(id), "{id:?}");
        }
    }

    #[test]
    fn the_incident_or_session_of_a_path() {
        let id = "0b7c1e8e-5f3a-4c2b-9d1e-2f3a4b5c6d7e";
        assert_eq!(
            segment_after(&format!("/api/incidents/{id}/events"), "/api/incidents/"),
            Some(id)
        );
        assert_eq!(segment_after("/api/incidents", "/api/incidents/"), None);
        assert_eq!(
            segment_after("/chat_api/sessions/abc", "/chat_api/sessions/"),
            Some("abc")
        );
    }
}
