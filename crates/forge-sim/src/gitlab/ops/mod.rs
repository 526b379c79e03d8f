//! GitLab state transitions shared by the REST handlers, the control API and the ticker.

pub mod auto_merge;
pub mod merge;

pub use auto_merge::{cancel_auto_merge, on_source_pushed, progress_auto_merge};
pub use merge::{add_system_note, approve_mr, do_merge, emit_mr_hook, finish_merge, unapprove_mr};
