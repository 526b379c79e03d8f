//! `TestApp`: the real engine and API on 127.0.0.1 over a fresh database of
//! one [`Backend`], built by [`TestApp::builder`]. The builder wires the app
//! from a registry as the service does (the types' migrations, webhook
//! receivers and periodic tasks), or hands the wiring to an assembly of the
//! caller's ([`TestAppBuilder::assemble`], e.g. `workqueue::app`). The API
//! accepts the static [`Tokens`]; `client` sends the `admin` one.
//!
//! A `TestApp` must end with [`TestApp::finish`], which runs the engine to
//! quiescence and proves no work was left behind (nothing actionable or
//! with pending events among the handled types, once work that arrived or
//! was under way after the drain is done), or with
//! [`TestApp::halt`], a deliberate stop for a restart. Dropping it
//! otherwise panics, unless the test is already panicking.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::AUTHORIZATION;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wq_api::{ApiConfig, AppState};
use wq_auth::AuthConfig;
use wq_core::{
    Clock, DimensionUpdate, ItemId, Phase, SystemClock, TypeRegistry, WebhookReceiver, WorkItem,
};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{ApplyOutcome, ClaimParams, ItemListParams, NewItem, Park, Store, SweepParams};

use crate::Backend;
use crate::faults::{Faults, FaultyStore};
use crate::tokens::{Tokens, bearer, bearer_client};
use crate::types::{PROBE_TYPE, ProbeWebhook, probe_registry};

/// The sweep interval of an app whose engine settings are the builder's
/// defaults: an hour, so the sweep runs once at start and then only when a
/// test asks ([`TestApp::drain`]).
const QUIET_SWEEP: Duration = Duration::from_secs(3600);

/// What an assembly gets from the builder to build the app over.
pub struct Assembly {
    /// The app's database: fresh, or an earlier app's when resumed.
    pub database_url: String,
    pub clock: Arc<dyn Clock>,
    /// The builder's `auth:` section with the [`Tokens`] and their rules
    /// added.
    pub auth: AuthConfig,
}

/// What an assembly built: the store (opened and migrated), the engine (not
/// started: the builder starts it if asked) and the router to serve.
pub struct Assembled {
    pub store: Arc<dyn Store>,
    pub engine: Arc<ProcessingManager>,
    pub router: axum::Router,
}

/// The future an assembly answers.
pub type Assembling<'a> = Pin<Box<dyn Future<Output = Assembled> + 'a>>;

type Assemble<'a> = Box<dyn FnOnce(Assembly) -> Assembling<'a> + 'a>;
type BuildTypes<'a> = Box<dyn FnOnce(Arc<dyn Store>) -> TypeRegistry + 'a>;

/// Where the app listens.
enum Listen {
    /// A port of 127.0.0.1 the system picks.
    AnyPort,
    /// A listener the caller bound (to know the address first).
    Listener(TcpListener),
    /// An address to bind again (an earlier app's, when resumed).
    Address(SocketAddr),
}

/// Builds a [`TestApp`]; see [`TestApp::builder`].
pub struct TestAppBuilder<'a> {
    backend: Backend,
    clock: Arc<dyn Clock>,
    database_url: Option<String>,
    listen: Listen,
    tokens: Option<Tokens>,
    auth: AuthConfig,
    engine_started: bool,
    assemble: Option<Assemble<'a>>,
    wiring: Wiring<'a>,
}

/// The builder's own wiring, used when no assembly is given.
#[derive(Default)]
struct Wiring<'a> {
    types: Option<BuildTypes<'a>>,
    engine_config: Option<EngineConfig>,
    handled_types: Option<Vec<String>>,
    api_config: Option<ApiConfig>,
    faults: Faults,
    webhooks: Vec<Arc<dyn WebhookReceiver>>,
    metrics: bool,
}

impl Wiring<'_> {
    /// The settings that were given, by builder method name.
    fn given(&self) -> Vec<&'static str> {
        [
            ("registry/types", self.types.is_some()),
            ("engine_config", self.engine_config.is_some()),
            ("handled_types", self.handled_types.is_some()),
            ("api_config", self.api_config.is_some()),
            ("faults", !self.faults.is_none()),
            ("webhook", !self.webhooks.is_empty()),
            ("metrics", self.metrics),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// Opens the store, builds the types, the engine and the router.
    async fn wire(
        self,
        database_url: &str,
        clock: &Arc<dyn Clock>,
        tokens: &Tokens,
        auth: AuthConfig,
    ) -> Assembled {
        let build_types = self
            .types
            .expect("a TestApp needs item types: call `registry` or `types` on its builder");
        let store = crate::open_store(database_url).await;
        let registry = build_types(Arc::clone(&store));
        registry.migrate().await.expect("item type migrations");
        let explicit = self.engine_config.is_some();
        let mut config = self.engine_config.unwrap_or_else(|| EngineConfig {
            sweep_interval: QUIET_SWEEP,
            ..EngineConfig::default()
        });
        if let Some(handled) = self.handled_types {
            config.handled_types = handled;
        } else if !explicit {
            config.handled_types = registry.names().map(str::to_owned).collect();
        }
        let engine = ProcessingManager::new(
            Arc::clone(&store),
            Arc::new(registry.clone()),
            Arc::clone(clock),
            config,
        )
        .expect("engine configuration is valid");
        // The router alone sees the faults: arranging and checking state
        // goes through the real store.
        let routed_store = if self.faults.is_none() {
            Arc::clone(&store)
        } else {
            FaultyStore::wrap(Arc::clone(&store), self.faults)
        };
        let authenticator = tokens.authenticator(auth, Arc::clone(clock));
        let mut state = AppState::new(routed_store, Arc::clone(clock), authenticator)
            .with_engine(Arc::clone(&engine))
            .with_types(registry);
        for webhook in self.webhooks {
            state = state.with_webhook(webhook);
        }
        if self.metrics {
            let handle = wq_api::metrics::prometheus_handle().expect("the Prometheus recorder");
            state = state.with_metrics(handle);
        }
        let router = wq_api::router(state, &self.api_config.unwrap_or_default());
        Assembled {
            store,
            engine,
            router,
        }
    }
}

impl<'a> TestAppBuilder<'a> {
    /// The service's clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The static tokens the API accepts (default: fresh ones). Give the
    /// same tokens to an app that takes over from another.
    pub fn tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// The `auth:` section the tokens are added to: issuers, more rules,
    /// the OAuth-proxy bridge (default: empty).
    pub fn auth(mut self, auth: AuthConfig) -> Self {
        self.auth = auth;
        self
    }

    /// Whether the engine runs from the start (default: yes). A stopped
    /// engine only queues what it is notified of; [`TestApp::drain`] and
    /// [`TestApp::finish`] start it.
    pub fn engine_started(mut self, started: bool) -> Self {
        self.engine_started = started;
        self
    }

    /// Serves on `listener`, bound by the caller to know the address before
    /// the app exists (default: a port the system picks).
    pub fn listener(mut self, listener: TcpListener) -> Self {
        self.listen = Listen::Listener(listener);
        self
    }

    /// Takes over from a halted app: its database, address and tokens.
    pub fn resume(mut self, halted: Halted) -> Self {
        assert_eq!(halted.backend, self.backend, "resumed on another backend");
        self.database_url = Some(halted.database_url);
        self.listen = Listen::Address(halted.address);
        self.tokens = Some(halted.tokens);
        self
    }

    /// The item types to register.
    pub fn registry(self, registry: TypeRegistry) -> Self {
        self.types(move |_| registry)
    }

    /// The item types `build_types` registers over the app's store (for
    /// types that keep their own tables).
    pub fn types(mut self, build_types: impl FnOnce(Arc<dyn Store>) -> TypeRegistry + 'a) -> Self {
        self.wiring.types = Some(Box::new(build_types));
        self
    }

    /// The `probe` and `bare` types with the probe's webhook source
    /// (`/webhooks/probe`); the engine handles `probe` only.
    pub fn with_probe_types(self) -> Self {
        self.types(probe_registry)
            .handled_types(&[PROBE_TYPE])
            .webhook(Arc::new(ProbeWebhook))
    }

    /// The engine's settings (default: every registered type handled, the
    /// sweep an hour apart, the rest as in production).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.wiring.engine_config = Some(config);
        self
    }

    /// The types the engine handles, within the engine's settings.
    pub fn handled_types(mut self, names: &[&str]) -> Self {
        self.wiring.handled_types = Some(names.iter().map(|name| (*name).to_owned()).collect());
        self
    }

    /// The API's settings (default: production's).
    pub fn api_config(mut self, config: ApiConfig) -> Self {
        self.wiring.api_config = Some(config);
        self
    }

    /// Faults of the store the router sees (the engine and the test's
    /// `store` use the real one).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.wiring.faults = faults;
        self
    }

    /// Another webhook source, besides the registered types' own.
    pub fn webhook(mut self, receiver: Arc<dyn WebhookReceiver>) -> Self {
        self.wiring.webhooks.push(receiver);
        self
    }

    /// Serves `/metrics` from the process's Prometheus recorder.
    pub fn metrics(mut self) -> Self {
        self.wiring.metrics = true;
        self
    }

    /// Builds store, engine and router with `assemble` instead of the
    /// builder's own wiring, over the [`Assembly`] the builder prepares.
    /// The app's settings are then the assembly's: the wiring options
    /// (types, engine and API settings, faults, webhooks, metrics) must
    /// not be given.
    pub fn assemble(mut self, assemble: impl FnOnce(Assembly) -> Assembling<'a> + 'a) -> Self {
        self.assemble = Some(Box::new(assemble));
        self
    }

    /// Opens (or creates) the database, builds and serves the app.
    pub async fn start(self) -> TestApp {
        let database_url = match self.database_url {
            Some(url) => url,
            None => self.backend.fresh_url().await,
        };
        let tokens = self.tokens.unwrap_or_default();
        let Assembled {
            store,
            engine,
            router,
        } = match self.assemble {
            Some(assemble) => {
                let given = self.wiring.given();
                assert!(
                    given.is_empty(),
                    "an assembly wires the app itself; drop the builder's {given:?}"
                );
                let mut auth = self.auth;
                tokens.configure(&mut auth);
                assemble(Assembly {
                    database_url: database_url.clone(),
                    clock: Arc::clone(&self.clock),
                    auth,
                })
                .await
            }
            None => {
                self.wiring
                    .wire(&database_url, &self.clock, &tokens, self.auth)
                    .await
            }
        };
        if self.engine_started {
            engine.start();
        }
        let listener = match self.listen {
            Listen::AnyPort => TcpListener::bind("127.0.0.1:0").await.expect("bind a port"),
            Listen::Listener(listener) => listener,
            Listen::Address(address) => TcpListener::bind(address)
                .await
                .unwrap_or_else(|error| panic!("cannot bind {address} again: {error}")),
        };
        let address = listener.local_addr().expect("local address");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(wq_api::serve(listener, router, async move {
            let _ = stopped.await;
        }));
        TestApp {
            backend: self.backend,
            database_url,
            store,
            engine,
            clock: self.clock,
            base_url: format!("http://{address}"),
            address,
            client: bearer_client(&tokens.admin),
            anonymous: reqwest::Client::new(),
            tokens,
            stop: Some(stop),
            server: Some(server),
            settled: false,
        }
    }
}

/// What a halted app leaves for the next one ([`TestAppBuilder::resume`]).
pub struct Halted {
    pub backend: Backend,
    pub database_url: String,
    pub address: SocketAddr,
    pub tokens: Tokens,
}

/// A running app: store, engine, HTTP API.
pub struct TestApp {
    pub backend: Backend,
    pub database_url: String,
    /// The real store (never faulty), for arranging and checking state.
    pub store: Arc<dyn Store>,
    pub engine: Arc<ProcessingManager>,
    pub clock: Arc<dyn Clock>,
    /// `http://127.0.0.1:PORT`
    pub base_url: String,
    pub address: SocketAddr,
    /// Sends the `admin` token with every request.
    pub client: reqwest::Client,
    /// Sends no credentials.
    pub anonymous: reqwest::Client,
    /// The static tokens the API accepts.
    pub tokens: Tokens,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    /// Quiescence was proven, or the app was halted on purpose.
    settled: bool,
}

impl TestApp {
    /// A builder for an app on `backend`: a fresh database, the system
    /// clock, fresh [`Tokens`], the engine started, and the builder's own
    /// wiring of the item types it is given.
    pub fn builder<'a>(backend: Backend) -> TestAppBuilder<'a> {
        TestAppBuilder {
            backend,
            clock: Arc::new(SystemClock),
            database_url: None,
            listen: Listen::AnyPort,
            tokens: None,
            auth: AuthConfig::default(),
            engine_started: true,
            assemble: None,
            wiring: Wiring::default(),
        }
    }

    /// Starts an app with explicit engine settings and the types
    /// `build_types` makes over the app's store.
    pub async fn start_building(
        backend: Backend,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
        build_types: impl FnOnce(Arc<dyn Store>) -> TypeRegistry,
    ) -> Self {
        Self::builder(backend)
            .clock(clock)
            .engine_config(config)
            .types(build_types)
            .start()
            .await
    }

    /// `base_url` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// `GET path` as the admin.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
    }

    /// `POST path` without a body, as the admin.
    pub async fn post(&self, path: &str) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .send()
            .await
            .expect("request")
    }

    /// A request with `Authorization` set to `authorization` (none when
    /// `None`).
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        authorization: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = self.anonymous.request(method, self.url(path));
        match authorization {
            Some(value) => request.header(AUTHORIZATION, value),
            None => request,
        }
    }

    /// A request authenticated with `token`.
    pub fn request_as(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
    ) -> reqwest::RequestBuilder {
        self.request(method, path, Some(&bearer(token)))
    }

    /// Submits a probe item at `forge`/`project` as the caller of `token`
    /// (`extra` keys are added to the body); answers its id.
    pub async fn submit_probe(
        &self,
        token: &str,
        forge: &str,
        project: &str,
        extra: serde_json::Value,
    ) -> ItemId {
        let mut body = serde_json::json!({
            "item_type": PROBE_TYPE,
            "forge": forge,
            "project": project,
        });
        if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        let response = self
            .request_as(reqwest::Method::POST, "/api/v1/work-items", token)
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert_eq!(response.status().as_u16(), 201, "submitted");
        let body: serde_json::Value = response.json().await.expect("a JSON body");
        body["item"]["id"]
            .as_str()
            .expect("an item id")
            .parse()
            .expect("a UUID")
    }

    /// Inserts an active, actionable item of `item_type` (caller identity
    /// `tester`, no place).
    pub async fn insert(&self, item_type: &str) -> WorkItem {
        self.insert_with(item_type, Vec::new()).await
    }

    /// [`TestApp::insert`] with initial `dimensions`.
    pub async fn insert_with(&self, item_type: &str, dimensions: Vec<DimensionUpdate>) -> WorkItem {
        self.store
            .item_insert(NewItem {
                id: ItemId::new_v7(),
                item_type: item_type.to_owned(),
                idempotency_key: None,
                caller_identity: Some("tester".to_owned()),
                place: None,
                now: self.clock.now(),
                dimensions,
            })
            .await
            .expect("insert item")
    }

    /// Moves an item to `phase` as an executor would (claim, outcome, park);
    /// a failed item's error is `boom`.
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
                action: None,
                records: Vec::new(),
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

    /// Starts the engine if it was built stopped, then sweeps until a sweep
    /// finds nothing to do, waiting for the engine to go idle after each.
    pub async fn drain(&self) {
        self.engine.start();
        for _ in 0..10_000 {
            let found = self.engine.sweep_now().await.expect("sweep");
            self.engine.wait_idle().await;
            if found == 0 {
                return;
            }
        }
        panic!("the engine did not reach quiescence");
    }

    /// Drains and proves quiescence: no item of a handled type is left
    /// actionable, due for the sweep or with pending events. Then stops the
    /// app and drops a PostgreSQL database.
    ///
    /// Work that arrives or is under way after the drain is not work left
    /// behind: a delivery stored after the drain's last sweep, a run a late
    /// work hint started (PostgreSQL delivers a `NOTIFY` after the commit
    /// that sent it), a lease a run could not release, which expires. The
    /// engine is drained again until quiescence holds, for at most the
    /// engine's lease and five seconds; work still there then fails. So
    /// does, at once, work under a lease longer than the engine grants
    /// (no run of it holds that lease).
    pub async fn finish(mut self) {
        let deadline =
            tokio::time::Instant::now() + self.engine.config().lease + Duration::from_secs(5);
        let mut waited_for = String::new();
        loop {
            self.drain().await;
            match self.quiescence().await {
                Quiescence::Reached => break,
                Quiescence::Pending(what) if tokio::time::Instant::now() < deadline => {
                    if what != waited_for {
                        eprintln!("finish: draining again for {what}");
                        waited_for = what;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Quiescence::Pending(what) | Quiescence::Stuck(what) => panic!("{what}"),
            }
        }
        self.stop().await;
        self.settled = true;
        if self.backend == Backend::Postgres {
            wq_store::testing::drop_postgres_database(&self.database_url).await;
        }
    }

    /// Stops the app without proving quiescence, as a crash or a restart
    /// does: the server stops, the engine ends its current steps, the
    /// database stays for the next app ([`TestAppBuilder::resume`]).
    pub async fn halt(mut self) -> Halted {
        self.stop().await;
        self.settled = true;
        Halted {
            backend: self.backend,
            database_url: self.database_url.clone(),
            address: self.address,
            tokens: self.tokens.clone(),
        }
    }

    /// Whether no work of the handled types is left: none due for the
    /// sweep, none actionable, none with pending events. Work on an item
    /// under a lease longer than this engine grants is
    /// [`Quiescence::Stuck`]; other work is [`Quiescence::Pending`].
    async fn quiescence(&self) -> Quiescence {
        let handled = self.engine.config().handled_types.clone();
        let now = self.clock.now();
        let left = self
            .store
            .sweep_candidates(SweepParams {
                handled_types: handled.clone(),
                now,
                limit: 100,
            })
            .await
            .expect("sweep");
        if !left.is_empty() {
            return Quiescence::Pending(format!("work left unprocessed: {left:?}"));
        }
        for item_type in handled {
            let mut before: Option<ItemId> = None;
            loop {
                let page = self
                    .store
                    .item_list(ItemListParams {
                        item_type: Some(item_type.clone()),
                        before,
                        limit: 500,
                        ..ItemListParams::default()
                    })
                    .await
                    .expect("list");
                let Some(last) = page.last() else { break };
                before = Some(last.id);
                for item in &page {
                    let problem = if item.actionable {
                        format!("item {} is still actionable: {item:?}", item.id)
                    } else if self
                        .store
                        .event_next(item.id)
                        .await
                        .expect("events")
                        .is_some()
                    {
                        format!("item {} has a pending event: {item:?}", item.id)
                    } else {
                        continue;
                    };
                    // A lease this engine could have granted (no longer
                    // than its own) ends soon; a longer one is no run's.
                    let longest = now + self.engine.config().lease + Duration::from_secs(1);
                    return match item.leased_until {
                        Some(until) if until > longest => Quiescence::Stuck(problem),
                        _ => Quiescence::Pending(problem),
                    };
                }
            }
        }
        Quiescence::Reached
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("server task")
                .expect("the server exits cleanly");
        }
        self.engine.shutdown().await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if !self.settled && !std::thread::panicking() {
            panic!("TestApp dropped without finish(): quiescence was not checked");
        }
    }
}

/// What [`TestApp::finish`] found (what, for the failure).
enum Quiescence {
    Reached,
    /// Work to do or under way: drain again.
    Pending(String),
    /// Work under a lease no run of this engine holds.
    Stuck(String),
}
