//! State transitions shared by REST, GraphQL, the control API and the ticker.
//!
//! Pull requests follow their head branch: every branch move goes through [`set_branch`], which
//! synchronizes open pull requests (new head, mergeability recomputed on the next tick, scripted
//! checks started, queue entry dropped) and invalidates the mergeability of pull requests based
//! on the branch. [`tick`] advances checks, merge queues and asynchronous merges.

pub mod actions;
mod async_merge;
mod checks;
mod commits;
mod issues;
mod merge_groups;
mod pulls;
mod queue;
mod repos;
mod tick;

pub use async_merge::{is_expired, run_async};
pub use checks::{rerequest, start_checks};
pub use commits::{CommitOnBranch, commit_on_branch};
pub use issues::{add_comment, add_labels};
pub use pulls::{close_pr, merge_message, merge_pr, open_pr, reopen_pr, set_branch};
pub use queue::{dequeue, enqueue};
pub use repos::{create_repo, parse_merge_method};
pub use tick::tick;
