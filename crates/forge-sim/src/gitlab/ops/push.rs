//! A branch moving: merging an MR now, and the reaction to any push, force push or merge.

use axum::http::StatusCode;
use serde_json::json;

use super::merge::{emit_mr_hook, finish_merge, mr_ref};
use super::pipelines::create_pipeline;
use super::trains::drop_car;
use crate::gitlab::model::mr_head_ref;
use crate::gitlab::{ApiError, Ctx};
use crate::repo::MergeMethod;
use crate::state::User;

/// Merges an MR now. Conflicts → 422 "Branch cannot be merged".
pub fn do_merge(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    squash: bool,
    message: Option<String>,
    remove_source: bool,
) -> Result<(), ApiError> {
    let now = ctx.now;
    let project = ctx.project_mut(pid);
    let mr = mr_ref(project, iid)?.clone();
    let method = if squash {
        MergeMethod::Squash
    } else {
        project.settings.merge_method
    };
    let before = project
        .repo
        .branch_head(&mr.target_branch)
        .map(str::to_string);
    let message = message.unwrap_or_else(|| match method {
        MergeMethod::Squash => mr.title.clone(),
        _ => format!(
            "Merge branch '{}' into '{}'\n\n{}\n\nSee merge request {}!{}",
            mr.source_branch, mr.target_branch, mr.title, project.path_with_namespace, mr.iid
        ),
    });
    let new_head = project
        .repo
        .merge_into(&mr.target_branch, &mr.sha, method, &message, now)
        .map_err(|_| {
            ApiError::message(StatusCode::UNPROCESSABLE_ENTITY, "Branch cannot be merged")
        })?;
    finish_merge(
        ctx,
        pid,
        iid,
        user,
        &new_head,
        squash,
        remove_source || mr.force_remove_source_branch,
    );
    on_branch_updated(
        ctx,
        pid,
        &mr.target_branch,
        before.as_deref(),
        &new_head,
        user,
    );
    Ok(())
}

/// A branch moved (push, force push, merge): updates open MRs whose source it is (a car of one
/// that moved leaves the train), starts their pipeline, emits hooks.
pub fn on_branch_updated(
    ctx: &mut Ctx<'_>,
    pid: u64,
    branch: &str,
    before: Option<&str>,
    after: &str,
    user: &User,
) {
    let now = ctx.now;
    let iids: Vec<u64> = ctx
        .project(pid)
        .merge_requests
        .values()
        .filter(|m| m.is_open() && m.source_branch == branch)
        .map(|m| m.iid)
        .collect();
    if iids.is_empty() {
        return;
    }
    for iid in &iids {
        let mut oldrev = None;
        let reset_approvals = ctx.project(pid).settings.reset_approvals_on_push;
        if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(iid)
            && mr.sha != after
        {
            oldrev = Some(std::mem::replace(&mut mr.sha, after.to_string()));
            if reset_approvals {
                mr.approved_by.clear();
            }
            mr.updated_at = now;
            mr.merge_error = None;
        }
        if let Some(oldrev) = oldrev {
            drop_car(ctx, pid, *iid, Some("the source branch was updated"));
            emit_mr_hook(ctx, pid, *iid, "update", user, json!({}), Some(&oldrev));
        }
    }
    if ctx.project(pid).settings.merge_request_pipelines {
        // A merge request pipeline per open MR, on its own ref.
        for iid in iids {
            create_pipeline(
                ctx,
                pid,
                &mr_head_ref(iid),
                after,
                before,
                "merge_request_event",
                user,
                Some(iid),
            );
        }
        return;
    }
    create_pipeline(
        ctx,
        pid,
        branch,
        after,
        before,
        "push",
        user,
        iids.first().copied(),
    );
}
