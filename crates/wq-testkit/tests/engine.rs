//! Acceptance tests of the processing engine on SQLite and PostgreSQL: the
//! chained loop, crash safety at every step, two engines on one database,
//! lease reclaim, events arriving during exit, handled types, failures,
//! deadline and shutdown.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{Clock, DimensionStatus, ItemId, ManualClock, Phase, SystemClock, TypeRegistry};
use wq_engine::{EngineConfig, FailPoint, Flow, Hooks, ProcessingManager, RunOutcome};
use wq_store::{ItemListParams, NewEvent, NewItem, Store};
use wq_testkit::types::{CHAIN, CHAIN_STEPS, ChainType};
use wq_testkit::{Backend, backend_tests, open_store};

fn registry(chain: &ChainType) -> Arc<TypeRegistry> {
    Arc::new(
        TypeRegistry::builder()
            .register(Arc::new(chain.clone()))
            .build()
            .expect("registry builds"),
    )
}

fn config() -> EngineConfig {
    EngineConfig {
        handled_types: vec![CHAIN.to_owned()],
        sweep_interval: Duration::from_secs(3600),
        ..EngineConfig::default()
    }
}

/// A manual clock at the current whole second, so the times it gives come
/// back unchanged from the stores, which keep microseconds.
fn manual_clock() -> Arc<ManualClock> {
    let now = OffsetDateTime::now_utc();
    Arc::new(ManualClock::new(now.replace_nanosecond(0).unwrap_or(now)))
}

async fn insert_chain(store: &Arc<dyn Store>, clock: &dyn Clock) -> ItemId {
    let item = store
        .item_insert(NewItem {
            id: ItemId::new_v7(),
            item_type: CHAIN.to_owned(),
            idempotency_key: None,
            caller_identity: Some("test".to_owned()),
            place: None,
            now: clock.now(),
            dimensions: Vec::new(),
        })
        .await
        .expect("insert item");
    item.id
}

async fn insert_event(store: &Arc<dyn Store>, id: ItemId, event_type: &str, clock: &dyn Clock) {
    store
        .event_insert(NewEvent {
            item_id: id,
            event_type: event_type.to_owned(),
            body: serde_json::json!({ "kind": event_type }),
            now: clock.now(),
            origin: None,
        })
        .await
        .expect("insert event");
}

/// Sweeps and waits until a sweep finds nothing left to do.
async fn drain(engine: &ProcessingManager) {
    for _ in 0..10_000 {
        let found = engine.sweep_now().await.expect("sweep");
        engine.wait_idle().await;
        if found == 0 {
            return;
        }
    }
    panic!("the engine did not reach quiescence");
}

async fn all_items(store: &Arc<dyn Store>) -> Vec<wq_core::WorkItem> {
    let mut items = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .item_list(ItemListParams {
                before,
                limit: 500,
                ..ItemListParams::default()
            })
            .await
            .expect("list items");
        let Some(last) = page.last() else {
            return items;
        };
        before = Some(last.id);
        items.extend(page);
    }
}

async fn assert_done(store: &Arc<dyn Store>, id: ItemId, with_extra: bool) {
    let view = store
        .item_view(id, OffsetDateTime::now_utc())
        .await
        .expect("view")
        .expect("item exists");
    assert_eq!(view.item.phase, Phase::Active, "item {id}");
    assert!(!view.item.actionable, "item {id} was left actionable");
    assert!(view.item.leased_until.is_none(), "item {id} kept its lease");
    for step in CHAIN_STEPS {
        let row = view
            .dimension(&format!("needs_{step}"), "")
            .unwrap_or_else(|| panic!("item {id} has no needs_{step} row"));
        assert_eq!(row.status, DimensionStatus::False, "item {id} {step}");
    }
    if with_extra {
        let extra = view
            .dimension("needs_extra", "")
            .unwrap_or_else(|| panic!("item {id} lost its event"));
        assert_eq!(extra.status, DimensionStatus::False);
    }
    assert!(
        store.event_next(id).await.expect("events").is_none(),
        "item {id} has an unprocessed event"
    );
}

async fn chained_actions_run_in_order_and_park(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let engine =
        ProcessingManager::new(store.clone(), registry(&chain), clock.clone(), config()).unwrap();
    let id = insert_chain(&store, clock.as_ref()).await;

    assert_eq!(engine.run_item(id).await, RunOutcome::Parked);
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);
    assert_done(&store, id, false).await;

    // A second run finds nothing to do and runs nothing.
    assert_eq!(engine.run_item(id).await, RunOutcome::Parked);
    assert_eq!(chain.executions.order(id).len(), 3);

    // An event wakes it: the handler's dimension drives the next action.
    insert_event(&store, id, "extra", clock.as_ref()).await;
    let item = store.item_get(id).await.unwrap().unwrap();
    assert!(item.actionable, "event insert sets actionable");
    engine.start();
    engine.notify(id);
    engine.wait_idle().await;
    assert_eq!(
        chain.executions.order(id),
        vec!["step1", "step2", "step3", "extra"]
    );
    assert_done(&store, id, true).await;
    engine.shutdown().await;
}

/// Crashes each item once at `point`, then lets a fresh engine recover.
struct CrashOnce {
    point: FailPoint,
    crashed: Mutex<HashSet<ItemId>>,
}

#[async_trait]
impl Hooks for CrashOnce {
    async fn at(&self, point: FailPoint, id: ItemId) -> Flow {
        if point == self.point && self.crashed.lock().unwrap().insert(id) {
            Flow::Crash
        } else {
            Flow::Continue
        }
    }
}

fn uncommitted_points_repeat(point: FailPoint) -> bool {
    matches!(point, FailPoint::AfterExecute | FailPoint::BeforePark)
}

async fn crash_at_every_step_converges(backend: Backend) {
    let points = [
        FailPoint::AfterClaim,
        FailPoint::AfterEventApplied,
        FailPoint::AfterExecute,
        FailPoint::AfterOutcome,
        FailPoint::BeforePark,
    ];
    for point in points {
        let url = backend.fresh_url().await;
        let store = open_store(&url).await;
        let chain = ChainType::new();
        let clock = manual_clock();
        let mut ids = Vec::new();
        for _ in 0..10 {
            let id = insert_chain(&store, clock.as_ref()).await;
            insert_event(&store, id, "extra", clock.as_ref()).await;
            ids.push(id);
        }

        let hooks = Arc::new(CrashOnce {
            point,
            crashed: Mutex::new(HashSet::new()),
        });
        let crashing = ProcessingManager::with_hooks(
            store.clone(),
            registry(&chain),
            clock.clone(),
            config(),
            hooks.clone(),
        )
        .unwrap();
        for id in &ids {
            assert_eq!(
                crashing.run_item(*id).await,
                RunOutcome::Crashed,
                "{point:?}"
            );
        }
        drop(crashing);

        // "Restart": a new engine on a new connection pool, after the dead
        // worker's leases expired.
        let store = open_store(&url).await;
        clock.advance(time::Duration::seconds(61));
        let restarted =
            ProcessingManager::new(store.clone(), registry(&chain), clock.clone(), config())
                .unwrap();
        restarted.start();
        drain(&restarted).await;
        restarted.shutdown().await;

        for id in &ids {
            assert_done(&store, *id, true).await;
            let order = chain.executions.order(*id);
            // At these points the last action's outcome is not written yet
            // (it is written with the next step or with the park), so that
            // one action runs again; everywhere else nothing repeats.
            let uncommitted = uncommitted_points_repeat(point);
            let expected_runs = if uncommitted { 5 } else { 4 };
            assert_eq!(order.len(), expected_runs, "{point:?}: {order:?}");
            for action in ["step1", "step2", "step3", "extra"] {
                assert!(chain.executions.count(*id, action) >= 1, "{point:?}");
            }
            // Each run's executions name its own claim, a later run's a
            // later one: where the crashed run executed an action, the
            // restarted run's views name another lease epoch.
            let leases = chain.executions.leases(*id);
            let epochs: Vec<_> = leases
                .iter()
                .map(|lease| lease.expect("an executor's view names its run's lease").0)
                .collect();
            assert!(epochs.is_sorted(), "{point:?}: {epochs:?}");
            let mut runs = epochs.clone();
            runs.dedup();
            let crashed_after_executing = matches!(
                point,
                FailPoint::AfterExecute | FailPoint::AfterOutcome | FailPoint::BeforePark
            );
            assert_eq!(
                runs.len(),
                if crashed_after_executing { 2 } else { 1 },
                "{point:?}: {epochs:?}"
            );
        }
        if uncommitted_points_repeat(point) {
            assert_eq!(
                chain.executions.repeated().len(),
                ids.len(),
                "{point:?}: exactly the one uncommitted action per item repeats"
            );
        } else {
            assert!(
                chain.executions.repeated().is_empty(),
                "{point:?}: committed actions repeated: {:?}",
                chain.executions.repeated()
            );
        }
    }
}

async fn two_engines_process_each_item_exactly_once(backend: Backend) {
    let url = backend.fresh_url().await;
    let store_a = open_store(&url).await;
    let store_b = open_store(&url).await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let count = 2_000;
    for _ in 0..count {
        insert_chain(&store_a, clock.as_ref()).await;
    }
    let settings = EngineConfig {
        sweep_batch: 500,
        ..config()
    };
    let engine_a = ProcessingManager::new(
        store_a.clone(),
        registry(&chain),
        clock.clone(),
        settings.clone(),
    )
    .unwrap();
    let engine_b =
        ProcessingManager::new(store_b.clone(), registry(&chain), clock.clone(), settings).unwrap();
    engine_a.start();
    engine_b.start();
    for _ in 0..1_000 {
        let found_a = engine_a.sweep_now().await.unwrap();
        let found_b = engine_b.sweep_now().await.unwrap();
        engine_a.wait_idle().await;
        engine_b.wait_idle().await;
        if found_a == 0 && found_b == 0 {
            break;
        }
    }
    engine_a.shutdown().await;
    engine_b.shutdown().await;

    assert_eq!(chain.executions.total(), (count * 3) as u64);
    assert!(
        chain.executions.repeated().is_empty(),
        "repeated: {:?}",
        chain.executions.repeated()
    );
    let items = all_items(&store_a).await;
    assert_eq!(items.len(), count);
    let left: Vec<_> = items.iter().filter(|item| item.actionable).collect();
    assert!(left.is_empty(), "{} items left actionable", left.len());
}

async fn expired_lease_is_reclaimed_by_another_engine(backend: Backend) {
    let url = backend.fresh_url().await;
    let store_a = open_store(&url).await;
    let store_b = open_store(&url).await;
    let chain = ChainType::new();
    let clock = manual_clock();
    let id = insert_chain(&store_a, clock.as_ref()).await;

    let dead = ProcessingManager::with_hooks(
        store_a,
        registry(&chain),
        clock.clone(),
        config(),
        Arc::new(CrashOnce {
            point: FailPoint::AfterClaim,
            crashed: Mutex::new(HashSet::new()),
        }),
    )
    .unwrap();
    assert_eq!(dead.run_item(id).await, RunOutcome::Crashed);

    let other =
        ProcessingManager::new(store_b.clone(), registry(&chain), clock.clone(), config()).unwrap();
    assert_eq!(other.run_item(id).await, RunOutcome::NotClaimed);
    assert_eq!(
        other.sweep_now().await.unwrap(),
        0,
        "a leased item is not swept"
    );

    clock.advance(time::Duration::seconds(61));
    assert_eq!(other.run_item(id).await, RunOutcome::Parked);
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);
    assert_done(&store_b, id, false).await;
}

/// Inserts an event at the moment the worker decided to exit.
struct EventAtExit {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    fired: Mutex<bool>,
}

#[async_trait]
impl Hooks for EventAtExit {
    async fn at(&self, point: FailPoint, id: ItemId) -> Flow {
        if point == FailPoint::BeforePark
            && !std::mem::replace(&mut *self.fired.lock().unwrap(), true)
        {
            insert_event(&self.store, id, "extra", self.clock.as_ref()).await;
        }
        Flow::Continue
    }
}

async fn event_during_exit_is_processed_promptly(backend: Backend) {
    let url = backend.fresh_url().await;
    let store = open_store(&url).await;
    let other_replica = open_store(&url).await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let id = insert_chain(&store, clock.as_ref()).await;
    let hooks = Arc::new(EventAtExit {
        store: other_replica,
        clock: clock.clone(),
        fired: Mutex::new(false),
    });
    // The sweep interval is an hour: only the park step can catch it.
    let engine =
        ProcessingManager::with_hooks(store.clone(), registry(&chain), clock, config(), hooks)
            .unwrap();
    assert_eq!(engine.run_item(id).await, RunOutcome::Parked);
    assert_eq!(
        chain.executions.order(id),
        vec!["step1", "step2", "step3", "extra"],
        "the event that arrived during exit was handled in the same run"
    );
    assert_done(&store, id, true).await;
}

async fn empty_handled_types_claim_nothing(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let id = insert_chain(&store, clock.as_ref()).await;
    let idle = ProcessingManager::new(
        store.clone(),
        registry(&chain),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    idle.start();
    assert_eq!(idle.sweep_now().await.unwrap(), 0);
    assert_eq!(idle.run_item(id).await, RunOutcome::NotClaimed);
    idle.notify(id);
    idle.wait_idle().await;
    idle.shutdown().await;
    let item = store.item_get(id).await.unwrap().unwrap();
    assert!(item.actionable && item.leased_until.is_none());
    assert_eq!(chain.executions.total(), 0);

    // An engine for another type leaves it alone too.
    let noop_registry = Arc::new(
        TypeRegistry::builder()
            .register(Arc::new(chain.clone()))
            .register(Arc::new(wq_testkit::types::NoopType))
            .build()
            .unwrap(),
    );
    let other = ProcessingManager::new(
        store.clone(),
        noop_registry,
        clock,
        EngineConfig {
            handled_types: vec![wq_testkit::types::NOOP.to_owned()],
            ..EngineConfig::default()
        },
    )
    .unwrap();
    assert_eq!(other.sweep_now().await.unwrap(), 0);
    assert_eq!(other.run_item(id).await, RunOutcome::NotClaimed);
    assert_eq!(chain.executions.total(), 0);
}

async fn failures_back_off_then_fail_at_the_limit(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock = manual_clock();
    let settings = EngineConfig {
        max_attempts: 3,
        ..config()
    };
    let engine =
        ProcessingManager::new(store.clone(), registry(&chain), clock.clone(), settings).unwrap();

    // Two transient failures, then success: attempts count consecutive
    // failures and reset on success.
    let flaky = insert_chain(&store, clock.as_ref()).await;
    chain.fail_next(flaky, 2, false);
    assert_eq!(engine.run_item(flaky).await, RunOutcome::Backoff);
    let item = store.item_get(flaky).await.unwrap().unwrap();
    assert_eq!(item.attempts, 1);
    assert!(
        item.error
            .as_deref()
            .unwrap()
            .contains("scripted failure of step1")
    );
    assert!(item.actionable);
    assert_eq!(engine.sweep_now().await.unwrap(), 0, "backoff is respected");
    assert_eq!(engine.run_item(flaky).await, RunOutcome::NotClaimed);
    clock.advance(time::Duration::seconds(3));
    assert_eq!(engine.run_item(flaky).await, RunOutcome::Backoff);
    assert_eq!(store.item_get(flaky).await.unwrap().unwrap().attempts, 2);
    clock.advance(time::Duration::seconds(5));
    assert_eq!(engine.run_item(flaky).await, RunOutcome::Parked);
    let item = store.item_get(flaky).await.unwrap().unwrap();
    assert_eq!((item.attempts, item.error.as_deref()), (0, None));
    assert_eq!(
        chain.executions.order(flaky),
        vec!["step1", "step2", "step3"]
    );

    // Failing past the limit fails the item, visibly; retry recovers it.
    let broken = insert_chain(&store, clock.as_ref()).await;
    chain.fail_next(broken, 3, false);
    for _ in 0..3 {
        clock.advance(time::Duration::seconds(600));
        engine.run_item(broken).await;
    }
    let item = store.item_get(broken).await.unwrap().unwrap();
    assert_eq!(item.phase, Phase::Failed);
    assert_eq!(item.attempts, 3);
    assert!(!item.actionable, "a failed item parks");
    assert!(item.error.as_deref().unwrap().contains("step1"));
    store
        .item_retry(broken, clock.now(), "tester", None)
        .await
        .unwrap();
    assert_eq!(engine.run_item(broken).await, RunOutcome::Parked);
    assert_done(&store, broken, false).await;

    // A permanent failure fails at once.
    let doomed = insert_chain(&store, clock.as_ref()).await;
    chain.fail_next(doomed, 1, true);
    assert_eq!(engine.run_item(doomed).await, RunOutcome::Parked);
    let item = store.item_get(doomed).await.unwrap().unwrap();
    assert_eq!(item.phase, Phase::Failed);
    assert_eq!(item.attempts, 1);

    // Events for a failed item are discarded, not applied (DDR-37).
    insert_event(&store, doomed, "finish", clock.as_ref()).await;
    assert_eq!(engine.run_item(doomed).await, RunOutcome::Parked);
    let item = store.item_get(doomed).await.unwrap().unwrap();
    assert_eq!(item.phase, Phase::Failed);
    assert!(store.event_next(doomed).await.unwrap().is_none());
}

async fn deadline_leaves_the_item_to_the_sweep(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let id = insert_chain(&store, clock.as_ref()).await;
    let hurried = ProcessingManager::new(
        store.clone(),
        registry(&chain),
        clock.clone(),
        EngineConfig {
            deadline: Duration::ZERO,
            ..config()
        },
    )
    .unwrap();
    assert_eq!(hurried.run_item(id).await, RunOutcome::Deadline);
    let item = store.item_get(id).await.unwrap().unwrap();
    assert!(item.actionable && item.leased_until.is_none());
    let patient = ProcessingManager::new(store.clone(), registry(&chain), clock, config()).unwrap();
    assert_eq!(patient.sweep_now().await.unwrap(), 1);
    patient.start();
    patient.wait_idle().await;
    patient.shutdown().await;
    assert_done(&store, id, false).await;
}

/// Holds every item after its executor ran, until released.
struct Gate {
    reached: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

#[async_trait]
impl Hooks for Gate {
    async fn at(&self, point: FailPoint, _id: ItemId) -> Flow {
        if point == FailPoint::AfterExecute {
            self.reached.notify_one();
            let _permit = self.release.acquire().await.expect("gate open");
        }
        Flow::Continue
    }
}

/// A run whose item another engine took over (its lease expired while the
/// executor was held) ends as a lease loss and counts one; the sweep that
/// found the item reports it in the backlog gauge. The metrics go to a
/// recorder of this test's own (a current-thread runtime: every task of
/// the test runs on the thread it is set for).
#[tokio::test(flavor = "current_thread")]
async fn a_run_that_lost_its_lease_is_counted_and_the_sweep_reports_its_backlog() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let url = Backend::Sqlite.fresh_url().await;
    let store_a = open_store(&url).await;
    let store_b = open_store(&url).await;
    let chain = ChainType::new();
    let clock = manual_clock();
    let id = insert_chain(&store_a, clock.as_ref()).await;
    let gate = Arc::new(Gate {
        reached: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let slow = ProcessingManager::with_hooks(
        store_a,
        registry(&chain),
        clock.clone(),
        config(),
        gate.clone(),
    )
    .unwrap();
    let reached = gate.reached.notified();
    let held = tokio::spawn({
        let slow = Arc::clone(&slow);
        async move { slow.run_item(id).await }
    });
    reached.await;
    // The held run's lease expires; another engine sweeps the item up and
    // finishes it.
    clock.advance(time::Duration::seconds(61));
    let other =
        ProcessingManager::new(store_b.clone(), registry(&chain), clock.clone(), config()).unwrap();
    assert_eq!(other.sweep_now().await.unwrap(), 1);
    let gauge = |name: &str| {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find(|(key, ..)| key.key().name() == name)
            .map(|(.., value)| value)
    };
    assert_eq!(
        gauge(wq_engine::metrics::SWEEP_BACKLOG),
        Some(DebugValue::Gauge(1.0.into()))
    );
    // That sweep claimed the item and runs it to its park.
    other.wait_idle().await;
    gate.release.add_permits(100);
    assert_eq!(held.await.unwrap(), RunOutcome::LeaseLost);
    assert_eq!(
        gauge(wq_engine::metrics::LEASE_LOSSES_TOTAL),
        Some(DebugValue::Counter(1))
    );
    assert_done(&store_b, id, false).await;
}

async fn shutdown_finishes_the_step_and_releases_the_lease(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let id = insert_chain(&store, clock.as_ref()).await;
    let gate = Arc::new(Gate {
        reached: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let engine = ProcessingManager::with_hooks(
        store.clone(),
        registry(&chain),
        clock.clone(),
        config(),
        gate.clone(),
    )
    .unwrap();
    engine.start();
    engine.notify(id);
    gate.reached.notified().await;
    // Polled once here, shutdown stops intake and then has nothing to wait
    // for but the loops: pending means it waits for the held step. Nobody
    // else polls it, so it cannot end before the gate opens.
    let mut stopping = std::pin::pin!(engine.shutdown());
    let first_poll = std::future::poll_fn(|context| Poll::Ready(stopping.as_mut().poll(context)));
    assert!(
        first_poll.await.is_pending(),
        "shutdown waits for the running step"
    );
    gate.release.add_permits(100);
    stopping.await;

    assert_eq!(chain.executions.order(id), vec!["step1"]);
    let item = store.item_get(id).await.unwrap().unwrap();
    assert!(
        item.actionable,
        "unfinished work stays visible to the sweep"
    );
    assert!(item.leased_until.is_none(), "the lease was released");
    engine.notify(id);
    assert_eq!(engine.in_flight(), 0, "no intake after shutdown");

    let next = ProcessingManager::new(store.clone(), registry(&chain), clock, config()).unwrap();
    assert_eq!(next.run_item(id).await, RunOutcome::Parked);
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);
}

/// Holds every executor's step, as a slow forge call would, until the test
/// lets one through; reports each lease the heartbeat renews.
struct SlowAction {
    reached: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
    renewed: tokio::sync::watch::Sender<Option<OffsetDateTime>>,
}

#[async_trait]
impl Hooks for SlowAction {
    async fn at(&self, point: FailPoint, _id: ItemId) -> Flow {
        if point == FailPoint::AfterExecute {
            self.reached.notify_one();
            self.release.acquire().await.expect("gate open").forget();
        }
        Flow::Continue
    }

    fn lease_renewed(&self, _id: ItemId, until: OffsetDateTime) {
        self.renewed.send_replace(Some(until));
    }
}

async fn heartbeat_keeps_the_lease_through_a_slow_action(backend: Backend) {
    let url = backend.fresh_url().await;
    let store = open_store(&url).await;
    let other_store = open_store(&url).await;
    let chain = ChainType::new();
    let clock = manual_clock();
    let id = insert_chain(&store, clock.as_ref()).await;
    // The lease runs on the manual clock. While each action is held, the
    // clock moves four lease lengths, one at a time; only the heartbeat
    // (every third of the lease, in real time) keeps the item from being
    // reclaimed, and the test waits for it to renew the lease from the
    // clock's new time before another engine tries to claim the item.
    let lease = Duration::from_millis(300);
    let settings = EngineConfig { lease, ..config() };
    let hooks = Arc::new(SlowAction {
        reached: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
        renewed: tokio::sync::watch::Sender::new(None),
    });
    let slow = ProcessingManager::with_hooks(
        store.clone(),
        registry(&chain),
        clock.clone(),
        settings.clone(),
        hooks.clone(),
    )
    .unwrap();
    let mut renewed = hooks.renewed.subscribe();
    let running = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.run_item(id).await })
    };
    let other =
        ProcessingManager::new(other_store, registry(&chain), clock.clone(), settings).unwrap();
    for _step in CHAIN_STEPS {
        hooks.reached.notified().await;
        for _ in 0..4 {
            clock.set(clock.now() + lease);
            let due = clock.now() + lease;
            tokio::time::timeout(
                Duration::from_secs(30),
                renewed.wait_for(|until| until.is_some_and(|until| until >= due)),
            )
            .await
            .expect("the heartbeat renews the lease")
            .expect("renewals");
            assert_eq!(
                other.run_item(id).await,
                RunOutcome::NotClaimed,
                "the lease expired under a running action"
            );
        }
        hooks.release.add_permits(1);
    }
    assert_eq!(running.await.unwrap(), RunOutcome::Parked);
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);
    assert!(chain.executions.repeated().is_empty());
    assert_done(&store, id, false).await;
}

/// Counts loops running at once (from claim to park). The first `fill`
/// loops wait after their claim until all of them are claimed, so the run
/// slots are seen full whatever the scheduling; later loops go straight on
/// (an item can be claimed again when the first sweep found it running).
struct Concurrency {
    running: Mutex<(usize, usize)>,
    fill: usize,
    claimed: tokio::sync::watch::Sender<usize>,
}

#[async_trait]
impl Hooks for Concurrency {
    async fn at(&self, point: FailPoint, _id: ItemId) -> Flow {
        match point {
            FailPoint::AfterClaim => {
                {
                    let mut running = self.running.lock().unwrap();
                    running.0 += 1;
                    running.1 = running.1.max(running.0);
                }
                self.claimed.send_modify(|claimed| *claimed += 1);
                let mut claimed = self.claimed.subscribe();
                claimed
                    .wait_for(|claimed| *claimed >= self.fill)
                    .await
                    .expect("the hooks live");
            }
            FailPoint::BeforePark => self.running.lock().unwrap().0 -= 1,
            _ => {}
        }
        Flow::Continue
    }
}

async fn notify_is_deduplicated_and_the_pool_is_bounded(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (workers, max_runs) = (3, 5);
    let concurrency = Arc::new(Concurrency {
        running: Mutex::new((0, 0)),
        fill: max_runs,
        claimed: tokio::sync::watch::Sender::new(0),
    });
    chain.probe.hold_until(workers);
    let engine = ProcessingManager::with_hooks(
        store.clone(),
        registry(&chain),
        clock.clone(),
        EngineConfig {
            workers,
            max_runs,
            ..config()
        },
        concurrency.clone(),
    )
    .unwrap();
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(insert_chain(&store, clock.as_ref()).await);
    }
    for _ in 0..50 {
        for id in &ids {
            engine.notify(*id);
        }
    }
    assert_eq!(engine.in_flight(), ids.len(), "one queue entry per item");
    engine.start();
    engine.wait_idle().await;
    engine.shutdown().await;
    let (still_running, most) = *concurrency.running.lock().unwrap();
    assert_eq!(still_running, 0);
    assert_eq!(
        most, max_runs,
        "at most `max_runs` loops run at once, and the slots are used"
    );
    assert_eq!(chain.probe.running(), 0);
    assert_eq!(
        chain.probe.most(),
        workers,
        "at most `workers` executors run at once, and the pool is used"
    );
    for id in &ids {
        assert_eq!(chain.executions.order(*id), vec!["step1", "step2", "step3"]);
        assert_done(&store, *id, false).await;
    }
}

async fn a_panicking_executor_is_contained_and_retried_after_its_lease(backend: Backend) {
    let store = backend.fresh_store().await;
    let chain = ChainType::new();
    let clock = manual_clock();
    let engine =
        ProcessingManager::new(store.clone(), registry(&chain), clock.clone(), config()).unwrap();
    let broken = insert_chain(&store, clock.as_ref()).await;
    let healthy = insert_chain(&store, clock.as_ref()).await;
    chain.panic_next(broken, 1);
    engine.start();
    engine.notify(broken);
    engine.notify(healthy);
    // The pool goes idle: the panic did not leave the item tracked.
    tokio::time::timeout(Duration::from_secs(10), engine.wait_idle())
        .await
        .expect("the engine is idle after a panic");
    assert_eq!(
        chain.executions.order(healthy),
        vec!["step1", "step2", "step3"]
    );
    assert!(chain.executions.order(broken).is_empty());
    let item = store.item_get(broken).await.unwrap().unwrap();
    assert!(
        item.leased_until.is_some(),
        "no write after the panic, as in a crash"
    );
    assert_eq!(
        engine.sweep_now().await.unwrap(),
        0,
        "leased: not swept yet"
    );

    clock.advance(time::Duration::seconds(61));
    assert_eq!(engine.sweep_now().await.unwrap(), 1);
    engine.wait_idle().await;
    assert_eq!(
        chain.executions.order(broken),
        vec!["step1", "step2", "step3"]
    );
    assert_done(&store, broken, false).await;
    engine.shutdown().await;
}

backend_tests!(
    a_panicking_executor_is_contained_and_retried_after_its_lease,
    notify_is_deduplicated_and_the_pool_is_bounded,
    heartbeat_keeps_the_lease_through_a_slow_action,
    chained_actions_run_in_order_and_park,
    crash_at_every_step_converges,
    two_engines_process_each_item_exactly_once,
    expired_lease_is_reclaimed_by_another_engine,
    event_during_exit_is_processed_promptly,
    empty_handled_types_claim_nothing,
    failures_back_off_then_fail_at_the_limit,
    deadline_leaves_the_item_to_the_sweep,
    shutdown_finishes_the_step_and_releases_the_lease,
);

/// PostgreSQL: an item another replica creates (an API-only replica taking
/// a submission, say) or gives an event is taken at once by the replica
/// that processes, from the work hint its commit sent, not at its next
/// sweep (an hour away here); and the hints of its own store are not
/// heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replicas_new_work_is_taken_at_once() {
    let url = Backend::Postgres.fresh_url().await;
    let processing = open_store(&url).await;
    let api_only = open_store(&url).await;
    let chain = ChainType::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let engine = ProcessingManager::new(
        processing.clone(),
        registry(&chain),
        clock.clone(),
        config(),
    )
    .unwrap();
    engine.start();
    let mut listening = engine.listening();
    tokio::time::timeout(Duration::from_secs(30), listening.wait_for(|on| *on))
        .await
        .expect("the engine listens for hints")
        .unwrap();
    engine.wait_idle().await;
    assert_eq!(engine.in_flight(), 0);

    let mut finished = engine.runs_finished();
    let before = *finished.borrow_and_update();
    let id = insert_chain(&api_only, clock.as_ref()).await;
    // The only way the engine hears of it before the hour is up: the hint.
    tokio::time::timeout(
        Duration::from_secs(30),
        finished.wait_for(|runs| *runs > before),
    )
    .await
    .expect("the item another replica created was taken from its hint")
    .unwrap();
    engine.wait_idle().await;
    assert_eq!(chain.executions.order(id), vec!["step1", "step2", "step3"]);
    assert_done(&processing, id, false).await;

    // An event the other replica stores wakes it the same way.
    let before = *finished.borrow_and_update();
    insert_event(&api_only, id, "extra", clock.as_ref()).await;
    tokio::time::timeout(
        Duration::from_secs(30),
        finished.wait_for(|runs| *runs > before),
    )
    .await
    .expect("the event another replica stored was taken from its hint")
    .unwrap();
    engine.wait_idle().await;
    assert_done(&processing, id, true).await;
    engine.shutdown().await;
}
