//! GitHub Actions data: the scripted workflow, its workflow runs and their jobs. A job is also
//! a check run of the Actions app with the same id, which holds its status.

use time::OffsetDateTime;

use super::GhRepo;
use crate::ci::JobSpec;
use crate::github::sign;

/// The slug of the GitHub Actions app (its check runs and suites).
pub const ACTIONS_APP_SLUG: &str = "github-actions";

/// The GitHub Actions app's id on github.com.
pub const ACTIONS_APP_ID: u64 = 15368;

/// How long a log URL is valid, in sim seconds (GitHub's expire after about a minute).
pub const LOG_URL_TTL_SECONDS: i64 = 60;

/// The key log URLs are signed with.
const LOG_SIGNING_KEY: &[u8] = b"forge-sim actions log url";

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

/// A job's progress, read from its check run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// queued | in_progress | completed
    pub status: &'static str,
    pub conclusion: Option<&'static str>,
    pub started_at: Option<OffsetDateTime>,
    pub completed_at: Option<OffsetDateTime>,
}

impl GhRepo {
    /// The job's progress (its check run's).
    pub fn job_progress(&self, job_id: u64) -> JobProgress {
        match self.check_runs.iter().find(|c| c.id == job_id) {
            Some(run) => JobProgress {
                status: run.status,
                conclusion: run.conclusion,
                started_at: (run.status != "queued").then_some(run.started_at),
                completed_at: run.completed_at,
            },
            None => JobProgress {
                status: "queued",
                conclusion: None,
                started_at: None,
                completed_at: None,
            },
        }
    }

    /// The run's jobs of every attempt, oldest first.
    pub fn run_jobs(&self, run_id: u64) -> Vec<&WorkflowJob> {
        self.actions
            .jobs
            .iter()
            .filter(|j| j.run_id == run_id)
            .collect()
    }

    /// The run's latest attempt of each job.
    pub fn latest_run_jobs(&self, run_id: u64) -> Vec<&WorkflowJob> {
        let mut out: Vec<&WorkflowJob> = Vec::new();
        for job in self.run_jobs(run_id) {
            match out.iter().position(|o| o.name == job.name) {
                Some(index) => out[index] = job,
                None => out.push(job),
            }
        }
        out
    }
}

/// The signature of a log URL for `job_id` valid until `expires` (Unix seconds).
pub fn log_signature(full_name: &str, job_id: u64, expires: i64) -> String {
    let message = format!("{}/{job_id}/{expires}", full_name.to_ascii_lowercase());
    let signed = sign::signature_256(LOG_SIGNING_KEY, message.as_bytes());
    signed.trim_start_matches("sha256=").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_signatures_bind_repo_job_and_expiry() {
        let sig = log_signature("Octo/App", 7, 100);
        assert_eq!(sig, log_signature("octo/app", 7, 100));
        assert_ne!(sig, log_signature("octo/app", 8, 100));
        assert_ne!(sig, log_signature("octo/app", 7, 101));
    }
}
