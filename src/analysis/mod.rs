//! Root cause analysis. The built-in analyst turns what the service knows about an incident into
//! thoughts, suggestions and a summary; a configured language model (`model`) then writes the
//! summary from those findings.

pub mod analyst;
pub mod incident_chat;
pub mod model;
pub mod postmortem;
pub mod rca;
pub mod reactor;
