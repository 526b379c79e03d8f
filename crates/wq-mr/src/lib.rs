//! The `mr` item type: a caller's desired change, owned on a forge until it
//! is merged or closed. ARCHITECTURE.md follows one submission through it.
//!
//! - [`spec`]: the submission schema and its validation (DDR-9).
//! - [`store`]: the `mr_details`, `mr_pushes` and `mr_submissions` tables and
//!   their transactions (DDR-7, DDR-40).
//! - [`dims`]: the names of dimensions and actions ([`MrAction`]).
//! - [`decider`]: the next action (DDR-45, DDR-48).
//! - `actions`: an action to its executor; the status note follows every
//!   step's outcome.
//! - `exec`: the executors `cancel_mr`, `reopen_mr`, `ensure_mr`,
//!   `check_empty_diff`, `post_dashboard_note`, `reconcile_mr` (DDR-15,
//!   DDR-43, DDR-46).
//! - [`ci_retry`]: failed CI jobs judged by the herder and retried
//!   (`retry_ci_jobs`, DDR-47).
//! - `dashboard`: the status note's text, and when to edit it.
//! - [`merge`]: readiness gates, signature and the merge-attempt journal.
//! - `events`: the event handler (DDR-33, DDR-37, DDR-38).
//! - `commands`: the `merge`, `retry-merge`, `cancel` and `refresh` item
//!   commands.
//! - `status`: the item at a glance (`ItemType::status`) and its page for
//!   people (`ItemType::sections`), from stored state.
//! - `queue_sync`: the batched merge queue read ([`MrType::sync_queues`]),
//!   the type's periodic task [`QUEUE_SYNC_TASK`].
//! - [`webhook`]: the webhook receivers that resolve deliveries to items.
//! - `errors`: forge and store failures as executor and request errors.
//!
//! The modules form a graph without cycles: below this root, no two import
//! each other.
//!
//! # Submission
//!
//! A submission (`POST /api/v1/work-items`, `item_type: "mr"`) is parsed and
//! validated by [`spec`] before anything is written: paths (no absolute,
//! `..`, `.git`, NUL; a blocklist of CI and repository-control files),
//! sizes, binary content, secrets-looking content, branch names by git's
//! rules, a source branch that is neither the target nor protected.
//!
//! **Project spelling.** The project is replaced by the forge's own path
//! (`Forge::project_path`, read once per forge and project, whatever the
//! case, and cached in [`MrType`]): an unknown project is a 422 naming
//! `project`, a forge that cannot answer a 503. Lookups (upsert,
//! generation, webhooks, ownership) compare the project with `lower()` on
//! both sides, so deliveries and older rows in another case still find
//! their item.
//!
//! **Upsert.** [`MrStore::upsert`] on `(forge, project, source_branch)`
//! among live items (DDR-40) runs in one transaction: the branch is
//! serialised and the live item locked (on PostgreSQL a per-branch
//! advisory lock, then the item's advisory lock and its row `FOR UPDATE`,
//! in `wq_store`'s lock order; on SQLite the write lock). A new item gets
//! generation `max + 1` and the idempotency key
//! `mr:{forge}:{project}:{branch}:{generation}` (DDR-39); a concurrent
//! insert that loses on the partial unique index retries the whole upsert.
//! An update (new content hash, new target branch, or new metadata: title,
//! description, commit message, labels, automation) or a retry writes its
//! dimensions *and* a pending `mr.submission` event in the same
//! transaction, so a running loop can neither park over it nor overwrite it
//! with an older executor outcome (the event re-applies the dimensions
//! after that outcome). An update asks for `ensure_mr` (which pushes only
//! when the content or its target changed), the status note and a
//! reconcile.
//!
//! **One owner per live item.** An update or retry-by-resubmission whose
//! `caller_identity` is not the live item's is refused
//! ([`UpsertOutcome::NotOwner`], 409 `owned_by_another_caller`) unless the
//! caller holds `admin` on the scope; an unchanged resubmission is
//! answered. Every accepted submission
//! (created, updated, unchanged, retried) is a row of `mr_submissions`,
//! written in the upsert's transaction and shown as `detail.submissions`.
//! `retry` of an item cancelled because a person closed its MR needs
//! `admin` ([`ItemType::retry_needs_admin`]).
//!
//! # Tables
//!
//! - `mr_details` (migration 1000 of each backend's `migrations/`): forge,
//!   project, source/target branch, generation, title, description, commit
//!   message, labels, `file_actions` (JSON, content base64), `auto_merge`,
//!   `ci_retry`, `content_hash`, `metadata_hash`; what the forge holds
//!   (`mr_number`, `mr_url`, `head_sha`, `head_pipeline_id`,
//!   `pushed_content_hash`); the last authoritative queue observation
//!   (`merge_queue_state`, `_position`, `_eta_seconds`); the merge-attempt
//!   journal (`last_merge_signature`, `last_merge_attempt_at`,
//!   `last_queue_attempt_head_sha`, `last_merge_result`, `last_error_kind`,
//!   `last_error`, `merge_retry_authorized`, and since migration 1003
//!   `merge_transient_count`, `merge_retry_at`); ownership: `mr_created`
//!   (workqueue opened the recorded MR), `push_intent_at` (a push whose
//!   head is not recorded yet); what was applied (migration 1003):
//!   `applied_labels` (the labels workqueue set, the only ones it removes),
//!   `pushed_target_branch` (the target the pushed head was built on);
//!   the status note's post (migration 1004): `note_intent_number` (the
//!   change request a post started on).
//!   Indexed on `(forge, lower(project), ...)` for the upsert lookup and
//!   the webhook lookups (by branch, number, pipeline, and since migration
//!   1006 head commit); the lookups read those rows first, then their
//!   items by id.
//! - `mr_pushes` (migration 1002): every head workqueue pushed, primary key
//!   `(forge, project, source_branch, head_sha)`, with `work_item_id` and
//!   `pushed_at`; since migration 1005 the `content_hash` and
//!   `target_branch` it carried (what merged, when that head merges).
//! - `mr_submissions` (migration 1002): the submission history:
//!   `work_item_id`, `generation`, `content_hash`, `outcome`,
//!   `caller_identity`, `submitted_at`. An unchanged submission's row and
//!   its audit record are written by one call: `mr_record_unchanged`
//!   (migration 1007) on PostgreSQL, one query of both statements on
//!   SQLite (where a created submission's are too).
//!
//! # Dimensions and the decider
//!
//! In priority order (absent = needed, except `needs_cancel`, which exists
//! once a caller asked for a cancel, `needs_reopen`, which exists once the
//! item was retried, and `needs_ci_retry`, which exists once a failed job
//! was reported):
//!
//! | dimension | action | what it does |
//! |---|---|---|
//! | `needs_cancel` | `cancel_mr` | the `cancel` command (`admin`, or `submit` for the item's submitter) stored an `mr.cancel` event; applied, it asks for this before anything else, so no push, merge or retry follows. The status note is edited to say who cancelled it and why, the MR closed (only workqueue's; a merged one completes the item instead), the item cancelled. After a crash the note (same text) and the closed MR are found and not written again |
//! | `needs_reopen` | `reopen_mr` | a retry of the item (`POST .../retry`) stored an `mr.retried` event in its transaction; applied, it asks for this after a cancel and before everything else. A recorded change request that is closed (by a cancel, or a person: retrying that needs `admin`) is reopened and a reconcile asked for; an open or merged one, or none recorded, is left to the usual steps. After a crash the change request is found open and nothing is written again |
//! | `needs_mr` | `ensure_mr` | reads the recorded MR first: merged → the item completes and content that did not merge becomes the next generation (below), closed → cancelled, never a second MR; else, when an earlier attempt may have opened one (a push recorded or under way), finds the open MR by source branch and checks it is workqueue's; when the content (or its target) is not the recorded head: checks the branch head is workqueue's (below), refuses a branch the forge protects, marks a push intent (only under the run's own lease: a run paused past it, or overtaken by another claim, pushes nothing), commits the file actions (create the branch from the target, or force it), records the pushed head at once. A first push (nothing recorded or under way) looks nothing up: on a forge that refuses to create an existing branch before writing anything (GitLab) it creates the branch without reading it, and only that refusal reads the branch (and the MR open on it) before anything is written over it. The empty-diff check (DDR-43) takes the push's answer where the forge tells (GitHub: the new tree is the target's; GitLab: a nonzero `stats` count means not empty), else compares target and head (`straight=true`: identical trees mean nothing to merge). Creates the MR (another open on the branch, the forge's conflict answer, is looked up: workqueue's is taken up, anyone else's refuses the item) or converges it (title, description, target branch, labels incl. `managed-by::workqueue`: added, and only those workqueue applied earlier removed, names compared as the forge compares them, `Forge::label_case`). The creation's answer is the MR's first observation: head, pipeline and its gates (the review as not checked yet, `unread_gates`), and the reconcile waits for a webhook or the busy interval. A created MR's first status note is posted here, after it is recorded, with the labels where the forge's creation does not take them (`Forge::labels_on_creation`; GitHub adds them by id with the note in one GraphQL request, `Forge::open_note`); a failed note fails the run, and the next one converges the labels and leaves the note to `post_dashboard_note` |
//! | `needs_empty_check` | `check_empty_diff` | every 30 min (`pending_until`): an MR whose target already has its changes is closed, the item cancelled with the reason |
//! | `needs_dashboard` | `post_dashboard_note` | one status note, found again by a hidden marker *and* its author (the token's forge user, so a person's comment quoting the marker is never edited) after a crash; edited in place when its text changes: the state in one line, every gate met or not (or not checked yet), the last merge attempt, the CI retry decisions (which job was retried by which matcher, which was not and why), the item's link. The detail keeps the note id, its text's hash and when it was written. The first note on an MR (posted by `ensure_mr` for an MR it created) is posted without listing the notes: `note_intent_number` is stored before the post (only under the run's own lease, as the push intent), so a run after a crash that lost the note's id looks for it first |
//! | `needs_ci_retry` | `retry_ci_jobs` | see [`ci_retry`] and "CI retry" below |
//! | `needs_reconcile` | `reconcile_mr` | one MR read: merged → completed, closed → cancelled, head/pipeline/queue recorded, title and description drift corrected, and the merge when every gate holds; re-armed every 30 min, every 60 s while CI runs or the merge is queued |
//!
//! **Merged before an update was seen.** New content may arrive after the
//! recorded MR merged but before any read saw it, or a merge queue or train
//! may merge the MR's head while `ensure_mr` pushes the update (the push
//! lands on the branch of a merged MR). `ensure_mr` reads the recorded MR
//! before anything else, and every read that finds it merged ends the
//! item: it completes (an attempt in the journal becomes `accepted`), and
//! when its latest content (or target) is not what merged (what the push of
//! the merged head carried, from `mr_pushes`; for a head that is no push of
//! the line's, what was pushed last), [`MrStore::hand_over`] writes in one
//! transaction the item's `completed` phase (only while it is active under
//! the run's own lease, the epoch its view names, via `wq_store`'s
//! `finish_leased`) and a new item of generation `max + 1` for the same
//! branch line, with the latest submitted state, the same submitter and a
//! `created` submission row; on PostgreSQL under the
//! upsert's branch and item locks, so a submission never sees two live
//! items. The outcome's `wake` asks the engine to run the new item. A MR a
//! person closed cancels the item ([`CLOSED_ON_FORGE`]) instead.
//!
//! # Ownership
//!
//! workqueue writes only over what it made. A branch head is workqueue's
//! when it is in `mr_pushes` for the branch line (forge, project, source
//! branch: any generation's push counts), or (a crash between the push and
//! its record) while this item's `push_intent_at` is set: the intent is
//! stored before `commit_files` and cleared by `record_push`, which also
//! adds the head to `mr_pushes` in the same transaction. The head the
//! reconcile observed does not count: a person's commit on workqueue's
//! branch is the person's. An open MR is workqueue's when it is the item's
//! recorded one, when `mr_details.mr_created` is set for that number on the
//! branch line, or (a creation whose record was lost) when its author is
//! the token's forge user (`Forge::current_user`, cached by the client) and
//! it carries the managed label. Anything else fails the item with
//! `branch_not_managed: source branch "..." ...` and the `needs_mr` detail
//! `{"error_kind": "branch_not_managed", "branch": ...}`, before any forge
//! write over it; the forge's protection (`Forge::branch_protected`, and
//! before a push that creates the branch `Forge::protects_new_branch`)
//! refuses the same way with `branch_protected` before every push.
//! `mr.adopt_existing_branches: true` restores adoption of strangers'
//! branches and MRs (protection still refuses).
//!
//! A first push creates the branch without a read of its own: GitLab
//! refuses to create a branch that exists (400, before writing anything),
//! and so does GitHub's client (the query that reads the base reads the
//! branch too, and its creation refuses an existing one); that refusal
//! reads the branch and the change request open on it before any force
//! push. One case is seen only after the push: a person's MR still open on
//! a source branch that was deleted (GitLab keeps it open; GitHub closes a
//! pull request whose head branch is deleted). The push creates the branch
//! again (nothing of anyone's is written over, but the person's MR now
//! shows workqueue's commit), the creation's 409 finds the MR, and the item
//! fails `branch_not_managed` with the branch left as pushed.
//!
//! # Merging
//!
//! The merge goes through the attempt journal in `mr_details` (the GitHub
//! merge queue design, "Automatic merge"; see [`merge`]): gates (open, not
//! draft, head known, CI passed, approved by the forge's rules, the review
//! gate, mergeable, no unresolved threads, `auto_merge` on); the readiness
//! signature (SHA-256 over every gate input, the approvers, the review rule
//! and the MR's lifecycle state); an unchanged signature whose
//! attempt is `in_flight`, `failed` or `accepted` is not tried again unless
//! `retry-merge` authorized one evaluation. `in_flight` is stored before
//! the call, and only if no attempt is in flight and the signature is new
//! or a retry was authorized (a worker whose reading is stale gets no
//! reservation and makes no call), and only under the run's own lease
//! (the lease epoch of its view, unexpired: a run paused past its lease,
//! or whose item another run claimed since, makes no call either); the
//! call carries the checked head SHA
//! (the forge refuses another head with 409); `accepted` (merged or queued
//! in a merge train or merge queue) or `failed` with an `auto_merge` error
//! after. An `in_flight` found by a later run (a crash) is never
//! resubmitted: a queue entry or a merged MR makes it `accepted` (on every
//! path that sees the MR merged), otherwise it becomes `failed` at its
//! deadline and the explicit retry is offered.
//!
//! **Transient answers.** A 5xx, 429 or timeout from the merge call
//! (`ForgeError::is_transient`) may or may not have reached the forge, so
//! the MR is read once more: merged or queued → `accepted`; open at the
//! checked head with the same readiness signature → `failed` with
//! `merge_retry_at` set, and the next reconcile at that time (after
//! `mr.merge_transient_backoff_seconds`, doubled per retry, never before
//! `Retry-After`) reserves and calls again, up to
//! `mr.merge_transient_retries` times; a re-read that fails leaves the
//! attempt `in_flight` (confirmed later or failed at its deadline). A
//! definitive refusal (409 head moved, 405/422 not mergeable), an exhausted
//! budget or another state waits for `retry-merge` (a new state is tried
//! on its own). The count of transient answers is the detail's
//! `merge.transient_failures`, the next call `merge.retry_at`.
//!
//! **Queue sync.** [`MrType::sync_queues`], the periodic task
//! [`QUEUE_SYNC_TASK`] (every `mr.queue_sync_interval_seconds`, on the one
//! replica that leads the task among those that handle `mr`), reads the
//! queue entries of every active item whose attempt is in flight or
//! accepted, or that was last seen queued (all of them, read from the store
//! page by page), in one
//! GraphQL query per repository (aliases, up to 100 per query); an item
//! whose entry appeared, moved or left gets a [`QUEUE_OBSERVED_EVENT`], is
//! handed to the engine at once, and its reconcile applies the rules. An
//! entry confirms an attempt of ours as `accepted`; an `in_flight` attempt
//! is re-read every busy interval until its deadline.
//!
//! **Manual merge.** `POST /api/v1/work-items/{id}/merge` (permission
//! `merge`) merges now through the forge without workqueue's gates (the
//! forge's branch protection applies; `expected_head_sha` binds the head
//! when given); a forge refusal is 409 (head moved), 400 (not mergeable,
//! invalid) or 502, and changes nothing stored; a success stores a
//! `mr.manual_merge` event so the item reads the result at once. It writes
//! no journal entry: the journal is the automatic path's.
//!
//! **Review gate.** `mr.require_review` (default true; per forge, or forge
//! and project, in `mr.review_overrides`, the most specific entry winning)
//! adds the gate `review_by_person`: someone other than the token's forge
//! user ([`wq_forge::Forge::current_user`]) approves, whatever the forge's
//! rules — a caller's change deserves a person's look. With false, the
//! forge's own rules decide alone (gate `approved`: GitHub
//! `reviewDecision` null or `APPROVED` with no request for changes; GitLab
//! no approvals left and not `not_approved`). On GitLab `get_change` reads
//! `GET .../approvals` of an open MR for the approvers and counts, so a new
//! approval changes the signature and the `approved` webhook re-evaluates
//! the merge. The reconcile records the unmet gates, the review gate's name
//! and the forge's merge status in the `needs_reconcile` detail; the item
//! detail names the review gate (`review_gate`).
//!
//! **Status note.** After every step the note the outcome would leave is
//! rendered (`dashboard`); when its hash differs from the one stored in the
//! `needs_dashboard` detail, `needs_dashboard` is asked for, deferred to
//! `mr.note_min_interval_seconds` after the last edit. A step that ends the
//! item (merged, closed, cancelled) writes the final state at once, best
//! effort: a failed edit never stops the end.
//!
//! # Webhooks
//!
//! `/webhooks/gitlab` and `/webhooks/github` are authenticated by the forge
//! client (`wq_forge::gitlab`, `wq_forge::github`), resolved to an *active*
//! item (MR number, or head pipeline id, or source branch for deliveries
//! that arrive before the number is recorded) and stored as
//! [`WEBHOOK_EVENT`](webhook::WEBHOOK_EVENT) pending events. The handler
//! asks for a reconcile for everything (a `merged` one confirms the attempt
//! and completes the item; a `closed` one cancels it only if the read still
//! sees it closed, so a close overtaken by its reopen does nothing). Duplicates cost one read and
//! change nothing twice. A failed job's delivery (resolved by its pipeline,
//! or its branch while a new head pipeline is not recorded yet; a GitHub
//! Actions job, whose change has no head pipeline, by its branch or its
//! commit) is added to
//! `needs_ci_retry` unless the item has `ci_retry: false`, the job is
//! already listed, or its pipeline is older than the recorded head
//! pipeline.
//!
//! # CI retry
//!
//! `retry_ci_jobs` works through the failed jobs the forge's job webhooks
//! reported (GitLab Job Hooks; GitHub `workflow_job` deliveries and failed
//! check runs of the Actions app), kept in the dimension's `jobs` list (one
//! entry per job, each with its state and deciding matcher), through the forge's `CiJobs` capability
//! (`Forge::ci_jobs`: GitLab jobs, GitHub Actions workflow jobs; without it
//! the jobs settle as `error`). It reads the change request's head now: on
//! GitLab its head pipeline (a job of an
//! older pipeline is `superseded`; one of a newer pipeline waits up to
//! 10 min for the forge to show it as the head), on GitHub its head commit
//! (a job of another commit is `superseded`); then each pipeline's (GitHub:
//! workflow run's) job list
//! once (a newer attempt → `already_retried`, no longer failed →
//! `not_failed`), judges each pending job with `wq-herder` (a trace only
//! when a matcher needs one) and retries the due ones, each only while the
//! run still holds the item (`MrStore::holds`, read right before the call;
//! a run that lost it fails transiently and leaves the job to the run that
//! holds it); each retry the forge answered is recorded right after the
//! call (`MrStore::record_job_retried`, its own transaction, unfenced), so
//! it stays on the trail when the run's outcome is refused. A forge error on one
//! job's step is that job's (refused → `error`, transient → tried again in
//! a minute), never the item's; `pending_until` is the earliest
//! `not_before` (`finished_at` + the matcher's delay). The matchers are the
//! `ci_retry:` section of the config (`wq_herder::HerderConfig`; the default
//! set when absent, [`MrType::with_herder`]), compiled at start: a bad
//! regex, unknown action or negative delay stops `serve` and `config check`
//! with the matcher's path (`ci_retry.matchers[0] (name "oom")...`).

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
pub mod metrics;
mod queue_sync;
pub mod spec;
mod status;
pub mod store;
pub mod text;
pub mod webhook;

pub use commands::MANUAL_MERGE_EVENT;
pub use config::{MrConfig, ReviewOverride};
pub use dims::MrAction;
pub use queue_sync::{QUEUE_OBSERVED_EVENT, QUEUE_SYNC_TASK, QueueSync};
pub use spec::ConfigErrors;

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

use crate::errors::store_error;
use crate::spec::{ProjectPath, SubmissionRules};
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
    /// The item with its dimensions and its detail row, as stored; `None`
    /// without a detail row.
    async fn stored_view(
        &self,
        item: &WorkItem,
    ) -> Result<Option<(ItemView, store::MrDetails)>, RequestError> {
        let Some(details) = self.store.get(item.id).await.map_err(RequestError::from)? else {
            return Ok(None);
        };
        let dimensions = self
            .items
            .dimension_list(item.id)
            .await
            .map_err(RequestError::from)?;
        let view = ItemView {
            item: item.clone(),
            dimensions,
            now: self.clock.now(),
            lease: None,
        };
        Ok(Some((view, details)))
    }

    /// Builds the type; refuses a config whose patterns do not compile.
    pub fn new(
        items: Arc<dyn Store>,
        forges: Forges,
        config: MrConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigErrors> {
        let rules = config.compile()?;
        crate::metrics::describe();
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
        // The caller was authorized for the path it sent: only another
        // spelling of that path may replace it, never another project (a
        // forge that answered for a renamed or moved one).
        if path.to_lowercase() != project.to_lowercase() {
            return Err(RequestError::Invalid(vec![FieldError::new(
                "project",
                format!(
                    "forge {forge_name:?} knows {project:?} as another project; submit its current path"
                ),
            )]));
        }
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

    /// Every `mr` action may write to the forge: a push, a merge request
    /// made or edited, a note, a job retried, a merge, a close.
    fn has_outside_effects(&self, action: Action) -> bool {
        action.name.parse::<dims::MrAction>().is_ok()
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

    /// [`spec::submission_schema`] under the configured rules and forges.
    fn submission_schema(&self) -> Option<serde_json::Value> {
        let forges: Vec<&str> = self.forges.names().collect();
        Some(spec::submission_schema(&self.rules, &forges))
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
        let canonical = self
            .canonical_project(&spec.forge, forge.as_ref(), &spec.project)
            .await?;
        // Another spelling of a valid path, but the forge's answer is not
        // trusted to follow the rules the submitted one passed.
        spec.project = ProjectPath::try_from(canonical).map_err(|error| {
            RequestError::Invalid(vec![FieldError::new(
                "project",
                format!(
                    "forge {:?} spells the project as a path that is refused: {error}",
                    spec.forge
                ),
            )])
        })?;
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
            .map_err(RequestError::from)?;
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
        let details = self.store.get(item.id).await.map_err(RequestError::from)?;
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
            .map_err(RequestError::from)?;
        let review = if self.config.requires_review(&d.spec.forge, &d.spec.project) {
            merge::REVIEW_BY_PERSON
        } else {
            merge::APPROVED
        };
        let mut detail = merge::detail_json(&d, review);
        detail["submissions"] = serde_json::json!(submissions);
        Ok(Some(detail))
    }

    /// Reopening an item a person ended by closing its change request needs
    /// `admin`: `retry` alone must not undo a person's decision.
    async fn retry_needs_admin(&self, item: &WorkItem) -> Result<bool, RequestError> {
        Ok(item.phase == Phase::Cancelled && item.error.as_deref() == Some(CLOSED_ON_FORGE))
    }

    /// A retry asks for the item's change request again: one that was
    /// closed is reopened (`reopen_mr`), rather than seen closed and the
    /// item cancelled once more.
    fn retry_event(&self, item: &WorkItem) -> Option<&'static str> {
        let _ = item;
        Some(commands::RETRIED_EVENT)
    }

    async fn status(
        &self,
        item: &WorkItem,
    ) -> Result<Option<wq_core::StatusSummary>, RequestError> {
        let Some((view, details)) = self.stored_view(item).await? else {
            return Ok(None);
        };
        Ok(Some(status::summary(&view, &details)))
    }

    async fn sections(
        &self,
        item: &WorkItem,
    ) -> Result<Vec<wq_core::status::DetailSection>, RequestError> {
        let Some((view, details)) = self.stored_view(item).await? else {
            return Ok(Vec::new());
        };
        let person_review = self
            .config
            .requires_review(&details.spec.forge, &details.spec.project);
        Ok(status::sections(&view, &details, person_review))
    }

    async fn scope(&self, id: ItemId) -> Result<Option<(String, String)>, RequestError> {
        let details = self.store.get(id).await.map_err(RequestError::from)?;
        Ok(details.map(|d| (d.spec.forge, d.spec.project.into_string())))
    }

    fn scoped_by_project(&self) -> bool {
        true
    }

    fn commands(&self) -> &'static [CommandSpec] {
        &[
            CommandSpec {
                name: "retry-merge",
                permission: wq_core::Permission::Retry,
                owner_permission: None,
            },
            CommandSpec {
                name: "merge",
                permission: wq_core::Permission::Merge,
                owner_permission: None,
            },
            // An admin, or the item's submitter with `submit` (which it
            // was submitted with).
            CommandSpec {
                name: "cancel",
                permission: wq_core::Permission::Admin,
                owner_permission: Some(wq_core::Permission::Submit),
            },
            CommandSpec {
                name: "refresh",
                permission: wq_core::Permission::Retry,
                owner_permission: None,
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
            "cancel" => self.cancel(id, body, caller_identity).await,
            "refresh" => self.refresh(id, caller_identity).await,
            other => Err(RequestError::NotFound(format!(
                "item type mr has no command {other:?}"
            ))),
        }
    }
}
