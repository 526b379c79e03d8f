//! `TestApp`: the real router served on port 0 over a fresh database, with a
//! real (not yet started) `ProcessingManager`, plus helpers to put items into
//! a given state through the store. Its `client` authenticates with an
//! `admin` static token; [`Tokens`] holds tokens of other standing.

use std::sync::Arc;

use reqwest::header::AUTHORIZATION;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wq_api::{ApiConfig, AppState, ErrorEnvelope};
use wq_auth::AuthConfig;
use wq_core::{Clock, DimensionUpdate, ItemId, Phase, SystemClock, WorkItem};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{ApplyOutcome, ClaimParams, NewItem, Park, Store};
pub use wq_testkit::types::{BARE_TYPE, PANIC_COMMAND, PROBE_COMMAND, PROBE_TYPE};
use wq_testkit::types::{ProbeWebhook, probe_registry};
pub use wq_testkit::{Backend, Faults, Tokens, bearer};
use wq_testkit::{FaultyStore, bearer_client};

/// How to build a [`TestApp`].
#[derive(Default)]
pub struct AppOptions {
    pub config: ApiConfig,
    /// Faults of the store the router sees.
    pub faults: Faults,
    /// The `auth:` section; [`Tokens`] and their rules are added to it.
    pub auth: AuthConfig,
}

pub struct TestApp {
    /// `http://127.0.0.1:PORT`
    pub address: String,
    /// Sends the `admin` token with every request.
    pub client: reqwest::Client,
    /// Sends no credentials.
    pub anonymous: reqwest::Client,
    pub tokens: Tokens,
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
    let database_url = backend.fresh_url().await;
    let store = wq_store::connect(&database_url, 5)
        .await
        .expect("connect to the test database");
    store.migrate().await.expect("migrate the test database");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let registry = probe_registry(Arc::clone(&store));
    let engine = ProcessingManager::new(
        Arc::clone(&store),
        Arc::new(registry.clone()),
        Arc::clone(&clock),
        EngineConfig {
            handled_types: vec![PROBE_TYPE.to_owned()],
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let metrics = wq_api::metrics::prometheus_handle().expect("prometheus recorder");
    let faulty = FaultyStore::wrap(Arc::clone(&store), options.faults);
    let tokens = Tokens::new();
    let authenticator = tokens.authenticator(options.auth, Arc::clone(&clock));
    let state = AppState::new(faulty, Arc::clone(&clock), authenticator)
        .with_engine(Arc::clone(&engine))
        .with_types(registry)
        .with_webhook(Arc::new(ProbeWebhook))
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
    let client = bearer_client(&tokens.admin);
    TestApp {
        address,
        client,
        anonymous: reqwest::Client::new(),
        tokens,
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
        if let serde_json::Value::Object(extra) = extra {
            body.as_object_mut().unwrap().extend(extra);
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
                place: None,
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
