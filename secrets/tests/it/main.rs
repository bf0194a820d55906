//! Integration tests: real HTTP against the fakes over loopback, real PostgreSQL (a fresh
//! database per test) and, when reachable, real Redis.

mod cache;
mod cloud_a;
mod cloud_e;
mod embedded;
mod redaction;
mod state;
mod support;
mod vault;
