//! Pipelines and jobs: creation, progression in sim time, cancelation, retry.
//!
//! Stages run in order; a job starts when every earlier stage's latest jobs succeeded and ends
//! `duration_secs` of sim time later with the outcome scripted for its name. A stage that ends
//! with a failed job marks later stages `skipped`; retrying the failed job (a new job; the old one
//! keeps `retried: true`) puts the pipeline back to `running` and un-skips later stages on success.

use crate::gitlab::model::{Job, Pipeline, latest_jobs};
use crate::gitlab::{ApiError, Ctx, hooks};
use crate::state::User;

/// Creates a pipeline with the project's scripted jobs; `None` when the project has no jobs.
#[allow(
    clippy::too_many_arguments,
    reason = "plain pipeline attributes, each used once"
)]
pub fn create_pipeline(
    ctx: &mut Ctx<'_>,
    pid: u64,
    ref_name: &str,
    sha: &str,
    before_sha: Option<&str>,
    source: &str,
    user: &User,
    mr_iid: Option<u64>,
) -> Option<u64> {
    let now = ctx.now;
    let specs = ctx.project(pid).ci.jobs.clone();
    if specs.is_empty() {
        return None;
    }
    let stages = ctx.project(pid).ci.stages();
    let id = ctx.gl.alloc_pipeline_id();
    let job_ids: Vec<u64> = specs.iter().map(|_| ctx.gl.alloc_job_id()).collect();
    let project = ctx.project_mut(pid);
    project.next_pipeline_iid += 1;
    let iid = project.next_pipeline_iid;
    for (spec, job_id) in specs.iter().zip(&job_ids) {
        project.jobs.insert(
            *job_id,
            Job {
                id: *job_id,
                pipeline_id: id,
                name: spec.name.clone(),
                stage: spec.stage.clone(),
                status: if stages.first() == Some(&spec.stage) {
                    "pending"
                } else {
                    "created"
                }
                .to_string(),
                created_at: now,
                started_at: None,
                finished_at: None,
                duration_secs: spec.duration_secs,
                failure_reason: None,
                trace: String::new(),
                retried: false,
                retries_count: 0,
                user: user.clone(),
            },
        );
    }
    project.pipelines.insert(
        id,
        Pipeline {
            id,
            iid,
            project_id: pid,
            sha: sha.to_string(),
            ref_name: ref_name.to_string(),
            before_sha: before_sha
                .unwrap_or("0000000000000000000000000000000000000000")
                .to_string(),
            source: source.to_string(),
            status: "pending".to_string(),
            stages,
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: None,
            user: user.clone(),
            job_ids,
            mr_iid,
        },
    );
    let payload = hooks::pipeline_hook(ctx.project(pid), id, ctx.base);
    ctx.emit(pid, "Pipeline Hook", payload);
    // Runners pick the first stage up at once.
    progress_pipelines(ctx, pid);
    Some(id)
}

fn derive_status(jobs: &[&Job]) -> &'static str {
    if jobs
        .iter()
        .any(|j| matches!(j.status.as_str(), "running" | "pending"))
    {
        "running"
    } else if jobs.iter().any(|j| j.status == "failed") {
        "failed"
    } else if jobs.iter().any(|j| j.status == "created") {
        "running"
    } else if jobs.iter().any(|j| j.status == "canceled") {
        "canceled"
    } else {
        "success"
    }
}

/// Progresses every unfinished pipeline of a project; true when anything changed.
pub fn progress_pipelines(ctx: &mut Ctx<'_>, pid: u64) -> bool {
    let now = ctx.now;
    let open: Vec<u64> = ctx
        .project(pid)
        .pipelines
        .values()
        .filter(|p| !p.is_finished())
        .map(|p| p.id)
        .collect();
    let mut changed = false;
    for pipeline_id in open {
        let mut job_events: Vec<u64> = Vec::new();
        {
            let project = ctx.project_mut(pid);
            let Some(pipeline) = project.pipelines.get(&pipeline_id).cloned() else {
                continue;
            };
            // 1. Finish running jobs whose sim duration elapsed.
            for job_id in &pipeline.job_ids {
                let Some(job) = project.jobs.get(job_id) else {
                    continue;
                };
                if job.retried || job.status != "running" {
                    continue;
                }
                // A job never finishes in the tick that started it (so `running` is observable).
                let started = job.started_at.unwrap_or(now);
                if started >= now
                    || now < started + time::Duration::seconds(job.duration_secs as i64)
                {
                    continue;
                }
                let result = project.ci.run(&job.name, &pipeline.sha);
                if let Some(job) = project.jobs.get_mut(job_id) {
                    job.status = if result.success { "success" } else { "failed" }.to_string();
                    job.failure_reason = result.failure_reason;
                    job.trace = result.trace;
                    job.finished_at = Some(now);
                    job_events.push(*job_id);
                }
            }
            // 2. Walk stages: start runnable jobs, skip jobs behind a failed stage.
            let mut failed_before = false;
            let mut waiting_before = false;
            for stage in &pipeline.stages {
                let stage_jobs: Vec<u64> = pipeline
                    .job_ids
                    .iter()
                    .filter(|id| {
                        project
                            .jobs
                            .get(id)
                            .is_some_and(|j| !j.retried && &j.stage == stage)
                    })
                    .copied()
                    .collect();
                for job_id in &stage_jobs {
                    let Some(job) = project.jobs.get_mut(job_id) else {
                        continue;
                    };
                    let startable =
                        matches!(job.status.as_str(), "created" | "pending" | "skipped");
                    if !startable {
                        continue;
                    }
                    if failed_before {
                        if job.status != "skipped" {
                            job.status = "skipped".to_string();
                            job_events.push(*job_id);
                        }
                    } else if !waiting_before {
                        job.status = "running".to_string();
                        job.started_at = Some(now);
                        job.finished_at = None;
                        job_events.push(*job_id);
                    }
                }
                let statuses: Vec<String> = stage_jobs
                    .iter()
                    .filter_map(|id| project.jobs.get(id).map(|j| j.status.clone()))
                    .collect();
                if statuses
                    .iter()
                    .any(|s| matches!(s.as_str(), "running" | "pending" | "created"))
                {
                    waiting_before = true;
                } else if statuses.iter().any(|s| s == "failed" || s == "canceled") {
                    failed_before = true;
                }
            }
        }
        for job_id in &job_events {
            let payload = hooks::job_hook(ctx.project(pid), *job_id, ctx.base);
            ctx.emit(pid, "Job Hook", payload);
        }
        changed |= !job_events.is_empty();
        // 3. Derive the pipeline status from the latest jobs.
        let project = ctx.project_mut(pid);
        let Some(pipeline) = project.pipelines.get(&pipeline_id) else {
            continue;
        };
        let status = derive_status(&latest_jobs(project, pipeline)).to_string();
        if status != pipeline.status {
            if let Some(pipeline) = project.pipelines.get_mut(&pipeline_id) {
                pipeline.status = status.clone();
                pipeline.updated_at = now;
                if status == "running" {
                    pipeline.started_at.get_or_insert(now);
                    pipeline.finished_at = None;
                } else {
                    pipeline.finished_at = Some(now);
                }
            }
            let payload = hooks::pipeline_hook(ctx.project(pid), pipeline_id, ctx.base);
            ctx.emit(pid, "Pipeline Hook", payload);
            changed = true;
        }
    }
    changed
}

/// Cancels a pipeline's unfinished jobs (used when a train car is rebuilt).
pub fn cancel_pipeline(ctx: &mut Ctx<'_>, pid: u64, pipeline_id: u64) {
    let now = ctx.now;
    let project = ctx.project_mut(pid);
    let Some(pipeline) = project.pipelines.get(&pipeline_id).cloned() else {
        return;
    };
    if pipeline.is_finished() {
        return;
    }
    for job_id in &pipeline.job_ids {
        if let Some(job) = project.jobs.get_mut(job_id)
            && matches!(job.status.as_str(), "created" | "pending" | "running")
        {
            job.status = "canceled".to_string();
            job.finished_at = Some(now);
        }
    }
    if let Some(pipeline) = project.pipelines.get_mut(&pipeline_id) {
        pipeline.status = "canceled".to_string();
        pipeline.finished_at = Some(now);
        pipeline.updated_at = now;
    }
    let payload = hooks::pipeline_hook(ctx.project(pid), pipeline_id, ctx.base);
    ctx.emit(pid, "Pipeline Hook", payload);
}

/// Retries a finished job: a new job (pending) replaces it in the pipeline, which runs again.
pub fn retry(ctx: &mut Ctx<'_>, pid: u64, job_id: u64, user: &User) -> Result<u64, ApiError> {
    let now = ctx.now;
    let old = ctx
        .project(pid)
        .jobs
        .get(&job_id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(""))?;
    if old.retried || !matches!(old.status.as_str(), "success" | "failed" | "canceled") {
        return Err(ApiError::forbidden("Job is not retryable"));
    }
    let new_id = ctx.gl.alloc_job_id();
    let project = ctx.project_mut(pid);
    if let Some(job) = project.jobs.get_mut(&job_id) {
        job.retried = true;
    }
    project.jobs.insert(
        new_id,
        Job {
            id: new_id,
            pipeline_id: old.pipeline_id,
            name: old.name.clone(),
            stage: old.stage.clone(),
            status: "pending".to_string(),
            created_at: now,
            started_at: None,
            finished_at: None,
            duration_secs: project
                .ci
                .spec(&old.name)
                .map(|s| s.duration_secs)
                .unwrap_or(old.duration_secs),
            failure_reason: None,
            trace: String::new(),
            retried: false,
            retries_count: old.retries_count + 1,
            user: user.clone(),
        },
    );
    let mut pipeline_restarted = false;
    if let Some(pipeline) = project.pipelines.get_mut(&old.pipeline_id) {
        pipeline.job_ids.push(new_id);
        pipeline.updated_at = now;
        pipeline.finished_at = None;
        if pipeline.status != "running" {
            pipeline.status = "running".to_string();
            pipeline_restarted = true;
        }
    }
    if pipeline_restarted {
        let payload = hooks::pipeline_hook(ctx.project(pid), old.pipeline_id, ctx.base);
        ctx.emit(pid, "Pipeline Hook", payload);
    }
    let payload = hooks::job_hook(ctx.project(pid), new_id, ctx.base);
    ctx.emit(pid, "Job Hook", payload);
    Ok(new_id)
}
