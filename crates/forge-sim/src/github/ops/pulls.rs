//! Branches and pull requests: branch moves, open/close/reopen, direct merges.

use axum::http::StatusCode;
use serde_json::json;

use crate::github::error::ApiError;
use crate::github::events;
use crate::github::model::{GhRepo, PullRequest, node_id};
use crate::github::{Ctx, Env};
use crate::repo::MergeMethod;

use super::checks::start_checks;
use super::queue::dequeue;

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
#[allow(
    clippy::too_many_arguments,
    reason = "the REST request's fields, each used once"
)]
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
pub(super) fn mark_merged(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    sha: &str,
    by: &str,
) {
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
#[allow(
    clippy::too_many_arguments,
    reason = "the REST request's fields, each used once"
)]
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
    if let Some(reason) = r.merge_blocker(&pr) {
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
