//! The `mr` item type: a caller's desired change, owned on a forge until it
//! is merged or closed.

pub mod spec;
