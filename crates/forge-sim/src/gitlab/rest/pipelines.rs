//! GitLab pipeline and job endpoints.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::Value;

use crate::gitlab::json::{job_json, pipeline_basic_json, pipeline_json};
use crate::gitlab::model::train_ref;
use crate::gitlab::ops::pipelines::retry;
use crate::gitlab::{ApiError, ApiResult, Params, created, ok, with_project};
use crate::state::{Shared, User};

pub async fn list(
    State(state): State<Shared>,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult {
    let ref_filter = params.str("ref");
    let sha_filter = params.str("sha");
    let status_filter = params.str("status");
    let source_filter = params.str("source");
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        let pipelines: Vec<Value> = project
            .pipelines
            .values()
            .rev()
            .filter(|p| ref_filter.as_ref().is_none_or(|r| &p.ref_name == r))
            .filter(|p| sha_filter.as_ref().is_none_or(|s| &p.sha == s))
            .filter(|p| status_filter.as_ref().is_none_or(|s| &p.status == s))
            .filter(|p| source_filter.as_ref().is_none_or(|s| &p.source == s))
            .map(|p| pipeline_basic_json(project, p, ctx.base))
            .collect();
        ok(Value::Array(pipelines))
    })
}

fn parse_id(raw: &str, what: &str) -> Result<u64, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::param(format!("{what} is invalid")))
}

pub async fn get_one(
    State(state): State<Shared>,
    Path((id, pipeline_id)): Path<(String, String)>,
) -> ApiResult {
    let pipeline_id = parse_id(&pipeline_id, "pipeline_id")?;
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        let pipeline = project
            .pipelines
            .get(&pipeline_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        ok(pipeline_json(project, pipeline, ctx.base))
    })
}

fn scopes(params: &Params) -> Vec<String> {
    let mut scopes = Vec::new();
    for key in ["scope", "scope[]"] {
        match params.0.get(key) {
            Some(Value::String(s)) => scopes.extend(s.split(',').map(str::to_string)),
            Some(Value::Array(items)) => {
                scopes.extend(items.iter().filter_map(|v| v.as_str().map(str::to_string)))
            }
            _ => {}
        }
    }
    scopes
}

pub async fn pipeline_jobs(
    State(state): State<Shared>,
    Path((id, pipeline_id)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    let pipeline_id = parse_id(&pipeline_id, "pipeline_id")?;
    let include_retried = params.flag("include_retried")?;
    let scopes = scopes(&params);
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        let pipeline = project
            .pipelines
            .get(&pipeline_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        let jobs: Vec<Value> = pipeline
            .job_ids
            .iter()
            .rev()
            .filter_map(|id| project.jobs.get(id))
            .filter(|job| include_retried || !job.retried)
            .filter(|job| scopes.is_empty() || scopes.contains(&job.status))
            .map(|job| job_json(project, job, ctx.base))
            .collect();
        ok(Value::Array(jobs))
    })
}

pub async fn get_job(
    State(state): State<Shared>,
    Path((id, job_id)): Path<(String, String)>,
) -> ApiResult {
    let job_id = parse_id(&job_id, "job_id")?;
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        let job = project
            .jobs
            .get(&job_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        ok(job_json(project, job, ctx.base))
    })
}

pub async fn job_trace(
    State(state): State<Shared>,
    Path((id, job_id)): Path<(String, String)>,
) -> ApiResult {
    let job_id = parse_id(&job_id, "job_id")?;
    let trace = with_project(&state, &id, |ctx, pid| {
        let job = ctx
            .project(pid)
            .jobs
            .get(&job_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        Ok(job.trace.clone())
    })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        trace,
    )
        .into_response())
}

pub async fn retry_job(
    State(state): State<Shared>,
    Extension(user): Extension<User>,
    Path((id, job_id)): Path<(String, String)>,
) -> ApiResult {
    let job_id = parse_id(&job_id, "job_id")?;
    with_project(&state, &id, |ctx, pid| {
        let new_id = retry(ctx, pid, job_id, &user)?;
        let project = ctx.project(pid);
        let job = project
            .jobs
            .get(&new_id)
            .expect("retried job just inserted");
        created(job_json(project, job, ctx.base))
    })
}

pub async fn mr_pipelines(
    State(state): State<Shared>,
    Path((id, iid)): Path<(String, String)>,
) -> ApiResult {
    let iid = parse_id(&iid, "merge_request_iid")?;
    with_project(&state, &id, |ctx, pid| {
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let train_ref = train_ref(iid);
        let pipelines: Vec<Value> = project
            .pipelines
            .values()
            .rev()
            .filter(|p| p.ref_name == mr.source_branch || p.ref_name == train_ref)
            .map(|p| pipeline_basic_json(project, p, ctx.base))
            .collect();
        ok(Value::Array(pipelines))
    })
}
