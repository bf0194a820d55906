//! Black-box tests of the HTTP API and WebSocket listener. One binary, so it links once.

mod chat_sessions;
mod cors;
mod errors;
mod health;
mod helpers;
mod incidents;
mod ingestion;
mod jobs;
mod openapi;
mod projections;
mod rate_limit;
mod rca;
mod users;
mod websocket;
