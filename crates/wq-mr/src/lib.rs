//! The `mr` item type: a caller's desired change, owned on a forge until it
//! is merged or closed (ARCHITECTURE.md, "The `mr` type").
//!
//! - [`spec`]: the submission schema and its validation (DDR-9).
//! - [`store`]: the `mr_details` table and its transactions (DDR-7, DDR-40).
//! - [`dims`]: the names of dimensions and actions ([`MrAction`]).
//! - [`decider`]: the next action (DDR-45, DDR-48).
//! - `actions`: an action to its executor.
//! - `exec`: the executors `ensure_mr`, `check_empty_diff`,
//!   `post_dashboard_note`, `reconcile_mr` (DDR-15, DDR-43, DDR-46).
//! - [`ci_retry`]: failed CI jobs judged by the herder and retried
//!   (`retry_ci_jobs`, DDR-47).
//! - `dashboard`: the status note's text.
//! - [`merge`]: readiness gates, signature and the merge-attempt journal.
//! - `events`: the event handler (DDR-33, DDR-37, DDR-38).
//! - `commands`: the `merge` and `retry-merge` item commands.
//! - `queue_sync`: the batched merge queue read ([`MrType::sync_queues`]),
//!   the type's periodic task [`QUEUE_SYNC_TASK`].
//! - [`webhook`]: the webhook receivers that resolve deliveries to items.
//! - `errors`: forge and store failures as executor and request errors.
//!
//! The modules form a graph without cycles: below this root, no two import
//! each other.

mod actions;
pub mod ci_retry;
mod commands;
mod config;
mod dashboard;
pub mod decider;
pub mod dims;
mod errors;
mod events;
mod exec;
pub mod merge;
mod queue_sync;
pub mod spec;
pub mod store;
pub mod text;
pub mod webhook;

pub use commands::MANUAL_MERGE_EVENT;
pub use config::MrConfig;
pub use dims::MrAction;
pub use queue_sync::{QUEUE_OBSERVED_EVENT, QUEUE_SYNC_TASK, QueueSync};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use wq_core::{
    Action, BoxError, Clock, CommandReply, CommandSpec, EventResult, ExecError, ExecOutcome,
    FieldError, ItemId, ItemType, ItemView, PendingEvent, Periodic, Phase, RequestError,
    Submission, Submitted, WebhookReceiver, WorkItem,
};
use wq_forge::Forges;
use wq_store::Store;

use crate::errors::{request_store_error, store_error};
use crate::spec::SubmissionRules;
use crate::store::{MrStore, UpsertInput, UpsertOutcome};

/// The `item_type` of merge request items.
pub const TYPE_NAME: &str = "mr";

/// The `mr` item type, with its dependencies.
pub struct MrType {
    store: MrStore,
    items: Arc<dyn Store>,
    forges: Forges,
    rules: SubmissionRules,
    config: MrConfig,
    clock: Arc<dyn Clock>,
    herder: Arc<wq_herder::Herder>,
    /// The forge's spelling of each project asked about, by (forge, project
    /// in lower case): read once per forge and project.
    project_paths: Mutex<HashMap<(String, String), String>>,
}

/// Why an item was cancelled when a person closed its change request.
pub const CLOSED_ON_FORGE: &str = "the merge request was closed on the forge";

impl MrType {
    /// Builds the type; refuses a config whose patterns do not compile.
    pub fn new(
        items: Arc<dyn Store>,
        forges: Forges,
        config: MrConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Vec<String>> {
        let rules = config.compile()?;
        Ok(Self {
            store: MrStore::new(items.as_ref()),
            items,
            forges,
            rules,
            config,
            clock,
            herder: Arc::new(wq_herder::Herder::default_set()),
            project_paths: Mutex::new(HashMap::new()),
        })
    }

    /// The CI retry matchers (`ci_retry:`); the default set without this.
    pub fn with_herder(mut self, herder: wq_herder::Herder) -> Self {
        self.herder = Arc::new(herder);
        self
    }

    pub fn store(&self) -> &MrStore {
        &self.store
    }

    pub fn forges(&self) -> &Forges {
        &self.forges
    }

    pub fn config(&self) -> &MrConfig {
        &self.config
    }

    fn seconds(value: u64) -> time::Duration {
        time::Duration::try_from(Duration::from_secs(value)).unwrap_or(time::Duration::MAX)
    }

    /// The project as the forge spells it (`Team/Service` for
    /// `team/service`), read once per forge and project: the live item of a
    /// branch is one whatever the case a caller uses. An unknown project is
    /// a 422 naming `project`; a forge that cannot answer is a 503.
    async fn canonical_project(
        &self,
        forge_name: &str,
        forge: &dyn wq_forge::Forge,
        project: &str,
    ) -> Result<String, RequestError> {
        // Forge paths are case-insensitive: one entry per project, whatever
        // spellings callers use.
        let key = (forge_name.to_owned(), project.to_lowercase());
        if let Some(path) = self.cached_project(&key) {
            return Ok(path);
        }
        let path = forge.project_path(project).await.map_err(|error| {
            if error.kind == wq_forge::ForgeErrorKind::NotFound {
                RequestError::Invalid(vec![FieldError::new(
                    "project",
                    format!("project {project:?} does not exist on forge {forge_name:?}"),
                )])
            } else {
                tracing::warn!(forge = forge_name, project, %error, "project lookup failed");
                RequestError::Unavailable(format!(
                    "forge {forge_name:?} could not be asked about project {project:?}; try again"
                ))
            }
        })?;
        self.project_paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, path.clone());
        Ok(path)
    }

    fn cached_project(&self, key: &(String, String)) -> Option<String> {
        self.project_paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }
}

#[async_trait]
impl ItemType for MrType {
    fn name(&self) -> &'static str {
        TYPE_NAME
    }

    /// `mr_details` and its companions (after the generic store's).
    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(self.store.migrate().await?)
    }

    /// One receiver per forge kind that has a configured instance.
    fn webhook_receivers(self: Arc<Self>) -> Vec<Arc<dyn WebhookReceiver>> {
        webhook::receivers(&self)
    }

    /// The merge queue sync, every `mr.queue_sync_interval_seconds`.
    fn periodic(self: Arc<Self>) -> Vec<Periodic> {
        let interval = Duration::from_secs(self.config.queue_sync_interval_seconds);
        vec![Periodic::new(QUEUE_SYNC_TASK, interval, move || {
            let mr = Arc::clone(&self);
            async move {
                let sync = mr.sync_queues().await.map_err(store_error)?;
                Ok(sync.woken)
            }
        })]
    }

    fn actions(&self) -> &'static [&'static str] {
        dims::ACTIONS
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        decider::decide(view).map(Action::from)
    }

    async fn execute(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        actions::execute(self, action, view).await
    }

    async fn handle_event(
        &self,
        view: &ItemView,
        event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        events::handle(self, view, event).await
    }

    async fn submit(&self, submission: Submission) -> Result<Submitted, RequestError> {
        let mut spec =
            spec::parse_submission(&submission.body, &self.rules).map_err(RequestError::Invalid)?;
        let Some(forge) = self.forges.get(&spec.forge).cloned() else {
            let known: Vec<&str> = self.forges.names().collect();
            return Err(RequestError::Invalid(vec![FieldError::new(
                "forge",
                format!(
                    "unknown forge {:?}; configured forges: {}",
                    spec.forge,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )]));
        };
        spec.project = self
            .canonical_project(&spec.forge, forge.as_ref(), &spec.project)
            .await?;
        let content_hash = spec.content_hash();
        let metadata_hash = spec.metadata_hash();
        let upserted = self
            .store
            .upsert(UpsertInput {
                spec: &spec,
                content_hash: &content_hash,
                metadata_hash: &metadata_hash,
                caller_identity: &submission.caller_identity,
                caller_is_admin: submission.caller_is_admin,
                now: submission.now,
            })
            .await
            .map_err(request_store_error)?;
        if upserted.outcome == UpsertOutcome::NotOwner {
            tracing::info!(
                item = %upserted.id,
                caller = %submission.caller_identity,
                "mr submission refused: the live item belongs to another caller"
            );
            return Err(RequestError::Refused {
                code: wq_core::OWNED_BY_ANOTHER_CALLER,
                message: format!(
                    "work item {} for {} {} branch {} was submitted by another caller; \
                     only its submitter or an admin may update or retry it",
                    upserted.id, spec.forge, spec.project, spec.source_branch
                ),
            });
        }
        tracing::info!(
            item = %upserted.id,
            outcome = upserted.outcome.as_str(),
            forge = %spec.forge,
            project = %spec.project,
            source_branch = %spec.source_branch,
            "mr submission"
        );
        Ok(Submitted {
            id: upserted.id,
            outcome: upserted.outcome.as_str(),
            created: upserted.outcome == UpsertOutcome::Created,
            wake: upserted.outcome != UpsertOutcome::Unchanged,
        })
    }

    async fn detail(&self, item: &WorkItem) -> Result<Option<serde_json::Value>, RequestError> {
        let details = self.store.get(item.id).await.map_err(request_store_error)?;
        let Some(mut d) = details else {
            return Ok(None);
        };
        // A merged or closed change request is in no queue, whatever the
        // last observation before the end said.
        if item.phase.is_terminal() {
            d.queue = None;
        }
        let submissions = self
            .store
            .submissions(item.id)
            .await
            .map_err(request_store_error)?;
        let mut detail = merge::detail_json(&d);
        detail["submissions"] = serde_json::json!(submissions);
        Ok(Some(detail))
    }

    /// Reopening an item a person ended by closing its change request needs
    /// `admin`: `retry` alone must not undo a person's decision.
    async fn retry_needs_admin(&self, item: &WorkItem) -> Result<bool, RequestError> {
        Ok(item.phase == Phase::Cancelled && item.error.as_deref() == Some(CLOSED_ON_FORGE))
    }

    async fn scope(&self, id: ItemId) -> Result<Option<(String, String)>, RequestError> {
        let details = self.store.get(id).await.map_err(request_store_error)?;
        Ok(details.map(|d| (d.spec.forge, d.spec.project)))
    }

    fn scoped_by_project(&self) -> bool {
        true
    }

    fn commands(&self) -> &'static [CommandSpec] {
        &[
            CommandSpec {
                name: "retry-merge",
                permission: "retry",
            },
            CommandSpec {
                name: "merge",
                permission: "merge",
            },
        ]
    }

    async fn run_command(
        &self,
        id: ItemId,
        command: &str,
        body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        match command {
            "retry-merge" => self.retry_merge(id).await,
            "merge" => self.manual_merge(id, body, caller_identity).await,
            other => Err(RequestError::NotFound(format!(
                "item type mr has no command {other:?}"
            ))),
        }
    }
}
