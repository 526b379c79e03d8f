//! SQLite backend of the [`Store`]: the embedded default, one file, no other
//! service.
//!
//! # Connecting
//!
//! `sqlite:PATH` (created if missing) or `sqlite::memory:`. The connection
//! runs in WAL mode with `foreign_keys = ON`, a 10 s busy timeout and
//! `synchronous = FULL`, so a commit survives power loss. Append
//! `?synchronous=normal` (e.g. `sqlite:/var/lib/wq/wq.db?synchronous=normal`),
//! or pass [`Synchronous::Normal`] to [`SqliteStore::connect_with`], to trade
//! the last commits before a power loss (not a process crash) for faster
//! writes. `sqlite::memory:` is one named shared-cache database behind a pool
//! of exactly one connection that is never closed, so every caller sees the
//! same data; it is for tests and demos.
//!
//! # Storage
//!
//! Ids are hyphenated lowercase UUIDv7 text (they sort by creation time),
//! times are INTEGER microseconds since the Unix epoch, JSON is text.
//!
//! # Writes
//!
//! SQLite has one writer, and under `synchronous = FULL` every commit costs
//! an fsync. So every `Store` write goes through group commit (`batch`): a
//! task on the single writer connection collects the writes queued by
//! concurrent callers, runs them in one `BEGIN IMMEDIATE` transaction, each
//! in its own savepoint (a failing write is rolled back alone), and commits
//! once. **A caller gets its result only after that commit succeeded**; if
//! the commit fails, every write of the batch gets the error. `BEGIN
//! IMMEDIATE` takes the write lock first, so two transactions never both
//! read and then deadlock trying to upgrade (`SQLITE_BUSY`). The loop's exit
//! ([`Store::item_park_with`]) and [`Store::event_insert`] are serialised by
//! that lock (DDR-34); inside a batch each write sees the batch's earlier
//! writes, as one writer's consecutive transactions would.
//!
//! An item type's own transactions ([`SqliteStore::begin_write`]) bypass
//! group commit; they share the writer connection with it, so they
//! serialise with the batches.
//!
//! # Extending from an item type
//!
//! An item type's own store module (e.g. `mr_details`) builds on this one:
//!
//! - [`MIGRATOR`] ignores migrations it does not know, so the type runs its
//!   own [`sqlx::migrate::Migrator`] (also with `set_ignore_missing(true)`)
//!   on [`SqliteStore::pool`] after [`Store::migrate`]. Both record into
//!   `_sqlx_migrations`, so the type's versions must not collide with these
//!   (this crate uses 1–999; use e.g. 1000+ per type).
//! - [`insert_item`] and [`upsert_dimension`] run on a `&mut
//!   SqliteConnection`, so the type can create its item and its detail row
//!   in one transaction:
//!
//! ```no_run
//! # async fn example(store: &wq_store::sqlite::SqliteStore, item: wq_store::NewItem)
//! # -> wq_store::StoreResult<()> {
//! let mut tx = store.begin_write().await?;
//! let work_item = wq_store::sqlite::insert_item(&mut tx, &item).await?;
//! sqlx::query("INSERT INTO mr_details (work_item_id) VALUES (?1)")
//!     .bind(work_item.id.0.hyphenated().to_string())
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! # Ok(())
//! # }
//! ```

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};
use time::OffsetDateTime;
use wq_core::{
    Dimension, DimensionStatus, DimensionUpdate, ItemId, ItemView, PendingEvent, Phase, WorkItem,
};

use self::batch::{Batcher, BoxFuture};
use crate::common::{self, EmbeddedMigration, EventTarget};
use crate::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, ItemListParams, Lease,
    ListedItem, NewEvent, NewItem, Park, ParkParams, PhaseCount, RecordFailure, Snapshot, Store,
    StoreError, StoreResult, SweepParams,
};

mod batch;

/// Loads one statement from `queries/`.
macro_rules! sql {
    ($path:literal) => {
        include_str!(concat!("queries/", $path))
    };
}

/// The generic queue's migrations for SQLite. Ignores versions it does not
/// know (an item type's own migrations).
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    common::migrator(&[
        EmbeddedMigration {
            version: 1,
            description: "generic_queue",
            sql: include_str!("../../migrations/sqlite/0001_generic_queue.sql"),
        },
        EmbeddedMigration {
            version: 2,
            description: "loop_functions",
            sql: include_str!("../../migrations/sqlite/0002_loop_functions.sql"),
        },
        EmbeddedMigration {
            version: 3,
            description: "item_place",
            sql: include_str!("../../migrations/sqlite/0003_item_place.sql"),
        },
    ])
});

/// How long a connection waits for the write lock before `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL option that selects [`Synchronous`].
const SYNCHRONOUS_OPTION: &str = "synchronous";

/// Durability of commits (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is on disk before it returns (the default).
    #[default]
    Full,
    /// WAL commits are durable at the next checkpoint: a power loss may drop
    /// the last commits; a process crash does not.
    Normal,
}

impl FromStr for Synchronous {
    type Err = StoreError;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            other => Err(configuration_error(format!(
                "unknown value {other:?} for `synchronous`: expected full or normal"
            ))),
        }
    }
}

/// The SQLite store. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Readers (WAL lets them run beside the writer).
    pool: SqlitePool,
    /// The one writer connection. SQLite has one writer per database; queuing
    /// writers here, in the pool's async queue, instead of in SQLite's busy
    /// handler (which sleeps in steps of milliseconds) is what makes
    /// concurrent workers fast. Other processes on the same file still wait
    /// through the busy timeout.
    writer: SqlitePool,
    /// The group-commit task that runs every `Store` write on `writer`.
    batcher: Batcher,
}

impl SqliteStore {
    /// Opens `sqlite:PATH[?synchronous=full|normal]` or `sqlite::memory:`
    /// (see the module docs). Does not migrate.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        let (url, synchronous) = split_synchronous_option(url)?;
        let options = SqliteConnectOptions::from_str(&url)?;
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        Self::connect_with(options, in_memory, synchronous, max_connections).await
    }

    /// Opens a database from explicit options; this store sets WAL (unless
    /// `in_memory`), foreign keys, the busy timeout, `create_if_missing` and
    /// `synchronous`. An in-memory database gets a single connection.
    pub async fn connect_with(
        options: SqliteConnectOptions,
        in_memory: bool,
        synchronous: Synchronous,
        max_connections: u32,
    ) -> StoreResult<Self> {
        let options = options
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .create_if_missing(true)
            .synchronous(match synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            });
        if in_memory {
            // The named in-memory database lives as long as one connection
            // to it: keep exactly one, forever, for reads and writes.
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
                .await?;
            return Ok(Self {
                batcher: Batcher::spawn(pool.clone()),
                writer: pool.clone(),
                pool,
            });
        }
        let options = options.journal_mode(SqliteJournalMode::Wal);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .connect_with(options)
            .await?;
        Ok(Self {
            batcher: Batcher::spawn(writer.clone()),
            pool,
            writer,
        })
    }

    /// The reader pool, for an item type's own queries.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The single-connection writer pool, for an item type's own writes and
    /// migrations (prefer [`SqliteStore::begin_write`] for transactions).
    /// Like [`SqliteStore::begin_write`], it bypasses group commit.
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// A write transaction that holds the write lock from its first
    /// statement (`BEGIN IMMEDIATE`), for an item type's own transactions.
    ///
    /// It bypasses group commit (see "Writes" in the module docs) and holds
    /// the one writer connection until it ends, so `Store` writes wait for
    /// it and it waits for the running batch. Do not call this store's
    /// `Store` write methods while holding it: they need that connection
    /// and would wait forever.
    pub async fn begin_write(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Runs `statements` through group commit: inside the next batch's
    /// `BEGIN IMMEDIATE` transaction, in its own savepoint (rolled back if
    /// it returns an error). The result comes back only after the batch has
    /// committed. Item types use it for their own transactions so that
    /// concurrent callers share one fsync; `statements` must only use the
    /// connection it is given.
    pub async fn write<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        self.batcher.write(statements).await
    }
}

fn configuration_error(message: String) -> StoreError {
    StoreError::Database(sqlx::Error::Configuration(message.into()))
}

/// Removes this store's own `synchronous=` option from the URL's query, which
/// sqlx does not know.
fn split_synchronous_option(url: &str) -> StoreResult<(String, Synchronous)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Synchronous::default()));
    };
    let mut synchronous = Synchronous::default();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some((SYNCHRONOUS_OPTION, value)) => synchronous = value.parse()?,
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, synchronous))
}

// --- encoding --------------------------------------------------------------

pub fn id_text(id: ItemId) -> String {
    id.0.hyphenated().to_string()
}

pub fn parse_id(text: &str) -> StoreResult<ItemId> {
    text.parse()
        .map_err(|error| StoreError::Corrupt(format!("work item id {text:?}: {error}")))
}

/// Microseconds since the Unix epoch; truncates like [`crate::to_micros`].
pub fn micros(at: OffsetDateTime) -> i64 {
    let micros = at.unix_timestamp_nanos().div_euclid(1_000);
    i64::try_from(micros).expect("a representable OffsetDateTime fits in i64 microseconds")
}

pub fn from_micros(micros: i64) -> StoreResult<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
        .map_err(|error| StoreError::Corrupt(format!("timestamp {micros}: {error}")))
}

pub fn optional_micros(micros: Option<i64>) -> StoreResult<Option<OffsetDateTime>> {
    micros.map(from_micros).transpose()
}

fn json_text(value: &serde_json::Value) -> String {
    value.to_string()
}

fn parse_json(text: &str, column: &str) -> StoreResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|error| StoreError::Corrupt(format!("{column}: {error}")))
}

/// A listed row: the item and its stored place.
fn listed_from_row(row: &SqliteRow) -> StoreResult<ListedItem> {
    let forge: Option<String> = row.try_get("forge")?;
    let project: Option<String> = row.try_get("project")?;
    Ok(ListedItem {
        item: item_from_row(row)?,
        place: forge.zip(project),
    })
}

fn item_from_row(row: &SqliteRow) -> StoreResult<WorkItem> {
    Ok(WorkItem {
        id: parse_id(row.try_get("id")?)?,
        item_type: row.try_get("item_type")?,
        phase: common::parse_phase(row.try_get("phase")?)?,
        actionable: row.try_get("actionable")?,
        attempts: row.try_get("attempts")?,
        error: row.try_get("error")?,
        leased_until: optional_micros(row.try_get("leased_until")?)?,
        idempotency_key: row.try_get("idempotency_key")?,
        caller_identity: row.try_get("caller_identity")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
        last_event_at: optional_micros(row.try_get("last_event_at")?)?,
    })
}

fn dimension_from_row(row: &SqliteRow) -> StoreResult<Dimension> {
    Ok(Dimension {
        dimension: row.try_get("dimension")?,
        variant: row.try_get("variant")?,
        status: DimensionStatus::from_stored(row.try_get("status")?),
        detail: parse_json(row.try_get("detail")?, "work_item_statuses.detail")?,
        pending_until: optional_micros(row.try_get("pending_until")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
    })
}

fn event_from_row(row: &SqliteRow) -> StoreResult<PendingEvent> {
    Ok(PendingEvent {
        id: row.try_get("id")?,
        work_item_id: parse_id(row.try_get("work_item_id")?)?,
        event_type: row.try_get("event_type")?,
        body: parse_json(row.try_get("body")?, "pending_events.body")?,
        received_at: from_micros(row.try_get("received_at")?)?,
    })
}

// --- building blocks for item types ----------------------------------------

/// Inserts an active, actionable work item and its initial dimensions on the
/// caller's connection (inside the caller's write transaction, so an item
/// type can add its detail row atomically). A live idempotency key yields
/// [`StoreError::Duplicate`].
pub async fn insert_item(conn: &mut SqliteConnection, item: &NewItem) -> StoreResult<WorkItem> {
    let row = sqlx::query(sql!("items/insert.sql"))
        .bind(id_text(item.id))
        .bind(&item.item_type)
        .bind(&item.idempotency_key)
        .bind(&item.caller_identity)
        .bind(micros(item.now))
        .bind(item.place.as_ref().map(|(forge, _)| forge))
        .bind(item.place.as_ref().map(|(_, project)| project))
        .fetch_one(&mut *conn)
        .await
        .map_err(|error| {
            common::duplicate_or_database(error, || {
                common::duplicate_key_message(item.idempotency_key.as_deref())
            })
        })?;
    let work_item = item_from_row(&row)?;
    for update in &item.dimensions {
        upsert_dimension(&mut *conn, item.id, update, item.now).await?;
    }
    Ok(work_item)
}

/// Upserts one dimension row on the caller's connection: status replaced,
/// detail replaced or kept (`None`; `{}` for a new row), `pending_until`
/// replaced. A missing item yields [`StoreError::NotFound`].
pub async fn upsert_dimension(
    conn: &mut SqliteConnection,
    id: ItemId,
    update: &DimensionUpdate,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("dimensions/upsert.sql"))
        .bind(id_text(id))
        .bind(&update.dimension)
        .bind(&update.variant)
        .bind(update.status.as_str())
        .bind(update.detail.as_ref().map(json_text))
        .bind(update.pending_until.map(micros))
        .bind(micros(now))
        .execute(&mut *conn)
        .await
        .map_err(|error| common::not_found_or_database(error, id))?;
    Ok(())
}

/// Stores a raw event and sets `actionable = true`, on the caller's write
/// transaction (DDR-30, DDR-49). A missing item yields
/// [`StoreError::NotFound`].
pub async fn insert_event(conn: &mut SqliteConnection, event: &NewEvent) -> StoreResult<i64> {
    let woken = sqlx::query(sql!("items/wake_for_event.sql"))
        .bind(id_text(event.item_id))
        .execute(&mut *conn)
        .await?;
    if woken.rows_affected() == 0 {
        return Err(StoreError::NotFound(event.item_id));
    }
    Ok(sqlx::query_scalar(sql!("events/insert.sql"))
        .bind(id_text(event.item_id))
        .bind(&event.event_type)
        .bind(json_text(&event.body))
        .bind(micros(event.now))
        .fetch_one(&mut *conn)
        .await?)
}

/// Failed or cancelled → active, actionable, attempts 0, error cleared, on
/// the caller's write transaction. Other phases: [`StoreError::Conflict`].
pub async fn retry_item(
    conn: &mut SqliteConnection,
    id: ItemId,
    now: OffsetDateTime,
) -> StoreResult<WorkItem> {
    let row = sqlx::query(sql!("items/retry.sql"))
        .bind(id_text(id))
        .bind(micros(now))
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| {
            common::duplicate_or_database(error, || {
                format!("work item {id} cannot be retried: a newer item holds its idempotency key")
            })
        })?;
    if let Some(row) = row {
        return item_from_row(&row);
    }
    let phase: Option<String> = sqlx::query_scalar(sql!("items/phase.sql"))
        .bind(id_text(id))
        .fetch_optional(&mut *conn)
        .await?;
    match phase {
        None => Err(StoreError::NotFound(id)),
        Some(phase) => Err(common::retry_conflict(common::parse_phase(&phase)?)),
    }
}

async fn has_pending_events(conn: &mut SqliteConnection, id: ItemId) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(sql!("events/exists.sql"))
        .bind(id_text(id))
        .fetch_one(&mut *conn)
        .await?)
}

/// The item and its dimensions, on the caller's (read) transaction.
async fn read_view(
    conn: &mut SqliteConnection,
    id: ItemId,
    now: OffsetDateTime,
) -> StoreResult<Option<ItemView>> {
    let Some(row) = sqlx::query(sql!("items/get.sql"))
        .bind(id_text(id))
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let item = item_from_row(&row)?;
    let rows = sqlx::query(sql!("dimensions/list.sql"))
        .bind(id_text(id))
        .fetch_all(&mut *conn)
        .await?;
    let dimensions = rows
        .iter()
        .map(dimension_from_row)
        .collect::<StoreResult<_>>()?;
    Ok(Some(ItemView {
        item,
        dimensions,
        now: crate::to_micros(now),
    }))
}

/// A successful executor's changes under the lease: attempts 0, error,
/// phase if given, dimension upserts, `updated_at`. Runs inside the caller's
/// write transaction.
async fn apply_outcome(
    conn: &mut SqliteConnection,
    lease: Lease,
    now: OffsetDateTime,
    phase: Option<Phase>,
    error: Option<&str>,
    dimensions: &[DimensionUpdate],
) -> StoreResult<WorkItem> {
    let row = sqlx::query(sql!("items/apply_outcome.sql"))
        .bind(id_text(lease.id))
        .bind(micros(lease.until))
        .bind(phase.map(Phase::as_str))
        .bind(error)
        .bind(micros(now))
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(StoreError::LeaseLost(lease.id))?;
    let item = item_from_row(&row)?;
    for update in dimensions {
        upsert_dimension(&mut *conn, lease.id, update, now).await?;
    }
    Ok(item)
}

/// The loop's exit inside the caller's write transaction (`BEGIN
/// IMMEDIATE`, so no event can commit between the check and the update,
/// DDR-34): lease check, the outcome if any, then park unless events wait.
/// With events pending the outcome stays written and the lease held.
async fn park_with(conn: &mut SqliteConnection, params: &ParkParams) -> StoreResult<Park> {
    let lease = params.lease;
    match &params.outcome {
        Some(outcome) => {
            apply_outcome(
                &mut *conn,
                lease,
                params.now,
                outcome.phase,
                outcome.error.as_deref(),
                &outcome.dimensions,
            )
            .await?;
        }
        None => {
            sqlx::query(sql!("items/lease_state.sql"))
                .bind(id_text(lease.id))
                .bind(micros(lease.until))
                .fetch_optional(&mut *conn)
                .await?
                .ok_or(StoreError::LeaseLost(lease.id))?;
        }
    }
    if has_pending_events(&mut *conn, lease.id).await? {
        return Ok(Park::EventsPending);
    }
    let result = sqlx::query(sql!("items/park.sql"))
        .bind(id_text(lease.id))
        .bind(micros(lease.until))
        .execute(&mut *conn)
        .await?;
    lease_lost_unless_one_row(result.rows_affected(), lease.id)?;
    sqlx::query(sql!("dimensions/clear_consumed_timers.sql"))
        .bind(id_text(lease.id))
        .bind(micros(params.now))
        .execute(&mut *conn)
        .await?;
    Ok(Park::Parked)
}

/// Applies a handled event and deletes it, inside the caller's write
/// transaction.
async fn apply_event(conn: &mut SqliteConnection, apply: &ApplyEvent) -> StoreResult<EventApplied> {
    let id = apply.lease.id;
    let row = sqlx::query(sql!("items/lease_state.sql"))
        .bind(id_text(id))
        .bind(micros(apply.lease.until))
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(StoreError::LeaseLost(id))?;
    let target = EventTarget {
        phase: common::parse_phase(row.try_get("phase")?)?,
        error: row.try_get("error")?,
        last_event_at: optional_micros(row.try_get("last_event_at")?)?,
    };
    let outcome = if target.phase == Phase::Active {
        for update in &apply.result.dimensions {
            upsert_dimension(&mut *conn, id, update, apply.now).await?;
        }
        let write = common::decide_event(&target, &apply.result, crate::to_micros(apply.now));
        sqlx::query(sql!("items/update_from_event.sql"))
            .bind(id_text(id))
            .bind(write.phase.as_str())
            .bind(write.error.as_deref())
            .bind(micros(write.last_event_at))
            .bind(micros(apply.now))
            .execute(&mut *conn)
            .await?;
        write.applied
    } else {
        // DDR-37: only active items accept events; discard it.
        EventApplied::ItemNotActive
    };
    sqlx::query(sql!("events/delete.sql"))
        .bind(apply.event_id)
        .bind(id_text(id))
        .execute(&mut *conn)
        .await?;
    Ok(outcome)
}

fn lease_lost_unless_one_row(rows_affected: u64, id: ItemId) -> StoreResult<()> {
    if rows_affected == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost(id))
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn handle(&self) -> crate::Backend {
        crate::Backend::Sqlite(self.clone())
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query(sql!("health/ping.sql"))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn item_insert(&self, item: NewItem) -> StoreResult<WorkItem> {
        self.write(move |conn| Box::pin(async move { insert_item(conn, &item).await }))
            .await
    }

    async fn item_get(&self, id: ItemId) -> StoreResult<Option<WorkItem>> {
        let row = sqlx::query(sql!("items/get.sql"))
            .bind(id_text(id))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(item_from_row).transpose()
    }

    async fn item_view(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<Option<ItemView>> {
        // A read transaction: the item and its dimensions from one snapshot.
        let mut tx = self.pool.begin().await?;
        let view = read_view(&mut tx, id, now).await?;
        tx.commit().await?;
        Ok(view)
    }

    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<Snapshot>> {
        // One read transaction: view and pending events from one snapshot.
        let mut tx = self.pool.begin().await?;
        let Some(view) = read_view(&mut tx, id, now).await? else {
            return Ok(None);
        };
        let has_events = has_pending_events(&mut tx, id).await?;
        tx.commit().await?;
        Ok(Some(Snapshot { view, has_events }))
    }

    async fn item_list_placed(&self, params: ItemListParams) -> StoreResult<Vec<ListedItem>> {
        let rows = sqlx::query(sql!("items/list.sql"))
            .bind(params.phase.map(Phase::as_str))
            .bind(params.item_type.as_deref())
            .bind(params.before.map(id_text))
            .bind(i64::from(params.limit))
            .bind(common::visibility_param(&params.visibility))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(listed_from_row).collect()
    }

    async fn item_claim(&self, params: ClaimParams) -> StoreResult<Option<(WorkItem, Lease)>> {
        if params.handled_types.is_empty() {
            return Ok(None);
        }
        let handled_types = serde_json::Value::from(params.handled_types.clone()).to_string();
        let item = self
            .write(move |conn| {
                Box::pin(async move {
                    let row = sqlx::query(sql!("items/claim.sql"))
                        .bind(id_text(params.id))
                        .bind(micros(params.now))
                        .bind(micros(params.lease_until))
                        .bind(handled_types)
                        .fetch_optional(&mut *conn)
                        .await?;
                    row.as_ref().map(item_from_row).transpose()
                })
            })
            .await?;
        Ok(item.map(|item| {
            let lease = Lease {
                id: item.id,
                until: crate::to_micros(params.lease_until),
            };
            (item, lease)
        }))
    }

    async fn item_heartbeat(&self, lease: Lease, until: OffsetDateTime) -> StoreResult<Lease> {
        self.write(move |conn| {
            Box::pin(async move {
                let result = sqlx::query(sql!("items/heartbeat.sql"))
                    .bind(id_text(lease.id))
                    .bind(micros(lease.until))
                    .bind(micros(until))
                    .execute(&mut *conn)
                    .await?;
                lease_lost_unless_one_row(result.rows_affected(), lease.id)
            })
        })
        .await?;
        Ok(Lease {
            id: lease.id,
            until: crate::to_micros(until),
        })
    }

    async fn item_release(&self, lease: Lease, until: Option<OffsetDateTime>) -> StoreResult<()> {
        self.write(move |conn| {
            Box::pin(async move {
                let result = sqlx::query(sql!("items/release.sql"))
                    .bind(id_text(lease.id))
                    .bind(micros(lease.until))
                    .bind(until.map(micros))
                    .execute(&mut *conn)
                    .await?;
                lease_lost_unless_one_row(result.rows_affected(), lease.id)
            })
        })
        .await
    }

    async fn item_apply_outcome(&self, outcome: ApplyOutcome) -> StoreResult<WorkItem> {
        self.write(move |conn| {
            Box::pin(async move {
                apply_outcome(
                    conn,
                    outcome.lease,
                    outcome.now,
                    outcome.phase,
                    outcome.error.as_deref(),
                    &outcome.dimensions,
                )
                .await
            })
        })
        .await
    }

    async fn item_record_failure(&self, failure: RecordFailure) -> StoreResult<WorkItem> {
        self.write(move |conn| {
            Box::pin(async move {
                let id = failure.lease.id;
                let row = sqlx::query(sql!("items/record_failure.sql"))
                    .bind(id_text(id))
                    .bind(micros(failure.lease.until))
                    .bind(&failure.error)
                    .bind(micros(failure.now))
                    .bind(failure.permanent)
                    .bind(failure.max_attempts)
                    .bind(micros(failure.retry_at))
                    .fetch_optional(&mut *conn)
                    .await?
                    .ok_or(StoreError::LeaseLost(id))?;
                item_from_row(&row)
            })
        })
        .await
    }

    async fn item_park_with(&self, params: ParkParams) -> StoreResult<Park> {
        // Inside the batch's BEGIN IMMEDIATE: event_insert cannot commit
        // between the check and the update (DDR-34).
        self.write(move |conn| Box::pin(async move { park_with(conn, &params).await }))
            .await
    }

    async fn item_retry(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<WorkItem> {
        self.write(move |conn| Box::pin(async move { retry_item(conn, id, now).await }))
            .await
    }

    async fn item_mark_actionable(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()> {
        self.write(move |conn| {
            Box::pin(async move {
                let result = sqlx::query(sql!("items/mark_actionable.sql"))
                    .bind(id_text(id))
                    .bind(micros(now))
                    .execute(&mut *conn)
                    .await?;
                if result.rows_affected() == 0 {
                    return Err(StoreError::NotFound(id));
                }
                Ok(())
            })
        })
        .await
    }

    async fn item_count_by_phase(&self) -> StoreResult<Vec<PhaseCount>> {
        let rows = sqlx::query(sql!("items/count_by_phase.sql"))
            .fetch_all(&self.pool)
            .await?;
        let mut counts = Vec::with_capacity(rows.len());
        for row in &rows {
            counts.push(PhaseCount {
                item_type: row.try_get("item_type")?,
                phase: common::parse_phase(row.try_get("phase")?)?,
                count: row.try_get("count")?,
            });
        }
        Ok(counts)
    }

    async fn dimension_list(&self, id: ItemId) -> StoreResult<Vec<Dimension>> {
        let rows = sqlx::query(sql!("dimensions/list.sql"))
            .bind(id_text(id))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(dimension_from_row).collect()
    }

    async fn dimension_upsert(
        &self,
        id: ItemId,
        update: DimensionUpdate,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.write(move |conn| {
            Box::pin(async move { upsert_dimension(conn, id, &update, now).await })
        })
        .await
    }

    async fn event_insert(&self, event: NewEvent) -> StoreResult<i64> {
        // The write lock serialises this with item_park_with (DDR-34); the
        // wake-up and the event commit together (DDR-49).
        self.write(move |conn| Box::pin(async move { insert_event(conn, &event).await }))
            .await
    }

    async fn event_next(&self, id: ItemId) -> StoreResult<Option<PendingEvent>> {
        let row = sqlx::query(sql!("events/next.sql"))
            .bind(id_text(id))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(event_from_row).transpose()
    }

    async fn event_apply(&self, apply: ApplyEvent) -> StoreResult<EventApplied> {
        self.write(move |conn| Box::pin(async move { apply_event(conn, &apply).await }))
            .await
    }

    async fn sweep_candidates(&self, params: SweepParams) -> StoreResult<Vec<ItemId>> {
        if params.handled_types.is_empty() {
            return Ok(Vec::new());
        }
        let handled_types = serde_json::Value::from(params.handled_types.clone()).to_string();
        let ids: Vec<String> = sqlx::query_scalar(sql!("sweep/candidates.sql"))
            .bind(handled_types)
            .bind(micros(params.now))
            .bind(i64::from(params.limit))
            .fetch_all(&self.pool)
            .await?;
        ids.iter().map(|id| parse_id(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synchronous_option_is_taken_out_of_the_url() {
        let (url, synchronous) =
            split_synchronous_option("sqlite:/tmp/x.db?synchronous=NORMAL&mode=rwc").unwrap();
        assert_eq!(url, "sqlite:/tmp/x.db?mode=rwc");
        assert_eq!(synchronous, Synchronous::Normal);
        let (url, synchronous) = split_synchronous_option("sqlite::memory:").unwrap();
        assert_eq!(url, "sqlite::memory:");
        assert_eq!(synchronous, Synchronous::Full);
        assert!(split_synchronous_option("sqlite:x.db?synchronous=off").is_err());
    }

    #[test]
    fn micros_round_trip_and_truncate_like_to_micros() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_750_000_000_123_456_789).unwrap();
        assert_eq!(from_micros(micros(at)).unwrap(), crate::to_micros(at));
        let before_epoch = OffsetDateTime::from_unix_timestamp_nanos(-1_500).unwrap();
        assert_eq!(
            from_micros(micros(before_epoch)).unwrap(),
            crate::to_micros(before_epoch)
        );
    }
}
