//! A merge request's own transitions: approvals, being marked merged, system notes and
//! merge-request hooks.

use serde_json::{Value, json};

use crate::gitlab::model::{MergeRequest, Note, approvals_left};
use crate::gitlab::{ApiError, Ctx, Project, hooks};
use crate::state::User;

pub(crate) fn mr_ref(project: &Project, iid: u64) -> Result<&MergeRequest, ApiError> {
    project
        .merge_requests
        .get(&iid)
        .ok_or_else(|| ApiError::not_found(""))
}

pub(crate) fn mr_mut(project: &mut Project, iid: u64) -> Result<&mut MergeRequest, ApiError> {
    project
        .merge_requests
        .get_mut(&iid)
        .ok_or_else(|| ApiError::not_found(""))
}

/// Emits a `Merge Request Hook` for an MR.
pub fn emit_mr_hook(
    ctx: &Ctx<'_>,
    pid: u64,
    iid: u64,
    action: &str,
    user: &User,
    changes: Value,
    oldrev: Option<&str>,
) {
    let project = ctx.project(pid);
    let Some(mr) = project.merge_requests.get(&iid) else {
        return;
    };
    let payload = hooks::merge_request_hook(project, mr, action, user, changes, oldrev, ctx.base);
    ctx.emit(pid, "Merge Request Hook", payload);
}

/// Adds a system note (e.g. train removal) to an MR.
pub fn add_system_note(ctx: &mut Ctx<'_>, pid: u64, iid: u64, body: &str, user: &User) {
    let id = ctx.gl.alloc_note_id();
    let now = ctx.now;
    if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(&iid) {
        mr.notes.push(Note {
            id,
            body: body.to_string(),
            author: user.clone(),
            created_at: now,
            updated_at: now,
            system: true,
        });
    }
}

/// Records an approval (control API and `POST .../approve`); false when already approved.
pub fn approve_mr(ctx: &mut Ctx<'_>, pid: u64, iid: u64, user: &User) -> Result<bool, ApiError> {
    let now = ctx.now;
    let mr = mr_mut(ctx.project_mut(pid), iid)?;
    if mr.approved_by.iter().any(|u| u.id == user.id) {
        return Ok(false);
    }
    mr.approved_by.push(user.clone());
    mr.updated_at = now;
    emit_mr_hook(ctx, pid, iid, "approval", user, json!({}), None);
    let project = ctx.project(pid);
    if approvals_left(project, mr_ref(project, iid)?) == 0 {
        emit_mr_hook(ctx, pid, iid, "approved", user, json!({}), None);
    }
    Ok(true)
}

/// Withdraws `user`'s approval; false when there was none.
pub fn unapprove_mr(ctx: &mut Ctx<'_>, pid: u64, iid: u64, user: &User) -> Result<bool, ApiError> {
    let now = ctx.now;
    let mr = mr_mut(ctx.project_mut(pid), iid)?;
    let before = mr.approved_by.len();
    mr.approved_by.retain(|u| u.id != user.id);
    if mr.approved_by.len() == before {
        return Ok(false);
    }
    mr.updated_at = now;
    emit_mr_hook(ctx, pid, iid, "unapproval", user, json!({}), None);
    Ok(true)
}

/// Marks an MR merged at `merge_sha` (the target already points there) and emits the hook.
pub fn finish_merge(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    merge_sha: &str,
    squashed: bool,
    remove_source: bool,
) {
    let now = ctx.now;
    let project = ctx.project_mut(pid);
    let default_branch = project.repo.default_branch().to_string();
    let Some(mr) = project.merge_requests.get_mut(&iid) else {
        return;
    };
    mr.state = "merged".to_string();
    mr.merged_at = Some(now);
    mr.updated_at = now;
    mr.merged_by = Some(user.clone());
    mr.merge_commit_sha = Some(merge_sha.to_string());
    if squashed {
        mr.squash_commit_sha = Some(merge_sha.to_string());
    }
    mr.auto_merge = None;
    mr.merge_error = None;
    let source = mr.source_branch.clone();
    let source_sha = mr.sha.clone();
    if remove_source
        && source != default_branch
        && project.repo.branch_head(&source) == Some(source_sha.as_str())
    {
        project.repo.delete_branch(&source);
    }
    emit_mr_hook(
        ctx,
        pid,
        iid,
        "merge",
        user,
        json!({ "state_id": { "previous": 1, "current": 3 } }),
        None,
    );
}
