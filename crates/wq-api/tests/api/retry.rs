//! `POST /api/v1/work-items/{id}/retry`: 200 and a notify for failed and
//! cancelled items, 409 for the others, 404 and 400.

use std::time::Duration;

use serde_json::json;
use wq_api::models::ItemBody;
use wq_core::{ItemId, Phase};
use wq_testkit::http::{error_of, json_of};
use wq_testkit::types::PROBE_TYPE;
use wq_testkit::{Backend, TestApp, backend_tests};

use crate::api_app;

async fn retry_reactivates_a_failed_item_and_notifies_the_engine(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let failed = app.set_phase(&item, Phase::Failed).await;
    assert_eq!(failed.error.as_deref(), Some("boom"));
    assert!(!failed.actionable);

    let response = app
        .post(&format!("/api/v1/work-items/{}/retry", item.id))
        .await;
    let body: ItemBody = json_of(response).await;
    assert_eq!(body.id, item.id);
    assert_eq!(body.phase, Phase::Active);
    assert!(body.actionable);
    assert_eq!(body.attempts, 0);
    assert_eq!(body.error, None);
    assert_eq!(body.leased_until, None);

    // The engine is not started yet: the notify is queued for it.
    assert_eq!(app.engine.in_flight(), 1, "retry notified the engine");

    // Started, it runs the item, which has nothing to do and parks.
    app.engine.start();
    tokio::time::timeout(Duration::from_secs(20), app.engine.wait_idle())
        .await
        .expect("the engine goes idle");
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert_eq!(stored.phase, Phase::Active);
    assert_eq!(stored.attempts, 0);
    assert!(!stored.actionable, "the engine ran and parked the item");
    app.finish().await;
}
backend_tests!(retry_reactivates_a_failed_item_and_notifies_the_engine);

async fn retry_reactivates_a_cancelled_item(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app.insert("alpha").await;
    app.set_phase(&item, Phase::Cancelled).await;

    let response = app
        .post(&format!("/api/v1/work-items/{}/retry", item.id))
        .await;
    let body: ItemBody = json_of(response).await;
    assert_eq!(body.phase, Phase::Active);
    assert!(body.actionable);
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert_eq!(body, ItemBody::from(stored));
    app.finish().await;
}
backend_tests!(retry_reactivates_a_cancelled_item);

async fn retry_of_an_active_or_completed_item_is_409(backend: Backend) {
    let app = api_app(backend).start().await;
    let active = app.insert("alpha").await;
    let completed = app.insert("alpha").await;
    app.set_phase(&completed, Phase::Completed).await;

    for (item, phase) in [(&active, "active"), (&completed, "completed")] {
        let response = app
            .post(&format!("/api/v1/work-items/{}/retry", item.id))
            .await;
        let envelope = error_of(response, 409).await;
        assert_eq!(
            serde_json::to_value(envelope).unwrap(),
            json!({"error": {
                "code": "conflict",
                "message": format!(
                    "work item {} is {phase}: only failed or cancelled items can be retried",
                    item.id
                ),
                "field": null,
            }})
        );
    }
    let stored = app.store.item_get(completed.id).await.unwrap().unwrap();
    assert_eq!(
        stored.phase,
        Phase::Completed,
        "a refused retry changes nothing"
    );
    assert_eq!(
        app.engine.in_flight(),
        0,
        "a refused retry notifies nothing"
    );
    app.finish().await;
}
backend_tests!(retry_of_an_active_or_completed_item_is_409);

async fn retry_of_an_unknown_or_malformed_id(backend: Backend) {
    let app = api_app(backend).start().await;
    let unknown = ItemId::new_v7();
    let envelope = error_of(
        app.post(&format!("/api/v1/work-items/{unknown}/retry"))
            .await,
        404,
    )
    .await;
    assert_eq!(envelope.error.code, "not_found");
    assert_eq!(
        envelope.error.message,
        format!("work item {unknown} not found")
    );

    let envelope = error_of(app.post("/api/v1/work-items/nope/retry").await, 400).await;
    assert_eq!(envelope.error.field.as_deref(), Some("id"));
    assert_eq!(app.engine.in_flight(), 0);
    app.finish().await;
}
backend_tests!(retry_of_an_unknown_or_malformed_id);

/// Retries the item as the caller of `token`; answers the status and the
/// body.
async fn retry_as(app: &TestApp, token: &str, id: ItemId) -> reqwest::Response {
    app.request_as(
        reqwest::Method::POST,
        &format!("/api/v1/work-items/{id}/retry"),
        token,
    )
    .send()
    .await
    .unwrap()
}

async fn failed_probe(app: &TestApp, token: &str, extra: serde_json::Value) -> ItemId {
    let id = app.submit_probe(token, "gitlab", "team/app", extra).await;
    let item = app.store.item_get(id).await.unwrap().unwrap();
    app.set_phase(&item, Phase::Failed).await;
    id
}

/// One owner per item: another caller with `retry` on the scope gets 409
/// `owned_by_another_caller` (without the owner's identity in the message)
/// and nothing changes; the submitter and an admin of the scope may retry.
async fn retry_by_another_caller_is_refused_unless_admin(backend: Backend) {
    let app = api_app(backend).start().await;
    let id = failed_probe(&app, &app.tokens.team, json!({})).await;

    let envelope = error_of(retry_as(&app, &app.tokens.teammate, id).await, 409).await;
    assert_eq!(envelope.error.code, wq_core::OWNED_BY_ANOTHER_CALLER);
    assert!(
        !envelope.error.message.contains("token team"),
        "the owner is not named: {}",
        envelope.error.message
    );
    let stored = app.store.item_get(id).await.unwrap().unwrap();
    assert_eq!(
        stored.phase,
        Phase::Failed,
        "the refused retry changed nothing"
    );
    assert_eq!(app.engine.in_flight(), 0);

    // An admin of the item's scope may.
    let body: ItemBody = json_of(retry_as(&app, &app.tokens.team_admin, id).await).await;
    assert_eq!(body.phase, Phase::Active);

    // So may the submitter.
    let own = failed_probe(&app, &app.tokens.team, json!({})).await;
    let body: ItemBody = json_of(retry_as(&app, &app.tokens.team, own).await).await;
    assert_eq!(body.phase, Phase::Active);
    app.finish().await;
}
backend_tests!(retry_by_another_caller_is_refused_unless_admin);

/// An item whose type says its retry needs `admin`: its own submitter with
/// only `retry` gets 403; an admin of the scope retries it.
async fn retry_that_needs_admin_is_refused_without_it(backend: Backend) {
    let app = api_app(backend).start().await;
    let id = failed_probe(&app, &app.tokens.team, json!({"retry_needs_admin": true})).await;

    let envelope = error_of(retry_as(&app, &app.tokens.team, id).await, 403).await;
    assert_eq!(envelope.error.code, "forbidden");
    assert!(
        envelope.error.message.contains("admin"),
        "{}",
        envelope.error.message
    );
    let stored = app.store.item_get(id).await.unwrap().unwrap();
    assert_eq!(stored.phase, Phase::Failed);

    let body: ItemBody = json_of(retry_as(&app, &app.tokens.team_admin, id).await).await;
    assert_eq!(body.phase, Phase::Active);
    app.finish().await;
}
backend_tests!(retry_that_needs_admin_is_refused_without_it);

/// A caller who may read the item but not retry it gets 403; one who may
/// not even read it gets 404, as for an unknown id.
async fn retry_outside_the_read_scope_is_404(backend: Backend) {
    let app = api_app(backend).start().await;
    let hidden = app
        .submit_probe(&app.tokens.admin, "gitlab", "other/app", json!({}))
        .await;
    let item = app.store.item_get(hidden).await.unwrap().unwrap();
    app.set_phase(&item, Phase::Failed).await;

    let envelope = error_of(retry_as(&app, &app.tokens.team, hidden).await, 404).await;
    assert_eq!(
        envelope.error.message,
        format!("work item {hidden} not found")
    );
    let envelope = error_of(retry_as(&app, &app.tokens.reader, hidden).await, 403).await;
    assert_eq!(envelope.error.code, "forbidden");
    app.finish().await;
}
backend_tests!(retry_outside_the_read_scope_is_404);
