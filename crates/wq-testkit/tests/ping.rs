//! The `ping` type proves that an item type brings its whole life through
//! the registry: its migration ran (its table is there), its webhook
//! receiver answers at `/webhooks/ping`, and the engine runs its periodic
//! task only where the type is handled, processing the items a run returns.

use std::sync::Arc;
use std::time::Duration;

use wq_core::{Clock, ItemId, SystemClock, TypeRegistry};
use wq_engine::EngineConfig;
use wq_store::{NewEvent, NewItem};
use wq_testkit::ping::{PING, PONG, PingType, TICK, TICK_TASK, TOKEN_HEADER, WEBHOOK_EVENT};
use wq_testkit::types::{CHAIN, ChainType};
use wq_testkit::{Backend, TestApp, backend_tests};

const TOKEN: &str = "ping-secret";
const TICK_EVERY: Duration = Duration::from_millis(20);

fn engine_config(handled: &[&str]) -> EngineConfig {
    EngineConfig {
        handled_types: handled.iter().map(|name| (*name).to_owned()).collect(),
        sweep_interval: Duration::from_secs(3600),
        ..EngineConfig::default()
    }
}

/// Starts an app whose registry holds `chain` and `ping`, handling
/// `handled`.
async fn start(backend: Backend, handled: &[&str]) -> (TestApp, Arc<PingType>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut ping = None;
    let app = TestApp::start_building(backend, clock, engine_config(handled), |store| {
        let made = Arc::new(PingType::new(store, TOKEN, TICK_EVERY));
        ping = Some(Arc::clone(&made));
        TypeRegistry::builder()
            .register(Arc::new(ChainType::new()))
            .register(made)
            .build()
            .expect("registry")
    })
    .await;
    (app, ping.expect("built"))
}

async fn insert(app: &TestApp, item_type: &str) -> ItemId {
    let id = ItemId::new_v7();
    app.store
        .item_insert(NewItem {
            id,
            item_type: item_type.to_owned(),
            idempotency_key: None,
            caller_identity: Some("tester".to_owned()),
            place: None,
            now: app.clock.now(),
            dimensions: Vec::new(),
        })
        .await
        .expect("insert");
    id
}

/// Waits until `ticks` more ticks ran (so the run before the last one has
/// returned and its items were handed to the engine).
async fn wait_ticks(ping: &PingType, ticks: u64) {
    let mut seen = ping.ticks();
    let start = *seen.borrow_and_update();
    tokio::time::timeout(
        Duration::from_secs(30),
        seen.wait_for(|now| *now >= start + ticks),
    )
    .await
    .expect("the periodic task runs")
    .expect("ticks");
}

async fn a_handled_type_brings_its_table_webhook_and_periodic_task(backend: Backend) {
    let (app, ping) = start(backend, &[PING]).await;
    // Its migration ran: its own table answers.
    assert_eq!(ping.store().count(PONG).await.unwrap(), 0);

    let id = insert(&app, PING).await;
    app.drain().await;
    assert_eq!(ping.store().count(PONG).await.unwrap(), 1);

    // An event nobody is told about (the sweep is an hour away) waits
    // until a tick hands the item to the engine.
    app.store
        .event_insert(NewEvent {
            item_id: id,
            event_type: WEBHOOK_EVENT.to_owned(),
            body: serde_json::json!({}),
            now: app.clock.now(),
            origin: None,
        })
        .await
        .unwrap();
    ping.wake_on_tick(id);
    wait_ticks(&ping, 2).await;
    app.engine.wait_idle().await;
    assert_eq!(ping.store().count(PONG).await.unwrap(), 2);
    assert!(ping.store().count(TICK).await.unwrap() >= 2);
    let ran_now = app.engine.run_periodic(TICK_TASK).await;
    assert_eq!(ran_now.expect("handled").unwrap(), Vec::new());

    // Its webhook receiver answers at /webhooks/ping.
    let deliver = |token: &'static str| {
        app.client
            .post(app.url("/webhooks/ping"))
            .header(TOKEN_HEADER, token)
            .json(&serde_json::json!({ "item_id": id.to_string() }))
            .send()
    };
    assert_eq!(deliver("wrong").await.unwrap().status(), 401);
    let stored = deliver(TOKEN).await.unwrap();
    assert_eq!(stored.status(), 202);
    let ack: serde_json::Value = stored.json().await.unwrap();
    assert_eq!(ack["status"], "stored", "{ack}");
    app.drain().await;
    assert_eq!(ping.store().count(PONG).await.unwrap(), 3);
    app.finish().await;
}

async fn an_engine_that_does_not_handle_the_type_runs_none_of_its_tasks(backend: Backend) {
    let (app, ping) = start(backend, &[CHAIN]).await;
    assert!(app.engine.run_periodic(TICK_TASK).await.is_none());
    // Many tick intervals pass without a tick. On the paused clock, tokio
    // moves time only when every task waits, and then only to the next
    // timer: the sleep ends after every timer due before it fired and its
    // task ran, so a tick task the engine had started would have been
    // called by then. Nothing here needs a real timeout meanwhile.
    tokio::time::pause();
    tokio::time::sleep(TICK_EVERY * 20).await;
    tokio::time::resume();
    assert_eq!(ping.tick_calls(), 0);
    assert_eq!(*ping.ticks().borrow(), 0);
    assert_eq!(ping.store().count(TICK).await.unwrap(), 0);
    app.finish().await;
}

/// The type's migration is its own: idempotent beside the generic ones.
async fn the_migration_creates_the_table_once(backend: Backend) {
    let store = backend.fresh_store().await;
    let ping = Arc::new(PingType::new(Arc::clone(&store), TOKEN, TICK_EVERY));
    assert!(ping.store().count(PONG).await.is_err(), "no table yet");
    let registry = TypeRegistry::builder()
        .register(ping.clone())
        .build()
        .unwrap();
    registry.migrate().await.unwrap();
    registry.migrate().await.unwrap();
    assert_eq!(ping.store().count(PONG).await.unwrap(), 0);
    // The registry holds the type's receiver and task.
    let sources: Vec<&str> = registry.webhook_receivers().map(|r| r.source()).collect();
    assert_eq!(sources, ["ping"]);
    let tasks: Vec<&str> = registry.periodic(PING).iter().map(|t| t.name).collect();
    assert_eq!(tasks, [TICK_TASK]);
}

backend_tests!(
    a_handled_type_brings_its_table_webhook_and_periodic_task,
    the_migration_creates_the_table_once,
);

/// On the current-thread runtime, where tokio's clock can be paused.
mod an_engine_that_does_not_handle_the_type_runs_none_of_its_tasks {
    use wq_testkit::Backend;

    #[tokio::test]
    async fn sqlite() {
        super::an_engine_that_does_not_handle_the_type_runs_none_of_its_tasks(Backend::Sqlite)
            .await;
    }

    #[tokio::test]
    async fn postgres() {
        super::an_engine_that_does_not_handle_the_type_runs_none_of_its_tasks(Backend::Postgres)
            .await;
    }
}

/// One replica's engine with the `ping` type on the database at `url`.
async fn replica(url: &str) -> (Arc<wq_engine::ProcessingManager>, Arc<PingType>) {
    let store = wq_testkit::open_store(url).await;
    let ping = Arc::new(PingType::new(Arc::clone(&store), TOKEN, TICK_EVERY));
    let registry = TypeRegistry::builder()
        .register(ping.clone())
        .build()
        .expect("registry");
    registry.migrate().await.expect("migrate");
    let engine = wq_engine::ProcessingManager::new(
        store,
        Arc::new(registry),
        Arc::new(SystemClock),
        engine_config(&[PING]),
    )
    .expect("engine");
    engine.start();
    (engine, ping)
}

/// Replicas on one PostgreSQL: a periodic task runs on one of them at a
/// time, and another takes it up once the leader stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_run_a_periodic_task_on_one_leader() {
    let url = Backend::Postgres.fresh_url().await;
    let (first, first_ping) = replica(&url).await;
    let (second, second_ping) = replica(&url).await;
    // Both try every interval; one leads. Twenty ticks of the leader are
    // many intervals in which the other asked and was refused.
    let (mut first_ticks, mut second_ticks) = (first_ping.ticks(), second_ping.ticks());
    let first_leads = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            _ = first_ticks.wait_for(|n| *n >= 20) => true,
            _ = second_ticks.wait_for(|n| *n >= 20) => false,
        }
    })
    .await
    .expect("a leader ticks");
    let ((leader, leader_ping), (follower, follower_ping)) = if first_leads {
        ((first, first_ping), (second, second_ping))
    } else {
        ((second, second_ping), (first, first_ping))
    };
    assert_eq!(
        follower_ping.tick_calls(),
        0,
        "the follower never ran the task"
    );
    assert!(leader_ping.tick_calls() >= 20);

    // The leader stops (its lead is released); the follower takes over
    // within an interval and keeps ticking.
    leader.shutdown().await;
    let stopped_at = leader_ping.tick_calls();
    tokio::time::timeout(
        Duration::from_secs(30),
        follower_ping.ticks().wait_for(|n| *n >= 3),
    )
    .await
    .expect("the follower takes the lead")
    .expect("ticks");
    assert_eq!(
        leader_ping.tick_calls(),
        stopped_at,
        "the stopped leader runs nothing"
    );
    follower.shutdown().await;
    wq_store::testing::drop_postgres_database(&url).await;
}
