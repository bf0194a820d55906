use tracing::Subscriber;
use tracing_subscriber::{fmt, fmt::MakeWriter, prelude::*, registry::LookupSpan, EnvFilter, Layer};

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); `LOG_FORMAT=json` for JSON lines.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry.with(json_layer(std::io::stderr)).init();
    } else {
        registry.with(fmt::layer().with_writer(std::io::stderr)).init();
    }
}

/// The JSON lines of `LOG_FORMAT=json`: each line carries the fields of the spans it was
/// logged in, the innermost as `span` and all of them, outermost first, as `spans`; a
/// request's span has `request_id`, `user_id`, and `incident_id` or `session_id`
/// (docs/operations.md lists them).
pub fn json_layer<S, W>(writer: W) -> impl Layer<S>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_writer(writer)
}
