//! Fresh databases for tests: a uniquely named PostgreSQL database or a new
//! SQLite file per test. PostgreSQL being unreachable is a panic with a clear
//! message, never a silent skip.

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use uuid::Uuid;

static AUDIT_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the audit trail off (`false`) or on again, process-wide, so that
/// a benchmark can measure its cost in one run: while off, no record is
/// written (the changes themselves still are). Only with the `testing`
/// feature; a production build always writes the trail.
pub fn set_audit(enabled: bool) {
    AUDIT_OFF.store(!enabled, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`set_audit`] left the trail on (the default).
pub fn audit_enabled() -> bool {
    !AUDIT_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

static BATCHES_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the batching of concurrent claims and parks off (`false`: every
/// call runs alone, as a batch of one) or on again, process-wide, so that a
/// benchmark can measure what it gains in one run. Only with the `testing`
/// feature.
pub fn set_batching(enabled: bool) {
    BATCHES_OFF.store(!enabled, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`set_batching`] left batching on (the default).
pub fn batching_enabled() -> bool {
    !BATCHES_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

static RECORD_FUNCTION_OFF: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Makes PostgreSQL's single audit appends (a new item's first record
/// too) go through `wq_audit_append`, as before migration 0018 added
/// `wq_audit_append_record` (`false`), or through the latter again (and a
/// first record through `audit/append_first.sql`), process-wide: for tests
/// that write a trail on a schema migrated only part of the way. All chain
/// alike. Only with the `testing` feature.
pub fn set_append_record_function(enabled: bool) {
    RECORD_FUNCTION_OFF.store(!enabled, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`set_append_record_function`] left it on (the default).
pub fn append_record_function_enabled() -> bool {
    !RECORD_FUNCTION_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

/// The environment variable naming the PostgreSQL admin URL for tests.
pub const TEST_PG_URL_ENV: &str = "WQ_TEST_PG_URL";

/// The admin URL used when [`TEST_PG_URL_ENV`] is unset: the local server
/// over loopback without TLS (`sslmode=disable`), as the benchmark's peer
/// queues connect; sqlx would otherwise negotiate TLS with a server that
/// offers it, and encrypting every message costs both sides CPU.
pub const DEFAULT_TEST_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable";

/// The prefix of every database [`fresh_postgres_url`] creates.
pub const TEST_DATABASE_PREFIX: &str = "wq_test_";

fn admin_url() -> String {
    std::env::var(TEST_PG_URL_ENV).unwrap_or_else(|_| DEFAULT_TEST_PG_URL.to_owned())
}

async fn admin_connection(admin_url: &str) -> PgConnection {
    PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "PostgreSQL is required for these tests and is unreachable at {admin_url} \
             (set {TEST_PG_URL_ENV} to an admin URL): {error}"
            )
        })
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |at| at + 3);
    let host_part = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{host_part}/{database}?{query}"),
        None => format!("{host_part}/{database}"),
    }
}

/// The database name in a PostgreSQL URL.
fn database_of(url: &str) -> Option<&str> {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    let authority_start = base.find("://")? + 3;
    let slash = base[authority_start..].find('/')?;
    Some(&base[authority_start + slash + 1..])
}

/// Test databases older than this are dropped by the next test run (tests
/// that fail keep theirs for inspection until then).
const STALE_TEST_DATABASE_SECS: i64 = 6 * 3600;

/// Creates an empty database `wq_test_<unix seconds>_<uuid>` through the
/// admin URL in `WQ_TEST_PG_URL` (default [`DEFAULT_TEST_PG_URL`]) and returns
/// its URL. The first call in a process drops test databases older than six
/// hours, so repeated runs on one server do not pile them up. Panics if
/// PostgreSQL is unreachable.
pub async fn fresh_postgres_url() -> String {
    static JANITOR: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let admin_url = admin_url();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let database = format!("{TEST_DATABASE_PREFIX}{now}_{}", Uuid::new_v4().simple());
    let mut admin = admin_connection(&admin_url).await;
    JANITOR
        .get_or_init(|| async {
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'wq\\_test\\_%'",
            )
            .fetch_all(&mut admin)
            .await
            .unwrap_or_default();
            for name in names {
                let created = name[TEST_DATABASE_PREFIX.len()..]
                    .split('_')
                    .next()
                    .and_then(|secs| secs.parse::<i64>().ok());
                // Names without a time are from older runs: stale too.
                if created.is_none_or(|created| now - created > STALE_TEST_DATABASE_SECS)
                    && is_test_database_name(&name)
                {
                    let _ = sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await;
                }
            }
        })
        .await;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|error| panic!("cannot create test database {database}: {error}"));
    admin.close().await.ok();
    with_database(&admin_url, &database)
}

/// Drops a database made by [`fresh_postgres_url`], closing its remaining
/// connections. Refuses any other database name.
pub async fn drop_postgres_database(url: &str) {
    let database = database_of(url).unwrap_or_default();
    assert!(
        is_test_database_name(database),
        "refusing to drop {database:?}: not a database made by fresh_postgres_url"
    );
    let admin_url = admin_url();
    let mut admin = admin_connection(&admin_url).await;
    sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap_or_else(|error| panic!("cannot drop test database {database}: {error}"));
    admin.close().await.ok();
}

/// `wq_test_` followed by hex digits, digits and underscores only: a name
/// [`fresh_postgres_url`] makes, safe to splice into DDL.
fn is_test_database_name(name: &str) -> bool {
    name.strip_prefix(TEST_DATABASE_PREFIX).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|byte| byte.is_ascii_hexdigit() || byte == b'_')
    })
}

/// A `sqlite:` URL for a database file in a new directory under the system
/// temp dir: a real file, so several connections and reopening work.
pub fn fresh_sqlite_url() -> String {
    let directory = std::env::temp_dir().join(format!("wq-test-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&directory).unwrap_or_else(|error| {
        panic!(
            "cannot create test directory {}: {error}",
            directory.display()
        )
    });
    format!("sqlite:{}", directory.join("wq.db").display())
}

/// A new item `id` of item type `t` asking for `needs_step`, with no
/// idempotency key, caller or place: the PostgreSQL store tests' plain item.
pub fn step_item(id: wq_core::ItemId, now: time::OffsetDateTime) -> crate::NewItem {
    crate::NewItem {
        id,
        item_type: "t".into(),
        idempotency_key: None,
        caller_identity: None,
        place: None,
        now,
        dimensions: vec![wq_core::DimensionUpdate::new("needs_step", true)],
    }
}

/// Gives every item of `item_type` the `item.created` record a real item
/// is created with ([`crate::audit::created`]), so that a benchmark's
/// appends continue chains that exist, as they do in use: [`seed_items`]
/// inserts items without their history. The records are chained and
/// verify; they are written whether or not [`set_audit`] left the trail on,
/// so runs with and without it start from the same database.
pub async fn seed_created_records(url: &str, item_type: &str) {
    const BATCH: usize = 1_000;
    let now = crate::to_micros(time::OffsetDateTime::now_utc());
    let created = |id: Uuid| {
        crate::audit::NewAudit::new(
            wq_core::ItemId(id),
            now,
            crate::audit::ENGINE,
            "item.created",
        )
        .states(
            None,
            Some(serde_json::json!({"phase": "active", "item_type": item_type})),
        )
    };
    if url.starts_with("sqlite:") {
        let store = crate::sqlite::SqliteStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        let ids: Vec<crate::codec::DbId> =
            sqlx::query_scalar(include_str!("sqlite/queries/testing/item_ids.sql"))
                .bind(item_type)
                .fetch_all(store.writer())
                .await
                .expect("item ids");
        for chunk in ids.chunks(BATCH) {
            let mut tx = store.begin_write().await.expect("begin");
            let records = chunk.iter().map(|id| created(id.0.0)).collect();
            crate::sqlite::append_audit_records(&mut tx, records)
                .await
                .expect("seed records");
            tx.commit().await.expect("commit");
        }
    } else {
        let store = crate::postgres::PgStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        let ids: Vec<Uuid> =
            sqlx::query_scalar(include_str!("postgres/queries/testing/item_ids.sql"))
                .bind(item_type)
                .fetch_all(store.pool())
                .await
                .expect("item ids");
        for chunk in ids.chunks(BATCH) {
            let mut tx = store.pool().begin().await.expect("begin");
            let records = chunk.iter().map(|id| created(*id)).collect();
            crate::postgres::append_audit_records(&mut tx, records)
                .await
                .expect("seed records");
            tx.commit().await.expect("commit");
        }
    }
}

/// Inserts `count` active items of `item_type` in large batches, for
/// benchmarks and scale tests. `actionable` items wait for the engine;
/// `with_timer` gives each a `periodic_check` row deferred 30 minutes, as an
/// item parked until its next periodic check has.
pub async fn seed_items(
    url: &str,
    item_type: &str,
    count: u64,
    actionable: bool,
    with_timer: bool,
) {
    const BATCH: u64 = 20_000;
    let now = crate::to_micros(time::OffsetDateTime::now_utc());
    let pending_until = now + time::Duration::minutes(30);
    let mut left = count;
    if url.starts_with("sqlite:") {
        let store = crate::sqlite::SqliteStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        let micros = |at: time::OffsetDateTime| (at.unix_timestamp_nanos() / 1_000) as i64;
        while left > 0 {
            let batch = left.min(BATCH);
            let ids: Vec<String> = (0..batch)
                .map(|_| Uuid::now_v7().hyphenated().to_string())
                .collect();
            let ids = serde_json::to_string(&ids).expect("ids serialize");
            let mut tx = store.begin_write().await.expect("begin");
            sqlx::query(include_str!("sqlite/queries/testing/seed_items.sql"))
                .bind(&ids)
                .bind(item_type)
                .bind(actionable)
                .bind(micros(now))
                .execute(&mut *tx)
                .await
                .expect("seed items");
            if with_timer {
                sqlx::query(include_str!("sqlite/queries/testing/seed_timers.sql"))
                    .bind(&ids)
                    .bind(micros(pending_until))
                    .bind(micros(now))
                    .execute(&mut *tx)
                    .await
                    .expect("seed timers");
            }
            tx.commit().await.expect("commit");
            left -= batch;
        }
        sqlx::query("ANALYZE")
            .execute(store.writer())
            .await
            .expect("analyze");
    } else {
        let store = crate::postgres::PgStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        while left > 0 {
            let batch = left.min(BATCH);
            let ids: Vec<Uuid> = (0..batch).map(|_| Uuid::now_v7()).collect();
            let mut tx = store.pool().begin().await.expect("begin");
            sqlx::query(include_str!("postgres/queries/testing/seed_items.sql"))
                .bind(&ids)
                .bind(item_type)
                .bind(actionable)
                .bind(now)
                .execute(&mut *tx)
                .await
                .expect("seed items");
            if with_timer {
                sqlx::query(include_str!("postgres/queries/testing/seed_timers.sql"))
                    .bind(&ids)
                    .bind(pending_until)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .expect("seed timers");
            }
            tx.commit().await.expect("commit");
            left -= batch;
        }
        sqlx::query("ANALYZE")
            .execute(store.pool())
            .await
            .expect("analyze");
    }
}

/// The durability settings the store at `url` runs with, for benchmark
/// reports (`synchronous_commit` on PostgreSQL; journal mode and
/// `synchronous` on SQLite).
pub async fn durability(url: &str) -> String {
    if url.starts_with("sqlite:") {
        let store = crate::sqlite::SqliteStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(store.pool())
            .await
            .expect("journal_mode");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(store.pool())
            .await
            .expect("synchronous");
        let synchronous = match synchronous {
            0 => "off",
            1 => "normal",
            2 => "full",
            _ => "extra",
        };
        format!("sqlite journal_mode={journal} synchronous={synchronous}")
    } else {
        let store = crate::postgres::PgStore::connect(url, 1)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        let commit: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(store.pool())
            .await
            .expect("synchronous_commit");
        let fsync: String = sqlx::query_scalar("SHOW fsync")
            .fetch_one(store.pool())
            .await
            .expect("fsync");
        let tls: bool = sqlx::query_scalar(
            "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
        )
        .fetch_one(store.pool())
        .await
        .expect("pg_stat_ssl");
        let tls = if tls { "on" } else { "off" };
        format!("postgresql synchronous_commit={commit} fsync={fsync} tls={tls}")
    }
}

/// The server's WAL insert position in bytes (`pg_current_wal_insert_lsn`),
/// so that a benchmark can tell the WAL a run wrote, a figure the
/// machine's noise does not move; `None` on SQLite. The whole server's:
/// meaningful while the benchmark is its only writer.
pub async fn wal_position(url: &str) -> Option<i64> {
    if url.starts_with("sqlite:") {
        return None;
    }
    let store = crate::postgres::PgStore::connect(url, 1)
        .await
        .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
    let position: i64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint")
            .fetch_one(store.pool())
            .await
            .expect("pg_current_wal_insert_lsn");
    Some(position)
}

/// Runs the generic PostgreSQL migrations before `version` on `pool`, as a
/// database last migrated by an earlier release has them: for tests of
/// what migration `version` does to the data it finds.
pub async fn migrate_postgres_before(pool: &sqlx::PgPool, version: i64) {
    let mut migrator = sqlx::migrate::Migrator::with_migrations(
        crate::postgres::MIGRATOR
            .iter()
            .filter(|migration| migration.version < version)
            .cloned()
            .collect(),
    );
    migrator.set_ignore_missing(true);
    migrator
        .run(pool)
        .await
        .unwrap_or_else(|error| panic!("migrations before {version}: {error}"));
}

/// How long [`wait_for_lock_waiters`] looks before it gives up.
pub const LOCK_WAIT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until at least `count` sessions on the database behind `pool` wait
/// for a lock (`pg_stat_activity.wait_event_type = 'Lock'`), of the kind
/// `wait_event` when given (`advisory`, `transactionid`, `tuple`, ...), so
/// a test knows a statement it started is blocked. Answers false if that
/// has not happened within [`LOCK_WAIT_DEADLINE`].
///
/// This reads the condition again every few milliseconds: who waits for a
/// lock is known only to the PostgreSQL server, which tells no client, so
/// there is no signal to wait on.
pub async fn wait_for_lock_waiters(
    pool: &sqlx::PgPool,
    wait_event: Option<&str>,
    count: i64,
) -> bool {
    let deadline = std::time::Instant::now() + LOCK_WAIT_DEADLINE;
    loop {
        let waiting: i64 =
            sqlx::query_scalar(include_str!("postgres/queries/testing/lock_waiters.sql"))
                .bind(wait_event)
                .fetch_one(pool)
                .await
                .unwrap_or_else(|error| panic!("cannot read pg_stat_activity: {error}"));
        if waiting >= count {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Appends `record` on PostgreSQL in a transaction it leaves open: the
/// transaction (commit or roll it back) and the record's `seq`. For tests
/// of readers that must not pass over a record numbered before one that
/// commits first.
pub async fn append_uncommitted(
    store: &crate::postgres::PgStore,
    record: crate::audit::NewAudit,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, i64) {
    let mut tx = store.pool().begin().await.expect("begin");
    let seq = crate::postgres::append_audit(&mut tx, record)
        .await
        .expect("append")
        .seq;
    (tx, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_test_database_names_may_be_dropped() {
        assert!(is_test_database_name("wq_test_1764450000_0a1b2c"));
        assert!(is_test_database_name("wq_test_0a1b2c"));
        assert!(!is_test_database_name("wq_test_"));
        assert!(!is_test_database_name("postgres"));
        assert!(!is_test_database_name("wq_test_x; DROP TABLE y"));
    }

    #[test]
    fn the_database_name_is_replaced_and_read_back() {
        let url = with_database("postgres://postgres@127.0.0.1:5432/postgres", "wq_test_ab");
        assert_eq!(url, "postgres://postgres@127.0.0.1:5432/wq_test_ab");
        assert_eq!(database_of(&url), Some("wq_test_ab"));
        let url = with_database("postgres://u:p@db/admin?sslmode=disable", "x");
        assert_eq!(url, "postgres://u:p@db/x?sslmode=disable");
        assert_eq!(
            with_database("postgres://db:5432", "x"),
            "postgres://db:5432/x"
        );
    }
}
