//! GitHub Actions workflow jobs as [`CiJobs`]: a workflow run is the
//! pipeline, its jobs of every attempt the pipeline's jobs.
//!
//! | call | requests |
//! |---|---|
//! | `pipeline_jobs` | `GET actions/runs/:run/jobs?filter=all` (one more per further page of 100) |
//! | `commit_jobs` | `GET actions/runs?head_sha=`, then `pipeline_jobs` per run |
//! | `job_trace` | `GET actions/jobs/:job/logs` (with the token; answers 302), then `GET` of its `Location` without the token, streamed |
//! | `retry_job` | `GET actions/jobs/:job`, `POST actions/jobs/:job/rerun` (201, no body), `GET actions/runs/:run/jobs?filter=latest` for the new attempt |
//!
//! A job's status and conclusion are mapped to GitLab's words (see
//! [`job_status`]) so the CI retry matchers judge both forges' jobs alike.

use async_trait::async_trait;
use reqwest::Method;
use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::GithubClient;
use super::http::{Call, MAX_PAGES, PER_PAGE, Repo};
use crate::CiJobs;
use crate::error::{ForgeError, ForgeResult};
use crate::http_util::{TRACE_TAIL_BYTES, null_default};
use crate::model::{CiHeadCheck, CiJob};

/// A workflow job (REST "Workflow jobs", the `workflow_job` webhook).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WorkflowJob {
    pub id: u64,
    pub run_id: u64,
    #[serde(default)]
    pub run_attempt: Option<u32>,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub head_sha: Option<String>,
    #[serde(default)]
    pub head_branch: Option<String>,
    #[serde(default)]
    pub workflow_name: Option<String>,
    #[serde(default)]
    pub completed_at: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub steps: Vec<Step>,
}

/// One step of a workflow job.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Step {
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default)]
    pub conclusion: Option<String>,
}

/// `GET actions/runs?head_sha=`: only the ids are read.
#[derive(Debug, Deserialize)]
struct RunList {
    #[serde(default, deserialize_with = "null_default")]
    workflow_runs: Vec<RunId>,
}

#[derive(Debug, Deserialize)]
struct RunId {
    id: u64,
}

/// `GET actions/runs/:run/jobs`.
#[derive(Debug, Deserialize)]
struct JobList {
    #[serde(default)]
    total_count: u64,
    #[serde(default, deserialize_with = "null_default")]
    jobs: Vec<WorkflowJob>,
}

/// A GitHub job's `status` and `conclusion` as GitLab's status word:
/// `completed` with `success` is `success`; `failure`, `timed_out` or
/// `startup_failure` is `failed`; `cancelled` is `canceled` (a person or a
/// newer run cancelled it: not tracked, though a matcher may name the
/// status); `skipped`/`neutral` is `skipped`; `action_required` is
/// `manual`. Not completed: `in_progress` is `running`, the waiting states
/// are `pending`.
pub fn job_status(status: &str, conclusion: Option<&str>) -> String {
    let word = match (status, conclusion) {
        ("completed", Some("success")) => "success",
        ("completed", Some("failure" | "timed_out" | "startup_failure")) => "failed",
        ("completed", Some("cancelled")) => "canceled",
        ("completed", Some("skipped" | "neutral")) => "skipped",
        ("completed", Some("action_required")) => "manual",
        ("completed", Some(other)) => other,
        ("completed", None) => "failed",
        ("in_progress", _) => "running",
        ("queued" | "waiting" | "requested" | "pending", _) => "pending",
        (other, _) => other,
    };
    word.to_owned()
}

impl WorkflowJob {
    /// The job's `failure_reason` for the matchers, when it did not pass:
    /// the conclusion when it says more than `failure` (`timed_out`,
    /// `cancelled`, `startup_failure`), else the name of the first failed
    /// step, else `failure`.
    pub(crate) fn failure_reason(&self) -> Option<String> {
        match self.conclusion.as_deref()? {
            "success" | "skipped" | "neutral" => None,
            "failure" => Some(
                self.steps
                    .iter()
                    .find(|step| step.conclusion.as_deref() == Some("failure"))
                    .map(|step| step.name.clone())
                    .filter(|name| !name.is_empty())
                    .unwrap_or_else(|| "failure".to_owned()),
            ),
            other => Some(other.to_owned()),
        }
    }

    pub(crate) fn status_word(&self) -> String {
        job_status(&self.status, self.conclusion.as_deref())
    }

    pub(crate) fn finished_at(&self) -> ForgeResult<Option<OffsetDateTime>> {
        match self.completed_at.as_deref() {
            None | Some("") => Ok(None),
            Some(text) => OffsetDateTime::parse(text, &Rfc3339)
                .map(Some)
                .map_err(|e| {
                    ForgeError::rejected(
                        None,
                        format!(
                            "job {}: completed_at {text:?} is not RFC 3339: {e}",
                            self.id
                        ),
                    )
                }),
        }
    }

    fn into_ci_job(self) -> ForgeResult<CiJob> {
        Ok(CiJob {
            id: self.id,
            status: self.status_word(),
            failure_reason: self.failure_reason(),
            finished_at: self.finished_at()?,
            stage: self.workflow_name.clone().filter(|w| !w.is_empty()),
            pipeline_id: self.run_id,
            retried: false,
            head_sha: self.head_sha.filter(|sha| !sha.is_empty()),
            name: self.name,
        })
    }
}

/// Marks every job with a job of the same name in a later attempt as
/// retried (GitHub has no `retried` field).
fn mark_retried(jobs: &[WorkflowJob], ci: &mut [CiJob]) {
    for (index, job) in jobs.iter().enumerate() {
        let attempt = job.run_attempt.unwrap_or(1);
        ci[index].retried = jobs.iter().any(|other| {
            other.name == job.name
                && (other.run_attempt.unwrap_or(1) > attempt
                    || (other.run_attempt == job.run_attempt && other.id > job.id))
        });
    }
}

impl GithubClient {
    /// Every page of a run's jobs with `filter` (`all` or `latest`).
    async fn run_jobs(
        &self,
        repo: &Repo<'_>,
        run_id: u64,
        filter: &str,
    ) -> ForgeResult<Vec<WorkflowJob>> {
        let run = run_id.to_string();
        let mut jobs = Vec::new();
        for page in 1..=MAX_PAGES {
            let call = Call::repo(Method::GET, repo, &["actions", "runs", &run, "jobs"])
                .query("filter", filter)
                .query("per_page", PER_PAGE.to_string())
                .query("page", page.to_string());
            let list: JobList = self.http.json(&call, "a list of workflow jobs").await?;
            let short = list.jobs.len() < PER_PAGE;
            jobs.extend(list.jobs);
            if short || jobs.len() as u64 >= list.total_count {
                return Ok(jobs);
            }
        }
        tracing::warn!(
            run = run_id,
            "more than {MAX_PAGES} pages of workflow jobs; reading the first"
        );
        Ok(jobs)
    }
}

#[async_trait]
impl CiJobs for GithubClient {
    fn head_check(&self) -> CiHeadCheck {
        CiHeadCheck::HeadSha
    }

    async fn pipeline_jobs(&self, project: &str, pipeline_id: u64) -> ForgeResult<Vec<CiJob>> {
        let repo = Repo::parse(project)?;
        let jobs = self.run_jobs(&repo, pipeline_id, "all").await?;
        let mut ci = jobs
            .iter()
            .cloned()
            .map(WorkflowJob::into_ci_job)
            .collect::<ForgeResult<Vec<_>>>()?;
        mark_retried(&jobs, &mut ci);
        Ok(ci)
    }

    /// The jobs of every workflow run of `sha` (one page of runs: a commit
    /// has a run per workflow and trigger, far fewer than a hundred).
    async fn commit_jobs(&self, project: &str, sha: &str) -> ForgeResult<Vec<CiJob>> {
        let repo = Repo::parse(project)?;
        let call = Call::repo(Method::GET, &repo, &["actions", "runs"])
            .query("head_sha", sha)
            .query("per_page", PER_PAGE.to_string());
        let runs: RunList = self.http.json(&call, "a list of workflow runs").await?;
        let mut all = Vec::new();
        for run in runs.workflow_runs {
            all.extend(self.pipeline_jobs(project, run.id).await?);
        }
        Ok(all)
    }

    /// GitHub answers 302 to a short-lived log URL on another host; that
    /// one redirect is followed without the token, and only the log's last
    /// [`TRACE_TAIL_BYTES`] are kept while it streams.
    async fn job_trace(&self, project: &str, job_id: u64) -> ForgeResult<String> {
        let repo = Repo::parse(project)?;
        let id = job_id.to_string();
        self.http
            .tail_behind_redirect(
                &Call::repo(Method::GET, &repo, &["actions", "jobs", &id, "logs"]),
                TRACE_TAIL_BYTES,
            )
            .await
    }

    async fn retry_job(&self, project: &str, job_id: u64) -> ForgeResult<Option<CiJob>> {
        let repo = Repo::parse(project)?;
        let id = job_id.to_string();
        let job: WorkflowJob = self
            .http
            .json(
                &Call::repo(Method::GET, &repo, &["actions", "jobs", &id]),
                "a workflow job",
            )
            .await?;
        self.http
            .send(&Call::repo(
                Method::POST,
                &repo,
                &["actions", "jobs", &id, "rerun"],
            ))
            .await?;
        let attempt = job.run_attempt.unwrap_or(1);
        // The re-run is done; the new attempt's job is only looked up.
        let latest = match self.run_jobs(&repo, job.run_id, "latest").await {
            Ok(latest) => latest,
            Err(error) => {
                tracing::warn!(job = job_id, %error, "job re-run; its new attempt not read");
                return Ok(None);
            }
        };
        latest
            .into_iter()
            .find(|new| {
                new.name == job.name && new.id != job.id && new.run_attempt.unwrap_or(1) > attempt
            })
            .map(WorkflowJob::into_ci_job)
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(value: serde_json::Value) -> WorkflowJob {
        serde_json::from_value(value).expect("a workflow job")
    }

    #[test]
    fn statuses_and_reasons_map_to_the_matchers_words() {
        let failed = job(serde_json::json!({
            "id": 2, "run_id": 1, "run_attempt": 1, "name": "unit",
            "status": "completed", "conclusion": "failure",
            "completed_at": "2026-11-30T12:00:00Z",
            "steps": [
                {"name": "Set up job", "conclusion": "success"},
                {"name": "Run tests", "conclusion": "failure"},
                {"name": "Complete job", "conclusion": "success"}
            ]
        }));
        assert_eq!(failed.status_word(), "failed");
        assert_eq!(failed.failure_reason().as_deref(), Some("Run tests"));
        let ci = failed.into_ci_job().expect("job");
        assert_eq!(ci.pipeline_id, 1);
        assert!(ci.finished_at.is_some());

        let timed_out = job(serde_json::json!({
            "id": 3, "run_id": 1, "status": "completed", "conclusion": "timed_out", "steps": null
        }));
        assert_eq!(timed_out.status_word(), "failed");
        assert_eq!(timed_out.failure_reason().as_deref(), Some("timed_out"));
        let no_steps = job(serde_json::json!({
            "id": 4, "run_id": 1, "status": "completed", "conclusion": "failure"
        }));
        assert_eq!(no_steps.failure_reason().as_deref(), Some("failure"));

        assert_eq!(job_status("completed", Some("cancelled")), "canceled");
        assert_eq!(job_status("completed", Some("success")), "success");
        assert_eq!(job_status("in_progress", None), "running");
        assert_eq!(job_status("queued", None), "pending");
        let passed = job(serde_json::json!({
            "id": 5, "run_id": 1, "status": "completed", "conclusion": "success"
        }));
        assert_eq!(passed.failure_reason(), None);
    }

    #[test]
    fn a_later_attempt_of_the_same_name_marks_the_job_retried() {
        let jobs = vec![
            job(serde_json::json!({"id": 10, "run_id": 1, "run_attempt": 1, "name": "unit"})),
            job(serde_json::json!({"id": 11, "run_id": 1, "run_attempt": 1, "name": "lint"})),
            job(serde_json::json!({"id": 12, "run_id": 1, "run_attempt": 2, "name": "unit"})),
        ];
        let mut ci: Vec<CiJob> = jobs
            .iter()
            .cloned()
            .map(|j| j.into_ci_job().expect("job"))
            .collect();
        mark_retried(&jobs, &mut ci);
        let retried: Vec<bool> = ci.iter().map(|j| j.retried).collect();
        assert_eq!(retried, [true, false, false]);
    }
}
