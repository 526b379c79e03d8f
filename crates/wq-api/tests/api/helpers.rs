//! `TestApp`: the real router served on port 0 over a fresh database, with a
//! real (not yet started) `ProcessingManager`, plus helpers to put items into
//! a given state through the store.

use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wq_api::{ApiConfig, AppState, ErrorEnvelope};
use wq_core::{
    Action, Clock, Dimension, DimensionUpdate, EventResult, ExecError, ExecOutcome, ItemId,
    ItemType, ItemView, PendingEvent, Phase, SystemClock, TypeRegistry, WorkItem,
};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, Lease, NewEvent, NewItem,
    Park, PhaseCount, RecordFailure, Store, StoreError, StoreResult, SweepParams,
};

/// The item type the test engine handles: it never has anything to do, so a
/// run claims the item and parks it (`actionable = false`).
pub const PROBE_TYPE: &str = "probe";

struct Probe;

#[async_trait]
impl ItemType for Probe {
    fn name(&self) -> &'static str {
        PROBE_TYPE
    }
    fn actions(&self) -> &'static [&'static str] {
        &["noop"]
    }
    fn decide(&self, _view: &ItemView) -> Option<Action> {
        None
    }
    async fn execute(&self, _action: Action, _view: &ItemView) -> Result<ExecOutcome, ExecError> {
        Ok(ExecOutcome::done())
    }
    async fn handle_event(
        &self,
        _view: &ItemView,
        _event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(EventResult::ignored())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// How to build a [`TestApp`].
#[derive(Default)]
pub struct AppOptions {
    pub config: ApiConfig,
    /// Faults of the store the router sees.
    pub faults: Faults,
}

/// Faults a [`FaultyStore`] injects.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// `ping` fails.
    pub ping_fails: bool,
    /// `item_list` sleeps this long first.
    pub list_delay: Option<std::time::Duration>,
}

pub struct TestApp {
    /// `http://127.0.0.1:PORT`
    pub address: String,
    pub client: reqwest::Client,
    /// The unwrapped store, for arranging and checking state.
    pub store: Arc<dyn Store>,
    pub engine: Arc<ProcessingManager>,
    pub clock: Arc<dyn Clock>,
    database_url: String,
    backend: Backend,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, AppOptions::default()).await
}

pub async fn spawn_app_with(backend: Backend, options: AppOptions) -> TestApp {
    let database_url = match backend {
        Backend::Sqlite => wq_store::testing::fresh_sqlite_url(),
        Backend::Postgres => wq_store::testing::fresh_postgres_url().await,
    };
    let store = wq_store::connect(&database_url, 5)
        .await
        .expect("connect to the test database");
    store.migrate().await.expect("migrate the test database");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let registry = TypeRegistry::builder()
        .register(Arc::new(Probe))
        .build()
        .expect("registry");
    let engine = ProcessingManager::new(
        Arc::clone(&store),
        Arc::new(registry),
        Arc::clone(&clock),
        EngineConfig {
            handled_types: vec![PROBE_TYPE.to_owned()],
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let metrics = wq_api::metrics::prometheus_handle().expect("prometheus recorder");
    let faulty: Arc<dyn Store> = Arc::new(FaultyStore {
        inner: Arc::clone(&store),
        faults: options.faults,
    });
    let state = AppState::new(faulty, Arc::clone(&clock))
        .with_engine(Arc::clone(&engine))
        .with_metrics(metrics);
    let router = wq_api::router(state, &options.config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address = format!("http://{}", listener.local_addr().expect("local addr"));
    let (shutdown, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(wq_api::serve(listener, router, async move {
        let _ = shutdown_rx.await;
    }));
    TestApp {
        address,
        client: reqwest::Client::new(),
        store,
        engine,
        clock,
        database_url,
        backend,
        shutdown: Some(shutdown),
        server: Some(server),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
    }

    pub async fn post(&self, path: &str) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .send()
            .await
            .expect("request")
    }

    /// Inserts an active, actionable item of `item_type`.
    pub async fn insert(&self, item_type: &str) -> WorkItem {
        self.insert_with(item_type, Vec::new()).await
    }

    pub async fn insert_with(&self, item_type: &str, dimensions: Vec<DimensionUpdate>) -> WorkItem {
        self.store
            .item_insert(NewItem {
                id: ItemId::new_v7(),
                item_type: item_type.to_owned(),
                idempotency_key: None,
                caller_identity: Some("tester".to_owned()),
                now: self.clock.now(),
                dimensions,
            })
            .await
            .expect("insert item")
    }

    /// Moves an item to `phase` as an executor would (claim, outcome, park).
    pub async fn set_phase(&self, item: &WorkItem, phase: Phase) -> WorkItem {
        let now = self.clock.now();
        let (_, lease) = self
            .store
            .item_claim(ClaimParams {
                id: item.id,
                now,
                lease_until: now + time::Duration::minutes(1),
                handled_types: vec![item.item_type.clone()],
            })
            .await
            .expect("claim")
            .expect("item is claimable");
        let error = (phase == Phase::Failed).then(|| "boom".to_owned());
        self.store
            .item_apply_outcome(ApplyOutcome {
                lease,
                now,
                phase: Some(phase),
                error,
                dimensions: Vec::new(),
            })
            .await
            .expect("apply outcome");
        let parked = self.store.item_park(lease, now).await.expect("park");
        assert_eq!(parked, Park::Parked);
        self.store
            .item_get(item.id)
            .await
            .expect("get")
            .expect("item exists")
    }

    /// Stops the server and the engine and drops a PostgreSQL database.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("server task")
                .expect("server exits cleanly");
        }
        self.engine.shutdown().await;
        if self.backend == Backend::Postgres {
            drop(self.store);
            wq_store::testing::drop_postgres_database(&self.database_url).await;
        }
    }
}

/// Reads an error response: asserts the status and returns the envelope.
pub async fn error_of(response: reqwest::Response, status: u16) -> ErrorEnvelope {
    assert_eq!(response.status().as_u16(), status, "unexpected status");
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "application/json");
    response.json().await.expect("an error envelope")
}

/// Reads a successful JSON response.
pub async fn json_of<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> T {
    assert_eq!(response.status().as_u16(), 200, "unexpected status");
    response.json().await.expect("a JSON body")
}

/// The real store with [`Faults`] injected; everything else is delegated.
struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Faults,
}

#[async_trait]
impl Store for FaultyStore {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }
    fn handle(&self) -> wq_store::Backend {
        self.inner.handle()
    }
    async fn migrate(&self) -> StoreResult<()> {
        self.inner.migrate().await
    }
    async fn ping(&self) -> StoreResult<()> {
        if self.faults.ping_fails {
            return Err(StoreError::Corrupt(
                "ping refused by the test wrapper".to_owned(),
            ));
        }
        self.inner.ping().await
    }
    async fn item_insert(&self, item: NewItem) -> StoreResult<WorkItem> {
        self.inner.item_insert(item).await
    }
    async fn item_get(&self, id: ItemId) -> StoreResult<Option<WorkItem>> {
        self.inner.item_get(id).await
    }
    async fn item_view(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<Option<ItemView>> {
        self.inner.item_view(id, now).await
    }
    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<wq_store::Snapshot>> {
        self.inner.item_snapshot(id, now).await
    }
    async fn item_list(&self, params: wq_store::ItemListParams) -> StoreResult<Vec<WorkItem>> {
        if let Some(delay) = self.faults.list_delay {
            tokio::time::sleep(delay).await;
        }
        self.inner.item_list(params).await
    }
    async fn item_claim(&self, params: ClaimParams) -> StoreResult<Option<(WorkItem, Lease)>> {
        self.inner.item_claim(params).await
    }
    async fn item_heartbeat(&self, lease: Lease, until: OffsetDateTime) -> StoreResult<Lease> {
        self.inner.item_heartbeat(lease, until).await
    }
    async fn item_release(&self, lease: Lease, until: Option<OffsetDateTime>) -> StoreResult<()> {
        self.inner.item_release(lease, until).await
    }
    async fn item_apply_outcome(&self, outcome: ApplyOutcome) -> StoreResult<WorkItem> {
        self.inner.item_apply_outcome(outcome).await
    }
    async fn item_record_failure(&self, failure: RecordFailure) -> StoreResult<WorkItem> {
        self.inner.item_record_failure(failure).await
    }
    async fn item_park_with(&self, params: wq_store::ParkParams) -> StoreResult<Park> {
        self.inner.item_park_with(params).await
    }
    async fn item_retry(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<WorkItem> {
        self.inner.item_retry(id, now).await
    }
    async fn item_mark_actionable(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()> {
        self.inner.item_mark_actionable(id, now).await
    }
    async fn item_count_by_phase(&self) -> StoreResult<Vec<PhaseCount>> {
        self.inner.item_count_by_phase().await
    }
    async fn dimension_list(&self, id: ItemId) -> StoreResult<Vec<Dimension>> {
        self.inner.dimension_list(id).await
    }
    async fn dimension_upsert(
        &self,
        id: ItemId,
        update: DimensionUpdate,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.inner.dimension_upsert(id, update, now).await
    }
    async fn event_insert(&self, event: NewEvent) -> StoreResult<i64> {
        self.inner.event_insert(event).await
    }
    async fn event_next(&self, id: ItemId) -> StoreResult<Option<PendingEvent>> {
        self.inner.event_next(id).await
    }
    async fn event_apply(&self, apply: ApplyEvent) -> StoreResult<EventApplied> {
        self.inner.event_apply(apply).await
    }
    async fn sweep_candidates(&self, params: SweepParams) -> StoreResult<Vec<ItemId>> {
        self.inner.sweep_candidates(params).await
    }
}

/// Generates `sqlite` and `postgres` test functions for one async test body
/// `async fn(Backend)`.
macro_rules! on_both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::helpers::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name($crate::helpers::Backend::Postgres).await;
            }
        }
    };
}
pub(crate) use on_both_backends;
