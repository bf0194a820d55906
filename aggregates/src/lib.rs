//! The domain of vigil: aggregates, their commands and events, and the pure rules behind them.
//! No I/O lives here; `handle` is the only place business rules are decided.

pub mod chat_session;
pub mod connection;
pub mod correlation;
pub mod grouping_rule;
pub mod incident;
pub mod incident_analysis;
pub mod ledger;
pub mod received_alert;
pub mod signatures;
pub mod silence;
pub mod source;
pub mod topology;
pub mod verdict_gate;
