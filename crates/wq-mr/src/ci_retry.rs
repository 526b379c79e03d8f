//! The CI retry herder in the `mr` type (DDR-47, DDR-48): failed jobs
//! reported by job webhooks (GitLab Job Hooks, GitHub `workflow_job` and
//! Actions check runs), or found by a reconcile that reads a failed head
//! pipeline whose failed jobs no webhook reported (GitLab does not
//! redeliver a lost hook), are collected in the `needs_ci_retry`
//! dimension's `jobs` list; `retry_ci_jobs` judges them with the matcher
//! engine (`wq-herder`) and retries the transient ones when their delay has
//! passed.
//!
//! The list is the dimension's detail, so the API (and the dashboard) shows
//! every job with what was decided and which matcher decided it. Each job
//! is in one [`JobState`]; `pending` and `scheduled` ask for work:
//!
//! ```mermaid
//! stateDiagram-v2
//!     [*] --> pending: a job webhook reports a failed job, or a reconcile finds it
//!     pending --> scheduled: a retry matcher matched
//!     scheduled --> retried: not_before passed, the forge retried it
//!     pending --> reported: a report matcher matched
//!     pending --> limit_reached: the matcher's retry limit is used up
//!     pending --> no_match: no matcher matched
//!     pending --> superseded: not the head pipeline's (head commit's) job
//!     scheduled --> superseded
//!     pending --> already_retried: a newer attempt exists
//!     scheduled --> already_retried
//!     pending --> not_failed: the job is no longer failed
//!     scheduled --> not_failed
//!     pending --> disabled: ci_retry turned off
//!     scheduled --> disabled
//!     pending --> error: the forge refused its trace or retry
//!     scheduled --> error
//! ```
//!
//! A transient forge error leaves a job open with a later `not_before`;
//! every state but `pending` and `scheduled` is final.
//!
//! Safety (never retry what should not be): a job that is not of the
//! change request's current head is `superseded`, read from the forge when
//! the executor runs. What "current" means is the forge's
//! ([`CiJobs::head_check`]): on GitLab the job's pipeline is the merge
//! request's head pipeline; on GitHub, whose pull requests have no head
//! pipeline (a workflow run is per commit), the job ran on the pull
//! request's head commit. A job that already has a newer
//! attempt (retried by a person, or by an earlier run whose outcome was
//! lost) is `already_retried`; one that is no longer failed is
//! `not_failed`. Each pipeline's (GitHub: workflow run's) job list is read
//! once per run and serves its jobs' checks; a trace is downloaded only
//! when a matcher needs it. Each retry is asked for only while the run
//! still holds the item (`RetryRun::still_held`, read right before the call): a run
//! that stalled past its lease (a slow trace, a stopped process) leaves the
//! job to the run that holds the item now, which reads the job list afresh
//! and retries it once. Each retry the forge answered is recorded
//! (`forge.job_retried`, `RetryRun::job_retried`) right after the call,
//! in its own transaction: it happened, so the trail keeps it even when the
//! run's outcome is refused because its lease ran out meanwhile.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use wq_core::{DimensionUpdate, EventResult, ExecError, ExecOutcome, ItemView};

use wq_forge::{CiHeadCheck, CiJob, CiJobs, Forge};
use wq_herder::{Herder, JobFacts, Preliminary, Verdict};

use crate::dims::{NEEDS_CI_RETRY, NEEDS_DASHBOARD};
use crate::errors::forge_failure;
use crate::store::MrDetails;

/// Jobs kept in the list; the oldest settled ones go first.
const MAX_TRACKED_JOBS: usize = 100;
/// Decided jobs the status note lists (the newest).
const MAX_NOTE_LINES: usize = 10;

/// What was decided about one failed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Reported, not judged yet.
    Pending,
    /// A matcher said retry; waiting for `not_before`.
    Scheduled,
    /// Retried; `retried_as` is the new job.
    Retried,
    /// A matcher with `action: report` matched: a known problem a retry
    /// does not fix.
    Reported,
    /// A retry matcher matched but the job's name was retried
    /// `retry_limit` times in this pipeline already.
    LimitReached,
    /// No matcher matched: a genuine failure.
    NoMatch,
    /// Not of the change request's current head: its pipeline is no longer
    /// the head pipeline (GitLab), or its commit no longer the head commit
    /// (GitHub).
    Superseded,
    /// A newer attempt of the job exists already.
    AlreadyRetried,
    /// The job is no longer failed.
    NotFailed,
    /// CI retry was turned off for the item.
    Disabled,
    /// The forge refused a step for this job (the retry, or its trace):
    /// `reason` says which and why. Not tried again.
    Error,
}

impl JobState {
    fn is_open(self) -> bool {
        matches!(self, Self::Pending | Self::Scheduled)
    }
}

/// One job in the `needs_ci_retry` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedJob {
    pub id: u64,
    pub name: String,
    /// The GitLab pipeline, or the GitHub Actions workflow run.
    pub pipeline_id: u64,
    /// The commit the job ran on, when the forge said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_sha: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(default)]
    pub failure_reason: Option<String>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    pub state: JobState,
    /// The matcher that decided (`scheduled`, `retried`, `reported`,
    /// `limit_reached`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// When a scheduled retry is due.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub not_before: Option<OffsetDateTime>,
    /// The new job a retry created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_as: Option<u64>,
    /// Retries of this job's name in its pipeline before this attempt.
    #[serde(default)]
    pub retry_count: u32,
    /// For people: why this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl TrackedJob {
    /// Open and not waiting for a later `not_before`.
    fn is_due(&self, now: OffsetDateTime) -> bool {
        self.state.is_open() && self.not_before.is_none_or(|t| t <= now)
    }
}

/// The `needs_ci_retry` dimension's detail.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiRetryDetail {
    #[serde(default)]
    pub jobs: Vec<TrackedJob>,
}

impl CiRetryDetail {
    pub(crate) fn of(view: &ItemView) -> Self {
        view.dimension(NEEDS_CI_RETRY, "")
            .and_then(|row| serde_json::from_value(row.detail.clone()).ok())
            .unwrap_or_default()
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The dimension row for this list: open while a job is pending or
    /// scheduled; due now when an open job is, else at the earliest
    /// `not_before`.
    fn update(&self, now: OffsetDateTime) -> DimensionUpdate {
        let open: Vec<&TrackedJob> = self.jobs.iter().filter(|j| j.state.is_open()).collect();
        let row = DimensionUpdate::new(NEEDS_CI_RETRY, !open.is_empty()).detail(self.to_json());
        if open.iter().any(|j| j.is_due(now)) {
            return row;
        }
        match open.iter().filter_map(|j| j.not_before).min() {
            Some(due) => row.pending_until(due),
            None => row,
        }
    }

    /// The status note's section on decided jobs (newest last), empty when
    /// there is nothing to say. Jobs that needed no decision (superseded,
    /// already retried, passed meanwhile) are left out.
    pub(crate) fn note_section(&self) -> String {
        let lines: Vec<String> = self
            .jobs
            .iter()
            .filter_map(|job| {
                let name = format!("`{}` (job {})", job.name, job.id);
                let matcher = job
                    .matcher
                    .as_deref()
                    .map(|m| format!(" by matcher `{m}`"))
                    .unwrap_or_default();
                let line = match job.state {
                    JobState::Retried => match job.retried_as {
                        Some(new) => format!("{name}: retried{matcher} as job {new}"),
                        None => format!("{name}: retried{matcher}"),
                    },
                    JobState::Scheduled => format!(
                        "{name}: will be retried{matcher} after {}",
                        job.not_before
                            .and_then(|t| t
                                .format(&time::format_description::well_known::Rfc3339)
                                .ok())
                            .unwrap_or_else(|| "its delay".into())
                    ),
                    JobState::Reported
                    | JobState::LimitReached
                    | JobState::NoMatch
                    | JobState::Error => format!(
                        "{name}: not retried: {}",
                        job.reason.as_deref().unwrap_or("no rule applies")
                    ),
                    JobState::Pending
                    | JobState::Superseded
                    | JobState::AlreadyRetried
                    | JobState::NotFailed
                    | JobState::Disabled => return None,
                };
                Some(format!("- {line}"))
            })
            .collect();
        if lines.is_empty() {
            return String::new();
        }
        let shown = &lines[lines.len().saturating_sub(MAX_NOTE_LINES)..];
        format!("\n\nFailed CI jobs:\n{}", shown.join("\n"))
    }

    /// Drops the oldest settled jobs beyond [`MAX_TRACKED_JOBS`].
    fn trim(&mut self) {
        while self.jobs.len() > MAX_TRACKED_JOBS {
            match self.jobs.iter().position(|j| !j.state.is_open()) {
                Some(index) => {
                    self.jobs.remove(index);
                }
                None => break,
            }
        }
    }
}

/// A failed job as a Job webhook reported it.
pub(crate) struct ReportedJob {
    pub pipeline_id: u64,
    pub job_id: u64,
    pub name: String,
    pub stage: Option<String>,
    pub status: String,
    pub failure_reason: Option<String>,
    pub finished_at: Option<OffsetDateTime>,
    pub head_sha: Option<String>,
}

/// The event side: add a failed job of the (possibly new) head pipeline to
/// the list, one event per job. Writes nothing itself.
pub(crate) fn on_job(details: &MrDetails, view: &ItemView, job: ReportedJob) -> EventResult {
    let id = view.item.id;
    if job.status != "failed" {
        return EventResult::ignored();
    }
    if !details.spec.automation.ci_retry {
        tracing::debug!(item = %id, job = job.job_id, "ci_retry is off for the item; failed job not tracked");
        return EventResult::ignored();
    }
    // Pipeline ids only grow: a job of a pipeline older than the recorded
    // head is of a superseded pipeline. A newer one may be the new head not
    // recorded yet; the executor checks against a fresh read.
    if details
        .head_pipeline_id
        .is_some_and(|head| job.pipeline_id < head)
    {
        tracing::info!(item = %id, job = job.job_id, pipeline = job.pipeline_id, "failed job of a superseded pipeline ignored");
        return EventResult::ignored();
    }
    let mut detail = CiRetryDetail::of(view);
    if detail.jobs.iter().any(|j| j.id == job.job_id) {
        return EventResult::ignored();
    }
    detail.jobs.push(TrackedJob {
        id: job.job_id,
        name: job.name,
        pipeline_id: job.pipeline_id,
        head_sha: job.head_sha,
        stage: job.stage,
        failure_reason: job.failure_reason,
        finished_at: job.finished_at,
        state: JobState::Pending,
        matcher: None,
        not_before: None,
        retried_as: None,
        retry_count: 0,
        reason: None,
    });
    detail.trim();
    EventResult::ignored().with_dimension(detail.update(view.now))
}

/// The reconcile side, for when a Job webhook was lost (GitLab does not
/// redeliver): the failed jobs of the head pipeline a read found failed,
/// as [`on_job`] would have added them. `None` when every failed job is
/// tracked already (or has a newer attempt, or ci_retry is off).
pub(crate) fn from_head_pipeline(
    details: &MrDetails,
    view: &ItemView,
    listed: &[CiJob],
) -> Option<DimensionUpdate> {
    if !details.spec.automation.ci_retry {
        return None;
    }
    let mut detail = CiRetryDetail::of(view);
    let before = detail.jobs.len();
    for job in listed
        .iter()
        .filter(|job| job.status == "failed" && !job.retried)
    {
        if detail.jobs.iter().any(|tracked| tracked.id == job.id) {
            continue;
        }
        tracing::info!(item = %view.item.id, job = job.id, pipeline = job.pipeline_id, "failed job found by a read of the head pipeline");
        detail.jobs.push(TrackedJob {
            id: job.id,
            name: job.name.clone(),
            pipeline_id: job.pipeline_id,
            head_sha: job.head_sha.clone(),
            stage: job.stage.clone(),
            failure_reason: job.failure_reason.clone(),
            finished_at: job.finished_at,
            state: JobState::Pending,
            matcher: None,
            not_before: None,
            retried_as: None,
            retry_count: 0,
            reason: None,
        });
    }
    if detail.jobs.len() == before {
        return None;
    }
    detail.trim();
    Some(detail.update(view.now))
}

/// How long a job of a pipeline newer than the change request's head
/// pipeline waits for the forge to show it as the head (GitLab records a
/// new head pipeline a moment after it starts) before it counts as
/// superseded.
const NEW_PIPELINE_GRACE: time::Duration = time::Duration::minutes(10);
/// When a job whose step met a transient forge error is tried again (at
/// least; a longer `Retry-After` wins).
const JOB_BACKOFF: time::Duration = time::Duration::minutes(1);

/// What a CI retry asks of the run making it.
#[async_trait::async_trait]
pub(crate) trait RetryRun: Sync {
    /// Whether the run still holds its item (its claim is the item's last
    /// and has not expired): asked right before each job retry.
    async fn still_held(&self) -> Result<bool, ExecError>;
    /// Records `forge.job_retried` (`metadata`: the job and the forge's
    /// answer) in its own transaction, right after the call, whether or not
    /// the run still holds the item: the retry happened.
    async fn job_retried(&self, metadata: serde_json::Value) -> Result<(), ExecError>;
}

/// `retry_ci_jobs`: judge the pending jobs, retry the due ones. A forge
/// error on one job's step (its trace, its retry) is that job's: a refusal
/// settles it as `error`, a transient error postpones it and the jobs after
/// it; either way the decisions already made in this run are kept. A run
/// that no longer holds the item (`run`) retries nothing more and fails
/// transiently: its outcome would not be written, and the run that holds
/// the item decides again. Each retry made is on the trail already
/// ([`RetryRun::job_retried`]).
pub(crate) async fn retry_ci_jobs(
    herder: &Herder,
    forge: &dyn Forge,
    details: &MrDetails,
    view: &ItemView,
    run: &dyn RetryRun,
    now: OffsetDateTime,
) -> Result<ExecOutcome, ExecError> {
    let before = CiRetryDetail::of(view);
    let mut detail = before.clone();
    let ctx = Judging {
        herder,
        run,
        item: view.item.id,
        now,
    };
    judge_all(&ctx, forge, details, &mut detail).await?;
    let outcome = ExecOutcome::done().with_dimension(detail.update(now));
    // The status note says why jobs were (not) retried: refresh it when
    // that changed.
    Ok(if detail.note_section() != before.note_section() {
        outcome.with_dimension(DimensionUpdate::new(NEEDS_DASHBOARD, true))
    } else {
        outcome
    })
}

/// What every job's judgement of one run shares.
struct Judging<'a> {
    herder: &'a Herder,
    run: &'a dyn RetryRun,
    item: wq_core::ItemId,
    now: OffsetDateTime,
}

async fn judge_all(
    ctx: &Judging<'_>,
    forge: &dyn Forge,
    details: &MrDetails,
    detail: &mut CiRetryDetail,
) -> Result<(), ExecError> {
    let now = ctx.now;
    let project = details.spec.project.as_str();
    if !details.spec.automation.ci_retry {
        for job in detail.jobs.iter_mut().filter(|j| j.state.is_open()) {
            job.state = JobState::Disabled;
            job.reason = Some("ci_retry is off for this item".into());
        }
        return Ok(());
    }
    if !detail.jobs.iter().any(|j| j.is_due(now)) {
        return Ok(());
    }
    // The head now, not as last recorded: a force-push may have superseded
    // the job's pipeline or commit since it failed.
    let change = match details.mr_number {
        Some(number) => Some(
            forge
                .get_change(project, number)
                .await
                .map_err(|e| forge_failure("reading the merge request", e))?,
        ),
        None => None,
    };
    let head_pipeline = change.as_ref().and_then(|c| c.pipeline_id);
    let head_sha = change.as_ref().and_then(|c| c.head_sha.as_deref());
    let Some(ci) = forge.ci_jobs() else {
        for job in detail.jobs.iter_mut().filter(|j| j.state.is_open()) {
            job.state = JobState::Error;
            job.not_before = None;
            job.reason = Some(format!(
                "listing the pipeline's jobs failed: the {} client offers no CI jobs",
                forge.kind().as_str()
            ));
        }
        return Ok(());
    };
    let head_check = ci.head_check();
    for job in detail.jobs.iter_mut().filter(|j| j.state.is_open()) {
        match head_check {
            CiHeadCheck::HeadPipeline => check_pipeline(job, head_pipeline, now),
            CiHeadCheck::HeadSha => check_head_sha(job, head_sha),
        }
    }
    // Only jobs of the head are due now: one read of each of their
    // pipelines' job lists serves every job's safety check.
    let mut listed: BTreeMap<u64, Vec<CiJob>> = BTreeMap::new();
    for job in detail.jobs.iter().filter(|j| j.is_due(now)) {
        if listed.contains_key(&job.pipeline_id) {
            continue;
        }
        let jobs = ci
            .pipeline_jobs(project, job.pipeline_id)
            .await
            .map_err(|e| forge_failure("listing the pipeline's jobs", e))?;
        listed.insert(job.pipeline_id, jobs);
    }
    let mut postponed: Option<OffsetDateTime> = None;
    for job in detail.jobs.iter_mut().filter(|j| j.is_due(now)) {
        if let Some(until) = postponed {
            job.not_before = Some(until);
            continue;
        }
        let jobs = listed
            .get(&job.pipeline_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if let Err(failure) = judge(ctx, ci, project, jobs, job).await {
            let failure = match failure {
                Stop::Step(failure) => failure,
                Stop::Run(error) => return Err(error),
            };
            if failure.error.is_transient() {
                let wait = failure
                    .error
                    .retry_after
                    .and_then(|after| time::Duration::try_from(after).ok())
                    .map_or(JOB_BACKOFF, |after| after.max(JOB_BACKOFF));
                tracing::warn!(job = job.id, error = %failure.error, "CI job step postponed");
                postponed = Some(now + wait);
                job.not_before = postponed;
                job.reason = Some(format!(
                    "{} will be tried again: {}",
                    failure.step, failure.error
                ));
            } else {
                tracing::warn!(job = job.id, error = %failure.error, "CI job step refused by the forge");
                job.state = JobState::Error;
                job.not_before = None;
                job.reason = Some(format!("{} failed: {}", failure.step, failure.error));
            }
        }
    }
    Ok(())
}

/// Settles an open job whose pipeline is not the head pipeline: an older
/// pipeline's job is `superseded`; a newer one, when due, waits (up to
/// [`NEW_PIPELINE_GRACE`] after it finished) for the forge to show its
/// pipeline as the head, then counts as superseded.
fn check_pipeline(job: &mut TrackedJob, head: Option<u64>, now: OffsetDateTime) {
    if Some(job.pipeline_id) == head {
        return;
    }
    let newer = head.is_none_or(|head| job.pipeline_id > head);
    if newer && !job.is_due(now) {
        return;
    }
    // Without a finish time there is nothing to count the grace from.
    let waited_enough = job
        .finished_at
        .is_none_or(|at| now >= at + NEW_PIPELINE_GRACE);
    if newer && !waited_enough {
        job.not_before = Some(now + JOB_BACKOFF);
        job.reason = Some(format!(
            "waiting for pipeline {} to show as the head pipeline",
            job.pipeline_id
        ));
        return;
    }
    job.state = JobState::Superseded;
    job.not_before = None;
    job.reason = Some(match head {
        Some(head) => format!(
            "pipeline {} is no longer the head pipeline ({head})",
            job.pipeline_id
        ),
        None => format!(
            "pipeline {} did not become the head pipeline",
            job.pipeline_id
        ),
    });
}

/// Settles an open job that did not run on the change request's head
/// commit as `superseded` (GitHub: a workflow run is per commit, and a pull
/// request's head moves at once with a push). A job whose commit is not
/// known cannot be shown to be current, so it is settled too.
fn check_head_sha(job: &mut TrackedJob, head: Option<&str>) {
    let reason = match (job.head_sha.as_deref(), head) {
        (Some(sha), Some(head)) if sha == head => return,
        (Some(sha), Some(head)) => {
            format!("commit {sha} is no longer the head commit ({head})")
        }
        (Some(sha), None) => format!("commit {sha} is not the head commit (none is known)"),
        (None, _) => "the job's commit is unknown, so it cannot be the head commit's".to_owned(),
    };
    job.state = JobState::Superseded;
    job.not_before = None;
    job.reason = Some(reason);
}

/// A forge error on one job's step.
struct StepFailure {
    step: &'static str,
    error: wq_forge::ForgeError,
}

/// Why a job's judgement stopped short.
enum Stop {
    /// A forge error on the job's step: the job's own.
    Step(StepFailure),
    /// The run no longer holds the item, or could not tell or record a
    /// retry made: the whole action ends, retrying nothing more.
    Run(ExecError),
}

impl From<StepFailure> for Stop {
    fn from(failure: StepFailure) -> Self {
        Self::Step(failure)
    }
}

/// One due job: safety checks on the listed jobs, the verdict (reusing a
/// scheduled one), the retry when due.
async fn judge(
    ctx: &Judging<'_>,
    ci: &dyn CiJobs,
    project: &str,
    listed: &[CiJob],
    job: &mut TrackedJob,
) -> Result<(), Stop> {
    let (herder, now) = (ctx.herder, ctx.now);
    let Some(current) = listed.iter().find(|j| j.id == job.id) else {
        job.state = JobState::Superseded;
        job.reason = Some("the job is not in its pipeline's job list".into());
        return Ok(());
    };
    let newer = listed
        .iter()
        .filter(|j| j.name == job.name && j.id > job.id)
        .map(|j| j.id)
        .max();
    if current.retried || newer.is_some() {
        job.state = JobState::AlreadyRetried;
        job.retried_as = job.retried_as.or(newer);
        job.not_before = None;
        job.reason = Some("a newer attempt of this job exists".into());
        return Ok(());
    }
    if current.status != "failed" {
        job.state = JobState::NotFailed;
        job.not_before = None;
        job.reason = Some(format!("the job is {} now", current.status));
        return Ok(());
    }
    let retry_count = listed
        .iter()
        .filter(|j| j.name == job.name && j.id < job.id)
        .count();
    job.retry_count = u32::try_from(retry_count).unwrap_or(u32::MAX);
    if job.failure_reason.is_none() {
        job.failure_reason = current.failure_reason.clone();
    }
    if job.finished_at.is_none() {
        job.finished_at = current.finished_at;
    }
    if job.state == JobState::Pending {
        let facts = JobFacts {
            id: job.id,
            name: job.name.clone(),
            status: current.status.clone(),
            failure_reason: job.failure_reason.clone(),
            retry_count: job.retry_count,
            finished_at: job.finished_at,
        };
        let verdict = match herder.prepare(&facts) {
            Preliminary::Decided(verdict) => verdict,
            Preliminary::NeedsTrace(_) => {
                let trace = ci
                    .job_trace(project, job.id)
                    .await
                    .map_err(|error| StepFailure {
                        step: "downloading the job's trace",
                        error,
                    })?;
                herder.evaluate_with_trace(&facts, &trace)
            }
        };
        match verdict {
            Verdict::NoMatch => {
                crate::metrics::ci_retry(None, "no_match");
                job.state = JobState::NoMatch;
                job.reason = Some("no matcher matched: a genuine failure".into());
                return Ok(());
            }
            Verdict::Report { matcher } => {
                crate::metrics::ci_retry(Some(&matcher), "report");
                job.state = JobState::Reported;
                job.reason = Some(format!("matcher {matcher:?} reports this failure"));
                job.matcher = Some(matcher);
                return Ok(());
            }
            Verdict::LimitReached { matcher, limit } => {
                crate::metrics::ci_retry(Some(&matcher), "limit_reached");
                job.state = JobState::LimitReached;
                job.reason = Some(format!(
                    "retry limit {limit} of matcher {matcher:?} reached for this job in this pipeline"
                ));
                job.matcher = Some(matcher);
                return Ok(());
            }
            Verdict::Retry {
                matcher,
                delay,
                not_before,
            } => {
                crate::metrics::ci_retry(Some(&matcher), "retry");
                job.matcher = Some(matcher);
                job.state = JobState::Scheduled;
                job.reason = None;
                // Without a finish time the delay counts from now.
                let delay = time::Duration::try_from(delay).unwrap_or(time::Duration::MAX);
                job.not_before = Some(not_before.unwrap_or_else(|| now.saturating_add(delay)));
            }
        }
    }
    if job.not_before.is_some_and(|due| due > now) {
        return Ok(());
    }
    // The retry is this action's forge write: only under the run's lease.
    if !ctx.run.still_held().await.map_err(Stop::Run)? {
        tracing::warn!(item_id = %ctx.item, job = job.id, "not retrying CI job {}: the item is no longer held by this run", job.id);
        return Err(Stop::Run(ExecError::transient(format!(
            "item {} is no longer held by this run; not retrying CI job {}",
            ctx.item, job.id
        ))));
    }
    let new_job = ci
        .retry_job(project, job.id)
        .await
        .map_err(|error| StepFailure {
            step: "retrying the job",
            error,
        })?;
    let new_id = new_job.map(|new| new.id);
    tracing::info!(job = job.id, new_job = ?new_id, name = %job.name, matcher = ?job.matcher, "CI job retried");
    ctx.run
        .job_retried(serde_json::json!({
            "job_id": job.id,
            "name": job.name,
            "pipeline_id": job.pipeline_id,
            "matcher": job.matcher,
            "new_job_id": new_id,
        }))
        .await
        .map_err(Stop::Run)?;
    crate::metrics::ci_retry(job.matcher.as_deref(), "retried");
    job.state = JobState::Retried;
    job.retried_as = new_id;
    job.not_before = None;
    job.reason = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-30 12:00 UTC);

    fn job(pipeline_id: u64, state: JobState, finished_at: Option<OffsetDateTime>) -> TrackedJob {
        TrackedJob {
            id: 7,
            name: "unit".into(),
            pipeline_id,
            head_sha: None,
            stage: None,
            failure_reason: Some("runner_system_failure".into()),
            finished_at,
            state,
            matcher: None,
            not_before: None,
            retried_as: None,
            retry_count: 0,
            reason: None,
        }
    }

    #[test]
    fn an_older_pipelines_job_is_superseded_a_newer_one_waits_for_the_head() {
        let finished = Some(NOW - time::Duration::minutes(1));
        let mut old = job(10, JobState::Scheduled, finished);
        old.not_before = Some(NOW + time::Duration::hours(1));
        check_pipeline(&mut old, Some(11), NOW);
        assert_eq!(old.state, JobState::Superseded, "even before it is due");

        // The forge still shows the previous head: wait a minute.
        let mut newer = job(12, JobState::Pending, finished);
        check_pipeline(&mut newer, Some(11), NOW);
        assert_eq!(newer.state, JobState::Pending);
        assert_eq!(newer.not_before, Some(NOW + JOB_BACKOFF));
        assert!(!newer.is_due(NOW));
        // Still not the head after the grace: superseded.
        let later = NOW + NEW_PIPELINE_GRACE;
        check_pipeline(&mut newer, Some(11), later);
        assert_eq!(newer.state, JobState::Superseded);
        assert!(newer.reason.unwrap().contains("no longer the head"));

        let mut unknown = job(12, JobState::Pending, None);
        check_pipeline(&mut unknown, None, NOW);
        assert_eq!(
            unknown.state,
            JobState::Superseded,
            "without a finish time there is no grace to count"
        );

        let mut head = job(11, JobState::Pending, finished);
        check_pipeline(&mut head, Some(11), NOW);
        assert_eq!((head.state, head.not_before), (JobState::Pending, None));
    }

    #[test]
    fn a_job_of_another_commit_is_superseded_even_before_it_is_due() {
        let mut old = job(1, JobState::Scheduled, None);
        old.head_sha = Some("aaa".into());
        old.not_before = Some(NOW + time::Duration::hours(1));
        check_head_sha(&mut old, Some("bbb"));
        assert_eq!(old.state, JobState::Superseded);
        assert_eq!(old.not_before, None);
        assert!(
            old.reason
                .unwrap()
                .contains("no longer the head commit (bbb)")
        );

        let mut head = job(1, JobState::Pending, None);
        head.head_sha = Some("bbb".into());
        check_head_sha(&mut head, Some("bbb"));
        assert_eq!((head.state, head.reason), (JobState::Pending, None));

        let mut unknown = job(1, JobState::Pending, None);
        check_head_sha(&mut unknown, Some("bbb"));
        assert_eq!(
            unknown.state,
            JobState::Superseded,
            "an unknown commit is not the head"
        );
    }

    #[test]
    fn the_row_is_due_now_when_a_job_is_else_at_the_earliest_not_before() {
        let mut waiting = job(1, JobState::Pending, None);
        waiting.not_before = Some(NOW + time::Duration::minutes(1));
        let mut scheduled = job(1, JobState::Scheduled, None);
        scheduled.not_before = Some(NOW + time::Duration::minutes(5));
        let detail = CiRetryDetail {
            jobs: vec![waiting.clone(), scheduled.clone()],
        };
        let row = detail.update(NOW);
        assert_eq!(row.status, wq_core::DimensionStatus::True);
        assert_eq!(row.pending_until, Some(NOW + time::Duration::minutes(1)));

        let due = job(1, JobState::Pending, None);
        let detail = CiRetryDetail {
            jobs: vec![waiting, scheduled, due],
        };
        assert_eq!(detail.update(NOW).pending_until, None);

        let detail = CiRetryDetail {
            jobs: vec![job(1, JobState::Error, None)],
        };
        assert_eq!(detail.update(NOW).status, wq_core::DimensionStatus::False);
    }
}
