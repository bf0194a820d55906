//! Black-box tests of the HTTP API and WebSocket listener. One binary, so it links once.

mod chat_agent;
mod chat_sessions;
mod cloud_providers;
mod connections;
mod correlation;
mod cors;
mod errors;
mod feedback;
mod health;
mod helpers;
mod incident_chat;
mod incidents;
mod ingestion;
mod jobs;
mod openapi;
mod openapi_validity;
mod placement;
mod postmortems;
mod projections;
mod query_plans;
mod rate_limit;
mod rca;
mod rca_gate;
mod users;
mod websocket;
