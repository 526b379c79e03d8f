//! Submission to merge, and the lifecycle around it.

use reqwest::StatusCode;
use serde_json::{Value, json};
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, Options, PROJECT, change, manual};

backend_tests!(
    submit_creates_one_branch_and_mr_and_merges_the_checked_head,
    resubmitting_the_same_content_is_unchanged_and_writes_nothing,
    new_content_force_pushes_the_same_mr,
    a_failed_item_resubmitted_is_retried,
    an_mr_closed_by_a_human_cancels_the_item,
    a_target_that_catches_up_empties_the_diff_and_cancels,
    parallel_identical_submissions_make_one_item_and_one_mr,
    invalid_submissions_are_refused_with_the_field_and_write_nothing,
    a_merge_train_project_queues_the_mr_and_completes_when_the_train_merges,
);

async fn submit_creates_one_branch_and_mr_and_merges_the_checked_head(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &change("wq/feature", &[("src/feature.rs", "pub fn f() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(
        item["detail"]["merge"]["last_result"], "accepted",
        "{item:#}"
    );
    assert_eq!(item["caller_identity"], "admin (token admin, rule admins)");
    assert_eq!(
        item["idempotency_key"],
        format!("mr:gitlab:{PROJECT}:wq/feature:1")
    );
    let number = item["detail"]["mr"]["number"].as_u64().unwrap();
    let mr = h.mr(number);
    assert_eq!(mr["state"], "merged");
    // Branch created once, MR created once, merged once with the checked head.
    assert_eq!(h.count("POST", "/repository/commits"), 1);
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    let merges: Vec<_> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/merge"))
        .collect();
    assert_eq!(merges.len(), 1, "{merges:?}");
    // The head that passed the gates is the one the attempt carried and the
    // one GitLab merged.
    let head = item["detail"]["mr"]["head_sha"].as_str().unwrap();
    assert_eq!(item["detail"]["merge"]["queue_head_sha"], head);
    assert_eq!(mr["sha"], head, "{mr}");
    assert_eq!(merges[0].status, 200);
    assert_eq!(
        h.sim
            .gitlab_file(h.project, "main", "src/feature.rs")
            .as_deref(),
        Some(&b"pub fn f() {}\n"[..])
    );
    // One status note, with the managed-by label on the MR.
    let notes = h.count("POST", "/notes");
    assert_eq!(notes, 1);
    assert!(
        mr["labels"]
            .as_array()
            .unwrap()
            .contains(&json!("managed-by::workqueue")),
        "{mr}"
    );
    h.finish().await;
}

async fn resubmitting_the_same_content_is_unchanged_and_writes_nothing(backend: Backend) {
    let h = Harness::start(backend).await;
    let body = manual(change("wq/same", &[("a.txt", "a\n")]));
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    h.wait_mr(&id).await;
    h.settle().await;
    let writes_before = h
        .sim
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    let again = h.submit_ok(&body, StatusCode::OK, "unchanged").await;
    assert_eq!(again, id);
    h.settle().await;
    let writes_after = h
        .sim
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(
        writes_before, writes_after,
        "an unchanged submission wrote to the forge"
    );
    // Its record names the caller and the content by its hashes, which are
    // the created record's; the files are listed once, by that record.
    let trail = h.audit(&id).await;
    let of_kind = |kind: &str| -> Vec<&Value> {
        trail
            .iter()
            .filter(|record| record["kind"] == kind)
            .collect()
    };
    let (created, unchanged) = (
        of_kind("submission.created"),
        of_kind("submission.unchanged"),
    );
    assert_eq!((created.len(), unchanged.len()), (1, 1), "{trail:#?}");
    let (created, unchanged) = (created[0], unchanged[0]);
    assert_eq!(unchanged["actor"], created["actor"]);
    for field in ["content_hash", "generation"] {
        assert_eq!(
            unchanged["new_state"][field], created["new_state"][field],
            "{field}"
        );
    }
    assert_eq!(
        unchanged["old_state"]["content_hash"],
        created["new_state"]["content_hash"]
    );
    for field in [
        "metadata_hash",
        "source_branch",
        "target_branch",
        "caller_is_admin",
    ] {
        assert_eq!(
            unchanged["metadata"][field], created["metadata"][field],
            "{field}"
        );
    }
    assert!(
        unchanged["metadata"]["metadata_hash"].is_string(),
        "{unchanged}"
    );
    assert_eq!(
        created["metadata"]["files"][0]["path"], "a.txt",
        "{created}"
    );
    assert!(unchanged["metadata"].get("files").is_none(), "{unchanged}");
    // Chained after the item's last record like every append (on
    // PostgreSQL it is written with the history's row in one call), and in
    // the history beside the created one.
    for pair in trail.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"], "{trail:#?}");
    }
    let (_, broken) = h.app().store.audit_verify().await.unwrap();
    assert!(broken.is_none(), "{broken:?}");
    let outcomes: Vec<Value> = h.item(&id).await["detail"]["submissions"]
        .as_array()
        .expect("history")
        .iter()
        .map(|submission| submission["outcome"].clone())
        .collect();
    assert_eq!(outcomes, [json!("created"), json!("unchanged")]);
    h.finish().await;
}

async fn new_content_force_pushes_the_same_mr(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/evolving", &[("a.txt", "one\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    let first_head = h.item(&id).await["detail"]["mr"]["head_sha"].clone();
    let again = h
        .submit_ok(
            &manual(change("wq/evolving", &[("a.txt", "two\n")])),
            StatusCode::OK,
            "updated",
        )
        .await;
    assert_eq!(again, id);
    let item = h
        .wait_for(&id, "the new head", |item| {
            item["detail"]["mr"]["head_sha"] != first_head
                && item["dimensions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| d["dimension"] == "needs_mr" && d["status"] == "false")
        })
        .await;
    assert_eq!(item["detail"]["mr"]["number"], number, "same MR");
    assert_eq!(h.count("POST", "/merge_requests"), 1, "one MR only");
    assert_eq!(h.count("POST", "/repository/commits"), 2);
    assert_eq!(
        h.sim
            .gitlab_file(h.project, "wq/evolving", "a.txt")
            .as_deref(),
        Some(&b"two\n"[..])
    );
    h.finish().await;
}

async fn a_failed_item_resubmitted_is_retried(backend: Backend) {
    let h = Harness::start(backend).await;
    // Creating a file the target already has: the forge refuses the commit
    // (a permanent error), the item fails with the forge's message.
    let id = h
        .submit_ok(
            &change("wq/broken", &[("README.md", "# other\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let failed = h.wait_phase(&id, "failed").await;
    assert!(
        failed["error"].as_str().unwrap().contains("committing"),
        "{failed:#}"
    );
    let mut fixed = change("wq/broken", &[]);
    fixed["file_actions"] =
        json!([{"action": "update", "file_path": "README.md", "content": "# other\n"}]);
    let again = h.submit_ok(&fixed, StatusCode::OK, "retried").await;
    assert_eq!(again, id, "the failed item is reused");
    let done = h.wait_phase(&id, "completed").await;
    assert_eq!(done["error"], serde_json::Value::Null);
    assert_eq!(
        h.sim.gitlab_file(h.project, "main", "README.md").as_deref(),
        Some(&b"# other\n"[..])
    );
    // A terminal item is followed by a new generation.
    let next = h
        .submit_ok(
            &change("wq/broken", &[("next.txt", "n\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    assert_ne!(next, id);
    let item = h.item(&next).await;
    assert_eq!(
        item["idempotency_key"],
        format!("mr:gitlab:{PROJECT}:wq/broken:2")
    );
    h.wait_phase(&next, "completed").await;
    h.finish().await;
}

async fn an_mr_closed_by_a_human_cancels_the_item(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/unwanted", &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let status = h
        .gitlab_put(
            &format!("/merge_requests/{number}"),
            json!({"state_event": "close"}),
        )
        .await;
    assert!(status.is_success());
    let item = h.wait_phase(&id, "cancelled").await;
    assert!(
        item["error"].as_str().unwrap().contains("closed"),
        "{item:#}"
    );
    h.finish().await;
}

async fn a_target_that_catches_up_empties_the_diff_and_cancels(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/upstreamed", &[("docs/x.md", "same\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    // Someone lands the same content on the target directly.
    h.sim
        .gitlab_push(
            h.project,
            "main",
            &[("docs/x.md", Some("same\n"))],
            "land it",
        )
        .unwrap();
    h.settle().await;
    assert_eq!(
        h.item(&id).await["phase"],
        "active",
        "not checked before its time"
    );
    // The periodic check (30 min) finds the empty diff.
    h.advance(std::time::Duration::from_secs(31 * 60)).await;
    let item = h.wait_phase(&id, "cancelled").await;
    assert!(
        item["error"].as_str().unwrap().contains("empty diff"),
        "{item:#}"
    );
    assert_eq!(h.mr(number)["state"], "closed");
    h.finish().await;
}

async fn parallel_identical_submissions_make_one_item_and_one_mr(backend: Backend) {
    let h = Harness::start(backend).await;
    let body = manual(change("wq/race", &[("r.txt", "r\n")]));
    let replies = futures::future::join_all((0..8).map(|_| h.submit(&body))).await;
    let created = replies
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .count();
    assert_eq!(created, 1, "{replies:?}");
    let ids: std::collections::BTreeSet<_> = replies
        .iter()
        .map(|(status, reply)| {
            assert!(status.is_success(), "{reply}");
            reply["item"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 1, "one item: {ids:?}");
    let id = ids.into_iter().next().unwrap();
    h.wait_mr(&id).await;
    h.settle().await;
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    assert_eq!(h.all_mrs().await.len(), 1);
    h.finish().await;
}

async fn invalid_submissions_are_refused_with_the_field_and_write_nothing(backend: Backend) {
    let h = Harness::start(backend).await;
    let cases = [
        (
            change("wq/ci", &[(".gitlab-ci.yml", "x: 1\n")]),
            "file_actions[0].file_path",
        ),
        (change("main", &[("a", "a")]), "source_branch"),
        (
            {
                let mut body = change("wq/f", &[("a", "a")]);
                body["forge"] = json!("nowhere");
                body
            },
            "forge",
        ),
        (
            {
                let mut body = change("wq/f", &[("a", "a")]);
                body["item_type"] = json!("cve");
                body
            },
            "item_type",
        ),
    ];
    for (body, field) in cases {
        let (status, reply) = h.submit(&body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
        assert_eq!(reply["error"]["field"], field, "{reply}");
    }
    let list: serde_json::Value = h
        .api
        .get(format!("{}/api/v1/work-items", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0);
    assert!(
        h.sim.requests().iter().all(|r| r.method == "GET"),
        "no forge write"
    );
    h.finish().await;
}

async fn a_merge_train_project_queues_the_mr_and_completes_when_the_train_merges(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            merge_trains: true,
            // The train's own pipeline takes a minute of sim time, so the
            // queued state can be seen.
            jobs: vec![
                forge_sim::JobSpec::new("unit", forge_sim::JobOutcome::Success).duration_secs(60),
            ],
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/train", &[("t.txt", "t\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.sim.advance(std::time::Duration::from_secs(60));
    let queued = h
        .wait_for(&id, "the merge train", |item| {
            item["detail"]["merge_queue"]["state"].is_string()
        })
        .await;
    assert_eq!(queued["phase"], "active", "{queued:#}");
    assert_eq!(queued["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(h.mr(number)["state"], "opened", "queued, not merged yet");
    // The listing's row carries the status summary, from stored state.
    let list: Value = h
        .api
        .get(format!("{}/api/v1/work-items", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let status = &list["items"][0]["status"];
    assert_eq!(status["change"]["number"], number, "{status:#}");
    assert!(status["queue"]["state"].is_string(), "{status:#}");
    assert_eq!(status["branch"], "wq/train");
    assert_eq!(status["last_merge"]["result"], "accepted");
    assert_eq!(status["automation"]["auto_merge"], true);
    let summary: wq_core::StatusSummary = serde_json::from_value(status.clone()).unwrap();
    assert_eq!(
        wq_core::DisplayState::of(wq_core::Phase::Active, Some(&summary)),
        wq_core::DisplayState::Queued
    );
    // The train's pipeline passes and the train merges the MR.
    h.sim.advance(std::time::Duration::from_secs(60));
    let done = h.wait_phase(&id, "completed").await;
    assert_eq!(
        done["detail"]["merge_queue"],
        serde_json::Value::Null,
        "cleared: {done:#}"
    );
    assert_eq!(h.mr(number)["state"], "merged");
    assert_eq!(
        h.count("POST", &format!("/merge_trains/merge_requests/{number}")),
        1
    );
    h.finish().await;
}
