//! Simulated GitHub: REST + GraphQL subset, merge queue, async merges, checks, reviews, webhooks.
//!
//! Layout: [`model`] holds the data and its derived state, [`ops`] the state transitions shared by REST, GraphQL and the
//! control API, [`json`] the REST/webhook renderings, [`rest`] / [`graphql`] the HTTP surface,
//! [`events`] the webhook payloads, [`control`] the `/_sim/github/...` routes and `SimHandle`
//! builders. Handlers lock [`GithubState`] briefly, queue webhook deliveries in [`Env::outbox`],
//! and hand them to the shared dispatcher after the lock is released.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use time::OffsetDateTime;

use crate::state::{SimState, lock};

pub mod control;
pub mod error;
pub mod events;
pub mod graphql;
pub mod json;
pub mod model;
pub mod ops;
pub mod rest;
pub mod sign;

pub use control::{GithubRepoSpec, OpenPrSpec, RulesetSpec};
pub use model::{CheckKind, CheckScript, MergeAsyncScript};

use error::ApiError;
use model::{AsyncMerge, GhRepo};

/// A webhook delivery queued while the state lock is held.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

/// Id allocation and the webhook outbox (split from the repositories for borrowing).
#[derive(Debug, Default)]
pub struct Env {
    next_id: u64,
    pub outbox: Vec<Delivery>,
}

impl Env {
    /// A fresh numeric id (unique across the simulated GitHub).
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        // Start well away from small numbers so ids are not confused with PR numbers.
        1_000_000 + self.next_id
    }
}

/// Per-request context: the sim time, the public base URL and the acting user.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub now: OffsetDateTime,
    pub base_url: String,
    pub sender: String,
}

impl Ctx {
    /// A context for the given actor.
    pub fn new(state: &SimState, sender: &str) -> Ctx {
        Ctx {
            now: state.clock.now(),
            base_url: state.base_url(),
            sender: sender.to_string(),
        }
    }
}

/// All GitHub-side simulator state (repositories, pull requests, checks, queues).
#[derive(Default)]
pub struct GithubState {
    /// Repositories by lower-cased `owner/name`.
    pub repos: BTreeMap<String, GhRepo>,
    /// Asynchronous merge requests by uuid.
    pub async_merges: BTreeMap<String, AsyncMerge>,
    pub env: Env,
}

/// The map key of a repository.
pub fn repo_key(owner: &str, name: &str) -> String {
    format!(
        "{}/{}",
        owner.to_ascii_lowercase(),
        name.to_ascii_lowercase()
    )
}

impl GithubState {
    /// A repository and the id/outbox environment, borrowed together.
    pub fn repo_env(&mut self, owner: &str, name: &str) -> Option<(&mut GhRepo, &mut Env)> {
        let repo = self.repos.get_mut(&repo_key(owner, name))?;
        Some((repo, &mut self.env))
    }

    pub fn repo(&self, owner: &str, name: &str) -> Option<&GhRepo> {
        self.repos.get(&repo_key(owner, name))
    }
}

/// Runs `f` with the GitHub state locked, then sends the webhooks it queued (lock released).
pub fn with_github<R>(state: &SimState, f: impl FnOnce(&mut GithubState) -> R) -> R {
    let (result, deliveries) = {
        let mut gh = lock(&state.github);
        let result = f(&mut gh);
        (result, std::mem::take(&mut gh.env.outbox))
    };
    for d in deliveries {
        state.webhooks.send(d.url, d.headers, d.body);
    }
    result
}

/// The authenticated user's login, from `Authorization: Bearer|token <token>`.
pub fn authenticate(state: &SimState, headers: &HeaderMap) -> Result<String, ApiError> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(ApiError::bad_credentials)?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .or_else(|| value.strip_prefix("token "))
        .or_else(|| value.strip_prefix("Token "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(ApiError::bad_credentials)?;
    state
        .user_for_token(token)
        .map(|u| u.username)
        .ok_or_else(ApiError::bad_credentials)
}

/// HTTP routes of the simulated GitHub API (merged at the root by the core router).
pub fn router() -> axum::Router<crate::state::Shared> {
    rest::router()
        .merge(graphql::router())
        .merge(control::router())
}

/// Advances asynchronous GitHub work (mergeability, checks, merge queues, async merges);
/// whether anything moved.
pub fn tick(state: &SimState) -> bool {
    let ctx = Ctx::new(state, "github-merge-queue[bot]");
    with_github(state, |github| ops::tick(github, &ctx))
}
