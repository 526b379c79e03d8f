//! GitHub control API: `/_sim/github/...` routes and the matching `SimHandle` builder methods.
//!
//! Control routes are unauthenticated; errors are `{"error": "..."}` like the core control API.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::model::{CheckScript, MergeAsyncScript, RepoSettings, ReviewThread, Webhook};
use super::{Ctx, json as js, model, ops, repo_key, with_github};
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
}

fn some_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
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

    pub fn required_approvals(mut self, n: u32) -> GithubRepoSpec {
        self.required_approvals = Some(n);
        self
    }

    pub fn required_checks(mut self, names: &[&str]) -> GithubRepoSpec {
        self.required_checks = Some(names.iter().map(|s| s.to_string()).collect());
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
}

fn parse_checks(list: &[Value]) -> Result<Vec<CheckScript>, ControlError> {
    list.iter()
        .map(|v| {
            CheckScript::from_json(v)
                .map_err(|e| ControlError::Invalid(format!("invalid check: {e}")))
        })
        .collect()
}

fn apply_spec(settings: &mut RepoSettings, spec: &GithubRepoSpec) -> Result<(), ControlError> {
    if let Some(v) = spec.merge_queue {
        settings.merge_queue = v;
    }
    if let Some(v) = spec.dismiss_stale_reviews {
        settings.dismiss_stale_reviews = v;
    }
    if let Some(v) = spec.required_approvals {
        settings.required_approvals = v;
    }
    if let Some(v) = &spec.required_checks {
        settings.required_checks = v.clone();
    }
    if let Some(v) = spec.require_conversation_resolution {
        settings.require_conversation_resolution = v;
    }
    if let Some(v) = spec.queue_eta_seconds_per_entry {
        settings.queue_eta_seconds_per_entry = v;
    }
    if let Some(m) = &spec.queue_merge_method {
        if ops::parse_merge_method(m).is_none() {
            return Err(ControlError::Invalid(format!(
                "queue_merge_method {m:?} (merge, squash, rebase)"
            )));
        }
        settings.queue_merge_method = m.clone();
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
            if let Some(h) = &mut settings.webhook {
                h.secret = secret.clone();
            }
        }
        (None, None) => {}
    }
    Ok(())
}

fn not_found(owner: &str, name: &str) -> ControlError {
    ControlError::NotFound(format!("repository {owner}/{name} not found"))
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
    with_github(state, |gh| {
        ops::create_repo(gh, &ctx, &spec.owner, &spec.name, &branch, settings)
            .map_err(ControlError::Invalid)?;
        if let Some(r) = gh.repos.get_mut(&repo_key(&spec.owner, &spec.name)) {
            r.check_script = checks;
        }
        Ok(())
    })
}

/// Updates repository settings (fields left out are unchanged).
pub fn update_repo(
    state: &SimState,
    owner: &str,
    name: &str,
    spec: &GithubRepoSpec,
) -> Result<(), ControlError> {
    let checks = spec.checks.as_deref().map(parse_checks).transpose()?;
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        apply_spec(&mut r.settings, spec)?;
        if let Some(c) = checks {
            r.check_script = c;
        }
        Ok(())
    })
}

/// Replaces the scripted checks (started for every new head from now on).
pub fn set_checks(
    state: &SimState,
    owner: &str,
    name: &str,
    checks: Vec<CheckScript>,
) -> Result<(), ControlError> {
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        r.check_script = checks;
        Ok(())
    })
}

/// Submits a review as `user` (`APPROVE`, `REQUEST_CHANGES`, `COMMENT`).
pub fn review(
    state: &SimState,
    owner: &str,
    name: &str,
    number: u64,
    user: &str,
    event: &str,
    body: Option<String>,
) -> Result<u64, ControlError> {
    let ctx = control_ctx(state, user);
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        let body = body.or_else(|| (event != "APPROVE").then(|| format!("{event} by {user}")));
        super::rest::pulls::submit_review(r, env, &ctx, number, Some(event), body, None)
            .map_err(api_to_control)
    })
}

fn api_to_control(e: super::error::ApiError) -> ControlError {
    let mut message = e.body["message"].as_str().unwrap_or_default().to_string();
    if let Some(errors) = e.body.get("errors") {
        message = format!("{message}: {errors}");
    }
    if e.status == StatusCode::NOT_FOUND {
        ControlError::NotFound(message)
    } else {
        ControlError::Invalid(message)
    }
}

/// Sets the pull request's review threads: `unresolved` open ones and `resolved` closed ones.
pub fn set_threads(
    state: &SimState,
    owner: &str,
    name: &str,
    number: u64,
    unresolved: u32,
    resolved: u32,
) -> Result<(), ControlError> {
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        let pr = r
            .pulls
            .get_mut(&number)
            .ok_or_else(|| ControlError::NotFound(format!("pull request #{number} not found")))?;
        pr.threads.clear();
        for i in 0..(unresolved + resolved) {
            let id = env.next_id();
            pr.threads.push(ReviewThread {
                id: model::node_id("PRRT", &id.to_string()),
                path: format!("src/file{i}.rs"),
                line: i + 1,
                is_resolved: i >= unresolved,
            });
        }
        Ok(())
    })
}

/// Commits files onto a branch as a human would (creating the branch if needed); returns the sha.
pub fn push(
    state: &SimState,
    owner: &str,
    name: &str,
    spec: &PushSpec,
) -> Result<String, ControlError> {
    let author = spec.author.clone().unwrap_or_else(|| "human".into());
    let ctx = control_ctx(state, &author);
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        let start = match r.git.branch_head(&spec.branch) {
            Some(h) => h.to_string(),
            None => {
                let from = spec
                    .start_branch
                    .clone()
                    .unwrap_or_else(|| r.git.default_branch().to_string());
                r.git
                    .branch_head(&from)
                    .ok_or_else(|| ControlError::NotFound(format!("branch {from} not found")))?
                    .to_string()
            }
        };
        let parent = r
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
        let sha = r.git.create_commit(
            vec![start],
            Arc::new(tree),
            &message,
            &author,
            &format!("{author}@example.com"),
            ctx.now,
        );
        ops::set_branch(r, env, &ctx, &spec.branch, Some(&sha));
        Ok(sha)
    })
}

/// Moves a branch to any existing commit (force), e.g. to move the base under a queue.
pub fn move_branch(
    state: &SimState,
    owner: &str,
    name: &str,
    branch: &str,
    sha: &str,
) -> Result<(), ControlError> {
    let ctx = control_ctx(state, "human");
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        if r.git.commit(sha).is_none() {
            return Err(ControlError::NotFound(format!("commit {sha} not found")));
        }
        ops::set_branch(r, env, &ctx, branch, Some(sha));
        Ok(())
    })
}

/// Scripts `merge-async`: pending ticks, a one-shot failure, result retention.
pub fn script_merge_async(
    state: &SimState,
    owner: &str,
    name: &str,
    script: MergeAsyncScript,
) -> Result<(), ControlError> {
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        r.merge_async = script;
        Ok(())
    })
}

/// Makes the pull request's (current or next) queue entry fail with `message`.
pub fn script_queue_failure(
    state: &SimState,
    owner: &str,
    name: &str,
    number: u64,
    message: &str,
) -> Result<(), ControlError> {
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        match r.queue.iter_mut().find(|e| e.pr == number) {
            Some(e) => e.scripted_failure = Some(message.to_string()),
            None => {
                r.queue_failures.insert(number, message.to_string());
            }
        }
        Ok(())
    })
}

/// Locks (pauses) or unlocks the merge queue.
pub fn lock_queue(
    state: &SimState,
    owner: &str,
    name: &str,
    locked: bool,
) -> Result<(), ControlError> {
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        r.queue_locked = locked;
        Ok(())
    })
}

/// Marks a pull request as draft or ready for review.
pub fn set_draft(
    state: &SimState,
    owner: &str,
    name: &str,
    number: u64,
    draft: bool,
) -> Result<(), ControlError> {
    let ctx = control_ctx(state, "human");
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        let pr = r
            .pulls
            .get_mut(&number)
            .ok_or_else(|| ControlError::NotFound(format!("pull request #{number} not found")))?;
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
        if let Some(pr) = r.pulls.get(&number) {
            super::events::pull_request(env, &ctx, r, pr, action, json!({}));
        }
        Ok(())
    })
}

/// Puts a branch name or fnmatch pattern under classic branch protection (idempotent).
pub fn protect_branch(
    state: &SimState,
    owner: &str,
    name: &str,
    pattern: &str,
) -> Result<(), ControlError> {
    if pattern.is_empty() {
        return Err(ControlError::Invalid("branch is required".into()));
    }
    with_github(state, |gh| {
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        if !r.settings.protected_branches.iter().any(|p| p == pattern) {
            r.settings.protected_branches.push(pattern.to_string());
        }
        Ok(())
    })
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

/// Adds a branch ruleset; returns its id.
pub fn add_ruleset(
    state: &SimState,
    owner: &str,
    name: &str,
    spec: &RulesetSpec,
) -> Result<u64, ControlError> {
    let enforcement = spec.enforcement.clone().unwrap_or_else(|| "active".into());
    if !matches!(enforcement.as_str(), "active" | "evaluate" | "disabled") {
        return Err(ControlError::Invalid(format!(
            "enforcement {enforcement:?} (active, evaluate, disabled)"
        )));
    }
    if spec.include.is_empty() {
        return Err(ControlError::Invalid("include is required".into()));
    }
    with_github(state, |gh| {
        let id = gh.env.next_id();
        let r = gh
            .repos
            .get_mut(&repo_key(owner, name))
            .ok_or_else(|| not_found(owner, name))?;
        r.settings.rulesets.push(super::model::Ruleset {
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

/// Opens a pull request as `spec.author` (REST validation, webhooks, checks); returns its number.
pub fn open_pr(
    state: &SimState,
    owner: &str,
    name: &str,
    spec: &OpenPrSpec,
) -> Result<u64, ControlError> {
    let author = spec.author.clone().unwrap_or_else(|| "human".into());
    let ctx = control_ctx(state, &author);
    with_github(state, |gh| {
        let (r, env) = gh
            .repo_env(owner, name)
            .ok_or_else(|| not_found(owner, name))?;
        ops::open_pr(
            r,
            env,
            &ctx,
            &spec.title,
            &spec.head,
            &spec.base,
            spec.body.clone(),
            spec.draft,
        )
        .map_err(|e| {
            let message = e.body["message"].as_str().unwrap_or_default().to_string();
            if e.status == StatusCode::NOT_FOUND {
                ControlError::NotFound(message)
            } else {
                ControlError::Invalid(format!("{message}: {}", e.body))
            }
        })
    })
}

/// A summary of a repository's state: branches, pull requests, queue, async merges.
pub fn summary(state: &SimState, owner: &str, name: &str) -> Result<Value, ControlError> {
    let ctx = Ctx::new(state, "control");
    let key = repo_key(owner, name);
    with_github(state, |gh| {
        let r = gh.repos.get(&key).ok_or_else(|| not_found(owner, name))?;
        let branches: BTreeMap<&String, &String> = r.git.branches().collect();
        let pulls: Vec<Value> = r.pulls.values().map(|p| js::pull(&ctx, r, p)).collect();
        let queue: Vec<Value> = r
            .queue
            .iter()
            .enumerate()
            .map(|(i, e)| {
                json!({
                    "id": e.id,
                    "pull_number": e.pr,
                    "position": i + 1,
                    "state": e.state.as_graphql(),
                    "base_ref": e.base_ref,
                    "head_sha": e.head_sha,
                    "merge_group": e.group.as_ref().map(|g| json!({ "head_ref": g.head_ref, "head_sha": g.head_sha, "base_sha": g.base_sha })),
                    "failure": e.failure,
                })
            })
            .collect();
        let merges: Vec<Value> = gh
            .async_merges
            .values()
            .filter(|m| m.repo == key)
            .map(|m| {
                let mut v = super::rest::pulls::async_body(m);
                v["uuid"] = json!(m.uuid);
                v["pull_number"] = json!(m.pr);
                v
            })
            .collect();
        let mut repo = js::repo(&ctx, r);
        repo["branches"] = json!(branches);
        repo["settings"] = json!(r.settings);
        repo["checks"] = Value::Array(r.check_script.iter().map(CheckScript::to_json).collect());
        repo["pulls"] = Value::Array(pulls);
        repo["queue"] = Value::Array(queue);
        repo["queue_locked"] = json!(r.queue_locked);
        repo["merge_async"] = json!(r.merge_async);
        repo["async_merges"] = Value::Array(merges);
        Ok(repo)
    })
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

#[derive(Deserialize)]
struct ProtectBody {
    branch: String,
}

async fn protect_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let p: ProtectBody = body(&b)?;
    protect_branch(&st, &o, &r, &p.branch)?;
    Ok((StatusCode::CREATED, Json(json!({ "branch": p.branch }))).into_response())
}

async fn ruleset_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let spec: RulesetSpec = body(&b)?;
    let id = add_ruleset(&st, &o, &r, &spec)?;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

async fn open_pr_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let spec: OpenPrSpec = body(&b)?;
    let number = open_pr(&st, &o, &r, &spec)?;
    let ctx = Ctx::new(&st, "control");
    let gh = lock(&st.github);
    let repo = gh.repo(&o, &r).ok_or_else(|| not_found(&o, &r))?;
    let pr = repo
        .pulls
        .get(&number)
        .ok_or_else(|| ControlError::NotFound(format!("pull request #{number} not found")))?;
    Ok((StatusCode::CREATED, Json(js::pull(&ctx, repo, pr))).into_response())
}

fn body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, ControlError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| ControlError::Invalid(format!("invalid JSON body: {e}")))
}

fn number(s: &str) -> Result<u64, ControlError> {
    s.parse()
        .map_err(|_| ControlError::Invalid(format!("invalid pull request number {s:?}")))
}

fn ok() -> Response {
    Json(json!({ "ok": true })).into_response()
}

async fn create_route(State(st): State<Shared>, b: Bytes) -> ControlResult {
    let spec: GithubRepoSpec = body(&b)?;
    create_repo(&st, &spec)?;
    Ok((
        StatusCode::CREATED,
        Json(summary(&st, &spec.owner, &spec.name)?),
    )
        .into_response())
}

async fn summary_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
) -> ControlResult {
    Ok(Json(summary(&st, &o, &r)?).into_response())
}

async fn update_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let spec: GithubRepoSpec = body(&b)?;
    update_repo(&st, &o, &r, &spec)?;
    Ok(Json(summary(&st, &o, &r)?).into_response())
}

async fn checks_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let v: Value = body(&b)?;
    let list = match &v {
        Value::Array(a) => a.clone(),
        Value::Object(m) => m
            .get("checks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => return Err(ControlError::Invalid("expected a list of checks".into())),
    };
    set_checks(&st, &o, &r, parse_checks(&list)?)?;
    Ok(ok())
}

async fn push_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let spec: PushSpec = body(&b)?;
    let sha = push(&st, &o, &r, &spec)?;
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
    State(st): State<Shared>,
    Path((o, r, branch)): Path<(String, String, String)>,
    b: Bytes,
) -> ControlResult {
    let m: MoveBody = body(&b)?;
    move_branch(&st, &o, &r, &branch, &m.sha)?;
    Ok(ok())
}

async fn merge_async_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let script: MergeAsyncScript = body(&b)?;
    script_merge_async(&st, &o, &r, script)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct QueueBody {
    locked: bool,
}

async fn queue_route(
    State(st): State<Shared>,
    Path((o, r)): Path<(String, String)>,
    b: Bytes,
) -> ControlResult {
    let q: QueueBody = body(&b)?;
    lock_queue(&st, &o, &r, q.locked)?;
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
    State(st): State<Shared>,
    Path((o, r, n)): Path<(String, String, String)>,
    b: Bytes,
) -> ControlResult {
    let rb: ReviewBody = body(&b)?;
    let event = rb.event.unwrap_or_else(|| "APPROVE".into());
    let id = review(&st, &o, &r, number(&n)?, &rb.user, &event, rb.body)?;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

#[derive(Deserialize)]
struct ThreadsBody {
    unresolved: u32,
    #[serde(default)]
    resolved: u32,
}

async fn threads_route(
    State(st): State<Shared>,
    Path((o, r, n)): Path<(String, String, String)>,
    b: Bytes,
) -> ControlResult {
    let t: ThreadsBody = body(&b)?;
    set_threads(&st, &o, &r, number(&n)?, t.unresolved, t.resolved)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct FailureBody {
    #[serde(default)]
    message: Option<String>,
}

async fn queue_failure_route(
    State(st): State<Shared>,
    Path((o, r, n)): Path<(String, String, String)>,
    b: Bytes,
) -> ControlResult {
    let f: FailureBody = body(&b)?;
    let message = f
        .message
        .unwrap_or_else(|| "Scripted merge queue failure".into());
    script_queue_failure(&st, &o, &r, number(&n)?, &message)?;
    Ok(ok())
}

#[derive(Deserialize)]
struct DraftBody {
    draft: bool,
}

async fn draft_route(
    State(st): State<Shared>,
    Path((o, r, n)): Path<(String, String, String)>,
    b: Bytes,
) -> ControlResult {
    let d: DraftBody = body(&b)?;
    set_draft(&st, &o, &r, number(&n)?, d.draft)?;
    Ok(ok())
}

// ---------------------------------------------------------------------------------------------
// SimHandle builders

fn split_repo(repo: &str) -> anyhow::Result<(&str, &str)> {
    repo.split_once('/')
        .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| anyhow::anyhow!("expected owner/name, got {repo:?}"))
}

/// GitHub builder methods of the test handle; `repo` is always `owner/name`.
impl crate::SimHandle {
    /// Creates a GitHub repository (default branch `main` holding a README unless the spec says otherwise).
    pub fn github_create_repo(&self, spec: GithubRepoSpec) -> anyhow::Result<()> {
        Ok(create_repo(self.state(), &spec)?)
    }

    /// Updates repository settings (only the `Some` fields of `spec`; owner/name are ignored).
    pub fn github_update_repo(&self, repo: &str, spec: GithubRepoSpec) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(update_repo(self.state(), o, n, &spec)?)
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
        let (o, n) = split_repo(repo)?;
        Ok(set_checks(self.state(), o, n, checks)?)
    }

    /// Approves a pull request as `user` (created if unknown).
    pub fn github_approve(&self, repo: &str, number: u64, user: &str) -> anyhow::Result<u64> {
        let (o, n) = split_repo(repo)?;
        Ok(review(self.state(), o, n, number, user, "APPROVE", None)?)
    }

    /// Requests changes on a pull request as `user`.
    pub fn github_request_changes(
        &self,
        repo: &str,
        number: u64,
        user: &str,
        body: &str,
    ) -> anyhow::Result<u64> {
        let (o, n) = split_repo(repo)?;
        Ok(review(
            self.state(),
            o,
            n,
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
        let (o, n) = split_repo(repo)?;
        Ok(set_threads(self.state(), o, n, number, unresolved, 0)?)
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
        let (o, n) = split_repo(repo)?;
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: files
                .iter()
                .map(|(p, c)| (p.to_string(), c.map(str::to_string)))
                .collect(),
            message: Some(message.to_string()),
            author: None,
        };
        Ok(push(self.state(), o, n, &spec)?)
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
        let (o, n) = split_repo(repo)?;
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: files
                .iter()
                .map(|(p, c)| (p.to_string(), c.map(str::to_string)))
                .collect(),
            message: Some(message.to_string()),
            author: Some(author.to_string()),
        };
        Ok(push(self.state(), o, n, &spec)?)
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
        let (o, n) = split_repo(repo)?;
        let spec = OpenPrSpec {
            head: head.to_string(),
            base: base.to_string(),
            title: title.to_string(),
            author: Some(author.to_string()),
            ..OpenPrSpec::default()
        };
        Ok(open_pr(self.state(), o, n, &spec)?)
    }

    /// Puts a branch name or fnmatch pattern under classic branch protection.
    pub fn github_protect_branch(&self, repo: &str, branch: &str) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(protect_branch(self.state(), o, n, branch)?)
    }

    /// Adds an active branch ruleset with the given rule types for `include`
    /// (`refs/heads/<fnmatch>`, `~DEFAULT_BRANCH`, `~ALL`); returns its id.
    pub fn github_add_ruleset(
        &self,
        repo: &str,
        include: &[&str],
        rules: &[&str],
    ) -> anyhow::Result<u64> {
        let (o, n) = split_repo(repo)?;
        let spec = RulesetSpec {
            name: "ruleset".into(),
            enforcement: None,
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: Vec::new(),
            rules: rules.iter().map(|s| s.to_string()).collect(),
        };
        Ok(add_ruleset(self.state(), o, n, &spec)?)
    }

    /// Force-moves a branch to an existing commit.
    pub fn github_move_branch(&self, repo: &str, branch: &str, sha: &str) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(move_branch(self.state(), o, n, branch, sha)?)
    }

    /// Scripts `merge-async` (pending ticks, one-shot failure, result TTL).
    pub fn github_script_merge_async(
        &self,
        repo: &str,
        script: MergeAsyncScript,
    ) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(script_merge_async(self.state(), o, n, script)?)
    }

    /// Makes the next `merge-async` request fail with `message` once it runs.
    pub fn github_fail_next_merge_async(&self, repo: &str, message: &str) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        let key = repo_key(o, n);
        with_github(self.state(), |gh| {
            let r = gh.repos.get_mut(&key).ok_or_else(|| not_found(o, n))?;
            r.merge_async.fail_next = Some(message.to_string());
            Ok::<(), ControlError>(())
        })?;
        Ok(())
    }

    /// Makes the pull request's current or next merge-queue entry fail (UNMERGEABLE, then removed).
    pub fn github_script_queue_failure(
        &self,
        repo: &str,
        number: u64,
        message: &str,
    ) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(script_queue_failure(self.state(), o, n, number, message)?)
    }

    /// Locks (pauses) or unlocks the merge queue; locked entries report `LOCKED`.
    pub fn github_lock_queue(&self, repo: &str, locked: bool) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(lock_queue(self.state(), o, n, locked)?)
    }

    /// Marks a pull request as draft (or ready for review).
    pub fn github_set_draft(&self, repo: &str, number: u64, draft: bool) -> anyhow::Result<()> {
        let (o, n) = split_repo(repo)?;
        Ok(set_draft(self.state(), o, n, number, draft)?)
    }

    /// The head sha of a branch.
    pub fn github_branch_head(&self, repo: &str, branch: &str) -> Option<String> {
        let (o, n) = split_repo(repo).ok()?;
        let gh = lock(&self.state().github);
        gh.repo(o, n)?.git.branch_head(branch).map(str::to_string)
    }

    /// A file's content at a ref (branch or sha).
    pub fn github_file(&self, repo: &str, reference: &str, path: &str) -> Option<Vec<u8>> {
        let (o, n) = split_repo(repo).ok()?;
        let gh = lock(&self.state().github);
        Some(
            gh.repo(o, n)?
                .git
                .resolve(reference)?
                .tree
                .get(path)?
                .content
                .clone(),
        )
    }

    /// The pull request as `GET /repos/{o}/{r}/pulls/{n}` returns it.
    pub fn github_pr(&self, repo: &str, number: u64) -> Option<Value> {
        let (o, n) = split_repo(repo).ok()?;
        let ctx = Ctx::new(self.state(), "control");
        let gh = lock(&self.state().github);
        let r = gh.repo(o, n)?;
        Some(js::pull(&ctx, r, r.pulls.get(&number)?))
    }

    /// The repository summary of `GET /_sim/github/repos/{owner}/{repo}`.
    pub fn github_summary(&self, repo: &str) -> anyhow::Result<Value> {
        let (o, n) = split_repo(repo)?;
        Ok(summary(self.state(), o, n)?)
    }
}
