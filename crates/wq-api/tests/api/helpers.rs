//! `TestApp`: the real router served on port 0 over a fresh database, with a
//! real (not yet started) `ProcessingManager`, plus helpers to put items into
//! a given state through the store. Its `client` authenticates with an
//! `admin` static token; [`Tokens`] holds tokens of other standing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use time::OffsetDateTime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wq_api::{ApiConfig, AppState, ErrorEnvelope};
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_auth::{AuthConfig, Authenticator, AuthenticatorOptions};
use wq_core::{
    Action, Clock, CommandReply, CommandSpec, CommandStatus, Dimension, DimensionUpdate,
    EventResult, ExecError, ExecOutcome, Headers, ItemId, ItemType, ItemView, PendingEvent,
    Permission, Phase, RequestError, Submission, SubmitOutcome, Submitted, SystemClock,
    TypeRegistry, WebhookError, WebhookReceipt, WebhookReceiver, WorkItem,
};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, Lease, NewEvent, NewItem,
    Park, PhaseCount, RecordFailure, Store, StoreError, StoreResult, SweepParams,
};

/// The item type the test engine handles: it never has anything to do, so a
/// run claims the item and parks it (`actionable = false`). It takes
/// submissions (`forge` and `project` optional, other keys refused), reports
/// their forge and project as its items' scope, and offers `retry-merge`
/// (permission `retry`), which answers with the caller identity it got.
/// Its items belong to a project ([`ItemType::scoped_by_project`]): one
/// inserted or submitted without a forge and project is in an unknown
/// place, which only rules without a project restriction grant. A
/// submission with `"retry_needs_admin": true` makes its item one whose
/// retry needs `admin` ([`ItemType::retry_needs_admin`]).
pub const PROBE_TYPE: &str = "probe";
/// The probe's command.
pub const PROBE_COMMAND: &str = "retry-merge";
/// A probe command whose handler panics.
pub const PANIC_COMMAND: &str = "explode";

/// The keys a probe submission may hold; any other is an unknown field
/// (named in `field` and quoted in the message).
const PROBE_KEYS: [&str; 4] = ["item_type", "forge", "project", "retry_needs_admin"];

struct Probe {
    store: Arc<dyn Store>,
    /// Forge and project of submitted items.
    places: Mutex<HashMap<ItemId, (String, String)>>,
    /// Items whose retry needs `admin`.
    admin_retry: Mutex<std::collections::HashSet<ItemId>>,
}

#[async_trait]
impl ItemType for Probe {
    fn name(&self) -> &'static str {
        PROBE_TYPE
    }

    async fn submit(&self, submission: Submission) -> Result<Submitted, RequestError> {
        let text = |key: &str| submission.body[key].as_str().map(str::to_owned);
        let unknown: Vec<wq_core::FieldError> = submission
            .body
            .as_object()
            .into_iter()
            .flat_map(|object| object.keys())
            .filter(|key| !PROBE_KEYS.contains(&key.as_str()))
            .map(|key| wq_core::FieldError::new(key.clone(), format!("unknown field {key:?}")))
            .collect();
        if !unknown.is_empty() {
            return Err(RequestError::Invalid(unknown));
        }
        let id = ItemId::new_v7();
        if submission.body["retry_needs_admin"] == serde_json::Value::Bool(true) {
            self.admin_retry.lock().unwrap().insert(id);
        }
        self.store
            .item_insert(NewItem {
                id,
                item_type: PROBE_TYPE.to_owned(),
                idempotency_key: None,
                caller_identity: Some(submission.caller_identity.clone()),
                place: text("forge").zip(text("project")),
                now: submission.now,
                dimensions: Vec::new(),
            })
            .await
            .map_err(|error| RequestError::Unavailable(error.to_string()))?;
        if let (Some(forge), Some(project)) = (text("forge"), text("project")) {
            self.places.lock().unwrap().insert(id, (forge, project));
        }
        Ok(Submitted {
            id,
            outcome: SubmitOutcome::Created,
            wake: false,
        })
    }

    async fn scope(&self, id: ItemId) -> Result<Option<(String, String)>, RequestError> {
        Ok(self.places.lock().unwrap().get(&id).cloned())
    }

    fn scoped_by_project(&self) -> bool {
        true
    }

    async fn retry_needs_admin(&self, item: &WorkItem) -> Result<bool, RequestError> {
        Ok(self.admin_retry.lock().unwrap().contains(&item.id))
    }

    fn commands(&self) -> &'static [CommandSpec] {
        &[
            CommandSpec {
                name: PROBE_COMMAND,
                permission: Permission::Retry,
            },
            CommandSpec {
                name: PANIC_COMMAND,
                permission: Permission::Retry,
            },
        ]
    }

    async fn run_command(
        &self,
        _id: ItemId,
        command: &str,
        _body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        if command == PANIC_COMMAND {
            panic!("the probe's handler fails in a way nobody planned");
        }
        Ok(CommandReply {
            status: CommandStatus::Accepted,
            body: serde_json::json!({"caller_identity": caller_identity}),
            wake: false,
        })
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

/// A registered item type that takes no submissions and offers no
/// commands: every default of [`ItemType`].
pub const BARE_TYPE: &str = "bare";

struct Bare;

#[async_trait]
impl ItemType for Bare {
    fn name(&self) -> &'static str {
        BARE_TYPE
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

/// A webhook source (`/webhooks/probe`) that takes any delivery and
/// ignores it.
pub struct ProbeWebhook;

#[async_trait]
impl WebhookReceiver for ProbeWebhook {
    fn source(&self) -> &'static str {
        "probe"
    }

    async fn receive(
        &self,
        _headers: &Headers,
        _body: &[u8],
        _now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError> {
        Ok(WebhookReceipt {
            items: Vec::new(),
            ignored: Some("the probe tracks nothing".to_owned()),
        })
    }
}

/// How to build a [`TestApp`].
#[derive(Default)]
pub struct AppOptions {
    pub config: ApiConfig,
    /// Faults of the store the router sees.
    pub faults: Faults,
    /// The `auth:` section; [`Tokens`] and their rules are added to it.
    pub auth: AuthConfig,
}

/// Static tokens the app accepts, made per app.
pub struct Tokens {
    /// Group `admins`, rule `admins`: `admin`.
    pub admin: String,
    /// Group `readers`, rule `readers`: `read`.
    pub reader: String,
    /// Group `team`, rule `team`: `read`, `submit`, `retry` on `team/*`.
    pub team: String,
    /// Another identity in group `team`.
    pub teammate: String,
    /// Group `team_admin`, rule `team_admin`: `admin` on `team/*`.
    pub team_admin: String,
    /// Group `strangers`, which no rule names: authenticated, granted
    /// nothing.
    pub stranger: String,
}

impl Tokens {
    fn new() -> Self {
        let token = |name: &str| wq_auth::new_static_token(name).0;
        Self {
            admin: token("admin"),
            reader: token("reader"),
            team: token("team"),
            teammate: token("teammate"),
            team_admin: token("team_admin"),
            stranger: token("stranger"),
        }
    }

    /// Adds the tokens and their rules to `auth`.
    fn configure(&self, auth: &mut AuthConfig) {
        for (name, token, group) in [
            ("admin", &self.admin, "admins"),
            ("reader", &self.reader, "readers"),
            ("team", &self.team, "team"),
            ("teammate", &self.teammate, "team"),
            ("team_admin", &self.team_admin, "team_admin"),
            ("stranger", &self.stranger, "strangers"),
        ] {
            auth.static_tokens.push(StaticTokenConfig::for_token(
                name,
                token,
                vec![group.to_owned()],
            ));
        }
        let rule = |name: &str, permissions: &[&str], projects: Option<&[&str]>| RuleConfig {
            name: name.to_owned(),
            groups: Some(vec![name.to_owned()]),
            issuer: None,
            claims: None,
            allow_any_subject: false,
            claims_case_insensitive: false,
            permissions: permissions.iter().map(|p| (*p).to_owned()).collect(),
            item_types: None,
            forges: None,
            projects: projects.map(|projects| projects.iter().map(|p| (*p).to_owned()).collect()),
        };
        auth.rules.push(rule("admins", &["admin"], None));
        auth.rules.push(rule("readers", &["read"], None));
        auth.rules.push(rule(
            "team",
            &["read", "submit", "retry"],
            Some(&["team/*"]),
        ));
        auth.rules
            .push(rule("team_admin", &["admin"], Some(&["team/*"])));
    }
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
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
    let database_url = match backend {
        Backend::Sqlite => wq_store::testing::fresh_sqlite_url(),
        Backend::Postgres => wq_store::testing::fresh_postgres_url().await,
    };
    let store = wq_store::connect(&database_url, 5)
        .await
        .expect("connect to the test database");
    store.migrate().await.expect("migrate the test database");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let probe = Probe {
        store: Arc::clone(&store),
        places: Mutex::new(HashMap::new()),
        admin_retry: Mutex::new(Default::default()),
    };
    let registry = TypeRegistry::builder()
        .register(Arc::new(probe))
        .register(Arc::new(Bare))
        .build()
        .expect("registry");
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
    let faulty: Arc<dyn Store> = Arc::new(FaultyStore {
        inner: Arc::clone(&store),
        faults: options.faults,
    });
    let tokens = Tokens::new();
    let mut auth = options.auth;
    tokens.configure(&mut auth);
    let authenticator = Authenticator::with_options(
        auth.validate().expect("valid auth config"),
        reqwest::Client::new(),
        AuthenticatorOptions {
            clock: Arc::clone(&clock),
            in_cluster: None,
        },
    )
    .expect("authenticator");
    let state = AppState::new(faulty, Arc::clone(&clock), Arc::new(authenticator))
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
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&bearer(&tokens.admin)).expect("header value"),
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client");
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
    async fn item_list_placed(
        &self,
        params: wq_store::ItemListParams,
    ) -> StoreResult<Vec<wq_store::ListedItem>> {
        if let Some(delay) = self.faults.list_delay {
            tokio::time::sleep(delay).await;
        }
        self.inner.item_list_placed(params).await
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
