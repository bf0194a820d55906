use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); `LOG_FORMAT=json` for JSON lines.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry.with(fmt::layer().json().with_writer(std::io::stderr)).init();
    } else {
        registry.with(fmt::layer().with_writer(std::io::stderr)).init();
    }
}
