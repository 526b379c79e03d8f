//! wq-auth integration tests: one binary, local fake issuers and OpenShift
//! APIs on 127.0.0.1, time from a manual clock.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod config;
mod helpers;
mod hostile;
mod jwt;
mod k8s;
mod oauth_proxy;
mod openshift;
mod static_tokens;
