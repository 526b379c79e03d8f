//! The SQS intake against a real SQS and SNS API (`moto_server` on
//! loopback, see `wq_testkit::moto`), with the `ping` type's webhook
//! receiver: deliveries published to an SNS topic reach their item through
//! the queue, wrapped or raw; refusals are never stored and end in the
//! dead-letter queue; a crash between store and delete redelivers; a slow
//! batch stays hidden and a shutdown releases what it did not handle.
#![allow(
    clippy::disallowed_methods,
    reason = "waits on moto's real-time visibility timeouts"
)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use wq_core::{Clock, ItemId, SystemClock, TypeRegistry};
use wq_engine::EngineConfig;
use wq_intake::{Flow, IntakeHandle, IntakeHooks, QueueTrust, SqsConfig, SqsIntake};
use wq_store::NewItem;
use wq_testkit::moto::Queues;
use wq_testkit::ping::{EVENT_HEADER, PING, PONG, PingType, TOKEN_HEADER};
use wq_testkit::{Backend, TestApp, backend_tests};

const TOKEN: &str = "ping-secret";
const WAIT: Duration = Duration::from_secs(30);

backend_tests!(deliveries_through_sns_reach_their_item_and_leave_the_queue);

async fn queues(raw: bool, visibility_seconds: u32) -> Queues {
    Queues::new(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
        raw,
        visibility_seconds,
    )
    .await
}

fn config(queues: &Queues, trust: QueueTrust, wait_seconds: u64) -> SqsConfig {
    SqsConfig {
        wait_seconds,
        visibility_timeout_seconds: 2,
        trust,
        ..SqsConfig::new(&queues.queue)
    }
}

/// An app with the `ping` type (an hour between sweeps: only the intake's
/// wake-ups move items), and one ping item that has ponged once.
async fn ping_app(backend: Backend) -> (Ping, Arc<PingType>, ItemId) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut ping = None;
    let mut types = None;
    let config = EngineConfig {
        handled_types: vec![PING.to_owned()],
        sweep_interval: Duration::from_secs(3600),
        ..EngineConfig::default()
    };
    let app = TestApp::start_building(backend, clock, config, |store| {
        let made = Arc::new(PingType::new(store, TOKEN, Duration::from_secs(3600)));
        ping = Some(Arc::clone(&made));
        let registry = TypeRegistry::builder()
            .register(made)
            .build()
            .expect("registry");
        types = Some(registry.clone());
        registry
    })
    .await;
    let app = Ping {
        app,
        types: types.expect("built"),
    };
    let id = ItemId::new_v7();
    app.store
        .item_insert(NewItem {
            id,
            item_type: PING.to_owned(),
            idempotency_key: None,
            caller_identity: Some("tester".to_owned()),
            place: None,
            now: app.clock.now(),
            dimensions: Vec::new(),
        })
        .await
        .expect("insert");
    app.drain().await;
    let ping = ping.expect("built");
    assert_eq!(ping.store().count(PONG).await.unwrap(), 1);
    (app, ping, id)
}

/// The app and its registry (whose webhook receivers the intake uses).
struct Ping {
    app: TestApp,
    types: TypeRegistry,
}

impl std::ops::Deref for Ping {
    type Target = TestApp;

    fn deref(&self) -> &TestApp {
        &self.app
    }
}

impl Ping {
    async fn finish(self) {
        self.app.finish().await;
    }
}

fn intake(app: &Ping, queues: &Queues, config: SqsConfig) -> SqsIntake {
    let engine = Arc::clone(&app.engine);
    SqsIntake::new(
        queues.sqs.clone(),
        config,
        app.types.webhook_receivers().cloned().collect(),
        Arc::new(move |id| engine.notify(id)),
        Arc::clone(&app.clock),
    )
}

fn delivery(id: ItemId) -> String {
    serde_json::json!({ "item_id": id.to_string() }).to_string()
}

/// Waits until `done` holds, failing after [`WAIT`].
async fn until<F: std::future::Future<Output = bool>>(what: &str, done: impl Fn() -> F) {
    let deadline = Instant::now() + WAIT;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn pongs(ping: &PingType) -> i64 {
    ping.store().count(PONG).await.unwrap()
}

async fn deliveries_through_sns_reach_their_item_and_leave_the_queue(backend: Backend) {
    let (app, ping, id) = ping_app(backend).await;
    for (raw, pongs_after) in [(false, 2), (true, 3)] {
        let queues = queues(raw, 30).await;
        let running = intake(&app, &queues, config(&queues, QueueTrust::Signature, 1)).start();
        queues
            .publish(
                &delivery(id),
                &[(EVENT_HEADER, "ping"), ("X-Ping-Token", TOKEN)],
            )
            .await;
        until("the delivery's pong", || async {
            pongs(&ping).await == pongs_after
        })
        .await;
        until("the delete", || async {
            queues.left(&queues.queue).await == 0
        })
        .await;
        let stats = running.stats();
        assert_eq!(stats.stored.load(Ordering::Relaxed), 1, "raw {raw}");
        assert_eq!(stats.deleted.load(Ordering::Relaxed), 1, "raw {raw}");
        assert_eq!(stats.refused.load(Ordering::Relaxed), 0, "raw {raw}");
        running.shutdown(Duration::from_secs(5)).await;
    }
    app.drain().await;
    assert_eq!(pongs(&ping).await, 3);
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_messages_are_never_stored_and_go_to_the_dead_letter_queue() {
    let (app, ping, id) = ping_app(Backend::Sqlite).await;
    let queues = queues(false, 1).await;
    let running = intake(&app, &queues, config(&queues, QueueTrust::Signature, 1)).start();
    // A forged token, no token, a source nobody knows, and an authentic
    // delivery that is not one.
    queues
        .publish(
            &delivery(id),
            &[(EVENT_HEADER, "ping"), (TOKEN_HEADER, "forged")],
        )
        .await;
    queues
        .publish(&delivery(id), &[(EVENT_HEADER, "ping")])
        .await;
    queues
        .publish(&delivery(id), &[("X-Other-Event", "x")])
        .await;
    queues
        .publish(
            "{\"no\": \"item\"}",
            &[(EVENT_HEADER, "ping"), (TOKEN_HEADER, TOKEN)],
        )
        .await;
    // Each is received twice (refused each time), then moto's redrive
    // policy moves it to the dead-letter queue.
    until("the redrive", || async {
        running.stats().refused.load(Ordering::Relaxed) >= 8
            && queues.left(&queues.queue).await == 0
    })
    .await;
    let stats = running.stats();
    assert_eq!(stats.stored.load(Ordering::Relaxed), 0);
    assert_eq!(stats.deleted.load(Ordering::Relaxed), 0);
    running.shutdown(Duration::from_secs(5)).await;
    assert_eq!(queues.peek(&queues.dead_letters, 5).await.len(), 4);
    assert!(
        app.store.event_next(id).await.unwrap().is_none(),
        "nothing was stored"
    );
    app.drain().await;
    assert_eq!(pongs(&ping).await, 1);
    app.finish().await;
}

/// Crashes the consumer after its first batch is stored.
struct CrashBeforeDelete;

#[async_trait]
impl IntakeHooks for CrashBeforeDelete {
    async fn before_delete(&self, _stored: usize) -> Flow {
        Flow::Crash
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_store_and_delete_redelivers_the_delivery() {
    let (app, ping, id) = ping_app(Backend::Postgres).await;
    let queues = queues(true, 1).await;
    let config = config(&queues, QueueTrust::Signature, 1);
    let crashing = intake(&app, &queues, config.clone())
        .with_hooks(Arc::new(CrashBeforeDelete))
        .start();
    queues
        .publish(
            &delivery(id),
            &[(EVENT_HEADER, "ping"), (TOKEN_HEADER, TOKEN)],
        )
        .await;
    until("the crash", || async { crashing.is_finished() }).await;
    assert_eq!(crashing.stats().stored.load(Ordering::Relaxed), 1);
    assert_eq!(crashing.stats().deleted.load(Ordering::Relaxed), 0);
    until("the stored delivery's pong", || async {
        pongs(&ping).await == 2
    })
    .await;
    assert_eq!(queues.left(&queues.queue).await, 1, "not deleted");

    // The next consumer receives it again once its visibility ends, stores
    // it again and deletes it: nothing lost, the duplicate only one more
    // hint.
    let restarted = intake(&app, &queues, config).start();
    until("the redelivery's delete", || async {
        restarted.stats().deleted.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(restarted.stats().stored.load(Ordering::Relaxed), 1);
    assert_eq!(queues.left(&queues.queue).await, 0);
    restarted.shutdown(Duration::from_secs(5)).await;
    app.drain().await;
    assert_eq!(pongs(&ping).await, 3);
    app.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_trusted_by_policy_takes_deliveries_without_a_token() {
    let (app, ping, id) = ping_app(Backend::Sqlite).await;
    let queues = queues(true, 30).await;
    let running = intake(&app, &queues, config(&queues, QueueTrust::QueuePolicy, 1)).start();
    queues
        .publish(&delivery(id), &[(EVENT_HEADER, "ping")])
        .await;
    until("the delivery's pong", || async { pongs(&ping).await == 2 }).await;
    until("the delete", || async {
        queues.left(&queues.queue).await == 0
    })
    .await;
    running.shutdown(Duration::from_secs(5)).await;
    app.drain().await;
    app.finish().await;
}

/// Holds the first message of a batch until released.
struct HoldFirst {
    reached: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

#[async_trait]
impl IntakeHooks for HoldFirst {
    async fn before_message(&self, index: usize) {
        if index == 0 {
            self.reached.notify_one();
            let _permit = self.release.acquire().await.expect("release");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_batch_stays_hidden_and_shutdown_releases_the_rest() {
    let (app, ping, id) = ping_app(Backend::Sqlite).await;
    let queues = queues(true, 30).await;
    for _ in 0..3 {
        queues
            .publish(
                &delivery(id),
                &[(EVENT_HEADER, "ping"), (TOKEN_HEADER, TOKEN)],
            )
            .await;
    }
    let hold = Arc::new(HoldFirst {
        reached: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let config = SqsConfig {
        max_messages: 10,
        ..config(&queues, QueueTrust::Signature, 1)
    };
    let running: IntakeHandle = intake(&app, &queues, config)
        .with_hooks(Arc::clone(&hold) as Arc<dyn IntakeHooks>)
        .start();
    tokio::time::timeout(WAIT, hold.reached.notified())
        .await
        .expect("a batch is in hand");
    // Held for twice the 2 s visibility: extended, nobody else sees them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let batch = running.stats().received.load(Ordering::Relaxed);
    assert!(batch >= 1, "{batch}");
    let seen = queues.peek(&queues.queue, 0).await;
    assert_eq!(seen.len() as u64, 3 - batch, "the batch stayed hidden");

    // Shutdown: the message in hand finishes; the rest of the batch is
    // released at once.
    let stopping = tokio::spawn(running.shutdown(Duration::from_secs(10)));
    hold.release.add_permits(1);
    stopping.await.expect("shut down");
    app.drain().await;
    assert_eq!(pongs(&ping).await, 2, "the message in hand was stored");
    let released = queues.peek(&queues.queue, 1).await;
    assert_eq!(released.len() as u64, batch - 1, "the rest was released");
    app.finish().await;
}
