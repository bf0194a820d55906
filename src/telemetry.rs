use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{trace::SdkTracerProvider, Resource};
use tracing::{level_filters::LevelFilter, Subscriber};
use tracing_subscriber::{filter::Targets, fmt, fmt::MakeWriter, prelude::*, registry::LookupSpan, EnvFilter, Layer};

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); `LOG_FORMAT=json` for JSON lines.
/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, also exports the service's spans (requests, placement
/// batches, jobs, model calls) over OTLP/HTTP; the returned provider flushes them when shut
/// down. Without it nothing is exported, and spans cost what they cost the logs.
pub fn init() -> anyhow::Result<Option<SdkTracerProvider>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let logs = if json {
        json_layer(std::io::stderr).boxed()
    } else {
        fmt::layer().with_writer(std::io::stderr).boxed()
    };
    let provider = tracer_provider()?;
    // The spans the service makes, whatever RUST_LOG keeps of the logs.
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("vigil"))
            .with_filter(
                Targets::new()
                    .with_target("vigil", LevelFilter::INFO)
                    .with_target("vigil_llm", LevelFilter::INFO),
            )
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces)
        .init();
    Ok(provider)
}

/// The OTLP exporter of `OTEL_EXPORTER_OTLP_ENDPOINT` (the SDK reads the other standard
/// `OTEL_*` variables: headers, timeout, batching), in a batch processor of its own thread.
fn tracer_provider() -> anyhow::Result<Option<SdkTracerProvider>> {
    if std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").map_or(true, |endpoint| endpoint.trim().is_empty()) {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "vigil".to_owned());
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build(),
    ))
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
