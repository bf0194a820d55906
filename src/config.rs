//! The service's whole configuration: one typed struct, read from flags or the environment.

use std::{fmt, net::IpAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

/// A value that must never reach a log line or a response. `Debug` and `Display` print a mask.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// How much the `X-User-ID` header is trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Any well-formed `X-User-ID` is honoured, with no account required (the spec's recommended
    /// scheme, for deployments where a trusted gateway sets the header).
    Trusted,
    /// `X-User-ID` is honoured only when it matches the session cookie's user, or carries a
    /// valid `X-User-Signature` from the gateway (HMAC-SHA256 with `GATEWAY_SIGNING_SECRET`).
    Strict,
}

/// Recoveries of one alert key within the flapping window that make it flapping.
pub const DEFAULT_FLAPPING_CYCLES: u32 = 4;
/// The flapping window, in seconds.
pub const DEFAULT_FLAPPING_WINDOW_SECS: i64 = 1800;

#[derive(Clone, Debug, Args)]
pub struct Config {
    /// Address both listeners bind to.
    #[arg(long, env = "BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// HTTP API port (0 picks a free port).
    #[arg(long, env = "HTTP_PORT", default_value_t = 5080)]
    pub http_port: u16,

    /// WebSocket chat port (0 picks a free port).
    #[arg(long, env = "WS_PORT", default_value_t = 5006)]
    pub ws_port: u16,

    /// PostgreSQL connection string (event store, read tables, users).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/vigil"
    )]
    pub database_url: Secret,

    /// Maximum connections in the database pool.
    #[arg(long, env = "DATABASE_MAX_CONNECTIONS", default_value_t = 40)]
    pub database_max_connections: u32,

    /// Redis connection string. When absent, cache and rate limits are in-process.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<Secret>,

    /// Prefix of every Redis key this instance writes (lets several deployments or tests share one Redis).
    #[arg(long, env = "REDIS_KEY_PREFIX", default_value = "vigil")]
    pub redis_key_prefix: String,

    /// Allowed CORS origin: the web frontend.
    #[arg(long, env = "FRONTEND_URL", default_value = "http://localhost:3000")]
    pub frontend_url: String,

    /// bcrypt work factor for password hashes.
    #[arg(long, env = "BCRYPT_COST", default_value_t = 12, value_parser = clap::value_parser!(u32).range(4..=31))]
    pub bcrypt_cost: u32,

    /// How `X-User-ID` is verified.
    #[arg(long, env = "AUTH_MODE", value_enum, default_value = "trusted")]
    pub auth_mode: AuthMode,

    /// Shared secret with the trusted gateway, used in strict mode to verify `X-User-Signature`.
    #[arg(long, env = "GATEWAY_SIGNING_SECRET")]
    pub gateway_signing_secret: Option<Secret>,

    /// Lifetime of a login session cookie, in hours.
    #[arg(long, env = "SESSION_TTL_HOURS", default_value_t = 168)]
    pub session_ttl_hours: u32,

    /// Mark the session cookie `Secure` (set when served over HTTPS).
    #[arg(long, env = "SESSION_COOKIE_SECURE", default_value_t = false)]
    pub session_cookie_secure: bool,

    /// Requests per minute per user on the HTTP API.
    #[arg(long, env = "RATE_LIMIT_PER_MINUTE", default_value_t = 100)]
    pub rate_limit_per_minute: u32,

    /// Requests per minute per user on `/chat_api/*`.
    #[arg(long, env = "CHAT_RATE_LIMIT_PER_MINUTE", default_value_t = 20)]
    pub chat_rate_limit_per_minute: u32,

    /// Requests per minute per client address from callers with no identity (register, login).
    #[arg(long, env = "ANONYMOUS_RATE_LIMIT_PER_MINUTE", default_value_t = 1000)]
    pub anonymous_rate_limit_per_minute: u32,

    /// Seconds a request may take before it is answered with 503.
    #[arg(long, env = "REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,

    /// Run background job workers inside `vigil serve` (set false when `vigil worker` processes run them).
    #[arg(long, env = "RUN_WORKERS", default_value_t = true, action = clap::ArgAction::Set)]
    pub run_workers: bool,

    /// Jobs one worker runs at once.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_concurrency: u16,

    /// On shutdown, how long running jobs may take to finish before they are interrupted and
    /// handed back (another worker retries them at once).
    #[arg(long, env = "WORKER_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub worker_shutdown_grace_secs: u64,

    /// Port on which `vigil worker` serves `GET /metrics` (and nothing else); none when unset.
    /// Its analyses and model calls are counted only there.
    #[arg(long, env = "WORKER_METRICS_PORT")]
    pub worker_metrics_port: Option<u16>,

    /// Requests per minute per user and per source on the alert ingestion endpoints.
    #[arg(long, env = "INGEST_RATE_LIMIT_PER_MINUTE", default_value_t = 1200)]
    pub ingest_rate_limit_per_minute: u32,

    /// Base URL of an OpenAI-compatible API (`/v1/chat/completions`). Without it the built-in
    /// analyst writes every analysis.
    #[arg(long, env = "LLM_BASE_URL")]
    pub llm_base_url: Option<String>,

    /// The model asked when none is named.
    #[arg(long, env = "LLM_MODEL", default_value = "gpt-4o-mini")]
    pub llm_model: String,

    /// Bearer key of the language-model API.
    #[arg(long, env = "LLM_API_KEY")]
    pub llm_api_key: Option<Secret>,

    /// Prices in USD per million input/output tokens over the built-in table: `model=in/out,...`.
    #[arg(long, env = "LLM_PRICES")]
    pub llm_prices: Option<String>,

    /// Placement lanes: batches of different users' alerts written at once (a user always uses one lane).
    #[arg(long, env = "INGEST_LANES", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub ingest_lanes: u32,

    /// Most alerts one placement batch (one transaction) takes.
    #[arg(long, env = "INGEST_BATCH_MAX_ALERTS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub ingest_batch_max_alerts: u32,

    /// How long (milliseconds) a busy placement lane lets its next batch fill before writing it;
    /// 0 (the default) writes whatever has queued. An idle lane never waits. Batches fill by
    /// themselves while the previous one is written; waiting longer only added latency (at 32
    /// clients, 2 ms cut an alert storm from ~5,000 to ~3,300 alerts/s).
    #[arg(long, env = "INGEST_BATCH_LINGER_MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub ingest_batch_linger_ms: u64,

    /// Chat queries one WebSocket client may send per 60 seconds (a token bucket refilled evenly).
    #[arg(long, env = "WS_MESSAGES_PER_MINUTE", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub ws_messages_per_minute: u32,

    /// Chat sockets one instance holds open at once; further ones are refused with 503 (each
    /// socket is a file descriptor the HTTP API's connections also need).
    #[arg(long, env = "WS_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub ws_max_connections: u32,

    /// Rounds of model answer and tool calls one agent reply may take.
    #[arg(long, env = "AGENT_MAX_STEPS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub agent_max_steps: u32,

    /// Seconds the agent waits for a confirmation before it counts as declined.
    #[arg(long, env = "AGENT_CONFIRMATION_TIMEOUT_SECS", default_value_t = 120)]
    pub agent_confirmation_timeout_secs: u64,

    /// Seconds one tool call may run.
    #[arg(long, env = "AGENT_TOOL_TIMEOUT_SECS", default_value_t = 30)]
    pub agent_tool_timeout_secs: u64,

    /// Seconds an analysis may spend with the model, all its rounds together; past them the
    /// built-in summary stands (a stream that trickles never trips the client's idle timeout).
    #[arg(long, env = "RCA_MODEL_TIMEOUT_SECS", default_value_t = 300)]
    pub rca_model_timeout_secs: u64,

    /// Seconds an incident's analysis waits after the incident opened, so that it reads the
    /// alerts that join in the first moments of a failure (its callers, its dependency) and the
    /// bridges merged meanwhile, not the first alert alone.
    #[arg(long, env = "RCA_SETTLE_SECS", default_value_t = 30)]
    pub rca_settle_secs: u64,

    /// Directory the cloud command tool runs provider CLIs from (never a PATH lookup); unset
    /// leaves the tool out.
    #[arg(long, env = "AGENT_CLI_DIR")]
    pub agent_cli_dir: Option<PathBuf>,

    /// Programs the cloud command tool may run, comma-separated.
    #[arg(long, env = "AGENT_CLI_ALLOWLIST", value_delimiter = ',', default_values_t = ["aws".to_owned(), "gcloud".to_owned(), "az".to_owned(), "scw".to_owned(), "kubectl".to_owned(), "tailscale".to_owned()])]
    pub agent_cli_allowlist: Vec<String>,

    /// Largest attachment of a chat query, in bytes once decoded.
    #[arg(long, env = "ATTACHMENT_MAX_BYTES", default_value_t = 10 * 1024 * 1024)]
    pub attachment_max_bytes: usize,

    /// Seconds around an alert within which an open incident's alerts must lie to correlate.
    #[arg(long, env = "CORRELATION_WINDOW_SECS", default_value_t = 300, value_parser = clap::value_parser!(i64).range(1..))]
    pub correlation_window_secs: i64,

    /// The same window for deployment events (source_f, source_g), whose builds run minutes apart.
    #[arg(long, env = "DEPLOYMENT_CORRELATION_WINDOW_SECS", default_value_t = 1800, value_parser = clap::value_parser!(i64).range(1..))]
    pub deployment_correlation_window_secs: i64,

    /// Weights of the service, time and semantic sub-scores, comma-separated.
    #[arg(long, env = "CORRELATION_WEIGHTS", value_delimiter = ',', num_args = 3, default_values_t = [
        vigil_aggregates::correlation::DEFAULT_SERVICE_WEIGHT,
        vigil_aggregates::correlation::DEFAULT_TIME_WEIGHT,
        vigil_aggregates::correlation::DEFAULT_SEMANTIC_WEIGHT,
    ])]
    pub correlation_weights: Vec<f64>,

    /// Total score (0 to 1) at which an alert joins an open incident.
    #[arg(long, env = "CORRELATION_THRESHOLD", default_value_t = 0.6)]
    pub correlation_threshold: f64,

    /// Correlated alerts one incident takes at most; later ones open a new incident.
    #[arg(long, env = "CORRELATION_MAX_ALERTS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub correlation_max_alerts: u32,

    /// Recoveries of one alert key within `FLAPPING_WINDOW_SECS` that make it flapping: its later
    /// cycles are recorded on its incident and open nothing until it is quiet for the window.
    #[arg(long, env = "FLAPPING_CYCLES", default_value_t = DEFAULT_FLAPPING_CYCLES, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub flapping_cycles: u32,

    /// The flapping window, in seconds (also how long a flapping key must be quiet).
    #[arg(long, env = "FLAPPING_WINDOW_SECS", default_value_t = DEFAULT_FLAPPING_WINDOW_SECS, value_parser = clap::value_parser!(i64).range(1..=86_400))]
    pub flapping_window_secs: i64,

    /// Largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Milliseconds the health check waits for the chatbot WebSocket's first answer.
    #[arg(long, env = "HEALTH_WS_TIMEOUT_MS", default_value_t = 2000)]
    pub health_ws_timeout_ms: u64,

    /// Where per-session storage (generated files, uploads) lives.
    #[arg(long, env = "DATA_DIR", default_value = ".data")]
    pub data_dir: PathBuf,

    /// Deployment environment name; part of secret names.
    #[arg(long, env = "VIGIL_ENV", default_value = "dev")]
    pub environment: String,

    /// Users' cloud credentials: the secrets store, the OAuth state key and each provider's endpoints.
    #[command(flatten)]
    pub connections: ConnectionsConfig,
}

impl Config {
    /// The configuration as the environment gives it, with no command-line flags.
    pub fn from_env() -> Result<Self, clap::Error> {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            config: Config,
        }
        <Wrapper as clap::Parser>::try_parse_from(["vigil"]).map(|w| w.config)
    }

    pub fn session_ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.session_ttl_hours) * 3600)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    pub fn health_ws_timeout(&self) -> Duration {
        Duration::from_millis(self.health_ws_timeout_ms)
    }
}

/// Where users' cloud credentials are kept and how each provider is reached.
#[derive(Clone, Debug, Args)]
pub struct ConnectionsConfig {
    /// Address of a Vault-compatible KV v2 server. Without it, credentials are encrypted
    /// (AES-256-GCM) into the database.
    #[arg(long, env = "VAULT_ADDR")]
    pub vault_addr: Option<String>,

    /// Token the service sends to Vault (`X-Vault-Token`).
    #[arg(long, env = "VAULT_TOKEN")]
    pub vault_token: Option<Secret>,

    /// KV v2 mount of users' credentials.
    #[arg(long, env = "VAULT_MOUNT", default_value = "secret")]
    pub vault_mount: String,

    /// Path under the mount where users' credentials live.
    #[arg(long, env = "SECRETS_BASE_PATH", default_value = "users")]
    pub secrets_base_path: String,

    /// Base64 of the 32-byte master key (embedded store, cache encryption, OAuth state and cloud_b
    /// external ids). Without it the key lives in `<DATA_DIR>/secrets.key`, created with mode 0600.
    #[arg(long, env = "SECRETS_KEY")]
    pub secrets_key: Option<Secret>,

    /// Seconds decrypted credentials stay in the cache.
    #[arg(long, env = "CREDENTIAL_CACHE_TTL_SECS", default_value_t = 300)]
    pub credential_cache_ttl_secs: u64,

    /// Seconds any call to a provider may take.
    #[arg(long, env = "PROVIDER_TIMEOUT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub provider_timeout_secs: u64,

    /// OAuth client of cloud_a; the cloud_a endpoints answer 503 until it is set.
    #[arg(long, env = "CLOUD_A_CLIENT_ID")]
    pub cloud_a_client_id: Option<String>,

    #[arg(long, env = "CLOUD_A_CLIENT_SECRET")]
    pub cloud_a_client_secret: Option<Secret>,

    #[arg(
        long,
        env = "CLOUD_A_AUTH_URL",
        default_value = "https://accounts.google.com/o/oauth2/v2/auth"
    )]
    pub cloud_a_auth_url: String,

    #[arg(
        long,
        env = "CLOUD_A_TOKEN_URL",
        default_value = "https://oauth2.googleapis.com/token"
    )]
    pub cloud_a_token_url: String,

    /// Base of cloud_a's userinfo, project and billing APIs.
    #[arg(long, env = "CLOUD_A_API_BASE", default_value = "https://www.googleapis.com")]
    pub cloud_a_api_base: String,

    /// Where cloud_a sends the browser back: this service's `/cloud_a/callback`.
    #[arg(
        long,
        env = "CLOUD_A_REDIRECT_URL",
        default_value = "http://localhost:5080/cloud_a/callback"
    )]
    pub cloud_a_redirect_url: String,

    /// STS endpoint of cloud_b.
    #[arg(long, env = "CLOUD_B_STS_ENDPOINT", default_value = "https://sts.amazonaws.com")]
    pub cloud_b_sts_endpoint: String,

    #[arg(long, env = "CLOUD_B_REGION", default_value = "us-east-1")]
    pub cloud_b_region: String,

    /// The service's own cloud_b identity, which users' roles trust; cloud_b answers 503 until set.
    #[arg(long, env = "CLOUD_B_ACCESS_KEY_ID")]
    pub cloud_b_access_key_id: Option<String>,

    #[arg(long, env = "CLOUD_B_SECRET_ACCESS_KEY")]
    pub cloud_b_secret_access_key: Option<Secret>,

    #[arg(long, env = "CLOUD_B_SESSION_TOKEN")]
    pub cloud_b_session_token: Option<Secret>,

    /// Key the users' external ids are derived from (must never change); derived from the master
    /// key when absent.
    #[arg(long, env = "CLOUD_B_EXTERNAL_ID_KEY")]
    pub cloud_b_external_id_key: Option<Secret>,

    /// cloud_c token endpoint base (`<base>/<tenant>/oauth2/v2.0/token`).
    #[arg(
        long,
        env = "CLOUD_C_LOGIN_BASE",
        default_value = "https://login.microsoftonline.com"
    )]
    pub cloud_c_login_base: String,

    #[arg(
        long,
        env = "CLOUD_C_MANAGEMENT_BASE",
        default_value = "https://management.azure.com"
    )]
    pub cloud_c_management_base: String,

    #[arg(long, env = "CLOUD_D_API_BASE", default_value = "https://api.scaleway.com")]
    pub cloud_d_api_base: String,

    #[arg(long, env = "CLOUD_E_API_BASE", default_value = "https://api.tailscale.com")]
    pub cloud_e_api_base: String,

    /// Offer cloud_f (it is left out of every list, and its endpoints answer 404, while off).
    #[arg(long, env = "CLOUD_F_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub cloud_f_enabled: bool,

    /// OAuth client of cloud_f; with the flag on, the cloud_f endpoints answer 503 until it is set.
    #[arg(long, env = "CLOUD_F_CLIENT_ID")]
    pub cloud_f_client_id: Option<String>,

    #[arg(long, env = "CLOUD_F_CLIENT_SECRET")]
    pub cloud_f_client_secret: Option<Secret>,

    /// cloud_f's authorization (consent) endpoint.
    #[arg(
        long,
        env = "CLOUD_F_AUTH_URL",
        default_value = "https://cloud-f.invalid/oauth2/authorize"
    )]
    pub cloud_f_auth_url: String,

    #[arg(
        long,
        env = "CLOUD_F_TOKEN_URL",
        default_value = "https://cloud-f.invalid/oauth2/token"
    )]
    pub cloud_f_token_url: String,

    /// Base of cloud_f's OpenID Connect userinfo endpoint (`<base>/oauth2/v3/userinfo`).
    #[arg(long, env = "CLOUD_F_API_BASE", default_value = "https://cloud-f.invalid")]
    pub cloud_f_api_base: String,

    #[arg(
        long,
        env = "CLOUD_F_REDIRECT_URL",
        default_value = "http://localhost:5080/cloud_f/callback"
    )]
    pub cloud_f_redirect_url: String,

    /// The custom scopes the consent screen asks for, comma-separated.
    #[arg(long, env = "CLOUD_F_SCOPES", value_delimiter = ',', default_values_t = ["openid".to_owned(), "email".to_owned()])]
    pub cloud_f_scopes: Vec<String>,
}
