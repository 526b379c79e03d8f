//! Item types for tests and benchmarks. `chain` runs `step1` → `step2` →
//! `step3` in order and reacts to events; `noop` runs one no-op action.
//! Both count executions so tests can prove exactly-once behaviour. For
//! the API's tests, `probe` takes submissions and commands and never has
//! work, `bare` keeps every default of [`ItemType`], and [`ProbeWebhook`]
//! is a webhook source that ignores every delivery.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{
    Action, CommandReply, CommandSpec, CommandStatus, DimensionUpdate, EventResult, ExecError,
    ExecOutcome, Headers, ItemId, ItemType, ItemView, LeaseEpoch, PendingEvent, Permission, Phase,
    RequestError, Submission, SubmitOutcome, Submitted, TypeRegistry, WebhookError, WebhookReceipt,
    WebhookReceiver, WorkItem,
};
use wq_store::{NewItem, Store};

/// Name of the chained test type.
pub const CHAIN: &str = "chain";
/// Name of the single-action benchmark type.
pub const NOOP: &str = "noop";

/// The chain's steps, in decider priority order.
pub const CHAIN_STEPS: [&str; 3] = ["step1", "step2", "step3"];

/// Executions per `(item, action)`.
#[derive(Debug, Default, Clone)]
pub struct Executions {
    counts: Arc<Mutex<HashMap<(ItemId, &'static str), u32>>>,
    order: Arc<Mutex<HashMap<ItemId, Vec<&'static str>>>>,
    leases: Arc<Mutex<HashMap<ItemId, Vec<Option<LeaseEpoch>>>>>,
}

impl Executions {
    fn record(&self, id: ItemId, action: &'static str, lease: Option<LeaseEpoch>) {
        self.leases
            .lock()
            .expect("executions lock")
            .entry(id)
            .or_default()
            .push(lease);
        *self
            .counts
            .lock()
            .expect("executions lock")
            .entry((id, action))
            .or_default() += 1;
        self.order
            .lock()
            .expect("executions lock")
            .entry(id)
            .or_default()
            .push(action);
    }

    /// How often `action` ran for `id`.
    pub fn count(&self, id: ItemId, action: &str) -> u32 {
        self.counts
            .lock()
            .expect("executions lock")
            .iter()
            .filter(|((item, name), _)| *item == id && *name == action)
            .map(|(_, count)| *count)
            .sum()
    }

    /// The actions run for `id`, in order.
    pub fn order(&self, id: ItemId) -> Vec<&'static str> {
        self.order
            .lock()
            .expect("executions lock")
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// The lease epoch each execution's view named for `id`, in order.
    pub fn leases(&self, id: ItemId) -> Vec<Option<LeaseEpoch>> {
        self.leases
            .lock()
            .expect("executions lock")
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// Total executions over all items.
    pub fn total(&self) -> u64 {
        self.counts
            .lock()
            .expect("executions lock")
            .values()
            .map(|count| u64::from(*count))
            .sum()
    }

    /// Every `(item, action)` that ran more than once.
    pub fn repeated(&self) -> Vec<(ItemId, &'static str, u32)> {
        self.counts
            .lock()
            .expect("executions lock")
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|((id, action), count)| (*id, *action, *count))
            .collect()
    }
}

/// Executor calls in progress at once, for tests of the worker bound: the
/// most seen, and an optional hold of the first calls until that many run
/// together (so the bound is seen reached whatever the scheduling).
#[derive(Debug)]
pub struct ExecProbe {
    /// (running now, most at once).
    running: Mutex<(usize, usize)>,
    /// Calls held until this many have entered.
    fill: std::sync::atomic::AtomicUsize,
    entered: tokio::sync::watch::Sender<usize>,
}

impl Default for ExecProbe {
    fn default() -> Self {
        Self {
            running: Mutex::new((0, 0)),
            fill: std::sync::atomic::AtomicUsize::new(0),
            entered: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl ExecProbe {
    /// The first `fill` calls wait until `fill` calls have entered.
    pub fn hold_until(&self, fill: usize) {
        self.fill.store(fill, std::sync::atomic::Ordering::SeqCst);
    }

    /// The most executor calls seen running at once.
    pub fn most(&self) -> usize {
        self.running.lock().expect("probe lock").1
    }

    /// Executor calls running now.
    pub fn running(&self) -> usize {
        self.running.lock().expect("probe lock").0
    }

    async fn enter(&self) -> Running<'_> {
        {
            let mut running = self.running.lock().expect("probe lock");
            running.0 += 1;
            running.1 = running.1.max(running.0);
        }
        let mut order = 0;
        self.entered.send_modify(|entered| {
            *entered += 1;
            order = *entered;
        });
        let fill = self.fill.load(std::sync::atomic::Ordering::SeqCst);
        if order <= fill {
            let mut entered = self.entered.subscribe();
            entered
                .wait_for(|entered| *entered >= fill)
                .await
                .expect("the probe lives");
        }
        Running(self)
    }
}

/// One executor call in progress; it leaves the probe when dropped (also
/// when the call panics).
struct Running<'a>(&'a ExecProbe);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.lock().expect("probe lock").0 -= 1;
    }
}

/// Three chained actions driven by `needs_step*` dimensions.
///
/// Events: `extra` sets `needs_extra` (the decider then runs `extra`),
/// `finish` completes the item, `cancel` cancels it. Failures can be
/// scripted per item with [`ChainType::fail_next`].
#[derive(Debug, Default, Clone)]
pub struct ChainType {
    pub executions: Executions,
    /// Executor calls in progress.
    pub probe: Arc<ExecProbe>,
    failures: Arc<Mutex<HashMap<ItemId, (u32, bool)>>>,
    panics: Arc<Mutex<HashMap<ItemId, u32>>>,
}

impl ChainType {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `times` executions for `id` fail (permanently if asked).
    pub fn fail_next(&self, id: ItemId, times: u32, permanent: bool) {
        self.failures
            .lock()
            .expect("failures lock")
            .insert(id, (times, permanent));
    }

    /// The next `times` executions for `id` panic (an executor bug).
    pub fn panic_next(&self, id: ItemId, times: u32) {
        self.panics.lock().expect("panics lock").insert(id, times);
    }

    fn take_panic(&self, id: ItemId) -> bool {
        let mut panics = self.panics.lock().expect("panics lock");
        match panics.get_mut(&id) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    fn take_failure(&self, id: ItemId) -> Option<bool> {
        let mut failures = self.failures.lock().expect("failures lock");
        let entry = failures.get_mut(&id)?;
        if entry.0 == 0 {
            return None;
        }
        entry.0 -= 1;
        Some(entry.1)
    }
}

#[async_trait]
impl ItemType for ChainType {
    fn name(&self) -> &'static str {
        CHAIN
    }

    fn actions(&self) -> &'static [&'static str] {
        &["step1", "step2", "step3", "extra"]
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        for step in CHAIN_STEPS {
            if view.needs(&format!("needs_{step}")) {
                return Some(Action::new(step));
            }
        }
        if view.needs_present("needs_extra", "") {
            return Some(Action::new("extra"));
        }
        None
    }

    async fn execute(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        let _running = self.probe.enter().await;
        self.run_step(action, view)
    }

    async fn handle_event(
        &self,
        _view: &ItemView,
        event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(match event.event_type.as_str() {
            "extra" => {
                EventResult::ignored().with_dimension(DimensionUpdate::new("needs_extra", true))
            }
            "finish" => EventResult::ignored().with_phase(Phase::Completed),
            "cancel" => EventResult::ignored().with_phase(Phase::Cancelled),
            _ => EventResult::ignored(),
        })
    }
}

impl ChainType {
    /// One step's outcome (or its scripted failure or panic).
    fn run_step(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        let id = view.item.id;
        assert!(!self.take_panic(id), "scripted panic in {action}");
        if let Some(permanent) = self.take_failure(id) {
            return Err(if permanent {
                ExecError::permanent(format!("scripted permanent failure of {action}"))
            } else {
                ExecError::transient(format!("scripted failure of {action}"))
            });
        }
        self.executions.record(id, action.name, view.lease);
        Ok(ExecOutcome::done().with_dimension(
            DimensionUpdate::new(format!("needs_{}", action.name), false)
                .detail(serde_json::json!({ "ran_at": view.now.unix_timestamp() })),
        ))
    }
}

/// One no-op action, for throughput benchmarks.
#[derive(Debug, Default, Clone)]
pub struct NoopType;

#[async_trait]
impl ItemType for NoopType {
    fn name(&self) -> &'static str {
        NOOP
    }

    fn actions(&self) -> &'static [&'static str] {
        &["noop"]
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        view.needs("needs_noop").then_some(Action::new("noop"))
    }

    async fn execute(&self, _action: Action, _view: &ItemView) -> Result<ExecOutcome, ExecError> {
        Ok(ExecOutcome::done().with_dimension(DimensionUpdate::new("needs_noop", false)))
    }

    async fn handle_event(
        &self,
        _view: &ItemView,
        _event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(EventResult::ignored())
    }
}

/// Name of the probe type, for API tests: it never has anything to do, so
/// a run claims the item and parks it (`actionable = false`). It takes
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

/// The [`PROBE_TYPE`] item type; its items live in the generic tables only.
pub struct ProbeType {
    store: Arc<dyn Store>,
    /// Forge and project of submitted items.
    places: Mutex<HashMap<ItemId, (String, String)>>,
    /// Items whose retry needs `admin`.
    admin_retry: Mutex<HashSet<ItemId>>,
}

impl ProbeType {
    /// A probe whose submissions are stored in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            places: Mutex::new(HashMap::new()),
            admin_retry: Mutex::new(HashSet::new()),
        }
    }
}

#[async_trait]
impl ItemType for ProbeType {
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
            self.admin_retry.lock().expect("probe lock").insert(id);
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
            self.places
                .lock()
                .expect("probe lock")
                .insert(id, (forge, project));
        }
        Ok(Submitted {
            id,
            outcome: SubmitOutcome::Created,
            wake: false,
        })
    }

    async fn scope(&self, id: ItemId) -> Result<Option<(String, String)>, RequestError> {
        Ok(self.places.lock().expect("probe lock").get(&id).cloned())
    }

    fn scoped_by_project(&self) -> bool {
        true
    }

    async fn retry_needs_admin(&self, item: &WorkItem) -> Result<bool, RequestError> {
        Ok(self
            .admin_retry
            .lock()
            .expect("probe lock")
            .contains(&item.id))
    }

    fn commands(&self) -> &'static [CommandSpec] {
        &[
            CommandSpec {
                name: PROBE_COMMAND,
                permission: Permission::Retry,
                owner_permission: None,
            },
            CommandSpec {
                name: PANIC_COMMAND,
                permission: Permission::Retry,
                owner_permission: None,
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

/// The [`BARE_TYPE`] item type.
#[derive(Debug, Default, Clone, Copy)]
pub struct BareType;

#[async_trait]
impl ItemType for BareType {
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
        _trust: wq_core::DeliveryTrust,
        _now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError> {
        Ok(WebhookReceipt {
            items: Vec::new(),
            ignored: Some("the probe tracks nothing".to_owned()),
        })
    }
}

/// A registry of [`ProbeType`] over `store` and [`BareType`].
pub fn probe_registry(store: Arc<dyn Store>) -> TypeRegistry {
    TypeRegistry::builder()
        .register(Arc::new(ProbeType::new(store)))
        .register(Arc::new(BareType))
        .build()
        .expect("the probe registry")
}
