//! `POST /api/v1/work-items/{id}/cancel`: the item's submitter or an admin
//! stops workqueue managing an item; its change request is closed with a
//! note, on GitLab and GitHub, once, also across a crash.

use std::sync::Arc;
use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    CrashAt, CrashOnce, GithubRepo, Harness, Intercept, Options, bearer_client, manual,
};

backend_tests!(
    the_submitter_cancels_and_the_merge_request_is_closed_with_one_note,
    an_admin_cancels_a_pull_request_of_another_caller,
    a_caller_neither_owner_nor_admin_is_refused_and_nothing_changes,
    a_crash_between_the_close_and_the_stored_phase_converges,
    a_bad_cancel_body_names_its_field,
    a_retry_after_a_cancel_reopens_the_pull_request_once,
);

fn github() -> Options {
    Options {
        jobs: vec![JobSpec::new("ci", JobOutcome::Success)],
        github: Some(GithubRepo {
            merge_queue: false,
            required_approvals: 0,
            dismiss_stale_reviews: false,
        }),
        ..Options::default()
    }
}

/// Alice (`submit` on every project, no `admin`) submits a manual change;
/// the item's id and its change request's number once it is open.
async fn alices_change(h: &Harness, branch: &str) -> (String, u64) {
    let alice = bearer_client(&h.tokens.alice);
    let (status, reply) = h
        .submit_as(&alice, &manual(h.change(branch, &[("a.txt", "a\n")])))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let id = reply["item"]["id"].as_str().unwrap().to_owned();
    let number = h.wait_mr(&id).await;
    h.settle().await;
    (id, number)
}

/// The bot's comments on change request `number` that carry the status
/// note.
async fn status_notes(h: &Harness, number: u64) -> Vec<String> {
    h.comments(number)
        .await
        .into_iter()
        .filter(|(_, author, body)| {
            author == forge_sim::DEFAULT_USERNAME && body.contains("workqueue")
        })
        .map(|(_, _, body)| body)
        .collect()
}

/// The updates change request `number` was sent (a close is one).
fn change_updates(h: &Harness, number: u64) -> usize {
    let (method, suffix) = if h.forge == "github" {
        ("PATCH", format!("/pulls/{number}"))
    } else {
        ("PUT", format!("/merge_requests/{number}"))
    };
    h.count(method, &suffix)
}

/// The item's audit records of `kind`.
async fn audit_of(h: &Harness, id: &str, kind: &str) -> Vec<Value> {
    let trail: Value = h
        .api
        .get(format!("{}/api/v1/work-items/{id}/audit", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    trail["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|record| record["kind"] == kind)
        .cloned()
        .collect()
}

async fn the_submitter_cancels_and_the_merge_request_is_closed_with_one_note(backend: Backend) {
    let h = Harness::start(backend).await;
    let (id, number) = alices_change(&h, "wq/cancelled").await;
    assert_eq!(status_notes(&h, number).await.len(), 1);
    let updates = change_updates(&h, number);
    let alice = bearer_client(&h.tokens.alice);
    let path = format!("/api/v1/work-items/{id}/cancel");
    let (status, reply) = h
        .post_as(&alice, &path, Some(&json!({"reason": "superseded by !7"})))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    assert_eq!(reply["status"], "accepted");
    let item = h.wait_phase(&id, "cancelled").await;
    let error = item["error"].as_str().unwrap();
    assert!(
        error.starts_with("cancelled by alice") && error.ends_with(": superseded by !7"),
        "{error}"
    );
    assert_eq!(h.change_state(number).2, "closed");
    // One status note, edited in place to say who cancelled it and why.
    let notes = status_notes(&h, number).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Closed: cancelled by alice"),
        "{}",
        notes[0]
    );
    assert!(notes[0].contains("superseded by !7"), "{}", notes[0]);
    assert_eq!(h.count("POST", "/notes"), 1);
    assert_eq!(change_updates(&h, number), updates + 1, "one close");

    // Again: already cancelled, nothing written.
    h.settle().await;
    let writes = h
        .sim
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    let (status, reply) = h.post_as(&alice, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["status"], "cancelled");
    h.settle().await;
    assert_eq!(
        h.sim
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .count(),
        writes
    );
    assert_eq!(h.item(&id).await["phase"], "cancelled");

    // The trail says who asked, and the outcome the engine wrote.
    let asked = audit_of(&h, &id, "event.received").await;
    let asked: Vec<&Value> = asked
        .iter()
        .filter(|record| record["metadata"]["event_type"] == "mr.cancel")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert!(asked[0]["actor"].as_str().unwrap().starts_with("alice"));
    let raw: Value = serde_json::from_str(asked[0]["metadata"]["raw"].as_str().unwrap()).unwrap();
    assert_eq!(
        raw,
        json!({"command": "cancel", "reason": "superseded by !7"})
    );
    let ended = audit_of(&h, &id, "action.succeeded").await;
    assert!(
        ended
            .iter()
            .any(|record| record["trigger"]["action"] == "cancel_mr"
                && record["new_state"]["phase"] == "cancelled"),
        "{ended:#?}"
    );
    h.finish().await;
}

async fn an_admin_cancels_a_pull_request_of_another_caller(backend: Backend) {
    let h = Harness::start_with(backend, github()).await;
    let (id, number) = alices_change(&h, "wq/admin-cancels").await;
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    let item = h.wait_phase(&id, "cancelled").await;
    assert!(
        item["error"]
            .as_str()
            .unwrap()
            .starts_with("cancelled by admin"),
        "{item:#}"
    );
    let (_, _, state, merged) = h.change_state(number);
    assert_eq!((state.as_str(), merged), ("closed", false));
    let notes = status_notes(&h, number).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Closed: cancelled by admin"),
        "{}",
        notes[0]
    );
    // Nothing reopens or merges it afterwards.
    h.advance(Duration::from_secs(3600)).await;
    assert_eq!(h.change_state(number).2, "closed");
    assert_eq!(h.count("PUT", "/merge") + h.count("PUT", "/merge-async"), 0);
    h.finish().await;
}

async fn a_caller_neither_owner_nor_admin_is_refused_and_nothing_changes(backend: Backend) {
    for options in [Options::default(), github()] {
        let h = Harness::start_with(backend, options).await;
        let (id, number) = alices_change(&h, "wq/not-yours").await;
        let before = h.item(&id).await;
        let writes = h
            .sim
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .count();
        // Bob holds what Alice holds (read, submit, retry), not `admin`.
        let bob = bearer_client(&h.tokens.bob);
        let (status, reply) = h
            .post_as(&bob, &format!("/api/v1/work-items/{id}/cancel"), None)
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{reply}");
        assert_eq!(reply["error"]["code"], "forbidden", "{reply}");
        h.settle().await;
        let after = h.item(&id).await;
        assert_eq!(after["phase"], "active");
        assert_eq!(after["dimensions"], before["dimensions"]);
        assert_eq!(
            h.change_state(number).2,
            if h.forge == "github" {
                "open"
            } else {
                "opened"
            }
        );
        assert_eq!(
            h.sim
                .requests()
                .iter()
                .filter(|r| r.method != "GET")
                .count(),
            writes,
            "nothing written to the forge"
        );
        assert!(
            audit_of(&h, &id, "event.received")
                .await
                .iter()
                .all(|record| record["metadata"]["event_type"] != "mr.cancel"),
            "nothing stored"
        );
        h.finish().await;
    }
}

async fn a_crash_between_the_close_and_the_stored_phase_converges(backend: Backend) {
    for mut options in [Options::default(), github()] {
        options.wrap = Some(Box::new(|inner, _, _| {
            Arc::new(Intercept {
                inner,
                before_merge: Box::new(|| Box::pin(async {})),
                gate: None,
                crash: Some(CrashOnce::new(CrashAt::AfterClose)),
                torn_read: None,
                before_push: None,
            })
        }));
        let mut h = Harness::start_with(backend, options).await;
        let (id, number) = alices_change(&h, "wq/crash-cancel").await;
        let updates = change_updates(&h, number);
        let alice = bearer_client(&h.tokens.alice);
        let (status, reply) = h
            .post_as(&alice, &format!("/api/v1/work-items/{id}/cancel"), None)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
        h.settle().await;
        // The forge closed it; the process died before the phase was stored.
        assert_eq!(h.change_state(number).2, "closed");
        assert_eq!(h.item(&id).await["phase"], "active");
        // A second cancel while the first is unfinished is taken again.
        let (status, _) = h
            .post_as(&alice, &format!("/api/v1/work-items/{id}/cancel"), None)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        h.crash_and_restart().await;
        // The crashed run's lease expires; the item runs again.
        h.advance(Duration::from_secs(600)).await;
        let item = h.wait_phase(&id, "cancelled").await;
        assert!(
            item["error"]
                .as_str()
                .unwrap()
                .starts_with("cancelled by alice"),
            "{item:#}"
        );
        let (_, _, state, merged) = h.change_state(number);
        assert_eq!((state.as_str(), merged), ("closed", false));
        // One status note, one close: the run after the crash wrote neither again.
        let notes = status_notes(&h, number).await;
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("Closed: cancelled by alice"),
            "{}",
            notes[0]
        );
        assert_eq!(change_updates(&h, number), updates + 1, "closed once");
        h.finish().await;
    }
}

async fn a_bad_cancel_body_names_its_field(backend: Backend) {
    let h = Harness::start(backend).await;
    let (id, _) = alices_change(&h, "wq/bad-cancel").await;
    let path = format!("/api/v1/work-items/{id}/cancel");
    for (body, field) in [
        (json!({"reason": 7}), "reason"),
        (json!({"reason": "two\nlines"}), "reason"),
        (json!({"reason": "x".repeat(501)}), "reason"),
        (json!({"why": "x"}), "why"),
        (json!(["x"]), "body"),
    ] {
        let (status, reply) = h.post(&path, Some(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {reply}");
        assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
    }
    assert_eq!(h.item(&id).await["phase"], "active");
    h.finish().await;
}

/// The submitter cancels, then retries: the retry (which stores
/// `mr.retried` with it) reopens the pull request the cancel closed, once,
/// and the item goes on: the status note, edited in place, stops saying
/// closed. Without it the retried item would find its pull request closed
/// and be cancelled again.
async fn a_retry_after_a_cancel_reopens_the_pull_request_once(backend: Backend) {
    let h = Harness::start_with(backend, github()).await;
    let (id, number) = alices_change(&h, "wq/retried").await;
    let alice = bearer_client(&h.tokens.alice);
    let (status, reply) = h
        .post_as(&alice, &format!("/api/v1/work-items/{id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    h.wait_phase(&id, "cancelled").await;
    assert_eq!(h.change_state(number).2, "closed");
    let (status, reply) = h
        .post_as(&alice, &format!("/api/v1/work-items/{id}/retry"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    h.settle().await;
    assert_eq!(h.item(&id).await["phase"], "active");
    assert_eq!(h.change_state(number).2, "open");
    assert_eq!(audit_of(&h, &id, "forge.change_reopened").await.len(), 1);
    // The retry and its event, in one transaction, by the same caller.
    let retry = audit_of(&h, &id, "item.retried").await;
    let received = audit_of(&h, &id, "event.received").await;
    let event = received
        .iter()
        .find(|record| record["metadata"]["event_type"] == "mr.retried")
        .expect("the retry's event");
    assert_eq!(retry.len(), 1);
    assert_eq!(event["actor"], retry[0]["actor"]);
    assert!(
        retry[0]["actor"].as_str().unwrap().starts_with("alice"),
        "{retry:#?}"
    );
    // Nothing reopens it again; the note (edited no more often than its
    // interval) stops saying closed.
    h.advance(Duration::from_secs(600)).await;
    assert_eq!(audit_of(&h, &id, "forge.change_reopened").await.len(), 1);
    assert_eq!(h.item(&id).await["phase"], "active");
    let notes = status_notes(&h, number).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(!notes[0].contains("Closed"), "{}", notes[0]);
    h.finish().await;
}
