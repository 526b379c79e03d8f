//! GitHub control API: `/_sim/github/...` routes and the matching `SimHandle` builder methods.
//!
//! Control routes are unauthenticated; errors are `{"error": "..."}` like the core control API.
//! Every route and builder method on one repository goes through a [`ControlRepo`], which
//! answers 404 `repository owner/name not found` when there is none.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::model::{
    CheckScript, GhRepo, MergeAsyncScript, RepoSettings, ReviewThread, Ruleset, Webhook,
};
use super::rest::BranchSegment;
use super::{Ctx, Env, json as render, model, ops, repo_key, with_github};
use crate::ci::JobSpec;
use crate::control::{ControlError, PushSpec};
use crate::repo::FileEntry;
use crate::state::{Shared, SimState, lock};

type ControlResult = Result<Response, ControlError>;

/// A repository as the control API creates or updates it (all optional on update).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GithubRepoSpec {
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub merge_queue: Option<bool>,
    #[serde(default)]
    pub dismiss_stale_reviews: Option<bool>,
    #[serde(default)]
    pub required_approvals: Option<u32>,
    #[serde(default)]
    pub required_checks: Option<Vec<String>>,
    #[serde(default)]
    pub require_conversation_resolution: Option<bool>,
    /// `Some(None)` (JSON `null`) reports `estimatedTimeToMerge: null`.
    #[serde(default, deserialize_with = "some_null")]
    pub queue_eta_seconds_per_entry: Option<Option<u64>>,
    #[serde(default)]
    pub queue_merge_method: Option<String>,
    #[serde(default)]
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub webhook_secret: Option<String>,
    /// Scripted checks (shared CI job JSON plus `kind`).
    #[serde(default)]
    pub checks: Option<Vec<Value>>,
    /// Users with no access to the repository (`authorAssociation: NONE`).
    #[serde(default)]
    pub outside_users: Option<Vec<String>>,
    /// The most entries a recursive `GET git/trees/{sha}?recursive=1` lists before answering
    /// `"truncated": true`; `Some(None)` (JSON `null`) restores GitHub's 100,000.
    #[serde(default, deserialize_with = "some_null")]
    pub tree_listing_limit: Option<Option<usize>>,
}

/// Reads a present field, `null` included, as `Some(value)` (an absent one stays `None`).
fn some_null<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::deserialize(deserializer)?))
}

impl GithubRepoSpec {
    /// A spec for `owner/name` with defaults.
    pub fn new(owner: &str, name: &str) -> GithubRepoSpec {
        GithubRepoSpec {
            owner: owner.to_string(),
            name: name.to_string(),
            ..GithubRepoSpec::default()
        }
    }

    pub fn merge_queue(mut self, on: bool) -> GithubRepoSpec {
        self.merge_queue = Some(on);
        self
    }

    pub fn webhook(mut self, url: &str, secret: &str) -> GithubRepoSpec {
        self.webhook_url = Some(url.to_string());
        self.webhook_secret = Some(secret.to_string());
        self
    }

    pub fn required_approvals(mut self, count: u32) -> GithubRepoSpec {
        self.required_approvals = Some(count);
        self
    }

    pub fn required_checks(mut self, names: &[&str]) -> GithubRepoSpec {
        self.required_checks = Some(names.iter().map(|name| name.to_string()).collect());
        self
    }

    /// Users with no access to the repository: their reviews carry `authorAssociation: NONE`.
    pub fn outside_users(mut self, users: &[&str]) -> GithubRepoSpec {
        self.outside_users = Some(users.iter().map(|u| (*u).to_owned()).collect());
        self
    }

    pub fn dismiss_stale_reviews(mut self, on: bool) -> GithubRepoSpec {
        self.dismiss_stale_reviews = Some(on);
        self
    }

    pub fn checks(mut self, checks: &[CheckScript]) -> GithubRepoSpec {
        self.checks = Some(checks.iter().map(CheckScript::to_json).collect());
        self
    }

    /// Truncates recursive tree listings after `limit` entries (`"truncated": true`), as GitHub
    /// does after 100,000.
    pub fn tree_listing_limit(mut self, limit: usize) -> GithubRepoSpec {
        self.tree_listing_limit = Some(Some(limit));
        self
    }
}

fn parse_checks(list: &[Value]) -> Result<Vec<CheckScript>, ControlError> {
    list.iter()
        .map(|check| {
            CheckScript::from_json(check)
                .map_err(|error| ControlError::Invalid(format!("invalid check: {error}")))
        })
        .collect()
}

fn apply_spec(settings: &mut RepoSettings, spec: &GithubRepoSpec) -> Result<(), ControlError> {
    if let Some(merge_queue) = spec.merge_queue {
        settings.merge_queue = merge_queue;
    }
    if let Some(dismiss) = spec.dismiss_stale_reviews {
        settings.dismiss_stale_reviews = dismiss;
    }
    if let Some(approvals) = spec.required_approvals {
        settings.required_approvals = approvals;
    }
    if let Some(checks) = &spec.required_checks {
        settings.required_checks = checks.clone();
    }
    if let Some(users) = &spec.outside_users {
        settings.outside_users = users.clone();
    }
    if let Some(required) = spec.require_conversation_resolution {
        settings.require_conversation_resolution = required;
    }
    if let Some(eta) = spec.queue_eta_seconds_per_entry {
        settings.queue_eta_seconds_per_entry = eta;
    }
    if let Some(limit) = spec.tree_listing_limit {
        settings.tree_listing_limit = limit;
    }
    if let Some(method) = &spec.queue_merge_method {
        if ops::parse_merge_method(method).is_none() {
            return Err(ControlError::Invalid(format!(
                "queue_merge_method {method:?} (merge, squash, rebase)"
            )));
        }
        settings.queue_merge_method = method.clone();
    }
    match (&spec.webhook_url, &spec.webhook_secret) {
        (Some(url), secret) if !url.is_empty() => {
            settings.webhook = Some(Webhook {
                url: url.clone(),
                secret: secret.clone().unwrap_or_default(),
            });
        }
        (Some(_), _) => settings.webhook = None,
        (None, Some(secret)) => {
            if let Some(hook) = &mut settings.webhook {
                hook.secret = secret.clone();
            }
        }
        (None, None) => {}
    }
    Ok(())
}

fn control_ctx(state: &SimState, user: &str) -> Ctx {
    lock(&state.users).ensure(user);
    Ctx::new(state, user)
}

/// Creates a repository.
pub fn create_repo(state: &SimState, spec: &GithubRepoSpec) -> Result<(), ControlError> {
    if spec.owner.is_empty() || spec.name.is_empty() {
        return Err(ControlError::Invalid("owner and name are required".into()));
    }
    let mut settings = RepoSettings::default();
    apply_spec(&mut settings, spec)?;
    let checks = parse_checks(spec.checks.as_deref().unwrap_or_default())?;
    let ctx = control_ctx(state, &spec.owner);
    let branch = spec.default_branch.clone().unwrap_or_else(|| "main".into());
    with_github(state, |github| {
        ops::create_repo(github, &ctx, &spec.owner, &spec.name, &branch, settings)
            .map_err(ControlError::Invalid)?;
        if let Some(repo) = github.repos.get_mut(&repo_key(&spec.owner, &spec.name)) {
            repo.check_script = checks;
        }
        Ok(())
    })
}

/// The repository a control call names: `{owner}/{repo}` of a route, or the `owner/name` a
/// `SimHandle` method takes. Each operation looks it up under the state lock.
pub struct ControlRepo {
    state: Shared,
    owner: String,
    name: String,
}

/// The `{owner}/{repo}` of a control route.
#[derive(Deserialize)]
struct RepoSegments {
    owner: String,
    repo: String,
}

impl FromRequestParts<Shared> for ControlRepo {
    type Rejection = PathRejection;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, PathRejection> {
        let Path(segments) = Path::<RepoSegments>::from_request_parts(parts, state).await?;
        Ok(ControlRepo::new(state, &segments.owner, &segments.repo))
    }
}

impl ControlRepo {
    pub fn new(state: &Shared, owner: &str, name: &str) -> ControlRepo {
        ControlRepo {
            state: state.clone(),
            owner: owner.to_string(),
            name: name.to_string(),
        }
    }

    /// The repository `owner/name` (one slash, neither part empty).
    pub fn parse(state: &Shared, full_name: &str) -> anyhow::Result<ControlRepo> {
        let (owner, name) = full_name
            .split_once('/')
            .filter(|(owner, name)| !owner.is_empty() && !name.is_empty() && !name.contains('/'))
            .ok_or_else(|| anyhow::anyhow!("expected owner/name, got {full_name:?}"))?;
        Ok(ControlRepo::new(state, owner, name))
    }

    fn not_found(&self) -> ControlError {
        ControlError::NotFound(format!("repository {}/{} not found", self.owner, self.name))
    }

    /// Runs `f` on the repository (404 when there is none), sending queued webhooks afterwards.
    fn with_repo<R>(
        &self,
        f: impl FnOnce(&mut GhRepo, &mut Env) -> Result<R, ControlError>,
    ) -> Result<R, ControlError> {
        with_github(&self.state, |github| {
            let (repo, env) = github
                .repo_env(&self.owner, &self.name)
                .ok_or_else(|| self.not_found())?;
            f(repo, env)
        })
    }

    /// Reads the repository without sending anything; `None` when there is none.
    fn read<R>(&self, f: impl FnOnce(&GhRepo) -> Option<R>) -> Option<R> {
        let github = lock(&self.state.github);
        f(github.repo(&self.owner, &self.name)?)
    }

    /// Updates repository settings (fields left out are unchanged).
    pub fn update(&self, spec: &GithubRepoSpec) -> Result<(), ControlError> {
        let checks = spec.checks.as_deref().map(parse_checks).transpose()?;
        self.with_repo(|repo, _| {
            apply_spec(&mut repo.settings, spec)?;
            if let Some(checks) = checks {
                repo.check_script = checks;
            }
            Ok(())
        })
    }

    /// Replaces the scripted checks (started for every new head from now on).
    pub fn set_checks(&self, checks: Vec<CheckScript>) -> Result<(), ControlError> {
        self.with_repo(|repo, _| {
            repo.check_script = checks;
            Ok(())
        })
    }

    /// Replaces the scripted GitHub Actions workflow (a run of it starts for every new head
    /// from now on); no jobs turns it off.
    pub fn set_workflow(&self, name: &str, jobs: Vec<JobSpec>) -> Result<(), ControlError> {
        let workflow = (!jobs.is_empty()).then(|| super::model::actions::Workflow {
            name: name.to_string(),
            jobs,
        });
        self.with_repo(|repo, _| {
            repo.actions.workflow = workflow;
            Ok(())
        })
    }

    /// Every workflow job of the repository (all runs and attempts) as the REST API renders
    /// them, oldest first.
    pub fn workflow_jobs(&self) -> Vec<Value> {
        let ctx = control_ctx(&self.state, "sim");
        self.read(|repo| {
            Some(
                repo.actions
                    .jobs
                    .iter()
                    .map(|job| render::actions::job_json(&ctx, repo, job))
                    .collect(),
            )
        })
        .unwrap_or_default()
    }

    /// Submits a review as `user` (`APPROVE`, `REQUEST_CHANGES`, `COMMENT`).
    pub fn review(
        &self,
        number: u64,
        user: &str,
        event: &str,
        body: Option<String>,
    ) -> Result<u64, ControlError> {
        let ctx = control_ctx(&self.state, user);
        self.with_repo(|repo, env| {
            let body = body.or_else(|| (event != "APPROVE").then(|| format!("{event} by {user}")));
            super::rest::pulls::submit_review(repo, env, &ctx, number, Some(event), body, None)
                .map_err(api_to_control)
        })
    }

    /// Sets the pull request's review threads: `unresolved` open ones and `resolved` closed
    /// ones.
    pub fn set_threads(
        &self,
        number: u64,
        unresolved: u32,
        resolved: u32,
    ) -> Result<(), ControlError> {
        self.with_repo(|repo, env| {
            let pr = repo
                .pulls
                .get_mut(&number)
                .ok_or_else(|| pull_not_found(number))?;
            pr.threads.clear();
            for index in 0..(unresolved + resolved) {
                let id = env.next_id();
                pr.threads.push(ReviewThread {
                    id: model::node_id("PRRT", &id.to_string()),
                    path: format!("src/file{index}.rs"),
                    line: index + 1,
                    is_resolved: index >= unresolved,
                });
            }
            Ok(())
        })
    }

    /// Commits files onto a branch as a human would (creating the branch if needed); returns
    /// the sha.
    pub fn push(&self, spec: &PushSpec) -> Result<String, ControlError> {
        let author = spec.author.clone().unwrap_or_else(|| "human".into());
        let ctx = control_ctx(&self.state, &author);
        self.with_repo(|repo, env| {
            let start = match repo.git.branch_head(&spec.branch) {
                Some(head) => head.to_string(),
                None => {
                    let from = spec
                        .start_branch
                        .clone()
                        .unwrap_or_else(|| repo.git.default_branch().to_string());
                    repo.git
                        .branch_head(&from)
                        .ok_or_else(|| ControlError::NotFound(format!("branch {from} not found")))?
                        .to_string()
                }
            };
            let parent = repo
                .git
                .commit(&start)
                .ok_or_else(|| ControlError::NotFound("start commit".into()))?;
            let mut tree = (*parent.tree).clone();
            for (path, content) in &spec.files {
                match content {
                    Some(text) => {
                        tree.insert(path.clone(), FileEntry::new(text.clone().into_bytes()));
                    }
                    None => {
                        tree.remove(path);
                    }
                }
            }
            let message = spec
                .message
                .clone()
                .unwrap_or_else(|| "Human commit".into());
            let sha = repo.git.create_commit(
                vec![start],
                Arc::new(tree),
                &message,
                &author,
                &format!("{author}@example.com"),
                ctx.now,
            );
            ops::set_branch(repo, env, &ctx, &spec.branch, Some(&sha));
            Ok(sha)
        })
    }

    /// Moves a branch to any existing commit (force), e.g. to move the base under a queue.
    pub fn move_branch(&self, branch: &str, sha: &str) -> Result<(), ControlError> {
        let ctx = control_ctx(&self.state, "human");
        self.with_repo(|repo, env| {
            if repo.git.commit(sha).is_none() {
                return Err(ControlError::NotFound(format!("commit {sha} not found")));
            }
            ops::set_branch(repo, env, &ctx, branch, Some(sha));
            Ok(())
        })
    }

    /// Scripts `merge-async`: pending ticks, a one-shot failure, result retention.
    pub fn script_merge_async(&self, script: MergeAsyncScript) -> Result<(), ControlError> {
        self.with_repo(|repo, _| {
            repo.merge_async = script;
            Ok(())
        })
    }

    /// Makes the next `merge-async` request fail with `message` once it runs.
    pub fn fail_next_merge_async(&self, message: &str) -> Result<(), ControlError> {
        self.with_repo(|repo, _| {
            repo.merge_async.fail_next = Some(message.to_string());
            Ok(())
        })
    }

    /// Makes the pull request's (current or next) queue entry fail with `message`.
    pub fn script_queue_failure(&self, number: u64, message: &str) -> Result<(), ControlError> {
        self.with_repo(|repo, _| {
            match repo.queue.iter_mut().find(|entry| entry.pr == number) {
                Some(entry) => entry.scripted_failure = Some(message.to_string()),
                None => {
                    repo.queue_failures.insert(number, message.to_string());
                }
            }
            Ok(())
        })
    }

    /// Locks (pauses) or unlocks the merge queue.
    pub fn lock_queue(&self, locked: bool) -> Result<(), ControlError> {
        self.with_repo(|repo, _| {
            repo.queue_locked = locked;
            Ok(())
        })
    }

    /// Marks a pull request as draft or ready for review.
    pub fn set_draft(&self, number: u64, draft: bool) -> Result<(), ControlError> {
        let ctx = control_ctx(&self.state, "human");
        self.with_repo(|repo, env| {
            let pr = repo
                .pulls
                .get_mut(&number)
                .ok_or_else(|| pull_not_found(number))?;
            if pr.draft == draft {
                return Ok(());
            }
            pr.draft = draft;
            pr.updated_at = ctx.now;
            let action = if draft {
                "converted_to_draft"
            } else {
                "ready_for_review"
            };
            if let Some(pr) = repo.pulls.get(&number) {
                super::events::pull_request(env, &ctx, repo, pr, action, json!({}));
            }
            Ok(())
        })
    }

    /// Puts a branch name or fnmatch pattern under classic branch protection (idempotent).
    pub fn protect_branch(&self, pattern: &str) -> Result<(), ControlError> {
        if pattern.is_empty() {
            return Err(ControlError::Invalid("branch is required".into()));
        }
        self.with_repo(|repo, _| {
            if !repo
                .settings
                .protected_branches
                .iter()
                .any(|existing| existing == pattern)
            {
                repo.settings.protected_branches.push(pattern.to_string());
            }
            Ok(())
        })
    }

    /// Adds a branch ruleset; returns its id.
    pub fn add_ruleset(&self, spec: &RulesetSpec) -> Result<u64, ControlError> {
        let enforcement = spec.enforcement.clone().unwrap_or_else(|| "active".into());
        if !matches!(enforcement.as_str(), "active" | "evaluate" | "disabled") {
            return Err(ControlError::Invalid(format!(
                "enforcement {enforcement:?} (active, evaluate, disabled)"
            )));
        }
        if spec.include.is_empty() {
            return Err(ControlError::Invalid("include is required".into()));
        }
        with_github(&self.state, |github| {
            // The id counter sits beside the repositories: take an id before borrowing one.
            let id = github.env.next_id();
            let repo = github
                .repos
                .get_mut(&repo_key(&self.owner, &self.name))
                .ok_or_else(|| self.not_found())?;
            repo.settings.rulesets.push(Ruleset {
                id,
                name: spec.name.clone(),
                enforcement,
                include: spec.include.clone(),
                exclude: spec.exclude.clone(),
                rules: spec.rules.clone(),
            });
            Ok(id)
        })
    }

    /// Opens a pull request as `spec.author` (REST validation, webhooks, checks); returns its
    /// number.
    pub fn open_pr(&self, spec: &OpenPrSpec) -> Result<u64, ControlError> {
        let author = spec.author.clone().unwrap_or_else(|| "human".into());
        let ctx = control_ctx(&self.state, &author);
        self.with_repo(|repo, env| {
            ops::open_pr(
                repo,
                env,
                &ctx,
                &spec.title,
                &spec.head,
                &spec.base,
                spec.body.clone(),
                spec.draft,
            )
            .map_err(|error| {
                let message = error.body["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if error.status == StatusCode::NOT_FOUND {
                    ControlError::NotFound(message)
                } else {
                    ControlError::Invalid(format!("{message}: {}", error.body))
                }
            })
        })
    }

    /// A pull request as `GET /repos/{owner}/{repo}/pulls/{number}` renders it.
    fn pull(&self, number: u64) -> Result<Value, ControlError> {
        let ctx = Ctx::new(&self.state, "control");
        let github = lock(&self.state.github);
        let repo = github
            .repo(&self.owner, &self.name)
            .ok_or_else(|| self.not_found())?;
        let pr = repo
            .pulls
            .get(&number)
            .ok_or_else(|| pull_not_found(number))?;
        Ok(render::pull(&ctx, repo, pr))
    }

    /// A summary of the repository's state: branches, pull requests, queue, async merges.
    pub fn summary(&self) -> Result<Value, ControlError> {
        let ctx = Ctx::new(&self.state, "control");
        let key = repo_key(&self.owner, &self.name);
        with_github(&self.state, |github| {
            let repo = github.repos.get(&key).ok_or_else(|| self.not_found())?;
            let branches: BTreeMap<&String, &String> = repo.git.branches().collect();
            let pulls: Vec<Value> = repo
                .pulls
                .values()
                .map(|pr| render::pull(&ctx, repo, pr))
                .collect();
            let queue: Vec<Value> = repo
                .queue
                .iter()
                .enumerate()
                .map(|(index, entry)| {
                    json!({
                        "id": entry.id,
                        "pull_number": entry.pr,
                        "position": index + 1,
                        "state": entry.state.as_graphql(),
                        "base_ref": entry.base_ref,
                        "head_sha": entry.head_sha,
                        "merge_group": entry.group.as_ref().map(|group| json!({ "head_ref": group.head_ref, "head_sha": group.head_sha, "base_sha": group.base_sha })),
                        "failure": entry.failure,
                    })
                })
                .collect();
            let merges: Vec<Value> = github
                .async_merges
                .values()
                .filter(|merge| merge.repo == key)
                .map(|merge| {
                    let mut rendered = super::rest::pulls::async_body(merge);
                    rendered["uuid"] = json!(merge.uuid);
                    rendered["pull_number"] = json!(merge.pr);
                    rendered
                })
                .collect();
            let mut summary = render::repo(&ctx, repo);
            summary["branches"] = json!(branches);
            summary["settings"] = json!(repo.settings);
            summary["checks"] =
                Value::Array(repo.check_script.iter().map(CheckScript::to_json).collect());
            summary["pulls"] = Value::Array(pulls);
            summary["queue"] = Value::Array(queue);
            summary["queue_locked"] = json!(repo.queue_locked);
            summary["merge_async"] = json!(repo.merge_async);
            summary["async_merges"] = Value::Array(merges);
            Ok(summary)
        })
    }
}

fn pull_not_found(number: u64) -> ControlError {
    ControlError::NotFound(format!("pull request #{number} not found"))
}

fn api_to_control(error: super::error::ApiError) -> ControlError {
    let mut message = error.body["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(errors) = error.body.get("errors") {
        message = format!("{message}: {errors}");
    }
    if error.status == StatusCode::NOT_FOUND {
        ControlError::NotFound(message)
    } else {
        ControlError::Invalid(message)
    }
}

/// A branch ruleset as the control API takes it (`enforcement` defaults to `active`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RulesetSpec {
    pub name: String,
    #[serde(default)]
    pub enforcement: Option<String>,
    /// `refs/heads/<fnmatch>`, `~DEFAULT_BRANCH` or `~ALL`.
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Rule types (`update`, `deletion`, `non_fast_forward`, `pull_request`, ...).
    pub rules: Vec<String>,
}

/// A pull request opened by a person (not the token's user).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpenPrSpec {
    pub head: String,
    pub base: String,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub draft: bool,
    /// Login of the author (created if unknown); default `human`.
    #[serde(default)]
    pub author: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// HTTP routes

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/_sim/github/repos", post(create_route))
        .route(
            "/_sim/github/repos/{owner}/{repo}",
            axum::routing::get(summary_route).patch(update_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/checks",
            put(checks_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/actions",
            put(workflow_route).get(workflow_jobs_route),
        )
        .route("/_sim/github/repos/{owner}/{repo}/push", post(push_route))
        .route(
            "/_sim/github/repos/{owner}/{repo}/branches/{*branch}",
            put(move_branch_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/merge_async",
            put(merge_async_route),
        )
        .route("/_sim/github/repos/{owner}/{repo}/queue", put(queue_route))
        .route(
            "/_sim/github/repos/{owner}/{repo}/pulls/{number}/reviews",
            post(review_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/pulls/{number}/threads",
            put(threads_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/pulls/{number}/queue_failure",
            post(queue_failure_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/pulls/{number}/draft",
            put(draft_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/protected_branches",
            post(protect_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/rulesets",
            post(ruleset_route),
        )
        .route(
            "/_sim/github/repos/{owner}/{repo}/pulls",
            post(open_pr_route),
        )
}

/// `{number}` of a control route, parsed after the body so that a bad body is reported first.
#[derive(Deserialize)]
struct PullSegment {
    number: String,
}

impl PullSegment {
    fn number(&self) -> Result<u64, ControlError> {
        self.number.parse().map_err(|_| {
            ControlError::Invalid(format!("invalid pull request number {:?}", self.number))
        })
    }
}

fn parse_body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, ControlError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|error| ControlError::Invalid(format!("invalid JSON body: {error}")))
}

fn ok() -> Response {
    Json(json!({ "ok": true })).into_response()
}

async fn create_route(State(state): State<Shared>, body: Bytes) -> ControlResult {
    let spec: GithubRepoSpec = parse_body(&body)?;
    create_repo(&state, &spec)?;
    let repo = ControlRepo::new(&state, &spec.owner, &spec.name);
    Ok((StatusCode::CREATED, Json(repo.summary()?)).into_response())
}

async fn summary_route(repo: ControlRepo) -> ControlResult {
    Ok(Json(repo.summary()?).into_response())
}

async fn update_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let spec: GithubRepoSpec = parse_body(&body)?;
    repo.update(&spec)?;
    Ok(Json(repo.summary()?).into_response())
}

async fn checks_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let request: Value = parse_body(&body)?;
    let list = match &request {
        Value::Array(items) => items.clone(),
        Value::Object(fields) => fields
            .get("checks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => return Err(ControlError::Invalid("expected a list of checks".into())),
    };
    repo.set_checks(parse_checks(&list)?)?;
    Ok(ok())
}

/// `{"workflow": "CI", "jobs": [<CI job JSON>, ...]}`: the Actions workflow every new head
/// runs.
#[derive(Deserialize)]
struct WorkflowBody {
    #[serde(default = "default_workflow_name")]
    workflow: String,
    #[serde(default)]
    jobs: Vec<JobSpec>,
}

fn default_workflow_name() -> String {
    "CI".to_string()
}

async fn workflow_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let request: WorkflowBody = parse_body(&body)?;
    repo.set_workflow(&request.workflow, request.jobs)?;
    Ok(ok())
}

async fn workflow_jobs_route(repo: ControlRepo) -> ControlResult {
    repo.read(|_| Some(())).ok_or_else(|| repo.not_found())?;
    Ok(Json(json!({ "jobs": repo.workflow_jobs() })).into_response())
}

async fn push_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let spec: PushSpec = parse_body(&body)?;
    let sha = repo.push(&spec)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "sha": sha, "branch": spec.branch })),
    )
        .into_response())
}

#[derive(Deserialize)]
struct MoveBody {
    sha: String,
}

async fn move_branch_route(
    repo: ControlRepo,
    Path(BranchSegment { branch }): Path<BranchSegment>,
    body: Bytes,
) -> ControlResult {
    let request: MoveBody = parse_body(&body)?;
    repo.move_branch(&branch, &request.sha)?;
    Ok(ok())
}

async fn merge_async_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let script: MergeAsyncScript = parse_body(&body)?;
    repo.script_merge_async(script)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct QueueBody {
    locked: bool,
}

async fn queue_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let request: QueueBody = parse_body(&body)?;
    repo.lock_queue(request.locked)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct ReviewBody {
    user: String,
    /// APPROVE (default) | REQUEST_CHANGES | COMMENT
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    body: Option<String>,
}

async fn review_route(
    repo: ControlRepo,
    Path(pull): Path<PullSegment>,
    body: Bytes,
) -> ControlResult {
    let request: ReviewBody = parse_body(&body)?;
    let event = request.event.unwrap_or_else(|| "APPROVE".into());
    let id = repo.review(pull.number()?, &request.user, &event, request.body)?;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

#[derive(Deserialize)]
struct ThreadsBody {
    unresolved: u32,
    #[serde(default)]
    resolved: u32,
}

async fn threads_route(
    repo: ControlRepo,
    Path(pull): Path<PullSegment>,
    body: Bytes,
) -> ControlResult {
    let request: ThreadsBody = parse_body(&body)?;
    repo.set_threads(pull.number()?, request.unresolved, request.resolved)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct FailureBody {
    #[serde(default)]
    message: Option<String>,
}

async fn queue_failure_route(
    repo: ControlRepo,
    Path(pull): Path<PullSegment>,
    body: Bytes,
) -> ControlResult {
    let request: FailureBody = parse_body(&body)?;
    let message = request
        .message
        .unwrap_or_else(|| "Scripted merge queue failure".into());
    repo.script_queue_failure(pull.number()?, &message)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct DraftBody {
    draft: bool,
}

async fn draft_route(
    repo: ControlRepo,
    Path(pull): Path<PullSegment>,
    body: Bytes,
) -> ControlResult {
    let request: DraftBody = parse_body(&body)?;
    repo.set_draft(pull.number()?, request.draft)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct ProtectBody {
    branch: String,
}

async fn protect_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let request: ProtectBody = parse_body(&body)?;
    repo.protect_branch(&request.branch)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "branch": request.branch })),
    )
        .into_response())
}

async fn ruleset_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let spec: RulesetSpec = parse_body(&body)?;
    let id = repo.add_ruleset(&spec)?;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

async fn open_pr_route(repo: ControlRepo, body: Bytes) -> ControlResult {
    let spec: OpenPrSpec = parse_body(&body)?;
    let number = repo.open_pr(&spec)?;
    Ok((StatusCode::CREATED, Json(repo.pull(number)?)).into_response())
}

// ---------------------------------------------------------------------------------------------
// SimHandle builders

/// The files of a human push as [`PushSpec`] takes them.
fn push_files(files: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    files
        .iter()
        .map(|(path, content)| (path.to_string(), content.map(str::to_string)))
        .collect()
}

/// GitHub builder methods of the test handle; `repo` is always `owner/name`.
impl crate::SimHandle {
    fn github_repo(&self, repo: &str) -> anyhow::Result<ControlRepo> {
        ControlRepo::parse(self.state(), repo)
    }

    /// Creates a GitHub repository (default branch `main` holding a README unless the spec says otherwise).
    pub fn github_create_repo(&self, spec: GithubRepoSpec) -> anyhow::Result<()> {
        Ok(create_repo(self.state(), &spec)?)
    }

    /// Updates repository settings (only the `Some` fields of `spec`; owner/name are ignored).
    pub fn github_update_repo(&self, repo: &str, spec: GithubRepoSpec) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.update(&spec)?)
    }

    /// Turns the default branch's merge queue on or off.
    pub fn github_enable_merge_queue(&self, repo: &str, enabled: bool) -> anyhow::Result<()> {
        self.github_update_repo(
            repo,
            GithubRepoSpec {
                merge_queue: Some(enabled),
                ..GithubRepoSpec::default()
            },
        )
    }

    /// Points the repository's webhook at `url`, signed with `secret`.
    pub fn github_set_webhook(&self, repo: &str, url: &str, secret: &str) -> anyhow::Result<()> {
        self.github_update_repo(repo, GithubRepoSpec::default().webhook(url, secret))
    }

    /// Replaces the scripted checks started for every new pull-request head and merge group.
    pub fn github_script_checks(&self, repo: &str, checks: Vec<CheckScript>) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.set_checks(checks)?)
    }

    /// Scripts the GitHub Actions workflow `name` run for every new pull-request head: one
    /// job per spec (`JobOutcome::flaky` fails its first runs per commit; a `reason` of
    /// `timed_out` or `cancelled` is the failing job's conclusion, any other `failure`).
    pub fn github_script_workflow(
        &self,
        repo: &str,
        name: &str,
        jobs: Vec<JobSpec>,
    ) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.set_workflow(name, jobs)?)
    }

    /// Every workflow job of the repository (all runs and attempts) as the REST API renders
    /// them, oldest first.
    pub fn github_workflow_jobs(&self, repo: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self.github_repo(repo)?.workflow_jobs())
    }

    /// Approves a pull request as `user` (created if unknown).
    pub fn github_approve(&self, repo: &str, number: u64, user: &str) -> anyhow::Result<u64> {
        Ok(self
            .github_repo(repo)?
            .review(number, user, "APPROVE", None)?)
    }

    /// Requests changes on a pull request as `user`.
    pub fn github_request_changes(
        &self,
        repo: &str,
        number: u64,
        user: &str,
        body: &str,
    ) -> anyhow::Result<u64> {
        Ok(self.github_repo(repo)?.review(
            number,
            user,
            "REQUEST_CHANGES",
            Some(body.to_string()),
        )?)
    }

    /// Replaces the pull request's review threads with `unresolved` open ones.
    pub fn github_set_unresolved_threads(
        &self,
        repo: &str,
        number: u64,
        unresolved: u32,
    ) -> anyhow::Result<()> {
        self.github_set_threads(repo, number, unresolved, 0)
    }

    /// Replaces the pull request's review threads with `unresolved` open and `resolved`
    /// closed ones.
    pub fn github_set_threads(
        &self,
        repo: &str,
        number: u64,
        unresolved: u32,
        resolved: u32,
    ) -> anyhow::Result<()> {
        Ok(self
            .github_repo(repo)?
            .set_threads(number, unresolved, resolved)?)
    }

    /// Pushes a human commit onto `branch` (`None` content deletes a file; a new branch starts
    /// from the default branch). Pushing to a PR head synchronizes it; pushing to the base
    /// moves the base.
    pub fn github_push_human_commit(
        &self,
        repo: &str,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
    ) -> anyhow::Result<String> {
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: push_files(files),
            message: Some(message.to_string()),
            author: None,
        };
        Ok(self.github_repo(repo)?.push(&spec)?)
    }

    /// Like [`crate::SimHandle::github_push_human_commit`], pushed by `author` (a person, not
    /// the token's user).
    pub fn github_push_as(
        &self,
        repo: &str,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
        author: &str,
    ) -> anyhow::Result<String> {
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: push_files(files),
            message: Some(message.to_string()),
            author: Some(author.to_string()),
        };
        Ok(self.github_repo(repo)?.push(&spec)?)
    }

    /// Opens a pull request from `head` into `base` as `author` (a person, not the token's
    /// user); returns its number.
    pub fn github_open_pr_as(
        &self,
        repo: &str,
        head: &str,
        base: &str,
        title: &str,
        author: &str,
    ) -> anyhow::Result<u64> {
        let spec = OpenPrSpec {
            head: head.to_string(),
            base: base.to_string(),
            title: title.to_string(),
            author: Some(author.to_string()),
            ..OpenPrSpec::default()
        };
        Ok(self.github_repo(repo)?.open_pr(&spec)?)
    }

    /// Puts a branch name or fnmatch pattern under classic branch protection.
    pub fn github_protect_branch(&self, repo: &str, branch: &str) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.protect_branch(branch)?)
    }

    /// Adds an active branch ruleset with the given rule types for `include`
    /// (`refs/heads/<fnmatch>`, `~DEFAULT_BRANCH`, `~ALL`); returns its id.
    pub fn github_add_ruleset(
        &self,
        repo: &str,
        include: &[&str],
        rules: &[&str],
    ) -> anyhow::Result<u64> {
        let spec = RulesetSpec {
            name: "ruleset".into(),
            enforcement: None,
            include: include.iter().map(|pattern| pattern.to_string()).collect(),
            exclude: Vec::new(),
            rules: rules.iter().map(|rule| rule.to_string()).collect(),
        };
        self.github_add_ruleset_spec(repo, &spec)
    }

    /// Adds a branch ruleset as `spec` has it (an enforcement other than
    /// `active`, exclusions); returns its id.
    pub fn github_add_ruleset_spec(&self, repo: &str, spec: &RulesetSpec) -> anyhow::Result<u64> {
        Ok(self.github_repo(repo)?.add_ruleset(spec)?)
    }

    /// Force-moves a branch to an existing commit.
    pub fn github_move_branch(&self, repo: &str, branch: &str, sha: &str) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.move_branch(branch, sha)?)
    }

    /// Scripts `merge-async` (pending ticks, one-shot failure, result TTL).
    pub fn github_script_merge_async(
        &self,
        repo: &str,
        script: MergeAsyncScript,
    ) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.script_merge_async(script)?)
    }

    /// Makes the next `merge-async` request fail with `message` once it runs.
    pub fn github_fail_next_merge_async(&self, repo: &str, message: &str) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.fail_next_merge_async(message)?)
    }

    /// Makes the pull request's current or next merge-queue entry fail (UNMERGEABLE, then removed).
    pub fn github_script_queue_failure(
        &self,
        repo: &str,
        number: u64,
        message: &str,
    ) -> anyhow::Result<()> {
        Ok(self
            .github_repo(repo)?
            .script_queue_failure(number, message)?)
    }

    /// Locks (pauses) or unlocks the merge queue; locked entries report `LOCKED`.
    pub fn github_lock_queue(&self, repo: &str, locked: bool) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.lock_queue(locked)?)
    }

    /// Marks a pull request as draft (or ready for review).
    pub fn github_set_draft(&self, repo: &str, number: u64, draft: bool) -> anyhow::Result<()> {
        Ok(self.github_repo(repo)?.set_draft(number, draft)?)
    }

    /// The head sha of a branch.
    pub fn github_branch_head(&self, repo: &str, branch: &str) -> Option<String> {
        self.github_repo(repo)
            .ok()?
            .read(|repo| repo.git.branch_head(branch).map(str::to_string))
    }

    /// A file's content at a ref (branch or sha).
    pub fn github_file(&self, repo: &str, reference: &str, path: &str) -> Option<Vec<u8>> {
        self.github_repo(repo)
            .ok()?
            .read(|repo| Some(repo.git.resolve(reference)?.tree.get(path)?.content.clone()))
    }

    /// The pull request as `GET /repos/{owner}/{repo}/pulls/{number}` returns it.
    pub fn github_pr(&self, repo: &str, number: u64) -> Option<Value> {
        self.github_repo(repo).ok()?.pull(number).ok()
    }

    /// The repository summary of `GET /_sim/github/repos/{owner}/{repo}`.
    pub fn github_summary(&self, repo: &str) -> anyhow::Result<Value> {
        Ok(self.github_repo(repo)?.summary()?)
    }
}
