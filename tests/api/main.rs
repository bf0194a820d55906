//! Black-box tests of the HTTP API and WebSocket listener. One binary, so it links once.

mod cors;
mod errors;
mod health;
mod helpers;
mod openapi;
mod rate_limit;
mod users;
mod websocket;
