//! forge-sim's integration tests, one binary: every GitLab and GitHub
//! endpoint, the control API, fault injection and webhooks, over real HTTP.
//! The client, the webhook receiver and the simulator set-ups are
//! `forge_sim::testing`'s.
#![allow(
    clippy::disallowed_methods,
    reason = "tests compare sim time with the wall clock"
)]

use forge_sim::SimHandle;
use forge_sim::github::GithubRepoSpec;

/// The repository the GitHub cases work in.
const REPO: &str = "octo/app";

/// Creates a GitHub repository through the handle.
fn create_repo(sim: &SimHandle, spec: GithubRepoSpec) {
    sim.github_create_repo(spec).expect("repo created");
}

mod conditional;
mod github_actions;
mod github_control;
mod github_graphql_writes;
mod github_merge;
mod github_rest;
mod github_webhooks;
mod gitlab_api;
mod ownership;
mod paging;
mod ratelimit;
mod sim_control;
