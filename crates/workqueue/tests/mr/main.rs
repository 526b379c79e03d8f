//! End-to-end tests of the `mr` item type on GitLab: the real service over
//! HTTP against forge-sim, on SQLite and on PostgreSQL.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod audit;
mod auth;
mod calls;
mod cancel;
mod ci_retry;
mod converge;
mod faults;
mod flow;
mod gates;
mod github;
mod github_ci;
mod hostile;
mod openapi;
mod ownership;
mod ratelimit;
mod sqs;
mod support;
mod webhooks;
