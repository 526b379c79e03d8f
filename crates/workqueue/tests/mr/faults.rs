//! Forge faults, crashes and races: the item converges without a second
//! branch, MR or merge.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec};
use reqwest::StatusCode;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, Intercept, Options, change};

backend_tests!(
    a_head_pushed_between_check_and_merge_is_not_merged,
    a_crash_after_the_forge_accepted_writes_makes_no_second_mr,
    an_unanswered_create_is_recorded_in_the_same_run,
    forge_errors_retry_with_backoff_then_fail_and_retry_recovers,
    rate_limits_honour_retry_after,
    retry_merge_is_refused_while_in_flight,
);

/// Pipelines that take an hour of sim time, so a new head stays unchecked
/// until the test moves the sim's clock.
fn slow_ci() -> Vec<JobSpec> {
    vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(3600)]
}

async fn a_head_pushed_between_check_and_merge_is_not_merged(backend: Backend) {
    let pushed = Arc::new(AtomicBool::new(false));
    let flag = pushed.clone();
    let h = Harness::start_with(
        backend,
        Options {
            jobs: slow_ci(),
            // GitLab checks mergeability (405) before the SHA (409); without
            // "pipelines must succeed" the stale SHA is what it refuses.
            require_pipeline: false,
            wrap: Some(Box::new(move |inner, sim, project| {
                let push = format!("{}/gitlab/projects/{project}/push", sim.control_url());
                Arc::new(Intercept {
                    inner,
                    before_merge: Box::new(move || {
                        let flag = flag.clone();
                        let push = push.clone();
                        Box::pin(async move {
                            // A human pushes to the branch after the gates
                            // were checked, before the merge call.
                            if !flag.swap(true, Ordering::SeqCst) {
                                let status = reqwest::Client::new()
                                    .post(push)
                                    .json(&serde_json::json!({
                                        "branch": "wq/raced",
                                        "files": {"human.txt": "h\n"},
                                        "message": "human",
                                    }))
                                    .send()
                                    .await
                                    .expect("human push")
                                    .status();
                                assert!(status.is_success(), "push: {status}");
                            }
                        })
                    }),
                    gate: None,
                    crash: None,
                    torn_read: None,
                    before_push: None,
                })
            })),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/raced", &[("a.txt", "a\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    let checked = h.item(&id).await["detail"]["mr"]["head_sha"].clone();
    // Our head's pipeline finishes; the reconcile checks it and merges.
    h.sim.advance(Duration::from_secs(3600));
    let item = h
        .wait_for(&id, "a failed merge attempt", |item| {
            item["detail"]["merge"]["last_result"] == "failed"
        })
        .await;
    assert!(pushed.load(Ordering::SeqCst));
    let error = item["detail"]["merge"]["error"].as_str().unwrap();
    assert!(error.contains("409"), "{error}");
    assert_eq!(item["detail"]["merge"]["error_kind"], "auto_merge");
    assert_eq!(item["phase"], "active");
    assert_eq!(
        h.mr(number)["state"],
        "opened",
        "the unchecked head was not merged"
    );
    assert_ne!(h.mr(number)["sha"], checked);
    // No retry loop: more reconciles at the same state make no merge call.
    h.advance(Duration::from_secs(3 * 3600)).await;
    h.settle().await;
    assert_eq!(h.count("PUT", "/merge"), 1, "one merge call only");
    // The explicit retry is accepted once; the gates still hold it back
    // (the human head's pipeline is running).
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    h.settle().await;
    assert_eq!(
        h.count("PUT", "/merge"),
        1,
        "gates still apply after a retry"
    );
    let again = h.item(&id).await;
    assert_eq!(again["detail"]["merge"]["retry_authorized"], true);
    h.finish().await;
}

async fn a_crash_after_the_forge_accepted_writes_makes_no_second_mr(backend: Backend) {
    let mut h = Harness::start(backend).await;
    // The forge creates the branch and the MR but both answers are lost.
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/repository/commits",
            HttpFault::Status { status: 502 },
        )
        .after_handler(),
    );
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests",
            HttpFault::Status { status: 502 },
        )
        .after_handler(),
    );
    let id = h
        .submit_ok(
            &change("wq/crashy", &[("c.txt", "c\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "a failed attempt", |item| {
        item["attempts"].as_i64() >= Some(1)
    })
    .await;
    // The process dies; a new one starts over the same database.
    h.crash_and_restart().await;
    for _ in 0..4 {
        h.advance(Duration::from_secs(600)).await;
    }
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["attempts"], 0);
    assert_eq!(
        h.all_mrs().await.len(),
        1,
        "one MR despite the lost answers"
    );
    assert_eq!(
        h.count("POST", "/merge_requests"),
        1,
        "the retry found the MR whose creation answer was lost"
    );
    assert_eq!(
        h.count("POST", "/repository/commits"),
        2,
        "the lost commit was redone once onto the existing branch, then recorded"
    );
    h.finish().await;
}

/// The forge makes the MR but its answer is lost (502): the run looks it
/// up at once and records it, so the item never holds an MR it opened
/// without knowing it, even should it fail before another try.
async fn an_unanswered_create_is_recorded_in_the_same_run(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests",
            HttpFault::Status { status: 502 },
        )
        .after_handler(),
    );
    let id = h
        .submit_ok(
            &change("wq/unanswered", &[("u.txt", "u\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    let item = h.item(&id).await;
    assert_eq!(item["attempts"], 0, "no failure recorded: {item:#}");
    assert!(item["error"].is_null(), "{item:#}");
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["detail"]["mr"]["number"], number);
    assert_eq!(h.all_mrs().await.len(), 1, "one MR");
    h.finish().await;
}

async fn forge_errors_retry_with_backoff_then_fail_and_retry_recovers(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            max_attempts: 3,
            ..Options::default()
        },
    )
    .await;
    // Every attempt gets as far as opening the merge request.
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests",
            HttpFault::Status { status: 500 },
        )
        .times(1000),
    );
    let id = h
        .submit_ok(
            &change("wq/flaky-forge", &[("f.txt", "f\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "the first failure", |item| item["attempts"] == 1)
        .await;
    let first = h.item(&id).await;
    assert!(
        first["leased_until"].is_string(),
        "backoff holds the lease: {first:#}"
    );
    assert_eq!(first["phase"], "active");
    // A forge outage is not counted against max_attempts (3 here): five
    // more failures and the item waits on.
    for attempt in 2..=6 {
        h.advance(Duration::from_secs(600)).await;
        h.wait_for(&id, "the next failure", |item| item["attempts"] == attempt)
            .await;
    }
    let waiting = h.item(&id).await;
    assert_eq!(waiting["phase"], "active", "{waiting:#}");
    // Once the outage has lasted the budget (six hours), the item fails.
    h.advance(Duration::from_secs(6 * 3600)).await;
    let failed = h.wait_phase(&id, "failed").await;
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("500"), "{error}");
    let creations = h.count("POST", "/merge_requests");
    assert_eq!(
        i64::try_from(creations).unwrap(),
        failed["attempts"].as_i64().unwrap(),
        "bounded: one call per attempt"
    );
    assert_eq!(creations, 7);
    h.sim.clear_faults();
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    h.wait_phase(&id, "completed").await;
    h.finish().await;
}

async fn rate_limits_honour_retry_after(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_fault(FaultRule::pattern(
        "POST",
        "/api/v4/projects/*/merge_requests",
        HttpFault::RateLimit {
            retry_after_secs: 120,
        },
    ));
    let id = h
        .submit_ok(
            &change("wq/limited", &[("l.txt", "l\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "the rate limit", |item| item["attempts"] == 1)
        .await;
    let leased = time::OffsetDateTime::parse(
        item["leased_until"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let now = wq_core::Clock::now(h.clock.as_ref());
    assert!(
        leased >= now + time::Duration::seconds(119),
        "Retry-After honoured: {leased} vs {now}"
    );
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(
        h.item(&id).await["attempts"],
        1,
        "not retried before Retry-After"
    );
    // Past Retry-After and the jitter an outage's backoff gets (at most a
    // quarter of it).
    h.advance(Duration::from_secs(61 + 30)).await;
    h.wait_phase(&id, "completed").await;
    h.finish().await;
}

async fn retry_merge_is_refused_while_in_flight(backend: Backend) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    // Told when the merge call reaches the gate, the attempt reserved.
    let at_gate = Arc::new(tokio::sync::Notify::new());
    let reached = at_gate.clone();
    let h = Harness::start_with(
        backend,
        Options {
            wrap: Some(Box::new(move |inner, _sim, _project| {
                Arc::new(Intercept {
                    inner,
                    before_merge: Box::new(move || {
                        let reached = reached.clone();
                        Box::pin(async move { reached.notify_one() })
                    }),
                    gate: Some(held),
                    crash: None,
                    torn_read: None,
                    before_push: None,
                })
            })),
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/held", &[("h.txt", "h\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    // The run holding the merge call does not end, so no finished run
    // would tell `wait_for`: the call reaching the gate does.
    tokio::time::timeout(Duration::from_secs(30), at_gate.notified())
        .await
        .expect("the merge call reaches the gate");
    let item = h.item(&id).await;
    assert_eq!(
        item["detail"]["merge"]["last_result"], "in_flight",
        "{item:#}"
    );
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight")
    );
    gate.add_permits(1);
    h.wait_phase(&id, "completed").await;
    let (status, _) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "nothing to retry on a completed item"
    );
    h.finish().await;
}
