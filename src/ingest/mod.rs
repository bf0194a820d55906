//! Alert ingestion: webhook bodies of nine sources, parsed into one normalized shape.

pub mod parsers;
pub mod service;
pub mod tokens;
