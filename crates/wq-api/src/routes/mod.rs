//! Route handlers, one module per resource; [`crate::router`] mounts them.

pub mod health;
pub mod items;
pub mod me;
pub mod webhooks;
