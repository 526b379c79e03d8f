//! Scripted checks: starting, re-running and progressing check runs and suites.

use crate::ci::JobOutcome;
use crate::github::events;
use crate::github::model::{CheckKind, CheckRun, CheckScript, CheckSuite, CommitStatus, GhRepo};
use crate::github::{Ctx, Env};

use super::actions;

/// Starts the repository's scripted checks and its Actions workflow on a commit (once per
/// commit).
pub fn start_checks(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    sha: &str,
    head_branch: Option<&str>,
) {
    // Set up by the scripted checks first, then the Actions workflow (it has its own suite).
    let scripted = !r.check_script.is_empty() && !r.check_suites.iter().any(|s| s.head_sha == sha);
    if scripted {
        start_scripted(r, env, ctx, sha, head_branch);
    }
    actions::start_run(r, env, ctx, sha, head_branch);
}

fn start_scripted(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, sha: &str, head_branch: Option<&str>) {
    let suite_id = env.next_id();
    r.check_suites.push(CheckSuite {
        id: suite_id,
        head_sha: sha.to_string(),
        head_branch: head_branch.map(str::to_string),
        completed_notified: false,
    });
    for script in r.check_script.clone() {
        add_run(r, env, ctx, sha, suite_id, script);
    }
}

fn add_run(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    sha: &str,
    suite_id: u64,
    script: CheckScript,
) -> u64 {
    let name = script.job.name.clone();
    let attempt = r
        .check_runs
        .iter()
        .filter(|c| c.head_sha == sha && c.name == name)
        .count() as u32
        + 1;
    let (planned, summary) = match &script.job.outcome {
        JobOutcome::Success => ("success", format!("{name} passed.")),
        JobOutcome::Fail { trace, .. } => ("failure", failure_summary(&name, trace)),
        JobOutcome::Flaky {
            fail_times, trace, ..
        } if attempt <= *fail_times => ("failure", failure_summary(&name, trace)),
        JobOutcome::Flaky { .. } => ("success", format!("{name} passed.")),
    };
    let id = env.next_id();
    let run = CheckRun {
        id,
        name: name.clone(),
        head_sha: sha.to_string(),
        kind: script.kind,
        status: "queued",
        conclusion: None,
        planned,
        summary,
        check_suite_id: suite_id,
        started_at: ctx.now,
        completed_at: None,
        script,
    };
    if run.kind == CheckKind::Status {
        let sid = env.next_id();
        let st = CommitStatus {
            id: sid,
            sha: sha.to_string(),
            context: name,
            state: "pending".into(),
            description: Some("In progress".into()),
            target_url: Some(format!("{}/{}/runs/{id}", ctx.base_url, r.full_name())),
            created_at: ctx.now,
            updated_at: ctx.now,
        };
        events::status(env, ctx, r, &st);
        r.statuses.push(st);
    }
    r.check_runs.push(run);
    if let Some(s) = r.check_suites.iter_mut().find(|s| s.id == suite_id) {
        s.completed_notified = false;
    }
    id
}

fn failure_summary(name: &str, trace: &str) -> String {
    if trace.is_empty() {
        format!("{name} failed: exit code 1")
    } else {
        format!("{name} failed: {trace}")
    }
}

/// Re-runs a check run (a new run of the same check on the same commit).
pub fn rerequest(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, run_id: u64) -> Option<u64> {
    let run = r.check_runs.iter().find(|c| c.id == run_id)?.clone();
    let id = add_run(
        r,
        env,
        ctx,
        &run.head_sha,
        run.check_suite_id,
        run.script.clone(),
    );
    Some(id)
}

/// Moves check runs along (queued, in progress, completed when due); whether any moved.
pub(super) fn progress_checks(r: &mut GhRepo, env: &mut Env, ctx: &Ctx) -> bool {
    let mut moved = false;
    let mut completed = Vec::new();
    let mut started = Vec::new();
    for run in r.check_runs.iter_mut().filter(|c| c.status != "completed") {
        // Each run is visible as queued, then in_progress for at least one tick each.
        if run.status == "queued" {
            run.status = "in_progress";
            run.started_at = ctx.now;
            started.push(run.id);
            moved = true;
            continue;
        }
        let due = run.started_at + time::Duration::seconds(run.script.job.duration_secs as i64);
        if ctx.now >= due {
            run.status = "completed";
            run.conclusion = Some(run.planned);
            run.completed_at = Some(ctx.now);
            completed.push(run.id);
        }
    }
    moved |= !completed.is_empty();
    actions::on_progress(r, env, ctx, &started, &completed);
    for id in completed {
        let Some(run) = r.check_runs.iter().find(|c| c.id == id).cloned() else {
            continue;
        };
        match run.kind {
            CheckKind::CheckRun => events::check_run(env, ctx, r, &run, "completed"),
            CheckKind::Status => {
                let sid = env.next_id();
                let st = CommitStatus {
                    id: sid,
                    sha: run.head_sha.clone(),
                    context: run.name.clone(),
                    state: run.planned.to_string(),
                    description: Some(run.summary.clone()),
                    target_url: Some(format!(
                        "{}/{}/runs/{}",
                        ctx.base_url,
                        r.full_name(),
                        run.id
                    )),
                    created_at: ctx.now,
                    updated_at: ctx.now,
                };
                events::status(env, ctx, r, &st);
                r.statuses.push(st);
            }
        }
    }
    // Suites whose runs are all complete.
    let done: Vec<u64> = r
        .check_suites
        .iter()
        .filter(|s| !s.completed_notified)
        .filter(|s| {
            r.check_runs
                .iter()
                .filter(|c| c.check_suite_id == s.id)
                .all(|c| c.status == "completed")
        })
        .map(|s| s.id)
        .collect();
    for id in done {
        moved = true;
        if let Some(s) = r.check_suites.iter_mut().find(|s| s.id == id) {
            s.completed_notified = true;
        }
        let has_runs = r
            .check_runs
            .iter()
            .any(|c| c.check_suite_id == id && c.kind == CheckKind::CheckRun);
        if has_runs {
            events::check_suite_completed(env, ctx, r, id);
        }
    }
    moved
}
