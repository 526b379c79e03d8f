//! Merge trains: cars, train pipelines on merged results, merging in order.
//!
//! Each car's train commit is its MR merged onto the previous car's train commit (the first car:
//! onto the target head). When a car's base no longer matches (target moved, a car ahead left),
//! its pipeline is canceled and it is rebuilt (`stale` → `fresh`). The first car merges when its
//! pipeline succeeds (the target fast-forwards to the train commit); a car whose pipeline fails,
//! whose MR conflicts or receives a push leaves the train (with a system note). The train's
//! progress, which reacts to the merges made here, is `auto_merge::progress_trains`.

use std::sync::Arc;

use super::merge::{add_system_note, finish_merge};
use super::pipelines::{cancel_pipeline, create_pipeline};
use crate::gitlab::model::{TrainCar, train_ref};
use crate::gitlab::{ApiError, Ctx, Project};
use crate::state::User;

/// A merged car moved its target branch from `before` to `after`.
pub struct BranchMove {
    pub before: String,
    pub after: String,
    pub user: User,
}

/// Puts an MR on its target branch's train (as the last car); the train progresses separately.
pub fn enqueue(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    squash: bool,
) -> Result<(), ApiError> {
    let now = ctx.now;
    let project = ctx.project(pid);
    if project.train.iter().any(|c| c.mr_iid == iid) {
        return Err(ApiError::bad_request(
            "Merge request is already on a merge train",
        ));
    }
    let mr = project
        .merge_requests
        .get(&iid)
        .ok_or_else(|| ApiError::not_found(""))?;
    let target = mr.target_branch.clone();
    let id = ctx.gl.alloc_car_id();
    ctx.project_mut(pid).train.push(TrainCar {
        id,
        mr_iid: iid,
        target_branch: target,
        user: user.clone(),
        status: "idle".to_string(),
        pipeline_id: None,
        base_sha: None,
        train_sha: None,
        squash,
        created_at: now,
        updated_at: now,
        merged_at: None,
    });
    add_system_note(ctx, pid, iid, "started a merge train", user);
    Ok(())
}

/// Removes an MR from the train (if on it), canceling its pipeline; with a reason, notes it.
pub fn drop_car(ctx: &mut Ctx<'_>, pid: u64, iid: u64, reason: Option<&str>) {
    let project = ctx.project_mut(pid);
    let Some(index) = project.train.iter().position(|c| c.mr_iid == iid) else {
        return;
    };
    let car = project.train.remove(index);
    if let Some(mr) = project.merge_requests.get_mut(&iid) {
        mr.auto_merge = None;
        if let Some(reason) = reason {
            mr.merge_error = Some(reason.to_string());
        }
    }
    if let Some(pipeline_id) = car.pipeline_id {
        cancel_pipeline(ctx, pid, pipeline_id);
    }
    if let Some(reason) = reason {
        add_system_note(
            ctx,
            pid,
            iid,
            &format!("removed this merge request from the merge train because {reason}"),
            &car.user,
        );
    }
}

/// Drops cars whose pipeline failed or whose MR is no longer open; true when any left.
pub fn drop_stopped(ctx: &mut Ctx<'_>, pid: u64) -> bool {
    let mut to_drop: Vec<(u64, &'static str)> = Vec::new();
    {
        let project = ctx.project(pid);
        for car in &project.train {
            let open = project
                .merge_requests
                .get(&car.mr_iid)
                .is_some_and(|m| m.is_open());
            if !open {
                to_drop.push((car.mr_iid, "the merge request is not open"));
                continue;
            }
            let failed = car
                .pipeline_id
                .and_then(|id| project.pipelines.get(&id))
                .is_some_and(|p| p.status == "failed");
            if failed {
                to_drop.push((car.mr_iid, "the pipeline did not succeed"));
            }
        }
    }
    let changed = !to_drop.is_empty();
    for (iid, reason) in to_drop {
        drop_car(ctx, pid, iid, Some(reason));
    }
    changed
}

/// The target branches of the cars, in train order.
pub fn targets(project: &Project) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for car in &project.train {
        if !targets.contains(&car.target_branch) {
            targets.push(car.target_branch.clone());
        }
    }
    targets
}

/// Rebuilds the stale cars for `target`: each car's train commit on top of the one before.
pub fn rebuild_target(ctx: &mut Ctx<'_>, pid: u64, target: &str) -> bool {
    let now = ctx.now;
    let mut changed = false;
    let Some(mut expected_base) = ctx
        .project(pid)
        .repo
        .branch_head(target)
        .map(str::to_string)
    else {
        return false;
    };
    let car_iids: Vec<u64> = ctx
        .project(pid)
        .train
        .iter()
        .filter(|c| c.target_branch == target)
        .map(|c| c.mr_iid)
        .collect();
    for iid in car_iids {
        let project = ctx.project(pid);
        let Some(car) = project.train.iter().find(|c| c.mr_iid == iid).cloned() else {
            continue;
        };
        if car.base_sha.as_deref() == Some(expected_base.as_str()) && car.train_sha.is_some() {
            expected_base = car.train_sha.clone().unwrap_or(expected_base);
            continue;
        }
        let Some(mr) = project.merge_requests.get(&iid).cloned() else {
            continue;
        };
        if let Some(old) = car.pipeline_id {
            cancel_pipeline(ctx, pid, old);
        }
        let project = ctx.project_mut(pid);
        let tree = match project.repo.merge_trees(&expected_base, &mr.sha) {
            Ok(tree) => tree,
            Err(_) => {
                drop_car(
                    ctx,
                    pid,
                    iid,
                    Some("the merge request has conflicts with the merge train"),
                );
                changed = true;
                continue;
            }
        };
        let parents = if car.squash {
            vec![expected_base.clone()]
        } else {
            vec![expected_base.clone(), mr.sha.clone()]
        };
        let message = if car.squash {
            mr.title.clone()
        } else {
            format!(
                "Merge branch '{}' into '{}'\n\n{}\n\nSee merge request {}!{}",
                mr.source_branch, mr.target_branch, mr.title, project.path_with_namespace, mr.iid
            )
        };
        let train_sha = project.repo.create_commit(
            parents,
            Arc::new((*tree).clone()),
            &message,
            &car.user.name,
            &car.user.email,
            now,
        );
        let pipeline_id = create_pipeline(
            ctx,
            pid,
            &train_ref(iid),
            &train_sha,
            Some(&expected_base),
            "merge_request_event",
            &car.user,
            Some(iid),
        );
        if let Some(car) = ctx
            .project_mut(pid)
            .train
            .iter_mut()
            .find(|c| c.mr_iid == iid)
        {
            car.base_sha = Some(expected_base.clone());
            car.train_sha = Some(train_sha.clone());
            car.pipeline_id = pipeline_id;
            car.status = "fresh".to_string();
            car.updated_at = now;
        }
        expected_base = train_sha;
        changed = true;
    }
    changed
}

/// Merges the first car for `target` when its pipeline passed: the target fast-forwards to its
/// train commit. Returns the branch move, for the caller to react to.
pub fn merge_front(ctx: &mut Ctx<'_>, pid: u64, target: &str) -> Option<BranchMove> {
    let now = ctx.now;
    let project = ctx.project(pid);
    let car = project
        .train
        .iter()
        .find(|c| c.target_branch == target)
        .cloned()?;
    let (Some(base_sha), Some(train_sha)) = (car.base_sha.clone(), car.train_sha.clone()) else {
        return None;
    };
    if project.repo.branch_head(target) != Some(base_sha.as_str()) {
        return None;
    }
    let passed = match car.pipeline_id {
        Some(id) => project
            .pipelines
            .get(&id)
            .is_some_and(|p| p.status == "success"),
        None => true,
    };
    if !passed {
        return None;
    }
    let remove_source = project.merge_requests.get(&car.mr_iid).is_some_and(|m| {
        m.force_remove_source_branch
            || m.auto_merge
                .as_ref()
                .is_some_and(|a| a.remove_source_branch)
    });
    let project = ctx.project_mut(pid);
    project.repo.set_branch(target, &train_sha);
    let index = project
        .train
        .iter()
        .position(|c| c.id == car.id)
        .unwrap_or_default();
    let mut merged = project.train.remove(index);
    merged.status = "merged".to_string();
    merged.merged_at = Some(now);
    merged.updated_at = now;
    project.train_history.push(merged);
    finish_merge(
        ctx,
        pid,
        car.mr_iid,
        &car.user,
        &train_sha,
        car.squash,
        remove_source,
    );
    Some(BranchMove {
        before: base_sha,
        after: train_sha,
        user: car.user,
    })
}
