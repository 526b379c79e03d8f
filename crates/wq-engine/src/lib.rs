//! The processing engine: `ProcessingManager` takes `notify(id)` calls and
//! sweep results, runs each item's loop on a bounded worker pool (claim →
//! drain events → decide → execute → park), keeps leases alive with a
//! heartbeat and shuts down in order. It knows no item type: it talks to
//! them through `wq_core::ItemType` and to the database through
//! `wq_store::Store`.

mod config;
mod manager;
pub mod metrics;

pub use config::EngineConfig;
pub use manager::{EngineError, FailPoint, Flow, Hooks, NoHooks, ProcessingManager, RunOutcome};
