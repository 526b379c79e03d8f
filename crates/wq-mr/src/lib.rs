//! The `mr` item type: a caller's desired change, owned on a forge until it
//! is merged or closed (ARCHITECTURE.md, "The `mr` type").
//!
//! - [`spec`]: the submission schema and its validation (DDR-9).
//! - [`store`]: the `mr_details` table and its transactions (DDR-7, DDR-40).
//! - [`ci_retry`]: failed CI jobs judged by the herder and retried (DDR-47).
//! - [`dims`]: dimension names and the decider (DDR-45, DDR-48).
//! - `exec`: the executors `ensure_mr`, `check_empty_diff`,
//!   `post_dashboard_note`, `reconcile_mr` (DDR-15, DDR-43, DDR-46);
//!   `retry_ci_jobs` is in [`ci_retry`].
//! - [`merge`]: readiness gates, signature and the merge-attempt journal.
//! - `events`: the event handler (DDR-33, DDR-37, DDR-38).
//! - `queue_sync`: the batched merge queue read ([`MrType::sync_queues`]),
//!   the type's periodic task [`QUEUE_SYNC_TASK`].
//! - [`webhook`]: the webhook receivers that resolve deliveries to items.

pub mod ci_retry;
mod config;
pub mod dims;
mod events;
mod exec;
pub mod merge;
mod queue_sync;
pub mod spec;
pub mod store;
pub mod text;
pub mod webhook;

pub use config::MrConfig;
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
use wq_store::{Store, StoreError};

use crate::spec::SubmissionRules;
use crate::store::{MergeResult, MrDetails, MrStore, UpsertInput, UpsertOutcome};

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

fn store_error(error: StoreError) -> ExecError {
    ExecError::transient(format!("store: {error}"))
}

/// A store failure as the answer to a request, like the API's own mapping
/// of store errors: database, migration and stored-data failures are
/// internal (their text is logged, never sent).
fn request_store_error(error: StoreError) -> RequestError {
    match error {
        StoreError::NotFound(id) => RequestError::NotFound(format!("work item {id} not found")),
        StoreError::Conflict(message) | StoreError::Duplicate(message) => {
            RequestError::Conflict(message)
        }
        StoreError::LeaseLost(id) => {
            RequestError::Conflict(format!("work item {id} is being processed; try again"))
        }
        other @ (StoreError::Corrupt(_) | StoreError::Database(_) | StoreError::Migrate(_)) => {
            RequestError::Internal(format!("store: {other}"))
        }
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
        dims::decide(view)
    }

    async fn execute(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        exec::execute(self, action, view).await
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
            outcome: upserted.outcome.into(),
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
                permission: wq_core::Permission::Retry,
            },
            CommandSpec {
                name: "merge",
                permission: wq_core::Permission::Merge,
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

/// The body of `POST /api/v1/work-items/{id}/merge`; both fields optional.
#[derive(Debug, Default)]
struct ManualMerge {
    /// `merge`, `squash` or `rebase`; else `mr.merge_method`, else the
    /// forge's project setting.
    merge_method: Option<wq_forge::MergeMethod>,
    /// When given, the forge refuses to merge any other head (409).
    expected_head_sha: Option<String>,
}

impl ManualMerge {
    /// The body, or 422 naming the field that is wrong.
    fn parse(body: serde_json::Value) -> Result<Self, RequestError> {
        let invalid = |field: &str, message: String| {
            RequestError::Invalid(vec![FieldError::new(field, message)])
        };
        let fields = match body {
            serde_json::Value::Null => return Ok(Self::default()),
            serde_json::Value::Object(fields) => fields,
            _ => return Err(invalid("body", "must be a JSON object".into())),
        };
        let mut request = Self::default();
        for (name, value) in fields {
            match name.as_str() {
                "merge_method" => {
                    request.merge_method = serde_json::from_value(value).map_err(|_| {
                        invalid(
                            "merge_method",
                            "must be one of merge, squash, rebase".into(),
                        )
                    })?;
                }
                "expected_head_sha" => {
                    request.expected_head_sha = serde_json::from_value(value)
                        .map_err(|_| invalid("expected_head_sha", "must be a string".into()))?;
                }
                other => {
                    return Err(invalid(
                        other,
                        "unknown field (known: merge_method, expected_head_sha)".into(),
                    ));
                }
            }
        }
        Ok(request)
    }
}

/// The event a successful manual merge stores: the item reads the outcome
/// back (merged → completed, queued → the queue entry) at once.
pub const MANUAL_MERGE_EVENT: &str = "mr.manual_merge";

impl MrType {
    /// `POST /api/v1/work-items/{id}/merge`: a person's merge, now, through
    /// the forge (which picks the direct or the queued path). Unlike the
    /// automatic merge it needs no readiness gate of workqueue's and binds
    /// the head only when the caller names one (the forge's own branch
    /// protection still applies). It writes no journal entry: a forge error
    /// changes nothing stored; a success wakes the item to read the result.
    async fn manual_merge(
        &self,
        id: ItemId,
        body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        let request = ManualMerge::parse(body)?;
        if request.expected_head_sha.as_deref().is_some_and(|sha| {
            !matches!(sha.len(), 40 | 64) || !sha.bytes().all(|b| b.is_ascii_hexdigit())
        }) {
            return Err(RequestError::Invalid(vec![FieldError::new(
                "expected_head_sha",
                "must be a full commit SHA (40 or 64 hexadecimal digits)",
            )]));
        }
        let details = self.active_details(id, "be merged").await?;
        let Some(number) = details.mr_number else {
            return Err(RequestError::Conflict(
                "the merge request is not created yet".into(),
            ));
        };
        let forge = self.forges.get(&details.spec.forge).ok_or_else(|| {
            RequestError::Unavailable(format!(
                "forge {:?} is not configured on this instance",
                details.spec.forge
            ))
        })?;
        let outcome = forge
            .merge_change(
                &details.spec.project,
                number,
                &wq_forge::MergeParams {
                    expected_head_sha: request.expected_head_sha.as_deref(),
                    method: request.merge_method.or(self.config.merge_method),
                    commit_message: None,
                },
            )
            .await
            .map_err(|error| {
                tracing::warn!(item = %id, number, %error, caller = caller_identity, "manual merge refused by the forge");
                let message = format!("the forge did not merge: {}", error.message);
                match error.kind {
                    wq_forge::ForgeErrorKind::Conflict => RequestError::Conflict(message),
                    wq_forge::ForgeErrorKind::Rejected | wq_forge::ForgeErrorKind::Invalid => {
                        RequestError::BadRequest(message)
                    }
                    _ => RequestError::Upstream(message),
                }
            })?;
        tracing::info!(item = %id, number, outcome = outcome.as_str(), caller = caller_identity, "manual merge");
        let recorded = match self
            .items
            .event_insert(wq_store::NewEvent {
                item_id: id,
                event_type: MANUAL_MERGE_EVENT.to_owned(),
                body: serde_json::json!({ "outcome": outcome.as_str(), "caller": caller_identity }),
                now: self.clock.now(),
            })
            .await
        {
            Ok(_) => true,
            Err(error) => {
                // The merge happened; the webhook or the next reconcile reads it.
                tracing::warn!(item = %id, %error, "manual merge not recorded as an event");
                false
            }
        };
        Ok(CommandReply {
            status: wq_core::CommandStatus::Done,
            body: serde_json::json!({ "status": outcome.as_str() }),
            // The stored event is for the item to read now.
            wake: recorded,
        })
    }

    /// The details of an active item, for a command that only active items
    /// take: 404 for an unknown item, 409 naming the phase otherwise.
    async fn active_details(&self, id: ItemId, what: &str) -> Result<MrDetails, RequestError> {
        let item = self
            .items
            .item_get(id)
            .await
            .map_err(request_store_error)?
            .ok_or_else(|| RequestError::NotFound(format!("work item {id} not found")))?;
        if item.phase != Phase::Active {
            return Err(RequestError::Conflict(format!(
                "work item {id} is {}; only active items can {what}",
                item.phase.as_str()
            )));
        }
        self.store
            .get(id)
            .await
            .map_err(request_store_error)?
            .ok_or_else(|| RequestError::NotFound(format!("work item {id} has no mr details")))
    }

    /// `POST /api/v1/work-items/{id}/retry-merge`: the explicit one-shot
    /// retry of a failed (or expired in-flight) automatic merge attempt.
    async fn retry_merge(&self, id: ItemId) -> Result<CommandReply, RequestError> {
        let now = self.clock.now();
        let details = self.active_details(id, "retry a merge").await?;
        let deadline = Self::seconds(self.config.merge_attempt_deadline_seconds);
        let cutoff = now - deadline;
        match details.journal.result {
            None => {
                return Err(RequestError::Conflict(
                    "no merge attempt has been made; nothing to retry".into(),
                ));
            }
            Some(MergeResult::Accepted) => {
                return Err(RequestError::Conflict(
                    "the last merge attempt was accepted; nothing to retry".into(),
                ));
            }
            Some(MergeResult::InFlight)
                if details.journal.attempt_at.is_none_or(|at| at >= cutoff) =>
            {
                return Err(RequestError::Conflict(
                    "a merge attempt is in flight; retry is refused until it fails or expires"
                        .into(),
                ));
            }
            _ => {}
        }
        if !self
            .store
            .authorize_merge_retry(id, now, cutoff)
            .await
            .map_err(request_store_error)?
        {
            return Err(RequestError::Conflict(
                "the merge attempt changed meanwhile; nothing to retry".into(),
            ));
        }
        tracing::info!(item = %id, "merge retry authorized");
        Ok(CommandReply {
            status: wq_core::CommandStatus::Accepted,
            body: serde_json::json!({
                "status": "accepted",
                "message": "one new merge evaluation is authorized; every gate is still checked",
            }),
            wake: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_are_internal_and_keep_their_detail_for_the_log() {
        let database = request_store_error(StoreError::Database(sqlx::Error::Protocol(
            "relation \"mr_details\" does not exist".into(),
        )));
        assert!(
            matches!(&database, RequestError::Internal(detail) if detail.contains("mr_details")),
            "{database:?}"
        );
        let corrupt = request_store_error(StoreError::Corrupt("bad spec json".into()));
        assert!(
            matches!(&corrupt, RequestError::Internal(detail) if detail.contains("bad spec json")),
            "{corrupt:?}"
        );
        let id = ItemId::new_v7();
        assert_eq!(
            request_store_error(StoreError::NotFound(id)),
            RequestError::NotFound(format!("work item {id} not found"))
        );
        assert_eq!(
            request_store_error(StoreError::Duplicate("taken".into())),
            RequestError::Conflict("taken".into())
        );
        assert!(matches!(
            request_store_error(StoreError::LeaseLost(id)),
            RequestError::Conflict(_)
        ));
    }
}
