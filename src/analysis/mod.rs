//! Root cause analysis. The built-in analyst turns what the service knows about an incident into
//! thoughts, suggestions and a summary; a configured language model (`crate::language_model`) then writes the
//! summary from those findings and the ledger, and its verdict passes the verdict gate
//! (`rca_model`, `vigil_aggregates::verdict_gate`).

pub mod analyst;
mod earlier;
pub mod incident_chat;
pub mod postmortem;
pub mod rca;
mod rca_model;
