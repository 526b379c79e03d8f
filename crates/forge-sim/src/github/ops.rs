//! State transitions shared by REST, GraphQL, the control API and the ticker.
//!
//! Pull requests follow their head branch: every branch move goes through [`set_branch`], which
//! synchronizes open pull requests (new head, mergeability recomputed on the next tick, scripted
//! checks started, queue entry dropped) and invalidates the mergeability of pull requests based
//! on the branch. [`tick`] advances checks, merge queues and asynchronous merges.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::json;

use super::error::ApiError;
use super::events;
use super::model::{
    AsyncMerge, AsyncStatus, CheckKind, CheckRun, CheckScript, CheckSuite, CommitStatus,
    EntryState, GhRepo, MergeAction, MergeGroup, PullRequest, QueueEntry, RepoSettings,
};
use super::{Ctx, Env, GithubState, repo_key, sign};
use crate::ci::JobOutcome;
use crate::repo::{MergeMethod, Repo, Tree};

/// An opaque GraphQL-style node id: `<prefix>_kwDO<base64url(parts)>`.
pub fn node_id(prefix: &str, parts: &str) -> String {
    format!(
        "{prefix}_kwDO{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(parts)
    )
}

/// The git-like id of a tree.
pub fn tree_sha(tree: &Tree) -> String {
    let mut buf = Vec::new();
    for (path, entry) in tree {
        buf.extend_from_slice(entry.mode().as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(path.as_bytes());
        buf.push(0);
        buf.extend_from_slice(entry.blob_id().as_bytes());
    }
    sign::object_id("tree", &buf)
}

/// Finds a tree by its id (or a commit id, leniently) among stored trees and reachable commits.
pub fn find_tree(r: &GhRepo, sha: &str) -> Option<Arc<Tree>> {
    if let Some(t) = r.trees.get(sha) {
        return Some(t.clone());
    }
    if let Some(c) = r.git.commit(sha) {
        return Some(c.tree.clone());
    }
    let mut queue: VecDeque<String> = r.git.branches().map(|(_, s)| s.clone()).collect();
    let mut seen = BTreeSet::new();
    while let Some(c) = queue.pop_front() {
        if !seen.insert(c.clone()) {
            continue;
        }
        let Some(commit) = r.git.commit(&c) else {
            continue;
        };
        if tree_sha(&commit.tree) == sha {
            return Some(commit.tree.clone());
        }
        queue.extend(commit.parents.iter().cloned());
    }
    None
}

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
        created_at: ctx.now,
    };
    gh.repos.insert(key, repo);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Derived pull-request state
// ---------------------------------------------------------------------------------------------

/// (commits, additions, deletions, changed files) of a pull request against its base.
pub fn pr_stats(r: &GhRepo, pr: &PullRequest) -> (usize, usize, usize, usize) {
    let Some(base) = r.git.branch_head(&pr.base_ref) else {
        return (0, 0, 0, 0);
    };
    let commits = r.git.commits_between(base, &pr.head_sha).len();
    let mb = r.git.merge_base(base, &pr.head_sha).unwrap_or_default();
    let diffs = r.git.diff(&mb, &pr.head_sha);
    let (mut add, mut del) = (0, 0);
    for d in &diffs {
        for l in d.diff.lines() {
            if l.starts_with('+') && !l.starts_with("+++") {
                add += 1;
            } else if l.starts_with('-') && !l.starts_with("---") {
                del += 1;
            }
        }
    }
    (commits, add, del, diffs.len())
}

/// Unresolved review threads.
pub fn unresolved_threads(pr: &PullRequest) -> usize {
    pr.threads.iter().filter(|t| !t.is_resolved).count()
}

/// (approvals, changes requested) counting each reviewer's latest decisive review.
///
/// With `dismiss_stale_reviews`, approvals of an older head do not count.
pub fn review_counts(r: &GhRepo, pr: &PullRequest) -> (usize, bool) {
    let mut latest: std::collections::BTreeMap<&str, &super::model::Review> = Default::default();
    for rv in &pr.reviews {
        if matches!(
            rv.state.as_str(),
            "APPROVED" | "CHANGES_REQUESTED" | "DISMISSED"
        ) {
            latest.insert(rv.user.as_str(), rv);
        }
    }
    let approvals = latest
        .values()
        .filter(|rv| rv.state == "APPROVED")
        .filter(|rv| !r.settings.dismiss_stale_reviews || rv.commit_id == pr.head_sha)
        .count();
    let changes = latest.values().any(|rv| rv.state == "CHANGES_REQUESTED");
    (approvals, changes)
}

/// GraphQL `reviewDecision`: APPROVED / CHANGES_REQUESTED / REVIEW_REQUIRED.
pub fn review_decision(r: &GhRepo, pr: &PullRequest) -> &'static str {
    let (approvals, changes) = review_counts(r, pr);
    let required = r.settings.required_approvals.max(1) as usize;
    if changes {
        "CHANGES_REQUESTED"
    } else if approvals >= required {
        "APPROVED"
    } else {
        "REVIEW_REQUIRED"
    }
}

/// The latest check run per name on a commit.
pub fn latest_runs<'a>(r: &'a GhRepo, sha: &str) -> Vec<&'a CheckRun> {
    let mut out: Vec<&CheckRun> = Vec::new();
    for run in r
        .check_runs
        .iter()
        .filter(|c| c.head_sha == sha && c.kind == CheckKind::CheckRun)
    {
        if let Some(pos) = out.iter().position(|o| o.name == run.name) {
            out[pos] = run;
        } else {
            out.push(run);
        }
    }
    out
}

/// The latest status per context on a commit.
pub fn latest_statuses<'a>(r: &'a GhRepo, sha: &str) -> Vec<&'a CommitStatus> {
    let mut out: Vec<&CommitStatus> = Vec::new();
    for s in r.statuses.iter().filter(|s| s.sha == sha) {
        if let Some(pos) = out.iter().position(|o| o.context == s.context) {
            out[pos] = s;
        } else {
            out.push(s);
        }
    }
    out
}

/// The combined commit status state (`success` / `pending` / `failure`).
pub fn combined_state(r: &GhRepo, sha: &str) -> &'static str {
    let statuses = latest_statuses(r, sha);
    if statuses
        .iter()
        .any(|s| s.state == "failure" || s.state == "error")
    {
        "failure"
    } else if statuses.is_empty() || statuses.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    }
}

/// (status, conclusion) of a check suite made of `runs`.
pub fn suite_status(runs: &[&CheckRun]) -> (&'static str, Option<&'static str>) {
    if runs.iter().any(|r| r.status != "completed") {
        let status = if runs.iter().any(|r| r.status == "in_progress") {
            "in_progress"
        } else {
            "queued"
        };
        return (status, None);
    }
    if runs.iter().any(|r| r.conclusion == Some("failure")) {
        ("completed", Some("failure"))
    } else {
        ("completed", Some("success"))
    }
}

/// The result of one named check (check run or status context) on a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckResult {
    Missing,
    Pending,
    Success,
    Failure,
}

/// The latest result of the check or status called `name` on `sha`.
pub fn check_result(r: &GhRepo, sha: &str, name: &str) -> CheckResult {
    if let Some(run) = latest_runs(r, sha).into_iter().find(|c| c.name == name) {
        return match (run.status, run.conclusion) {
            ("completed", Some("success" | "neutral" | "skipped")) => CheckResult::Success,
            ("completed", _) => CheckResult::Failure,
            _ => CheckResult::Pending,
        };
    }
    if let Some(s) = latest_statuses(r, sha)
        .into_iter()
        .find(|s| s.context == name)
    {
        return match s.state.as_str() {
            "success" => CheckResult::Success,
            "pending" => CheckResult::Pending,
            _ => CheckResult::Failure,
        };
    }
    CheckResult::Missing
}

/// The rollup of every check and status on a commit: SUCCESS / FAILURE / PENDING, or `None`.
pub fn rollup(r: &GhRepo, sha: &str) -> Option<&'static str> {
    let mut names: Vec<String> = latest_runs(r, sha).iter().map(|c| c.name.clone()).collect();
    names.extend(latest_statuses(r, sha).iter().map(|s| s.context.clone()));
    if names.is_empty() {
        return None;
    }
    let results: Vec<CheckResult> = names.iter().map(|n| check_result(r, sha, n)).collect();
    Some(if results.contains(&CheckResult::Failure) {
        "FAILURE"
    } else if results.contains(&CheckResult::Pending) {
        "PENDING"
    } else {
        "SUCCESS"
    })
}

/// Why branch protection blocks merging (or queueing) the pull request, if it does.
pub fn merge_blocker(r: &GhRepo, pr: &PullRequest) -> Option<String> {
    let required = r.settings.required_approvals as usize;
    if required > 0 {
        let (approvals, changes) = review_counts(r, pr);
        if changes {
            return Some("Changes have been requested on this pull request.".into());
        }
        if approvals < required {
            let plural = if required == 1 {
                "review is"
            } else {
                "reviews are"
            };
            return Some(format!(
                "At least {required} approving {plural} required by reviewers with write access."
            ));
        }
    }
    for name in &r.settings.required_checks {
        match check_result(r, &pr.head_sha, name) {
            CheckResult::Success => {}
            CheckResult::Failure => {
                return Some(format!("Required status check \"{name}\" is failing."));
            }
            CheckResult::Missing | CheckResult::Pending => {
                return Some(format!("Required status check \"{name}\" is expected."));
            }
        }
    }
    if r.settings.require_conversation_resolution && unresolved_threads(pr) > 0 {
        return Some("All comments must be resolved.".into());
    }
    None
}

/// REST `mergeable_state`.
pub fn mergeable_state(r: &GhRepo, pr: &PullRequest) -> &'static str {
    if !pr.open {
        return "unknown";
    }
    if pr.draft {
        return "draft";
    }
    match pr.mergeable {
        None => return "unknown",
        Some(false) => return "dirty",
        Some(true) => {}
    }
    if merge_blocker(r, pr).is_some() {
        return "blocked";
    }
    match rollup(r, &pr.head_sha) {
        Some("FAILURE") | Some("PENDING") => "unstable",
        _ => "clean",
    }
}

/// GraphQL `mergeable`: MERGEABLE / CONFLICTING / UNKNOWN.
pub fn graphql_mergeable(pr: &PullRequest) -> &'static str {
    match (pr.open, pr.mergeable) {
        (false, _) | (true, None) => "UNKNOWN",
        (true, Some(true)) => "MERGEABLE",
        (true, Some(false)) => "CONFLICTING",
    }
}

/// GraphQL `mergeStateStatus`.
pub fn merge_state_status(r: &GhRepo, pr: &PullRequest) -> &'static str {
    match mergeable_state(r, pr) {
        "clean" => "CLEAN",
        "dirty" => "DIRTY",
        "blocked" => "BLOCKED",
        "unstable" => "UNSTABLE",
        "draft" => "DRAFT",
        "behind" => "BEHIND",
        _ => "UNKNOWN",
    }
}

// ---------------------------------------------------------------------------------------------
// Branches and pull requests
// ---------------------------------------------------------------------------------------------

/// Moves (`Some`) or deletes (`None`) a branch and updates every pull request that follows it.
pub fn set_branch(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, branch: &str, new: Option<&str>) {
    let old = r.git.branch_head(branch).map(str::to_string);
    match new {
        Some(sha) => r.git.set_branch(branch, sha),
        None => {
            r.git.delete_branch(branch);
        }
    }
    if old.as_deref() == new {
        return;
    }
    // Pull requests based on the branch need their mergeability recomputed.
    for pr in r.pulls.values_mut() {
        if pr.open && pr.base_ref == branch {
            pr.mergeable = None;
        }
    }
    let heads: Vec<u64> = r
        .pulls
        .values()
        .filter(|p| p.open && p.head_ref == branch)
        .map(|p| p.number)
        .collect();
    for number in heads {
        match new {
            None => {
                close_pr(r, env, ctx, number);
            }
            Some(sha) => synchronize(r, env, ctx, number, old.as_deref().unwrap_or_default(), sha),
        }
    }
}

fn synchronize(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, number: u64, before: &str, after: &str) {
    let Some(pr) = r.pulls.get_mut(&number) else {
        return;
    };
    if pr.head_sha == after {
        return;
    }
    pr.head_sha = after.to_string();
    pr.mergeable = None;
    pr.updated_at = ctx.now;
    let head_ref = pr.head_ref.clone();
    if r.queue.iter().any(|e| e.pr == number) {
        dequeue(r, env, ctx, number, "BRANCH_PUSHED");
    }
    start_checks(r, env, ctx, after, Some(&head_ref));
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(
            env,
            ctx,
            r,
            pr,
            "synchronize",
            json!({ "before": before, "after": after }),
        );
    }
}

/// Closes an open pull request without merging it.
pub fn close_pr(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, number: u64) -> bool {
    let Some(pr) = r.pulls.get_mut(&number) else {
        return false;
    };
    if !pr.open {
        return false;
    }
    pr.open = false;
    pr.closed_at = Some(ctx.now);
    pr.updated_at = ctx.now;
    if r.queue.iter().any(|e| e.pr == number) {
        dequeue(r, env, ctx, number, "MANUAL");
    }
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "closed", json!({}));
    }
    true
}

/// Reopens a closed, unmerged pull request whose head branch still exists.
pub fn reopen_pr(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, number: u64) -> Result<(), ApiError> {
    let pr = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    if pr.open {
        return Ok(());
    }
    if pr.merged {
        return Err(ApiError::validation(
            "PullRequest",
            Some("state"),
            "custom",
            Some("Cannot reopen a merged pull request."),
        ));
    }
    let Some(head) = r.git.branch_head(&pr.head_ref).map(str::to_string) else {
        return Err(ApiError::validation(
            "PullRequest",
            Some("state"),
            "custom",
            Some("Cannot reopen a pull request whose head branch was deleted."),
        ));
    };
    let head_ref = pr.head_ref.clone();
    if let Some(pr) = r.pulls.get_mut(&number) {
        pr.open = true;
        pr.closed_at = None;
        pr.updated_at = ctx.now;
        pr.head_sha = head.clone();
        pr.mergeable = None;
    }
    start_checks(r, env, ctx, &head, Some(&head_ref));
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "reopened", json!({}));
    }
    Ok(())
}

/// Opens a pull request (REST validation rules and messages).
#[allow(clippy::too_many_arguments)]
pub fn open_pr(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    title: &str,
    head: &str,
    base: &str,
    body: Option<String>,
    draft: bool,
) -> Result<u64, ApiError> {
    let head_branch = match head.split_once(':') {
        Some((owner, branch)) if owner.eq_ignore_ascii_case(&r.owner) => branch.to_string(),
        Some(_) => return Err(ApiError::invalid_field("PullRequest", "head")),
        None => head.to_string(),
    };
    let Some(head_sha) = r.git.branch_head(&head_branch).map(str::to_string) else {
        return Err(ApiError::invalid_field("PullRequest", "head"));
    };
    let Some(base_sha) = r.git.branch_head(base).map(str::to_string) else {
        return Err(ApiError::invalid_field("PullRequest", "base"));
    };
    if r.pulls
        .values()
        .any(|p| p.open && p.head_ref == head_branch && p.base_ref == base)
    {
        let msg = format!(
            "A pull request already exists for {}:{head_branch}.",
            r.owner
        );
        return Err(ApiError::validation(
            "PullRequest",
            None,
            "custom",
            Some(&msg),
        ));
    }
    if r.git.commits_between(&base_sha, &head_sha).is_empty() {
        let msg = format!("No commits between {base} and {head_branch}");
        return Err(ApiError::validation(
            "PullRequest",
            None,
            "custom",
            Some(&msg),
        ));
    }
    let number = r.next_number;
    r.next_number += 1;
    let id = env.next_id();
    let pr = PullRequest {
        id,
        node_id: node_id("PR", &format!("{}:{number}", r.id)),
        number,
        title: title.to_string(),
        body,
        user: ctx.sender.clone(),
        open: true,
        merged: false,
        draft,
        head_ref: head_branch.clone(),
        head_sha: head_sha.clone(),
        base_ref: base.to_string(),
        labels: Vec::new(),
        mergeable: None,
        merge_commit_sha: None,
        merged_by: None,
        created_at: ctx.now,
        updated_at: ctx.now,
        closed_at: None,
        merged_at: None,
        reviews: Vec::new(),
        threads: Vec::new(),
    };
    r.pulls.insert(number, pr);
    start_checks(r, env, ctx, &head_sha, Some(&head_branch));
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "opened", json!({}));
    }
    Ok(number)
}

/// The commit message GitHub writes for a merge.
pub fn merge_message(
    r: &GhRepo,
    pr: &PullRequest,
    method: MergeMethod,
    title: Option<&str>,
    message: Option<&str>,
) -> String {
    let default_title = match method {
        MergeMethod::Merge => format!(
            "Merge pull request #{} from {}/{}",
            pr.number, r.owner, pr.head_ref
        ),
        MergeMethod::Squash | MergeMethod::Rebase => format!("{} (#{})", pr.title, pr.number),
    };
    let title = title.filter(|t| !t.is_empty()).unwrap_or(&default_title);
    let body = match (message, method) {
        (Some(m), _) => m.to_string(),
        (None, MergeMethod::Merge) => pr.title.clone(),
        (None, _) => String::new(),
    };
    if body.is_empty() {
        title.to_string()
    } else {
        format!("{title}\n\n{body}")
    }
}

/// Marks a pull request merged and announces it.
fn mark_merged(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, number: u64, sha: &str, by: &str) {
    if let Some(pr) = r.pulls.get_mut(&number) {
        pr.merged = true;
        pr.open = false;
        pr.mergeable = None;
        pr.merge_commit_sha = Some(sha.to_string());
        pr.merged_by = Some(by.to_string());
        pr.merged_at = Some(ctx.now);
        pr.closed_at = Some(ctx.now);
        pr.updated_at = ctx.now;
    }
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "closed", json!({}));
    }
}

/// Merges a pull request directly (`PUT .../merge`); returns the new base head.
#[allow(clippy::too_many_arguments)]
pub fn merge_pr(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    method: MergeMethod,
    sha: Option<&str>,
    title: Option<&str>,
    message: Option<&str>,
) -> Result<String, ApiError> {
    let not_mergeable = || {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is not mergeable",
        )
    };
    let pr = r
        .pulls
        .get(&number)
        .ok_or_else(ApiError::not_found)?
        .clone();
    if !pr.open {
        return Err(not_mergeable());
    }
    if let Some(expected) = sha
        && expected != pr.head_sha
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Head branch was modified. Review and try the merge again.",
        ));
    }
    if pr.draft {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is still a draft",
        ));
    }
    if r.queue_enabled_for(&pr.base_ref) {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Repository rule violations found\n\nChanges must be made through the merge queue\n\n",
        ));
    }
    if let Some(reason) = merge_blocker(r, &pr) {
        return Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, reason));
    }
    if r.git.has_conflicts(&pr.base_ref, &pr.head_sha) {
        if let Some(p) = r.pulls.get_mut(&number) {
            p.mergeable = Some(false);
        }
        return Err(not_mergeable());
    }
    let msg = merge_message(r, &pr, method, title, message);
    let old_base = r.git.branch_head(&pr.base_ref).map(str::to_string);
    let new_head = r
        .git
        .merge_into(&pr.base_ref, &pr.head_sha, method, &msg, ctx.now)
        .map_err(|_| not_mergeable())?;
    // merge_into moved the branch; restore and move it through set_branch so followers update.
    if let Some(old) = old_base {
        r.git.set_branch(&pr.base_ref, &old);
    }
    mark_merged(r, env, ctx, number, &new_head, &ctx.sender.clone());
    set_branch(r, env, ctx, &pr.base_ref, Some(&new_head));
    Ok(new_head)
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Starts the repository's scripted checks on a commit (once per commit).
pub fn start_checks(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    sha: &str,
    head_branch: Option<&str>,
) {
    if r.check_script.is_empty() || r.check_suites.iter().any(|s| s.head_sha == sha) {
        return;
    }
    let suite_id = env.next_id();
    r.check_suites.push(CheckSuite {
        id: suite_id,
        head_sha: sha.to_string(),
        head_branch: head_branch.map(str::to_string),
        completed_notified: false,
    });
    for script in r.check_script.clone() {
        add_run(r, env, ctx, sha, suite_id, script);
    }
}

fn add_run(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    sha: &str,
    suite_id: u64,
    script: CheckScript,
) -> u64 {
    let name = script.job.name.clone();
    let attempt = r
        .check_runs
        .iter()
        .filter(|c| c.head_sha == sha && c.name == name)
        .count() as u32
        + 1;
    let (planned, summary) = match &script.job.outcome {
        JobOutcome::Success => ("success", format!("{name} passed.")),
        JobOutcome::Fail { trace, .. } => ("failure", failure_summary(&name, trace)),
        JobOutcome::Flaky {
            fail_times, trace, ..
        } if attempt <= *fail_times => ("failure", failure_summary(&name, trace)),
        JobOutcome::Flaky { .. } => ("success", format!("{name} passed.")),
    };
    let id = env.next_id();
    let run = CheckRun {
        id,
        name: name.clone(),
        head_sha: sha.to_string(),
        kind: script.kind,
        status: "queued",
        conclusion: None,
        planned,
        summary,
        check_suite_id: suite_id,
        started_at: ctx.now,
        completed_at: None,
        script,
    };
    if run.kind == CheckKind::Status {
        let sid = env.next_id();
        let st = CommitStatus {
            id: sid,
            sha: sha.to_string(),
            context: name,
            state: "pending".into(),
            description: Some("In progress".into()),
            target_url: Some(format!("{}/{}/runs/{id}", ctx.base_url, r.full_name())),
            created_at: ctx.now,
            updated_at: ctx.now,
        };
        events::status(env, ctx, r, &st);
        r.statuses.push(st);
    }
    r.check_runs.push(run);
    if let Some(s) = r.check_suites.iter_mut().find(|s| s.id == suite_id) {
        s.completed_notified = false;
    }
    id
}

fn failure_summary(name: &str, trace: &str) -> String {
    if trace.is_empty() {
        format!("{name} failed: exit code 1")
    } else {
        format!("{name} failed: {trace}")
    }
}

/// Re-runs a check run (a new run of the same check on the same commit).
pub fn rerequest(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, run_id: u64) -> Option<u64> {
    let run = r.check_runs.iter().find(|c| c.id == run_id)?.clone();
    let id = add_run(
        r,
        env,
        ctx,
        &run.head_sha,
        run.check_suite_id,
        run.script.clone(),
    );
    Some(id)
}

fn progress_checks(r: &mut GhRepo, env: &mut Env, ctx: &Ctx) {
    let mut completed = Vec::new();
    for run in r.check_runs.iter_mut().filter(|c| c.status != "completed") {
        // Each run is visible as queued, then in_progress for at least one tick each.
        if run.status == "queued" {
            run.status = "in_progress";
            run.started_at = ctx.now;
            continue;
        }
        let due = run.started_at + time::Duration::seconds(run.script.job.duration_secs as i64);
        if ctx.now >= due {
            run.status = "completed";
            run.conclusion = Some(run.planned);
            run.completed_at = Some(ctx.now);
            completed.push(run.id);
        }
    }
    for id in completed {
        let Some(run) = r.check_runs.iter().find(|c| c.id == id).cloned() else {
            continue;
        };
        match run.kind {
            CheckKind::CheckRun => events::check_run(env, ctx, r, &run, "completed"),
            CheckKind::Status => {
                let sid = env.next_id();
                let st = CommitStatus {
                    id: sid,
                    sha: run.head_sha.clone(),
                    context: run.name.clone(),
                    state: run.planned.to_string(),
                    description: Some(run.summary.clone()),
                    target_url: Some(format!(
                        "{}/{}/runs/{}",
                        ctx.base_url,
                        r.full_name(),
                        run.id
                    )),
                    created_at: ctx.now,
                    updated_at: ctx.now,
                };
                events::status(env, ctx, r, &st);
                r.statuses.push(st);
            }
        }
    }
    // Suites whose runs are all complete.
    let done: Vec<u64> = r
        .check_suites
        .iter()
        .filter(|s| !s.completed_notified)
        .filter(|s| {
            r.check_runs
                .iter()
                .filter(|c| c.check_suite_id == s.id)
                .all(|c| c.status == "completed")
        })
        .map(|s| s.id)
        .collect();
    for id in done {
        if let Some(s) = r.check_suites.iter_mut().find(|s| s.id == id) {
            s.completed_notified = true;
        }
        let has_runs = r
            .check_runs
            .iter()
            .any(|c| c.check_suite_id == id && c.kind == CheckKind::CheckRun);
        if has_runs {
            events::check_suite_completed(env, ctx, r, id);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Merge queue
// ---------------------------------------------------------------------------------------------

/// Adds a pull request to its base branch's merge queue; returns the entry id.
pub fn enqueue(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    expected_head: Option<&str>,
) -> Result<String, String> {
    let pr = r
        .pulls
        .get(&number)
        .ok_or_else(|| format!("Could not resolve to a PullRequest with the number of {number}."))?
        .clone();
    if let Some(e) = r.queue.iter().find(|e| e.pr == number) {
        return Ok(e.id.clone());
    }
    if pr.merged {
        return Err("Pull request is already merged.".into());
    }
    if !pr.open {
        return Err("Pull request is closed.".into());
    }
    if pr.draft {
        return Err("Pull request is in draft state.".into());
    }
    if !r.queue_enabled_for(&pr.base_ref) {
        return Err(format!(
            "The merge queue is not enabled for the base branch '{}'.",
            pr.base_ref
        ));
    }
    if let Some(expected) = expected_head
        && expected != pr.head_sha
    {
        return Err(format!(
            "The pull request head ({}) does not match the expected head ({expected}).",
            pr.head_sha
        ));
    }
    if pr.mergeable == Some(false) || r.git.has_conflicts(&pr.base_ref, &pr.head_sha) {
        return Err("Pull request has merge conflicts.".into());
    }
    if let Some(reason) = merge_blocker(r, &pr) {
        return Err(reason);
    }
    let seq = env.next_id();
    let id = node_id("MQE", &format!("{}:{number}:{seq}", r.id));
    r.queue.push(QueueEntry {
        id: id.clone(),
        pr: number,
        base_ref: pr.base_ref.clone(),
        head_sha: pr.head_sha.clone(),
        state: EntryState::Queued,
        enqueued_at: ctx.now,
        group: None,
        failure: None,
        scripted_failure: r.queue_failures.remove(&number),
        ticks_in_state: 0,
    });
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "enqueued", json!({}));
    }
    Ok(id)
}

/// Removes a pull request from the queue (destroying its merge group); returns the entry.
pub fn dequeue(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    reason: &str,
) -> Option<QueueEntry> {
    let idx = r.queue.iter().position(|e| e.pr == number)?;
    destroy_group(r, env, ctx, idx, "dequeued");
    let entry = r.queue.remove(idx);
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "dequeued", json!({ "reason": reason }));
    }
    Some(entry)
}

fn destroy_group(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize, reason: &str) {
    let Some(group) = r.queue.get_mut(idx).and_then(|e| e.group.take()) else {
        return;
    };
    let base_ref = r.queue[idx].base_ref.clone();
    r.git.delete_branch(&group.head_ref);
    events::merge_group(env, ctx, r, &group, &base_ref, "destroyed", Some(reason));
}

fn fail_entry(r: &mut GhRepo, idx: usize, message: String) {
    if let Some(e) = r.queue.get_mut(idx) {
        e.state = EntryState::Unmergeable;
        e.failure = Some(message);
        e.ticks_in_state = 0;
    }
}

fn set_entry_state(r: &mut GhRepo, idx: usize, state: EntryState) {
    if let Some(e) = r.queue.get_mut(idx) {
        e.state = state;
        e.ticks_in_state = 0;
    }
}

/// Whether a merge group's checks passed, failed (naming a check), or are still running.
enum GroupChecks {
    Pending,
    Passed,
    Failed(String),
}

fn group_checks(r: &GhRepo, sha: &str) -> GroupChecks {
    let mut names: Vec<String> = latest_runs(r, sha).iter().map(|c| c.name.clone()).collect();
    names.extend(latest_statuses(r, sha).iter().map(|s| s.context.clone()));
    for req in &r.settings.required_checks {
        if !names.contains(req) {
            names.push(req.clone());
        }
    }
    let mut pending = false;
    for name in names {
        match check_result(r, sha, &name) {
            CheckResult::Failure => return GroupChecks::Failed(name),
            CheckResult::Pending | CheckResult::Missing => pending = true,
            CheckResult::Success => {}
        }
    }
    if pending {
        GroupChecks::Pending
    } else {
        GroupChecks::Passed
    }
}

fn progress_queue(r: &mut GhRepo, env: &mut Env, ctx: &Ctx) {
    if r.queue.is_empty() {
        return;
    }
    if r.queue_locked {
        for idx in 0..r.queue.len() {
            if r.queue[idx].state != EntryState::Locked {
                destroy_group(r, env, ctx, idx, "invalidated");
                set_entry_state(r, idx, EntryState::Locked);
            }
        }
        return;
    }
    for e in r.queue.iter_mut() {
        if e.state == EntryState::Locked {
            e.state = EntryState::Queued;
            e.ticks_in_state = 0;
        }
        e.ticks_in_state += 1;
    }
    // Entries that failed on an earlier tick leave the queue now.
    while let Some(idx) = r
        .queue
        .iter()
        .position(|e| e.state == EntryState::Unmergeable && e.ticks_in_state > 1)
    {
        let number = r.queue[idx].pr;
        let reason = match r.queue[idx].failure.as_deref() {
            Some(m) if m.contains("conflict") => "MERGE_CONFLICT",
            _ => "CI_FAILURE",
        };
        dequeue(r, env, ctx, number, reason);
    }
    let bases: BTreeSet<String> = r.queue.iter().map(|e| e.base_ref.clone()).collect();
    for base in bases {
        step_head(r, env, ctx, &base);
    }
}

fn step_head(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, base: &str) {
    let Some(idx) = r.queue.iter().position(|e| e.base_ref == base) else {
        return;
    };
    let entry = r.queue[idx].clone();
    let base_head = r.git.branch_head(base).unwrap_or_default().to_string();
    match entry.state {
        EntryState::Queued => build_group(r, env, ctx, idx),
        EntryState::AwaitingChecks | EntryState::Mergeable => {
            let Some(group) = entry.group.clone() else {
                set_entry_state(r, idx, EntryState::Queued);
                return;
            };
            if group.base_sha != base_head {
                // The base moved under the group: rebuild it on the new base.
                destroy_group(r, env, ctx, idx, "invalidated");
                set_entry_state(r, idx, EntryState::Queued);
                return;
            }
            if let Some(msg) = entry.scripted_failure.clone() {
                destroy_group(r, env, ctx, idx, "dequeued");
                fail_entry(r, idx, msg);
                return;
            }
            if entry.state == EntryState::AwaitingChecks {
                match group_checks(r, &group.head_sha) {
                    GroupChecks::Pending => {}
                    GroupChecks::Passed => set_entry_state(r, idx, EntryState::Mergeable),
                    GroupChecks::Failed(name) => {
                        destroy_group(r, env, ctx, idx, "dequeued");
                        fail_entry(r, idx, format!("Required check \"{name}\" failed."));
                    }
                }
            } else {
                complete_merge(r, env, ctx, idx, group);
            }
        }
        EntryState::Unmergeable | EntryState::Locked => {}
    }
}

fn build_group(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize) {
    let entry = r.queue[idx].clone();
    let Some(pr) = r.pulls.get(&entry.pr).cloned() else {
        r.queue.remove(idx);
        return;
    };
    let Some(base_sha) = r.git.branch_head(&entry.base_ref).map(str::to_string) else {
        fail_entry(r, idx, "The base branch no longer exists.".into());
        return;
    };
    let group_ref = format!(
        "gh-readonly-queue/{}/pr-{}-{}",
        entry.base_ref, pr.number, pr.head_sha
    );
    let method = parse_merge_method(&r.settings.queue_merge_method).unwrap_or_default();
    let msg = merge_message(r, &pr, method, None, None);
    r.git.set_branch(&group_ref, &base_sha);
    match r
        .git
        .merge_into(&group_ref, &pr.head_sha, method, &msg, ctx.now)
    {
        Err(conflict) => {
            r.git.delete_branch(&group_ref);
            fail_entry(r, idx, format!("Merge conflict: {conflict}"));
        }
        Ok(sha) => {
            let group = MergeGroup {
                head_ref: group_ref.clone(),
                head_sha: sha.clone(),
                base_sha,
            };
            if let Some(e) = r.queue.get_mut(idx) {
                e.group = Some(group.clone());
            }
            set_entry_state(r, idx, EntryState::AwaitingChecks);
            start_checks(r, env, ctx, &sha, Some(&group_ref));
            events::merge_group(
                env,
                ctx,
                r,
                &group,
                &entry.base_ref,
                "checks_requested",
                None,
            );
        }
    }
}

fn complete_merge(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize, group: MergeGroup) {
    let entry = r.queue.remove(idx);
    r.git.delete_branch(&group.head_ref);
    events::merge_group(
        env,
        ctx,
        r,
        &group,
        &entry.base_ref,
        "destroyed",
        Some("merged"),
    );
    mark_merged(r, env, ctx, entry.pr, &group.head_sha, &ctx.sender.clone());
    set_branch(r, env, ctx, &entry.base_ref, Some(&group.head_sha));
}

// ---------------------------------------------------------------------------------------------
// Asynchronous merges
// ---------------------------------------------------------------------------------------------

/// Runs an asynchronous merge request now and returns its terminal status.
pub fn run_async(gh: &mut GithubState, ctx: &Ctx, rec: &AsyncMerge) -> AsyncStatus {
    let failed = |m: &str| AsyncStatus::Failed {
        message: m.to_string(),
    };
    if let Some(msg) = &rec.scripted_failure {
        return failed(msg);
    }
    let Some(r) = gh.repos.get_mut(&rec.repo) else {
        return failed("Repository not found.");
    };
    let env = &mut gh.env;
    let Some(pr) = r.pulls.get(&rec.pr).cloned() else {
        return failed("Pull request not found.");
    };
    if pr.merged {
        return AsyncStatus::Merged {
            sha: pr.merge_commit_sha.unwrap_or_default(),
        };
    }
    if !pr.open {
        return failed("Pull request is closed.");
    }
    if pr.draft {
        return failed("Pull request is in draft state.");
    }
    if pr.head_sha != rec.expected_head_sha {
        return failed("Head branch was modified. Review and try the merge again.");
    }
    let queue = r.queue_enabled_for(&pr.base_ref);
    let action = match rec.merge_action {
        MergeAction::Default if queue => MergeAction::MergeQueue,
        MergeAction::Default => MergeAction::DirectMerge,
        other => other,
    };
    let actx = Ctx {
        sender: rec.requested_by.clone(),
        ..ctx.clone()
    };
    match action {
        MergeAction::MergeQueue => {
            if !queue {
                return failed("Merge queue is not enabled for the base branch.");
            }
            match enqueue(r, env, &actx, pr.number, Some(&rec.expected_head_sha)) {
                Ok(_) => AsyncStatus::Enqueued,
                Err(m) => failed(&m),
            }
        }
        _ => {
            let method = parse_merge_method(&rec.merge_method).unwrap_or_default();
            match merge_pr(
                r,
                env,
                &actx,
                pr.number,
                method,
                Some(&rec.expected_head_sha),
                rec.commit_title.as_deref(),
                rec.commit_message.as_deref(),
            ) {
                Ok(sha) => AsyncStatus::Merged { sha },
                Err(e) => failed(
                    e.body["message"]
                        .as_str()
                        .unwrap_or("Pull Request is not mergeable"),
                ),
            }
        }
    }
}

fn progress_async(gh: &mut GithubState, ctx: &Ctx) {
    let due: Vec<String> = gh
        .async_merges
        .iter_mut()
        .filter(|(_, m)| m.status == AsyncStatus::Pending)
        .filter_map(|(uuid, m)| {
            m.remaining_ticks = m.remaining_ticks.saturating_sub(1);
            (m.remaining_ticks == 0).then(|| uuid.clone())
        })
        .collect();
    for uuid in due {
        let Some(rec) = gh.async_merges.get(&uuid).cloned() else {
            continue;
        };
        let status = run_async(gh, ctx, &rec);
        if let Some(m) = gh.async_merges.get_mut(&uuid) {
            m.status = status;
            m.updated_at = ctx.now;
        }
    }
    gh.async_merges.retain(|_, m| !is_expired(m, ctx));
}

/// Whether an asynchronous merge result has passed its retention window.
pub fn is_expired(m: &AsyncMerge, ctx: &Ctx) -> bool {
    (ctx.now - m.updated_at).whole_seconds() > m.ttl_seconds as i64
}

// ---------------------------------------------------------------------------------------------
// Tick
// ---------------------------------------------------------------------------------------------

/// One step of every asynchronous process.
pub fn tick(gh: &mut GithubState, ctx: &Ctx) {
    let keys: Vec<String> = gh.repos.keys().cloned().collect();
    for key in keys {
        let Some(r) = gh.repos.get_mut(&key) else {
            continue;
        };
        let env = &mut gh.env;
        // Mergeability is computed in the background after a push.
        let numbers: Vec<u64> = r
            .pulls
            .values()
            .filter(|p| p.open && p.mergeable.is_none())
            .map(|p| p.number)
            .collect();
        for n in numbers {
            let Some(pr) = r.pulls.get(&n) else { continue };
            let ok = !r.git.has_conflicts(&pr.base_ref, &pr.head_sha);
            if let Some(pr) = r.pulls.get_mut(&n) {
                pr.mergeable = Some(ok);
            }
        }
        progress_checks(r, env, ctx);
        progress_queue(r, env, ctx);
    }
    progress_async(gh, ctx);
}
