//! The import edges of `src/` that break the layering today; issue #29 removes them. Each is
//! (from, to, why the code makes it). An edge leaves this list once the code no longer makes it,
//! or no longer breaks a rule: the check fails until it is deleted here. Nothing is added to it:
//! a new violation is fixed in the code.

pub const KNOWN_DEBT: &[(&str, &str, &str)] = &[
    // The chat agent and the socket reach into each other.
    ("agent", "ws", "the agent speaks the socket's wire format (ws::protocol's ChatQuery, ServerMessage) and its Outbox relays through ws::fanout"),
    ("ws", "agent", "the socket runs agent::answer with the agent's Outbox; protocol maps a Mode to agent::credentials::Access"),
    ("analysis", "ws", "incident_chat.rs builds a ws::protocol::ChatQuery (and a socket Outbox) to reuse agent::answer"),
    // Use cases take the whole AppState instead of the handles they use.
    ("agent", "state", "agent::answer, its tools and its credentials take AppState"),
    ("analysis", "state", "the RCA, postmortem and incident-chat job handlers take AppState"),
    // The HTTP middleware and the state that holds everything form one loop.
    ("auth", "state", "the identity extractors read login sessions and config from AppState"),
    ("db_circuit", "state", "the database gate is a middleware over AppState"),
    ("db_circuit", "rate_limit", "the database gate tells requests apart with rate_limit::Scope"),
    ("rate_limit", "state", "the rate-limit middleware takes AppState"),
    ("rate_limit", "auth", "the rate-limit middleware finds the caller through auth::Identity"),
    ("ws", "state", "the listener and each connection take AppState"),
    // AppState holding a handle is the right direction; these close the loops above.
    ("state", "agent", "AppState holds the agent's CliConfig and ReplyTurns"),
    ("state", "auth", "AppState holds the password hasher and login sessions"),
    ("state", "db_circuit", "AppState holds the DatabaseCircuit"),
    ("state", "rate_limit", "AppState holds the RateLimiter"),
    ("state", "ws", "AppState holds the SessionFanout"),
];
