//! Integration tests of the HTTP API: the real router on 127.0.0.1:0 against
//! a fresh SQLite and a fresh PostgreSQL database per test, driven with
//! reqwest. One binary; one module per area.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod helpers;

mod auth;
mod errors;
mod health;
mod hostile;
mod items;
mod metrics;
mod retry;
mod slow_clients;
