//! GitLab merge trains: cars, train pipelines on merged results, merging in order, API endpoints.
//!
//! Each car's train commit is its MR merged onto the previous car's train commit (the first car:
//! onto the target head). When a car's base no longer matches (target moved, a car ahead left),
//! its pipeline is canceled and it is rebuilt (`stale` → `fresh`). The first car merges when its
//! pipeline succeeds (the target fast-forwards to the train commit); a car whose pipeline fails,
//! whose MR conflicts or receives a push leaves the train (with a system note).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::json::car_json;
use super::model::{TrainCar, detailed_merge_status, head_pipeline, train_ref};
use super::ops::merge::{add_system_note, finish_merge};
use super::pipelines::{cancel_pipeline, create_pipeline};
use super::{ApiError, ApiResult, Ctx, Params, Project, created, ok, with_project};
use crate::state::{Shared, User};

/// Adds an MR to its target branch's train (as the last car).
pub fn add_car(
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
    progress_trains(ctx, pid);
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

/// Rebuilds stale cars, merges the first cars whose pipelines passed, drops failed ones.
pub fn progress_trains(ctx: &mut Ctx<'_>, pid: u64) -> bool {
    if ctx.project(pid).train.is_empty() {
        return false;
    }
    let mut changed = false;
    // Drop cars whose pipeline failed or whose MR is no longer open.
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
    for (iid, reason) in to_drop {
        drop_car(ctx, pid, iid, Some(reason));
        changed = true;
    }
    let targets: Vec<String> = {
        let mut targets: Vec<String> = Vec::new();
        for car in &ctx.project(pid).train {
            if !targets.contains(&car.target_branch) {
                targets.push(car.target_branch.clone());
            }
        }
        targets
    };
    for target in targets {
        changed |= rebuild_target(ctx, pid, &target);
        changed |= merge_front(ctx, pid, &target);
    }
    changed
}

fn rebuild_target(ctx: &mut Ctx<'_>, pid: u64, target: &str) -> bool {
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

fn merge_front(ctx: &mut Ctx<'_>, pid: u64, target: &str) -> bool {
    let now = ctx.now;
    let project = ctx.project(pid);
    let Some(car) = project
        .train
        .iter()
        .find(|c| c.target_branch == target)
        .cloned()
    else {
        return false;
    };
    let (Some(base_sha), Some(train_sha)) = (car.base_sha.clone(), car.train_sha.clone()) else {
        return false;
    };
    if project.repo.branch_head(target) != Some(base_sha.as_str()) {
        return false;
    }
    let passed = match car.pipeline_id {
        Some(id) => project
            .pipelines
            .get(&id)
            .is_some_and(|p| p.status == "success"),
        None => true,
    };
    if !passed {
        return false;
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
    ctx.on_branch_updated(pid, target, Some(&base_sha), &train_sha, &car.user);
    true
}

fn parse_iid(raw: &str) -> Result<u64, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::param("merge_request_iid is invalid"))
}

fn require_trains(project: &Project) -> Result<(), ApiError> {
    if project.settings.merge_trains_enabled {
        Ok(())
    } else {
        Err(ApiError::message(StatusCode::FORBIDDEN, "403 Forbidden"))
    }
}

pub async fn list(
    State(state): State<Shared>,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult {
    let scope = params.str("scope");
    let ascending = params.str("sort").as_deref() == Some("asc");
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let mut cars: Vec<&TrainCar> = Vec::new();
        if scope.as_deref() != Some("complete") {
            cars.extend(project.train.iter());
        }
        if scope.as_deref() != Some("active") {
            cars.extend(project.train_history.iter());
        }
        cars.sort_by_key(|c| c.id);
        if !ascending {
            cars.reverse();
        }
        ok(Value::Array(
            cars.into_iter()
                .map(|c| car_json(project, c, ctx.base))
                .collect(),
        ))
    })
}

pub async fn get_car(
    State(state): State<Shared>,
    Path((id, iid)): Path<(String, String)>,
) -> ApiResult {
    let iid = parse_iid(&iid)?;
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let car = project
            .train
            .iter()
            .chain(project.train_history.iter().rev())
            .find(|c| c.mr_iid == iid)
            .ok_or_else(|| ApiError::not_found("Merge Train Merge Request"))?;
        ok(car_json(project, car, ctx.base))
    })
}

/// `POST /merge_trains/merge_requests/:iid` (`when_pipeline_succeeds`, `sha`, `squash`).
pub async fn add_car_endpoint(
    State(state): State<Shared>,
    Extension(user): Extension<User>,
    Path((id, iid)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    let iid = parse_iid(&iid)?;
    let when_pipeline_succeeds = params.flag("when_pipeline_succeeds")?;
    let sha = params.str("sha");
    let squash = params.bool("squash")?;
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let status = detailed_merge_status(project, mr);
        let running = matches!(
            head_pipeline(project, &mr.source_branch, &mr.sha).map(|p| p.status.as_str()),
            Some("created" | "pending" | "running")
        );
        let allowed =
            status == "mergeable" || (status == "ci_still_running" && when_pipeline_succeeds);
        if !allowed {
            return Err(ApiError::bad_request("Failed to merge"));
        }
        if let Some(sha) = &sha
            && sha != &mr.sha
        {
            return Err(ApiError::message(
                StatusCode::CONFLICT,
                format!("SHA does not match HEAD of source branch: {}", mr.sha),
            ));
        }
        let squash = squash.unwrap_or(mr.squash);
        let strategy = if running {
            "add_to_merge_train_when_pipeline_succeeds"
        } else {
            "merge_train"
        };
        if let Some(mr) = ctx.project_mut(pid).merge_requests.get_mut(&iid) {
            mr.auto_merge = Some(super::model::AutoMerge {
                strategy: strategy.to_string(),
                user: user.clone(),
                squash,
                remove_source_branch: false,
                commit_message: None,
            });
        }
        if !running {
            add_car(ctx, pid, iid, &user, squash)?;
        }
        let project = ctx.project(pid);
        let target = project
            .merge_requests
            .get(&iid)
            .map(|m| m.target_branch.clone())
            .unwrap_or_default();
        let cars: Vec<Value> = project
            .train
            .iter()
            .filter(|c| c.target_branch == target)
            .map(|c| car_json(project, c, ctx.base))
            .collect();
        created(Value::Array(cars))
    })
}
