//! Convergence without a person: a transient answer to the merge call is
//! tried again after a re-read, a metadata-only resubmission converges on
//! the forge, and a change request merged or closed before an update is
//! never replaced silently.

use std::sync::Arc;
use std::time::Duration;

use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec, WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    GITHUB, GithubRepo, Harness, Intercept, Options, PROJECT, change, github_change, manual,
};

backend_tests!(
    a_5xx_on_the_merge_call_is_tried_again_without_retry_merge,
    a_429_on_the_merge_call_waits_for_retry_after,
    a_5xx_after_the_forge_merged_is_accepted_with_one_merge,
    github_a_5xx_after_the_pr_was_queued_is_accepted_with_one_call,
    an_exhausted_budget_waits_for_retry_merge,
    a_conflict_on_the_merge_call_fails_at_once,
    gitlab_a_metadata_only_resubmission_converges,
    github_a_metadata_only_resubmission_converges,
    github_labels_named_in_another_case_are_the_repositorys,
    gitlab_a_new_target_branch_is_pushed_and_set,
    github_a_new_target_branch_is_pushed_and_set,
    github_a_pr_merged_before_the_update_is_seen_hands_the_content_to_generation_2,
    gitlab_an_mr_closed_before_the_update_is_seen_is_not_replaced,
    an_update_stored_during_the_merge_call_becomes_generation_2,
    github_an_update_pushed_after_the_queue_merged_becomes_generation_2,
    gitlab_an_update_pushed_after_the_train_merged_becomes_generation_2,
);

/// GitLab's merge call.
const GITLAB_MERGE: &str = "/api/v4/projects/*/merge_requests/*/merge";
/// GitHub's (asynchronous) merge call.
const GITHUB_MERGE: &str = "/repos/*/*/pulls/*/merge-async";

fn merge_calls(h: &Harness) -> usize {
    if h.forge == GITHUB {
        h.count("PUT", "/merge-async")
    } else {
        h.count("PUT", "/merge")
    }
}

fn journal(item: &Value) -> &Value {
    &item["detail"]["merge"]
}

/// Submits an auto-merging change and waits for the first merge call's
/// outcome to be stored with a transient answer.
async fn submit_until_transient(h: &Harness, branch: &str) -> String {
    let id = h
        .submit_ok(
            &h.change(branch, &[("t.txt", "t\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "a transient merge answer", |item| {
        journal(item)["transient_failures"] == 1
    })
    .await;
    // The run that stored it ends before the clock moves.
    h.settle().await;
    id
}

async fn a_5xx_on_the_merge_call_is_tried_again_without_retry_merge(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_fault(FaultRule::pattern(
        "PUT",
        GITLAB_MERGE,
        HttpFault::Status { status: 502 },
    ));
    let id = submit_until_transient(&h, "wq/flaky-merge").await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(journal(&item)["last_result"], "failed");
    assert!(journal(&item)["retry_at"].is_string(), "{item:#}");
    assert!(
        journal(&item)["error"].as_str().unwrap().contains("502"),
        "{item:#}"
    );
    assert_eq!(merge_calls(&h), 1);
    // The backoff (30 s) passes: the call is made again, by itself.
    h.advance(Duration::from_secs(31)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(journal(&item)["last_result"], "accepted");
    assert_eq!(journal(&item)["transient_failures"], 1);
    assert_eq!(merge_calls(&h), 2);
    h.finish().await;
}

async fn a_429_on_the_merge_call_waits_for_retry_after(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_fault(FaultRule::pattern(
        "PUT",
        GITLAB_MERGE,
        HttpFault::RateLimit {
            retry_after_secs: 120,
        },
    ));
    let id = submit_until_transient(&h, "wq/limited-merge").await;
    assert_eq!(merge_calls(&h), 1);
    // Past the 30 s backoff but not the forge's Retry-After: no call.
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(merge_calls(&h), 1, "Retry-After honoured");
    assert_eq!(h.item(&id).await["phase"], "active");
    h.advance(Duration::from_secs(61)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(journal(&item)["last_result"], "accepted");
    assert_eq!(merge_calls(&h), 2);
    h.finish().await;
}

async fn a_5xx_after_the_forge_merged_is_accepted_with_one_merge(backend: Backend) {
    let h = Harness::start(backend).await;
    // The forge merges, then its answer is lost.
    h.sim.add_fault(
        FaultRule::pattern("PUT", GITLAB_MERGE, HttpFault::Status { status: 502 }).after_handler(),
    );
    let id = h
        .submit_ok(
            &h.change("wq/merged-anyway", &[("m.txt", "m\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(journal(&item)["last_result"], "accepted", "{item:#}");
    assert_eq!(journal(&item)["transient_failures"], 1);
    assert!(journal(&item)["error"].is_null(), "{item:#}");
    assert_eq!(merge_calls(&h), 1, "exactly one merge call");
    assert_eq!(h.mr(number)["state"], "merged");
    h.finish().await;
}

async fn github_a_5xx_after_the_pr_was_queued_is_accepted_with_one_call(backend: Backend) {
    let h = Harness::start_with(backend, github(true)).await;
    let id = h
        .submit_ok(
            &github_change("wq/queued-anyway", &[("q.txt", "q\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    // The queue holds the entry; the answer to the enqueue is lost.
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    h.sim.add_fault(
        FaultRule::pattern("PUT", GITHUB_MERGE, HttpFault::Status { status: 502 }).after_handler(),
    );
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    let item = h
        .wait_for(&id, "the attempt confirmed by the queue", |item| {
            journal(item)["last_result"] == "accepted"
        })
        .await;
    assert_eq!(journal(&item)["transient_failures"], 1, "{item:#}");
    assert!(item["detail"]["merge_queue"].is_object(), "{item:#}");
    assert_eq!(merge_calls(&h), 1);
    h.settle().await;
    h.sim.github_lock_queue(PROJECT, false).unwrap();
    h.advance(Duration::from_secs(61)).await;
    h.wait_phase(&id, "completed").await;
    assert_eq!(merge_calls(&h), 1, "one call in all");
    h.finish().await;
}

async fn an_exhausted_budget_waits_for_retry_merge(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_fault(
        FaultRule::pattern("PUT", GITLAB_MERGE, HttpFault::Status { status: 503 }).times(1000),
    );
    let id = submit_until_transient(&h, "wq/down").await;
    // The default budget: three more calls, 30, 60 and 120 s apart.
    for (wait, calls) in [(31, 2), (61, 3), (121, 4)] {
        h.advance(Duration::from_secs(wait)).await;
        h.wait_for(&id, "the next automatic call", |item| {
            journal(item)["transient_failures"] == calls
        })
        .await;
        h.settle().await;
    }
    let item = h.item(&id).await;
    assert_eq!(journal(&item)["last_result"], "failed", "{item:#}");
    assert!(journal(&item)["retry_at"].is_null(), "{item:#}");
    assert!(
        journal(&item)["error"]
            .as_str()
            .unwrap()
            .contains("retry-merge"),
        "{item:#}"
    );
    assert_eq!(merge_calls(&h), 4);
    // Nothing more without a person.
    h.advance(Duration::from_secs(3 * 3600)).await;
    assert_eq!(merge_calls(&h), 4);
    assert_eq!(h.item(&id).await["phase"], "active");
    h.sim.clear_faults();
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(journal(&item)["last_result"], "accepted");
    assert_eq!(merge_calls(&h), 5);
    h.finish().await;
}

async fn a_conflict_on_the_merge_call_fails_at_once(backend: Backend) {
    let h = Harness::start(backend).await;
    // GitLab's answer when the head moved after the check.
    h.sim.add_fault(FaultRule::pattern(
        "PUT",
        GITLAB_MERGE,
        HttpFault::Status { status: 409 },
    ));
    let id = h
        .submit_ok(
            &h.change("wq/moved", &[("c.txt", "c\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(&id, "a failed attempt", |item| {
            journal(item)["last_result"] == "failed"
        })
        .await;
    h.settle().await;
    assert_eq!(journal(&item)["transient_failures"], 0, "{item:#}");
    assert!(journal(&item)["retry_at"].is_null(), "{item:#}");
    h.advance(Duration::from_secs(3 * 3600)).await;
    assert_eq!(merge_calls(&h), 1, "a refusal is not tried again");
    assert_eq!(h.item(&id).await["phase"], "active");
    h.finish().await;
}

fn github(merge_queue: bool) -> Options {
    Options {
        jobs: vec![JobSpec::new("ci", JobOutcome::Success)],
        github: Some(GithubRepo {
            merge_queue,
            required_approvals: 1,
            dismiss_stale_reviews: false,
        }),
        ..Options::default()
    }
}

async fn start(backend: Backend, forge: &str) -> Harness {
    if forge == GITHUB {
        Harness::start_with(backend, github(false)).await
    } else {
        Harness::start(backend).await
    }
}

fn sorted(mut labels: Vec<String>) -> Vec<String> {
    labels.sort();
    labels
}

/// A person's `POST` to `path` of the GitHub repository (after
/// `repos/:owner/:repo`); its status.
async fn github_post(h: &Harness, path: &str, body: Value) -> StatusCode {
    h.client
        .post(format!("{}/repos/{PROJECT}{path}", h.sim.github_url()))
        .header(
            "Authorization",
            format!("token {}", forge_sim::DEFAULT_TOKEN),
        )
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
}

/// A person labels change request `number`.
async fn person_label(h: &Harness, number: u64, label: &str) {
    let status = if h.forge == GITHUB {
        github_post(
            h,
            &format!("/issues/{number}/labels"),
            json!({ "labels": [label] }),
        )
        .await
    } else {
        h.gitlab_put(
            &format!("/merge_requests/{number}"),
            json!({ "add_labels": label }),
        )
        .await
    };
    assert!(status.is_success(), "{status}");
}

/// The target branch of change request `number` on the sim.
fn target_of(h: &Harness, number: u64) -> String {
    let target = if h.forge == GITHUB {
        h.sim.github_pr(PROJECT, number).expect("pr")["base"]["ref"].clone()
    } else {
        h.mr(number)["target_branch"].clone()
    };
    target.as_str().unwrap_or_default().to_owned()
}

async fn a_metadata_only_resubmission_converges(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "wq/meta";
    let mut body = manual(h.change(branch, &[("m.txt", "m\n")]));
    body["labels"] = json!(["old", "kept"]);
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    person_label(&h, number, "person").await;
    h.settle().await;
    let head = h.branch_head(branch);
    body["labels"] = json!(["kept", "new"]);
    body["title"] = "Retitled".into();
    body["description"] = "Described again.".into();
    let again = h.submit_ok(&body, StatusCode::OK, "updated").await;
    assert_eq!(again, id);
    let expected = sorted(
        ["kept", "new", "person", "managed-by::workqueue"]
            .map(str::to_owned)
            .to_vec(),
    );
    h.wait_for(&id, "the labels and title on the forge", |_| {
        let (title, labels, _, _) = h.change_state(number);
        title == "Retitled" && sorted(labels) == expected
    })
    .await;
    h.settle().await;
    assert_eq!(h.branch_head(branch), head, "nothing pushed");
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(item["detail"]["title"], "Retitled");
    h.finish().await;
}

async fn gitlab_a_metadata_only_resubmission_converges(backend: Backend) {
    a_metadata_only_resubmission_converges(backend, crate::support::FORGE).await;
}

async fn github_a_metadata_only_resubmission_converges(backend: Backend) {
    a_metadata_only_resubmission_converges(backend, GITHUB).await;
}

/// A person creates repository label `name` on GitHub.
async fn create_repo_label(h: &Harness, name: &str) {
    let status = github_post(h, "/labels", json!({ "name": name, "color": "d73a4a" })).await;
    assert_eq!(status, StatusCode::CREATED);
}

/// GitHub keeps one label per name whatever its case. A repository whose
/// labels are `Kept`, `Old` and `Managed-By::Workqueue` gets them for the
/// submitted `kept` and `old` and the managed label; a resubmission that
/// drops `old` takes `Old` off (workqueue applied it), and one that asks
/// for `KEPT` adds nothing: no label request at all.
async fn github_labels_named_in_another_case_are_the_repositorys(backend: Backend) {
    let h = start(backend, GITHUB).await;
    for name in ["Kept", "Old", "Managed-By::Workqueue"] {
        create_repo_label(&h, name).await;
    }
    let branch = "wq/case";
    let mut body = manual(h.change(branch, &[("c.txt", "c\n")]));
    body["labels"] = json!(["old", "kept"]);
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let (_, labels, _, _) = h.change_state(number);
    assert_eq!(
        sorted(labels),
        ["Kept", "Managed-By::Workqueue", "Old"],
        "the repository's labels, none made again in another case"
    );

    let label_writes = |h: &Harness| {
        h.sim
            .requests()
            .iter()
            .filter(|r| {
                (r.method == "POST" || r.method == "DELETE")
                    && r.path.contains(&format!("/issues/{number}/labels"))
            })
            .count()
    };
    let before = label_writes(&h);
    body["labels"] = json!(["KEPT"]);
    body["title"] = "Retitled".into();
    let again = h.submit_ok(&body, StatusCode::OK, "updated").await;
    assert_eq!(again, id);
    h.wait_for(&id, "the title and labels on the forge", |_| {
        let (title, labels, _, _) = h.change_state(number);
        title == "Retitled" && sorted(labels) == ["Kept", "Managed-By::Workqueue"]
    })
    .await;
    h.settle().await;
    assert_eq!(
        label_writes(&h) - before,
        1,
        "one label request: `Old` taken off; `KEPT` and the managed label are there already"
    );
    let (_, labels, _, _) = h.change_state(number);
    assert_eq!(sorted(labels), ["Kept", "Managed-By::Workqueue"]);
    h.finish().await;
}

async fn a_new_target_branch_is_pushed_and_set(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    h.person_push("release", &[("release.txt", Some("r\n"))]);
    let branch = "wq/retarget";
    let mut body = manual(h.change(branch, &[("n.txt", "n\n")]));
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let first_head = h.branch_head(branch);
    body["target_branch"] = "release".into();
    h.submit_ok(&body, StatusCode::OK, "updated").await;
    h.wait_for(&id, "the new target on the forge", |_| {
        target_of(&h, number) == "release"
    })
    .await;
    h.settle().await;
    let head = h.branch_head(branch);
    assert_ne!(head, first_head, "the content was pushed again");
    let item = h.item(&id).await;
    assert_eq!(
        item["detail"]["mr"]["number"], number,
        "the same change request"
    );
    assert_eq!(item["detail"]["mr"]["head_sha"].as_str(), head.as_deref());
    assert_eq!(item["detail"]["target_branch"], "release");
    h.finish().await;
}

async fn gitlab_a_new_target_branch_is_pushed_and_set(backend: Backend) {
    a_new_target_branch_is_pushed_and_set(backend, crate::support::FORGE).await;
}

async fn github_a_new_target_branch_is_pushed_and_set(backend: Backend) {
    a_new_target_branch_is_pushed_and_set(backend, GITHUB).await;
}

/// Submits `a.txt` on `branch` to the GitHub repository with a merge queue,
/// approves its pull request and waits until the service queued it; the
/// queue is locked, so it holds the entry. The item's id and the number.
async fn queued(h: &Harness, branch: &str) -> (String, u64) {
    let id = h
        .submit_ok(
            &github_change(branch, &[("a.txt", "a\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let first = h.wait_mr(&id).await;
    h.settle().await;
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    h.sim.github_approve(PROJECT, first, "reviewer").unwrap();
    h.wait_for(&id, "the pull request in the queue", |item| {
        item["detail"]["merge"]["last_result"] == "accepted"
    })
    .await;
    (id, first)
}

/// Unlocks the queue and moves the sim's clock until it merged `number`.
async fn merge_queued(h: &Harness, number: u64) {
    let mut changes = h.sim.changes();
    h.sim.github_lock_queue(PROJECT, false).unwrap();
    while h.sim.github_pr(PROJECT, number).expect("pr")["merged"] != true {
        h.sim.advance(Duration::from_secs(60));
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("the sim moves")
            .expect("the sim runs");
    }
}

/// The branch's live item, once item `id` (whose change request `first`
/// merged) completed, is the next generation with the update (`b.txt`)
/// and a change request of its own, open. Its view.
async fn handed_over(h: &Harness, branch: &str, id: &str, first: u64) -> Value {
    let next = h
        .submit_ok(
            &h.change(branch, &[("b.txt", "b\n")]),
            StatusCode::OK,
            "unchanged",
        )
        .await;
    assert_ne!(next, id, "the update was handed over");
    let second = h.wait_mr(&next).await;
    assert_ne!(second, first);
    let item = h.item(&next).await;
    assert_eq!(item["detail"]["generation"], 2, "{item:#}");
    assert_eq!(item["detail"]["files"][0]["file_path"], "b.txt");
    let (created, state) = if h.forge == GITHUB {
        let pr = h.sim.github_pr(PROJECT, second).expect("second pr");
        (h.count("POST", "/pulls"), pr["state"] == "open")
    } else {
        (
            h.count("POST", "/merge_requests"),
            h.mr(second)["state"] == "opened",
        )
    };
    assert_eq!(created, 2, "one new change request");
    assert!(state, "the second change request is open: {item:#}");
    item
}

async fn github_a_pr_merged_before_the_update_is_seen_hands_the_content_to_generation_2(
    backend: Backend,
) {
    let h = Harness::start_with(backend, github(true)).await;
    let branch = "wq/handover";
    let (id, first) = queued(&h, branch).await;
    // From here on the service hears nothing of the merge.
    h.sim
        .add_webhook_fault(WebhookFaultRule::new(WebhookFaultKind::Drop, None, 1000));
    h.app().engine.wait_idle().await;
    merge_queued(&h, first).await;
    assert_eq!(h.item(&id).await["phase"], "active", "not seen yet");
    let updated = h
        .submit_ok(
            &github_change(branch, &[("b.txt", "b\n")]),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(updated, id);
    let old = h.wait_phase(&id, "completed").await;
    assert_eq!(old["detail"]["mr"]["number"], first, "{old:#}");
    assert_eq!(old["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(old["detail"]["generation"], 1);
    let item = handed_over(&h, branch, &id, first).await;
    assert_eq!(item["caller_identity"], old["caller_identity"]);
    h.sim.clear_faults();
    h.finish().await;
}

async fn gitlab_an_mr_closed_before_the_update_is_seen_is_not_replaced(backend: Backend) {
    let h = Harness::start(backend).await;
    let branch = "wq/closed-early";
    let id = h
        .submit_ok(
            &manual(change(branch, &[("a.txt", "a\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    h.sim
        .add_webhook_fault(WebhookFaultRule::new(WebhookFaultKind::Drop, None, 1000));
    h.person_close_change(number).await;
    h.app().engine.wait_idle().await;
    assert_eq!(h.item(&id).await["phase"], "active", "not seen yet");
    let pushes = h.count("POST", "/repository/commits");
    h.submit_ok(
        &manual(change(branch, &[("b.txt", "b\n")])),
        StatusCode::OK,
        "updated",
    )
    .await;
    let item = h.wait_phase(&id, "cancelled").await;
    assert_eq!(item["error"], wq_mr::CLOSED_ON_FORGE, "{item:#}");
    assert_eq!(h.all_mrs().await.len(), 1, "no second merge request");
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    assert_eq!(
        h.count("POST", "/repository/commits"),
        pushes,
        "nothing pushed"
    );
    h.sim.clear_faults();
    h.finish().await;
}

/// An update answered while the run that merges is inside its merge call:
/// the merge completes the item with the content it checked, and the
/// update, which that run never saw, is the next generation (not lost with
/// the finished item). The update turns `auto_merge` off, so that the next
/// generation stays open to be looked at.
async fn an_update_stored_during_the_merge_call_becomes_generation_2(backend: Backend) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
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
    let branch = "wq/update-in-merge";
    let id = h
        .submit_ok(
            &change(branch, &[("a.txt", "a\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    tokio::time::timeout(Duration::from_secs(30), at_gate.notified())
        .await
        .expect("the merge call reaches the gate");
    let first = h.item(&id).await["detail"]["mr"]["number"].clone();
    let updated = h
        .submit_ok(
            &manual(change(branch, &[("b.txt", "b\n")])),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(updated, id);
    gate.add_permits(1);
    let old = h.wait_phase(&id, "completed").await;
    assert_eq!(old["detail"]["mr"]["number"], first, "{old:#}");
    assert!(h.change_state(first.as_u64().unwrap()).3, "merged");
    // The branch's live item is the next generation, with the update.
    let next = h
        .submit_ok(
            &manual(change(branch, &[("b.txt", "b\n")])),
            StatusCode::OK,
            "unchanged",
        )
        .await;
    assert_ne!(next, id);
    let second = h.wait_mr(&next).await;
    assert_ne!(Some(second), first.as_u64());
    let item = h.item(&next).await;
    assert_eq!(item["detail"]["generation"], 2, "{item:#}");
    assert_eq!(item["detail"]["files"][0]["file_path"], "b.txt");
    assert_eq!(h.change_state(second).2, "opened");
    h.finish().await;
}

/// A harness whose second push (the update's) waits at a gate: the
/// returned `Notify` fires when it arrived there, a permit on the
/// semaphore lets it go.
async fn with_held_update_push(
    backend: Backend,
    options: Options,
) -> (
    Harness,
    Arc<tokio::sync::Semaphore>,
    Arc<tokio::sync::Notify>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let at_gate = Arc::new(tokio::sync::Notify::new());
    let reached = at_gate.clone();
    let pushes = Arc::new(AtomicUsize::new(0));
    let h = Harness::start_with(
        backend,
        Options {
            wrap: Some(Box::new(move |inner, _sim, _project| {
                let held = held.clone();
                let reached = reached.clone();
                let pushes = pushes.clone();
                Arc::new(Intercept {
                    inner,
                    before_merge: Box::new(|| Box::pin(async {})),
                    gate: None,
                    crash: None,
                    torn_read: None,
                    before_push: Some(Box::new(move || {
                        let held = held.clone();
                        let reached = reached.clone();
                        let second = pushes.fetch_add(1, Ordering::SeqCst) == 1;
                        Box::pin(async move {
                            if second {
                                reached.notify_one();
                                held.acquire().await.expect("gate").forget();
                            }
                        })
                    })),
                })
            })),
            ..options
        },
    )
    .await;
    (h, gate, at_gate)
}

/// Submits the update (`b.txt`) to item `id` and waits until its push is
/// held at the gate.
async fn update_held(h: &Harness, branch: &str, id: &str, at_gate: &tokio::sync::Notify) {
    let updated = h
        .submit_ok(
            &h.change(branch, &[("b.txt", "b\n")]),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(updated, id);
    tokio::time::timeout(Duration::from_secs(30), at_gate.notified())
        .await
        .expect("the update's push reaches the gate");
}

/// The merge queue merges the pull request while `ensure_mr` pushes an
/// update: the run read the pull request open (queued), and its push lands
/// on the branch after the merge, so the update is the last push but not
/// what merged. The merged head decides: the update is the next
/// generation, with a pull request of its own, and the first one keeps the
/// content it merged.
async fn github_an_update_pushed_after_the_queue_merged_becomes_generation_2(backend: Backend) {
    let (h, gate, at_gate) = with_held_update_push(backend, github(true)).await;
    let branch = "wq/pushed-after-merge";
    let (id, first) = queued(&h, branch).await;
    let merged_head = h.sim.github_pr(PROJECT, first).expect("pr")["head"]["sha"].clone();
    update_held(&h, branch, &id, &at_gate).await;
    // The queue merges the first head while the push waits.
    merge_queued(&h, first).await;
    gate.add_permits(1);
    let old = h.wait_phase(&id, "completed").await;
    assert_eq!(old["detail"]["mr"]["number"], first, "{old:#}");
    let pr = h.sim.github_pr(PROJECT, first).expect("first pr");
    assert_eq!(
        pr["head"]["sha"], merged_head,
        "the first head merged: {pr}"
    );
    handed_over(&h, branch, &id, first).await;
    h.finish().await;
}

/// The same race on GitLab: the merge train merges the MR's first head
/// while `ensure_mr` pushes the update onto its branch.
async fn gitlab_an_update_pushed_after_the_train_merged_becomes_generation_2(backend: Backend) {
    let (h, gate, at_gate) = with_held_update_push(
        backend,
        Options {
            merge_trains: true,
            // The train's pipeline takes a minute of sim time: the MR
            // waits in the train until the test moves the clock.
            jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(60)],
            ..Options::default()
        },
    )
    .await;
    let branch = "wq/pushed-after-train";
    let id = h
        .submit_ok(
            &h.change(branch, &[("a.txt", "a\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let first = h.wait_mr(&id).await;
    h.sim.advance(Duration::from_secs(60));
    h.wait_for(&id, "the MR on the merge train", |item| {
        item["detail"]["merge"]["last_result"] == "accepted"
    })
    .await;
    let merged_head = h.mr(first)["sha"].clone();
    update_held(&h, branch, &id, &at_gate).await;
    // The train's pipeline passes and the train merges the first head
    // while the push waits.
    let mut changes = h.sim.changes();
    while h.mr(first)["state"] != "merged" {
        h.sim.advance(Duration::from_secs(60));
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("the sim moves")
            .expect("the sim runs");
    }
    gate.add_permits(1);
    let old = h.wait_phase(&id, "completed").await;
    assert_eq!(old["detail"]["mr"]["number"], first, "{old:#}");
    assert_eq!(h.mr(first)["sha"], merged_head, "the first head merged");
    handed_over(&h, branch, &id, first).await;
    h.finish().await;
}
