//! PostgreSQL: a batch of parks reads its items' chain heads without a
//! lock and chains their records to them; when another writer moves one
//! of those heads before the batch appends, the batch must not fork the
//! chain. It finds the head moved, rolls back, and its parks run one by
//! one, each locking its head: every park still answers, every record is
//! kept once, and every chain verifies.
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
/// holds the chain head, moved.
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
async fn a_batch_whose_chain_head_moved_rolls_back_and_parks_one_by_one() {
    let url = fresh_postgres_url().await;
    let store = PgStore::connect(&url, 10).await.unwrap();
    store.migrate().await.unwrap();
    let now = OffsetDateTime::now_utc();
    let (e, f) = (claimed(&store, now).await, claimed(&store, now).await);
    let (a, b) = (claimed(&store, now).await, claimed(&store, now).await);

    // Both batch slots taken by parks that wait for a head someone holds,
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
    // A's head moves in a transaction still open: the batch reads the head
    // before it.
    let hold_a = open_append(&store, a.id, now).await;
    let mut batch = Vec::new();
    for lease in [a, b] {
        let store = store.clone();
        batch.push(tokio::spawn(async move {
            store.item_park_with(park(lease, now)).await
        }));
    }
    // e parks; its slot takes a and b as one batch, whose append waits for
    // a's head.
    hold_e.commit().await.unwrap();
    assert!(
        wait_for_lock_waiters(store.pool(), None, 2).await,
        "the batch waits for a's head"
    );
    hold_a.commit().await.unwrap();
    hold_f.commit().await.unwrap();

    for task in first.into_iter().chain(batch) {
        assert_eq!(task.await.unwrap().unwrap(), Park::Parked);
    }
    let ((_, _), (_, _), fallbacks) = store.batch_counts();
    assert_eq!(fallbacks, 1, "the batch of a and b fell back to one by one");
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
