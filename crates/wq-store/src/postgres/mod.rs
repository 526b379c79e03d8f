//! PostgreSQL backend of the [`Store`]: N identical replicas share one
//! database.
//!
//! # Connecting
//!
//! [`PgStore::connect`] with a `postgres://` URL and a pool size. Times are
//! `timestamptz`, ids `uuid`, JSON `jsonb` (the audit records' JSON fields
//! `json`: their text as written, migration 0017).
//!
//! # Concurrency
//!
//! Claims are conditional `UPDATE`s: of two concurrent claimers the second
//! re-checks the row after the first commits and finds it leased (or, in a
//! batch, skips the row the first holds). Claims and parks that arrive
//! together from different workers share one statement and one commit
//! (`coalesce`: `items/claim_snapshots.sql`, `wq_park_many`); alone,
//! each runs as before, in one round trip.
//! Every loop write compares `leased_until` with the holder's [`Lease`].
//! The loop's exit ([`Store::item_park`]) and [`Store::event_insert`] both take
//! `pg_advisory_xact_lock(lock_key(id))` first, so an event inserted
//! while a worker decides to exit is either seen by the exit's check or
//! committed after the lease is released, with `actionable = true` (DDR-34).
//!
//! # Lock order
//!
//! Every transaction that takes more than one lock on an item takes them in
//! this order: the item's advisory lock ([`lock_item`]), its `work_items`
//! row, then its other rows (a type's detail row, dimensions, events). The
//! loop's exit holds the advisory lock while it waits for the row, so a
//! writer that locked the row first and then asked for the advisory lock
//! (through [`insert_event`], say) would deadlock with it.
//!
//! # Extending from an item type
//!
//! An item type's own store module (e.g. `mr_details`) builds on this one:
//!
//! - [`MIGRATOR`] ignores migrations it does not know, so the type runs its
//!   own [`sqlx::migrate::Migrator`] (also with `set_ignore_missing(true)`)
//!   on [`PgStore::pool`] after [`Store::migrate`]. Both record into
//!   `_sqlx_migrations`, so the type's versions must not collide with these
//!   (this crate uses 1–999; use e.g. 1000+ per type).
//! - [`insert_item`] and [`upsert_dimension`] run on a `&mut PgConnection`,
//!   so the type can create its item and its detail row in one transaction:
//!
//! ```no_run
//! # async fn example(store: &wq_store::postgres::PgStore, item: wq_store::NewItem)
//! # -> wq_store::StoreResult<()> {
//! let mut tx = store.pool().begin().await?;
//! let work_item = wq_store::postgres::insert_item(&mut tx, &item).await?;
//! sqlx::query("INSERT INTO mr_details (work_item_id) VALUES ($1)")
//!     .bind(work_item.id.0)
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! # Ok(())
//! # }
//! ```

use std::cell::RefCell;
use std::sync::{Arc, LazyLock};

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{PgConnection, Postgres, Transaction};
use time::OffsetDateTime;
use wq_core::{ItemId, ItemView, Phase};

#[cfg(doc)]
use crate::Store;
use crate::coalesce::Coalescer;
use crate::codec::{DbId, DbJson, DbRow, DbTime};
use crate::common::{self, BoxFuture, EmbeddedMigration};
use crate::{ClaimParams, Lease, Park, ParkParams, Snapshot, StoreError, StoreResult, to_micros};

/// Loads one statement from `queries/`.
macro_rules! sql {
    ($path:literal) => {
        include_str!(concat!("queries/", $path))
    };
}

/// The generic queue's migrations for PostgreSQL. Ignores versions it does
/// not know (an item type's own migrations).
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    common::migrator(&[
        EmbeddedMigration {
            version: 1,
            description: "generic_queue",
            sql: include_str!("../../migrations/postgres/0001_generic_queue.sql"),
        },
        EmbeddedMigration {
            version: 2,
            description: "loop_functions",
            sql: include_str!("../../migrations/postgres/0002_loop_functions.sql"),
        },
        EmbeddedMigration {
            version: 3,
            description: "item_place",
            sql: include_str!("../../migrations/postgres/0003_item_place.sql"),
        },
        EmbeddedMigration {
            version: 4,
            description: "failing_since",
            sql: include_str!("../../migrations/postgres/0004_failing_since.sql"),
        },
        EmbeddedMigration {
            version: 5,
            description: "audit",
            sql: include_str!("../../migrations/postgres/0005_audit.sql"),
        },
        EmbeddedMigration {
            version: 6,
            description: "event_delivery",
            sql: include_str!("../../migrations/postgres/0006_event_delivery.sql"),
        },
        EmbeddedMigration {
            version: 7,
            description: "ui_sessions",
            sql: include_str!("../../migrations/postgres/0007_ui_sessions.sql"),
        },
        EmbeddedMigration {
            version: 8,
            description: "audit_and_batches",
            sql: include_str!("../../migrations/postgres/0008_audit_and_batches.sql"),
        },
        EmbeddedMigration {
            version: 9,
            description: "park_batch",
            sql: include_str!("../../migrations/postgres/0009_park_batch.sql"),
        },
        EmbeddedMigration {
            version: 10,
            description: "audit_lean",
            sql: include_str!("../../migrations/postgres/0010_audit_lean.sql"),
        },
        EmbeddedMigration {
            version: 11,
            description: "item_fillfactor",
            sql: include_str!("../../migrations/postgres/0011_item_fillfactor.sql"),
        },
        EmbeddedMigration {
            version: 12,
            description: "park_batch_heads",
            sql: include_str!("../../migrations/postgres/0012_park_batch_heads.sql"),
        },
        EmbeddedMigration {
            version: 13,
            description: "audit_heads_fillfactor",
            sql: include_str!("../../migrations/postgres/0013_audit_heads_fillfactor.sql"),
        },
        EmbeddedMigration {
            version: 14,
            description: "audit_unarchived_read",
            sql: include_str!("../../migrations/postgres/0014_audit_unarchived_read.sql"),
        },
        EmbeddedMigration {
            version: 15,
            description: "audit_bytes_and_cursor",
            sql: include_str!("../../migrations/postgres/0015_audit_bytes_and_cursor.sql"),
        },
        EmbeddedMigration {
            version: 16,
            description: "audit_chain_locks",
            sql: include_str!("../../migrations/postgres/0016_audit_chain_locks.sql"),
        },
        EmbeddedMigration {
            version: 17,
            description: "audit_json_text",
            sql: include_str!("../../migrations/postgres/0017_audit_json_text.sql"),
        },
        EmbeddedMigration {
            version: 18,
            description: "audit_append_record",
            sql: include_str!("../../migrations/postgres/0018_audit_append_record.sql"),
        },
        EmbeddedMigration {
            version: 19,
            description: "park_batch_one_pass",
            sql: include_str!("../../migrations/postgres/0019_park_batch_one_pass.sql"),
        },
        EmbeddedMigration {
            version: 20,
            description: "lease_epoch",
            sql: include_str!("../../migrations/postgres/0020_lease_epoch.sql"),
        },
    ])
});

/// The PostgreSQL store. Cloning shares the pool and the batches.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    batches: Arc<Batches>,
    /// Sends the work hints of [`PgStore::write`]'s transactions once they
    /// committed.
    hinter: Arc<Hinter>,
    /// Names this store's connections in the work hints they send
    /// ([`crate::Store::work_hints`]), so its own listener skips them.
    origin: uuid::Uuid,
}

/// Work hints kept while the engine is busy; more are dropped.
const HINTS_BUFFERED: usize = 4096;

/// At most this many claims, or parks, share one statement.
const MAX_BATCH: usize = 256;
/// At most this many claim batches, and as many park batches, run at once.
const BATCHES_IN_FLIGHT: usize = 2;

/// Claims and parks that arrive together from different workers, each
/// batch in one statement ([`crate::coalesce`]).
#[derive(Debug)]
struct Batches {
    claims: Coalescer<ClaimParams, Claimed>,
    parks: Coalescer<ParkRequest, Park>,
    /// Batches of parks that failed and ran one by one.
    #[cfg_attr(
        not(feature = "testing"),
        expect(dead_code, reason = "read by tests and benchmarks (`testing`)")
    )]
    park_fallbacks: Arc<std::sync::atomic::AtomicUsize>,
}

impl Batches {
    fn new(pool: &PgPool) -> Self {
        let claim_pool = pool.clone();
        let park_pool = pool.clone();
        let park_fallbacks: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let fallbacks = Arc::clone(&park_fallbacks);
        Self {
            park_fallbacks,
            claims: Coalescer::new(
                MAX_BATCH,
                BATCHES_IN_FLIGHT,
                Arc::new(move |claims| Box::pin(claim_batch(claim_pool.clone(), claims))),
            ),
            parks: Coalescer::new(
                MAX_BATCH,
                BATCHES_IN_FLIGHT,
                Arc::new(move |parks| {
                    Box::pin(park_batch(park_pool.clone(), Arc::clone(&fallbacks), parks))
                }),
            ),
        }
    }
}

impl PgStore {
    /// Connects a pool of at most `max_connections`. Does not migrate.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        Self::connect_with_timeout(url, max_connections, crate::DEFAULT_CONNECT_TIMEOUT).await
    }

    /// [`PgStore::connect`], giving up when no connection is made within
    /// `connect_timeout` (a refused or unreachable server is retried until
    /// then); it also bounds every later wait for a pooled connection.
    pub async fn connect_with_timeout(
        url: &str,
        max_connections: u32,
        connect_timeout: std::time::Duration,
    ) -> StoreResult<Self> {
        let origin = uuid::Uuid::new_v4();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(connect_timeout)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    sqlx::query(sql!("hints/origin.sql"))
                        .bind(origin.to_string())
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        Ok(Self::with_origin(pool, origin))
    }

    /// Wraps an existing pool. Its connections send work hints without
    /// an origin, so this store's own listener hears them too (each then
    /// costs a claim that finds the item taken).
    pub fn from_pool(pool: PgPool) -> Self {
        Self::with_origin(pool, uuid::Uuid::new_v4())
    }

    fn with_origin(pool: PgPool, origin: uuid::Uuid) -> Self {
        let batches = Arc::new(Batches::new(&pool));
        let hinter = Arc::new(Hinter::new(pool.clone()));
        Self {
            pool,
            batches,
            hinter,
            origin,
        }
    }

    /// The largest batch of claims and of parks run so far, for tests that
    /// check concurrent calls share statements.
    #[cfg(feature = "testing")]
    pub fn largest_batches(&self) -> (usize, usize) {
        (
            self.batches.claims.largest_batch(),
            self.batches.parks.largest_batch(),
        )
    }

    /// How many claims and parks ran, in how many statements (batches),
    /// and how many batches of parks failed and ran one by one, for
    /// benchmarks: `((claims, claim batches), (parks, park batches),
    /// fallbacks)`.
    #[cfg(feature = "testing")]
    pub fn batch_counts(&self) -> ((usize, usize), (usize, usize), usize) {
        (
            self.batches.claims.counts(),
            self.batches.parks.counts(),
            self.batches
                .park_fallbacks
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The pool, for an item type's own tables and statements.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs `statements` in one transaction: begin, run, commit (rolled
    /// back if they return an error). The same shape as
    /// [`crate::sqlite::SqliteStore::write`]; `statements` must only use the
    /// connection it is given.
    pub async fn write<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
    {
        let mut tx = self.pool.begin().await?;
        // The work hints of the transaction's statements wait for its
        // commit (`hint_work`).
        let (value, hints) = PENDING_HINTS
            .scope(RefCell::new(Vec::new()), async {
                let value = statements(&mut tx).await;
                (value, PENDING_HINTS.with(RefCell::take))
            })
            .await;
        let value = value?;
        tx.commit().await?;
        self.hinter.send(hints);
        Ok(value)
    }

    /// A write that needs no transaction of its own (one statement, or
    /// statements that are each safe alone), on a pooled connection.
    async fn autocommit<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
    {
        let mut conn = self.pool.acquire().await?;
        statements(&mut conn).await
    }

    /// A read of one snapshot.
    async fn read_transaction(&self) -> sqlx::Result<Transaction<'static, Postgres>> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
    }
}

// --- building blocks for item types ----------------------------------------

building_blocks!(PgConnection);

/// Whether the session `conn` still holds the leadership of `task`; false
/// when the session is gone.
pub(crate) async fn session_holds(conn: &mut PgConnection, task: &str) -> bool {
    sqlx::query_scalar::<_, bool>(sql!("leader/held.sql"))
        .bind(task)
        .fetch_one(conn)
        .await
        .unwrap_or(false)
}

/// Unlocks `task` and closes the session; a failure leaves it to the
/// server, which frees the lock with the closed session.
pub(crate) async fn session_release(mut conn: PgConnection, task: &str) {
    if let Err(error) = sqlx::query(sql!("leader/unlock.sql"))
        .bind(task)
        .execute(&mut conn)
        .await
    {
        tracing::debug!(task, %error, "leadership unlock failed; closing its session frees it");
    }
    if let Err(error) = sqlx::Connection::close(conn).await {
        tracing::debug!(task, %error, "closing the leadership session failed");
    }
}

/// The 63-bit key of the item's advisory lock.
fn lock_key(id: ItemId) -> i64 {
    let low = id.0.as_u128() as u64;
    (low & 0x7FFF_FFFF_FFFF_FFFF) as i64
}

/// Takes the item's transaction-scoped advisory lock (DDR-34): the first
/// lock of the store's lock order.
pub async fn lock_item(conn: &mut PgConnection, id: ItemId) -> StoreResult<()> {
    sqlx::query(sql!("items/advisory_lock.sql"))
        .bind(lock_key(id))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// An event insert takes the item's advisory lock first, so it is
/// serialised with the loop's exit (DDR-34).
async fn lock_for_event(conn: &mut PgConnection, id: ItemId) -> StoreResult<()> {
    lock_item(conn, id).await
}

tokio::task_local! {
    /// The work hints of the transaction [`PgStore::write`] runs, sent once
    /// it committed.
    static PENDING_HINTS: RefCell<Vec<ItemId>>;
}

/// Tells the other processes that item `id` was made due, once the
/// transaction commits. Inside [`PgStore::write`] the hint waits for the
/// commit and goes out after it ([`Hinter`]): a `NOTIFY` inside a write
/// transaction takes a lock that PostgreSQL holds until the commit is
/// flushed, so every notifying commit would wait for the one before it,
/// its fsync included (a third of the throughput of concurrent writes on
/// this machine class). Elsewhere (an autocommit statement, a caller's own
/// transaction) the notification goes with the transaction
/// (`hints/work.sql`).
async fn hint_work(conn: &mut PgConnection, id: ItemId) -> StoreResult<()> {
    if PENDING_HINTS
        .try_with(|pending| pending.borrow_mut().push(id))
        .is_ok()
    {
        return Ok(());
    }
    sqlx::query(sql!("hints/work.sql"))
        .bind(id.0.to_string())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Sends committed transactions' work hints, the ones that arrive while a
/// send runs together in the next (`hints/work_many.sql`, one statement of
/// its own: no write, so no flush to wait for). A failed send is dropped:
/// hints are hints, and the sweep finds the work anyway.
#[derive(Debug)]
struct Hinter {
    pool: PgPool,
    queue: std::sync::Mutex<Vec<ItemId>>,
    sending: std::sync::atomic::AtomicBool,
}

impl Hinter {
    fn new(pool: PgPool) -> Self {
        Self {
            pool,
            queue: std::sync::Mutex::new(Vec::new()),
            sending: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn send(self: &Arc<Self>, hints: Vec<ItemId>) {
        if hints.is_empty() {
            return;
        }
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(hints);
        if !self.sending.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).drain());
        }
    }

    async fn drain(self: Arc<Self>) {
        use std::sync::atomic::Ordering;
        loop {
            let batch = std::mem::take(
                &mut *self
                    .queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if batch.is_empty() {
                self.sending.store(false, Ordering::Release);
                // A hint queued between the take and the store finds
                // `sending` still set and leaves it to this task.
                let queued = !self
                    .queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .is_empty();
                if queued && !self.sending.swap(true, Ordering::AcqRel) {
                    continue;
                }
                return;
            }
            let ids: Vec<String> = batch.iter().map(|id| id.0.to_string()).collect();
            if let Err(error) = sqlx::query(sql!("hints/work_many.sql"))
                .bind(ids)
                .execute(&self.pool)
                .await
            {
                tracing::debug!(%error, hints = batch.len(), "work hints not sent");
            }
        }
    }
}

/// Hands the work hints `listener` hears, but those of `own`, to `hints`
/// until nobody takes them; a lost connection is a [`crate::Hint::Lost`]
/// (the listener connects again on its next wait).
async fn relay_hints(
    mut listener: sqlx::postgres::PgListener,
    own: String,
    hints: tokio::sync::mpsc::Sender<crate::Hint>,
) {
    loop {
        let heard = tokio::select! {
            () = hints.closed() => return,
            heard = listener.try_recv() => heard,
        };
        let hint = match heard {
            Ok(Some(notification)) => {
                let Some((origin, id)) = notification.payload().split_once(' ') else {
                    continue;
                };
                if origin == own {
                    continue;
                }
                match id.parse() {
                    Ok(id) => crate::Hint::Due(id),
                    Err(_) => continue,
                }
            }
            Ok(None) => crate::Hint::Lost,
            Err(error) => {
                tracing::warn!(%error, "listening for work hints failed: {error}; trying again");
                tokio::select! {
                    () = hints.closed() => return,
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
                crate::Hint::Lost
            }
        };
        // Hints are hints: when the engine is behind, a full buffer drops
        // them (a sweep finds the items), a lost connection is kept.
        match hint {
            crate::Hint::Lost => {
                if hints.send(hint).await.is_err() {
                    return;
                }
            }
            crate::Hint::Due(_) => {
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = hints.try_send(hint)
                {
                    return;
                }
            }
        }
    }
}

/// A type filter as a `text[]` parameter.
fn handled_types(types: &[String]) -> Vec<String> {
    types.to_vec()
}

/// Audit appends in one call of `wq_audit_append` (migrations 0008, 0016),
/// which locks the chains, reads their heads, hashes and inserts; a single
/// record (most transactions' one) through `wq_audit_append_record`
/// (migration 0018), which does the same with the record's fields as
/// parameters.
pub(crate) async fn append_audit_records(
    conn: &mut PgConnection,
    mut records: Vec<crate::audit::NewAudit>,
) -> StoreResult<Vec<crate::audit::AuditRecord>> {
    #[cfg(feature = "testing")]
    let single = records.len() == 1 && crate::testing::append_record_function_enabled();
    #[cfg(not(feature = "testing"))]
    let single = records.len() == 1;
    if single {
        let record = records.pop().expect("one record");
        return Ok(vec![append_audit_record(conn, record).await?]);
    }
    let (records, payload) = crate::audit::unchained_with_payload(records);
    let DbJson(answer) = sqlx::query_scalar(sql!("audit/append.sql"))
        .bind(DbJson(payload))
        .fetch_one(&mut *conn)
        .await?;
    crate::audit::appended(records, answer)
}

/// The first record of an item inserted on this transaction: its chain is
/// new, so it is chained after the empty hash here and inserted as it is
/// (`audit/append_first.sql`), under the trail's barrier alone.
pub(crate) async fn append_first_record(
    conn: &mut PgConnection,
    record: crate::audit::NewAudit,
) -> StoreResult<crate::audit::AuditRecord> {
    // A schema before migration 0015 stores hashes as text: tests that
    // write there append as it did.
    #[cfg(feature = "testing")]
    if !crate::testing::append_record_function_enabled() {
        let mut appended = append_audit_records(conn, vec![record]).await?;
        return Ok(appended.remove(0));
    }
    let id = uuid::Uuid::now_v7();
    let texts = record.texts();
    let hash = record.digest_as(id, &texts, "");
    let (seq,): (i64,) = bind_record(
        sqlx::query_as(sql!("audit/append_first.sql")),
        id,
        &record,
        &texts,
    )
    .bind(hash.as_str())
    .fetch_one(&mut *conn)
    .await?;
    Ok(record.into_record(id, seq, String::new(), hash))
}

/// A record's own fields, bound as `$1`-`$9` of `audit/append_record.sql`
/// and `audit/append_first.sql`: id, item, time, actor, kind, and the JSON
/// fields as their canonical text.
fn bind_record<'q, O>(
    query: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
    id: uuid::Uuid,
    record: &'q crate::audit::NewAudit,
    texts: &crate::audit::Texts<'q>,
) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(id)
        .bind(record.item_id.0)
        .bind(to_micros(record.at))
        .bind(record.actor.as_str())
        .bind(record.kind.as_str())
        .bind(texts.old_state)
        .bind(texts.new_state)
        .bind(texts.trigger)
        .bind(texts.metadata)
}

/// One audit record appended through `wq_audit_append_record`.
async fn append_audit_record(
    conn: &mut PgConnection,
    record: crate::audit::NewAudit,
) -> StoreResult<crate::audit::AuditRecord> {
    let append = AuditAppend::new(record);
    let (seq, prev_hash, hash): (i64, String, String) = append
        .bind(sqlx::query_as(sql!("audit/append_record.sql")))
        .fetch_one(&mut *conn)
        .await?;
    Ok(append.appended(seq, prev_hash, hash))
}

/// An audit record ready for `wq_audit_append_record`'s eleven parameters
/// (migration 0018), for an item type's store module whose own SQL
/// function writes its rows and then appends the record through that
/// function: one round trip where its statements and
/// [`append_audits`](blocks::append_audits) after them take two. The
/// function must call `wq_audit_append_record` after its own statements
/// (in PL/pgSQL, where each statement's foreign-key checks run before the
/// next), so that the chain's lock is still the last one its transaction
/// takes, as with `append_audits`.
#[derive(Debug)]
pub struct AuditAppend {
    id: uuid::Uuid,
    record: crate::audit::NewAudit,
    prefix: String,
    suffix: String,
}

impl AuditAppend {
    /// `record`, with its id and its canonical text's parts around the
    /// previous hash.
    pub fn new(record: crate::audit::NewAudit) -> Self {
        let id = uuid::Uuid::now_v7();
        let (prefix, suffix) = record.hash_parts_as(id, &record.texts());
        Self {
            id,
            record,
            prefix,
            suffix,
        }
    }

    /// Whether records are written: not where a benchmark turned the trail
    /// off (`testing::set_audit`, only with the `testing` feature), where
    /// [`append_audits`](blocks::append_audits) writes none and the caller
    /// writes its rows alone.
    pub fn enabled() -> bool {
        #[cfg(feature = "testing")]
        if !crate::testing::audit_enabled() || !crate::testing::append_record_function_enabled() {
            return false;
        }
        true
    }

    /// Binds the record as the query's next eleven parameters, in
    /// `wq_audit_append_record`'s order: id, item, time, actor, kind, the
    /// JSON fields as their canonical text, and its canonical text's parts
    /// before and after the previous hash.
    pub fn bind<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
        bind_record(query, self.id, &self.record, &self.record.texts())
            .bind(self.prefix.as_str())
            .bind(self.suffix.as_str())
    }

    /// The record as appended, from `wq_audit_append_record`'s answer: its
    /// sequence number, its previous hash and its hash (hex).
    pub fn appended(self, seq: i64, prev_hash: String, hash: String) -> crate::audit::AuditRecord {
        self.record.into_record(self.id, seq, prev_hash, hash)
    }
}

// --- one-statement loop steps ------------------------------------------------

/// A row of `items/snapshot.sql` or `items/claim_snapshot.sql`.
fn snapshot_from_row(row: &PgRow, now: OffsetDateTime) -> StoreResult<Snapshot> {
    let item = common::item_from_row(row)?;
    let has_events: bool = row.decode("has_events")?;
    let DbJson(rows) = row.decode::<DbJson<Vec<common::SnapshotDimension>>>("dimensions")?;
    let dimensions = rows
        .into_iter()
        .map(common::SnapshotDimension::into_dimension)
        .collect::<StoreResult<_>>()?;
    Ok(Snapshot {
        view: ItemView {
            item,
            dimensions,
            now: to_micros(now),
            lease: None,
        },
        has_events,
    })
}

/// RFC 3339 text that PostgreSQL parses back to the same microsecond.
fn rfc3339(at: OffsetDateTime) -> String {
    to_micros(at)
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a UTC timestamp formats as RFC 3339")
}

/// One call of `wq_park` (see `items/park_audited.sql`).
#[derive(Debug, Clone)]
struct ParkCall {
    lease: Lease,
    now: OffsetDateTime,
    write_outcome: bool,
    phase: Option<Phase>,
    error: Option<String>,
}

impl ParkCall {
    /// The park and the outcome's audit `records` in one statement, which
    /// commits alone: no outcome without its records.
    async fn run_audited(
        &self,
        conn: &mut PgConnection,
        dimensions: &[wq_core::DimensionUpdate],
        records: Vec<crate::audit::NewAudit>,
    ) -> StoreResult<(Park, Vec<crate::audit::AuditRecord>)> {
        let (records, payload) = crate::audit::unchained_with_payload(records);
        let dimensions: Vec<serde_json::Value> = dimensions
            .iter()
            .map(|update| {
                let mut row = serde_json::json!({
                    "dimension": update.dimension,
                    "variant": update.variant,
                    "status": update.status.as_str(),
                    "pending_until": update.pending_until.map(rfc3339),
                });
                if let Some(detail) = &update.detail {
                    row["detail"] = detail.clone();
                }
                row
            })
            .collect();
        let DbJson(answer) =
            sqlx::query_scalar::<_, DbJson<ParkAudited>>(sql!("items/park_audited.sql"))
                .bind(DbId(self.lease.id))
                .bind(DbTime(self.lease.until))
                .bind(DbTime(self.now))
                .bind(lock_key(self.lease.id))
                .bind(self.write_outcome)
                .bind(self.phase.map(Phase::as_str))
                .bind(self.error.as_deref())
                .bind(DbJson(serde_json::Value::Array(dimensions)))
                .bind(DbJson(payload))
                .fetch_one(&mut *conn)
                .await?;
        let parked = self.answer(&answer.answer)?;
        Ok((parked, crate::audit::appended(records, answer.records)?))
    }

    fn answer(&self, answer: &str) -> StoreResult<Park> {
        match answer {
            "parked" => Ok(Park::Parked),
            "events_pending" => Ok(Park::EventsPending),
            "lease_lost" => Err(StoreError::LeaseLost(self.lease.id)),
            other => Err(StoreError::Corrupt(format!("wq_park answered {other:?}"))),
        }
    }
}

/// A park waiting for its batch: the call, the outcome's dimension rows and
/// its audit records.
#[derive(Debug, Clone)]
struct ParkRequest {
    call: ParkCall,
    dimensions: Vec<wq_core::DimensionUpdate>,
    records: Vec<crate::audit::NewAudit>,
}

/// Parks `requests` with one statement per step (`wq_park_batch`, then
/// the records the caller chained, in one transaction); a batch of one,
/// one with two parks of one item, or one whose transaction failed (rolled
/// back) runs each park alone (`wq_park_audited`). Logs the committed
/// records (DDR-28).
async fn park_batch(
    pool: PgPool,
    fallbacks: Arc<std::sync::atomic::AtomicUsize>,
    requests: Vec<ParkRequest>,
) -> Vec<StoreResult<Park>> {
    let mut seen = std::collections::HashSet::new();
    let distinct = requests
        .iter()
        .all(|request| seen.insert(request.call.lease.id));
    if requests.len() > 1 && distinct {
        match park_set(&pool, &requests).await {
            Ok(results) => return results,
            Err(error) => {
                fallbacks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(%error, parks = requests.len(), "a batch of {} parks failed ({error}); parking them one by one", requests.len());
            }
        }
    }
    let mut results = Vec::with_capacity(requests.len());
    for request in requests {
        results.push(match pool.acquire().await {
            Ok(mut conn) => request
                .call
                .run_audited(&mut conn, &request.dimensions, request.records)
                .await
                .map(|(parked, records)| {
                    crate::audit::log(&records);
                    parked
                }),
            Err(error) => Err(error.into()),
        });
    }
    results
}

/// One transaction for the batch: `items/park_batch.sql` (advisory locks,
/// leases, outcomes, parks, timers, then the trail's barrier and the locks
/// of the written outcomes' chains, and their heads read), the records
/// chained to the heads it answered (`audit/append_chained.sql`), commit.
async fn park_set(pool: &PgPool, requests: &[ParkRequest]) -> StoreResult<Vec<StoreResult<Park>>> {
    let mut ids = Vec::with_capacity(requests.len());
    let mut leases = Vec::with_capacity(requests.len());
    let mut nows = Vec::with_capacity(requests.len());
    let mut writes = Vec::with_capacity(requests.len());
    let mut phases = Vec::with_capacity(requests.len());
    let mut errors = Vec::with_capacity(requests.len());
    let mut lock_keys = Vec::with_capacity(requests.len());
    let mut chained = Vec::new();
    let (mut d_items, mut d_names, mut d_variants, mut d_statuses) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut d_details, mut d_pending, mut d_nows) = (Vec::new(), Vec::new(), Vec::new());
    for request in requests {
        let call = &request.call;
        let id = call.lease.id.0;
        ids.push(id);
        leases.push(to_micros(call.lease.until));
        nows.push(to_micros(call.now));
        writes.push(call.write_outcome);
        phases.push(call.phase.map(Phase::as_str));
        errors.push(call.error.as_deref());
        lock_keys.push(lock_key(call.lease.id));
        if !request.records.is_empty() {
            chained.push(id);
        }
        for update in common::fold_dimension_updates(&request.dimensions) {
            d_items.push(id);
            d_names.push(update.dimension);
            d_variants.push(update.variant);
            d_statuses.push(update.status.as_str());
            d_details.push(update.detail.map(|detail| detail.to_string()));
            d_pending.push(update.pending_until.map(to_micros));
            d_nows.push(to_micros(call.now));
        }
    }
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(sql!("items/park_batch.sql"))
        .bind(&ids)
        .bind(&leases)
        .bind(&nows)
        .bind(&writes)
        .bind(&phases)
        .bind(&errors)
        .bind(&lock_keys)
        .bind(&d_items)
        .bind(&d_names)
        .bind(&d_variants)
        .bind(&d_statuses)
        .bind(&d_details)
        .bind(&d_pending)
        .bind(&d_nows)
        .bind(&chained)
        .fetch_all(&mut *tx)
        .await?;
    let mut held: std::collections::HashMap<uuid::Uuid, bool> =
        std::collections::HashMap::with_capacity(requests.len());
    let mut heads: std::collections::HashMap<uuid::Uuid, String> =
        std::collections::HashMap::with_capacity(chained.len());
    for row in rows {
        let id: uuid::Uuid = row.decode("id")?;
        if let Some(parked) = row.decode::<Option<bool>>("parked")? {
            held.insert(id, parked);
        }
        if let Some(head) = row.decode::<Option<String>>("head")? {
            heads.insert(id, head);
        }
    }
    // Each record chained where the batch found its chain's head, by
    // reference: the requests keep them (for the parks one by one, should
    // this transaction fail).
    let mut chain: Vec<Chained<'_>> = Vec::new();
    for request in requests {
        let id = request.call.lease.id;
        if !request.call.write_outcome || !held.contains_key(&id.0) {
            continue;
        }
        // No head yet: a new chain.
        let head = heads.entry(id.0).or_default();
        for record in &request.records {
            let id = uuid::Uuid::now_v7();
            let texts = record.texts();
            let prev_hash = std::mem::take(head);
            let hash = record.digest_as(id, &texts, &prev_hash);
            head.clone_from(&hash);
            chain.push(Chained {
                record,
                id,
                texts,
                prev_hash,
                hash,
            });
        }
    }
    if !chain.is_empty() {
        let appended = sqlx::query(sql!("audit/append_chained.sql"))
            .bind(chain.iter().map(|c| c.id).collect::<Vec<_>>())
            .bind(chain.iter().map(|c| c.record.item_id.0).collect::<Vec<_>>())
            .bind(
                chain
                    .iter()
                    .map(|c| to_micros(c.record.at))
                    .collect::<Vec<_>>(),
            )
            .bind(
                chain
                    .iter()
                    .map(|c| c.record.actor.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                chain
                    .iter()
                    .map(|c| c.record.kind.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(chain.iter().map(|c| c.texts.old_state).collect::<Vec<_>>())
            .bind(chain.iter().map(|c| c.texts.new_state).collect::<Vec<_>>())
            .bind(chain.iter().map(|c| c.texts.trigger).collect::<Vec<_>>())
            .bind(chain.iter().map(|c| c.texts.metadata).collect::<Vec<_>>())
            .bind(
                chain
                    .iter()
                    .map(|c| c.prev_hash.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(chain.iter().map(|c| c.hash.as_str()).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await?;
        if appended.rows_affected() != chain.len() as u64 {
            return Err(StoreError::Corrupt(format!(
                "{} audit records appended of {}",
                appended.rows_affected(),
                chain.len()
            )));
        }
    }
    tx.commit().await?;
    for chained in &chain {
        crate::audit::log_new(chained.id, chained.record);
    }
    Ok(requests
        .iter()
        .map(|request| {
            let id = request.call.lease.id;
            match held.get(&id.0) {
                None => Err(StoreError::LeaseLost(id)),
                Some(true) => Ok(Park::Parked),
                Some(false) => Ok(Park::EventsPending),
            }
        })
        .collect())
}

/// A batch's record, chained: its id, its JSON fields' text and its
/// hashes.
struct Chained<'a> {
    record: &'a crate::audit::NewAudit,
    id: uuid::Uuid,
    texts: crate::audit::Texts<'a>,
    prev_hash: String,
    hash: String,
}

/// A claim's answer: the snapshot and lease, or `None` when not claimed.
type Claimed = Option<(Snapshot, Lease)>;

/// Claims `requests` in one statement (`items/claim_snapshots.sql`), per
/// set of handled types; of two claims of one id in a batch, the second is
/// not claimed. A failed statement claims its requests one by one.
async fn claim_batch(pool: PgPool, requests: Vec<ClaimParams>) -> Vec<StoreResult<Claimed>> {
    let mut results: Vec<Option<StoreResult<Claimed>>> =
        (0..requests.len()).map(|_| None).collect();
    let mut groups: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (index, request) in requests.iter().enumerate() {
        if !seen.insert(request.id) {
            results[index] = Some(Ok(None));
            continue;
        }
        match groups
            .iter_mut()
            .find(|(types, _)| *types == request.handled_types)
        {
            Some((_, members)) => members.push(index),
            None => groups.push((request.handled_types.clone(), vec![index])),
        }
    }
    for (types, members) in groups {
        let claimed = if members.len() == 1 {
            claim_one(&pool, &requests[members[0]])
                .await
                .map(|claimed| {
                    claimed
                        .map(|claimed| (requests[members[0]].id, claimed))
                        .into_iter()
                        .collect::<std::collections::HashMap<_, _>>()
                })
        } else {
            claim_many(&pool, &requests, &members, &types).await
        };
        match claimed {
            Ok(mut claimed) => {
                for index in members {
                    results[index] = Some(Ok(claimed.remove(&requests[index].id)));
                }
            }
            Err(error) if members.len() == 1 => results[members[0]] = Some(Err(error)),
            Err(error) => {
                tracing::debug!(%error, claims = members.len(), "a batch of {} claims failed ({error}); claiming them one by one", members.len());
                for index in members {
                    results[index] = Some(claim_one(&pool, &requests[index]).await);
                }
            }
        }
    }
    results.into_iter().flatten().collect()
}

async fn claim_one(pool: &PgPool, params: &ClaimParams) -> StoreResult<Claimed> {
    let row = sqlx::query(sql!("items/claim_snapshot.sql"))
        .bind(DbId(params.id))
        .bind(DbTime(params.now))
        .bind(DbTime(params.lease_until))
        .bind(handled_types(&params.handled_types))
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let snapshot = snapshot_from_row(&row, params.now)?;
    let lease = Lease {
        id: params.id,
        until: to_micros(params.lease_until),
        epoch: lease_epoch(&row)?,
    };
    Ok(Some((snapshot, lease)))
}

async fn claim_many(
    pool: &PgPool,
    requests: &[ClaimParams],
    members: &[usize],
    types: &[String],
) -> StoreResult<std::collections::HashMap<ItemId, (Snapshot, Lease)>> {
    let ids: Vec<uuid::Uuid> = members.iter().map(|&i| requests[i].id.0).collect();
    let nows: Vec<OffsetDateTime> = members
        .iter()
        .map(|&i| to_micros(requests[i].now))
        .collect();
    let untils: Vec<OffsetDateTime> = members
        .iter()
        .map(|&i| to_micros(requests[i].lease_until))
        .collect();
    let rows = sqlx::query(sql!("items/claim_snapshots.sql"))
        .bind(ids)
        .bind(nows)
        .bind(untils)
        .bind(handled_types(types))
        .fetch_all(pool)
        .await?;
    let by_id: std::collections::HashMap<ItemId, &ClaimParams> = members
        .iter()
        .map(|&i| (requests[i].id, &requests[i]))
        .collect();
    let mut claimed = std::collections::HashMap::with_capacity(rows.len());
    for row in rows {
        let id = row.decode::<DbId>("id")?.0;
        let Some(params) = by_id.get(&id) else {
            return Err(StoreError::Corrupt(format!(
                "claimed {id}, which nobody asked for"
            )));
        };
        let snapshot = snapshot_from_row(&row, params.now)?;
        let lease = Lease {
            id,
            until: to_micros(params.lease_until),
            epoch: lease_epoch(&row)?,
        };
        claimed.insert(id, (snapshot, lease));
    }
    Ok(claimed)
}

/// The lease epoch a claim drew, from its answer's row.
fn lease_epoch(row: &PgRow) -> StoreResult<wq_core::LeaseEpoch> {
    Ok(wq_core::LeaseEpoch(row.decode("lease_epoch")?))
}

/// What `wq_park_audited` answers.
#[derive(Debug, serde::Deserialize)]
struct ParkAudited {
    answer: String,
    records: Vec<crate::audit::Appended>,
}

impl_store!(PgStore, Postgres, {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn work_hints(&self) -> StoreResult<Option<crate::WorkHints>> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(crate::HINT_CHANNEL).await?;
        let (hints, heard) = tokio::sync::mpsc::channel(HINTS_BUFFERED);
        tokio::spawn(relay_hints(listener, self.origin.to_string(), hints));
        Ok(Some(crate::WorkHints(heard)))
    }

    async fn lead(&self, task: &str) -> StoreResult<Option<crate::Leadership>> {
        let mut conn = self.pool.acquire().await?;
        let won: bool = sqlx::query_scalar(sql!("leader/try_lock.sql"))
            .bind(task)
            .fetch_one(&mut *conn)
            .await?;
        // The winner's connection leaves the pool: the lock lives as long
        // as its session, which must not serve anyone else.
        Ok(won.then(|| crate::Leadership::session(task, conn.detach())))
    }

    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<Snapshot>> {
        let row = sqlx::query(sql!("items/snapshot.sql"))
            .bind(DbId(id))
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| snapshot_from_row(&row, now)).transpose()
    }

    async fn item_claim_snapshot(
        &self,
        params: ClaimParams,
    ) -> StoreResult<Option<(Snapshot, Lease)>> {
        if params.handled_types.is_empty() {
            return Ok(None);
        }
        self.batches.claims.call(params).await
    }

    async fn item_claim_due(
        &self,
        params: crate::ClaimDueParams,
    ) -> StoreResult<Vec<(Snapshot, Lease)>> {
        if params.handled_types.is_empty() || params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(sql!("items/claim_due.sql"))
            .bind(handled_types(&params.handled_types))
            .bind(DbTime(params.now))
            .bind(i64::from(params.limit))
            .bind(DbTime(params.lease_until))
            .bind(params.after.map(DbId))
            .fetch_all(&self.pool)
            .await?;
        let until = to_micros(params.lease_until);
        rows.iter()
            .map(|row| {
                let snapshot = snapshot_from_row(row, params.now)?;
                let id = snapshot.view.item.id;
                let epoch = lease_epoch(row)?;
                Ok((snapshot, Lease { id, until, epoch }))
            })
            .collect()
    }

    /// The loop's exit in one call of `wq_park` (migration 0002), which
    /// takes the item's advisory lock before it checks for events.
    async fn item_park_with(&self, params: ParkParams) -> StoreResult<Park> {
        let ParkParams {
            lease,
            now,
            outcome,
        } = params;
        let write_outcome = outcome.is_some();
        let outcome = outcome.unwrap_or_default();
        // The dimension rows go as arrays in a batch, as JSON only to a
        // park that runs alone (`ParkCall::run_audited`).
        let call = ParkCall {
            lease,
            now,
            write_outcome,
            phase: outcome.phase,
            error: outcome.error.clone(),
        };
        // An outcome is written with its audit records, after the park
        // (whose locks come first), in its transaction; the batch logs them
        // once committed.
        let records = if write_outcome {
            crate::audit::park_succeeded(lease.id, now, &outcome)
        } else {
            Vec::new()
        };
        self.batches
            .parks
            .call(ParkRequest {
                call,
                dimensions: outcome.dimensions,
                records,
            })
            .await
    }
});

#[cfg(test)]
mod tests {
    #[test]
    fn lock_keys_are_not_negative() {
        let id = wq_core::ItemId(uuid::Uuid::from_u128(u128::MAX));
        assert_eq!(super::lock_key(id), i64::MAX);
    }
}
