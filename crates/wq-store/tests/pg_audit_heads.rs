//! PostgreSQL: an append moves its chain's head in place. The head row's
//! update changes no indexed column, so with room on its page (migration
//! 0013's fillfactor) it stays on that page, heap-only, and the primary
//! key's index gets no new entry. Packed full, every head would move to
//! another page with each append.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use std::collections::BTreeMap;

use time::OffsetDateTime;
use wq_core::ItemId;
use wq_store::Store;
use wq_store::audit::NewAudit;
use wq_store::postgres::PgStore;
use wq_store::testing::{drop_postgres_database, fresh_postgres_url, step_item};

/// Each chain head's page (the block number of its row's `ctid`).
async fn head_pages(store: &PgStore) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT work_item_id::text, (ctid::text::point)[0]::bigint FROM audit_heads",
    )
    .fetch_all(store.pool())
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_move_chain_heads_in_place() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    // Each item starts its chain with `item.created`: one head row each,
    // written together as a backlog's are.
    let mut ids = Vec::new();
    for _ in 0..400 {
        let id = ItemId::new_v7();
        store.item_insert(step_item(id, now)).await.unwrap();
        ids.push(id);
    }
    let mut before = head_pages(&store).await;
    assert_eq!(before.len(), ids.len());
    let pages: std::collections::BTreeSet<_> = before.values().collect();
    assert!(pages.len() > 2, "the heads fill several pages: {pages:?}");
    for round in 0..3 {
        for &id in &ids {
            let mut tx = store.pool().begin().await.unwrap();
            wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "engine", "step"))
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        let after = head_pages(&store).await;
        let moved = before
            .iter()
            .filter(|(id, page)| after.get(*id) != Some(page))
            .count();
        // None moved here with the room (dead versions are pruned and
        // their room reused); packed full, 150 of the 400 moved in the
        // first round.
        assert!(
            moved * 20 <= ids.len(),
            "round {round}: {moved} of {} heads moved to another page",
            ids.len()
        );
        before = after;
    }
    let (records, broken) = store.audit_verify().await.unwrap();
    assert_eq!(broken, None);
    assert_eq!(records, 4 * ids.len() as u64);
    drop(store);
    drop_postgres_database(&url).await;
}
