//! GitHub Actions transitions: a run of the scripted workflow per new head, re-running a job
//! (a new attempt of its run), and the `workflow_job` webhooks as the check ticker moves the
//! jobs' check runs along.
//!
//! A failing job's conclusion is the spec's `reason` when that is a job conclusion GitHub uses
//! for failures (`timed_out`, `cancelled`), else `failure`; its failing step is `Run <name>`.

use crate::ci::{JobOutcome, JobSpec};
use crate::github::events;
use crate::github::model::actions::{WorkflowJob, WorkflowRun};
use crate::github::model::{CheckKind, CheckRun, CheckScript, CheckSuite, GhRepo};
use crate::github::{Ctx, Env};

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
    events::workflow_job(env, ctx, r, id, "queued");
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
        .any(|j| r.job_progress(j.id).status != "completed");
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
            events::workflow_job(env, ctx, r, *id, action);
        }
    }
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
}
