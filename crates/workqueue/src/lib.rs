//! `workqueue`: the service as a library (the binary in `main.rs` is its
//! command line). [`app::assemble`] builds the whole service from a
//! [`config::Config`]; `serve`, `demo` and the end-to-end tests use it.

pub mod app;
pub mod cli;
pub mod config;
#[cfg(feature = "demo")]
pub mod demo;
pub mod items;
pub mod logging;
pub mod progress;
pub mod serve;
pub mod token;
pub mod types;
