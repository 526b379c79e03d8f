//! PostgreSQL: a batch of parks takes its items' chain locks and reads
//! their heads under them (migration 0016); when another writer's append
//! to one of those chains is open, the batch must not fork the chain. It
//! waits for that append to end, then chains after it, without falling
//! back to parks one by one: every park answers, every record is kept
//! once, and every chain verifies.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use time::{Duration, OffsetDateTime};
use wq_core::{DimensionUpdate, ItemId};
use wq_store::audit::{AuditQuery, NewAudit};
use wq_store::postgres::PgStore;
use wq_store::testing::{
    drop_postgres_database, fresh_postgres_url, step_item, wait_for_lock_waiters,
};
use wq_store::{ClaimParams, Lease, OutcomeChanges, Park, ParkParams, Store};

async fn claimed(store: &PgStore, now: OffsetDateTime) -> Lease {
    let id = ItemId::new_v7();
    store.item_insert(step_item(id, now)).await.unwrap();
    store
        .item_claim(ClaimParams {
            id,
            now,
            lease_until: now + Duration::minutes(1),
            handled_types: vec!["t".into()],
        })
        .await
        .unwrap()
        .expect("claimed")
        .1
}

fn park(lease: Lease, now: OffsetDateTime) -> ParkParams {
    ParkParams {
        lease,
        now,
        outcome: Some(OutcomeChanges {
            dimensions: vec![DimensionUpdate::new("needs_step", false)],
            action: Some("step".into()),
            ..OutcomeChanges::default()
        }),
    }
}

/// An append to `id`'s chain in a transaction of its own, left open: it
/// holds the chain's lock.
async fn open_append(
    store: &PgStore,
    id: ItemId,
    now: OffsetDateTime,
) -> sqlx::PgTransaction<'static> {
    let mut tx = store.pool().begin().await.unwrap();
    wq_store::postgres::append_audit(&mut tx, NewAudit::new(id, now, "someone", "note.added"))
        .await
        .unwrap();
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waits_for_an_open_append_to_its_chain_and_chains_after_it() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 10).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (e, f) = (claimed(&store, now).await, claimed(&store, now).await);
    let (a, b) = (claimed(&store, now).await, claimed(&store, now).await);

    // Both batch slots taken by parks that wait for a chain someone holds,
    // so that the next parks queue and run together.
    let hold_e = open_append(&store, e.id, now).await;
    let hold_f = open_append(&store, f.id, now).await;
    // One after the other: started together, they could share one batch.
    let mut first = Vec::new();
    for (lease, waiting) in [(e, 1), (f, 2)] {
        let parker = store.clone();
        first.push(tokio::spawn(async move {
            parker.item_park_with(park(lease, now)).await
        }));
        assert!(
            wait_for_lock_waiters(store.pool(), None, waiting).await,
            "e and f wait, each in a batch of its own"
        );
    }
    // An append to a's chain, in a transaction still open.
    let hold_a = open_append(&store, a.id, now).await;
    let mut batch = Vec::new();
    for lease in [a, b] {
        let store = store.clone();
        batch.push(tokio::spawn(async move {
            store.item_park_with(park(lease, now)).await
        }));
    }
    // e parks; its slot takes a and b as one batch, which waits for a's
    // chain.
    hold_e.commit().await.unwrap();
    assert!(
        wait_for_lock_waiters(store.pool(), None, 2).await,
        "the batch waits for a's chain"
    );
    hold_a.commit().await.unwrap();
    hold_f.commit().await.unwrap();

    for task in first.into_iter().chain(batch) {
        assert_eq!(task.await.unwrap().unwrap(), Park::Parked);
    }
    let ((_, _), (_, _), fallbacks) = store.batch_counts();
    assert_eq!(fallbacks, 0, "the batch of a and b parked together");
    for lease in [a, b, e, f] {
        let item = store.item_get(lease.id).await.unwrap().unwrap();
        assert!(!item.actionable && item.leased_until.is_none());
        let records = store
            .audit_list(AuditQuery {
                item_id: Some(lease.id),
                limit: 10,
                ..AuditQuery::default()
            })
            .await
            .unwrap();
        let kinds: Vec<&str> = records.iter().map(|record| record.kind.as_str()).collect();
        let expected: &[&str] = if lease.id == b.id {
            &["item.created", "action.succeeded"]
        } else {
            &["item.created", "note.added", "action.succeeded"]
        };
        assert_eq!(kinds, expected, "each record once, in chain order");
    }
    assert_eq!(
        store.audit_verify().await.unwrap().1,
        None,
        "no chain forked"
    );
    drop(store);
    drop_postgres_database(&url).await;
}
