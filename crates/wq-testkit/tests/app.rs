//! The app as a whole, over HTTP: an item failed by its executor is visible
//! through the API, a retry through the API recovers it, and the app ends
//! quiescent.

use std::sync::Arc;

use wq_core::{Clock, ItemId, SystemClock, TypeRegistry};
use wq_store::NewItem;
use wq_testkit::types::{CHAIN, ChainType};
use wq_testkit::{Backend, TestApp, backend_tests};

async fn failed_item_is_visible_and_retry_recovers_it(backend: Backend) {
    let chain = ChainType::new();
    let registry = TypeRegistry::builder()
        .register(Arc::new(chain.clone()))
        .build()
        .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let app = TestApp::start(backend, registry, clock.clone()).await;
    let id = ItemId::new_v7();
    chain.fail_next(id, 1, true);
    app.store
        .item_insert(NewItem {
            id,
            item_type: CHAIN.to_owned(),
            idempotency_key: Some(format!("chain:{id}")),
            caller_identity: Some("tester".to_owned()),
            place: None,
            now: clock.now(),
            dimensions: Vec::new(),
        })
        .await
        .unwrap();
    app.drain().await;

    let shown: serde_json::Value = app
        .client
        .get(app.url(&format!("/api/v1/work-items/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["phase"], "failed", "{shown}");
    assert!(
        shown["error"]
            .as_str()
            .unwrap()
            .contains("scripted permanent failure of step1"),
        "{shown}"
    );

    let retried = app
        .client
        .post(app.url(&format!("/api/v1/work-items/{id}/retry")))
        .send()
        .await
        .unwrap();
    assert_eq!(retried.status(), 200);
    // The retry notified the engine: the item runs without a sweep.
    app.engine.wait_idle().await;
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);

    let again = app
        .client
        .post(app.url(&format!("/api/v1/work-items/{id}/retry")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "an active item cannot be retried");
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict");
    app.finish().await;
}

backend_tests!(failed_item_is_visible_and_retry_recovers_it);
