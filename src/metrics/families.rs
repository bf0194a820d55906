//! The counters other parts of the service record into: events appended, analyses, WebSocket
//! traffic, language-model calls and rate-limit refusals. Each is a cheap handle (clones share
//! the counters); a `Default` one is registered nowhere (tools and tests outside a serving process).

use std::time::Duration;

use prometheus::{CounterVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use super::registered;
use vigil_aggregates::source::Source;

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
    )
}

/// How a root cause analysis job ended (the `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnalysisOutcome {
    /// The incident was analysed.
    Completed,
    /// It had been analysed already (a job run again).
    Skipped,
    /// The attempt failed and the job will be tried again.
    Retried,
    /// The attempt failed for good: the incident shows the analysis as failed.
    Failed,
    /// The job was cancelled while it ran.
    Cancelled,
}

impl AnalysisOutcome {
    pub const ALL: [Self; 5] = [
        Self::Completed,
        Self::Skipped,
        Self::Retried,
        Self::Failed,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Skipped => "skipped",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Root cause analyses: how many ended how, and how long each attempt took.
#[derive(Clone)]
pub struct AnalysisMetrics {
    runs: IntCounterVec,
    seconds: HistogramVec,
}

impl AnalysisMetrics {
    pub(super) fn registered_in(registry: &Registry) -> Self {
        let runs = counter_vec(
            registry,
            "vigil_analyses_total",
            "Root cause analysis attempts, by outcome",
            &["outcome"],
        );
        let seconds = registered(
            registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "vigil_analysis_duration_seconds",
                    "Wall time of each root cause analysis attempt, by outcome",
                )
                .buckets(vec![
                    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                ]),
                &["outcome"],
            )
            .expect("valid metric"),
        );
        // Every outcome shows from the start (at 0), so that a rate over it never lacks a series.
        for outcome in AnalysisOutcome::ALL {
            runs.with_label_values(&[outcome.as_str()]);
            seconds.with_label_values(&[outcome.as_str()]);
        }
        Self { runs, seconds }
    }

    pub fn observe(&self, outcome: AnalysisOutcome, took: Duration) {
        self.runs.with_label_values(&[outcome.as_str()]).inc();
        self.seconds
            .with_label_values(&[outcome.as_str()])
            .observe(took.as_secs_f64());
    }
}

/// The chat WebSocket: sockets open, messages each way, connections refused for want of room.
#[derive(Clone)]
pub struct WebSocketMetrics {
    pub connections: IntGauge,
    pub received: IntCounter,
    pub sent: IntCounter,
    pub refused: IntCounter,
}

impl WebSocketMetrics {
    pub(super) fn registered_in(registry: &Registry) -> Self {
        let messages = counter_vec(
            registry,
            "vigil_websocket_messages_total",
            "WebSocket messages, by direction (in: from clients, out: to clients)",
            &["direction"],
        );
        Self {
            connections: registered(
                registry,
                IntGauge::new("vigil_websocket_connections", "WebSocket connections open").expect("valid metric"),
            ),
            received: messages.with_label_values(&["in"]),
            sent: messages.with_label_values(&["out"]),
            refused: registered(
                registry,
                IntCounter::new(
                    "vigil_websocket_connections_refused_total",
                    "WebSocket connections refused because the listener was full",
                )
                .expect("valid metric"),
            ),
        }
    }

    /// Counts a socket as open until the guard is dropped.
    pub fn open(&self) -> OpenConnection {
        self.connections.inc();
        OpenConnection(self.connections.clone())
    }
}

impl Default for WebSocketMetrics {
    fn default() -> Self {
        Self::registered_in(&Registry::new())
    }
}

/// See [`WebSocketMetrics::open`].
pub struct OpenConnection(IntGauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How a language-model call ended (the `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelOutcome {
    Ok,
    Error,
    /// Dropped before its end (the reply was cancelled).
    Cancelled,
}

impl ModelOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What model calls are for (`language_model::Call::request_type`).
const MODEL_REQUEST_TYPES: [&str; 4] = ["chat", "rca", "summary", "postmortem"];

/// Language-model calls, by what they were for (`request_type`: chat, rca, summary, postmortem).
#[derive(Clone)]
pub struct ModelMetrics {
    requests: IntCounterVec,
    tokens: IntCounterVec,
    cost: CounterVec,
    seconds: HistogramVec,
}

impl ModelMetrics {
    pub(super) fn registered_in(registry: &Registry) -> Self {
        let metrics = Self {
            requests: counter_vec(
                registry,
                "vigil_model_requests_total",
                "Language-model calls, by purpose and outcome",
                &["request_type", "outcome"],
            ),
            tokens: counter_vec(
                registry,
                "vigil_model_tokens_total",
                "Language-model tokens (as reported, or estimated when not), by purpose and direction",
                &["request_type", "direction"],
            ),
            cost: registered(
                registry,
                CounterVec::new(
                    Opts::new(
                        "vigil_model_cost_usd_total",
                        "Estimated cost of language-model calls in USD, from the price table (LLM_PRICES), before surcharge",
                    ),
                    &["request_type"],
                )
                .expect("valid metric"),
            ),
            seconds: registered(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "vigil_model_request_duration_seconds",
                        "Wall time of each language-model call, by purpose",
                    )
                    .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]),
                    &["request_type"],
                )
                .expect("valid metric"),
            ),
        };
        // Each purpose's series show from the start, at 0 (a rate over them then never lacks one).
        for request_type in MODEL_REQUEST_TYPES {
            for outcome in [ModelOutcome::Ok, ModelOutcome::Error, ModelOutcome::Cancelled] {
                metrics.requests.with_label_values(&[request_type, outcome.as_str()]);
            }
            for direction in ["input", "output"] {
                metrics.tokens.with_label_values(&[request_type, direction]);
            }
            metrics.cost.with_label_values(&[request_type]);
            metrics.seconds.with_label_values(&[request_type]);
        }
        metrics
    }

    /// Records one call: `request_type` is one of the fixed purposes, never free text.
    pub fn observe(
        &self,
        request_type: &'static str,
        outcome: ModelOutcome,
        tokens: (u32, u32),
        cost_usd: f64,
        took: Duration,
    ) {
        self.requests.with_label_values(&[request_type, outcome.as_str()]).inc();
        self.tokens
            .with_label_values(&[request_type, "input"])
            .inc_by(u64::from(tokens.0));
        self.tokens
            .with_label_values(&[request_type, "output"])
            .inc_by(u64::from(tokens.1));
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost.with_label_values(&[request_type]).inc_by(cost_usd);
        }
        self.seconds
            .with_label_values(&[request_type])
            .observe(took.as_secs_f64());
    }
}

impl Default for ModelMetrics {
    fn default() -> Self {
        Self::registered_in(&Registry::new())
    }
}

/// Requests refused for being over a rate limit, by budget (`scope`: api, chat, anonymous, an
/// ingestion source, or websocket for chat queries over a socket's rate).
#[derive(Clone)]
pub struct RateLimitMetrics {
    refusals: IntCounterVec,
}

impl RateLimitMetrics {
    pub(super) fn registered_in(registry: &Registry) -> Self {
        let refusals = counter_vec(
            registry,
            "vigil_rate_limit_refusals_total",
            "Requests refused for being over their rate limit, by budget",
            &["scope"],
        );
        let sources = Source::ALL.map(Source::as_str);
        for scope in ["api", "chat", "anonymous", "websocket"].iter().chain(&sources) {
            refusals.with_label_values(&[scope]);
        }
        Self { refusals }
    }

    pub fn refused(&self, scope: &'static str) {
        self.refusals.with_label_values(&[scope]).inc();
    }
}
