//! PostgreSQL: the archiver's read of the oldest records not archived yet
//! stops after its batch whatever the table's statistics say (migration
//! 0014). With statistics that put the unarchived records at a small
//! share of the table (taken when it was empty, as here, or when little
//! was waiting), the plain query was planned as a bitmap scan of every
//! unarchived record and a sort: each batch of a backlog read all of it.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use time::OffsetDateTime;
use wq_store::Store;
use wq_store::postgres::PgStore;
use wq_store::testing::{
    drop_postgres_database, fresh_postgres_url, seed_created_records, seed_items,
};

const TYPE: &str = "archived";
const BATCH: u32 = 1_000;

/// The pages (shared buffers hit or read) one batch's read touches, from
/// `EXPLAIN (ANALYZE, BUFFERS)`: the function's own query runs inside its
/// scan node, so the node's counts are the read's.
async fn pages_touched(store: &PgStore) -> u64 {
    // The archiver's batch size, `BATCH`.
    let plan: serde_json::Value = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM wq_audit_unarchived(1000)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let node = &plan[0]["Plan"];
    node["Shared Hit Blocks"].as_u64().unwrap() + node["Shared Read Blocks"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_stops_after_its_batch_with_stale_statistics() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    // Statistics from an empty table, kept: an `ANALYZE` before the first
    // record (the benchmarks' seeding runs one), with autovacuum not yet
    // around to refresh them. Without a null fraction for `archived_at`
    // the planner takes half a percent of the rows as unarchived.
    sqlx::query("ALTER TABLE audit_records SET (autovacuum_enabled = false)")
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query("ANALYZE audit_records")
        .execute(store.pool())
        .await
        .unwrap();
    // Then a backlog.
    seed_items(&url, TYPE, 20_000, false, false).await;
    seed_created_records(&url, TYPE).await;
    let (backlog, _) = store.audit_unarchived_stats().await.unwrap();
    assert!(backlog >= 20_000, "{backlog} unarchived records");
    let table_pages: i64 = sqlx::query_scalar(
        "SELECT pg_relation_size('audit_records') / current_setting('block_size')::bigint",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();

    // The oldest batch, in order.
    let first = store.audit_unarchived(BATCH).await.unwrap();
    assert_eq!(first.len(), BATCH as usize);
    assert!(first.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let oldest: i64 =
        sqlx::query_scalar("SELECT min(seq) FROM audit_records WHERE archived_at IS NULL")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(first[0].seq, oldest);
    // It touched its batch's pages, not the backlog's: about 40 of the
    // table's 572, against 628 (every unarchived record's page, and the
    // index) with the bitmap scan and sort.
    let touched = pages_touched(&store).await;
    assert!(
        touched * 4 < table_pages as u64,
        "one batch of {BATCH} touched {touched} pages of the table's {table_pages}"
    );

    // Marked archived, the next batch starts after it.
    let seqs: Vec<i64> = first.iter().map(|record| record.seq).collect();
    store
        .audit_mark_archived(&seqs, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let next = store.audit_unarchived(BATCH).await.unwrap();
    assert_eq!(next.len(), BATCH as usize);
    assert!(next[0].seq > *seqs.last().unwrap());
    drop(store);
    drop_postgres_database(&url).await;
}
