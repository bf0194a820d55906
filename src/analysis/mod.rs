//! Root cause analysis. The built-in analyst (used when no language model is configured) turns
//! what the service knows about an incident into thoughts, suggestions and a summary.

pub mod analyst;
pub mod rca;
