//! GitHub Actions renderings: workflow jobs and runs (REST and the `workflow_job` webhook),
//! the Actions app, a job's log text and its short-lived log URL.

use serde_json::{Value, json};

use super::{ts, ts_opt, user};
use crate::github::Ctx;
use crate::github::model::GhRepo;
use crate::github::model::actions::{
    ACTIONS_APP_ID, ACTIONS_APP_SLUG, LOG_URL_TTL_SECONDS, WorkflowJob, WorkflowRun, log_signature,
};

/// The GitHub Actions app object.
pub fn app(ctx: &Ctx) -> Value {
    json!({
        "id": ACTIONS_APP_ID,
        "slug": ACTIONS_APP_SLUG,
        "node_id": "MDM6QXBwMTUzNjg=",
        "name": "GitHub Actions",
        "owner": user(ctx, "github"),
        "html_url": format!("{}/apps/{ACTIONS_APP_SLUG}", ctx.base_url),
    })
}

/// The job's page (also its check run's `details_url`).
pub fn job_html_url(ctx: &Ctx, r: &GhRepo, job: &WorkflowJob) -> String {
    format!(
        "{}/{}/actions/runs/{}/job/{}",
        ctx.base_url,
        r.full_name(),
        job.run_id,
        job.id
    )
}

/// The job's steps: `Set up job`, `Run <name>`, `Complete job`, as far as it got.
fn steps(r: &GhRepo, job: &WorkflowJob) -> Value {
    let progress = r.job_progress(job.id);
    let (status, conclusion, started, completed) = (
        progress.status,
        progress.conclusion,
        progress.started_at,
        progress.completed_at,
    );
    let names = [
        "Set up job".to_string(),
        format!("Run {}", job.name),
        "Complete job".to_string(),
    ];
    let steps: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let (step_status, step_conclusion) = match (status, conclusion) {
                ("queued", _) => ("queued", None),
                ("in_progress", _) if index == 0 => ("in_progress", None),
                ("in_progress", _) => ("queued", None),
                (_, Some(c)) if index == 1 && c != "success" => (
                    "completed",
                    Some(if c == "failure" { "failure" } else { "cancelled" }),
                ),
                _ => ("completed", Some("success")),
            };
            json!({
                "name": name,
                "status": step_status,
                "conclusion": step_conclusion,
                "number": index + 1,
                "started_at": if step_status == "queued" { Value::Null } else { ts_opt(started) },
                "completed_at": if step_status == "completed" { ts_opt(completed) } else { Value::Null },
            })
        })
        .collect();
    Value::Array(steps)
}

/// A job as REST (`actions/jobs/{id}`, `actions/runs/{id}/jobs`) and the `workflow_job`
/// webhook render it.
pub fn job_json(ctx: &Ctx, r: &GhRepo, job: &WorkflowJob) -> Value {
    let full = r.full_name();
    let progress = r.job_progress(job.id);
    let (status, conclusion, started, completed) = (
        progress.status,
        progress.conclusion,
        progress.started_at,
        progress.completed_at,
    );
    let workflow_name = r.actions.run(job.run_id).map(|run| run.name.clone());
    let runner = (status != "queued").then(|| format!("GitHub Actions {}", job.id % 100));
    json!({
        "id": job.id,
        "run_id": job.run_id,
        "workflow_name": workflow_name,
        "head_branch": job.head_branch,
        "run_url": format!("{}/repos/{full}/actions/runs/{}", ctx.base_url, job.run_id),
        "run_attempt": job.run_attempt,
        "node_id": format!("CR_kwDO{}", job.id),
        "head_sha": job.head_sha,
        "url": format!("{}/repos/{full}/actions/jobs/{}", ctx.base_url, job.id),
        "html_url": job_html_url(ctx, r, job),
        "status": status,
        "conclusion": conclusion,
        "created_at": ts(job.created_at),
        "started_at": ts_opt(started),
        "completed_at": ts_opt(completed),
        "name": job.name,
        "steps": steps(r, job),
        "check_run_url": format!("{}/repos/{full}/check-runs/{}", ctx.base_url, job.id),
        "labels": ["ubuntu-latest"],
        "runner_id": runner.as_ref().map(|_| 1),
        "runner_name": runner,
        "runner_group_id": runner_group(status).map(|_| 1),
        "runner_group_name": runner_group(status),
    })
}

fn runner_group(status: &str) -> Option<&'static str> {
    (status != "queued").then_some("GitHub Actions")
}

/// A workflow run as `GET actions/runs/{id}` renders it.
pub fn run_json(ctx: &Ctx, r: &GhRepo, run: &WorkflowRun) -> Value {
    let full = r.full_name();
    let jobs: Vec<&WorkflowJob> = r.latest_run_jobs(run.id);
    let states: Vec<_> = jobs
        .iter()
        .map(|j| {
            let p = r.job_progress(j.id);
            (p.status, p.conclusion)
        })
        .collect();
    let (status, conclusion) = if states.iter().any(|s| s.0 != "completed") {
        let running = states.iter().any(|s| s.0 == "in_progress");
        (if running { "in_progress" } else { "queued" }, None)
    } else if let Some(failed) = states.iter().filter_map(|s| s.1).find(|c| *c != "success") {
        ("completed", Some(failed))
    } else {
        ("completed", Some("success"))
    };
    let prs: Vec<Value> = r
        .pulls
        .values()
        .filter(|p| p.open && p.head_sha == run.head_sha)
        .map(|p| json!({ "number": p.number, "head": { "ref": p.head_ref, "sha": p.head_sha }, "base": { "ref": p.base_ref } }))
        .collect();
    json!({
        "id": run.id,
        "name": run.name,
        "node_id": format!("WFR_kwDO{}", run.id),
        "head_branch": run.head_branch,
        "head_sha": run.head_sha,
        "run_number": run.run_number,
        "run_attempt": run.run_attempt,
        "event": "pull_request",
        "status": status,
        "conclusion": conclusion,
        "check_suite_id": run.suite_id,
        "url": format!("{}/repos/{full}/actions/runs/{}", ctx.base_url, run.id),
        "html_url": format!("{}/{full}/actions/runs/{}", ctx.base_url, run.id),
        "jobs_url": format!("{}/repos/{full}/actions/runs/{}/jobs", ctx.base_url, run.id),
        "logs_url": format!("{}/repos/{full}/actions/runs/{}/logs", ctx.base_url, run.id),
        "rerun_url": format!("{}/repos/{full}/actions/runs/{}/rerun", ctx.base_url, run.id),
        "pull_requests": prs,
        "created_at": ts(run.created_at),
        "updated_at": ts(run.updated_at),
        "run_started_at": ts(run.created_at),
    })
}

/// The job's log once it completed: timestamped lines as the runner writes them.
pub fn log_text(r: &GhRepo, job: &WorkflowJob) -> Option<String> {
    let progress = r.job_progress(job.id);
    let (status, conclusion, started, completed) = (
        progress.status,
        progress.conclusion,
        progress.started_at,
        progress.completed_at,
    );
    if status != "completed" {
        return None;
    }
    let start = ts(started.unwrap_or(job.created_at));
    let end = ts(completed.unwrap_or(job.created_at));
    let mut lines = vec![
        format!("{start} Current runner version: '2.321.0'"),
        format!("{start} ##[group]Run make {}", job.name),
        format!("{start} make {}", job.name),
        format!("{start} ##[endgroup]"),
    ];
    for line in job.output.lines() {
        lines.push(format!("{end} {line}"));
    }
    match conclusion {
        Some("success") => {}
        Some("failure") => lines.push(format!(
            "{end} ##[error]Process completed with exit code 1."
        )),
        _ => lines.push(format!("{end} ##[error]The operation was canceled.")),
    }
    lines.push(format!("{end} Cleaning up orphan processes"));
    Some(lines.join("\n") + "\n")
}

/// The short-lived log URL the API redirects to.
pub fn log_url(ctx: &Ctx, r: &GhRepo, job_id: u64) -> String {
    let expires = ctx.now.unix_timestamp() + LOG_URL_TTL_SECONDS;
    let full = r.full_name();
    format!(
        "{}/_logs/{full}/jobs/{job_id}?expires={expires}&sig={}",
        ctx.base_url,
        log_signature(&full, job_id, expires)
    )
}
