//! PostgreSQL: the archive's cursor (migration 0015). Records are read in
//! sequence order up to a horizon below which every number drawn was
//! committed or rolled back, so a record that commits after one with a
//! higher number is shipped, not skipped; a batch's read stops after its
//! batch whatever the table's statistics say, and shipping rewrites no
//! record.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use std::time::Duration;

use time::OffsetDateTime;
use wq_core::ItemId;
use wq_store::Store;
use wq_store::audit::NewAudit;
use wq_store::postgres::PgStore;
use wq_store::testing::{
    drop_postgres_database, fresh_postgres_url, migrate_postgres_before, seed_created_records,
    seed_items, set_append_record_function, step_item,
};

const TYPE: &str = "archived";
const BATCH: u32 = 1_000;

/// The pages (shared buffers hit or read) the archiver's read of one
/// batch touches, from `EXPLAIN (ANALYZE, BUFFERS)` of its statement: the
/// function's own query runs inside its scan node, so the node's counts
/// are the read's. Its second run on one connection: the first also reads
/// the catalogs to plan the function's query, which the session then keeps.
async fn pages_touched(store: &PgStore, horizon: i64) -> u64 {
    let mut conn = store.pool().acquire().await.unwrap();
    let mut touched = 0;
    for _ in 0..2 {
        let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}",
            include_str!("../src/postgres/queries/audit/unarchived.sql")
        )))
        .bind(horizon)
        .bind(i64::from(BATCH))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        let node = &plan[0]["Plan"];
        touched = node["Shared Hit Blocks"].as_u64().unwrap()
            + node["Shared Read Blocks"].as_u64().unwrap();
    }
    touched
}

/// One record for `item`, appended in `tx` (not committed): its seq.
async fn append_in(tx: &mut sqlx::PgConnection, item: ItemId, kind: &str) -> i64 {
    let now = OffsetDateTime::now_utc();
    wq_store::postgres::append_audit(tx, NewAudit::new(item, now, "engine", kind))
        .await
        .unwrap()
        .seq
}

/// The seqs of the records the archiver's read answers now.
async fn unarchived_seqs(store: &PgStore) -> Vec<i64> {
    let batch = store.audit_unarchived(100).await.unwrap();
    batch.iter().map(|record| record.seq).collect()
}

/// Two items whose first records were shipped: the archive's cursor is
/// past them.
async fn two_archived_items(store: &PgStore, now: OffsetDateTime) -> (ItemId, ItemId) {
    let (first, second) = (ItemId::new_v7(), ItemId::new_v7());
    for id in [first, second] {
        store.item_insert(step_item(id, now)).await.unwrap();
    }
    let seqs = unarchived_seqs(store).await;
    assert_eq!(seqs.len(), 2, "the two items' first records");
    store.audit_mark_archived(&seqs, now).await.unwrap();
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_stops_after_its_batch_and_the_cursor_moves_over_it() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    // Statistics from an empty table, kept: an `ANALYZE` before the first
    // record (the benchmarks' seeding runs one), with autovacuum not yet
    // around to refresh them. They put the range above the cursor at a
    // few hundred rows.
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

    // The oldest batch, in order, from the first record.
    let first = store.audit_unarchived(BATCH).await.unwrap();
    assert_eq!(first.len(), BATCH as usize);
    assert!(first.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let oldest: i64 = sqlx::query_scalar("SELECT min(seq) FROM audit_records")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(first[0].seq, oldest);
    // It touched its batch's pages, not the backlog's: a few dozen of the
    // table's hundreds, where a bitmap scan of the range and a sort read
    // them all.
    let touched = pages_touched(&store, i64::MAX).await;
    assert!(
        touched * 4 < table_pages as u64,
        "one batch of {BATCH} touched {touched} pages of the table's {table_pages}"
    );

    // Shipped, the cursor moves over the batch, and the next one starts
    // after it; the records themselves are not written again.
    let xmins_before: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM audit_records")
            .fetch_one(store.pool())
            .await
            .unwrap();
    let seqs: Vec<i64> = first.iter().map(|record| record.seq).collect();
    store
        .audit_mark_archived(&seqs, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let cursor: i64 = sqlx::query_scalar("SELECT seq FROM audit_archived")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(cursor, *seqs.last().unwrap());
    let xmins_after: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM audit_records")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(xmins_after, xmins_before, "no record row was rewritten");
    let next = store.audit_unarchived(BATCH).await.unwrap();
    assert_eq!(next.len(), BATCH as usize);
    assert!(next[0].seq > cursor);
    let (left, _) = store.audit_unarchived_stats().await.unwrap();
    assert_eq!(left, backlog - i64::from(BATCH));
    drop(store);
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_commits_after_a_higher_one_is_shipped_not_skipped() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (late, early) = two_archived_items(&store, now).await;

    // `late` draws its number first and commits last.
    let mut slow = store.pool().begin().await.unwrap();
    let low = append_in(&mut slow, late, "step.slow").await;
    let mut fast = store.pool().begin().await.unwrap();
    let high = append_in(&mut fast, early, "step.fast").await;
    fast.commit().await.unwrap();
    assert!(low < high);

    // While it is in progress the archiver's read answers nothing (it
    // waited for the append, then gave up for this round): never `high`
    // without `low`, which it would then skip.
    let batch = store.audit_unarchived(100).await.unwrap();
    assert!(
        batch.is_empty(),
        "read {batch:?} past the append in progress of {low}"
    );
    // A read that starts while the append is in progress waits for it and
    // sees both once it committed, in order.
    let reader = store.clone();
    let read = tokio::spawn(async move { reader.audit_unarchived(100).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    slow.commit().await.unwrap();
    let got: Vec<i64> = read
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    assert_eq!(got, vec![low, high]);
    drop(store);
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_that_does_not_end_holds_the_archive_back_not_the_appends() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 6).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (stuck, busy) = two_archived_items(&store, now).await;

    let mut open = store.pool().begin().await.unwrap();
    let low = append_in(&mut open, stuck, "step.open").await;
    // Past the horizon's lock timeout the read answers nothing rather than
    // records above the open append's; an append that starts meanwhile
    // waits behind the read, for no longer than that.
    let reader = store.clone();
    let started = std::time::Instant::now();
    let read = tokio::spawn(async move {
        let batch = reader.audit_unarchived(100).await.unwrap();
        (batch, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut other = store.pool().begin().await.unwrap();
    let high = append_in(&mut other, busy, "step.other").await;
    other.commit().await.unwrap();
    let appended = started.elapsed();
    let (batch, waited) = read.await.unwrap();
    assert!(
        batch.is_empty(),
        "read {batch:?} past the open append {low}"
    );
    assert!(
        waited >= Duration::from_millis(90),
        "the read waited {waited:?}"
    );
    assert!(
        appended < Duration::from_secs(2),
        "an append waited {appended:?} behind the archive's read"
    );
    open.commit().await.unwrap();
    let got = unarchived_seqs(&store).await;
    assert_eq!(got, vec![low, high]);
    drop(store);
    drop_postgres_database(&url).await;
}

/// The trail's horizon for readers that follow it (the dashboard's feed,
/// `GET /api/v1/audit`): without waiting it answers nothing at once while
/// an append is in progress, and the newest number once none is; waiting,
/// it answers once the append in progress ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_horizon_is_below_every_append_in_progress() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (late, early) = two_archived_items(&store, now).await;
    let settled = store.audit_horizon(false).await.unwrap().unwrap();

    let mut slow = store.pool().begin().await.unwrap();
    let low = append_in(&mut slow, late, "step.slow").await;
    let mut fast = store.pool().begin().await.unwrap();
    let high = append_in(&mut fast, early, "step.fast").await;
    fast.commit().await.unwrap();
    assert!(settled < low && low < high);

    let started = std::time::Instant::now();
    assert_eq!(store.audit_horizon(false).await.unwrap(), None);
    assert!(
        started.elapsed() < Duration::from_millis(90),
        "the answer without waiting took {:?}",
        started.elapsed()
    );
    // Waiting past the lock timeout: nothing either.
    assert_eq!(store.audit_horizon(true).await.unwrap(), None);
    // Waiting while the append ends: its number and the one after.
    let reader = store.clone();
    let waiting = tokio::spawn(async move { reader.audit_horizon(true).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    slow.commit().await.unwrap();
    assert_eq!(waiting.await.unwrap(), Some(high));
    assert_eq!(store.audit_horizon(false).await.unwrap(), Some(high));
    drop(store);
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cursor_starts_below_the_oldest_record_not_archived_before_it() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    migrate_postgres_before(store.pool(), 15).await;
    // The schema has no wq_audit_append_record yet (migration 0018); the
    // binary's other tests chain alike through wq_audit_append.
    set_append_record_function(false);
    let now = OffsetDateTime::now_utc();
    let item = ItemId::new_v7();
    store.item_insert(step_item(item, now)).await.unwrap();
    for kind in ["step.one", "step.two", "step.three", "step.four"] {
        let mut tx = store.pool().begin().await.unwrap();
        append_in(&mut tx, item, kind).await;
        tx.commit().await.unwrap();
    }
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM audit_records ORDER BY seq")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(seqs.len(), 5);
    // Archived with marks, out of order: the first two and the fourth.
    sqlx::query("UPDATE audit_records SET archived_at = $1 WHERE seq = ANY ($2)")
        .bind(now)
        .bind(vec![seqs[0], seqs[1], seqs[3]])
        .execute(store.pool())
        .await
        .unwrap();

    store.migrate().await.unwrap();
    let cursor: i64 = sqlx::query_scalar("SELECT seq FROM audit_archived")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(
        (seqs[1]..seqs[2]).contains(&cursor),
        "{cursor}: up to the oldest record not archived ({seqs:?})"
    );
    let got = unarchived_seqs(&store).await;
    assert_eq!(
        got,
        seqs[2..].to_vec(),
        "the fourth ships again: at least once"
    );
    drop(store);
    drop_postgres_database(&url).await;
}

/// A new item's first record (`append_first_audit`, which takes no chain
/// lock) holds the archive's horizon back like every append: the trail's
/// barrier is taken before its number is drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_items_first_record_holds_the_horizon_back_too() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (_, early) = two_archived_items(&store, now).await;
    let settled = store.audit_horizon(false).await.unwrap().unwrap();

    let item = step_item(ItemId::new_v7(), now);
    let mut slow = store.pool().begin().await.unwrap();
    let (_, chain) = wq_store::postgres::insert_new_item(&mut slow, &item)
        .await
        .unwrap();
    let low = wq_store::postgres::append_first_audit(
        &mut slow,
        chain,
        NewAudit::new(item.id, now, "tester", "item.created"),
    )
    .await
    .unwrap()
    .seq;
    let mut fast = store.pool().begin().await.unwrap();
    let high = append_in(&mut fast, early, "step.fast").await;
    fast.commit().await.unwrap();
    assert!(settled < low && low < high);

    assert_eq!(
        store.audit_horizon(false).await.unwrap(),
        None,
        "the first record in progress holds the horizon"
    );
    slow.commit().await.unwrap();
    assert_eq!(store.audit_horizon(false).await.unwrap(), Some(high));
    drop(store);
    drop_postgres_database(&url).await;
}
