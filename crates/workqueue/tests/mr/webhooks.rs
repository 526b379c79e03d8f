//! `/webhooks/gitlab`: authentication, routing, and deliveries that come
//! twice or out of order.

use std::time::Duration;

use forge_sim::{WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::json;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, SECRET, change, manual};

backend_tests!(
    bad_tokens_are_refused_and_odd_deliveries_ignored,
    duplicated_deliveries_change_nothing_twice,
    a_close_overtaken_by_its_reopen_keeps_the_item_active,
);

async fn deliver(
    h: &Harness,
    token: Option<&str>,
    event: &str,
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let mut request = h
        .client
        .post(format!("{}/webhooks/gitlab", h.url))
        .header("X-Gitlab-Event", event)
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.header("X-Gitlab-Token", token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

async fn bad_tokens_are_refused_and_odd_deliveries_ignored(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/hooks", &[("w.txt", "w\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let hook = json!({
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "project": {"id": h.project, "path_with_namespace": "team/app"},
        "object_attributes": {"iid": number, "action": "close", "state": "closed",
                              "source_branch": "wq/hooks", "target_branch": "main"},
    })
    .to_string();
    for token in [None, Some("wrong")] {
        let (status, reply) = deliver(&h, token, "Merge Request Hook", &hook).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{reply}");
    }
    h.settle().await;
    let store = &h.app().store;
    let item_id: wq_core::ItemId = id.parse().unwrap();
    assert!(
        store.event_next(item_id).await.unwrap().is_none(),
        "nothing stored"
    );
    assert_eq!(h.item(&id).await["phase"], "active");
    let (status, reply) = deliver(&h, Some(SECRET), "Deployment Hook", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    assert_eq!(reply["status"], "ignored");
    let (status, reply) = deliver(&h, Some(SECRET), "Merge Request Hook", "{not json").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    assert_eq!(reply["status"], "ignored");
    // An authentic close of the MR is confirmed against the forge: still
    // open there, so nothing ends.
    let (status, reply) = deliver(&h, Some(SECRET), "Merge Request Hook", &hook).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    assert_eq!(reply["status"], "stored");
    h.settle().await;
    assert_eq!(h.item(&id).await["phase"], "active");
    h.finish().await;
}

async fn duplicated_deliveries_change_nothing_twice(backend: Backend) {
    let h = Harness::start(backend).await;
    h.sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Duplicate,
        None,
        1000,
    ));
    let id = h
        .submit_ok(
            &change("wq/twice", &[("t.txt", "t\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_phase(&id, "completed").await;
    h.settle().await;
    assert!(
        h.sim.webhook_deliveries().len() >= 4,
        "deliveries were duplicated: {}",
        h.sim.webhook_deliveries().len()
    );
    assert_eq!(h.count("PUT", "/merge"), 1);
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    assert_eq!(h.count("POST", "/notes"), 1);
    h.finish().await;
}

async fn a_close_overtaken_by_its_reopen_keeps_the_item_active(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/flip", &[("f.txt", "f\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    // The close and the reopen hooks are held and delivered newest first.
    h.sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Hold,
        Some("Merge Request Hook"),
        2,
    ));
    for state_event in ["close", "reopen"] {
        let status = h
            .gitlab_put(
                &format!("/merge_requests/{number}"),
                json!({"state_event": state_event}),
            )
            .await;
        assert!(status.is_success());
    }
    h.sim.release_held_webhooks();
    h.sim.flush_webhooks(Duration::from_secs(5)).await;
    h.settle().await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(h.mr(number)["state"], "opened");
    h.finish().await;
}
