//! Repository creation and settings parsing.

use crate::github::model::{GhRepo, RepoSettings, node_id};
use crate::github::{Ctx, GithubState, repo_key};
use crate::repo::{MergeMethod, Repo};

/// Parses `merge` / `squash` / `rebase`.
pub fn parse_merge_method(s: &str) -> Option<MergeMethod> {
    match s {
        "merge" => Some(MergeMethod::Merge),
        "squash" => Some(MergeMethod::Squash),
        "rebase" => Some(MergeMethod::Rebase),
        _ => None,
    }
}

/// Creates a repository; `Err` when it already exists.
pub fn create_repo(
    gh: &mut GithubState,
    ctx: &Ctx,
    owner: &str,
    name: &str,
    default_branch: &str,
    settings: RepoSettings,
) -> Result<(), String> {
    let key = repo_key(owner, name);
    if gh.repos.contains_key(&key) {
        return Err(format!("repository {owner}/{name} already exists"));
    }
    let id = gh.env.next_id();
    let repo = GhRepo {
        id,
        node_id: node_id("R", &id.to_string()),
        owner: owner.to_string(),
        name: name.to_string(),
        git: Repo::new(default_branch, ctx.now),
        blobs: Default::default(),
        trees: Default::default(),
        settings,
        pulls: Default::default(),
        labels: Default::default(),
        next_number: 1,
        comments: Vec::new(),
        check_script: Vec::new(),
        check_runs: Vec::new(),
        check_suites: Vec::new(),
        statuses: Vec::new(),
        queue: Vec::new(),
        queue_locked: false,
        queue_failures: Default::default(),
        merge_async: Default::default(),
        actions: Default::default(),
        created_at: ctx.now,
    };
    gh.repos.insert(key, repo);
    Ok(())
}
