//! The app as a whole, over HTTP: an item failed by its executor is visible
//! through the API, a retry through the API recovers it, and the app ends
//! quiescent. And the `TestApp` itself: dropped unfinished it panics,
//! `finish` refuses work left behind, a halted app is resumed; the engine
//! signals every finished run.

use std::sync::Arc;

use wq_core::{Clock, ItemId, SystemClock, TypeRegistry, WorkItem};
use wq_store::{ClaimParams, NewItem};
use wq_testkit::types::{CHAIN, CHAIN_STEPS, ChainType};
use wq_testkit::{Backend, TestApp, TestAppBuilder, backend_tests};

async fn failed_item_is_visible_and_retry_recovers_it(backend: Backend) {
    let chain = ChainType::new();
    let registry = TypeRegistry::builder()
        .register(Arc::new(chain.clone()))
        .build()
        .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let app = TestApp::builder(backend)
        .registry(registry)
        .clock(clock.clone())
        .start()
        .await;
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

/// An app of the chain type over a fresh database of `backend`.
fn chain_app<'a>(backend: Backend, chain: &ChainType) -> TestAppBuilder<'a> {
    let registry = TypeRegistry::builder()
        .register(Arc::new(chain.clone()))
        .build()
        .unwrap();
    TestApp::builder(backend).registry(registry)
}

/// The panic message of a task that panicked.
async fn panic_of(task: tokio::task::JoinHandle<()>) -> String {
    let panic = task.await.expect_err("the task panics").into_panic();
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_default()
}

async fn an_app_dropped_without_finish_panics(backend: Backend) {
    let app = chain_app(backend, &ChainType::new()).start().await;
    let dropped = tokio::spawn(async move { drop(app) });
    let message = panic_of(dropped).await;
    assert!(message.contains("without finish()"), "{message}");
}

/// An app with its engine stopped (so no run claims the item before the
/// test does) and one actionable chain item that the test leased for
/// `lease`: the sweep passes it over while the lease lasts.
async fn app_with_a_leased_item(backend: Backend, lease: time::Duration) -> (TestApp, WorkItem) {
    let app = chain_app(backend, &ChainType::new())
        .engine_started(false)
        .start()
        .await;
    let item = app.insert(CHAIN).await;
    let now = app.clock.now();
    app.store
        .item_claim(ClaimParams {
            id: item.id,
            now,
            lease_until: now + lease,
            handled_types: vec![CHAIN.to_owned()],
        })
        .await
        .unwrap()
        .expect("claimed");
    (app, item)
}

async fn finish_refuses_an_item_left_actionable(backend: Backend) {
    // A lease nobody releases, longer than the engine grants: the item is
    // still actionable.
    let (app, item) = app_with_a_leased_item(backend, time::Duration::hours(1)).await;
    let finished = tokio::spawn(app.finish());
    let message = panic_of(finished).await;
    assert!(
        message.contains(&format!("item {} is still actionable", item.id)),
        "{message}"
    );
}

/// Work under a lease no longer than the engine's (a run a late hint
/// started, a lease a run could not release) is not left behind: `finish`
/// waits for the lease to end, and the engine then does the work.
async fn finish_waits_out_a_lease_the_engine_could_have_granted(backend: Backend) {
    let (app, _) = app_with_a_leased_item(backend, time::Duration::milliseconds(500)).await;
    // Quiescence, which `finish` proves, needs the item run and parked
    // once its lease ended (`finish` panicked on it before).
    app.finish().await;
}

async fn a_halted_app_is_resumed_over_its_database_address_and_tokens(backend: Backend) {
    let chain = ChainType::new();
    let first = chain_app(backend, &chain)
        .engine_started(false)
        .start()
        .await;
    let item = first.insert(CHAIN).await;
    let (address, admin) = (first.address, first.tokens.admin.clone());
    let halted = first.halt().await;
    assert_eq!(
        chain.executions.total(),
        0,
        "the stopped engine ran nothing"
    );

    let second = chain_app(backend, &chain).resume(halted).start().await;
    assert_eq!(second.address, address);
    let shown = wq_testkit::bearer_client(&admin)
        .get(second.url(&format!("/api/v1/work-items/{}", item.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), 200, "the same item, the same token");
    second.drain().await;
    assert_eq!(chain.executions.order(item.id), CHAIN_STEPS.to_vec());
    second.finish().await;
}

/// `runs_finished` moves once a run has ended, with what it wrote stored.
async fn a_finished_run_is_signalled(backend: Backend) {
    let chain = ChainType::new();
    let app = chain_app(backend, &chain).start().await;
    let mut runs = app.engine.runs_finished();
    let before = *runs.borrow_and_update();
    let item = app.insert(CHAIN).await;
    app.engine.notify(item.id);
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        runs.wait_for(|finished| *finished > before),
    )
    .await
    .expect("a run ends")
    .expect("the engine is there");
    assert_eq!(chain.executions.order(item.id), CHAIN_STEPS.to_vec());
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert!(!stored.actionable, "parked by the run: {stored:?}");
    app.finish().await;
}

backend_tests!(
    a_finished_run_is_signalled,
    an_app_dropped_without_finish_panics,
    finish_refuses_an_item_left_actionable,
    finish_waits_out_a_lease_the_engine_could_have_granted,
    a_halted_app_is_resumed_over_its_database_address_and_tokens,
);
