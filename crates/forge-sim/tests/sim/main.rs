//! forge-sim's integration tests, one binary: every GitLab and GitHub
//! endpoint, the control API, fault injection and webhooks, over real HTTP.
#![allow(
    clippy::disallowed_methods,
    reason = "tests compare sim time with the wall clock"
)]

mod github_support;
mod sim_common;

mod github_control;
mod github_merge;
mod github_rest;
mod github_webhooks;
mod gitlab_api;
mod ownership;
mod sim_control;
