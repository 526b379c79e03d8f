//! Cases: the sweep's candidates.

use super::*;

pub async fn sweep_finds_each_kind_of_candidate(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let idle = insert(store, TYPE_A, now).await.id;
    park(store, idle, now).await;

    // (a) actionable and unleased.
    let actionable = insert(store, TYPE_A, now).await.id;
    assert_eq!(sweep(store, &[TYPE_A], now, 10).await, vec![actionable]);
    park(store, actionable, now).await;

    // (b) pending events, even with actionable forced off.
    let with_event = insert(store, TYPE_A, now).await.id;
    park(store, with_event, now).await;
    add_event(store, with_event, "note", now).await;
    db.force_not_actionable(with_event).await;
    assert!(!get(store, with_event).await.actionable);
    assert_eq!(sweep(store, &[TYPE_A], now, 10).await, vec![with_event]);

    // (c) an expired timer on an active item.
    let timer = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            timer,
            DimensionUpdate::new("needs_reconcile", true)
                .pending_until(now + Duration::minutes(30)),
            now,
        )
        .await
        .unwrap();
    park(store, timer, now).await;
    assert_eq!(sweep(store, &[TYPE_A], now, 10).await, vec![with_event]);
    let later = now + Duration::minutes(30);
    assert_eq!(
        sweep(store, &[TYPE_A], later, 10).await,
        sorted(vec![with_event, timer])
    );

    // An expired timer on a non-active item does not count.
    let failed = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            failed,
            DimensionUpdate::new("needs_reconcile", true)
                .pending_until(now + Duration::minutes(10)),
            now,
        )
        .await
        .unwrap();
    let lease = fail_permanently(store, failed, now).await;
    store.item_park(lease, now).await.unwrap();
    assert_eq!(
        sweep(store, &[TYPE_A], later, 10).await,
        sorted(vec![with_event, timer])
    );

    // An item that is all three at once is returned once.
    let all = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            all,
            DimensionUpdate::new("needs_x", true).pending_until(now),
            now,
        )
        .await
        .unwrap();
    add_event(store, all, "note", now).await;
    assert_eq!(
        sweep(store, &[TYPE_A], later, 10).await,
        sorted(vec![with_event, timer, all])
    );
}

pub async fn sweep_excludes_leased_items_and_other_types(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    // Leased: actionable, with an event and with an expired timer.
    let leased = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            leased,
            DimensionUpdate::new("needs_x", true).pending_until(now),
            now,
        )
        .await
        .unwrap();
    add_event(store, leased, "note", now).await;
    let lease = claim(store, leased, now).await;
    assert!(sweep(store, &[TYPE_A], now, 10).await.is_empty(), "leased");
    assert_eq!(
        sweep(store, &[TYPE_A], lease.until, 10).await,
        vec![leased],
        "an expired lease no longer hides it"
    );

    let other_type = insert(store, TYPE_B, now).await.id;
    add_event(store, other_type, "note", now).await;
    assert!(sweep(store, &[TYPE_A], now, 10).await.is_empty());
    assert_eq!(sweep(store, &[TYPE_B], now, 10).await, vec![other_type]);
    assert_eq!(
        sweep(store, &[TYPE_A, TYPE_B], lease.until, 10).await,
        sorted(vec![leased, other_type])
    );
    assert!(sweep(store, &["unknown"], lease.until, 10).await.is_empty());
}

pub async fn sweep_respects_limit_and_empty_types(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = insert(store, TYPE_A, now).await.id;
        add_event(store, id, "note", now).await;
        ids.push(id);
    }
    let timer = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            timer,
            DimensionUpdate::new("needs_x", true).pending_until(now),
            now,
        )
        .await
        .unwrap();
    ids.push(timer);

    assert_eq!(sweep(store, &[TYPE_A], now, 100).await, sorted(ids.clone()));
    for limit in [1, 2, 5] {
        let some = sweep(store, &[TYPE_A], now, limit).await;
        assert_eq!(some.len(), limit as usize);
        let mut distinct = some.clone();
        distinct.dedup();
        assert_eq!(distinct, some, "distinct ids");
        assert!(some.iter().all(|id| ids.contains(id)));
    }
    assert!(sweep(store, &[TYPE_A], now, 0).await.is_empty());
    assert!(
        sweep(store, &[], now, 100).await.is_empty(),
        "no handled types"
    );
}
