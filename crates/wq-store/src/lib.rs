//! The generic work-queue store: one [`Store`] trait, implemented for SQLite
//! (the embedded default) and PostgreSQL. It owns the `work_items`,
//! `work_item_statuses` and `pending_events` tables and every SQL statement
//! on them; it knows no item type.
//!
//! Errors: every method returns [`StoreError`]; a missing row is `Ok(None)`
//! or [`StoreError::NotFound`] where the caller named an id it expects.
//!
//! Time: callers pass every timestamp (from a `Clock`); no statement reads the
//! database's own clock, so tests can move time. Timestamps are truncated to
//! microseconds at this boundary so stored values compare equal to the ones
//! the caller holds (lease compare-and-set relies on it). PostgreSQL stores
//! `timestamptz`, SQLite integer microseconds since the epoch, so
//! comparisons in SQL are numeric ([`codec`]).
//!
//! # Data model
//!
//! - `work_items`: `id` (UUIDv7), `item_type`, `phase`, `actionable`,
//!   `attempts` (consecutive failures), `error`, `leased_until`,
//!   `lease_epoch` (the number of its last claim, migration 0020),
//!   `idempotency_key`, `caller_identity`, `created_at`, `updated_at`,
//!   `last_event_at`, and the item's place `forge`, `project` (nullable,
//!   from [`NewItem::place`]; migration 0003, backfilled for `mr` by its
//!   1001), indexed `(project, id)` so a listing is narrowed to the reader's
//!   read grants in SQL before the exact rule check. A partial unique index
//!   keeps one live item per idempotency key (phase not `completed` or
//!   `cancelled`); a partial index on actionable items serves the sweep.
//! - `work_item_statuses` (the dimensions): primary key
//!   `(work_item_id, dimension, variant)`, `status`, `detail`,
//!   `pending_until`, `updated_at`; a partial index on `pending_until`.
//! - `pending_events`: `id`, `work_item_id`, `event_type`, `body`,
//!   `received_at`.
//! - `audit_records` (migration 0005): `seq`, `id` (UUIDv7),
//!   `work_item_id`, `at`, `actor`, `kind`, `old_state`, `new_state`,
//!   `trigger`, `metadata`, `prev_hash`, `hash`: one append-only hash chain
//!   per item ([`audit`]), whose head is its last record (else the last
//!   one pruned from it, `audit_pruned`); on PostgreSQL a chain's writers
//!   take turns through the chain's advisory lock (migration 0016, which
//!   dropped the table of chain heads), and hashes are stored as their 32
//!   bytes (migration 0015). `audit_archived` is the archive's cursor; on
//!   PostgreSQL the archiver reads through `wq_audit_unarchived`, in the
//!   primary key's order whatever the statistics say, up to
//!   `wq_audit_horizon`, which waits for the appends in progress
//!   (migration 0015).
//!
//! Migrations are per backend under `migrations/{sqlite,postgres}/`, with
//! the same names (0001 the queue, 0002 the loop functions such as
//! PostgreSQL's `wq_park`, 0003 the place, 0004 `failing_since`, when the
//! current streak of failures began, 0005 the audit trail, 0008 and 0009
//! PostgreSQL's batched parks and audit appends). An item type's own tables are
//! migrated by the type (versions 1000 and up) through [`migrator`], which
//! ignores versions it does not know.
//!
//! # Backends
//!
//! Each operation is written once (`ops.rs` macros over the
//! [`codec`] types); what really differs is a named hook in
//! [`sqlite`] or [`postgres`]. SQLite has one writer: every write goes to
//! one batching writer task that runs many callers' writes in one
//! transaction (each in its own savepoint) and answers them only after the
//! shared `COMMIT`, so concurrent workers share one fsync; an item type's
//! own transactions use the same door ([`sqlite::SqliteStore::write`]).
//! On PostgreSQL the claim and its snapshot read are one statement that
//! also requires the row version the snapshot saw (`xmin` unchanged):
//! otherwise a commit landing between the snapshot and the `UPDATE` would
//! be claimed with the older dimensions (`tests/pg_claim_race.rs` shows the
//! interleaving). The park is the `wq_park` function.
//!
//! Both backends claim due items in batches with their snapshots
//! ([`Store::item_claim_due`]) and park the loop's exits that arrive
//! together with one statement per step for the whole batch (PostgreSQL's
//! `wq_park_batch`, migrations 0009 to 0019; SQLite's `sqlite::park`), the audit
//! records chained in Rust to heads read in the same transaction.
//!
//! **Lock order (PostgreSQL).** A transaction that takes several locks on
//! an item takes the item's advisory lock first
//! ([`postgres::lock_item`]), then its `work_items` row, then its other
//! rows (detail row, dimensions, events). The park holds the advisory lock
//! while it waits for the row, so any other order can deadlock with it.

use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{
    Dimension, DimensionUpdate, EventResult, ItemId, ItemView, PendingEvent, Phase, WorkItem,
};

pub mod audit;
mod coalesce;
pub mod codec;
mod common;
#[macro_use]
mod ops;
pub mod postgres;
pub mod sessions;
pub mod sqlite;
#[cfg(feature = "testing")]
#[allow(
    clippy::disallowed_methods,
    reason = "test databases are named by wall-clock time"
)]
pub mod testing;

pub use codec::to_micros;

/// The PostgreSQL channel of work hints ([`Store::work_hints`]).
pub const HINT_CHANNEL: &str = "wq_work";
pub use common::{BoxFuture, EmbeddedMigration, migrator};

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("work item {0} not found")]
    NotFound(ItemId),
    /// A unique constraint refused the write (e.g. a live idempotency key).
    #[error("duplicate: {0}")]
    Duplicate(String),
    /// The item is not in a state that allows the operation.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The caller's lease on the item is gone (expired and reclaimed, or
    /// released): it must stop working on the item.
    #[error("lease on work item {0} lost")]
    LeaseLost(ItemId),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A store failure as the answer to a request, for the API and for item
/// types' submissions and commands alike: a missing item is 404, a refused
/// write 409, and database, migration and stored-data failures are internal
/// (their text is logged, never sent).
impl From<StoreError> for wq_core::RequestError {
    fn from(error: StoreError) -> Self {
        use wq_core::RequestError;
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
}

/// A new work item. It starts `active` and `actionable`.
#[derive(Debug, Clone)]
pub struct NewItem {
    pub id: ItemId,
    pub item_type: String,
    pub idempotency_key: Option<String>,
    pub caller_identity: Option<String>,
    /// The `(forge, project)` the item belongs to, when its type has that
    /// notion ([`wq_core::ItemType::scope`]): kept on the generic row so a
    /// reader's scope can be applied in SQL.
    pub place: Option<(String, String)>,
    pub now: OffsetDateTime,
    /// Dimension rows written with the item, in the same transaction.
    pub dimensions: Vec<DimensionUpdate>,
}

/// Listing filter and keyset cursor. Items come newest first (ids are
/// UUIDv7); `before` is the last id of the previous page.
#[derive(Debug, Clone, Default)]
pub struct ItemListParams {
    pub phase: Option<Phase>,
    pub item_type: Option<String>,
    pub before: Option<ItemId>,
    pub limit: u32,
    /// Narrows the list to what a reader's read grants can allow.
    pub visibility: Visibility,
}

/// Which items a reader's read grants can allow, for narrowing a listing in
/// SQL. The store keeps every row some grant may allow and drops rows no
/// grant can: each glob pattern is matched by its literal prefix (up to the
/// first `*`, `?`, `[` or `{`; ASCII case ignored), and a row without a
/// place passes the forge and project patterns. That is a superset of what
/// the grants allow; the caller applies the exact rule match to the rows
/// (with their place, [`ListedItem`]) and pages on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Visibility {
    /// No restriction (a grant without item type, forge or project
    /// patterns).
    #[default]
    All,
    /// Only rows one of these grants may allow; none when empty.
    Grants(Vec<VisibleScope>),
}

/// One read grant's patterns (glob syntax of the auth rules); `None`
/// allows all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VisibleScope {
    pub item_types: Option<Vec<String>>,
    pub forges: Option<Vec<String>>,
    pub projects: Option<Vec<String>>,
}

/// A listed item with the `(forge, project)` stored for it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedItem {
    pub item: WorkItem,
    pub place: Option<(String, String)>,
}

/// Claim an item for one loop run.
#[derive(Debug, Clone)]
pub struct ClaimParams {
    pub id: ItemId,
    pub now: OffsetDateTime,
    pub lease_until: OffsetDateTime,
    /// Only items of these types are claimed.
    pub handled_types: Vec<String>,
}

/// Claim a batch of due items for loop runs ([`Store::item_claim_due`]).
#[derive(Debug, Clone)]
pub struct ClaimDueParams {
    pub now: OffsetDateTime,
    pub lease_until: OffsetDateTime,
    /// Only items of these types are claimed (none when empty).
    pub handled_types: Vec<String>,
    /// At most this many.
    pub limit: u32,
    /// On the actionable branch, only items after this id (`None`: from
    /// the oldest). An engine draining a backlog passes the last id it
    /// claimed: on PostgreSQL the index entries its earlier claims left
    /// behind (until vacuum) are not walked again.
    pub after: Option<ItemId>,
}

/// A held lease: the `leased_until` value the holder last wrote. Every loop
/// write compares it, so a worker whose lease was reclaimed cannot write.
/// `epoch` is the claim's number, which heartbeats keep: what an executor
/// names to write under its run's lease and no later claim's (the type
/// stores' `finish_leased` block; the engine hands it on in
/// [`wq_core::ItemView::lease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub id: ItemId,
    pub until: OffsetDateTime,
    pub epoch: wq_core::LeaseEpoch,
}

/// A successful executor's changes (attempts reset to 0).
#[derive(Debug, Clone)]
pub struct ApplyOutcome {
    pub lease: Lease,
    pub now: OffsetDateTime,
    pub phase: Option<Phase>,
    /// The item's `error` afterwards.
    pub error: Option<String>,
    pub dimensions: Vec<DimensionUpdate>,
    /// The action whose outcome it is, for its audit record.
    pub action: Option<String>,
    /// The executor's own records (what it wrote outside and the answer),
    /// appended after the outcome's.
    pub records: Vec<wq_core::OutcomeRecord>,
}

/// An action with outside effects is about to run
/// ([`wq_core::ItemType::has_outside_effects`]): its `action.started`
/// record, after the previous action's outcome when one is still pending,
/// in one transaction under the lease.
#[derive(Debug, Clone)]
pub struct BeginAction {
    pub lease: Lease,
    pub now: OffsetDateTime,
    pub action: String,
    pub outcome: Option<OutcomeChanges>,
}

/// An executor or handler failure.
#[derive(Debug, Clone)]
pub struct RecordFailure {
    pub lease: Lease,
    pub now: OffsetDateTime,
    pub error: String,
    /// Fail the item when `attempts` reaches this (after incrementing).
    pub max_attempts: i32,
    /// Fail the item at once.
    pub permanent: bool,
    /// While the item stays active: keep it leased until then (a backoff
    /// that the sweep respects); it stays actionable.
    pub retry_at: OffsetDateTime,
    /// A dependency's outage ([`wq_core::ExecError::outage`]): not counted
    /// against `max_attempts`; the item fails when its streak of failures
    /// began before `outage_started_before` instead.
    pub outage: bool,
    /// `now` minus the outage budget.
    pub outage_started_before: OffsetDateTime,
    /// The action (or `handle_event`) that failed, for its audit record.
    pub action: Option<String>,
}

/// A new raw event for an item.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub item_id: ItemId,
    pub event_type: String,
    pub body: serde_json::Value,
    pub now: OffsetDateTime,
    /// Who delivered it, for its audit record (`None`: the service itself).
    pub origin: Option<EventOrigin>,
}

/// Where an event came from: its audit record's actor, and the raw
/// delivery it was read from (DDR-33).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventOrigin {
    /// `webhook:<source>`, `sqs`, a caller identity.
    pub actor: String,
    /// The sender's id of the delivery (`X-Gitlab-Event-UUID`,
    /// `X-GitHub-Delivery`).
    pub delivery_id: Option<String>,
    /// The raw body as received; the record keeps at most
    /// [`audit::MAX_RAW_BYTES`] of it.
    pub raw: Option<String>,
}

/// Applying one handled event.
#[derive(Debug, Clone)]
pub struct ApplyEvent {
    pub lease: Lease,
    pub event_id: i64,
    pub now: OffsetDateTime,
    pub result: EventResult,
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventApplied {
    /// Phase (if any) and dimensions applied.
    Applied,
    /// The phase part was older than `last_event_at`; dimensions applied.
    StalePhase,
    /// The item is not active: the event was discarded (DDR-37).
    ItemNotActive,
}

/// The changes of a successful executor, without lease and time (see
/// [`ParkParams`]).
#[derive(Debug, Clone, Default)]
pub struct OutcomeChanges {
    pub phase: Option<Phase>,
    pub error: Option<String>,
    pub dimensions: Vec<DimensionUpdate>,
    /// The action whose outcome it is, for its audit record.
    pub action: Option<String>,
    /// The executor's own records ([`ApplyOutcome::records`]).
    pub records: Vec<wq_core::OutcomeRecord>,
}

/// The loop's exit step.
#[derive(Debug, Clone)]
pub struct ParkParams {
    pub lease: Lease,
    pub now: OffsetDateTime,
    /// The last executor's outcome, written in the same transaction whether
    /// the item parks or not (attempts reset to 0), so a run whose last
    /// action needs no follow-up commits once.
    pub outcome: Option<OutcomeChanges>,
}

/// An item as the loop needs it: its view and whether events wait.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub view: ItemView,
    pub has_events: bool,
}

/// Outcome of the loop's exit step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Park {
    /// `actionable = false`, lease released.
    Parked,
    /// Events arrived: keep looping.
    EventsPending,
}

/// Sweep query parameters.
#[derive(Debug, Clone)]
pub struct SweepParams {
    pub handled_types: Vec<String>,
    pub now: OffsetDateTime,
    pub limit: u32,
}

/// Items per `(item_type, phase)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseCount {
    pub item_type: String,
    pub phase: Phase,
    pub count: i64,
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

/// The concrete store behind a `dyn Store`, for an item type's own store
/// module (its detail table, its transactions).
#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// The leadership of one periodic task among every process sharing the
/// database ([`Store::lead`]): on PostgreSQL a session-level advisory lock
/// held by a connection of its own, so it ends when its holder dies (the
/// connection closes) or drops it; on SQLite, whose one database has one
/// process, it is always granted.
pub struct Leadership {
    task: String,
    held: Held,
}

enum Held {
    Sole,
    Session(sqlx::PgConnection),
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("task", &self.task)
            .field(
                "held",
                &match self.held {
                    Held::Sole => "sole",
                    Held::Session(_) => "session",
                },
            )
            .finish()
    }
}

impl Leadership {
    fn sole(task: &str) -> Self {
        Self {
            task: task.to_owned(),
            held: Held::Sole,
        }
    }

    fn session(task: &str, conn: sqlx::PgConnection) -> Self {
        Self {
            task: task.to_owned(),
            held: Held::Session(conn),
        }
    }

    pub fn task(&self) -> &str {
        &self.task
    }

    /// Whether it is still held: false once its connection is gone (the
    /// database restarted, the network failed) and the lock with it.
    pub async fn still_held(&mut self) -> bool {
        match &mut self.held {
            Held::Sole => true,
            Held::Session(conn) => postgres::session_holds(conn, &self.task).await,
        }
    }

    /// Gives it up now (dropping it gives it up too, when its connection
    /// closes).
    pub async fn release(self) {
        if let Held::Session(conn) = self.held {
            postgres::session_release(conn, &self.task).await;
        }
    }
}

/// Work another process made due, as an engine hears of it
/// ([`Store::work_hints`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// This item was made due (created, given an event, retried or marked
    /// actionable) by another process's transaction, which committed.
    Due(ItemId),
    /// Hints may have been missed (the listening connection was lost and
    /// made again): sweep.
    Lost,
}

/// The hints of work other processes made due, in the order heard
/// ([`Store::work_hints`]). They are hints: a lost one only delays the item
/// until a sweep finds it.
#[derive(Debug)]
pub struct WorkHints(pub(crate) tokio::sync::mpsc::Receiver<Hint>);

impl WorkHints {
    /// The next hint; `None` once the listener has stopped for good.
    pub async fn next(&mut self) -> Option<Hint> {
        self.0.recv().await
    }
}

/// The generic store. Both backends pass one conformance suite.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> BackendKind;

    /// The concrete store (cheap: pools are shared handles).
    fn handle(&self) -> Backend;

    /// Applies pending migrations.
    async fn migrate(&self) -> StoreResult<()>;

    /// A cheap round trip, for readiness.
    async fn ping(&self) -> StoreResult<()>;

    /// Leads the periodic task `task` among every process sharing this
    /// database, or `None` while another process leads it. Kept until
    /// dropped, released, or its holder dies ([`Leadership`]).
    async fn lead(&self, task: &str) -> StoreResult<Option<Leadership>>;

    /// Inserts an active, actionable item (and its initial dimensions).
    /// A live idempotency key yields [`StoreError::Duplicate`].
    async fn item_insert(&self, item: NewItem) -> StoreResult<WorkItem>;

    async fn item_get(&self, id: ItemId) -> StoreResult<Option<WorkItem>>;

    /// The item with its dimensions, as of `now`.
    async fn item_view(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<Option<ItemView>>;

    /// The view plus whether events are pending, in one round trip where the
    /// backend allows: what the loop reads each iteration.
    async fn item_snapshot(&self, id: ItemId, now: OffsetDateTime)
    -> StoreResult<Option<Snapshot>>;

    async fn item_list(&self, params: ItemListParams) -> StoreResult<Vec<WorkItem>> {
        Ok(self
            .item_list_placed(params)
            .await?
            .into_iter()
            .map(|listed| listed.item)
            .collect())
    }

    /// [`Store::item_list`] with each item's stored place.
    async fn item_list_placed(&self, params: ItemListParams) -> StoreResult<Vec<ListedItem>>;

    /// Sets `leased_until` when unleased or expired and the type is handled.
    /// `None` when someone else holds it, or it does not exist.
    async fn item_claim(&self, params: ClaimParams) -> StoreResult<Option<(WorkItem, Lease)>>;

    /// [`Store::item_claim`] followed by [`Store::item_snapshot`], in one
    /// round trip where the backend allows: how the loop starts.
    async fn item_claim_snapshot(
        &self,
        params: ClaimParams,
    ) -> StoreResult<Option<(Snapshot, Lease)>> {
        let now = params.now;
        let Some((item, lease)) = self.item_claim(params).await? else {
            return Ok(None);
        };
        let snapshot = self
            .item_snapshot(item.id, now)
            .await?
            .ok_or(StoreError::NotFound(item.id))?;
        Ok(Some((snapshot, lease)))
    }

    /// Claims up to `limit` items that are due, as
    /// [`Store::sweep_candidates`] finds them (actionable and not leased,
    /// with pending events, or active with an expired `pending_until`), of
    /// the handled types, each with its snapshot, in one statement: how an
    /// engine takes a batch of work. Oldest first where the backend allows.
    /// Concurrent callers get different items (PostgreSQL skips rows
    /// another claimer holds); as in [`Store::item_claim_snapshot`], an item
    /// whose row changed after the statement's snapshot is not claimed.
    async fn item_claim_due(&self, params: ClaimDueParams) -> StoreResult<Vec<(Snapshot, Lease)>>;

    /// Listens for work other processes sharing the database make due, so
    /// an engine takes it at once instead of at its next sweep: on
    /// PostgreSQL every transaction that creates an item, gives it an event,
    /// retries it or marks it actionable sends a notification on commit,
    /// and this store's listener (a pooled connection of its own) hears the
    /// other stores' ones. `None` where one process has the database
    /// (SQLite).
    async fn work_hints(&self) -> StoreResult<Option<WorkHints>>;

    /// Extends a held lease; [`StoreError::LeaseLost`] if it is not held.
    async fn item_heartbeat(&self, lease: Lease, until: OffsetDateTime) -> StoreResult<Lease>;

    /// Gives the lease up, leaving `actionable` as it is; the item is
    /// claimable again at `until` (`None`: at once).
    async fn item_release(&self, lease: Lease, until: Option<OffsetDateTime>) -> StoreResult<()>;

    /// Writes a successful executor's changes, resets `attempts`.
    async fn item_apply_outcome(&self, outcome: ApplyOutcome) -> StoreResult<WorkItem>;

    /// Records that an action with outside effects starts, with the
    /// pending outcome of the one before (if any) in the same transaction.
    /// Without a pending outcome, `attempts` is left as it is.
    async fn item_begin_action(&self, begin: BeginAction) -> StoreResult<()>;

    /// Counts a failure; fails the item past the limit or when permanent.
    async fn item_record_failure(&self, failure: RecordFailure) -> StoreResult<WorkItem>;

    /// The loop's exit: atomically with "no pending events" (advisory lock on
    /// PostgreSQL, the write lock on SQLite), writes the pending outcome if
    /// any, sets `actionable = false`, releases the lease and clears expired
    /// `pending_until` values. With events pending it writes only the
    /// outcome and answers [`Park::EventsPending`].
    async fn item_park_with(&self, params: ParkParams) -> StoreResult<Park>;

    /// [`Store::item_park_with`] without an outcome.
    async fn item_park(&self, lease: Lease, now: OffsetDateTime) -> StoreResult<Park> {
        self.item_park_with(ParkParams {
            lease,
            now,
            outcome: None,
        })
        .await
    }

    /// Failed or cancelled → active, actionable, attempts 0, error cleared.
    /// Other phases: [`StoreError::Conflict`].
    /// `actor` asked for it (its audit record's actor). With `event_type`
    /// (the item type's [`wq_core::ItemType::retry_event`]), an event of
    /// that type, its body `{"caller": actor}`, is stored in the same
    /// transaction: the type learns of the retry exactly when it happened.
    async fn item_retry(
        &self,
        id: ItemId,
        now: OffsetDateTime,
        actor: &str,
        event_type: Option<&str>,
    ) -> StoreResult<WorkItem>;

    /// Sets `actionable = true` (e.g. after a content update).
    async fn item_mark_actionable(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()>;

    async fn item_count_by_phase(&self) -> StoreResult<Vec<PhaseCount>>;

    async fn dimension_list(&self, id: ItemId) -> StoreResult<Vec<Dimension>>;

    async fn dimension_upsert(
        &self,
        id: ItemId,
        update: DimensionUpdate,
        now: OffsetDateTime,
    ) -> StoreResult<()>;

    /// Stores a raw event and sets `actionable = true` in one transaction,
    /// under the item's advisory lock on PostgreSQL.
    async fn event_insert(&self, event: NewEvent) -> StoreResult<i64>;

    /// The oldest pending event of the item.
    async fn event_next(&self, id: ItemId) -> StoreResult<Option<PendingEvent>>;

    /// Applies a handled event and deletes it, in one transaction.
    async fn event_apply(&self, apply: ApplyEvent) -> StoreResult<EventApplied>;

    /// Items the sweep should notify: actionable and not leased, with pending
    /// events, or with an expired `pending_until` while active; only of
    /// `handled_types` (none when empty).
    async fn sweep_candidates(&self, params: SweepParams) -> StoreResult<Vec<ItemId>>;

    /// Appends an audit record on its own (a change recorded by its type's
    /// own transaction uses the `append_audit` building block instead), and
    /// logs it once committed.
    async fn audit_append(&self, record: audit::NewAudit) -> StoreResult<audit::AuditRecord>;

    /// A page of the audit trail in order ([`audit::AuditQuery`]).
    async fn audit_list(&self, query: audit::AuditQuery) -> StoreResult<Vec<audit::AuditRecord>>;

    /// The oldest records not archived yet, in order (at most `limit`),
    /// below a horizon no append in progress is under: a record committed
    /// late with a lower number than one already shipped is never skipped.
    async fn audit_unarchived(&self, limit: u32) -> StoreResult<Vec<audit::AuditRecord>>;

    /// Marks the records `seqs` archived at `now`, once shipped: a batch
    /// [`Store::audit_unarchived`] answered. Moves the archive's cursor
    /// over the oldest unarchived records in `seqs`, up to the first one
    /// not in it.
    async fn audit_mark_archived(&self, seqs: &[i64], now: OffsetDateTime) -> StoreResult<()>;

    /// Deletes archived records older than `before` (never unarchived
    /// ones), keeping each chain's last deleted hash for verification.
    async fn audit_prune_archived(&self, before: OffsetDateTime) -> StoreResult<u64>;

    /// How many records are not archived yet, and the time of the oldest.
    async fn audit_unarchived_stats(&self) -> StoreResult<(i64, Option<OffsetDateTime>)>;

    /// Each pruned chain's last deleted hash: where its verification starts.
    async fn audit_pruned_heads(&self) -> StoreResult<Vec<(ItemId, String)>>;

    /// The trail's horizon: a sequence number at or below which every
    /// record there will ever be has committed (0 when none was numbered),
    /// so a read that starts after this call sees all of them. Records
    /// commit out of their numbers' order on PostgreSQL (each transaction
    /// draws its numbers before it commits); a reader following the trail
    /// by `after` reads up to the horizon ([`audit::AuditQuery::until`]) and
    /// never passes over a record that commits late. With `wait`,
    /// PostgreSQL waits for the appends in progress (a moment in which new
    /// ones wait too; `None` when they did not end within its lock
    /// timeout); without, it answers `None` at once while any is in
    /// progress. SQLite numbers records in commit order: its horizon is its
    /// newest number.
    async fn audit_horizon(&self, wait: bool) -> StoreResult<Option<i64>>;

    /// Stores a dashboard session or sign-in link.
    async fn ui_session_insert(&self, session: sessions::UiSession) -> StoreResult<()>;

    /// The unexpired session or link of `kind` whose id hashes to
    /// `id_hash`.
    async fn ui_session_get(
        &self,
        id_hash: &str,
        kind: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<sessions::UiSession>>;

    /// Deletes the session or link of `kind` whose id hashes to `id_hash`
    /// and returns it if it had not expired by `now` (a link is used once;
    /// a sign-out ends its session).
    async fn ui_session_take(
        &self,
        id_hash: &str,
        kind: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<sessions::UiSession>>;

    /// Deletes the sessions and links that expired by `now`.
    async fn ui_session_prune(&self, now: OffsetDateTime) -> StoreResult<u64>;

    /// Walks every item's chain in order, page by page: the first broken
    /// link, if any, and how many records were checked.
    async fn audit_verify(&self) -> StoreResult<(u64, Option<audit::BrokenLink>)> {
        // A chain whose oldest records left after archiving picks up at
        // the last one that left.
        let mut heads: std::collections::BTreeMap<ItemId, String> =
            self.audit_pruned_heads().await?.into_iter().collect();
        let mut after = 0;
        let mut checked = 0u64;
        loop {
            let page = self
                .audit_list(audit::AuditQuery {
                    after,
                    limit: 1000,
                    ..audit::AuditQuery::default()
                })
                .await?;
            let Some(last) = page.last() else {
                return Ok((checked, None));
            };
            after = last.seq;
            if let Err(broken) = audit::verify(&page, &mut heads) {
                checked += page
                    .iter()
                    .take_while(|record| record.seq < broken.seq)
                    .count() as u64;
                return Ok((checked, Some(broken)));
            }
            checked += page.len() as u64;
        }
    }
}

/// How long [`connect`] waits for a first PostgreSQL connection (sqlx's
/// default acquire timeout).
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Opens a store from a URL: `sqlite:PATH`, `sqlite::memory:`, or
/// `postgres://...`. The backend is picked here, once.
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Arc<dyn Store>> {
    connect_with_timeout(url, max_connections, DEFAULT_CONNECT_TIMEOUT).await
}

/// [`connect`], waiting at most `connect_timeout` for a PostgreSQL server
/// (SQLite opens a local file and ignores it).
pub async fn connect_with_timeout(
    url: &str,
    max_connections: u32,
    connect_timeout: std::time::Duration,
) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(
            postgres::PgStore::connect_with_timeout(url, max_connections, connect_timeout).await?,
        ))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect(url, max_connections).await?,
        ))
    } else {
        Err(StoreError::Conflict(format!(
            "unsupported database url {url:?}: expected sqlite:PATH, sqlite::memory: or postgres://..."
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wq_core::{ItemId, RequestError};

    #[test]
    fn store_failures_answer_requests_internal_and_keep_their_detail_for_the_log() {
        let database = RequestError::from(StoreError::Database(sqlx::Error::Protocol(
            "relation \"mr_details\" does not exist".into(),
        )));
        assert!(
            matches!(&database, RequestError::Internal(detail) if detail.contains("mr_details")),
            "{database:?}"
        );
        let corrupt = RequestError::from(StoreError::Corrupt("bad spec json".into()));
        assert!(
            matches!(&corrupt, RequestError::Internal(detail) if detail.contains("bad spec json")),
            "{corrupt:?}"
        );
        let id = ItemId::new_v7();
        assert_eq!(
            RequestError::from(StoreError::NotFound(id)),
            RequestError::NotFound(format!("work item {id} not found"))
        );
        assert_eq!(
            RequestError::from(StoreError::Duplicate("taken".into())),
            RequestError::Conflict("taken".into())
        );
        assert!(matches!(
            RequestError::from(StoreError::LeaseLost(id)),
            RequestError::Conflict(_)
        ));
    }
}
