//! Integration tests of the HTTP API: the real router on 127.0.0.1:0 against
//! a fresh SQLite and a fresh PostgreSQL database per test, driven with
//! reqwest, through wq-testkit's `TestApp` (every test ends with `finish`,
//! which proves the engine left nothing behind). One binary; one module per
//! area.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod auth;
mod errors;
mod health;
mod hostile;
mod items;
mod metrics;
mod openapi;
mod retry;
mod slow_clients;

use wq_testkit::{Backend, TestApp, TestAppBuilder};

/// The app every API test starts from: the probe types, `/metrics`, and
/// the engine built but not started, so a test sees what the API queued
/// for it (`in_flight`) and starts it when it wants a run.
fn api_app<'a>(backend: Backend) -> TestAppBuilder<'a> {
    TestApp::builder(backend)
        .with_probe_types()
        .metrics()
        .engine_started(false)
}
