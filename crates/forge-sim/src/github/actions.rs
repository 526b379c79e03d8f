//! GitHub Actions: a repository's scripted workflow, its workflow runs and their jobs.
//!
//! Every new pull-request (or merge-group) head starts one workflow run of the scripted
//! workflow (one job per [`JobSpec`], outcomes as on the GitLab side: `success`, `fail`,
//! `flaky` counted per job name and commit). Each job is also a check run of the GitHub Actions
//! app with the same id, as on GitHub, so it counts for the pull request's checks; the check
//! ticker moves it along and [`on_progress`] sends the `workflow_job` webhooks
//! (`queued`, `in_progress`, `completed`).
//!
//! A failing job's conclusion is the spec's `reason` when that is a job conclusion GitHub
//! uses for failures (`timed_out`, `cancelled`), else `failure`; its failing step is
//! `Run <name>`. Re-running a job (`POST actions/jobs/{id}/rerun`) starts a new attempt of
//! the run with a new job of the same name. A job's log is served at a signed, expiring
//! `/_logs/...` URL that the API's `actions/jobs/{id}/logs` redirects to (302), like GitHub's
//! short-lived log URLs on another host: the log URL takes no credentials.

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::ci::{JobOutcome, JobSpec};
use crate::github::model::{CheckKind, CheckRun, CheckScript, CheckSuite, GhRepo};
use crate::github::{Ctx, Env, events, json as js, sign};

/// The slug of the GitHub Actions app (its check runs and suites).
pub const ACTIONS_APP_SLUG: &str = "github-actions";

/// The GitHub Actions app's id on github.com.
pub const ACTIONS_APP_ID: u64 = 15368;

/// How long a log URL is valid, in sim seconds (GitHub's expire after about a minute).
pub const LOG_URL_TTL_SECONDS: i64 = 60;

/// The key log URLs are signed with.
const LOG_SIGNING_KEY: &[u8] = b"forge-sim actions log url";

/// The conclusions a scripted failure may take (from the spec's `reason`); any other reason is
/// `failure`.
pub const FAILURE_CONCLUSIONS: [&str; 3] = ["failure", "timed_out", "cancelled"];

/// A repository's Actions state.
#[derive(Debug, Clone, Default)]
pub struct Actions {
    /// The workflow started for every new head; `None`: no workflow runs.
    pub workflow: Option<Workflow>,
    pub runs: Vec<WorkflowRun>,
    pub jobs: Vec<WorkflowJob>,
}

/// The scripted workflow: its name and jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workflow {
    pub name: String,
    pub jobs: Vec<JobSpec>,
}

/// One workflow run (all attempts).
#[derive(Debug, Clone)]
pub struct WorkflowRun {
    pub id: u64,
    pub name: String,
    pub run_number: u64,
    pub head_sha: String,
    pub head_branch: Option<String>,
    /// The latest attempt (1 until a job is re-run).
    pub run_attempt: u32,
    /// The check suite of the Actions app holding the jobs' check runs.
    pub suite_id: u64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// One job of one attempt of a workflow run; its status lives in the check run with its id.
#[derive(Debug, Clone)]
pub struct WorkflowJob {
    pub id: u64,
    pub run_id: u64,
    pub run_attempt: u32,
    pub name: String,
    pub head_sha: String,
    pub head_branch: Option<String>,
    /// `success`, `failure`, `timed_out` or `cancelled` once completed.
    pub planned: &'static str,
    /// The scripted log text (the failing step's output).
    pub output: String,
    pub created_at: OffsetDateTime,
}

impl Actions {
    pub fn job(&self, id: u64) -> Option<&WorkflowJob> {
        self.jobs.iter().find(|j| j.id == id)
    }

    pub fn run(&self, id: u64) -> Option<&WorkflowRun> {
        self.runs.iter().find(|r| r.id == id)
    }

    /// Whether the check suite belongs to a workflow run.
    pub fn owns_suite(&self, suite_id: u64) -> bool {
        self.runs.iter().any(|r| r.suite_id == suite_id)
    }
}

/// The GitHub Actions app object.
pub fn app(ctx: &Ctx) -> Value {
    json!({
        "id": ACTIONS_APP_ID,
        "slug": ACTIONS_APP_SLUG,
        "node_id": "MDM6QXBwMTUzNjg=",
        "name": "GitHub Actions",
        "owner": js::user(ctx, "github"),
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

/// Starts a run of the scripted workflow on `sha` (once per commit).
pub fn start_run(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, sha: &str, head_branch: Option<&str>) {
    let Some(workflow) = r.actions.workflow.clone() else {
        return;
    };
    if workflow.jobs.is_empty() || r.actions.runs.iter().any(|run| run.head_sha == sha) {
        return;
    }
    let suite_id = env.next_id();
    r.check_suites.push(CheckSuite {
        id: suite_id,
        head_sha: sha.to_string(),
        head_branch: head_branch.map(str::to_string),
        completed_notified: false,
    });
    let id = env.next_id();
    let run_number = r.actions.runs.len() as u64 + 1;
    r.actions.runs.push(WorkflowRun {
        id,
        name: workflow.name.clone(),
        run_number,
        head_sha: sha.to_string(),
        head_branch: head_branch.map(str::to_string),
        run_attempt: 1,
        suite_id,
        created_at: ctx.now,
        updated_at: ctx.now,
    });
    for spec in workflow.jobs {
        add_job(r, env, ctx, id, spec);
    }
}

/// Adds a job of the run's current attempt (and its check run); queues `workflow_job`
/// `queued`. Returns its id.
fn add_job(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, run_id: u64, spec: JobSpec) -> u64 {
    let Some(run) = r.actions.run(run_id).cloned() else {
        return 0;
    };
    let attempt = r
        .actions
        .jobs
        .iter()
        .filter(|j| j.head_sha == run.head_sha && j.name == spec.name)
        .count() as u32
        + 1;
    let (planned, output) = match &spec.outcome {
        JobOutcome::Success => ("success", String::new()),
        JobOutcome::Fail { reason, trace } => (conclusion(reason), trace.clone()),
        JobOutcome::Flaky {
            fail_times,
            reason,
            trace,
        } if attempt <= *fail_times => (conclusion(reason), trace.clone()),
        JobOutcome::Flaky { .. } => ("success", String::new()),
    };
    let id = env.next_id();
    let name = spec.name.clone();
    let job = WorkflowJob {
        id,
        run_id,
        run_attempt: run.run_attempt,
        name: name.clone(),
        head_sha: run.head_sha.clone(),
        head_branch: run.head_branch.clone(),
        planned,
        output,
        created_at: ctx.now,
    };
    r.check_runs.push(CheckRun {
        id,
        name: name.clone(),
        head_sha: run.head_sha.clone(),
        kind: CheckKind::CheckRun,
        status: "queued",
        conclusion: None,
        planned,
        summary: if planned == "success" {
            format!("{name} passed.")
        } else {
            format!("{name} failed: {planned}")
        },
        check_suite_id: run.suite_id,
        started_at: ctx.now,
        completed_at: None,
        script: CheckScript {
            job: spec,
            kind: CheckKind::CheckRun,
        },
    });
    if let Some(suite) = r.check_suites.iter_mut().find(|s| s.id == run.suite_id) {
        suite.completed_notified = false;
    }
    r.actions.jobs.push(job);
    emit_job(env, ctx, r, id, "queued");
    id
}

fn conclusion(reason: &str) -> &'static str {
    match reason {
        "timed_out" => "timed_out",
        "cancelled" => "cancelled",
        _ => "failure",
    }
}

/// Why a job cannot be re-run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RerunError {
    NotFound,
    /// A job of the run is still queued or running.
    RunInProgress,
}

/// Re-runs a completed job: a new attempt of its run with a new job of the same name.
pub fn rerun_job(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, job_id: u64) -> Result<u64, RerunError> {
    let job = r.actions.job(job_id).cloned().ok_or(RerunError::NotFound)?;
    let running = r
        .actions
        .jobs
        .iter()
        .filter(|j| j.run_id == job.run_id)
        .any(|j| status(r, j.id).0 != "completed");
    if running {
        return Err(RerunError::RunInProgress);
    }
    let spec = r
        .check_runs
        .iter()
        .find(|c| c.id == job_id)
        .map(|c| c.script.job.clone())
        .ok_or(RerunError::NotFound)?;
    if let Some(run) = r.actions.runs.iter_mut().find(|run| run.id == job.run_id) {
        run.run_attempt += 1;
        run.updated_at = ctx.now;
    }
    Ok(add_job(r, env, ctx, job.run_id, spec))
}

/// (status, conclusion, started_at, completed_at) of a job, from its check run.
fn status(
    r: &GhRepo,
    job_id: u64,
) -> (
    &'static str,
    Option<&'static str>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
) {
    match r.check_runs.iter().find(|c| c.id == job_id) {
        Some(run) => (
            run.status,
            run.conclusion,
            (run.status != "queued").then_some(run.started_at),
            run.completed_at,
        ),
        None => ("queued", None, None, None),
    }
}

/// Sends `workflow_job` `in_progress` / `completed` for the check runs the ticker moved that
/// are workflow jobs.
pub fn on_progress(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, started: &[u64], completed: &[u64]) {
    for (ids, action) in [(started, "in_progress"), (completed, "completed")] {
        for id in ids {
            let Some(run_id) = r.actions.job(*id).map(|j| j.run_id) else {
                continue;
            };
            if let Some(run) = r.actions.runs.iter_mut().find(|run| run.id == run_id) {
                run.updated_at = ctx.now;
            }
            emit_job(env, ctx, r, *id, action);
        }
    }
}

fn emit_job(env: &mut Env, ctx: &Ctx, r: &GhRepo, job_id: u64, action: &str) {
    let Some(job) = r.actions.job(job_id) else {
        return;
    };
    let payload = json!({ "action": action, "workflow_job": job_json(ctx, r, job) });
    events::emit(env, ctx, r, "workflow_job", payload);
}

/// The job's steps: `Set up job`, `Run <name>`, `Complete job`, as far as it got.
fn steps(r: &GhRepo, job: &WorkflowJob) -> Value {
    let (status, conclusion, started, completed) = status(r, job.id);
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
                "started_at": if step_status == "queued" { Value::Null } else { js::ts_opt(started) },
                "completed_at": if step_status == "completed" { js::ts_opt(completed) } else { Value::Null },
            })
        })
        .collect();
    Value::Array(steps)
}

/// A job as REST (`actions/jobs/{id}`, `actions/runs/{id}/jobs`) and the `workflow_job`
/// webhook render it.
pub fn job_json(ctx: &Ctx, r: &GhRepo, job: &WorkflowJob) -> Value {
    let full = r.full_name();
    let (status, conclusion, started, completed) = status(r, job.id);
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
        "created_at": js::ts(job.created_at),
        "started_at": js::ts_opt(started),
        "completed_at": js::ts_opt(completed),
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
    let jobs: Vec<&WorkflowJob> = latest_jobs(r, run.id);
    let states: Vec<_> = jobs.iter().map(|j| status(r, j.id)).collect();
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
        "created_at": js::ts(run.created_at),
        "updated_at": js::ts(run.updated_at),
        "run_started_at": js::ts(run.created_at),
    })
}

/// The run's jobs of every attempt, oldest first.
pub fn all_jobs(r: &GhRepo, run_id: u64) -> Vec<&WorkflowJob> {
    r.actions
        .jobs
        .iter()
        .filter(|j| j.run_id == run_id)
        .collect()
}

/// The run's latest attempt of each job.
pub fn latest_jobs(r: &GhRepo, run_id: u64) -> Vec<&WorkflowJob> {
    let mut out: Vec<&WorkflowJob> = Vec::new();
    for job in all_jobs(r, run_id) {
        match out.iter().position(|o| o.name == job.name) {
            Some(index) => out[index] = job,
            None => out.push(job),
        }
    }
    out
}

/// The job's log once it completed: timestamped lines as the runner writes them.
pub fn log_text(r: &GhRepo, job: &WorkflowJob) -> Option<String> {
    let (status, conclusion, started, completed) = status(r, job.id);
    if status != "completed" {
        return None;
    }
    let start = js::ts(started.unwrap_or(job.created_at));
    let end = js::ts(completed.unwrap_or(job.created_at));
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

/// The signature of a log URL for `job_id` valid until `expires` (Unix seconds).
pub fn log_signature(full_name: &str, job_id: u64, expires: i64) -> String {
    let message = format!("{}/{job_id}/{expires}", full_name.to_ascii_lowercase());
    let signed = sign::signature_256(LOG_SIGNING_KEY, message.as_bytes());
    signed.trim_start_matches("sha256=").to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_reasons_pick_the_conclusion() {
        assert_eq!(conclusion("timed_out"), "timed_out");
        assert_eq!(conclusion("cancelled"), "cancelled");
        assert_eq!(conclusion("script_failure"), "failure");
    }

    #[test]
    fn log_signatures_bind_repo_job_and_expiry() {
        let sig = log_signature("Octo/App", 7, 100);
        assert_eq!(sig, log_signature("octo/app", 7, 100));
        assert_ne!(sig, log_signature("octo/app", 8, 100));
        assert_ne!(sig, log_signature("octo/app", 7, 101));
    }
}
