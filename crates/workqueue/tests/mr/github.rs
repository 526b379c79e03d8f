//! The `mr` type on GitHub: pull requests, the asynchronous merge, the
//! merge queue, the attempt journal across a crash, the manual merge, and
//! signed webhooks; the real service against forge-sim's GitHub.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec, WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    CrashAt, CrashOnce, GITHUB, GithubRepo, Harness, Intercept, Options, PROJECT, TornRead,
    bearer_client, dimension, github_change, manual,
};

backend_tests!(
    a_queue_repository_enqueues_shows_the_entry_and_completes_when_merged,
    a_repository_without_a_queue_merges_directly,
    a_crash_in_flight_converges_to_accepted_when_the_queue_has_the_pr,
    a_crash_in_flight_before_the_call_reached_github_fails_at_its_deadline,
    a_crash_after_a_direct_merge_completes_with_the_attempt_accepted,
    a_head_pushed_after_the_gates_passed_is_never_merged,
    the_manual_merge_answers_merged_or_queued_and_refusals_change_nothing,
    a_manual_merge_wakes_the_item_at_once,
    webhooks_without_a_valid_signature_are_refused,
    the_queue_sync_reads_every_queued_pr_in_one_request,
    a_target_that_catches_up_closes_the_pull_request,
    a_read_straddling_the_queue_s_merge_never_merges_again,
);

fn options(merge_queue: bool) -> Options {
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

fn merge_calls(h: &Harness) -> usize {
    h.count("PUT", "/merge-async")
}

fn unmet(item: &Value) -> Vec<String> {
    dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .map(|g| g.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Submits, and waits until CI passed and only the review is missing.
async fn submit_and_wait_for_review(h: &Harness, body: &Value) -> (String, u64) {
    let id = h.submit_ok(body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.wait_for(&id, "CI passed, review missing", |item| {
        unmet(item) == ["approved"]
    })
    .await;
    (id, number)
}

fn pr(h: &Harness, number: u64) -> Value {
    h.sim.github_pr(PROJECT, number).expect("the pull request")
}

async fn a_queue_repository_enqueues_shows_the_entry_and_completes_when_merged(backend: Backend) {
    let h = Harness::start_with(backend, options(true)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/queued", &[("q.txt", "q\n")])).await;
    assert_eq!(merge_calls(&h), 0, "nothing is merged before the review");
    // The queue holds its entries while locked, so they can be looked at.
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    h.settle().await;
    h.advance(Duration::from_secs(61)).await;
    let item = h
        .wait_for(&id, "the queue entry", |item| {
            item["detail"]["merge_queue"]["position"] == 1
        })
        .await;
    assert_eq!(item["phase"], "active");
    let entry = &item["detail"]["merge_queue"];
    assert!(
        entry["state"].as_str().is_some_and(|s| !s.is_empty()),
        "{entry}"
    );
    assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(
        item["detail"]["merge"]["queue_head_sha"],
        item["detail"]["mr"]["head_sha"]
    );
    assert_eq!(merge_calls(&h), 1);

    h.sim.github_lock_queue(PROJECT, false).unwrap();
    h.advance(Duration::from_secs(61)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert!(item["detail"]["merge_queue"].is_null(), "{item:#}");
    assert_eq!(pr(&h, number)["merged"], true);
    assert_eq!(merge_calls(&h), 1, "one merge call in all");
    // The queue's merge commit ends the trail, read from the merged PR.
    let records = h.audit(&id).await;
    let ends: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "forge.merged")
        .collect();
    assert_eq!(ends.len(), 1, "{records:#?}");
    assert_eq!(
        ends[0]["metadata"]["merge_commit_sha"],
        h.branch_head("main").unwrap().as_str()
    );
    h.finish().await;
}

/// A pull request's read takes several requests; one that straddles the
/// queue's merge sees it open (with another merge status, so another
/// readiness signature) and out of the queue. That read is checked again
/// before anything is tried: no second merge call.
async fn a_read_straddling_the_queue_s_merge_never_merges_again(backend: Backend) {
    let torn = Arc::new(TornRead::default());
    let mut options = options(true);
    let given = torn.clone();
    options.wrap = Some(Box::new(move |inner, _, _| {
        Arc::new(Intercept {
            inner,
            before_merge: Box::new(|| Box::pin(async {})),
            gate: None,
            crash: None,
            torn_read: Some(given.clone()),
            before_push: None,
        })
    }));
    let h = Harness::start_with(backend, options).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/torn", &[("t.txt", "t\n")])).await;
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    h.settle().await;
    h.advance(Duration::from_secs(61)).await;
    h.wait_for(&id, "the queue entry", |item| {
        item["detail"]["merge_queue"]["position"] == 1
    })
    .await;
    assert_eq!(merge_calls(&h), 1);
    h.sim.github_lock_queue(PROJECT, false).unwrap();
    h.advance(Duration::from_secs(61)).await;
    h.wait_phase(&id, "completed").await;
    assert_eq!(
        torn.given.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the straddled read was given"
    );
    assert_eq!(merge_calls(&h), 1, "one merge call in all");
    h.finish().await;
}

async fn a_repository_without_a_queue_merges_directly(backend: Backend) {
    let h = Harness::start_with(backend, options(false)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/direct", &[("d.txt", "d\n")])).await;
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    let item = h.wait_phase(&id, "completed").await;
    let merged = pr(&h, number);
    assert_eq!(merged["merged"], true, "{merged}");
    assert_eq!(merge_calls(&h), 1);
    assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(
        item["detail"]["merge"]["queue_head_sha"], item["detail"]["mr"]["head_sha"],
        "the checked head is the merged one"
    );
    assert!(item["detail"]["merge_queue"].is_null());
    // The trail ends with the commit the merge gave `main`.
    let records = h.audit(&id).await;
    let ends: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "forge.merged")
        .collect();
    assert_eq!(ends.len(), 1, "{records:#?}");
    let main = h.branch_head("main").expect("main");
    assert_eq!(ends[0]["metadata"]["merge_commit_sha"], main.as_str());
    // The first note's request added the labels GitHub's creation does not
    // take, and its record says so.
    let posted: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "forge.note_posted")
        .collect();
    assert_eq!(posted.len(), 1, "{records:#?}");
    let added = &posted[0]["metadata"]["labels_added"];
    assert!(
        added.as_array().is_some_and(|labels| !labels.is_empty()),
        "{}",
        posted[0]
    );
    let on_github: Vec<Value> = merged["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|label| label["name"].clone())
        .collect();
    assert_eq!(added, &Value::from(on_github), "{merged}");
    assert_eq!(merged["merge_commit_sha"], main.as_str());
    // The branch and its one commit came in one GraphQL request, not
    // through the Git data API.
    for write in ["/git/trees", "/git/commits", "/git/refs"] {
        assert_eq!(h.count("POST", write), 0, "{write}");
    }
    assert_eq!(h.count("POST", "/pulls"), 1);
    h.finish().await;
}

/// A GitHub repository whose merge executor dies once, at `at`.
fn crashing(merge_queue: bool, at: CrashAt) -> Options {
    let mut options = options(merge_queue);
    options.wrap = Some(Box::new(move |inner, _, _| {
        Arc::new(Intercept {
            inner,
            before_merge: Box::new(|| Box::pin(async {})),
            gate: None,
            crash: Some(CrashOnce::new(at)),
            torn_read: None,
            before_push: None,
        })
    }));
    options
}

async fn a_crash_in_flight_converges_to_accepted_when_the_queue_has_the_pr(backend: Backend) {
    let mut h = Harness::start_with(backend, crashing(true, CrashAt::AfterMergeCall)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/crash-q", &[("c.txt", "c\n")])).await;
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    // The merge call reaches GitHub, which enqueues the PR; the process dies
    // before it records the answer.
    h.wait_for(&id, "the reservation and the call", |item| {
        item["detail"]["merge"]["last_result"] == "in_flight" && merge_calls(&h) == 1
    })
    .await;
    assert_eq!(
        h.item(&id).await["detail"]["merge"]["last_result"],
        "in_flight"
    );

    h.crash_and_restart().await;
    // Past the dead run's lease, the sweep takes the item up again.
    h.advance(Duration::from_secs(61)).await;
    let item = h
        .wait_for(&id, "the attempt accepted", |item| {
            item["detail"]["merge"]["last_result"] == "accepted"
        })
        .await;
    assert_eq!(item["detail"]["merge_queue"]["position"], 1, "{item:#}");
    assert_eq!(merge_calls(&h), 1, "never resubmitted");
    h.sim.github_lock_queue(PROJECT, false).unwrap();
    h.advance(Duration::from_secs(61)).await;
    h.wait_phase(&id, "completed").await;
    assert_eq!(pr(&h, number)["merged"], true);
    assert_eq!(merge_calls(&h), 1, "one merge call in all");
    h.finish().await;
}

/// The process dies right after GitHub merged the PR; the merged webhook
/// completes the item, and the journal says the attempt was accepted (a
/// merged PR confirms it), not `in_flight`.
async fn a_crash_after_a_direct_merge_completes_with_the_attempt_accepted(backend: Backend) {
    let mut h = Harness::start_with(backend, crashing(false, CrashAt::AfterMergeCall)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/crash-m", &[("m.txt", "m\n")])).await;
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    // The call is logged when it arrives: wait for its effect too.
    h.wait_for(&id, "the reservation and the merge", |item| {
        item["detail"]["merge"]["last_result"] == "in_flight"
            && merge_calls(&h) == 1
            && pr(&h, number)["merged"] == true
    })
    .await;
    // The kill between the merge call and its record shows on the trail:
    // the reconcile that called started and never finished.
    let before = h.audit(&id).await;
    let open = Harness::unfinished(&before).expect("an unfinished action");
    assert_eq!(open["trigger"]["action"], "reconcile_mr", "{open}");
    assert_eq!(Harness::count_kind(&before, "forge.merge_answered"), 0);

    h.crash_and_restart().await;
    h.advance(Duration::from_secs(61)).await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(
        item["detail"]["merge"]["last_result"], "accepted",
        "{item:#}"
    );
    assert_eq!(merge_calls(&h), 1, "never resubmitted");
    // Converged with nothing lost and nothing recorded twice: the crashed
    // run's records stay as they were, one reservation, one answer, one
    // merge commit, and the chain holds.
    let after = h.audit(&id).await;
    assert_eq!(&after[..before.len()], &before[..]);
    assert!(Harness::unfinished(&after).is_none(), "{after:#?}");
    for (kind, times) in [
        ("forge.push", 1),
        ("forge.change_created", 1),
        ("forge.merge_reserved", 1),
        ("forge.merge_answered", 1),
        ("forge.merged", 1),
    ] {
        assert_eq!(
            Harness::count_kind(&after, kind),
            times,
            "{kind}: {after:#?}"
        );
    }
    let merged = after.iter().find(|r| r["kind"] == "forge.merged").unwrap();
    assert_eq!(
        merged["metadata"]["merge_commit_sha"],
        h.branch_head("main").unwrap().as_str()
    );
    let (_, broken) = h.app().store.audit_verify().await.unwrap();
    assert!(broken.is_none(), "{broken:?}");
    h.finish().await;
}

async fn a_crash_in_flight_before_the_call_reached_github_fails_at_its_deadline(backend: Backend) {
    let mut h = Harness::start_with(backend, crashing(true, CrashAt::BeforeMergeCall)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/crash-f", &[("f.txt", "f\n")])).await;
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    h.wait_for(&id, "the reservation", |item| {
        item["detail"]["merge"]["last_result"] == "in_flight"
    })
    .await;
    h.crash_and_restart().await;
    h.advance(Duration::from_secs(61)).await;
    let item = h.item(&id).await;
    assert_eq!(item["detail"]["merge"]["last_result"], "in_flight");
    assert_eq!(
        merge_calls(&h),
        0,
        "an in-flight attempt is never resubmitted"
    );
    // Retry is refused while the attempt may still be in flight.
    let (status, _) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    h.advance(Duration::from_secs(300)).await;
    let item = h
        .wait_for(&id, "the attempt failed at its deadline", |item| {
            item["detail"]["merge"]["last_result"] == "failed"
        })
        .await;
    assert!(
        item["detail"]["merge"]["error"]
            .as_str()
            .unwrap()
            .contains("retry-merge"),
        "{item:#}"
    );
    assert_eq!(merge_calls(&h), 0, "still no merge call");
    assert!(pr(&h, number)["merged"] != true);

    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    h.wait_for(&id, "the retried attempt accepted", |item| {
        item["detail"]["merge"]["last_result"] == "accepted"
    })
    .await;
    assert_eq!(
        merge_calls(&h),
        1,
        "one merge call, after the explicit retry"
    );
    h.advance(Duration::from_secs(61)).await;
    h.wait_phase(&id, "completed").await;
    h.finish().await;
}

async fn a_head_pushed_after_the_gates_passed_is_never_merged(backend: Backend) {
    let pushed = Arc::new(AtomicBool::new(false));
    let flag = pushed.clone();
    let mut options = options(false);
    // GitHub's own rule that an approval covers the head it was given for.
    options.github.as_mut().unwrap().dismiss_stale_reviews = true;
    options.wrap = Some(Box::new(move |inner, sim, _| {
        let push = format!("{}/github/repos/{PROJECT}/push", sim.control_url());
        Arc::new(Intercept {
            inner,
            before_merge: Box::new(move || {
                let flag = flag.clone();
                let push = push.clone();
                Box::pin(async move {
                    // A human pushes to the branch after the gates were
                    // checked, before the merge call.
                    if !flag.swap(true, Ordering::SeqCst) {
                        let status = reqwest::Client::new()
                            .post(push)
                            .json(&json!({
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
    }));
    let h = Harness::start_with(backend, options).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/raced", &[("r.txt", "r\n")])).await;
    let checked = h.item(&id).await["detail"]["mr"]["head_sha"].clone();
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    let item = h
        .wait_for(&id, "the attempt failed", |item| {
            item["detail"]["merge"]["last_result"] == "failed"
        })
        .await;
    assert!(pushed.load(Ordering::SeqCst));
    assert_eq!(merge_calls(&h), 1);
    let after = pr(&h, number);
    assert!(
        after["merged"] != true,
        "the human's head was not merged: {after}"
    );
    assert_ne!(after["head"]["sha"], checked, "the head moved");
    assert_eq!(item["phase"], "active");
    assert_eq!(item["detail"]["merge"]["error_kind"], "auto_merge");
    // The human's head has no review: no merge, however long it waits.
    h.advance(Duration::from_secs(3 * 3600)).await;
    let item = h.item(&id).await;
    assert!(unmet(&item).contains(&"approved".to_owned()), "{item:#}");
    assert_eq!(merge_calls(&h), 1, "one merge call only");
    assert!(pr(&h, number)["merged"] != true);
    h.finish().await;
}

async fn the_manual_merge_answers_merged_or_queued_and_refusals_change_nothing(backend: Backend) {
    for queue in [false, true] {
        let h = Harness::start_with(backend, options(queue)).await;
        let branch = if queue { "wq/manual-q" } else { "wq/manual" };
        let (id, number) =
            submit_and_wait_for_review(&h, &manual(github_change(branch, &[("m.txt", "m\n")])))
                .await;
        h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
        h.settle().await;
        let path = format!("/api/v1/work-items/{id}/merge");
        let before = h.item(&id).await["detail"].clone();

        // A reader may not merge.
        let reader = bearer_client(&h.tokens.reader);
        let (status, _) = h.post_as(&reader, &path, Some(&json!({}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        // A bad body names its field.
        let (status, reply) = h
            .post(&path, Some(&json!({"merge_method": "fast-forward"})))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
        assert!(reply.to_string().contains("merge_method"), "{reply}");
        // An abbreviated SHA could name more than one commit.
        let (status, reply) = h
            .post(&path, Some(&json!({"expected_head_sha": "abc1234"})))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
        assert!(reply.to_string().contains("expected_head_sha"), "{reply}");
        // Another head than the one named: the forge refuses, 409, with its
        // message; nothing stored changes.
        let (status, reply) = h
            .post(
                &path,
                Some(&json!({"expected_head_sha": "0000000000000000000000000000000000000000"})),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{reply}");
        assert!(
            reply.to_string().contains("the forge did not merge"),
            "{reply}"
        );
        assert_eq!(h.item(&id).await["detail"], before, "nothing changed");
        assert!(pr(&h, number)["merged"] != true);
        // A draft is not mergeable: 400 with GitHub's message.
        h.sim.github_set_draft(PROJECT, number, true).unwrap();
        let (status, reply) = h.post(&path, Some(&json!({}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
        assert!(
            reply.to_string().contains("the forge did not merge"),
            "{reply}"
        );
        h.sim.github_set_draft(PROJECT, number, false).unwrap();
        h.settle().await;

        let (status, reply) = h
            .post(&path, Some(&json!({"merge_method": "squash"})))
            .await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        let expected = if queue { "queued" } else { "merged" };
        assert_eq!(reply, json!({"status": expected}));
        if queue {
            h.advance(Duration::from_secs(61)).await;
        }
        h.wait_phase(&id, "completed").await;
        assert_eq!(pr(&h, number)["merged"], true);
        // Manual merges write no automatic-merge journal entry.
        assert!(h.item(&id).await["detail"]["merge"]["last_result"].is_null());
        let (status, _) = h.post(&path, Some(&json!({}))).await;
        assert_eq!(
            status,
            StatusCode::CONFLICT,
            "a completed item is not merged again"
        );
        h.finish().await;
    }
}

/// A manual merge stores its outcome as an event and wakes the item: it
/// completes with no webhook delivered and no sweep (the test clock stays
/// put; the sweep interval is an hour).
async fn a_manual_merge_wakes_the_item_at_once(backend: Backend) {
    let h = Harness::start_with(backend, options(false)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &manual(github_change("wq/woken", &[("w.txt", "w\n")])))
            .await;
    h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    h.settle().await;
    // From here on no delivery reaches the service, and nothing is running.
    h.sim
        .add_webhook_fault(WebhookFaultRule::new(WebhookFaultKind::Drop, None, 1000));
    h.app().engine.wait_idle().await;
    assert_eq!(h.item(&id).await["phase"], "active");

    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/merge"), Some(&json!({})))
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply, json!({"status": "merged"}));
    assert_eq!(pr(&h, number)["merged"], true);
    // The command queued the item before answering.
    h.app().engine.wait_idle().await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "completed", "{item:#}");
    h.sim.clear_faults();
    h.finish().await;
}

async fn webhooks_without_a_valid_signature_are_refused(backend: Backend) {
    let h = Harness::start_with(backend, options(false)).await;
    let id = h
        .submit_ok(
            &github_change("wq/hooks", &[("h.txt", "h\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let body = json!({
        "action": "closed",
        "number": number,
        "pull_request": {"number": number, "merged": false, "state": "closed",
                         "head": {"ref": "wq/hooks", "sha": "abc"}},
        "repository": {"full_name": PROJECT},
    })
    .to_string();
    let url = format!("{}/webhooks/github", h.url);
    for signature in [
        None,
        Some("sha256=0000000000000000000000000000000000000000000000000000000000000000"),
        Some("sha1=0000000000000000000000000000000000000000"),
    ] {
        let mut request = h
            .client
            .post(&url)
            .header("x-github-event", "pull_request")
            .header("content-type", "application/json")
            .body(body.clone());
        if let Some(signature) = signature {
            request = request.header("x-hub-signature-256", signature);
        }
        let status = request.send().await.unwrap().status();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{signature:?}");
    }
    h.settle().await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "a forged close changes nothing");
    // The sim's own signed deliveries were all accepted.
    let refused: Vec<_> = h
        .sim
        .webhook_deliveries()
        .into_iter()
        .filter(|d| d.url.ends_with("/webhooks/github") && d.status != Some(202))
        .map(|d| (d.event, d.status))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    h.finish().await;
}

async fn the_queue_sync_reads_every_queued_pr_in_one_request(backend: Backend) {
    let h = Harness::start_with(backend, options(true)).await;
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    let mut items = Vec::new();
    for branch in ["wq/one", "wq/two", "wq/three"] {
        let (id, number) =
            submit_and_wait_for_review(&h, &github_change(branch, &[("f.txt", branch)])).await;
        h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
        h.wait_for(&id, "queued", |item| {
            item["detail"]["merge"]["last_result"] == "accepted"
        })
        .await;
        items.push((id, number));
    }
    h.advance(Duration::from_secs(61)).await;
    for (position, (id, _)) in items.iter().enumerate() {
        h.wait_for(id, "its position", |item| {
            item["detail"]["merge_queue"]["position"] == position + 1
        })
        .await;
    }
    // From now on no webhook reaches the service, and no timer is due.
    h.sim
        .github_set_webhook(PROJECT, "http://127.0.0.1:9/unreachable", "x")
        .unwrap();
    // A person closes the first pull request: it leaves the queue and the
    // others move up.
    let closed = h
        .client
        .patch(format!(
            "{}/repos/{PROJECT}/pulls/{}",
            h.sim.github_url(),
            items[0].1
        ))
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .json(&json!({"state": "closed"}))
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success());

    let graphql = || h.count("POST", "/graphql");
    let watched = || async {
        wq_mr::store::MrStore::new(h.app().store.as_ref())
            .queue_watch(GITHUB, None, 100)
            .await
            .unwrap()
            .len()
    };
    let sync = || async {
        h.app()
            .engine
            .run_periodic(wq_mr::QUEUE_SYNC_TASK)
            .await
            .expect("the engine handles mr")
            .unwrap()
    };
    assert_eq!(watched().await, 3);
    let before = graphql();
    let woken = sync().await;
    assert_eq!(
        graphql() - before,
        1,
        "one query for the three pull requests"
    );
    let mut expected: Vec<String> = items.iter().map(|(id, _)| id.clone()).collect();
    let mut woken: Vec<String> = woken.iter().map(ToString::to_string).collect();
    expected.sort();
    woken.sort();
    assert_eq!(woken, expected, "every entry changed");
    // The sync hands the woken items to the engine: no sweep needed.
    h.app().engine.wait_idle().await;
    assert_eq!(h.item(&items[0].0).await["phase"], "cancelled");
    for (position, (id, _)) in items[1..].iter().enumerate() {
        let item = h.item(id).await;
        assert_eq!(
            item["detail"]["merge_queue"]["position"],
            position + 1,
            "{item:#}"
        );
    }
    // Nothing moved since: the next sync reads once and wakes nobody.
    assert_eq!(watched().await, 2);
    let before = graphql();
    assert_eq!(sync().await, Vec::new());
    assert_eq!(graphql() - before, 1);
    h.finish().await;
}

async fn a_target_that_catches_up_closes_the_pull_request(backend: Backend) {
    let h = Harness::start_with(backend, options(false)).await;
    let (id, number) =
        submit_and_wait_for_review(&h, &github_change("wq/upstreamed", &[("u.txt", "u\n")])).await;
    // Someone lands the same change on main another way.
    h.sim
        .github_push_human_commit(
            PROJECT,
            "main",
            &[("u.txt", Some("u\n"))],
            "the same change",
        )
        .unwrap();
    h.advance(Duration::from_secs(1801)).await;
    let item = h.wait_phase(&id, "cancelled").await;
    assert!(
        item["error"]
            .as_str()
            .unwrap_or_default()
            .contains("empty diff")
            || item.to_string().contains("empty diff"),
        "{item:#}"
    );
    assert_eq!(pr(&h, number)["state"], "closed");
    assert_eq!(merge_calls(&h), 0);
    h.finish().await;
}
