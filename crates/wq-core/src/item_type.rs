//! The `ItemType` trait (decider, executors by action name, event handlers,
//! and the rest of a type's life: its migrations, webhook receivers and
//! periodic tasks) and the `TypeRegistry` the binary builds in one place
//! (DDR-8).
//!
//! The engine, the API and the binary's wiring only ever talk to item types
//! through this trait, so none of them names a type.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::api::{
    CommandReply, CommandSpec, FieldError, RequestError, Submission, Submitted, WebhookReceiver,
};
use crate::dimension::DimensionUpdate;
use crate::event::{EventResult, PendingEvent};
use crate::item::{ItemId, ItemView, Phase, WorkItem};
use crate::status::{DetailSection, StatusSummary};

/// The single pending action the decider picked (DDR-5). `name` is one of
/// the type's [`ItemType::actions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Action {
    pub name: &'static str,
}

impl Action {
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// What a successful executor changed on the generic item. Executors decide
/// the phase (DDR-15); the generic layer writes it together with the
/// dimension upserts in one transaction and resets `attempts` (DDR-14).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecOutcome {
    pub phase: Option<Phase>,
    pub dimensions: Vec<DimensionUpdate>,
    /// Recorded as the item's `error` with a phase change (e.g. why an item
    /// was cancelled); `None` clears a previous error.
    pub reason: Option<String>,
    /// Other items the executor enqueued in its own transaction (a
    /// successor item, say): the engine asks for them to be processed.
    pub wake: Vec<crate::ItemId>,
    /// What the executor did outside workqueue and what it was answered
    /// (a note posted, a job retried, a merge commit): appended to the
    /// item's audit trail in the transaction that writes this outcome.
    pub records: Vec<OutcomeRecord>,
}

/// One audit record an executor asks for with its outcome: its `kind`
/// (`forge.note_posted`, say) and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeRecord {
    pub kind: String,
    pub metadata: serde_json::Value,
}

impl ExecOutcome {
    pub fn done() -> Self {
        Self::default()
    }

    pub fn with_dimension(mut self, update: DimensionUpdate) -> Self {
        self.dimensions.push(update);
        self
    }

    /// Asks the engine to process `id`, an item this executor enqueued.
    pub fn with_wake(mut self, id: crate::ItemId) -> Self {
        self.wake.push(id);
        self
    }

    pub fn with_phase(mut self, phase: Phase, reason: Option<String>) -> Self {
        self.phase = Some(phase);
        self.reason = reason;
        self
    }

    /// Adds an audit record of `kind` saying `metadata`, written with the
    /// outcome.
    pub fn with_record(mut self, kind: impl Into<String>, metadata: serde_json::Value) -> Self {
        self.records.push(OutcomeRecord {
            kind: kind.into(),
            metadata,
        });
        self
    }
}

/// An executor or handler failure. Counts as one consecutive failure unless
/// `permanent`, which fails the item at once, or an `outage`, which is
/// retried over the engine's time budget instead of a count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExecError {
    pub message: String,
    /// The earliest time a retry makes sense (e.g. a forge's `Retry-After`).
    pub retry_after: Option<Duration>,
    pub permanent: bool,
    /// A service the item needs is down or rate limited (a forge's 5xx,
    /// 429, timeout): not the item's fault, so its failures are not
    /// counted; the item fails once they have lasted the engine's outage
    /// budget.
    pub outage: bool,
}

impl ExecError {
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry_after: None,
            permanent: false,
            outage: false,
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry_after: None,
            permanent: true,
            outage: false,
        }
    }

    /// A dependency's outage (see [`ExecError::outage`]).
    pub fn outage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry_after: None,
            permanent: false,
            outage: true,
        }
    }

    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
}

/// Any error, boxed: what a type's migration fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A boxed future that can move between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one run of a [`Periodic`] task answers: the items to process now.
pub type PeriodicResult = Result<Vec<ItemId>, ExecError>;

/// Work an item type does on a timer rather than for one item (e.g. one
/// batched read of the `mr` type's merge queues). The engine runs the tasks
/// of the types it handles beside its sweep, every `interval` (the first
/// run one interval after the start), and processes the items a run
/// returns at once. A failed run is logged; the next one tries again.
#[derive(Clone)]
pub struct Periodic {
    /// Unique among the registered types' tasks, e.g. `mr.queue_sync`.
    pub name: &'static str,
    pub interval: Duration,
    run: Arc<dyn Fn() -> BoxFuture<'static, PeriodicResult> + Send + Sync>,
}

impl Periodic {
    pub fn new<F, Fut>(name: &'static str, interval: Duration, run: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PeriodicResult> + Send + 'static,
    {
        Self {
            name,
            interval,
            run: Arc::new(move || Box::pin(run())),
        }
    }

    /// One run of the task.
    pub fn run(&self) -> BoxFuture<'static, PeriodicResult> {
        (self.run)()
    }
}

impl fmt::Debug for Periodic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Periodic")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// One kind of work item. Implementations hold their own dependencies
/// (clients, their detail-table store) and are registered once; everything
/// the type needs besides the generic tables and loop (its own tables,
/// webhooks, timers) comes from here too.
#[async_trait]
pub trait ItemType: Send + Sync + 'static {
    /// The `item_type` column value.
    fn name(&self) -> &'static str;

    /// Applies the type's own migrations (its tables), after the generic
    /// store's. Run at start and by `workqueue migrate`; must be
    /// idempotent.
    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(())
    }

    /// The receivers of the webhook sources this type listens to
    /// (`POST /webhooks/{source}`); every source belongs to one type.
    fn webhook_receivers(self: Arc<Self>) -> Vec<Arc<dyn WebhookReceiver>> {
        Vec::new()
    }

    /// The type's periodic tasks, run by engines that handle the type.
    fn periodic(self: Arc<Self>) -> Vec<Periodic> {
        Vec::new()
    }

    /// Names of the actions this type can execute.
    fn actions(&self) -> &'static [&'static str];

    /// Whether `action` may write outside workqueue (a forge). Before such
    /// an action runs, the engine records `action.started` (with the
    /// outcome still pending, in one transaction), so that a crash between
    /// the outside write and its recorded outcome shows in the audit trail
    /// as an action that started and never finished. Actions without
    /// outside effects skip that write.
    fn has_outside_effects(&self, action: Action) -> bool {
        let _ = action;
        false
    }

    /// Pure: the next action for this state, or `None` to park (DDR-4).
    /// Called only by the processing loop (DDR-49).
    fn decide(&self, view: &ItemView) -> Option<Action>;

    /// Runs `action` for the item. Called only with a name from
    /// [`ItemType::actions`], while the caller holds the item's lease.
    async fn execute(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError>;

    /// Interprets a raw event. Read-only: the result is its only output
    /// (DDR-33). Unknown events yield [`EventResult::ignored`].
    async fn handle_event(
        &self,
        view: &ItemView,
        event: &PendingEvent,
    ) -> Result<EventResult, ExecError>;

    /// Creates or updates an item from a caller's submission
    /// (`POST /api/v1/work-items`). Types that take none keep the default,
    /// which refuses the submission's `item_type` (422).
    async fn submit(&self, submission: Submission) -> Result<Submitted, RequestError> {
        let _ = submission;
        Err(RequestError::Invalid(vec![FieldError::new(
            "item_type",
            format!("item type {:?} takes no submissions", self.name()),
        )]))
    }

    /// The JSON Schema (2020-12, as OpenAPI 3.1 uses it) of the bodies
    /// [`ItemType::submit`] takes, `item_type` included; the API's OpenAPI
    /// document offers it as one branch of the submission's `oneOf`, by
    /// `item_type`. `None` (the default) for a type that documents none:
    /// the document then says only that `item_type` names it.
    fn submission_schema(&self) -> Option<serde_json::Value> {
        None
    }

    /// The type's own view of an item (its detail row), shown under
    /// `detail` in `GET /api/v1/work-items/{id}`.
    async fn detail(&self, item: &WorkItem) -> Result<Option<serde_json::Value>, RequestError> {
        let _ = item;
        Ok(None)
    }

    /// The item at a glance (its change request, CI, queue entry, unmet
    /// gates, last merge attempt, automations), from stored state only: no
    /// forge call, as it is computed for every row of a listing. `None`
    /// when the type has no such notion or the item has no detail row.
    async fn status(&self, item: &WorkItem) -> Result<Option<StatusSummary>, RequestError> {
        let _ = item;
        Ok(None)
    }

    /// The item's page for people, in sections (e.g. the merge gates met or
    /// not and why, the merge attempts, the CI retry decisions, the
    /// submitted files), from stored state only.
    async fn sections(&self, item: &WorkItem) -> Result<Vec<DetailSection>, RequestError> {
        let _ = item;
        Ok(Vec::new())
    }

    /// The `(forge, project)` an item belongs to, so that reading, retrying
    /// and commanding it can be authorized for that project. `None` when the
    /// type has no such notion (then only the item type is checked) or the
    /// item has no detail row.
    async fn scope(&self, id: ItemId) -> Result<Option<(String, String)>, RequestError> {
        let _ = id;
        Ok(None)
    }

    /// Whether every item of this type belongs to a forge and project. When
    /// true, an item whose [`ItemType::scope`] is `None` (its detail row is
    /// missing) is in an unknown place: only callers granted the permission
    /// without a forge or project restriction may act on it.
    fn scoped_by_project(&self) -> bool {
        false
    }

    /// Whether retrying this item (`POST .../retry`) needs `admin` on its
    /// scope rather than `retry`: an item a person ended on purpose (the
    /// `mr` type: cancelled because someone closed its merge request) is
    /// not reopened by a caller who may only retry.
    async fn retry_needs_admin(&self, item: &WorkItem) -> Result<bool, RequestError> {
        let _ = item;
        Ok(false)
    }

    /// The event type stored with a retry of `item`, in the retry's
    /// transaction (its body `{"caller": ...}`), when the type must know
    /// that a caller asked for the item again (the `mr` type: a change
    /// request that was closed is reopened). `None`: no event.
    fn retry_event(&self, item: &WorkItem) -> Option<&'static str> {
        let _ = item;
        None
    }

    /// Commands the type offers on its items.
    fn commands(&self) -> &'static [CommandSpec] {
        &[]
    }

    /// Runs one of [`ItemType::commands`] for an item of this type; a
    /// command it does not know is [`RequestError::NotFound`] (404).
    async fn run_command(
        &self,
        id: ItemId,
        command: &str,
        body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        let _ = (id, body, caller_identity);
        Err(RequestError::NotFound(format!(
            "item type {:?} has no command {command:?}",
            self.name()
        )))
    }
}

/// Building the registry failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("item type {0:?} is registered twice")]
    Duplicate(String),
    #[error("item type {0:?} declares no actions")]
    NoActions(String),
    #[error("webhook source {0:?} is claimed by two item types")]
    DuplicateWebhook(String),
    #[error("periodic task {0:?} is declared twice")]
    DuplicatePeriodic(String),
}

/// A registered type's migration failed.
#[derive(Debug, thiserror::Error)]
#[error("applying the {item_type} type's migrations failed: {source}")]
pub struct MigrateError {
    pub item_type: &'static str,
    #[source]
    pub source: BoxError,
}

/// Registered item types by name, with their webhook receivers and periodic
/// tasks; built once, then shared read-only.
#[derive(Clone, Default)]
pub struct TypeRegistry {
    types: BTreeMap<&'static str, Arc<dyn ItemType>>,
    webhooks: BTreeMap<&'static str, Arc<dyn WebhookReceiver>>,
    periodic: BTreeMap<&'static str, Vec<Periodic>>,
}

impl fmt::Debug for TypeRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.types.keys()).finish()
    }
}

impl TypeRegistry {
    pub fn builder() -> TypeRegistryBuilder {
        TypeRegistryBuilder::default()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn ItemType>> {
        self.types.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.keys().copied()
    }

    /// Every type's webhook receiver, one per source.
    pub fn webhook_receivers(&self) -> impl Iterator<Item = &Arc<dyn WebhookReceiver>> + '_ {
        self.webhooks.values()
    }

    /// The periodic tasks of the type `name` (none for an unknown type).
    pub fn periodic(&self, name: &str) -> &[Periodic] {
        self.periodic.get(name).map_or(&[], Vec::as_slice)
    }

    /// Applies every type's migrations, in name order; stops at the first
    /// failure.
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        for (&item_type, registered) in &self.types {
            registered
                .migrate()
                .await
                .map_err(|source| MigrateError { item_type, source })?;
        }
        Ok(())
    }

    /// True when `action` is one the type declared.
    pub fn knows_action(item_type: &dyn ItemType, action: Action) -> bool {
        item_type.actions().contains(&action.name)
    }
}

/// Collects item types; `build` refuses duplicate types, webhook sources
/// and periodic task names.
#[derive(Default)]
pub struct TypeRegistryBuilder {
    types: Vec<Arc<dyn ItemType>>,
}

impl TypeRegistryBuilder {
    pub fn register(mut self, item_type: Arc<dyn ItemType>) -> Self {
        self.types.push(item_type);
        self
    }

    pub fn build(self) -> Result<TypeRegistry, RegistryError> {
        let mut registry = TypeRegistry::default();
        let mut task_names = std::collections::BTreeSet::new();
        for item_type in self.types {
            let name = item_type.name();
            if item_type.actions().is_empty() {
                return Err(RegistryError::NoActions(name.to_owned()));
            }
            if registry.types.contains_key(name) {
                return Err(RegistryError::Duplicate(name.to_owned()));
            }
            for receiver in Arc::clone(&item_type).webhook_receivers() {
                let source = receiver.source();
                if registry.webhooks.insert(source, receiver).is_some() {
                    return Err(RegistryError::DuplicateWebhook(source.to_owned()));
                }
            }
            let periodic = Arc::clone(&item_type).periodic();
            for task in &periodic {
                if !task_names.insert(task.name) {
                    return Err(RegistryError::DuplicatePeriodic(task.name.to_owned()));
                }
            }
            registry.periodic.insert(name, periodic);
            registry.types.insert(name, item_type);
        }
        Ok(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str, &'static [&'static str]);

    #[async_trait]
    impl ItemType for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn actions(&self) -> &'static [&'static str] {
            self.1
        }
        fn decide(&self, _view: &ItemView) -> Option<Action> {
            None
        }
        async fn execute(
            &self,
            _action: Action,
            _view: &ItemView,
        ) -> Result<ExecOutcome, ExecError> {
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

    /// Claims the webhook source and periodic task named `.1`.
    struct Claiming(&'static str, &'static str);

    struct Source(&'static str);

    #[async_trait]
    impl WebhookReceiver for Source {
        fn source(&self) -> &'static str {
            self.0
        }
        async fn receive(
            &self,
            _headers: &crate::Headers,
            _body: &[u8],
            _trust: crate::DeliveryTrust,
            _now: time::OffsetDateTime,
        ) -> Result<crate::WebhookReceipt, crate::WebhookError> {
            Ok(crate::WebhookReceipt::default())
        }
    }

    #[async_trait]
    impl ItemType for Claiming {
        fn name(&self) -> &'static str {
            self.0
        }
        fn webhook_receivers(self: Arc<Self>) -> Vec<Arc<dyn WebhookReceiver>> {
            vec![Arc::new(Source(self.1))]
        }
        fn periodic(self: Arc<Self>) -> Vec<Periodic> {
            vec![Periodic::new(self.1, Duration::from_secs(1), || async {
                Ok(Vec::new())
            })]
        }
        fn actions(&self) -> &'static [&'static str] {
            &["x"]
        }
        fn decide(&self, _view: &ItemView) -> Option<Action> {
            None
        }
        async fn execute(
            &self,
            _action: Action,
            _view: &ItemView,
        ) -> Result<ExecOutcome, ExecError> {
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

    #[test]
    fn registry_holds_each_types_receivers_and_tasks_once() {
        let ok = TypeRegistry::builder()
            .register(Arc::new(Claiming("a", "one")))
            .register(Arc::new(Claiming("b", "two")))
            .build()
            .unwrap();
        let sources: Vec<_> = ok.webhook_receivers().map(|r| r.source()).collect();
        assert_eq!(sources, ["one", "two"]);
        assert_eq!(ok.periodic("a")[0].name, "one");
        assert!(ok.periodic("c").is_empty());
        let twice = TypeRegistry::builder()
            .register(Arc::new(Claiming("a", "one")))
            .register(Arc::new(Claiming("b", "one")))
            .build();
        assert_eq!(
            twice.unwrap_err(),
            RegistryError::DuplicateWebhook("one".into())
        );
    }

    #[test]
    fn registry_refuses_duplicates_and_empty_action_lists() {
        let dup = TypeRegistry::builder()
            .register(Arc::new(Named("a", &["x"])))
            .register(Arc::new(Named("a", &["y"])))
            .build();
        assert_eq!(dup.unwrap_err(), RegistryError::Duplicate("a".into()));
        let empty = TypeRegistry::builder()
            .register(Arc::new(Named("b", &[])))
            .build();
        assert_eq!(empty.unwrap_err(), RegistryError::NoActions("b".into()));
        let ok = TypeRegistry::builder()
            .register(Arc::new(Named("a", &["x"])))
            .register(Arc::new(Named("b", &["y"])))
            .build()
            .unwrap();
        assert_eq!(ok.names().collect::<Vec<_>>(), vec!["a", "b"]);
        let a = ok.get("a").unwrap();
        assert!(TypeRegistry::knows_action(a.as_ref(), Action::new("x")));
        assert!(!TypeRegistry::knows_action(a.as_ref(), Action::new("y")));
    }
}
