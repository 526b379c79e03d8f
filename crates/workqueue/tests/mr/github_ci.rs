//! The CI retry herder on GitHub end to end: GitHub Actions jobs of
//! forge-sim's workflow runs, reported by `workflow_job` webhooks, judged by
//! the same matchers as GitLab jobs (their log read behind GitHub's
//! redirect, without the token), re-run on the sim's API.

use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec, WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::Value;
use wq_testkit::{Backend, backend_tests};

use crate::support::{GithubRepo, Harness, Options, PROJECT, dimension, github_change};

backend_tests!(
    a_runner_failure_is_retried_after_its_delays_then_merges,
    a_genuine_failure_is_not_retried,
    a_job_of_a_superseded_head_is_not_retried,
    lost_job_webhooks_are_made_up_by_the_reconcile,
);

/// What GitHub writes into the log of a job whose runner was shut down.
const SHUTDOWN_LOG: &str = "##[error]The runner has received a shutdown signal. This can happen \
                            when the runner service is stopped, or a manually started runner is \
                            canceled.\n##[error]The operation was canceled.";

/// Retries a runner shut down under the job, found in its log, after 60 s
/// and then 300 s.
const SHUTDOWN_RULES: &str = r#"
matchers:
  - name: runner-shutdown
    description: The runner was shut down under the job
    messages: ["The runner has received a shutdown signal"]
    retry_delays: [60, 300]
"#;

/// A GitHub repository without branch protection, whose workflow `CI` runs
/// `jobs` for every new head (no other checks).
async fn start(backend: Backend, jobs: Vec<JobSpec>, rules: Option<&'static str>) -> Harness {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: Vec::new(),
            github: Some(GithubRepo {
                merge_queue: false,
                required_approvals: 0,
                dismiss_stale_reviews: false,
            }),
            ci_retry: rules,
            ..Options::default()
        },
    )
    .await;
    h.sim
        .github_script_workflow(PROJECT, "CI", jobs)
        .expect("workflow");
    h
}

/// The `needs_ci_retry` jobs list.
fn jobs(item: &Value) -> Vec<Value> {
    dimension(item, "needs_ci_retry")["detail"]["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Job re-runs asked of the sim.
fn reruns(h: &Harness) -> Vec<String> {
    h.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/rerun"))
        .map(|r| r.path)
        .collect()
}

/// (API log requests, log downloads with their statuses): the API answers
/// 302 to `/_logs/...`, which refuses any request carrying a token.
fn log_reads(h: &Harness) -> (usize, Vec<u16>) {
    let requests = h.sim.requests();
    let api = requests
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/logs"))
        .count();
    let downloads = requests
        .iter()
        .filter(|r| r.path.starts_with("/_logs/"))
        .map(|r| r.status)
        .collect();
    (api, downloads)
}

/// The body of workqueue's status comment on the pull request.
async fn status_note(h: &Harness, number: u64) -> String {
    let comments: Vec<Value> = h
        .client
        .get(format!(
            "{}/repos/{PROJECT}/issues/{number}/comments",
            h.sim.github_url()
        ))
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ours: Vec<String> = comments
        .iter()
        .filter_map(|c| c["body"].as_str())
        .filter(|body| body.contains("<!-- workqueue:item:"))
        .map(str::to_owned)
        .collect();
    assert_eq!(ours.len(), 1, "one status comment: {comments:?}");
    ours[0].clone()
}

fn number(item: &Value) -> u64 {
    item["detail"]["mr"]["number"]
        .as_u64()
        .expect("pull request")
}

/// A reviewer approves the item's pull request (GitHub's approval gate
/// never passes on silence), leaving CI the only gate.
async fn approve(h: &Harness, id: &str) {
    let number = h.wait_mr(id).await;
    h.sim
        .github_approve(PROJECT, number, "reviewer")
        .expect("approve");
}

async fn a_runner_failure_is_retried_after_its_delays_then_merges(backend: Backend) {
    let h = start(
        backend,
        vec![
            JobSpec::new("lint", JobOutcome::Success),
            JobSpec::new("unit", JobOutcome::flaky(2, "failure", SHUTDOWN_LOG)),
        ],
        Some(SHUTDOWN_RULES),
    )
    .await;
    let id = h
        .submit_ok(
            &github_change("wq/flaky", &[("src/flaky.rs", "pub fn f() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    approve(&h, &id).await;
    let item = h
        .wait_for(&id, "the first failure scheduled", |item| {
            jobs(item).iter().any(|j| j["state"] == "scheduled")
        })
        .await;
    let first = jobs(&item)[0].clone();
    assert_eq!(first["name"], "unit", "{first}");
    assert_eq!(first["matcher"], "runner-shutdown", "{first}");
    assert_eq!(first["failure_reason"], "Run unit", "the failed step");
    assert_eq!(first["retry_count"], 0);
    assert_eq!(
        first["head_sha"],
        h.branch_head("wq/flaky").unwrap().as_str(),
        "{first}"
    );
    assert!(first["not_before"].is_string(), "{first}");
    assert!(reruns(&h).is_empty(), "not before the first delay");
    // The matcher read the log: the API's redirect was followed without
    // the token (the log URL refuses a request carrying one).
    let (api, downloads) = log_reads(&h);
    assert_eq!((api, downloads.as_slice()), (1, &[200][..]));

    h.advance(Duration::from_secs(30)).await;
    assert!(reruns(&h).is_empty(), "30 s is inside the 60 s delay");
    h.advance(Duration::from_secs(40)).await;
    let item = h
        .wait_for(&id, "the second failure scheduled", |item| {
            let jobs = jobs(item);
            jobs.len() == 2 && jobs[1]["state"] == "scheduled"
        })
        .await;
    assert_eq!(
        reruns(&h),
        [format!(
            "/repos/{PROJECT}/actions/jobs/{}/rerun",
            first["id"]
        )],
        "re-run once the first delay passed"
    );
    let listed = jobs(&item);
    assert_eq!(listed[0]["state"], "retried");
    assert_eq!(listed[0]["retried_as"], listed[1]["id"], "{listed:?}");
    assert_eq!(
        listed[1]["pipeline_id"], listed[0]["pipeline_id"],
        "a new attempt of the same workflow run"
    );
    assert_eq!(listed[1]["retry_count"], 1, "the second attempt of `unit`");

    h.advance(Duration::from_secs(100)).await;
    assert_eq!(reruns(&h).len(), 1, "the second delay is 300 s");
    h.advance(Duration::from_secs(250)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(reruns(&h).len(), 2, "re-run twice in all");
    let (api, downloads) = log_reads(&h);
    assert_eq!(api, 2, "one log read per judged failure");
    assert_eq!(downloads, [200, 200]);
    let pr = h
        .sim
        .github_pr(PROJECT, number(&item))
        .expect("pull request");
    assert_eq!(pr["merged"], true, "{pr}");
    let listed = jobs(&item);
    assert_eq!(listed.len(), 2, "the third attempt passed: {listed:?}");
    assert!(listed.iter().all(|j| j["state"] == "retried"), "{listed:?}");
    // The status comment says what was retried and by which rule.
    let note = status_note(&h, number(&item)).await;
    for job in &listed {
        assert!(
            note.contains(&format!(
                "`unit` (job {}): retried by matcher `runner-shutdown` as job {}",
                job["id"], job["retried_as"]
            )),
            "{note}"
        );
    }
    h.finish().await;
}

async fn a_genuine_failure_is_not_retried(backend: Backend) {
    // The default matchers: a failing test is none of their problems.
    let h = start(
        backend,
        vec![JobSpec::new(
            "unit",
            JobOutcome::fail(
                "failure",
                "running 12 tests\nthread 'parse' panicked: assertion failed: left == right\n\
                 test result: FAILED. 11 passed; 1 failed\n\
                 ##[error]Process completed with exit code 101.",
            ),
        )],
        None,
    )
    .await;
    let id = h
        .submit_ok(
            &github_change("wq/broken", &[("src/broken.rs", "pub fn b() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "the failure judged", |item| {
            jobs(item).iter().any(|j| j["state"] == "no_match")
        })
        .await;
    assert_eq!(
        dimension(&item, "needs_ci_retry")["status"],
        "false",
        "nothing left to do: {item:#}"
    );
    h.advance(Duration::from_secs(3600)).await;
    let item = h
        .wait_for(&id, "the failed checks seen", |item| {
            dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
                .as_array()
                .is_some_and(|gates| gates.iter().any(|g| g == "ci_passed"))
        })
        .await;
    assert_eq!(item["phase"], "active", "the item waits for a fix");
    assert!(reruns(&h).is_empty(), "a genuine failure is never re-run");
    let (api, downloads) = log_reads(&h);
    assert_eq!(
        (api, downloads.as_slice()),
        (1, &[200][..]),
        "one log read for the judgment, without the token"
    );
    let job = &jobs(&item)[0];
    assert_eq!(job["failure_reason"], "Run unit");
    assert!(job["reason"].as_str().unwrap().contains("genuine"), "{job}");
    let note = status_note(&h, number(&item)).await;
    assert!(
        note.contains(&format!(
            "`unit` (job {}): not retried: no matcher matched: a genuine failure",
            job["id"]
        )),
        "{note}"
    );
    h.finish().await;
}

async fn a_job_of_a_superseded_head_is_not_retried(backend: Backend) {
    // Every head's first run of `unit` fails with a runner shutdown.
    let h = start(
        backend,
        vec![JobSpec::new(
            "unit",
            JobOutcome::flaky(1, "failure", SHUTDOWN_LOG),
        )],
        Some(SHUTDOWN_RULES),
    )
    .await;
    let id = h
        .submit_ok(
            &github_change("wq/pushed", &[("a.txt", "one\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    approve(&h, &id).await;
    let item = h
        .wait_for(&id, "the old head's failure scheduled", |item| {
            jobs(item).iter().any(|j| j["state"] == "scheduled")
        })
        .await;
    let old = jobs(&item)[0].clone();

    // New content: a force-push, a new workflow run, whose job fails too.
    let again = h
        .submit_ok(
            &github_change("wq/pushed", &[("a.txt", "two\n")]),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(again, id);
    let item = h
        .wait_for(&id, "the new head pushed", |item| {
            item["detail"]["mr"]["head_sha"] != old["head_sha"]
        })
        .await;
    let new_head = item["detail"]["mr"]["head_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let item = h
        .wait_for(&id, "the new head's failure scheduled", |item| {
            jobs(item)
                .iter()
                .any(|j| j["head_sha"] == new_head.as_str() && j["state"] == "scheduled")
        })
        .await;
    let new = jobs(&item)
        .into_iter()
        .find(|j| j["head_sha"] == new_head.as_str())
        .unwrap();
    assert_ne!(new["pipeline_id"], old["pipeline_id"], "a run per commit");

    h.advance(Duration::from_secs(70)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(
        reruns(&h),
        [format!("/repos/{PROJECT}/actions/jobs/{}/rerun", new["id"])],
        "only the head commit's job"
    );
    let settled = jobs(&item)
        .into_iter()
        .find(|j| j["id"] == old["id"])
        .unwrap();
    assert_eq!(settled["state"], "superseded", "{settled}");
    assert!(
        settled["reason"]
            .as_str()
            .unwrap()
            .contains("is no longer the head commit"),
        "{settled}"
    );
    h.finish().await;
}

/// Webhooks are hints: with every `workflow_job` and `check_run` delivery
/// lost, the reconcile that sees the head's checks failed lists the
/// commit's workflow jobs, and the flaky one is re-run all the same.
async fn lost_job_webhooks_are_made_up_by_the_reconcile(backend: Backend) {
    const AT_ONCE: &str = r#"
matchers:
  - name: runner-shutdown
    messages: ["The runner has received a shutdown signal"]
    retry_delays: [0]
"#;
    let h = start(
        backend,
        vec![JobSpec::new(
            "unit",
            JobOutcome::flaky(1, "failure", SHUTDOWN_LOG),
        )],
        Some(AT_ONCE),
    )
    .await;
    for event in ["workflow_job", "check_run"] {
        h.sim.add_webhook_fault(WebhookFaultRule::new(
            WebhookFaultKind::Drop,
            Some(event),
            1000,
        ));
    }
    let id = h
        .submit_ok(
            &github_change("wq/lost-jobs", &[("src/l.rs", "pub fn l() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    approve(&h, &id).await;
    // The service's clock stands still unless moved; a zero delay is due
    // once it passes the job's end.
    let mut item = h.item(&id).await;
    for _ in 0..100 {
        if item["phase"] == "completed" {
            break;
        }
        h.advance(Duration::from_secs(1)).await;
        item = h.item(&id).await;
    }
    assert_eq!(item["phase"], "completed", "{item:#}");
    let deliveries = h.sim.webhook_deliveries();
    assert!(
        deliveries
            .iter()
            .any(|d| d.event == "workflow_job" && d.outcome == "dropped"),
        "the job webhooks were lost"
    );
    assert!(
        deliveries
            .iter()
            .filter(|d| d.event == "workflow_job" || d.event == "check_run")
            .all(|d| d.outcome == "dropped"),
        "no job webhook reached the service"
    );
    assert_eq!(reruns(&h).len(), 1, "the flaky job re-run once");
    let listed = jobs(&item);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "retried");
    assert_eq!(listed[0]["matcher"], "runner-shutdown");
    h.finish().await;
}
