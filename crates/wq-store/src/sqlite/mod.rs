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
//! times are INTEGER microseconds since the Unix epoch, JSON is text (the
//! [`crate::codec`] types). The statements bind the same parameters as
//! PostgreSQL's, so both run one body per operation (`ops.rs`).
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

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};
use time::OffsetDateTime;
use wq_core::ItemId;

use self::batch::Batcher;
#[cfg(feature = "testing")]
pub use self::batch::WriteLog;
#[cfg(doc)]
use crate::Store;
use crate::coalesce::Coalescer;
use crate::codec::{DbId, DbJson, DbTime};
use crate::common::{self, BoxFuture, EmbeddedMigration};
use crate::{Park, ParkParams, Snapshot, StoreError, StoreResult};

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
        EmbeddedMigration {
            version: 4,
            description: "failing_since",
            sql: include_str!("../../migrations/sqlite/0004_failing_since.sql"),
        },
        EmbeddedMigration {
            version: 5,
            description: "audit",
            sql: include_str!("../../migrations/sqlite/0005_audit.sql"),
        },
        EmbeddedMigration {
            version: 6,
            description: "event_delivery",
            sql: include_str!("../../migrations/sqlite/0006_event_delivery.sql"),
        },
        EmbeddedMigration {
            version: 7,
            description: "ui_sessions",
            sql: include_str!("../../migrations/sqlite/0007_ui_sessions.sql"),
        },
        EmbeddedMigration {
            version: 8,
            description: "audit_and_batches",
            sql: include_str!("../../migrations/sqlite/0008_audit_and_batches.sql"),
        },
        EmbeddedMigration {
            version: 9,
            description: "park_batch",
            sql: include_str!("../../migrations/sqlite/0009_park_batch.sql"),
        },
        EmbeddedMigration {
            version: 10,
            description: "audit_lean",
            sql: include_str!("../../migrations/sqlite/0010_audit_lean.sql"),
        },
        EmbeddedMigration {
            version: 11,
            description: "item_fillfactor",
            sql: include_str!("../../migrations/sqlite/0011_item_fillfactor.sql"),
        },
        EmbeddedMigration {
            version: 12,
            description: "park_batch_heads",
            sql: include_str!("../../migrations/sqlite/0012_park_batch_heads.sql"),
        },
        EmbeddedMigration {
            version: 13,
            description: "audit_heads_fillfactor",
            sql: include_str!("../../migrations/sqlite/0013_audit_heads_fillfactor.sql"),
        },
        EmbeddedMigration {
            version: 14,
            description: "audit_unarchived_read",
            sql: include_str!("../../migrations/sqlite/0014_audit_unarchived_read.sql"),
        },
        EmbeddedMigration {
            version: 15,
            description: "audit_bytes_and_cursor",
            sql: include_str!("../../migrations/sqlite/0015_audit_bytes_and_cursor.sql"),
        },
        EmbeddedMigration {
            version: 16,
            description: "audit_chain_locks",
            sql: include_str!("../../migrations/sqlite/0016_audit_chain_locks.sql"),
        },
        EmbeddedMigration {
            version: 17,
            description: "audit_json_text",
            sql: include_str!("../../migrations/sqlite/0017_audit_json_text.sql"),
        },
        EmbeddedMigration {
            version: 18,
            description: "audit_append_record",
            sql: include_str!("../../migrations/sqlite/0018_audit_append_record.sql"),
        },
        EmbeddedMigration {
            version: 19,
            description: "park_batch_one_pass",
            sql: include_str!("../../migrations/sqlite/0019_park_batch_one_pass.sql"),
        },
        EmbeddedMigration {
            version: 20,
            description: "lease_epoch",
            sql: include_str!("../../migrations/sqlite/0020_lease_epoch.sql"),
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

mod park;

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
    /// Parks that arrive together, run as one set-based job ([`park`]).
    parks: Arc<Coalescer<park::ParkRequest, park::Parked>>,
    /// What the batches of parks cost.
    #[cfg_attr(
        not(feature = "testing"),
        expect(dead_code, reason = "read by tests and benchmarks (`testing`)")
    )]
    park_stats: Arc<ParkStats>,
}

/// What the batches of parks cost, for tests and benchmarks.
#[derive(Debug, Default)]
struct ParkStats {
    /// Batches that failed and ran one by one.
    fallbacks: std::sync::atomic::AtomicUsize,
    /// The time set-based park jobs held the writer's transaction, in ns:
    /// the part of the loop no other writer can share.
    writer_nanos: std::sync::atomic::AtomicU64,
}

/// At most this many parks share one job.
const MAX_PARK_BATCH: usize = 256;
/// At most this many park jobs are queued for the writer at once.
const PARK_BATCHES_IN_FLIGHT: usize = 2;

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
            let batcher = Batcher::spawn(pool.clone());
            let park_stats = Arc::default();
            return Ok(Self {
                parks: park_coalescer(&batcher, &park_stats),
                park_stats,
                batcher,
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
        let batcher = Batcher::spawn(writer.clone());
        let park_stats = Arc::default();
        Ok(Self {
            parks: park_coalescer(&batcher, &park_stats),
            park_stats,
            batcher,
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

    /// Follows what group commit did: writes queued, batches taken and
    /// committed (see [`WriteLog`]). For tests that need writes to share a
    /// batch.
    #[cfg(feature = "testing")]
    pub fn write_log(&self) -> tokio::sync::watch::Receiver<WriteLog> {
        self.batcher.log()
    }

    /// The largest batch of parks run so far, for tests that check
    /// concurrent parks share a job.
    #[cfg(feature = "testing")]
    pub fn largest_park_batch(&self) -> usize {
        self.parks.largest_batch()
    }

    /// How many parks ran in how many jobs, for benchmarks.
    #[cfg(feature = "testing")]
    pub fn park_counts(&self) -> (usize, usize) {
        self.parks.counts()
    }

    /// How many batches of parks failed and ran one by one.
    #[cfg(feature = "testing")]
    pub fn park_fallbacks(&self) -> usize {
        self.park_stats
            .fallbacks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long set-based park jobs held the writer's transaction, in all.
    #[cfg(feature = "testing")]
    pub fn park_writer_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(
            self.park_stats
                .writer_nanos
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// A write without a transaction of its own: on SQLite every write goes
    /// through group commit.
    async fn autocommit<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        self.write(statements).await
    }

    /// A read transaction: WAL gives it one snapshot.
    async fn read_transaction(&self) -> sqlx::Result<Transaction<'static, Sqlite>> {
        self.pool.begin().await
    }
}

/// The coalescer of parks: a batch of one runs as before
/// ([`park_with`]); more run set-based ([`park::park_many`]), one by one
/// if that job fails.
fn park_coalescer(
    batcher: &Batcher,
    stats: &Arc<ParkStats>,
) -> Arc<Coalescer<park::ParkRequest, park::Parked>> {
    let batcher = batcher.clone();
    let stats = Arc::clone(stats);
    Arc::new(Coalescer::new(
        MAX_PARK_BATCH,
        PARK_BATCHES_IN_FLIGHT,
        Arc::new(move |parks| Box::pin(park_batch(batcher.clone(), Arc::clone(&stats), parks))),
    ))
}

async fn park_batch(
    batcher: Batcher,
    stats: Arc<ParkStats>,
    mut parks: Vec<park::ParkRequest>,
) -> Vec<StoreResult<park::Parked>> {
    // Two parks of one item (two runs, one of them past its lease) are not
    // set apart by a set-based statement: the later ones run alone.
    let mut seen = std::collections::HashSet::new();
    let distinct = parks.iter().all(|park| seen.insert(park.params.lease.id));
    if parks.len() > 1 && distinct {
        // Shared with the job, not copied: the writer's transaction is held
        // while the job runs, so nothing is cloned or dropped in it. The
        // job has dropped its handle by the time it answers.
        let batch = Arc::new(parks);
        let job = Arc::clone(&batch);
        let job_stats = Arc::clone(&stats);
        let written = batcher
            .write(move |conn| {
                Box::pin(async move {
                    let started = std::time::Instant::now();
                    let parked = park::park_many(conn, &job).await;
                    let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    job_stats
                        .writer_nanos
                        .fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
                    parked
                })
            })
            .await;
        parks = Arc::try_unwrap(batch).unwrap_or_else(|shared| shared.as_ref().clone());
        match written {
            Ok(results) => return park::answers(parks, results),
            Err(error) => {
                stats
                    .fallbacks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(%error, parks = parks.len(), "a batch of {} parks failed ({error}); parking them one by one", parks.len());
            }
        }
    }
    let mut results = Vec::with_capacity(parks.len());
    for park::ParkRequest { params, .. } in parks {
        results.push(
            batcher
                .write(move |conn| {
                    Box::pin(async move {
                        let mut records = Vec::new();
                        let park = park_with(conn, &params, &mut records).await?;
                        Ok((park, records))
                    })
                })
                .await
                .map(|(park, records)| {
                    crate::audit::log(&records);
                    park
                }),
        );
    }
    results
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

/// An id as SQLite stores it (see [`crate::codec::DbId`]).
pub fn id_text(id: ItemId) -> String {
    id.0.hyphenated().to_string()
}

pub fn parse_id(text: &str) -> StoreResult<ItemId> {
    text.parse()
        .map_err(|error| StoreError::Corrupt(format!("work item id {text:?}: {error}")))
}

pub use crate::codec::{from_micros, micros};

// --- building blocks for item types ----------------------------------------

building_blocks!(SqliteConnection);

/// Nothing to take before an event insert: it runs under the write lock,
/// which serialises it with the loop's exit (DDR-34).
async fn lock_for_event(_conn: &mut SqliteConnection, _id: ItemId) -> StoreResult<()> {
    Ok(())
}

/// Nothing to tell: one process has the database.
async fn hint_work(_conn: &mut SqliteConnection, _id: ItemId) -> StoreResult<()> {
    Ok(())
}

/// A type filter as one JSON array parameter.
fn handled_types(types: &[String]) -> String {
    serde_json::Value::from(types.to_vec()).to_string()
}

/// A statement `bind_audit_fields` adds a record's fields to.
pub(crate) type AuditQuery<'q> =
    sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// Binds a record's fields after its id and item, as `audit/append.sql`
/// and each row of `audit/append_values.sql` take them: at (µs), actor,
/// kind, its JSON fields as the canonical text its hash covers, its
/// previous hash and its hash.
pub(crate) fn bind_audit_fields<'q>(
    query: AuditQuery<'q>,
    record: &'q crate::audit::NewAudit,
    texts: &crate::audit::Texts<'q>,
    prev: &'q str,
    hash: &'q str,
) -> AuditQuery<'q> {
    query
        .bind(crate::codec::micros(record.at))
        .bind(record.actor.as_str())
        .bind(record.kind.as_str())
        .bind(texts.old_state)
        .bind(texts.new_state)
        .bind(texts.trigger)
        .bind(texts.metadata)
        .bind(prev)
        .bind(hash)
}

/// The most chain heads [`HEADS`] remembers; past it, it starts again.
const REMEMBERED_HEADS: usize = 16_384;

/// The chain heads this process last appended, by item: the
/// guess `audit/append_if_head.sql` checks. A guess is never trusted:
/// the statement inserts only where it is still the item's head, so a
/// guess made stale by a rolled-back transaction, another process on the
/// same file or a forgotten item costs one statement, never a broken
/// chain. Item ids are UUIDv7, so one table serves every database the
/// process opens.
static HEADS: LazyLock<std::sync::Mutex<HashMap<ItemId, String>>> =
    LazyLock::new(std::sync::Mutex::default);

/// What [`HEADS`] guesses for `item`; a new chain (`''`) for an item it
/// does not know, which is right for every item created in this
/// transaction.
fn guess_head(item: ItemId) -> String {
    HEADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&item)
        .cloned()
        .unwrap_or_default()
}

/// Remembers `head` as `item`'s chain head.
pub(crate) fn remember_head(item: ItemId, head: String) {
    let mut heads = HEADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if heads.len() >= REMEMBERED_HEADS && !heads.contains_key(&item) {
        heads.clear();
    }
    heads.insert(item, head);
}

/// The first record of an item inserted on this transaction: its chain is
/// new, so it is chained after the empty hash and inserted as it is
/// (`audit/append.sql`), without the head guess's check.
pub(crate) async fn append_first_record(
    conn: &mut SqliteConnection,
    record: crate::audit::NewAudit,
) -> StoreResult<crate::audit::AuditRecord> {
    let id = uuid::Uuid::now_v7();
    let texts = record.texts();
    let hash = record.digest_as(id, &texts, "");
    let seq = insert_record(
        conn,
        sql!("audit/append.sql"),
        id,
        &record,
        &texts,
        "",
        &hash,
    )
    .await?
    .ok_or_else(|| StoreError::Corrupt("an audit append inserted nothing".into()))?;
    remember_head(record.item_id, hash.clone());
    Ok(record.into_record(id, seq, String::new(), hash))
}

/// Audit appends under the write lock, which already serialises every
/// chain: hash in Rust after the head, insert. Each record is first
/// appended after the head [`HEADS`] guesses, checked in the insert
/// (`audit/append_if_head.sql`): one statement where the guess holds, as
/// it does for a new item and for the next record of an item this process
/// wrote last. Otherwise the head is read (`audit/head.sql`) and the
/// record appended after it (`audit/append.sql`). Each JSON field is
/// bound as the canonical text its hash covers, as the batch of parks
/// binds it (`sqlite::park`).
pub(crate) async fn append_audit_records(
    conn: &mut SqliteConnection,
    records: Vec<crate::audit::NewAudit>,
) -> StoreResult<Vec<crate::audit::AuditRecord>> {
    let mut appended = Vec::with_capacity(records.len());
    for record in records {
        let id = uuid::Uuid::now_v7();
        let guess = guess_head(record.item_id);
        let hash = record.digest_as(id, &record.texts(), &guess);
        let if_head = sql!("audit/append_if_head.sql");
        let inserted =
            insert_record(conn, if_head, id, &record, &record.texts(), &guess, &hash).await?;
        appended.push(appended_or_after_head(conn, id, record, inserted, guess, hash).await?);
    }
    Ok(appended)
}

/// The record appended as `id` after the `guess`ed head with `hash`, if
/// that insert made it (`inserted`, its sequence number); else read the
/// head and append it after that (`audit/append.sql`). Remembers the head.
async fn appended_or_after_head(
    conn: &mut SqliteConnection,
    id: uuid::Uuid,
    record: crate::audit::NewAudit,
    inserted: Option<i64>,
    guess: String,
    hash: String,
) -> StoreResult<crate::audit::AuditRecord> {
    let (seq, prev, hash) = match inserted {
        Some(seq) => (seq, guess, hash),
        None => {
            let prev: String = sqlx::query_scalar(sql!("audit/head.sql"))
                .bind(DbId(record.item_id))
                .fetch_one(&mut *conn)
                .await?;
            let texts = record.texts();
            let hash = record.digest_as(id, &texts, &prev);
            let append = sql!("audit/append.sql");
            let seq = insert_record(conn, append, id, &record, &texts, &prev, &hash)
                .await?
                .ok_or_else(|| StoreError::Corrupt("an audit append inserted nothing".into()))?;
            (seq, prev, hash)
        }
    };
    remember_head(record.item_id, hash.clone());
    Ok(record.into_record(id, seq, prev, hash))
}

/// Runs `statement`, one statement whose parameters are numbered (`?1` or
/// `$1` on) and given in `arguments`, then appends `record` after it as
/// [`append_audits`](blocks::append_audits) does, last: where the chain's
/// head is the one this process remembers, the statement and
/// `audit/append_if_head.sql` (its parameters numbered after the
/// statement's) run as one query, one call on the connection's thread
/// where two statements take two. A store module's write that ends with
/// one row and its record takes this instead of its statement and
/// `append_audits`; SQLite runs a connection's calls on a thread of its
/// own, and on the single writer each hand-over counts.
pub async fn execute_then_append_audit(
    conn: &mut SqliteConnection,
    statement: &'static str,
    arguments: sqlx::sqlite::SqliteArguments,
    record: crate::audit::NewAudit,
) -> StoreResult<crate::audit::AuditRecord> {
    #[cfg(feature = "testing")]
    if !crate::testing::audit_enabled() {
        sqlx::query_with(statement, arguments)
            .execute(&mut *conn)
            .await?;
        return Ok(record.chained(String::new()));
    }
    let query = then_append_if_head(statement, sqlx::Arguments::len(&arguments));
    let id = uuid::Uuid::now_v7();
    let texts = record.texts();
    let guess = guess_head(record.item_id);
    let hash = record.digest_as(id, &texts, &guess);
    let row = bind_audit_fields(
        sqlx::query_with(query, arguments)
            .bind(DbId(ItemId(id)))
            .bind(DbId(record.item_id)),
        &record,
        &texts,
        &guess,
        &hash,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let inserted = row.map(|row| row.try_get::<i64, _>(0)).transpose()?;
    appended_or_after_head(conn, id, record, inserted, guess, hash).await
}

/// `statement` followed by `audit/append_if_head.sql` with its parameters
/// numbered after the statement's `params`, made once per statement.
fn then_append_if_head(statement: &'static str, params: usize) -> &'static str {
    type Queries = HashMap<(&'static str, usize), &'static str>;
    static QUERIES: LazyLock<std::sync::Mutex<Queries>> = LazyLock::new(std::sync::Mutex::default);
    let mut queries = QUERIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    queries.entry((statement, params)).or_insert_with(|| {
        let append = renumbered(sql!("audit/append_if_head.sql"), params);
        // The separator on a line of its own: the statement may end with
        // a comment.
        let statement = statement.trim_end().trim_end_matches(';');
        let query = format!("{statement}\n;\n{append}");
        Box::leak(query.into_boxed_str())
    })
}

/// `sql` with each parameter `?N` numbered `?N+by`.
fn renumbered(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('?') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let n: usize = rest[..digits].parse().expect("ASCII digits");
            out.push_str(&(n + by).to_string());
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Runs `statement` (`audit/append.sql` or `audit/append_if_head.sql`)
/// for `record` as record `id` after `prev`; its sequence number, if it
/// inserted it.
async fn insert_record(
    conn: &mut SqliteConnection,
    statement: &'static str,
    id: uuid::Uuid,
    record: &crate::audit::NewAudit,
    texts: &crate::audit::Texts<'_>,
    prev: &str,
    hash: &str,
) -> StoreResult<Option<i64>> {
    let query = sqlx::query(statement)
        .bind(DbId(ItemId(id)))
        .bind(DbId(record.item_id));
    let row = bind_audit_fields(query, record, texts, prev, hash)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.map(|row| row.try_get::<i64, _>(0)).transpose()?)
}

/// Claims due items and reads their snapshots, inside the writer's
/// transaction: the snapshots as one JSON row (`items/due_snapshots.sql`),
/// then the lease on exactly those items (`items/claim_ids.sql`).
async fn claim_due(
    conn: &mut SqliteConnection,
    params: &crate::ClaimDueParams,
) -> StoreResult<Vec<(Snapshot, crate::Lease)>> {
    let DbJson(due): DbJson<Vec<DueItem>> = sqlx::query_scalar(sql!("items/due_snapshots.sql"))
        .bind(handled_types(&params.handled_types))
        .bind(DbTime(params.now))
        .bind(i64::from(params.limit))
        .bind(params.after.map(DbId))
        .fetch_one(&mut *conn)
        .await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::Value::from(due.iter().map(|item| item.id.clone()).collect::<Vec<_>>());
    let leased = sqlx::query(sql!("items/claim_ids.sql"))
        .bind(DbJson(&ids))
        .bind(DbTime(params.lease_until))
        .execute(&mut *conn)
        .await?;
    if leased.rows_affected() != due.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "{} of {} due items leased",
            leased.rows_affected(),
            due.len()
        )));
    }
    let now = crate::to_micros(params.now);
    let until = crate::to_micros(params.lease_until);
    due.into_iter()
        .map(|item| {
            // claim_ids.sql drew the next epoch of the one answered.
            let epoch = wq_core::LeaseEpoch(item.lease_epoch + 1);
            let snapshot = item.into_snapshot(now, until)?;
            let id = snapshot.view.item.id;
            Ok((snapshot, crate::Lease { id, until, epoch }))
        })
        .collect()
}

/// An item as `items/due_snapshots.sql` renders it (times in microseconds).
#[derive(serde::Deserialize)]
struct DueItem {
    id: String,
    item_type: String,
    phase: String,
    actionable: i64,
    attempts: i32,
    error: Option<String>,
    idempotency_key: Option<String>,
    caller_identity: Option<String>,
    created_at: i64,
    updated_at: i64,
    last_event_at: Option<i64>,
    lease_epoch: i64,
    has_events: i64,
    dimensions: Vec<common::SnapshotDimension>,
}

impl DueItem {
    /// The snapshot of the item as claimed, leased until `until`.
    fn into_snapshot(self, now: OffsetDateTime, until: OffsetDateTime) -> StoreResult<Snapshot> {
        let item = wq_core::WorkItem {
            id: parse_id(&self.id)?,
            item_type: self.item_type,
            phase: common::parse_phase(&self.phase)?,
            actionable: self.actionable != 0,
            attempts: self.attempts,
            error: self.error,
            leased_until: Some(until),
            idempotency_key: self.idempotency_key,
            caller_identity: self.caller_identity,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
            last_event_at: self.last_event_at.map(from_micros).transpose()?,
        };
        Ok(Snapshot {
            view: wq_core::ItemView {
                item,
                dimensions: self
                    .dimensions
                    .into_iter()
                    .map(common::SnapshotDimension::into_dimension)
                    .collect::<StoreResult<_>>()?,
                now,
                lease: None,
            },
            has_events: self.has_events != 0,
        })
    }
}

async fn has_pending_events(conn: &mut SqliteConnection, id: ItemId) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(sql!("events/exists.sql"))
        .bind(DbId(id))
        .fetch_one(&mut *conn)
        .await?)
}

/// The loop's exit inside the caller's write transaction (`BEGIN
/// IMMEDIATE`, so no event can commit between the check and the update,
/// DDR-34): lease check, the outcome if any, then park unless events wait.
/// With events pending the outcome stays written and the lease held.
async fn park_with(
    conn: &mut SqliteConnection,
    params: &ParkParams,
    records: &mut Vec<crate::audit::AuditRecord>,
) -> StoreResult<Park> {
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
            // The park's own writes take no other lock: the record goes
            // with the outcome.
            let audits = crate::audit::park_succeeded(lease.id, params.now, outcome);
            records.extend(append_audits(&mut *conn, audits).await?);
        }
        None => {
            lease_state(&mut *conn, lease).await?;
        }
    }
    if has_pending_events(&mut *conn, lease.id).await? {
        return Ok(Park::EventsPending);
    }
    let result = sqlx::query(sql!("items/park.sql"))
        .bind(DbId(lease.id))
        .bind(DbTime(lease.until))
        .execute(&mut *conn)
        .await?;
    common::lease_lost_unless_one_row(result.rows_affected(), lease.id)?;
    sqlx::query(sql!("dimensions/clear_consumed_timers.sql"))
        .bind(DbId(lease.id))
        .bind(DbTime(params.now))
        .execute(&mut *conn)
        .await?;
    Ok(Park::Parked)
}

impl_store!(SqliteStore, Sqlite, {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    /// One database file, one process: no other process makes work due.
    async fn work_hints(&self) -> StoreResult<Option<crate::WorkHints>> {
        Ok(None)
    }

    /// One database file, one process: no election.
    async fn lead(&self, task: &str) -> StoreResult<Option<crate::Leadership>> {
        Ok(Some(crate::Leadership::sole(task)))
    }

    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<Snapshot>> {
        // One read transaction: view and pending events from one snapshot.
        let mut tx = self.read_transaction().await?;
        let Some(view) = read_view(&mut tx, id, now).await? else {
            return Ok(None);
        };
        let has_events = has_pending_events(&mut tx, id).await?;
        tx.commit().await?;
        Ok(Some(Snapshot { view, has_events }))
    }

    async fn item_claim_due(
        &self,
        params: crate::ClaimDueParams,
    ) -> StoreResult<Vec<(Snapshot, crate::Lease)>> {
        if params.handled_types.is_empty() || params.limit == 0 {
            return Ok(Vec::new());
        }
        self.write(move |conn| Box::pin(async move { claim_due(conn, &params).await }))
            .await
    }

    async fn item_park_with(&self, params: ParkParams) -> StoreResult<Park> {
        // Inside the batch's BEGIN IMMEDIATE: event_insert cannot commit
        // between the check and the update (DDR-34). Parks that arrive
        // together run as one job ([`park`]).
        // Prepared here, beside the other callers, not in the writer's
        // transaction.
        self.parks.call(park::ParkRequest::new(params)).await
    }
});

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
    fn parameters_are_numbered_after_the_statements() {
        assert_eq!(renumbered("?1, ?10 and ?2", 6), "?7, ?16 and ?8");
        assert_eq!(renumbered("no parameter ? here", 6), "no parameter ? here");
        let query = then_append_if_head("UPDATE t SET a = $1 -- a comment", 1);
        assert!(
            query.starts_with("UPDATE t SET a = $1 -- a comment\n;\n"),
            "{query}"
        );
        assert!(query.contains("SELECT ?2, ?3, ?4"), "{query}");
        assert!(
            query.contains("?11, ?12\n") && query.contains("= ?11"),
            "{query}"
        );
        assert!(!query.contains("?13"), "{query}");
    }
}
