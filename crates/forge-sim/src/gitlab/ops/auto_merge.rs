//! Automatic merge: merging when the pipeline succeeds, or through the merge train (adding cars
//! and progressing the train).

use serde_json::json;

use super::merge::{add_system_note, emit_mr_hook};
use super::push::{do_merge, on_branch_updated};
use super::trains;
use crate::gitlab::model::{AutoMerge, detailed_merge_status, head_pipeline};
use crate::gitlab::{ApiError, Ctx};
use crate::state::User;

#[allow(
    clippy::too_many_arguments,
    reason = "plain data handed through from the merge request"
)]
pub(crate) fn set_auto_merge(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    strategy: &str,
    user: &User,
    squash: bool,
    remove_source: bool,
    message: Option<String>,
) {
    let now = ctx.now;
    if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(&iid) {
        mr.auto_merge = Some(AutoMerge {
            strategy: strategy.to_string(),
            user: user.clone(),
            squash,
            remove_source_branch: remove_source,
            commit_message: message,
        });
        mr.updated_at = now;
    }
    emit_mr_hook(
        ctx,
        pid,
        iid,
        "update",
        user,
        json!({ "merge_when_pipeline_succeeds": { "previous": false, "current": true } }),
        None,
    );
}

/// Carries out pending automatic merges whose pipeline finished; true when anything changed.
pub fn progress_auto_merge(ctx: &mut Ctx<'_>, pid: u64) -> bool {
    let project = ctx.project(pid);
    let pending: Vec<(u64, AutoMerge, Option<String>, &'static str)> = project
        .merge_requests
        .values()
        .filter(|m| m.is_open())
        .filter_map(|m| {
            let auto = m.auto_merge.clone()?;
            if auto.strategy == "merge_train" {
                return None;
            }
            let status = head_pipeline(project, m).map(|p| p.status.clone());
            Some((m.iid, auto, status, detailed_merge_status(project, m)))
        })
        .collect();
    let mut changed = false;
    for (iid, auto, pipeline_status, detailed) in pending {
        match pipeline_status.as_deref() {
            Some("success") if detailed == "mergeable" => {
                if auto.strategy == "add_to_merge_train_when_pipeline_succeeds" {
                    if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(&iid)
                        && let Some(auto_merge) = mr.auto_merge.as_mut()
                    {
                        auto_merge.strategy = "merge_train".to_string();
                    }
                    if add_car(ctx, pid, iid, &auto.user, auto.squash).is_err() {
                        cancel_auto_merge(
                            ctx,
                            pid,
                            iid,
                            &auto.user,
                            "the merge request could not be added to the merge train",
                        );
                    }
                } else if let Err(error) = do_merge(
                    ctx,
                    pid,
                    iid,
                    &auto.user,
                    auto.squash,
                    auto.commit_message.clone(),
                    auto.remove_source_branch,
                ) {
                    let reason = error.body["message"]
                        .as_str()
                        .unwrap_or("merge failed")
                        .to_string();
                    cancel_auto_merge(ctx, pid, iid, &auto.user, &reason);
                }
                changed = true;
            }
            Some("failed" | "canceled") => {
                cancel_auto_merge(ctx, pid, iid, &auto.user, "the pipeline did not succeed");
                changed = true;
            }
            _ => {}
        }
    }
    changed
}

/// Turns off auto-merge with a system note and `merge_error`.
pub fn cancel_auto_merge(ctx: &mut Ctx<'_>, pid: u64, iid: u64, user: &User, reason: &str) {
    if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(&iid) {
        mr.auto_merge = None;
        mr.merge_error = Some(reason.to_string());
    }
    add_system_note(
        ctx,
        pid,
        iid,
        &format!("aborted the automatic merge because {reason}"),
        user,
    );
}

/// Adds an MR to its target branch's train (as the last car) and progresses the train.
pub fn add_car(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    squash: bool,
) -> Result<(), ApiError> {
    trains::enqueue(ctx, pid, iid, user, squash)?;
    progress_trains(ctx, pid);
    Ok(())
}

/// Rebuilds stale cars, merges the first cars whose pipelines passed, drops failed ones.
pub fn progress_trains(ctx: &mut Ctx<'_>, pid: u64) -> bool {
    if ctx.project(pid).train.is_empty() {
        return false;
    }
    let mut changed = trains::drop_stopped(ctx, pid);
    for target in trains::targets(ctx.project(pid)) {
        changed |= trains::rebuild_target(ctx, pid, &target);
        if let Some(moved) = trains::merge_front(ctx, pid, &target) {
            on_branch_updated(
                ctx,
                pid,
                &target,
                Some(&moved.before),
                &moved.after,
                &moved.user,
            );
            changed = true;
        }
    }
    changed
}
