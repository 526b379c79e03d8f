//! Integration tests of the HTTP API: the real router on 127.0.0.1:0 against
//! a fresh SQLite and a fresh PostgreSQL database per test, driven with
//! reqwest. One binary; one module per area.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod helpers;
/// wq-auth's test support: signing keys and a local OIDC issuer.
#[path = "../../../wq-auth/tests/auth/helpers.rs"]
#[allow(
    dead_code,
    reason = "shared with wq-auth's tests; the API tests use part of it"
)]
mod jwt_helpers;

mod auth;
mod errors;
mod health;
mod hostile;
mod items;
mod metrics;
mod retry;
mod slow_clients;
