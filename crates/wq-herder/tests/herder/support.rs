//! Helpers: jobs, herders from YAML, and the two-step evaluation that every
//! case runs.

use time::OffsetDateTime;
use time::macros::datetime;
use wq_herder::{Herder, JobFacts, Preliminary, Verdict};

/// When the test jobs finished.
pub const FINISHED_AT: OffsetDateTime = datetime!(2025-03-01 12:00:00 UTC);

/// A failed job with `script_failure`, not retried yet.
pub fn failed_job(name: &str) -> JobFacts {
    JobFacts {
        id: 1,
        name: name.to_owned(),
        status: "failed".to_owned(),
        failure_reason: Some("script_failure".to_owned()),
        retry_count: 0,
        finished_at: Some(FINISHED_AT),
    }
}

pub fn with_reason(mut job: JobFacts, reason: Option<&str>) -> JobFacts {
    job.failure_reason = reason.map(str::to_owned);
    job
}

pub fn with_status(mut job: JobFacts, status: &str) -> JobFacts {
    job.status = status.to_owned();
    job
}

pub fn with_retries(mut job: JobFacts, retry_count: u32) -> JobFacts {
    job.retry_count = retry_count;
    job
}

/// A herder from a `ci_retry:` section; panics with the errors.
pub fn herder(yaml: &str) -> Herder {
    match Herder::from_yaml(yaml) {
        Ok(herder) => herder,
        Err(errors) => panic!("config refused: {errors:#?}"),
    }
}

/// What the two-step API told the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Steps {
    /// `prepare` decided; the trace was not needed.
    Decided(Verdict),
    /// `prepare` asked for the trace (naming this matcher); the verdict
    /// came from `evaluate_with_trace`.
    WithTrace { asked_by: String, verdict: Verdict },
}

impl Steps {
    pub fn verdict(&self) -> &Verdict {
        match self {
            Steps::Decided(verdict) | Steps::WithTrace { verdict, .. } => verdict,
        }
    }
}

/// Runs `prepare` and, when asked, `evaluate_with_trace`, the way the
/// executor does. Also checks the contract between the two: a `Decided`
/// verdict is what `evaluate_with_trace` gives for this trace and for an
/// empty one, and `evaluate_with_trace` agrees with the steps.
pub fn run(herder: &Herder, job: &JobFacts, trace: &str) -> Steps {
    let full = herder.evaluate_with_trace(job, trace);
    match herder.prepare(job) {
        Preliminary::Decided(verdict) => {
            assert_eq!(full, verdict, "prepare decided, the trace disagrees");
            assert_eq!(
                herder.evaluate_with_trace(job, ""),
                verdict,
                "prepare decided, an empty trace disagrees"
            );
            Steps::Decided(verdict)
        }
        Preliminary::NeedsTrace(request) => Steps::WithTrace {
            asked_by: request.matcher,
            verdict: full,
        },
    }
}

pub fn retry(matcher: &str, delay_seconds: u64) -> Verdict {
    let delay = std::time::Duration::from_secs(delay_seconds);
    Verdict::Retry {
        matcher: matcher.to_owned(),
        delay,
        not_before: Some(FINISHED_AT + delay),
    }
}

pub fn report(matcher: &str) -> Verdict {
    Verdict::Report {
        matcher: matcher.to_owned(),
    }
}

pub fn limit_reached(matcher: &str, limit: u32) -> Verdict {
    Verdict::LimitReached {
        matcher: matcher.to_owned(),
        limit,
    }
}

/// `count` numbered filler lines, each ending in a newline.
pub fn filler(count: usize) -> String {
    (0..count)
        .map(|line| format!("[{line:05}] compiling module_{line}\n"))
        .collect()
}
