//! GitLab merge train endpoints.

use axum::http::StatusCode;
use serde_json::Value;

use super::{MergeRequestSegment, ProjectCall};
use crate::gitlab::json::car_json;
use crate::gitlab::model::{AutoMerge, TrainCar, detailed_merge_status, head_pipeline};
use crate::gitlab::ops::add_car;
use crate::gitlab::{ApiError, ApiResult, Params, Project, created, ok};

fn require_trains(project: &Project) -> Result<(), ApiError> {
    if project.settings.merge_trains_enabled {
        Ok(())
    } else {
        Err(ApiError::message(StatusCode::FORBIDDEN, "403 Forbidden"))
    }
}

pub async fn list(call: ProjectCall, params: Params) -> ApiResult {
    let scope = params.str("scope");
    let ascending = params.str("sort").as_deref() == Some("asc");
    let cars = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let mut cars: Vec<&TrainCar> = Vec::new();
        if scope.as_deref() != Some("complete") {
            cars.extend(project.train.iter());
        }
        if scope.as_deref() != Some("active") {
            cars.extend(project.train_history.iter());
        }
        cars.sort_by_key(|car| car.id);
        if !ascending {
            cars.reverse();
        }
        Ok(cars
            .into_iter()
            .map(|car| car_json(project, car, ctx.base))
            .collect())
    })?;
    call.paged(&params, cars)
}

pub async fn get_car(call: ProjectCall<MergeRequestSegment>) -> ApiResult {
    let iid = call.segments.iid()?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let car = project
            .train
            .iter()
            .chain(project.train_history.iter().rev())
            .find(|car| car.mr_iid == iid)
            .ok_or_else(|| ApiError::not_found("Merge Train Merge Request"))?;
        ok(car_json(project, car, ctx.base))
    })
}

/// `POST /merge_trains/merge_requests/:iid` (`when_pipeline_succeeds`, `sha`, `squash`).
pub async fn add_car_endpoint(call: ProjectCall<MergeRequestSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let when_pipeline_succeeds = params.flag("when_pipeline_succeeds")?;
    let sha = params.str("sha");
    let squash = params.bool("squash")?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        require_trains(project)?;
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let status = detailed_merge_status(project, mr);
        let running = matches!(
            head_pipeline(project, mr).map(|pipeline| pipeline.status.as_str()),
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
            mr.auto_merge = Some(AutoMerge {
                strategy: strategy.to_string(),
                user: call.user.clone(),
                squash,
                remove_source_branch: false,
                commit_message: None,
            });
        }
        if !running {
            add_car(ctx, pid, iid, &call.user, squash)?;
        }
        let project = ctx.project(pid);
        let target = project
            .merge_requests
            .get(&iid)
            .map(|mr| mr.target_branch.clone())
            .unwrap_or_default();
        let cars: Vec<Value> = project
            .train
            .iter()
            .filter(|car| car.target_branch == target)
            .map(|car| car_json(project, car, ctx.base))
            .collect();
        created(Value::Array(cars))
    })
}
