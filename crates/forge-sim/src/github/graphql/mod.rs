//! `POST /graphql`: a pragmatic resolver for the pull-request / merge-queue subset of GitHub's schema,
//! plus the git objects a client reads a branch head and its paths with (`Repository.ref`,
//! `Repository.object`, `Commit.tree`, `Commit.file`).
//!
//! Queries may batch pull requests by alias, use variables and fragments; unknown fields are
//! reported like GitHub does (HTTP 200 with an `errors` array and no `data`). Mutations:
//! `enqueuePullRequest` and `dequeuePullRequest`.
//!
//! [`parser`] turns a request's document into operations and selection sets; [`resolve`] walks
//! them against the state.

pub mod parser;
pub mod resolve;

pub use resolve::{execute, router};
