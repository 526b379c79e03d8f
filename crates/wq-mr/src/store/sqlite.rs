//! `mr_details` on SQLite: ids as text, times as integer microseconds, JSON
//! as text. Every write goes through the store's group commit
//! ([`SqliteStore::write`]), so it shares the batches and the single writer
//! with the generic tables' writes.

use sqlx::Arguments as _;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{ColumnIndex, Row, SqliteConnection, SqlitePool};
use time::OffsetDateTime;
use wq_core::ItemId;
use wq_store::audit::{AuditRecord, NewAudit, NewChain};
use wq_store::sqlite::{SqliteStore, from_micros, id_text, micros, parse_id};
use wq_store::{StoreError, StoreResult};

use super::UpsertOutcome;
use super::backend::{BoxFuture, OwnedInput, mr_backend};
use crate::spec::MrSpec;

#[derive(Debug)]
pub(super) struct SqliteBackend {
    pub store: SqliteStore,
}

impl SqliteBackend {
    fn id(id: ItemId) -> String {
        id_text(id)
    }

    fn at(at: OffsetDateTime) -> i64 {
        micros(at)
    }

    fn json(value: serde_json::Value) -> String {
        value.to_string()
    }

    fn read_id(row: &SqliteRow, column: impl ColumnIndex<SqliteRow>) -> StoreResult<ItemId> {
        parse_id(row.try_get(column)?)
    }

    fn read_at(
        row: &SqliteRow,
        column: impl ColumnIndex<SqliteRow>,
    ) -> StoreResult<OffsetDateTime> {
        from_micros(row.try_get(column)?)
    }

    fn read_optional_at(row: &SqliteRow, column: &str) -> StoreResult<Option<OffsetDateTime>> {
        row.try_get::<Option<i64>, _>(column)?
            .map(from_micros)
            .transpose()
    }

    fn read_json(row: &SqliteRow, column: &str) -> StoreResult<serde_json::Value> {
        serde_json::from_str(row.try_get(column)?)
            .map_err(|e| StoreError::Corrupt(format!("mr_details.{column}: {e}")))
    }

    fn read_optional_json(row: &SqliteRow, column: &str) -> StoreResult<Option<serde_json::Value>> {
        row.try_get::<Option<&str>, _>(column)?
            .map(|text| {
                serde_json::from_str(text)
                    .map_err(|e| StoreError::Corrupt(format!("mr_details.{column}: {e}")))
            })
            .transpose()
    }

    /// The writes of a batch run under the write lock: nothing more to
    /// take.
    #[allow(
        clippy::unused_async,
        reason = "the same signature as PostgreSQL's, which locks"
    )]
    async fn lock_line(
        _conn: &mut SqliteConnection,
        _spec: &MrSpec,
        _id: ItemId,
    ) -> StoreResult<()> {
        Ok(())
    }

    /// Migrations take the writer connection themselves.
    fn migration_pool(&self) -> &SqlitePool {
        self.store.writer()
    }

    async fn write<T, F>(&self, statements: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        self.store.write(statements).await
    }

    /// The writes of a batch run under the write lock, so the lookup sees
    /// the state the upsert's writes apply to.
    async fn live(conn: &mut SqliteConnection, spec: &MrSpec) -> StoreResult<Option<SqliteRow>> {
        Ok(sqlx::query(include_str!("sql/live_by_branch.sql"))
            .bind(&spec.forge)
            .bind(spec.project.as_str())
            .bind(spec.source_branch.as_str())
            .fetch_optional(conn)
            .await?)
    }

    /// A new item's submission's history row, then its first audit record,
    /// in one call on the writer's connection
    /// (`execute_then_append_audit`; a new chain's head is the empty one it
    /// guesses for an item it does not know).
    async fn record_created(
        conn: &mut SqliteConnection,
        chain: NewChain,
        generation: i64,
        input: &OwnedInput,
        audit: NewAudit,
    ) -> StoreResult<AuditRecord> {
        let id = chain.item();
        Self::record_submission_audited(conn, id, generation, input, UpsertOutcome::Created, audit)
            .await
    }

    /// An unchanged submission's history row, then its audit record, in
    /// one call on the writer's connection where the chain's head is the
    /// one this process remembers (`execute_then_append_audit`).
    async fn record_unchanged(
        conn: &mut SqliteConnection,
        id: ItemId,
        generation: i64,
        input: &OwnedInput,
        audit: NewAudit,
    ) -> StoreResult<AuditRecord> {
        let outcome = UpsertOutcome::Unchanged;
        Self::record_submission_audited(conn, id, generation, input, outcome, audit).await
    }

    /// The submission history's row (`sql/insert_submission.sql`) and
    /// `audit` as one query.
    async fn record_submission_audited(
        conn: &mut SqliteConnection,
        id: ItemId,
        generation: i64,
        input: &OwnedInput,
        outcome: UpsertOutcome,
        audit: NewAudit,
    ) -> StoreResult<AuditRecord> {
        let mut arguments = SqliteArguments::default();
        let encoded = (|| {
            arguments.add(Self::id(id))?;
            arguments.add(generation)?;
            arguments.add(input.content_hash.clone())?;
            arguments.add(outcome.as_str())?;
            arguments.add(input.caller_identity.clone())?;
            arguments.add(Self::at(input.now))
        })();
        encoded.map_err(sqlx::Error::Encode)?;
        let statement = include_str!("sql/insert_submission.sql");
        wq_store::sqlite::execute_then_append_audit(conn, statement, arguments, audit).await
    }
}

mr_backend! {
    backend: SqliteBackend,
    db: sqlx::Sqlite,
    blocks: wq_store::sqlite,
    migrations: "sqlite",
}
