//! PostgreSQL: the audit trail keeps each hash as its 32 bytes (migration
//! 0015) and answers it as the hex its callers and `audit verify` know,
//! and records written as hex before the migration keep their chains.
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
    drop_postgres_database, fresh_postgres_url, migrate_postgres_before,
    set_append_record_function, step_item,
};

/// Three items with `item.created` and two more records each, one through
/// the single append (`wq_audit_append`).
async fn chains(store: &PgStore, now: OffsetDateTime) -> Vec<ItemId> {
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = ItemId::new_v7();
        store.item_insert(step_item(id, now)).await.unwrap();
        for kind in ["step.one", "step.two"] {
            let mut tx = store.pool().begin().await.unwrap();
            wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "engine", kind))
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        ids.push(id);
    }
    ids
}

/// Every record's and chain head's stored hash lengths, in bytes (and the empty
/// previous hash of each chain's first record).
async fn stored_lengths(store: &PgStore) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let records: Vec<(i32, i32)> = sqlx::query_as(
        "SELECT octet_length(prev_hash), octet_length(hash) FROM audit_records ORDER BY seq",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let heads: Vec<i32> = sqlx::query_scalar(
        "SELECT octet_length(head)
         FROM wq_audit_heads(ARRAY(SELECT DISTINCT work_item_id FROM audit_records))",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let (prev, own) = records.into_iter().unzip();
    (prev, own, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashes_are_stored_as_their_bytes_and_answered_as_hex() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let ids = chains(&store, now).await;

    let (prev, own, heads) = stored_lengths(&store).await;
    assert_eq!(own, vec![32; 9], "each record's hash is its 32 bytes");
    assert_eq!(heads, vec![32; 3], "each chain head's hash is its 32 bytes");
    let mut firsts = prev.iter().filter(|&&len| len == 0).count();
    assert_eq!(firsts, 3, "each chain's first record follows nothing");
    firsts += prev.iter().filter(|&&len| len == 32).count();
    assert_eq!(firsts, 9, "every other record follows a 32-byte hash");

    for id in ids {
        let records = store
            .audit_list(AuditQuery {
                item_id: Some(id),
                limit: 100,
                ..AuditQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(records.len(), 3);
        let mut previous = String::new();
        for record in &records {
            assert_eq!(record.prev_hash, previous, "chained in hex");
            assert_eq!(
                record.hash,
                record.digest(),
                "the hex of its canonical JSON's hash"
            );
            previous.clone_from(&record.hash);
        }
        let head: String =
            sqlx::query_scalar("SELECT encode(head, 'hex') FROM wq_audit_heads(ARRAY[$1])")
                .bind(id.0)
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(head, previous, "the head is the last record's hash");
    }
    let (checked, broken) = store.audit_verify().await.unwrap();
    assert_eq!((checked, broken), (9, None));
    drop(store);
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_written_as_hex_before_migration_0015_verify_after_it() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    migrate_postgres_before(store.pool(), 15).await;
    // The schema has no wq_audit_append_record yet (migration 0018); the
    // binary's other tests chain alike through wq_audit_append.
    set_append_record_function(false);
    let now = OffsetDateTime::now_utc();
    let ids = chains(&store, now).await;
    let hex_heads: Vec<String> =
        sqlx::query_scalar("SELECT hash FROM audit_heads ORDER BY work_item_id")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert!(
        hex_heads.iter().all(|head| head.len() == 64),
        "hex before: {hex_heads:?}"
    );

    store.migrate().await.unwrap();
    let (_, own, heads) = stored_lengths(&store).await;
    assert_eq!((own, heads), (vec![32; 9], vec![32; 3]));
    let converted: Vec<String> = sqlx::query_scalar(
        "SELECT encode(head, 'hex')
         FROM wq_audit_heads(ARRAY(SELECT DISTINCT work_item_id FROM audit_records))
         ORDER BY id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(converted, hex_heads, "the same hashes, as bytes");
    assert_eq!(store.audit_verify().await.unwrap(), (9, None));

    // The chains go on after the migrations, from the converted hashes.
    for &id in &ids {
        let mut tx = store.pool().begin().await.unwrap();
        wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "engine", "step.three"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(store.audit_verify().await.unwrap(), (12, None));
    drop(store);
    drop_postgres_database(&url).await;
}
