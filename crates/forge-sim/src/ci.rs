//! Scripted CI shared by both forges: which jobs a pipeline has and how each one ends.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a scripted job ends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum JobOutcome {
    #[default]
    Success,
    /// Always fails with this `failure_reason` (e.g. `script_failure`, `runner_system_failure`,
    /// `stuck_or_timeout_failure`) and trace text.
    Fail {
        #[serde(default = "default_reason")]
        reason: String,
        #[serde(default)]
        trace: String,
    },
    /// Fails the first `fail_times` runs for a given commit sha, then passes.
    Flaky {
        fail_times: u32,
        #[serde(default = "default_reason")]
        reason: String,
        #[serde(default)]
        trace: String,
    },
}

fn default_reason() -> String {
    "script_failure".to_string()
}

/// Default sim duration of a job.
pub const DEFAULT_JOB_DURATION_SECS: u64 = 0;

/// One job of every pipeline.
///
/// JSON: `{"name": "unit", "stage": "test", "outcome": "success" | "fail" | "flaky",
/// "reason": "script_failure", "trace": "...", "fail_times": 1, "duration_secs": 0}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "JobSpecWire")]
pub struct JobSpec {
    pub name: String,
    pub stage: String,
    #[serde(flatten)]
    pub outcome: JobOutcome,
    /// Sim seconds from start to finish.
    pub duration_secs: u64,
}

#[derive(Deserialize)]
struct JobSpecWire {
    name: String,
    #[serde(default = "default_stage")]
    stage: String,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default = "default_reason")]
    reason: String,
    #[serde(default)]
    trace: String,
    #[serde(default)]
    fail_times: u32,
    #[serde(default)]
    duration_secs: u64,
}

impl TryFrom<JobSpecWire> for JobSpec {
    type Error = String;

    fn try_from(wire: JobSpecWire) -> Result<JobSpec, String> {
        let outcome = match wire.outcome.as_deref().unwrap_or("success") {
            "success" => JobOutcome::Success,
            "fail" | "failed" | "failure" => JobOutcome::Fail {
                reason: wire.reason,
                trace: wire.trace,
            },
            "flaky" => JobOutcome::Flaky {
                fail_times: wire.fail_times,
                reason: wire.reason,
                trace: wire.trace,
            },
            other => return Err(format!("unknown outcome {other:?} (success, fail, flaky)")),
        };
        Ok(JobSpec {
            name: wire.name,
            stage: wire.stage,
            outcome,
            duration_secs: wire.duration_secs,
        })
    }
}

fn default_stage() -> String {
    "test".to_string()
}

impl JobSpec {
    pub fn new(name: &str, outcome: JobOutcome) -> JobSpec {
        JobSpec {
            name: name.to_string(),
            stage: default_stage(),
            outcome,
            duration_secs: DEFAULT_JOB_DURATION_SECS,
        }
    }

    pub fn stage(mut self, stage: &str) -> JobSpec {
        self.stage = stage.to_string();
        self
    }

    pub fn duration_secs(mut self, secs: u64) -> JobSpec {
        self.duration_secs = secs;
        self
    }
}

impl JobOutcome {
    pub fn fail(reason: &str, trace: &str) -> JobOutcome {
        JobOutcome::Fail {
            reason: reason.to_string(),
            trace: trace.to_string(),
        }
    }

    pub fn flaky(fail_times: u32, reason: &str, trace: &str) -> JobOutcome {
        JobOutcome::Flaky {
            fail_times,
            reason: reason.to_string(),
            trace: trace.to_string(),
        }
    }
}

/// A project's CI: the jobs of every pipeline (stages run in first-seen order) and the
/// per-(job, sha) run counts that drive flaky outcomes.
#[derive(Debug, Clone, Default)]
pub struct CiScript {
    pub jobs: Vec<JobSpec>,
    runs: BTreeMap<(String, String), u32>,
}

/// The decided result of one job run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobResult {
    pub success: bool,
    pub failure_reason: Option<String>,
    pub trace: String,
}

impl CiScript {
    /// One `test` job that succeeds.
    pub fn default_jobs() -> Vec<JobSpec> {
        vec![JobSpec::new("test", JobOutcome::Success)]
    }

    pub fn new(jobs: Vec<JobSpec>) -> CiScript {
        CiScript {
            jobs,
            runs: BTreeMap::new(),
        }
    }

    /// Replaces (or adds) the script of one job by name.
    pub fn set_job(&mut self, spec: JobSpec) {
        match self.jobs.iter_mut().find(|j| j.name == spec.name) {
            Some(existing) => *existing = spec,
            None => self.jobs.push(spec),
        }
    }

    /// Stage names in run order.
    pub fn stages(&self) -> Vec<String> {
        let mut stages: Vec<String> = Vec::new();
        for job in &self.jobs {
            if !stages.contains(&job.stage) {
                stages.push(job.stage.clone());
            }
        }
        stages
    }

    pub fn spec(&self, name: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// Decides the outcome of the next run of `job` for commit `sha` (counts the run).
    pub fn run(&mut self, job: &str, sha: &str) -> JobResult {
        let runs = self
            .runs
            .entry((job.to_string(), sha.to_string()))
            .or_insert(0);
        *runs += 1;
        let attempt = *runs;
        let outcome = self
            .jobs
            .iter()
            .find(|j| j.name == job)
            .map(|j| j.outcome.clone());
        match outcome.unwrap_or_default() {
            JobOutcome::Success => JobResult {
                success: true,
                failure_reason: None,
                trace: format!("Running {job}\n$ make {job}\nJob succeeded\n"),
            },
            JobOutcome::Fail { reason, trace } => JobResult {
                success: false,
                failure_reason: Some(reason),
                trace: failed_trace(job, &trace),
            },
            JobOutcome::Flaky {
                fail_times,
                reason,
                trace,
            } => {
                if attempt <= fail_times {
                    JobResult {
                        success: false,
                        failure_reason: Some(reason),
                        trace: failed_trace(job, &trace),
                    }
                } else {
                    JobResult {
                        success: true,
                        failure_reason: None,
                        trace: format!("Running {job}\n$ make {job}\nJob succeeded\n"),
                    }
                }
            }
        }
    }
}

fn failed_trace(job: &str, trace: &str) -> String {
    if trace.is_empty() {
        format!("Running {job}\n$ make {job}\nERROR: Job failed: exit code 1\n")
    } else {
        format!("Running {job}\n{trace}\nERROR: Job failed\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flaky_fails_then_passes_per_sha() {
        let mut ci = CiScript::new(vec![JobSpec::new(
            "unit",
            JobOutcome::flaky(2, "runner_system_failure", "boom"),
        )]);
        assert!(!ci.run("unit", "a").success);
        assert!(!ci.run("unit", "a").success);
        assert!(ci.run("unit", "a").success);
        let first_b = ci.run("unit", "b");
        assert_eq!(
            first_b.failure_reason.as_deref(),
            Some("runner_system_failure")
        );
        assert!(first_b.trace.contains("boom"));
    }

    #[test]
    fn specs_deserialize_from_control_json() {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "name": "lint", "outcome": "fail", "reason": "script_failure", "trace": "bad", "duration_secs": 3
        }))
        .expect("valid spec");
        assert_eq!(spec.outcome, JobOutcome::fail("script_failure", "bad"));
        assert_eq!(spec.stage, "test");
        let spec: JobSpec =
            serde_json::from_value(serde_json::json!({"name": "ok"})).expect("valid");
        assert_eq!(spec.outcome, JobOutcome::Success);
    }
}
