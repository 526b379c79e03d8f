//! `TestApp`: the real engine and API on 127.0.0.1:0 over a fresh database,
//! wired from the registry as the service is (the types' migrations,
//! webhook receivers and periodic tasks), with `drain()` to run the engine to quiescence and `finish()` to prove no
//! work was left behind. The API accepts the static [`Tokens`]; `client`
//! sends the `admin` one.

use std::sync::Arc;

use wq_core::{Clock, ItemId, TypeRegistry};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{ItemListParams, Store, SweepParams};

use crate::Backend;
use crate::tokens::{Tokens, bearer_client};

/// A running app: store, engine, HTTP API.
pub struct TestApp {
    pub backend: Backend,
    pub database_url: String,
    pub store: Arc<dyn Store>,
    pub engine: Arc<ProcessingManager>,
    pub clock: Arc<dyn Clock>,
    pub base_url: String,
    /// Sends the `admin` token with every request.
    pub client: reqwest::Client,
    /// The static tokens the API accepts.
    pub tokens: Tokens,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    finished: bool,
}

impl TestApp {
    /// Starts the app on a fresh database with `registry`; the engine handles
    /// every registered type and its periodic sweep is effectively off
    /// (tests call [`TestApp::drain`]).
    pub async fn start(backend: Backend, registry: TypeRegistry, clock: Arc<dyn Clock>) -> Self {
        let handled_types = registry.names().map(str::to_owned).collect();
        let config = EngineConfig {
            handled_types,
            sweep_interval: std::time::Duration::from_secs(3600),
            ..EngineConfig::default()
        };
        Self::start_with(backend, registry, clock, config).await
    }

    /// Like [`TestApp::start`] with explicit engine settings.
    pub async fn start_with(
        backend: Backend,
        registry: TypeRegistry,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Self {
        Self::start_building(backend, clock, config, |_| registry).await
    }

    /// Like [`TestApp::start_with`], with the types `build_types` makes over
    /// the app's store (for types that keep their own tables).
    pub async fn start_building(
        backend: Backend,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
        build_types: impl FnOnce(Arc<dyn Store>) -> TypeRegistry,
    ) -> Self {
        let database_url = backend.fresh_url().await;
        let store = crate::open_store(&database_url).await;
        let registry = build_types(store.clone());
        registry.migrate().await.expect("item type migrations");
        let engine = ProcessingManager::new(
            store.clone(),
            Arc::new(registry.clone()),
            clock.clone(),
            config,
        )
        .expect("engine configuration is valid");
        engine.start();
        let tokens = Tokens::new();
        let authenticator = tokens.authenticator(wq_auth::AuthConfig::default(), clock.clone());
        let state = wq_api::AppState::new(store.clone(), clock.clone(), authenticator)
            .with_engine(engine.clone())
            .with_types(registry);
        let router = wq_api::router(state, &wq_api::ApiConfig::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a port");
        let address = listener.local_addr().expect("local address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(wq_api::serve(listener, router, async move {
            let _ = stopped.await;
        }));
        Self {
            backend,
            database_url,
            store,
            engine,
            clock,
            base_url: format!("http://{address}"),
            client: bearer_client(&tokens.admin),
            tokens,
            stop: Some(stop),
            server: Some(server),
            finished: false,
        }
    }

    /// `base_url` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Sweeps and waits until a sweep finds nothing to do.
    pub async fn drain(&self) {
        for _ in 0..10_000 {
            let found = self.engine.sweep_now().await.expect("sweep");
            self.engine.wait_idle().await;
            if found == 0 {
                return;
            }
        }
        panic!("the engine did not reach quiescence");
    }

    /// Drains, asserts that no item is left actionable, leased or with
    /// pending events, and stops the app.
    pub async fn finish(mut self) {
        self.drain().await;
        let handled: Vec<String> = self.engine.config().handled_types.clone();
        let left = self
            .store
            .sweep_candidates(SweepParams {
                handled_types: handled,
                now: self.clock.now(),
                limit: 100,
            })
            .await
            .expect("sweep");
        assert!(left.is_empty(), "work left unprocessed: {left:?}");
        let mut before: Option<ItemId> = None;
        loop {
            let page = self
                .store
                .item_list(ItemListParams {
                    before,
                    limit: 500,
                    ..ItemListParams::default()
                })
                .await
                .expect("list");
            let Some(last) = page.last() else { break };
            before = Some(last.id);
            for item in &page {
                assert!(
                    !item.actionable,
                    "item {} is still actionable: {item:?}",
                    item.id
                );
                let event = self.store.event_next(item.id).await.expect("events");
                assert!(event.is_none(), "item {} has a pending event", item.id);
            }
        }
        self.stop().await;
        self.finished = true;
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.engine.shutdown().await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            panic!("TestApp dropped without finish(): quiescence was not checked");
        }
    }
}
