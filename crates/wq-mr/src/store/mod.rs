//! The `mr` type's own store: the `mr_details` table on both backends, its
//! migrations, and the transactions that touch it together with the generic
//! tables (through `wq-store`'s connection-level building blocks). Each
//! operation is written once (`backend`); `sqlite` and `postgres` hold only
//! what differs: the column codec, the transaction door and the upsert's
//! locking. One `.sql` file per statement: under `store/sql/` when both
//! backends run the same text (the portable subset: `$n` parameters, no
//! `IS DISTINCT FROM`, no backend functions), else under `store/postgres/`.

mod backend;
mod postgres;
mod sqlite;

use std::sync::Arc;

use time::OffsetDateTime;
use wq_core::{ItemId, LeaseEpoch, Phase};
use wq_forge::QueueEntry;
use wq_store::{Backend, Store, StoreError, StoreResult};

use self::backend::MrBackend;
use crate::spec::MrSpec;

/// The pending event a submission stores with its change, so a loop that is
/// running cannot park over it (DDR-34) and an executor outcome in flight
/// cannot overwrite the change's dimensions.
pub const SUBMISSION_EVENT: &str = "mr.submission";
/// The event the explicit merge retry stores.
pub const RETRY_MERGE_EVENT: &str = "mr.retry_merge";

/// What an upsert did (DDR-40).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertOutcome {
    Created,
    Unchanged,
    /// `content`: the file actions changed (a new commit is needed), not only
    /// the metadata.
    Updated {
        content: bool,
    },
    Retried,
    /// Nothing written: the live item was submitted by another identity and
    /// the caller is no admin (issue #12, "one owner per live item").
    NotOwner,
}

impl UpsertOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Unchanged => "unchanged",
            Self::Updated { .. } => "updated",
            Self::Retried => "retried",
            Self::NotOwner => "not_owner",
        }
    }
}

impl From<UpsertOutcome> for wq_core::SubmitOutcome {
    fn from(outcome: UpsertOutcome) -> Self {
        match outcome {
            UpsertOutcome::Created => Self::Created,
            UpsertOutcome::Unchanged => Self::Unchanged,
            UpsertOutcome::Updated { .. } => Self::Updated,
            UpsertOutcome::Retried => Self::Retried,
            UpsertOutcome::NotOwner => Self::Other(outcome.as_str()),
        }
    }
}

/// Whether a submission that would change the live item (`outcome`) is
/// refused: an update or retry by an identity other than the item's
/// submitter, unless the caller is an admin. An unchanged resubmission
/// changes nothing and is answered.
fn refused_to(outcome: UpsertOutcome, owner: Option<&str>, caller: &str, admin: bool) -> bool {
    outcome != UpsertOutcome::Unchanged && !admin && owner != Some(caller)
}

/// One accepted submission of an item (`mr_submissions`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SubmissionRecord {
    pub generation: i64,
    pub content_hash: String,
    /// `created`, `updated`, `unchanged` or `retried`.
    pub outcome: String,
    pub caller_identity: String,
    #[serde(with = "time::serde::rfc3339")]
    pub submitted_at: OffsetDateTime,
}

/// What the store knows about a branch head the forge reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchOwnership {
    /// workqueue pushed this head on the item's branch line.
    pub pushed: bool,
    /// The item has a push whose result was not recorded (a crash between
    /// the push and its record).
    pub intent_pending: bool,
}

/// The result of [`MrStore::upsert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    pub id: ItemId,
    pub outcome: UpsertOutcome,
}

/// One upsert.
#[derive(Debug, Clone, Copy)]
pub struct UpsertInput<'a> {
    pub spec: &'a MrSpec,
    pub content_hash: &'a str,
    pub metadata_hash: &'a str,
    pub caller_identity: &'a str,
    /// The caller holds `admin` on the item's scope: it may update or retry
    /// another identity's live item.
    pub caller_is_admin: bool,
    pub now: OffsetDateTime,
}

/// What resubmitting means for the live item (DDR-40), from its phase and
/// its stored `[content hash, metadata hash, target branch]` against the
/// submission's: a failed item is retried; otherwise all three the same is
/// unchanged, anything else an update (of content when the commit must be
/// rebuilt: new files or a new target, since the commit is built on the
/// target branch).
fn classify(phase: Phase, stored: [&str; 3], submitted: [&str; 3]) -> UpsertOutcome {
    let [content, metadata, target] = stored;
    let same_content = content == submitted[0] && target == submitted[2];
    let same_metadata = metadata == submitted[1];
    match phase {
        Phase::Failed => UpsertOutcome::Retried,
        _ if same_content && same_metadata => UpsertOutcome::Unchanged,
        _ => UpsertOutcome::Updated {
            content: !same_content,
        },
    }
}

/// `last_merge_result` of the merge-attempt journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeResult {
    InFlight,
    Failed,
    Accepted,
}

impl MergeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Failed => "failed",
            Self::Accepted => "accepted",
        }
    }

    fn parse(text: &str) -> StoreResult<Self> {
        match text {
            "in_flight" => Ok(Self::InFlight),
            "failed" => Ok(Self::Failed),
            "accepted" => Ok(Self::Accepted),
            other => Err(StoreError::Corrupt(format!(
                "mr_details.last_merge_result: {other:?}"
            ))),
        }
    }
}

/// The merge-attempt journal (GitHub merge queue design, "Automatic merge").
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct MergeJournal {
    pub signature: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub attempt_at: Option<OffsetDateTime>,
    pub queue_head_sha: Option<String>,
    pub result: Option<MergeResult>,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub retry_authorized: bool,
    /// Transient answers (5xx, 429, timeout) to the merge call for the
    /// current signature.
    pub transient_failures: i64,
    /// When the next automatic call after a transient answer is due; `None`
    /// when none is (a `failed` attempt then waits for `retry-merge`).
    #[serde(with = "time::serde::rfc3339::option")]
    pub retry_at: Option<OffsetDateTime>,
}

/// One item the merge queue sync looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueWatch {
    pub id: ItemId,
    pub project: String,
    pub number: u64,
    /// The stored queue entry.
    pub entry: Option<QueueEntry>,
}

/// One `mr_details` row.
#[derive(Debug, Clone, PartialEq)]
pub struct MrDetails {
    pub id: ItemId,
    pub spec: MrSpec,
    pub generation: i64,
    pub content_hash: String,
    pub metadata_hash: String,
    pub mr_number: Option<u64>,
    pub mr_url: Option<String>,
    pub head_sha: Option<String>,
    pub head_pipeline_id: Option<u64>,
    pub pushed_content_hash: Option<String>,
    /// The stored queue entry; `None` when not queued.
    pub queue: Option<QueueEntry>,
    pub journal: MergeJournal,
    /// workqueue opened the recorded change request.
    pub mr_created: bool,
    /// When a push started whose head is not recorded yet.
    pub push_intent_at: Option<OffsetDateTime>,
    /// The labels workqueue last applied to the recorded change request
    /// (`None`: unknown, so none is removed).
    pub applied_labels: Option<Vec<String>>,
    /// The target branch the pushed head was built on.
    pub pushed_target_branch: Option<String>,
    /// The change request a status note post started on (its note id may
    /// not have been recorded): the note is looked for there before
    /// another is posted.
    pub note_intent: Option<u64>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// `ensure_mr`'s change request, to record.
#[derive(Debug, Clone, Copy)]
pub struct RecordedChange<'a> {
    pub number: u64,
    pub url: &'a str,
    pub head_sha: &'a str,
    pub pushed_content_hash: &'a str,
    /// The target branch the head was built on.
    pub target_branch: &'a str,
    /// The labels workqueue applied (and may remove later).
    pub labels: &'a [String],
    /// workqueue opened it (or recognised it as its own after a crash).
    pub created: bool,
    pub now: OffsetDateTime,
}

/// What one read of the change request saw, to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation<'a> {
    pub head_sha: Option<&'a str>,
    pub pipeline_id: Option<u64>,
    /// Already resolved against the stored entry (preserved when the read
    /// could not see the queue).
    pub queue: Option<&'a QueueEntry>,
    pub url: Option<&'a str>,
}

/// How a webhook finds its item.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    Number(u64),
    Pipeline(u64),
    Branch(&'a str),
    /// The recorded head commit (a GitHub Actions job names its commit).
    HeadSha(&'a str),
}

fn unsigned(value: Option<i64>, column: &str) -> StoreResult<Option<u64>> {
    value
        .map(|v| {
            u64::try_from(v)
                .map_err(|_| StoreError::Corrupt(format!("mr_details.{column}: negative {v}")))
        })
        .transpose()
}

fn signed(value: Option<u64>) -> Option<i64> {
    value.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// A JSON column decoded into its type.
fn from_json<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    column: &str,
) -> StoreResult<T> {
    serde_json::from_value(value)
        .map_err(|e| StoreError::Corrupt(format!("mr_details.{column}: {e}")))
}

/// The stored queue entry; an empty state is none.
fn queue_entry(
    state: String,
    position: Option<i64>,
    eta_seconds: Option<i64>,
) -> Option<QueueEntry> {
    (!state.is_empty()).then_some(QueueEntry {
        state,
        position,
        eta_seconds,
    })
}

fn json_of<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("plain data serializes")
}

/// The `mr` type's store over whichever backend the service runs.
#[derive(Debug, Clone)]
pub struct MrStore {
    backend: Arc<dyn MrBackend>,
}

/// How often a lost concurrent-insert race is retried (DDR-40).
const UPSERT_ATTEMPTS: usize = 5;

impl MrStore {
    pub fn new(store: &dyn Store) -> Self {
        let backend: Arc<dyn MrBackend> = match store.handle() {
            Backend::Sqlite(store) => Arc::new(sqlite::SqliteBackend { store }),
            Backend::Postgres(store) => Arc::new(postgres::PgBackend { store }),
        };
        Self { backend }
    }

    /// Applies this type's migrations (after the generic ones).
    pub async fn migrate(&self) -> StoreResult<()> {
        self.backend.migrate().await
    }

    /// Creates or updates the live item for the submission's branch
    /// (DDR-40). A concurrent insert that loses the unique-index race is
    /// retried: the winner is then visible and the right outcome is taken.
    pub async fn upsert(&self, input: UpsertInput<'_>) -> StoreResult<Upserted> {
        let mut last = None;
        for _ in 0..UPSERT_ATTEMPTS {
            match self.backend.upsert(&input).await {
                Err(StoreError::Duplicate(message)) => {
                    tracing::debug!(%message, "mr upsert lost an insert race; retrying");
                    last = Some(StoreError::Duplicate(message));
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Conflict("upsert did not converge".into())))
    }

    pub async fn get(&self, id: ItemId) -> StoreResult<Option<MrDetails>> {
        self.backend.get(id).await
    }

    /// The active item a webhook is about (DDR-32: only active items).
    pub async fn find_active(
        &self,
        forge: &str,
        project: &str,
        lookup: Lookup<'_>,
    ) -> StoreResult<Option<ItemId>> {
        self.backend.find_active(forge, project, lookup).await
    }

    /// The merge queue sync's work list on `forge`: active items whose
    /// attempt is in flight or accepted, or that were last seen queued, in
    /// `(project, number)` order; one page of at most `limit` after the
    /// item `after` (the last of the previous page).
    pub async fn queue_watch(
        &self,
        forge: &str,
        after: Option<&QueueWatch>,
        limit: u32,
    ) -> StoreResult<Vec<QueueWatch>> {
        self.backend
            .queue_watch(
                forge,
                after.map(|item| (item.project.as_str(), item.number)),
                limit,
            )
            .await
    }

    /// `ensure_mr`'s result: the change request and the head it pushed;
    /// `created` when workqueue opened it.
    pub async fn record_change(&self, id: ItemId, change: &RecordedChange<'_>) -> StoreResult<()> {
        self.backend.record_change(id, change).await
    }

    /// Marks a push about to leave (cleared by [`MrStore::record_push`]):
    /// after a crash before the record, the branch's unknown head is still
    /// recognised as this item's. Only under the caller's run's `lease`
    /// (its epoch, unexpired at `now`); `false`: the run no longer holds
    /// the item, and must not push.
    pub async fn mark_push_intent(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.backend.mark_push_intent(id, lease, now).await
    }

    /// Withdraws the push intent after the forge refused the push outright
    /// (nothing was written), so a branch someone else creates later is not
    /// taken for this item's.
    pub async fn clear_push_intent(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()> {
        self.backend.clear_push_intent(id, now).await
    }

    /// Marks a status note post about to leave on change request `number`:
    /// after a crash before its id is recorded, the note is looked for
    /// before another is posted. Only under the caller's run's `lease` (its
    /// epoch, unexpired at `now`); `false`: the run no longer holds the
    /// item, and must not post.
    pub async fn mark_note_intent(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        number: u64,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.backend.mark_note_intent(id, lease, number, now).await
    }

    /// Whether `head` on the item's branch is workqueue's (pushed on the
    /// branch line) and whether the item has an unrecorded push.
    pub async fn branch_ownership(&self, id: ItemId, head: &str) -> StoreResult<BranchOwnership> {
        self.backend.branch_ownership(id, head).await
    }

    /// Whether workqueue opened change request `number` on the item's
    /// branch line (this or an earlier generation).
    pub async fn change_created(&self, id: ItemId, number: u64) -> StoreResult<bool> {
        self.backend.change_created(id, number).await
    }

    /// Whether the run that claimed `id` as `lease` still holds it at
    /// `now` (its claim is the item's last, and unexpired): asked before a
    /// forge write that no intent fences (a CI job's retry), so that a run
    /// that lost the item leaves the write to the run that holds it.
    pub async fn holds(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.backend.holds(id, lease, now).await
    }

    /// The item's accepted submissions, oldest first.
    pub async fn submissions(&self, id: ItemId) -> StoreResult<Vec<SubmissionRecord>> {
        self.backend.submissions(id).await
    }

    /// `ensure_mr`'s commit: the head it produced for this content (`pushed`:
    /// content hash, target branch it was built on), and the
    /// head as workqueue's on the branch line; settles the push intent.
    pub async fn record_push(
        &self,
        id: ItemId,
        head_sha: &str,
        pushed: (&str, &str),
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.backend.record_push(id, head_sha, pushed, now).await
    }

    /// A CI job the forge retried (`forge.job_retried`, `metadata`: the job
    /// and the forge's answer), recorded in its own transaction right
    /// after the call, unfenced: the retry happened whoever holds the item.
    pub async fn record_job_retried(
        &self,
        id: ItemId,
        metadata: serde_json::Value,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.backend.record_job_retried(id, metadata, now).await
    }

    /// Stores what a read of the change request saw.
    pub async fn observe(
        &self,
        id: ItemId,
        observation: &Observation<'_>,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.backend.observe(id, observation, now).await
    }

    /// Reserves an `in_flight` attempt for `signature`, durably, before the
    /// merge call; consumes a retry authorization. `false`: not reserved
    /// (an attempt is in flight, or this signature was tried and no retry
    /// is authorized, or the caller's run no longer holds the item under
    /// `lease` at `now`), so the caller must not call the forge.
    /// `head_sha` is the head the merge call will be bound to (recorded in
    /// the audit record of the reservation).
    pub async fn reserve_merge(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        signature: &str,
        head_sha: &str,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.backend
            .reserve_merge(id, lease, signature, head_sha, now)
            .await
    }

    /// Records an attempt's outcome. `accepted` clears only an `auto_merge`
    /// error; `failed` stores `error` with `error_kind`.
    pub async fn merge_result(
        &self,
        id: ItemId,
        result: MergeResult,
        queue_head_sha: Option<&str>,
        error: Option<(&str, &str)>,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.backend
            .merge_result(id, result, queue_head_sha, error, now)
            .await
    }

    /// A transient answer to the merge call after a re-read proved it
    /// neither merged nor queued: the `in_flight` attempt becomes `failed`
    /// with `error`, the transient count grows, and `retry_at` is when the
    /// next automatic call is due (`None`: the budget is spent).
    pub async fn merge_transient(
        &self,
        id: ItemId,
        error: &str,
        retry_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.backend.merge_transient(id, error, retry_at, now).await
    }

    /// The item's change request merged, with `merged_head` as its head
    /// when known: in one transaction, the item ends `completed` (only
    /// while it is active under `lease`, the caller's run's claim: a run
    /// that lost its item writes nothing, even while another run holds it)
    /// and, when its latest submitted state is not what merged
    /// (read in that transaction: the content or target branch other than
    /// what the push of the merged head carried, or, for a head that is no
    /// push of the branch line's, other than the last push's), a new
    /// generation of the branch line takes that state, owned by `caller`,
    /// with a `created` row in its submission history. So content pushed
    /// after a merge queue or train merged the previous head is not lost
    /// with the finished item. PostgreSQL takes the branch lock and the
    /// item's lock first, as the upsert does, so a submission sees the old
    /// live item or the new one, never both, and an update committed while
    /// the run that saw the merge was under way is not lost. `None`: no
    /// successor (nothing waited, or nothing was written).
    pub async fn hand_over(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        merged_head: Option<&str>,
        caller: Option<&str>,
        now: OffsetDateTime,
    ) -> StoreResult<Option<ItemId>> {
        self.backend
            .hand_over(
                id,
                lease,
                merged_head.map(str::to_owned),
                caller.map(str::to_owned),
                now,
            )
            .await
    }

    /// The explicit one-shot retry: authorizes one new evaluation when the
    /// last attempt failed, or was `in_flight` and started before `cutoff`
    /// (it becomes `failed` first). Stores a pending event in the same
    /// transaction so the item runs. `false` when nothing may be retried.
    pub async fn authorize_merge_retry(
        &self,
        id: ItemId,
        now: OffsetDateTime,
        cutoff: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.backend.authorize_merge_retry(id, now, cutoff).await
    }
}

/// The idempotency key of a generation (DDR-39).
fn idempotency_key(spec: &MrSpec, generation: i64) -> String {
    format!(
        "mr:{}:{}:{}:{}",
        spec.forge, spec.project, spec.source_branch, generation
    )
}

/// The event body a submission stores with its change.
fn submission_event(outcome: UpsertOutcome) -> serde_json::Value {
    let change = match outcome {
        UpsertOutcome::Updated { content: true } => "content",
        UpsertOutcome::Updated { content: false } => "metadata",
        UpsertOutcome::Retried => "retried",
        UpsertOutcome::Created | UpsertOutcome::Unchanged | UpsertOutcome::NotOwner => "none",
    };
    serde_json::json!({ "change": change })
}

/// The dimensions a submission sets, also carried by its event.
pub fn submission_dimensions(change: &str) -> Vec<wq_core::DimensionUpdate> {
    use wq_core::DimensionUpdate;
    match change {
        "retried" => vec![
            DimensionUpdate::new(crate::dims::NEEDS_MR, true),
            DimensionUpdate::new(crate::dims::NEEDS_RECONCILE, true),
        ],
        // ensure_mr pushes new content (or content for a new target) and
        // converges title, description, labels and target; without a
        // content change it pushes nothing. The status note is redone.
        "content" | "metadata" => vec![
            DimensionUpdate::new(crate::dims::NEEDS_MR, true),
            DimensionUpdate::new(crate::dims::NEEDS_DASHBOARD, true),
            DimensionUpdate::new(crate::dims::NEEDS_RECONCILE, true),
        ],
        _ => Vec::new(),
    }
}

/// The live item's phase and stored content hash, before a resubmission.
fn phase_and(phase: Phase, content_hash: Option<String>) -> serde_json::Value {
    serde_json::json!({"phase": phase.as_str(), "content_hash": content_hash})
}

/// `submission.<outcome>`: who submitted which content (hash, generation)
/// for which branch, and the files by name and size. An unchanged
/// submission names its content and metadata by their hashes alone: both
/// equal the stored ones, so its files and title are those of the chain's
/// last `submission.created` or `.updated` record, and a resubmission
/// (an agent's retry, a poll) does not store them again.
fn submission_audit(
    id: ItemId,
    generation: i64,
    input: &backend::OwnedInput,
    outcome: UpsertOutcome,
    before: Option<serde_json::Value>,
) -> wq_store::audit::NewAudit {
    let spec = &input.spec;
    let unchanged = outcome == UpsertOutcome::Unchanged;
    let phase = if unchanged {
        before
            .as_ref()
            .and_then(|before| before["phase"].as_str())
            .unwrap_or("active")
            .to_owned()
    } else {
        "active".to_owned()
    };
    let mut metadata = serde_json::json!({
        "forge": spec.forge,
        "project": spec.project.as_str(),
        "source_branch": spec.source_branch.as_str(),
        "target_branch": spec.target_branch.as_str(),
        "metadata_hash": input.metadata_hash,
        "caller_is_admin": input.caller_is_admin,
    });
    if !unchanged {
        let files: Vec<serde_json::Value> = spec
            .file_actions
            .iter()
            .map(|action| {
                serde_json::json!({
                    "action": action.op,
                    "path": action.path,
                    "previous_path": action.previous_path,
                    "bytes": action.content.as_ref().map(Vec::len),
                })
            })
            .collect();
        metadata["title"] = spec.title.clone().into();
        metadata["auto_merge"] = spec.automation.auto_merge.into();
        metadata["files"] = files.into();
    }
    wq_store::audit::NewAudit::new(
        id,
        input.now,
        input.caller_identity.clone(),
        format!("submission.{}", outcome.as_str()),
    )
    .states(
        before,
        Some(serde_json::json!({
            "phase": phase,
            "content_hash": input.content_hash,
            "generation": generation,
        })),
    )
    .trigger(serde_json::json!({"source": "api", "action": "submit"}))
    .metadata(metadata)
}
