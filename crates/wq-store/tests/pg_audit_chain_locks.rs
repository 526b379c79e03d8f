//! PostgreSQL: a chain's head is its last record (migration 0016), and its
//! writers take turns through the chain's lock. An append writes its
//! records and nothing else (no head row moves, no table scanned for its
//! head), and a writer that comes while another one's append is open waits
//! for it and chains after it.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use time::OffsetDateTime;
use wq_core::ItemId;
use wq_store::Store;
use wq_store::audit::{AuditQuery, NewAudit};
use wq_store::postgres::PgStore;
use wq_store::testing::{
    drop_postgres_database, fresh_postgres_url, step_item, wait_for_lock_waiters,
};

/// A new database with one item, whose chain starts with `item.created`.
async fn one_item() -> (String, PgStore, OffsetDateTime, ItemId) {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let id = ItemId::new_v7();
    store.item_insert(step_item(id, now)).await.unwrap();
    (url, store, now, id)
}

/// The rows this connection inserted, updated and deleted, and its
/// sequential scans, by table.
async fn row_changes(
    tx: &mut sqlx::PgTransaction<'_>,
) -> std::collections::BTreeMap<String, (i64, i64, i64, i64)> {
    sqlx::query_as::<_, (String, i64, i64, i64, i64)>(
        "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_del, seq_scan
         FROM pg_stat_xact_user_tables",
    )
    .fetch_all(&mut **tx)
    .await
    .unwrap()
    .into_iter()
    .map(|(table, ins, upd, del, scans)| (table, (ins, upd, del, scans)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_writes_its_records_and_nothing_else() {
    let (url, store, now, id) = one_item().await;

    let mut tx = store.pool().begin().await.unwrap();
    // The view holds this connection's counts not yet reported too: what
    // the appends write is the difference.
    let before = row_changes(&mut tx).await;
    // More appends than PL/pgSQL plans one by one before it keeps a plan.
    for step in 0..20 {
        let kind = format!("step.{step}");
        wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "engine", kind))
            .await
            .unwrap();
    }
    let written: Vec<(String, i64, i64, i64, i64)> = row_changes(&mut tx)
        .await
        .into_iter()
        .filter_map(|(table, (ins, upd, del, scans))| {
            let (was_ins, was_upd, was_del, was_scans) =
                before.get(&table).copied().unwrap_or_default();
            let changed = (
                ins - was_ins,
                upd - was_upd,
                del - was_del,
                scans - was_scans,
            );
            (changed != (0, 0, 0, 0)).then_some((table, changed.0, changed.1, changed.2, changed.3))
        })
        .collect();
    tx.commit().await.unwrap();
    assert_eq!(
        written,
        vec![("audit_records".to_owned(), 20, 0, 0, 0)],
        "twenty records inserted, no head row written, no table scanned for a head"
    );
    let (records, broken) = store.audit_verify().await.unwrap();
    assert_eq!((records, broken), (21, None));
    drop(store);
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waits_for_an_open_append_to_its_chain_and_chains_after_it() {
    let (url, store, now, id) = one_item().await;

    let mut first = store.pool().begin().await.unwrap();
    wq_store::postgres::append_audit(&mut first, NewAudit::new(id, now, "someone", "first"))
        .await
        .unwrap();
    let second = tokio::spawn({
        let store = store.clone();
        async move {
            let mut tx = store.pool().begin().await.unwrap();
            wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "engine", "second"))
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    });
    assert!(
        wait_for_lock_waiters(store.pool(), None, 1).await,
        "the second append waits for the chain's lock"
    );
    assert!(!second.is_finished());
    first.commit().await.unwrap();
    second.await.unwrap();

    let records = store
        .audit_list(AuditQuery {
            item_id: Some(id),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let kinds: Vec<&str> = records.iter().map(|record| record.kind.as_str()).collect();
    assert_eq!(kinds, ["item.created", "first", "second"]);
    assert_eq!(
        records[2].prev_hash, records[1].hash,
        "the second chains after the first, not beside it"
    );
    assert_eq!(store.audit_verify().await.unwrap(), (3, None));
    drop(store);
    drop_postgres_database(&url).await;
}
