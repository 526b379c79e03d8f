//! The `ping` type's store module: its own table `ping_log` (migration 2000
//! of each backend's `wq-testkit/migrations/`) and the type's only SQL.

use std::sync::LazyLock;

use sqlx::migrate::Migrator;
use wq_core::ItemId;
use wq_store::{Backend, EmbeddedMigration, Store, StoreResult};

static SQLITE: LazyLock<Migrator> = LazyLock::new(|| {
    wq_store::migrator(&[EmbeddedMigration {
        version: 2000,
        description: "ping_log",
        sql: include_str!("../../migrations/sqlite/2000_ping_log.sql"),
    }])
});

static POSTGRES: LazyLock<Migrator> = LazyLock::new(|| {
    wq_store::migrator(&[EmbeddedMigration {
        version: 2000,
        description: "ping_log",
        sql: include_str!("../../migrations/postgres/2000_ping_log.sql"),
    }])
});

const INSERT: &str = include_str!("sql/insert.sql");
const COUNT: &str = include_str!("sql/count.sql");

/// `ping_log` on the store's backend.
#[derive(Debug, Clone)]
pub struct PingStore {
    backend: Backend,
}

impl PingStore {
    pub fn new(store: &dyn Store) -> Self {
        Self {
            backend: store.handle(),
        }
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        match &self.backend {
            Backend::Sqlite(store) => SQLITE.run(store.writer()).await?,
            Backend::Postgres(store) => POSTGRES.run(store.pool()).await?,
        }
        Ok(())
    }

    /// Adds a row of `kind`, for `item` if given.
    pub async fn record(&self, kind: &'static str, item: Option<ItemId>) -> StoreResult<()> {
        let item = item.map(|id| id.to_string());
        match &self.backend {
            Backend::Sqlite(store) => {
                store
                    .write(move |conn| {
                        Box::pin(async move {
                            sqlx::query(INSERT)
                                .bind(kind)
                                .bind(item)
                                .execute(conn)
                                .await?;
                            Ok(())
                        })
                    })
                    .await
            }
            Backend::Postgres(store) => {
                sqlx::query(INSERT)
                    .bind(kind)
                    .bind(item)
                    .execute(store.pool())
                    .await?;
                Ok(())
            }
        }
    }

    /// How many rows of `kind` there are.
    pub async fn count(&self, kind: &str) -> StoreResult<i64> {
        let count = match &self.backend {
            Backend::Sqlite(store) => {
                sqlx::query_scalar(COUNT)
                    .bind(kind)
                    .fetch_one(store.pool())
                    .await?
            }
            Backend::Postgres(store) => {
                sqlx::query_scalar(COUNT)
                    .bind(kind)
                    .fetch_one(store.pool())
                    .await?
            }
        };
        Ok(count)
    }
}
