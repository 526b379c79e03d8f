//! PostgreSQL: a claim whose statement snapshot predates another worker's
//! commit must not return that snapshot's (stale) dimensions. Without the
//! guard in `items/claim_snapshot.sql`, the UPDATE's re-check on the newer
//! row claims the item while the dimension read shows the state before the
//! commit, and the loop redoes a step that was already done.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use time::{Duration, OffsetDateTime};
use wq_core::{DimensionStatus, DimensionUpdate, ItemId};
use wq_store::postgres::PgStore;
use wq_store::testing::{
    drop_postgres_database, fresh_postgres_url, step_item, wait_for_lock_waiters,
};
use wq_store::{ClaimParams, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_racing_a_commit_never_returns_dimensions_from_before_it() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 5).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let id = ItemId::new_v7();
    store.item_insert(step_item(id, now)).await.unwrap();
    let params = move |now| ClaimParams {
        id,
        now,
        lease_until: now + Duration::minutes(1),
        handled_types: vec!["t".into()],
    };
    // Worker A claims the item, does its step and parks; its last commit
    // (the park) is still open. Its net effect: the row changed, the step
    // is done, the item is unleased again.
    let mut a = store.pool().begin().await.unwrap();
    sqlx::query("UPDATE work_items SET leased_until = NULL, actionable = false WHERE id = $1")
        .bind(id.0)
        .execute(&mut *a)
        .await
        .unwrap();
    wq_store::postgres::upsert_dimension(
        &mut a,
        id,
        &DimensionUpdate::new("needs_step", false),
        now,
    )
    .await
    .unwrap();

    // Worker B's claim starts now: its snapshot sees the item unleased with
    // the step to do, so it waits for A's row lock.
    let b_store = store.clone();
    let b = tokio::spawn(async move { b_store.item_claim_snapshot(params(now)).await });
    if !wait_for_lock_waiters(store.pool(), None, 1).await {
        let outcome = if b.is_finished() {
            format!("{:?}", b.await)
        } else {
            "running".into()
        };
        panic!("B never waited for A's lock: {outcome}");
    }
    a.commit().await.unwrap();

    match b.await.unwrap().unwrap() {
        None => {}
        Some((snapshot, _)) => {
            let step = snapshot.view.dimension("needs_step", "").expect("row");
            assert_eq!(
                step.status,
                DimensionStatus::False,
                "B claimed with dimensions from before A's commit"
            );
        }
    }
    // A claim after the commit sees it.
    let (snapshot, _) = store
        .item_claim_snapshot(params(now))
        .await
        .unwrap()
        .expect("claimable after A's park");
    assert_eq!(
        snapshot.view.dimension("needs_step", "").unwrap().status,
        DimensionStatus::False
    );
    drop(store);
    drop_postgres_database(&url).await;
}

/// PostgreSQL: a batch claim skips a row another transaction holds instead
/// of waiting for it (and so never claims it with dimensions from before
/// that transaction's commit), and takes it, as it is then, once that
/// transaction committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_skips_a_held_row_and_takes_it_after_the_commit() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 5).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (held, free) = (ItemId::new_v7(), ItemId::new_v7());
    for id in [held, free] {
        store.item_insert(step_item(id, now)).await.unwrap();
    }
    let params = move |now: OffsetDateTime| wq_store::ClaimDueParams {
        now,
        lease_until: now + Duration::minutes(1),
        handled_types: vec!["t".into()],
        limit: 10,
        after: None,
    };
    // Another writer holds `held`'s row and changes its dimensions.
    let mut a = store.pool().begin().await.unwrap();
    sqlx::query("UPDATE work_items SET updated_at = $2 WHERE id = $1")
        .bind(held.0)
        .bind(now)
        .execute(&mut *a)
        .await
        .unwrap();
    wq_store::postgres::upsert_dimension(
        &mut a,
        held,
        &DimensionUpdate::new("needs_step", false),
        now,
    )
    .await
    .unwrap();
    let first = store.item_claim_due(params(now)).await.unwrap();
    let ids: Vec<ItemId> = first.iter().map(|(_, lease)| lease.id).collect();
    assert_eq!(ids, vec![free], "the held row is skipped, not waited for");
    a.commit().await.unwrap();
    let second = store.item_claim_due(params(now)).await.unwrap();
    assert_eq!(second.len(), 1);
    let (snapshot, lease) = &second[0];
    assert_eq!(lease.id, held);
    assert_eq!(
        snapshot.view.dimension("needs_step", "").unwrap().status,
        DimensionStatus::False,
        "claimed as it is after the commit"
    );
    drop(store);
    drop_postgres_database(&url).await;
}
