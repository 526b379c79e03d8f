//! `mr_details` on PostgreSQL: ids as uuid, times as timestamptz, JSON as
//! jsonb. The upsert serialises per branch with an advisory lock, then
//! takes the live item's advisory lock and row lock in the store's lock
//! order; a concurrent first insert loses on the partial unique index of
//! the idempotency key and is retried by the caller (DDR-40).

use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{ColumnIndex, PgConnection, PgPool, Row};
use time::OffsetDateTime;
use wq_core::ItemId;
use wq_store::StoreResult;
use wq_store::audit::{AuditRecord, NewAudit, NewChain};
use wq_store::postgres::{AuditAppend, PgStore, lock_item};
use wq_store::to_micros;

use super::UpsertOutcome;
use super::backend::{BoxFuture, OwnedInput, mr_backend};
use crate::spec::MrSpec;

#[derive(Debug)]
pub(super) struct PgBackend {
    pub store: PgStore,
}

/// The first key of the per-branch upsert lock ("wqmr").
const BRANCH_LOCK_NAMESPACE: i32 = 0x7771_6d72;

/// The second key: 32 bits of SHA-256 over the branch identity.
fn branch_lock_key(spec: &MrSpec) -> i32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(
        format!(
            "{}\n{}\n{}",
            spec.forge,
            spec.project.to_lowercase(),
            spec.source_branch
        )
        .as_bytes(),
    );
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

const LIVE_BY_BRANCH: &str = include_str!("sql/live_by_branch.sql");
const LIVE_BY_BRANCH_LOCKED: &str =
    concat!(include_str!("sql/live_by_branch.sql"), "\nFOR UPDATE OF w");

impl PgBackend {
    fn id(id: ItemId) -> uuid::Uuid {
        id.0
    }

    fn at(at: OffsetDateTime) -> OffsetDateTime {
        to_micros(at)
    }

    fn json(value: serde_json::Value) -> Json<serde_json::Value> {
        Json(value)
    }

    fn read_id(row: &PgRow, column: impl ColumnIndex<PgRow>) -> StoreResult<ItemId> {
        Ok(ItemId(row.try_get(column)?))
    }

    fn read_at(row: &PgRow, column: impl ColumnIndex<PgRow>) -> StoreResult<OffsetDateTime> {
        Ok(row.try_get(column)?)
    }

    fn read_optional_at(row: &PgRow, column: &str) -> StoreResult<Option<OffsetDateTime>> {
        Ok(row.try_get(column)?)
    }

    fn read_json(row: &PgRow, column: &str) -> StoreResult<serde_json::Value> {
        Ok(row.try_get::<Json<serde_json::Value>, _>(column)?.0)
    }

    fn read_optional_json(row: &PgRow, column: &str) -> StoreResult<Option<serde_json::Value>> {
        Ok(row
            .try_get::<Option<Json<serde_json::Value>>, _>(column)?
            .map(|json| json.0))
    }

    /// The upsert's locks, in its order: the branch line's, then the item's
    /// advisory lock (its row is locked by the caller's UPDATE).
    async fn lock_line(conn: &mut PgConnection, spec: &MrSpec, id: ItemId) -> StoreResult<()> {
        sqlx::query(include_str!("postgres/lock_branch.sql"))
            .bind(BRANCH_LOCK_NAMESPACE)
            .bind(branch_lock_key(spec))
            .execute(&mut *conn)
            .await?;
        lock_item(conn, id).await
    }

    fn migration_pool(&self) -> &PgPool {
        self.store.pool()
    }

    async fn write<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
    {
        // The generic store's transaction: its work hints go out after the
        // commit.
        self.store.write(statements).await
    }

    /// Under the branch lock, the live item; if there is one, under its
    /// advisory lock and row lock.
    async fn live(conn: &mut PgConnection, spec: &MrSpec) -> StoreResult<Option<PgRow>> {
        sqlx::query(include_str!("postgres/lock_branch.sql"))
            .bind(BRANCH_LOCK_NAMESPACE)
            .bind(branch_lock_key(spec))
            .execute(&mut *conn)
            .await?;
        let Some(row) = Self::live_by_branch(conn, spec, LIVE_BY_BRANCH).await? else {
            return Ok(None);
        };
        // Lock order (wq_store::postgres, "Lock order"): the item's advisory
        // lock before its row. The loop's exit holds the advisory lock while
        // it waits for the row; locking the row first here deadlocked with it.
        lock_item(conn, Self::read_id(&row, 0)?).await?;
        // Read again under the row lock: the phase may have moved on
        // (completed, say) between the lookup and the lock. Only the upsert
        // creates items for a branch, under the branch lock, so this finds
        // the same item or none (it became terminal).
        Self::live_by_branch(conn, spec, LIVE_BY_BRANCH_LOCKED).await
    }

    /// A new item's submission's history row, then its first audit record
    /// (one plain insert, `append_first_audit`).
    async fn record_created(
        conn: &mut PgConnection,
        chain: NewChain,
        generation: i64,
        input: &OwnedInput,
        audit: NewAudit,
    ) -> StoreResult<AuditRecord> {
        let outcome = UpsertOutcome::Created;
        Self::record_submission(conn, chain.item(), generation, input, outcome).await?;
        wq_store::postgres::append_first_audit(conn, chain, audit).await
    }

    /// An unchanged submission's history row and its audit record in one
    /// call (`mr_record_unchanged`, migration 1007), where the trail is on.
    async fn record_unchanged(
        conn: &mut PgConnection,
        id: ItemId,
        generation: i64,
        input: &OwnedInput,
        audit: NewAudit,
    ) -> StoreResult<AuditRecord> {
        if !AuditAppend::enabled() {
            Self::record_submission(conn, id, generation, input, UpsertOutcome::Unchanged).await?;
            return wq_store::postgres::append_audit(conn, audit).await;
        }
        let append = AuditAppend::new(audit);
        let query = sqlx::query_as(include_str!("postgres/record_unchanged.sql"))
            .bind(Self::id(id))
            .bind(generation)
            .bind(&input.content_hash)
            .bind(&input.caller_identity)
            .bind(Self::at(input.now));
        let (seq, prev_hash, hash): (i64, String, String) =
            append.bind(query).fetch_one(&mut *conn).await?;
        Ok(append.appended(seq, prev_hash, hash))
    }

    async fn live_by_branch(
        conn: &mut PgConnection,
        spec: &MrSpec,
        sql: &'static str,
    ) -> StoreResult<Option<PgRow>> {
        Ok(sqlx::query(sql)
            .bind(&spec.forge)
            .bind(spec.project.as_str())
            .bind(spec.source_branch.as_str())
            .fetch_optional(&mut *conn)
            .await?)
    }
}

mr_backend! {
    backend: PgBackend,
    db: sqlx::Postgres,
    blocks: wq_store::postgres,
    migrations: "postgres",
}
