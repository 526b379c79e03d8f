//! GitLab pipeline and job endpoints.

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;

use super::{MergeRequestSegment, ProjectCall, path_number};
use crate::gitlab::json::{job_json, pipeline_basic_json, pipeline_json};
use crate::gitlab::model::{mr_head_ref, train_ref};
use crate::gitlab::ops::pipelines::retry;
use crate::gitlab::{ApiError, ApiResult, Params, created, ok};

/// `{pipeline_id}` of a pipeline route.
#[derive(Deserialize)]
pub struct PipelineSegment {
    pipeline_id: String,
}

impl PipelineSegment {
    fn pipeline_id(&self) -> Result<u64, ApiError> {
        path_number(&self.pipeline_id, "pipeline_id")
    }
}

/// `{job_id}` of a job route.
#[derive(Deserialize)]
pub struct JobSegment {
    job_id: String,
}

impl JobSegment {
    fn job_id(&self) -> Result<u64, ApiError> {
        path_number(&self.job_id, "job_id")
    }
}

pub async fn list(call: ProjectCall, params: Params) -> ApiResult {
    let ref_filter = params.str("ref");
    let sha_filter = params.str("sha");
    let status_filter = params.str("status");
    let source_filter = params.str("source");
    let pipelines = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let pipelines: Vec<Value> = project
            .pipelines
            .values()
            .rev()
            .filter(|pipeline| {
                ref_filter
                    .as_ref()
                    .is_none_or(|reference| &pipeline.ref_name == reference)
            })
            .filter(|pipeline| sha_filter.as_ref().is_none_or(|sha| &pipeline.sha == sha))
            .filter(|pipeline| {
                status_filter
                    .as_ref()
                    .is_none_or(|status| &pipeline.status == status)
            })
            .filter(|pipeline| {
                source_filter
                    .as_ref()
                    .is_none_or(|source| &pipeline.source == source)
            })
            .map(|pipeline| pipeline_basic_json(project, pipeline, ctx.base))
            .collect();
        Ok(pipelines)
    })?;
    call.paged(&params, pipelines)
}

pub async fn get_one(call: ProjectCall<PipelineSegment>) -> ApiResult {
    let pipeline_id = call.segments.pipeline_id()?;
    call.with_project(|ctx, pid| {
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
            Some(Value::String(text)) => scopes.extend(text.split(',').map(str::to_string)),
            Some(Value::Array(items)) => scopes.extend(
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_string)),
            ),
            _ => {}
        }
    }
    scopes
}

pub async fn pipeline_jobs(call: ProjectCall<PipelineSegment>, params: Params) -> ApiResult {
    let pipeline_id = call.segments.pipeline_id()?;
    let include_retried = params.flag("include_retried")?;
    let scopes = scopes(&params);
    let jobs = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let pipeline = project
            .pipelines
            .get(&pipeline_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        let jobs: Vec<Value> = pipeline
            .job_ids
            .iter()
            .rev()
            .filter_map(|job_id| project.jobs.get(job_id))
            .filter(|job| include_retried || !job.retried)
            .filter(|job| scopes.is_empty() || scopes.contains(&job.status))
            .map(|job| job_json(project, job, ctx.base))
            .collect();
        Ok(jobs)
    })?;
    call.paged(&params, jobs)
}

/// `GET /projects/:id/jobs?scope[]=`: the project's jobs, newest first (retried ones included,
/// as GitLab lists them).
pub async fn project_jobs(call: ProjectCall, params: Params) -> ApiResult {
    let scopes = scopes(&params);
    let jobs = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        Ok(project
            .jobs
            .values()
            .rev()
            .filter(|job| scopes.is_empty() || scopes.contains(&job.status))
            .map(|job| job_json(project, job, ctx.base))
            .collect())
    })?;
    call.paged(&params, jobs)
}

pub async fn get_job(call: ProjectCall<JobSegment>) -> ApiResult {
    let job_id = call.segments.job_id()?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let job = project
            .jobs
            .get(&job_id)
            .ok_or_else(|| ApiError::not_found(""))?;
        ok(job_json(project, job, ctx.base))
    })
}

pub async fn job_trace(call: ProjectCall<JobSegment>) -> ApiResult {
    let job_id = call.segments.job_id()?;
    let trace = call.with_project(|ctx, pid| {
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

pub async fn retry_job(call: ProjectCall<JobSegment>) -> ApiResult {
    let job_id = call.segments.job_id()?;
    call.with_project(|ctx, pid| {
        let new_id = retry(ctx, pid, job_id, &call.user)?;
        let project = ctx.project(pid);
        let job = project
            .jobs
            .get(&new_id)
            .expect("retried job just inserted");
        created(job_json(project, job, ctx.base))
    })
}

pub async fn mr_pipelines(call: ProjectCall<MergeRequestSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let pipelines = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let refs = [mr.source_branch.clone(), mr_head_ref(iid), train_ref(iid)];
        let pipelines: Vec<Value> = project
            .pipelines
            .values()
            .rev()
            .filter(|pipeline| refs.contains(&pipeline.ref_name))
            .map(|pipeline| pipeline_basic_json(project, pipeline, ctx.base))
            .collect();
        Ok(pipelines)
    })?;
    call.paged(&params, pipelines)
}
