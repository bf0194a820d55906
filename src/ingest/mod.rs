//! Alert ingestion: webhook bodies of nine sources, parsed into one normalized shape, placed
//! into incidents in batches.

pub mod bridging;
pub mod grouping;
mod kept;
pub mod parsers;
pub mod pipeline;
pub mod placement;
pub mod service;
pub mod silences;
pub mod tokens;
