//! PostgreSQL backend of the [`Store`]: N identical replicas share one
//! database.
//!
//! # Connecting
//!
//! [`PgStore::connect`] with a `postgres://` URL and a pool size. Times are
//! `timestamptz`, ids `uuid`, JSON `jsonb`.
//!
//! # Concurrency
//!
//! Claims are single conditional `UPDATE`s: of two concurrent claimers the
//! second re-checks the row after the first commits and finds it leased.
//! Every loop write compares `leased_until` with the holder's [`Lease`].
//! The loop's exit ([`Store::item_park`]) and [`Store::event_insert`] both take
//! `pg_advisory_xact_lock(ItemId::lock_key())` first, so an event inserted
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

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgConnection, Row};
use time::OffsetDateTime;
use uuid::Uuid;
use wq_core::{
    Dimension, DimensionStatus, DimensionUpdate, ItemId, ItemView, PendingEvent, Phase, WorkItem,
};

use crate::common::{self, EmbeddedMigration, EventTarget};
use crate::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, ItemListParams, Lease,
    ListedItem, NewEvent, NewItem, Park, ParkParams, PhaseCount, RecordFailure, Snapshot, Store,
    StoreError, StoreResult, SweepParams, to_micros,
};

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
    ])
});

/// The PostgreSQL store. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
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
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(connect_timeout)
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The pool, for an item type's own tables and statements.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

// --- decoding ----------------------------------------------------------------

/// A listed row: the item and its stored place.
fn listed_from_row(row: &PgRow) -> StoreResult<ListedItem> {
    let forge: Option<String> = row.try_get("forge")?;
    let project: Option<String> = row.try_get("project")?;
    Ok(ListedItem {
        item: item_from_row(row)?,
        place: forge.zip(project),
    })
}

fn item_from_row(row: &PgRow) -> StoreResult<WorkItem> {
    Ok(WorkItem {
        id: ItemId(row.try_get("id")?),
        item_type: row.try_get("item_type")?,
        phase: common::parse_phase(row.try_get("phase")?)?,
        actionable: row.try_get("actionable")?,
        attempts: row.try_get("attempts")?,
        error: row.try_get("error")?,
        leased_until: row.try_get("leased_until")?,
        idempotency_key: row.try_get("idempotency_key")?,
        caller_identity: row.try_get("caller_identity")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        last_event_at: row.try_get("last_event_at")?,
    })
}

fn dimension_from_row(row: &PgRow) -> StoreResult<Dimension> {
    let Json(detail) = row.try_get::<Json<serde_json::Value>, _>("detail")?;
    Ok(Dimension {
        dimension: row.try_get("dimension")?,
        variant: row.try_get("variant")?,
        status: DimensionStatus::from_stored(row.try_get("status")?),
        detail,
        pending_until: row.try_get("pending_until")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// A row of `items/snapshot.sql` or `items/claim_snapshot.sql`.
fn snapshot_from_row(row: &PgRow, now: OffsetDateTime) -> StoreResult<Snapshot> {
    let item = item_from_row(row)?;
    let has_events: bool = row.try_get("has_events")?;
    let Json(rows) = row.try_get::<Json<Vec<SnapshotDimension>>, _>("dimensions")?;
    let dimensions = rows
        .into_iter()
        .map(SnapshotDimension::into_dimension)
        .collect::<StoreResult<_>>()?;
    Ok(Snapshot {
        view: ItemView {
            item,
            dimensions,
            now: to_micros(now),
        },
        has_events,
    })
}

/// A dimension row as `items/snapshot.sql` renders it.
#[derive(serde::Deserialize)]
struct SnapshotDimension {
    dimension: String,
    variant: String,
    status: String,
    detail: serde_json::Value,
    pending_until: Option<i64>,
    updated_at: i64,
}

impl SnapshotDimension {
    fn into_dimension(self) -> StoreResult<Dimension> {
        let time = |micros: i64| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1_000)
                .map_err(|error| StoreError::Corrupt(format!("timestamp {micros}: {error}")))
        };
        Ok(Dimension {
            dimension: self.dimension,
            variant: self.variant,
            status: DimensionStatus::from_stored(&self.status),
            detail: self.detail,
            pending_until: self.pending_until.map(time).transpose()?,
            updated_at: time(self.updated_at)?,
        })
    }
}

/// RFC 3339 text that PostgreSQL parses back to the same microsecond.
fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .expect("a UTC timestamp formats as RFC 3339")
}

fn event_from_row(row: &PgRow) -> StoreResult<PendingEvent> {
    let Json(body) = row.try_get::<Json<serde_json::Value>, _>("body")?;
    Ok(PendingEvent {
        id: row.try_get("id")?,
        work_item_id: ItemId(row.try_get("work_item_id")?),
        event_type: row.try_get("event_type")?,
        body,
        received_at: row.try_get("received_at")?,
    })
}

// --- building blocks for item types ----------------------------------------

/// Inserts an active, actionable work item and its initial dimensions on the
/// caller's connection (inside the caller's transaction, so an item type can
/// add its detail row atomically). A live idempotency key yields
/// [`StoreError::Duplicate`].
pub async fn insert_item(conn: &mut PgConnection, item: &NewItem) -> StoreResult<WorkItem> {
    let row = sqlx::query(sql!("items/insert.sql"))
        .bind(item.id.0)
        .bind(&item.item_type)
        .bind(&item.idempotency_key)
        .bind(&item.caller_identity)
        .bind(to_micros(item.now))
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
    conn: &mut PgConnection,
    id: ItemId,
    update: &DimensionUpdate,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("dimensions/upsert.sql"))
        .bind(id.0)
        .bind(&update.dimension)
        .bind(&update.variant)
        .bind(update.status.as_str())
        .bind(update.detail.as_ref().map(Json))
        .bind(update.pending_until.map(to_micros))
        .bind(to_micros(now))
        .execute(&mut *conn)
        .await
        .map_err(|error| common::not_found_or_database(error, id))?;
    Ok(())
}

/// Stores a raw event and sets `actionable = true` on the caller's
/// transaction, taking the item's advisory lock first so the insert is
/// serialised with the loop's exit (DDR-30, DDR-34, DDR-49). A missing item
/// yields [`StoreError::NotFound`]. Call it inside a transaction: the lock
/// is transaction-scoped.
pub async fn insert_event(conn: &mut PgConnection, event: &NewEvent) -> StoreResult<i64> {
    lock_item(&mut *conn, event.item_id).await?;
    let woken = sqlx::query(sql!("items/wake_for_event.sql"))
        .bind(event.item_id.0)
        .execute(&mut *conn)
        .await?;
    if woken.rows_affected() == 0 {
        return Err(StoreError::NotFound(event.item_id));
    }
    Ok(sqlx::query_scalar(sql!("events/insert.sql"))
        .bind(event.item_id.0)
        .bind(&event.event_type)
        .bind(Json(&event.body))
        .bind(to_micros(event.now))
        .fetch_one(&mut *conn)
        .await?)
}

/// Failed or cancelled → active, actionable, attempts 0, error cleared, on
/// the caller's connection. Other phases: [`StoreError::Conflict`].
pub async fn retry_item(
    conn: &mut PgConnection,
    id: ItemId,
    now: OffsetDateTime,
) -> StoreResult<WorkItem> {
    let row = sqlx::query(sql!("items/retry.sql"))
        .bind(id.0)
        .bind(to_micros(now))
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
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?;
    match phase {
        None => Err(StoreError::NotFound(id)),
        Some(phase) => Err(common::retry_conflict(common::parse_phase(&phase)?)),
    }
}

/// Takes the item's transaction-scoped advisory lock (DDR-34): the first
/// lock of the store's lock order.
pub async fn lock_item(conn: &mut PgConnection, id: ItemId) -> StoreResult<()> {
    sqlx::query(sql!("items/advisory_lock.sql"))
        .bind(id.lock_key())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

fn lease_lost_unless_one_row(rows_affected: u64, id: ItemId) -> StoreResult<()> {
    if rows_affected == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost(id))
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn handle(&self) -> crate::Backend {
        crate::Backend::Postgres(self.clone())
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query(sql!("health/ping.sql"))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn item_insert(&self, item: NewItem) -> StoreResult<WorkItem> {
        let mut tx = self.pool.begin().await?;
        let work_item = insert_item(&mut tx, &item).await?;
        tx.commit().await?;
        Ok(work_item)
    }

    async fn item_get(&self, id: ItemId) -> StoreResult<Option<WorkItem>> {
        let row = sqlx::query(sql!("items/get.sql"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(item_from_row).transpose()
    }

    async fn item_view(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<Option<ItemView>> {
        // One snapshot for the item and its dimensions.
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        let Some(row) = sqlx::query(sql!("items/get.sql"))
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        let item = item_from_row(&row)?;
        let rows = sqlx::query(sql!("dimensions/list.sql"))
            .bind(id.0)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let dimensions = rows
            .iter()
            .map(dimension_from_row)
            .collect::<StoreResult<_>>()?;
        Ok(Some(ItemView {
            item,
            dimensions,
            now: to_micros(now),
        }))
    }

    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<Snapshot>> {
        let row = sqlx::query(sql!("items/snapshot.sql"))
            .bind(id.0)
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
        let lease_until = to_micros(params.lease_until);
        let row = sqlx::query(sql!("items/claim_snapshot.sql"))
            .bind(params.id.0)
            .bind(to_micros(params.now))
            .bind(lease_until)
            .bind(&params.handled_types)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let snapshot = snapshot_from_row(&row, params.now)?;
        let lease = Lease {
            id: params.id,
            until: lease_until,
        };
        Ok(Some((snapshot, lease)))
    }

    async fn item_list_placed(&self, params: ItemListParams) -> StoreResult<Vec<ListedItem>> {
        let rows = sqlx::query(sql!("items/list.sql"))
            .bind(params.phase.map(Phase::as_str))
            .bind(params.item_type.as_deref())
            .bind(params.before.map(|id| id.0))
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
        let lease_until = to_micros(params.lease_until);
        let row = sqlx::query(sql!("items/claim.sql"))
            .bind(params.id.0)
            .bind(to_micros(params.now))
            .bind(lease_until)
            .bind(&params.handled_types)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let item = item_from_row(&row)?;
        let lease = Lease {
            id: item.id,
            until: lease_until,
        };
        Ok(Some((item, lease)))
    }

    async fn item_heartbeat(&self, lease: Lease, until: OffsetDateTime) -> StoreResult<Lease> {
        let until = to_micros(until);
        let result = sqlx::query(sql!("items/heartbeat.sql"))
            .bind(lease.id.0)
            .bind(to_micros(lease.until))
            .bind(until)
            .execute(&self.pool)
            .await?;
        lease_lost_unless_one_row(result.rows_affected(), lease.id)?;
        Ok(Lease {
            id: lease.id,
            until,
        })
    }

    async fn item_release(&self, lease: Lease, until: Option<OffsetDateTime>) -> StoreResult<()> {
        let result = sqlx::query(sql!("items/release.sql"))
            .bind(lease.id.0)
            .bind(to_micros(lease.until))
            .bind(until.map(to_micros))
            .execute(&self.pool)
            .await?;
        lease_lost_unless_one_row(result.rows_affected(), lease.id)
    }

    async fn item_apply_outcome(&self, outcome: ApplyOutcome) -> StoreResult<WorkItem> {
        let id = outcome.lease.id;
        let mut tx = self.pool.begin().await?;
        // The UPDATE takes the row lock before the dimension writes.
        let row = sqlx::query(sql!("items/apply_outcome.sql"))
            .bind(id.0)
            .bind(to_micros(outcome.lease.until))
            .bind(outcome.phase.map(Phase::as_str))
            .bind(outcome.error.as_deref())
            .bind(to_micros(outcome.now))
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::LeaseLost(id))?;
        let item = item_from_row(&row)?;
        for update in &outcome.dimensions {
            upsert_dimension(&mut tx, id, update, outcome.now).await?;
        }
        tx.commit().await?;
        Ok(item)
    }

    async fn item_record_failure(&self, failure: RecordFailure) -> StoreResult<WorkItem> {
        let id = failure.lease.id;
        let row = sqlx::query(sql!("items/record_failure.sql"))
            .bind(id.0)
            .bind(to_micros(failure.lease.until))
            .bind(&failure.error)
            .bind(to_micros(failure.now))
            .bind(failure.permanent)
            .bind(failure.max_attempts)
            .bind(to_micros(failure.retry_at))
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::LeaseLost(id))?;
        item_from_row(&row)
    }

    async fn item_park_with(&self, params: ParkParams) -> StoreResult<Park> {
        let ParkParams {
            lease,
            now,
            outcome,
        } = params;
        let write_outcome = outcome.is_some();
        let outcome = outcome.unwrap_or_default();
        let dimensions: Vec<serde_json::Value> = outcome
            .dimensions
            .iter()
            .map(|update| {
                let mut row = serde_json::json!({
                    "dimension": update.dimension,
                    "variant": update.variant,
                    "status": update.status.as_str(),
                    "pending_until": update.pending_until.map(|at| rfc3339(to_micros(at))),
                });
                if let Some(detail) = &update.detail {
                    row["detail"] = detail.clone();
                }
                row
            })
            .collect();
        let answer: String = sqlx::query_scalar(sql!("items/park_with.sql"))
            .bind(lease.id.0)
            .bind(to_micros(lease.until))
            .bind(to_micros(now))
            .bind(lease.id.lock_key())
            .bind(write_outcome)
            .bind(outcome.phase.map(Phase::as_str))
            .bind(outcome.error.as_deref())
            .bind(Json(serde_json::Value::Array(dimensions)))
            .fetch_one(&self.pool)
            .await?;
        match answer.as_str() {
            "parked" => Ok(Park::Parked),
            "events_pending" => Ok(Park::EventsPending),
            "lease_lost" => Err(StoreError::LeaseLost(lease.id)),
            other => Err(StoreError::Corrupt(format!("wq_park answered {other:?}"))),
        }
    }

    async fn item_retry(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<WorkItem> {
        let mut conn = self.pool.acquire().await?;
        retry_item(&mut conn, id, now).await
    }

    async fn item_mark_actionable(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()> {
        let result = sqlx::query(sql!("items/mark_actionable.sql"))
            .bind(id.0)
            .bind(to_micros(now))
            .execute(&self.pool)
            .await?;
        if result.rows_affected() == 0 {
            return Err(StoreError::NotFound(id));
        }
        Ok(())
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
            .bind(id.0)
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
        let mut conn = self.pool.acquire().await?;
        upsert_dimension(&mut conn, id, &update, now).await
    }

    async fn event_insert(&self, event: NewEvent) -> StoreResult<i64> {
        let mut tx = self.pool.begin().await?;
        let event_id = insert_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(event_id)
    }

    async fn event_next(&self, id: ItemId) -> StoreResult<Option<PendingEvent>> {
        let row = sqlx::query(sql!("events/next.sql"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(event_from_row).transpose()
    }

    async fn event_apply(&self, apply: ApplyEvent) -> StoreResult<EventApplied> {
        let id = apply.lease.id;
        let now = to_micros(apply.now);
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(sql!("items/lease_state.sql"))
            .bind(id.0)
            .bind(to_micros(apply.lease.until))
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::LeaseLost(id))?;
        let target = EventTarget {
            phase: common::parse_phase(row.try_get("phase")?)?,
            error: row.try_get("error")?,
            last_event_at: row.try_get("last_event_at")?,
        };
        let outcome = if target.phase == Phase::Active {
            for update in &apply.result.dimensions {
                upsert_dimension(&mut tx, id, update, now).await?;
            }
            let write = common::decide_event(&target, &apply.result, now);
            sqlx::query(sql!("items/update_from_event.sql"))
                .bind(id.0)
                .bind(write.phase.as_str())
                .bind(write.error.as_deref())
                .bind(write.last_event_at)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            write.applied
        } else {
            // DDR-37: only active items accept events; discard it.
            EventApplied::ItemNotActive
        };
        sqlx::query(sql!("events/delete.sql"))
            .bind(apply.event_id)
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(outcome)
    }

    async fn sweep_candidates(&self, params: SweepParams) -> StoreResult<Vec<ItemId>> {
        if params.handled_types.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = sqlx::query_scalar(sql!("sweep/candidates.sql"))
            .bind(&params.handled_types)
            .bind(to_micros(params.now))
            .bind(i64::from(params.limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().map(ItemId).collect())
    }
}
