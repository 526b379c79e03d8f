//! The CI retry herder end to end: Job webhooks from forge-sim's pipelines,
//! the matchers from the `ci_retry:` config, retries on the sim's API.

use std::time::Duration;

use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec, WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::Value;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, Options, change, dimension};

backend_tests!(
    a_runner_failure_is_retried_after_its_delays_then_merges,
    a_genuine_test_failure_is_not_retried,
    a_failed_job_of_a_superseded_pipeline_is_not_retried,
    ci_retry_off_on_the_item_retries_nothing,
    report_matchers_and_spent_limits_are_recorded_not_retried,
    a_transient_error_on_a_retry_postpones_the_job_not_the_item,
    a_refused_retry_settles_the_job_and_the_item_stays_active,
    a_merge_request_pipeline_job_failing_before_its_pipeline_is_read_is_retried,
    a_lost_job_hook_is_made_up_by_the_reconcile,
    a_run_that_lost_its_item_retries_no_job,
    a_retry_whose_run_lost_its_item_meanwhile_is_on_the_trail,
);

/// Retries runner system failures at once.
const RUNNER_AT_ONCE: &str = r#"
matchers:
  - name: runner-system-failure
    failure_reason: runner_system_failure
    retry_delays: [0]
"#;

/// The GitLab job retry endpoint, for faults.
const RETRY_PATH: &str = "/api/v4/projects/*/jobs/*/retry";
/// The GitLab pipeline jobs list, read before a retry, for faults.
const PIPELINE_JOBS_PATH: &str = "/api/v4/projects/*/pipelines/*/jobs";

/// Retries runner system failures by `failure_reason` alone (no trace
/// read), after 60 s and then 300 s.
const RUNNER_ONLY: &str = r#"
matchers:
  - name: runner-system-failure
    description: The runner lost the job
    failure_reason: runner_system_failure
    retry_delays: [60, 300]
"#;

const RUNNER_TRACE: &str =
    "Running on runner-7...\nERROR: Job failed (system failure): lost connection to the runner\n";

/// The `needs_ci_retry` jobs list.
fn jobs(item: &Value) -> Vec<Value> {
    dimension(item, "needs_ci_retry")["detail"]["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The body of workqueue's status note on the MR.
async fn status_note(h: &Harness, iid: u64) -> String {
    let notes: Vec<Value> = h
        .client
        .get(format!(
            "{}/projects/{}/merge_requests/{iid}/notes",
            h.sim.gitlab_url(),
            h.project
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ours: Vec<String> = notes
        .iter()
        .filter_map(|n| n["body"].as_str())
        .filter(|body| body.contains("<!-- workqueue:item:"))
        .map(str::to_owned)
        .collect();
    assert_eq!(ours.len(), 1, "one status note: {notes:?}");
    ours[0].clone()
}

/// Waits for `done`, moving the service's clock a second at a time: it
/// stands still unless moved, while the sim's jobs finish in real time, so
/// a zero delay is due only once the clock passes them.
async fn wait_moving_the_clock(
    h: &Harness,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut item = h.item(id).await;
    for _ in 0..100 {
        if done(&item) {
            return item;
        }
        h.advance(Duration::from_secs(1)).await;
        item = h.item(id).await;
    }
    panic!("timed out waiting for {what}: {item:#}");
}

fn retries(h: &Harness) -> usize {
    h.count("POST", "/retry")
}

async fn a_runner_failure_is_retried_after_its_delays_then_merges(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(2, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_ONLY),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/flaky", &[("src/flaky.rs", "pub fn f() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "the first failure scheduled", |item| {
            jobs(item).iter().any(|j| j["state"] == "scheduled")
        })
        .await;
    let first = jobs(&item)[0].clone();
    assert_eq!(first["matcher"], "runner-system-failure", "{first}");
    assert_eq!(first["failure_reason"], "runner_system_failure");
    assert_eq!(first["retry_count"], 0);
    assert!(first["not_before"].is_string(), "{first}");
    assert_eq!(retries(&h), 0, "not before the first delay");

    h.advance(Duration::from_secs(30)).await;
    assert_eq!(retries(&h), 0, "30 s is inside the 60 s delay");
    h.advance(Duration::from_secs(40)).await;
    let item = h
        .wait_for(&id, "the second failure scheduled", |item| {
            let jobs = jobs(item);
            jobs.len() == 2 && jobs[1]["state"] == "scheduled"
        })
        .await;
    assert_eq!(retries(&h), 1, "retried once the first delay passed");
    let listed = jobs(&item);
    assert_eq!(listed[0]["state"], "retried");
    assert_eq!(listed[0]["retried_as"], listed[1]["id"], "{listed:?}");
    assert_eq!(listed[1]["retry_count"], 1, "the second attempt of `unit`");

    h.advance(Duration::from_secs(100)).await;
    assert_eq!(retries(&h), 1, "the second delay is 300 s");
    h.advance(Duration::from_secs(250)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(retries(&h), 2, "retried twice in all");
    assert_eq!(
        h.count("GET", "/trace"),
        0,
        "a failure_reason-only matcher never downloads a trace"
    );
    let merged = h.mr(item["detail"]["mr"]["number"].as_u64().unwrap());
    assert_eq!(merged["state"], "merged");
    let listed = jobs(&item);
    assert_eq!(listed.len(), 2, "the third attempt passed: {listed:?}");
    assert!(listed.iter().all(|j| j["state"] == "retried"), "{listed:?}");
    // Each retry is on the audit trail with the forge's answer.
    let records = h.audit(&id).await;
    let retried: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "forge.job_retried")
        .map(|r| &r["metadata"])
        .collect();
    assert_eq!(retried.len(), 2, "{records:#?}");
    for (record, job) in retried.iter().zip(&listed) {
        assert_eq!(record["job_id"], job["id"]);
        assert_eq!(record["new_job_id"], job["retried_as"]);
        assert_eq!(record["matcher"], "runner-system-failure");
        assert_eq!(record["name"], "unit");
    }
    // The status note says what was retried and by which rule.
    let note = status_note(&h, item["detail"]["mr"]["number"].as_u64().unwrap()).await;
    for job in &listed {
        assert!(
            note.contains(&format!(
                "`unit` (job {}): retried by matcher `runner-system-failure` as job",
                job["id"]
            )),
            "{note}"
        );
    }
    h.finish().await;
}

async fn a_genuine_test_failure_is_not_retried(backend: Backend) {
    // The default matchers: a test assertion is none of their problems.
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::fail(
                    "script_failure",
                    "running 12 tests\nthread 'parse' panicked: assertion failed: left == right\nerror: test failed\n",
                ),
            )],
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/broken", &[("src/broken.rs", "pub fn b() {}\n")]),
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
        .wait_for(&id, "the failed pipeline seen", |item| {
            dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
                .as_array()
                .is_some_and(|gates| gates.iter().any(|g| g == "ci_passed"))
        })
        .await;
    assert_eq!(item["phase"], "active", "the item waits for a fix");
    assert_eq!(retries(&h), 0, "a genuine failure is never retried");
    assert_eq!(
        h.count("GET", "/trace"),
        1,
        "one trace read for the judgment"
    );
    let job = &jobs(&item)[0];
    assert_eq!(job["failure_reason"], "script_failure");
    assert!(job["reason"].as_str().unwrap().contains("genuine"), "{job}");
    h.finish().await;
}

async fn a_failed_job_of_a_superseded_pipeline_is_not_retried(backend: Backend) {
    // Every head's first run of `unit` fails with a runner failure.
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_ONLY),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/pushed", &[("a.txt", "one\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "the old pipeline's failure scheduled", |item| {
            jobs(item).iter().any(|j| j["state"] == "scheduled")
        })
        .await;
    let old_job = jobs(&item)[0]["id"].as_u64().unwrap();
    let old_pipeline = jobs(&item)[0]["pipeline_id"].as_u64().unwrap();

    // New content: a force-push, a new head pipeline, whose job fails too.
    let again = h
        .submit_ok(
            &change("wq/pushed", &[("a.txt", "two\n")]),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(again, id);
    let item = h
        .wait_for(&id, "the new pipeline's failure scheduled", |item| {
            jobs(item)
                .iter()
                .any(|j| j["pipeline_id"] != old_pipeline && j["state"] == "scheduled")
        })
        .await;
    let new_job = jobs(&item)
        .iter()
        .find(|j| j["pipeline_id"] != old_pipeline)
        .unwrap()["id"]
        .as_u64()
        .unwrap();

    // A duplicated delivery of the new failure is tracked once.
    let tracked = jobs(&h.item(&id).await).len();
    redeliver_failure(&h, new_job).await;
    assert_eq!(jobs(&h.item(&id).await).len(), tracked, "one entry per job");

    h.advance(Duration::from_secs(70)).await;
    let item = h.wait_phase(&id, "completed").await;
    let retried: Vec<String> = h
        .sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/retry"))
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert!(
        retried[0].ends_with(&format!("/jobs/{new_job}/retry")),
        "only the head pipeline's job: {retried:?}"
    );
    let old = jobs(&item)
        .into_iter()
        .find(|j| j["id"] == old_job)
        .unwrap();
    assert_eq!(old["state"], "superseded", "{old}");
    assert!(
        old["reason"]
            .as_str()
            .unwrap()
            .contains("is no longer the head pipeline"),
        "{old}"
    );

    // A late delivery of the old pipeline's failure changes nothing.
    let listed = jobs(&item).len();
    let delivery = h
        .sim
        .webhook_deliveries()
        .into_iter()
        .find(|d| {
            d.event == "Job Hook"
                && d.body["build_id"] == old_job
                && d.body["build_status"] == "failed"
        })
        .expect("the old job's failure was delivered");
    let mut replay = h.client.post(&delivery.url).json(&delivery.body);
    for (name, value) in &delivery.headers {
        if !name.eq_ignore_ascii_case("content-type")
            && !name.eq_ignore_ascii_case("content-length")
        {
            replay = replay.header(name.as_str(), value.as_str());
        }
    }
    let answer = replay.send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::ACCEPTED);
    h.settle().await;
    assert_eq!(jobs(&h.item(&id).await).len(), listed);
    assert_eq!(h.count("POST", "/retry"), 1);
    h.finish().await;
}

/// Sends the sim's recorded "job failed" delivery of `job` again.
async fn redeliver_failure(h: &Harness, job: u64) {
    let delivery = h
        .sim
        .webhook_deliveries()
        .into_iter()
        .find(|d| {
            d.event == "Job Hook" && d.body["build_id"] == job && d.body["build_status"] == "failed"
        })
        .expect("the job's failure was delivered");
    let mut replay = h.client.post(&delivery.url).json(&delivery.body);
    for (name, value) in &delivery.headers {
        if !name.eq_ignore_ascii_case("content-type")
            && !name.eq_ignore_ascii_case("content-length")
        {
            replay = replay.header(name.as_str(), value.as_str());
        }
    }
    let answer = replay.send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::ACCEPTED);
    h.settle().await;
}

async fn ci_retry_off_on_the_item_retries_nothing(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_ONLY),
            ..Options::default()
        },
    )
    .await;
    let mut body = change("wq/no-retry", &[("b.txt", "b\n")]);
    body["automation"] = serde_json::json!({"ci_retry": false});
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let item = h
        .wait_for(&id, "the failed pipeline seen", |item| {
            dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
                .as_array()
                .is_some_and(|gates| gates.iter().any(|g| g == "ci_passed"))
        })
        .await;
    h.advance(Duration::from_secs(600)).await;
    assert_eq!(retries(&h), 0);
    assert!(jobs(&item).is_empty(), "not even tracked: {item:#}");
    assert_eq!(h.item(&id).await["phase"], "active");
    h.finish().await;
}

async fn report_matchers_and_spent_limits_are_recorded_not_retried(backend: Backend) {
    const RULES: &str = r#"
matchers:
  - name: runner-system-failure
    failure_reason: runner_system_failure
    retry_limit: 1
    retry_delays: [0]
  - name: registry-outage
    description: A known outage a retry does not fix
    action: report
    messages: ["could not resolve host: registry"]
"#;
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![
                JobSpec::new(
                    "unit",
                    JobOutcome::flaky(5, "runner_system_failure", RUNNER_TRACE),
                ),
                JobSpec::new(
                    "image",
                    JobOutcome::fail(
                        "script_failure",
                        "pulling base image\nfatal: could not resolve host: registry.example.com\n",
                    ),
                ),
            ],
            ci_retry: Some(RULES),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/limits", &[("l.txt", "l\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let decided = |item: &Value| {
        let jobs = jobs(item);
        jobs.iter().any(|j| j["state"] == "limit_reached")
            && jobs.iter().any(|j| j["state"] == "reported")
    };
    let item = wait_moving_the_clock(&h, &id, "both decisions", decided).await;
    h.advance(Duration::from_secs(3600)).await;
    assert_eq!(retries(&h), 1, "one retry of `unit`, then its limit");
    let listed = jobs(&item);
    let by_state = |state: &str| -> Vec<Value> {
        listed
            .iter()
            .filter(|j| j["state"] == state)
            .cloned()
            .collect()
    };
    let limit = &by_state("limit_reached")[0];
    assert_eq!(limit["name"], "unit");
    assert_eq!(limit["matcher"], "runner-system-failure");
    assert_eq!(limit["retry_count"], 1);
    let reported = &by_state("reported")[0];
    assert_eq!(reported["name"], "image");
    assert_eq!(reported["matcher"], "registry-outage");
    assert_eq!(by_state("retried").len(), 1);
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active");
    let note = status_note(&h, item["detail"]["mr"]["number"].as_u64().unwrap()).await;
    assert!(
        note.contains("`image`")
            && note.contains("matcher \"registry-outage\" reports this failure"),
        "{note}"
    );
    assert!(
        note.contains("not retried: retry limit 1 of matcher \"runner-system-failure\" reached"),
        "{note}"
    );
    h.finish().await;
}

/// A 503 on one job's retry postpones that job by a minute; the run still
/// writes its decisions and the item records no failure.
async fn a_transient_error_on_a_retry_postpones_the_job_not_the_item(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_AT_ONCE),
            ..Options::default()
        },
    )
    .await;
    h.sim.add_fault(FaultRule::pattern(
        "POST",
        RETRY_PATH,
        HttpFault::Status { status: 503 },
    ));
    let id = h
        .submit_ok(
            &change("wq/later", &[("l.txt", "l\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = wait_moving_the_clock(&h, &id, "the retry postponed", |item| {
        jobs(item).iter().any(|j| {
            j["reason"]
                .as_str()
                .is_some_and(|r| r.contains("retrying the job will be tried again"))
        })
    })
    .await;
    let job = &jobs(&item)[0];
    assert_eq!(job["state"], "scheduled", "{job}");
    assert!(job["not_before"].is_string(), "{job}");
    assert_eq!(item["attempts"], 0, "the item did not fail: {item:#}");
    assert!(item["error"].is_null(), "{item:#}");
    assert_eq!(retries(&h), 1, "the refused call");

    h.advance(Duration::from_secs(61)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(retries(&h), 2, "tried again after a minute");
    let job = &jobs(&item)[0];
    assert_eq!(job["state"], "retried", "{job}");
    assert_eq!(job["matcher"], "runner-system-failure");
    h.finish().await;
}

/// GitLab refusing a retry (403 "job is not retryable") settles that job as
/// `error` with the reason; the item neither fails nor retries again.
async fn a_refused_retry_settles_the_job_and_the_item_stays_active(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_AT_ONCE),
            ..Options::default()
        },
    )
    .await;
    h.sim.add_fault(FaultRule::pattern(
        "POST",
        RETRY_PATH,
        HttpFault::Status { status: 403 },
    ));
    let id = h
        .submit_ok(
            &change("wq/refused", &[("r.txt", "r\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = wait_moving_the_clock(&h, &id, "the job settled as an error", |item| {
        jobs(item).iter().any(|j| j["state"] == "error")
    })
    .await;
    let job = &jobs(&item)[0];
    assert!(
        job["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("retrying the job failed")),
        "{job}"
    );
    assert_eq!(dimension(&item, "needs_ci_retry")["status"], "false");
    h.advance(Duration::from_secs(3600)).await;
    let item = h
        .wait_for(&id, "the failed pipeline seen", |item| {
            dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
                .as_array()
                .is_some_and(|gates| gates.iter().any(|g| g == "ci_passed"))
        })
        .await;
    assert_eq!(item["phase"], "active", "the item waits: {item:#}");
    assert_eq!(item["attempts"], 0, "{item:#}");
    assert_eq!(retries(&h), 1, "asked once");
    let note = status_note(&h, item["detail"]["mr"]["number"].as_u64().unwrap()).await;
    assert!(
        note.contains("not retried: retrying the job failed"),
        "{note}"
    );
    h.finish().await;
}

/// A project that runs merge request pipelines: GitLab's Job Hook names
/// `refs/merge-requests/<iid>/head`, not the source branch. A job that
/// fails before workqueue has read the MR's head pipeline is found by the
/// MR number in that ref, and retried.
async fn a_merge_request_pipeline_job_failing_before_its_pipeline_is_read_is_retried(
    backend: Backend,
) {
    const HOUR: Duration = Duration::from_secs(3600);
    let h = Harness::start_with(
        backend,
        Options {
            // Long enough that the failure comes only when the test moves
            // the sim's clock.
            jobs: vec![
                JobSpec::new(
                    "unit",
                    JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
                )
                .duration_secs(HOUR.as_secs()),
            ],
            ci_retry: Some(RUNNER_AT_ONCE),
            ..Options::default()
        },
    )
    .await;
    h.sim
        .update_gitlab_project(
            h.project,
            forge_sim::GitlabProjectSpec {
                merge_request_pipelines: Some(true),
                ..forge_sim::GitlabProjectSpec::default()
            },
        )
        .unwrap();
    // workqueue cannot read the MR (so neither its head pipeline nor its
    // failed jobs) until the job is tracked: only the Job Hook can bring it.
    h.sim.add_fault(
        FaultRule::pattern(
            "GET",
            "/api/v4/projects/*/merge_requests/*",
            HttpFault::Status { status: 503 },
        )
        .times(1000),
    );
    let id = h
        .submit_ok(
            &change("wq/mr-pipeline", &[("m.txt", "m\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let iid = h.wait_mr(&id).await;
    let item = h.item(&id).await;
    assert!(
        item["detail"]["mr"]["head_pipeline_id"].is_null(),
        "the head pipeline is not read yet: {item:#}"
    );

    // The job fails; its hook names the merge request's ref. The item
    // takes the event up once its backoff after the failed read ends.
    h.sim.advance(HOUR);
    h.advance(Duration::from_secs(120)).await;
    let item = h
        .wait_for(&id, "the failed job tracked", |item| !jobs(item).is_empty())
        .await;
    let hook = h
        .sim
        .webhook_deliveries()
        .into_iter()
        .find(|d| d.event == "Job Hook" && d.body["build_status"] == "failed")
        .expect("a failed Job Hook");
    assert_eq!(
        hook.body["ref"],
        format!("refs/merge-requests/{iid}/head"),
        "GitLab's ref of a merge request pipeline"
    );
    let job = &jobs(&item)[0];
    assert_eq!(job["name"], "unit");
    assert_eq!(
        job["state"], "pending",
        "not judged before a read: {item:#}"
    );
    assert!(
        item["detail"]["mr"]["head_pipeline_id"].is_null(),
        "the head pipeline is still unread: {item:#}"
    );

    // Once the MR can be read, the job is judged as the head pipeline's
    // (the retry is due once the service's clock passes the job's end); the
    // retry passes and the MR merges.
    h.sim.clear_faults();
    h.advance(HOUR).await;
    h.wait_for(&id, "the job retried", |item| {
        jobs(item).first().is_some_and(|j| j["state"] == "retried")
    })
    .await;
    assert_eq!(retries(&h), 1);
    h.sim.advance(HOUR);
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(h.mr(iid)["state"], "merged", "{item:#}");
    h.finish().await;
}

/// Webhooks are hints: with every Job Hook lost (GitLab does not
/// redeliver), the reconcile that sees the head pipeline failed reads its
/// jobs and the flaky one is retried all the same.
async fn a_lost_job_hook_is_made_up_by_the_reconcile(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_AT_ONCE),
            ..Options::default()
        },
    )
    .await;
    h.sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Drop,
        Some("Job Hook"),
        1000,
    ));
    let id = h
        .submit_ok(
            &change("wq/lost-hook", &[("j.txt", "j\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = wait_moving_the_clock(&h, &id, "the retried job's MR merged", |item| {
        item["phase"] == "completed"
    })
    .await;
    let dropped = h
        .sim
        .webhook_deliveries()
        .into_iter()
        .filter(|d| d.event == "Job Hook" && d.outcome == "dropped")
        .count();
    assert!(dropped > 0, "the Job Hooks were lost");
    assert!(
        h.sim
            .webhook_deliveries()
            .iter()
            .all(|d| d.event != "Job Hook" || d.outcome == "dropped"),
        "no Job Hook reached the service"
    );
    assert_eq!(retries(&h), 1, "the flaky job retried once");
    let listed = jobs(&item);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "retried");
    assert_eq!(listed[0]["matcher"], "runner-system-failure");
    h.finish().await;
}

/// A merge request on `branch` whose one job failed once with a runner
/// failure the rule retries, waiting for the retry's delay (its job
/// `scheduled`): the harness, the item's id and the item.
async fn a_retry_scheduled(backend: Backend, branch: &str) -> (Harness, String, Value) {
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_ONLY),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change(branch, &[("s.txt", "s\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "the failure scheduled", |item| {
            jobs(item).iter().any(|j| j["state"] == "scheduled")
        })
        .await;
    (h, id, item)
}

/// Lets the run that takes the item's due job up hang on `method` `path`
/// (forge-sim holds the request until `cancel_hangs`), moves the clock past
/// its lease and claims the item through the store, as another run would:
/// the other run's lease, for `item_release`.
async fn stall_then_take_over(h: &Harness, id: &str, method: &str, path: &str) -> wq_store::Lease {
    h.sim.add_fault(FaultRule::pattern(
        method,
        path,
        HttpFault::Delay { millis: 20_000 },
    ));
    let mut hanging = h.sim.hanging_requests();
    let engine = h.app().engine.clone();
    engine.wait_idle().await;
    // The delay counts from the job's finish, which the sim stamps in real
    // time, so the test's clock may be anywhere before or after it: move
    // it to just past the time the item's detail says the job is due.
    let item = h.item(id).await;
    let due = jobs(&item)
        .iter()
        .filter_map(|job| job["not_before"].as_str())
        .map(|at| {
            time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
                .expect("not_before in RFC 3339")
        })
        .min()
        .unwrap_or_else(|| panic!("a scheduled job has its time: {item:#}"));
    let until_due = due - wq_core::Clock::now(h.clock.as_ref());
    h.clock
        .advance(until_due.max(time::Duration::ZERO) + time::Duration::seconds(1));
    engine.sweep_now().await.expect("sweep");
    tokio::time::timeout(Duration::from_secs(30), hanging.wait_for(|n| *n == 1))
        .await
        .unwrap_or_else(|_| panic!("the run reaches {method} {path}"))
        .expect("the sim runs");
    h.clock.advance(time::Duration::seconds(120));
    let now = wq_core::Clock::now(h.clock.as_ref());
    let (_, other) = h
        .app()
        .store
        .item_claim(wq_store::ClaimParams {
            id: id.parse().expect("an item id"),
            now,
            lease_until: now + time::Duration::seconds(60),
            handled_types: vec!["mr".to_owned()],
        })
        .await
        .expect("claim")
        .expect("the stalled run's lease expired: the item is claimable");
    other
}

/// A run that stalls past its lease while it judges a failed job (here a
/// slow read of the pipeline's jobs), and whose item another run claims
/// meanwhile, retries nothing: the retry is asked for only while the run
/// still holds the item. The run that holds the item next retries the job,
/// once.
async fn a_run_that_lost_its_item_retries_no_job(backend: Backend) {
    let (h, id, _) = a_retry_scheduled(backend, "wq/stalled").await;
    assert_eq!(retries(&h), 0, "not before the delay");

    // The run that takes the due job up stalls on the job list; its lease
    // runs out, and another run claims the item.
    let other = stall_then_take_over(&h, &id, "GET", PIPELINE_JOBS_PATH).await;
    let engine = h.app().engine.clone();
    let store = &h.app().store;
    h.sim.cancel_hangs();
    engine.wait_idle().await;
    assert_eq!(
        retries(&h),
        0,
        "the stalled run, which no longer holds the item, retried nothing"
    );
    let item = h.item(&id).await;
    assert_eq!(jobs(&item)[0]["state"], "scheduled", "{item:#}");

    // The other run lets go; the next run retries the job once.
    store.item_release(other, None).await.expect("release");
    let item = wait_moving_the_clock(&h, &id, "the job retried", |item| {
        jobs(item).iter().any(|j| j["state"] == "retried")
    })
    .await;
    assert_eq!(retries(&h), 1, "retried once, by the run holding the item");
    assert_eq!(item["attempts"], 0, "{item:#}");
    h.wait_phase(&id, "completed").await;
    assert_eq!(retries(&h), 1);
    h.finish().await;
}

/// The `forge.job_retried` records of the item's trail.
async fn retried_records(h: &Harness, id: &str) -> Vec<Value> {
    h.audit(id)
        .await
        .into_iter()
        .filter(|r| r["kind"] == "forge.job_retried")
        .collect()
}

/// A retry the forge made for a run whose lease ran out while the call was
/// in flight: the run's outcome is refused, yet the retry happened, so its
/// record is on the trail, once; the run holding the item finds the job
/// already retried and retries nothing more.
async fn a_retry_whose_run_lost_its_item_meanwhile_is_on_the_trail(backend: Backend) {
    let (h, id, item) = a_retry_scheduled(backend, "wq/slow-retry").await;
    let job_id = jobs(&item)[0]["id"].clone();

    // The run that retries the due job waits on the forge's answer; its
    // lease runs out and another run claims the item; then the forge
    // retries the job and answers.
    let other = stall_then_take_over(&h, &id, "POST", RETRY_PATH).await;
    let engine = h.app().engine.clone();
    let store = &h.app().store;
    h.sim.cancel_hangs();
    engine.wait_idle().await;
    assert_eq!(retries(&h), 1, "the forge retried the job");
    let item = h.item(&id).await;
    assert_eq!(
        jobs(&item)[0]["state"],
        "scheduled",
        "the run's outcome was refused: {item:#}"
    );
    let recorded = retried_records(&h, &id).await;
    assert_eq!(
        recorded.len(),
        1,
        "the retry is on the trail: {recorded:#?}"
    );
    let metadata = &recorded[0]["metadata"];
    assert_eq!(metadata["job_id"], job_id, "{metadata}");
    assert!(
        metadata["new_job_id"].is_u64(),
        "the forge's answer: {metadata}"
    );
    assert_eq!(metadata["matcher"], "runner-system-failure");
    assert_eq!(recorded[0]["trigger"]["action"], "retry_ci_jobs");

    // The run holding the item now finds the job retried and leaves it.
    store.item_release(other, None).await.expect("release");
    let item = wait_moving_the_clock(&h, &id, "the job settled", |item| {
        jobs(item)[0]["state"] != "scheduled"
    })
    .await;
    assert_eq!(jobs(&item)[0]["state"], "already_retried", "{item:#}");
    h.wait_phase(&id, "completed").await;
    assert_eq!(retries(&h), 1, "retried once in all");
    assert_eq!(
        retried_records(&h, &id).await.len(),
        1,
        "recorded once in all"
    );
    h.finish().await;
}
