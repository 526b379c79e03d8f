//! CI jobs: a pipeline's jobs, a job's log tail, retrying a job (the
//! [`CiJobs`] capability).

use async_trait::async_trait;
use reqwest::Method;

use super::GitlabClient;
use super::http::Call;
use super::wire;
use crate::CiJobs;
use crate::error::ForgeResult;
use crate::http_util::TRACE_TAIL_BYTES;
use crate::model::CiJob;

#[async_trait]
impl CiJobs for GitlabClient {
    async fn pipeline_jobs(&self, project: &str, pipeline_id: u64) -> ForgeResult<Vec<CiJob>> {
        let id = pipeline_id.to_string();
        let call = Call::get(&["projects", project, "pipelines", &id, "jobs"])
            .query("include_retried", "true");
        let jobs: Vec<wire::Job> = self.http.list(call, "a list of jobs").await?;
        let had_field = jobs.iter().any(|job| job.retried.is_some());
        let mut jobs = jobs
            .into_iter()
            .map(|job| job.into_ci_job(Some(pipeline_id)))
            .collect::<ForgeResult<Vec<_>>>()?;
        wire::mark_retried(&mut jobs, had_field);
        Ok(jobs)
    }

    /// The log's last [`TRACE_TAIL_BYTES`], streamed (never read whole),
    /// from a line start when it was cut, invalid UTF-8 replaced.
    async fn job_trace(&self, project: &str, job_id: u64) -> ForgeResult<String> {
        let id = job_id.to_string();
        self.http
            .tail_text(
                &Call::get(&["projects", project, "jobs", &id, "trace"]),
                TRACE_TAIL_BYTES,
            )
            .await
    }

    async fn retry_job(&self, project: &str, job_id: u64) -> ForgeResult<Option<CiJob>> {
        let id = job_id.to_string();
        let job: wire::Job = self
            .http
            .json(
                &Call::new(Method::POST, &["projects", project, "jobs", &id, "retry"]),
                "a job",
            )
            .await?;
        job.into_ci_job(None).map(Some)
    }
}
