//! vigil: the backend of an AI site-reliability agent.

pub mod agent;
pub mod analysis;
pub mod app;
pub mod auth;
pub mod cache;
pub mod config;
pub mod connections;
pub mod db;
pub mod db_circuit;
pub mod error;
pub mod eval;
pub mod event_store;
pub mod extract;
pub mod health;
pub mod http;
pub mod incident_merge;
pub mod incident_split;
pub mod ingest;
pub mod jobs;
pub mod language_model;
pub mod metrics;
pub mod orchestration;
pub mod rate_limit;
pub mod replay;
pub mod state;
pub mod telemetry;
pub mod text;
pub mod topology;
pub mod users;
pub mod vector_store;
pub mod ws;

pub use app::Application;
pub use config::Config;
