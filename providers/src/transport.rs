use std::time::Duration;

use reqwest::{RequestBuilder, StatusCode, Url};

/// Request timeout of every client unless set with its `with_timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The provider could not serve the request now; the caller answers 502 and the user may retry later.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("the provider did not answer in time")]
    Timeout,
    /// Connection refused, DNS or TLS failure, connection reset. The error carries no URL.
    #[error("could not reach the provider")]
    Unreachable(#[source] reqwest::Error),
    #[error("the provider is throttling requests")]
    Throttled,
    #[error("the provider answered HTTP {0}")]
    Status(u16),
}

/// A provider's answer that is neither a server error nor throttling, with its body read in full.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

/// Sends `request` with `timeout` covering connect to the end of the body.
pub(crate) async fn send(request: RequestBuilder, timeout: Duration) -> Result<Reply, Unavailable> {
    let response = request.timeout(timeout).send().await.map_err(unavailable)?;
    let status = response.status();
    let body = response.bytes().await.map_err(unavailable)?.to_vec();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Err(Unavailable::Throttled);
    }
    if status.is_server_error() {
        return Err(Unavailable::Status(status.as_u16()));
    }
    Ok(Reply { status, body })
}

fn unavailable(error: reqwest::Error) -> Unavailable {
    if error.is_timeout() {
        Unavailable::Timeout
    } else {
        Unavailable::Unreachable(error.without_url())
    }
}

/// `base` with `segments` appended to its path, each percent-encoded (a `/` inside one stays inside it).
pub(crate) fn endpoint(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    // A base that cannot carry a path (`data:` and the like) is left as is; sending to it fails as unreachable.
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}
