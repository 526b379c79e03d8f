//! Cases: the loop's snapshot and its exit (park, park with an outcome).

use super::*;

pub async fn park_parks_and_clears_expired_timers(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut new = new_item(TYPE_A, None, now);
    new.dimensions = vec![
        DimensionUpdate::new("needs_reconcile", true).pending_until(now - Duration::minutes(1)),
        DimensionUpdate::new("needs_empty_check", true).pending_until(now + Duration::minutes(30)),
        DimensionUpdate::new("needs_mr", false),
    ];
    let id = store.item_insert(new).await.unwrap().id;
    let lease = claim(store, id, now).await;
    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);

    let parked = get(store, id).await;
    assert!(!parked.actionable);
    assert_eq!(parked.leased_until, None);
    let view = store.item_view(id, now).await.unwrap().unwrap();
    assert_eq!(
        view.dimension("needs_reconcile", "").unwrap().pending_until,
        None,
        "expired timer consumed"
    );
    assert_eq!(
        view.dimension("needs_empty_check", "")
            .unwrap()
            .pending_until,
        Some(to_micros(now + Duration::minutes(30))),
        "future timer kept"
    );
    assert!(sweep(store, &[TYPE_A], now, 10).await.is_empty(), "idle");
    assert_eq!(
        sweep(store, &[TYPE_A], now + Duration::minutes(30), 10).await,
        vec![id],
        "the timer wakes it"
    );
    // A parked item is claimable again, and parking twice is refused.
    assert_lease_lost(store.item_park(lease, now).await, id, "park twice");
    let lease = claim(store, id, now).await;

    // Parking a finished item consumes its future timers too: they would
    // never fire, and would sit in the sweep's expired range for good.
    store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now,
            phase: Some(Phase::Completed),
            error: None,
            dimensions: Vec::new(),
            action: None,
            records: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
    let rows = store.dimension_list(id).await.unwrap();
    assert!(
        rows.iter().all(|row| row.pending_until.is_none()),
        "{rows:?}"
    );
}

pub async fn park_refuses_while_events_are_pending(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let lease = claim(store, id, now).await;
    let event_id = add_event(store, id, "note", now).await;
    assert_eq!(
        store.item_park(lease, now).await.unwrap(),
        Park::EventsPending
    );
    let item = get(store, id).await;
    assert!(item.actionable);
    assert_eq!(item.leased_until, Some(lease.until), "lease kept");

    store
        .event_apply(ApplyEvent {
            lease,
            event_id,
            now,
            result: EventResult::ignored(),
        })
        .await
        .unwrap();
    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
}

pub async fn snapshot_reports_the_view_and_pending_events(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut new = new_item(TYPE_A, None, now);
    new.dimensions = vec![DimensionUpdate::new("needs_mr", true)];
    let id = store.item_insert(new).await.unwrap().id;

    let later = now + Duration::seconds(3);
    let snapshot = store.item_snapshot(id, later).await.unwrap().unwrap();
    assert!(!snapshot.has_events);
    assert_eq!(snapshot.view.item, get(store, id).await);
    assert_eq!(snapshot.view.now, to_micros(later));
    assert_eq!(
        snapshot.view.dimensions,
        store.dimension_list(id).await.unwrap()
    );
    assert!(snapshot.view.dimension("needs_mr", "").is_some());

    add_event(store, id, "push", now).await;
    let snapshot = store.item_snapshot(id, later).await.unwrap().unwrap();
    assert!(snapshot.has_events);
    let view = store.item_view(id, later).await.unwrap().unwrap();
    assert_eq!(snapshot.view.item, view.item);
    assert_eq!(snapshot.view.dimensions, view.dimensions);

    assert!(
        store
            .item_snapshot(ItemId::new_v7(), later)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn park_with_outcome_writes_it_and_parks(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut new = new_item(TYPE_A, None, now);
    new.dimensions = vec![
        DimensionUpdate::new("needs_reconcile", true).pending_until(now - Duration::minutes(1)),
    ];
    let id = store.item_insert(new).await.unwrap().id;
    let lease = claim(store, id, now).await;
    let retry_at = now + Duration::seconds(5);
    store
        .item_record_failure(RecordFailure {
            lease,
            now,
            error: "transient".into(),
            max_attempts: 5,
            permanent: false,
            retry_at,
            outage: false,
            outage_started_before: now,
            action: None,
        })
        .await
        .unwrap();
    let lease = claim(store, id, retry_at).await;

    let later = retry_at + Duration::seconds(1);
    let park = store
        .item_park_with(ParkParams {
            lease,
            now: later,
            outcome: Some(OutcomeChanges {
                phase: Some(Phase::Completed),
                error: Some("done".into()),
                dimensions: vec![
                    DimensionUpdate::new("needs_mr", false).detail(serde_json::json!({ "mr": 7 })),
                ],
                action: None,
                records: Vec::new(),
            }),
        })
        .await
        .unwrap();
    assert_eq!(park, Park::Parked);

    let item = get(store, id).await;
    assert_eq!(item.phase, Phase::Completed);
    assert_eq!(item.error.as_deref(), Some("done"));
    assert_eq!(item.attempts, 0, "success resets consecutive failures");
    assert_eq!(item.updated_at, to_micros(later));
    assert!(!item.actionable, "parked");
    assert_eq!(item.leased_until, None, "lease released");
    let dimensions = store.dimension_list(id).await.unwrap();
    let mr = dimensions
        .iter()
        .find(|row| row.dimension == "needs_mr")
        .expect("outcome dimension written");
    assert_eq!(mr.detail, serde_json::json!({ "mr": 7 }));
    assert!(
        dimensions.iter().all(|row| row.pending_until.is_none()),
        "expired timers consumed: {dimensions:?}"
    );
    assert_lease_lost(store.item_park(lease, later).await, id, "park twice");
}

pub async fn park_with_outcome_while_events_are_pending_keeps_the_lease(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let lease = claim(store, id, now).await;
    let event_id = add_event(store, id, "note", now).await;

    let later = now + Duration::seconds(1);
    let park = store
        .item_park_with(ParkParams {
            lease,
            now: later,
            outcome: Some(OutcomeChanges {
                phase: Some(Phase::Completed),
                error: None,
                dimensions: vec![DimensionUpdate::new("needs_mr", false)],
                action: None,
                records: Vec::new(),
            }),
        })
        .await
        .unwrap();
    assert_eq!(park, Park::EventsPending);

    let item = get(store, id).await;
    assert_eq!(item.phase, Phase::Completed, "outcome committed");
    assert_eq!(item.updated_at, to_micros(later));
    assert!(item.actionable);
    assert_eq!(item.leased_until, Some(lease.until), "lease kept");
    assert_eq!(store.dimension_list(id).await.unwrap().len(), 1);
    assert_eq!(
        store.event_next(id).await.unwrap().map(|event| event.id),
        Some(event_id)
    );

    store
        .event_apply(ApplyEvent {
            lease,
            event_id,
            now: later,
            result: EventResult::ignored(),
        })
        .await
        .unwrap();
    assert_eq!(store.item_park(lease, later).await.unwrap(), Park::Parked);
}

pub async fn park_with_stale_lease_writes_nothing(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;
    let stale = claim(store, item.id, now).await;
    let later = now + LEASE + Duration::seconds(1);
    let current = claim(store, item.id, later).await;
    let before = get(store, item.id).await;

    for with_events in [false, true] {
        if with_events {
            add_event(store, item.id, "push", later).await;
        }
        let result = store
            .item_park_with(ParkParams {
                lease: stale,
                now: later + Duration::seconds(1),
                outcome: Some(OutcomeChanges {
                    phase: Some(Phase::Completed),
                    error: Some("stale".into()),
                    dimensions: vec![DimensionUpdate::new("needs_mr", false)],
                    action: None,
                    records: Vec::new(),
                }),
            })
            .await;
        assert_lease_lost(result, item.id, "park_with outcome");
        assert_lease_lost(
            store.item_park(stale, later + Duration::seconds(1)).await,
            item.id,
            "park_with without outcome",
        );
    }
    let after = get(store, item.id).await;
    assert_eq!(after.phase, Phase::Active);
    assert_eq!(after.error, None);
    assert_eq!(after.updated_at, before.updated_at);
    assert_eq!(
        after.leased_until,
        Some(current.until),
        "current lease kept"
    );
    assert!(store.dimension_list(item.id).await.unwrap().is_empty());
}

/// Parks that arrive together (on both backends they share a statement)
/// each get their own answer and write only their own item: an outcome
/// with a detail and a timer, a park without an outcome, an item with an
/// event waiting (outcome written, lease kept), and a stale lease (nothing
/// written); some of the outcomes finish their item, whose timers all go.
/// Every record chains.
pub async fn parks_that_arrive_together_each_get_their_own_answer(db: &TestDb) {
    const ITEMS: usize = 24;
    let now = t0();
    let later = now + LEASE + Duration::seconds(1);
    let mut parks = Vec::new();
    for n in 0..ITEMS {
        let store = db.store();
        let store = store.as_ref();
        let mut item = new_item(TYPE_A, None, now);
        // A timer that has expired by the park (consumed), and one that has
        // not (kept).
        item.dimensions = vec![
            DimensionUpdate::new("needs_t", true).pending_until(now + Duration::seconds(1)),
            DimensionUpdate::new("needs_u", true).pending_until(later + Duration::minutes(5)),
        ];
        let id = store.item_insert(item).await.unwrap().id;
        let lease = match n % 4 {
            3 => {
                // Its lease expired and another worker holds a new one.
                let stale = claim(store, id, now).await;
                claim(store, id, later).await;
                stale
            }
            _ => claim(store, id, later).await,
        };
        if n % 4 == 2 {
            add_event(store, id, "note", later).await;
        }
        let outcome = (n % 4 != 1).then(|| OutcomeChanges {
            // Every other parked outcome finishes its item.
            phase: (n % 8 == 4).then_some(Phase::Completed),
            error: Some(format!("e{n}")),
            dimensions: vec![
                DimensionUpdate::new("needs_x", false).detail(serde_json::json!({ "n": n })),
                DimensionUpdate::new("needs_y", true).pending_until(later + Duration::minutes(1)),
            ],
            action: Some("step".into()),
            records: vec![wq_core::OutcomeRecord {
                kind: "forge.note_posted".into(),
                metadata: serde_json::json!({ "n": n }),
            }],
        });
        parks.push((
            n,
            id,
            ParkParams {
                lease,
                now: later,
                outcome,
            },
        ));
    }
    let barrier = Arc::new(Barrier::new(ITEMS));
    let tasks: Vec<_> = parks
        .iter()
        .cloned()
        .map(|(n, id, params)| {
            let store = db.store();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                (n, id, store.item_park_with(params).await)
            })
        })
        .collect();
    let store = db.store();
    let store = store.as_ref();
    for task in tasks {
        let (n, id, result) = task.await.unwrap();
        let item = get(store, id).await;
        let dimensions = store.dimension_list(id).await.unwrap();
        let row = |name: &str| dimensions.iter().find(|row| row.dimension == name).cloned();
        let records = store
            .audit_list(wq_store::audit::AuditQuery {
                item_id: Some(id),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        let kinds: Vec<&str> = records.iter().map(|record| record.kind.as_str()).collect();
        match n % 4 {
            0 | 2 => {
                let parked = if n % 4 == 0 {
                    Park::Parked
                } else {
                    Park::EventsPending
                };
                assert_eq!(result.unwrap(), parked, "item {n}");
                assert_eq!(item.error, Some(format!("e{n}")), "item {n}");
                assert_eq!(item.updated_at, to_micros(later));
                let x = row("needs_x").expect("outcome written");
                assert_eq!(x.detail, serde_json::json!({ "n": n }));
                assert_eq!(x.status, DimensionStatus::False);
                let y = row("needs_y").expect("outcome written");
                assert_eq!(
                    y.detail,
                    serde_json::json!({}),
                    "a new row without a detail"
                );
                let finished = n % 8 == 4;
                assert_eq!(
                    item.phase,
                    if finished {
                        Phase::Completed
                    } else {
                        Phase::Active
                    }
                );
                assert_eq!(
                    y.pending_until,
                    (!finished).then(|| to_micros(later + Duration::minutes(1))),
                    "item {n}: a finished item's timers all go, the outcome's too"
                );
                let expected: &[&str] = if n % 4 == 0 {
                    &["item.created", "action.succeeded", "forge.note_posted"]
                } else {
                    &[
                        "item.created",
                        "event.received",
                        "action.succeeded",
                        "forge.note_posted",
                    ]
                };
                assert_eq!(kinds, expected, "item {n}");
                if n % 4 == 0 {
                    assert!(!item.actionable && item.leased_until.is_none(), "item {n}");
                    assert_eq!(row("needs_t").unwrap().pending_until, None, "consumed");
                } else {
                    assert!(item.actionable && item.leased_until.is_some(), "item {n}");
                    assert!(
                        row("needs_t").unwrap().pending_until.is_some(),
                        "not parked"
                    );
                }
                assert_eq!(
                    row("needs_u").unwrap().pending_until.is_some(),
                    !finished,
                    "item {n}: not expired, kept unless the item finished"
                );
            }
            1 => {
                assert_eq!(result.unwrap(), Park::Parked, "item {n}");
                assert!(!item.actionable && item.leased_until.is_none());
                assert_eq!(item.error, None);
                assert!(row("needs_x").is_none());
                assert_eq!(row("needs_t").unwrap().pending_until, None, "consumed");
                assert_eq!(kinds, ["item.created"]);
            }
            _ => {
                assert_lease_lost(result, id, "a stale lease");
                assert!(item.actionable && item.leased_until.is_some(), "item {n}");
                assert_eq!(item.error, None, "nothing written");
                assert!(row("needs_x").is_none(), "nothing written");
                assert_eq!(kinds, ["item.created"]);
            }
        }
    }
    assert_eq!(
        store.audit_verify().await.unwrap().1,
        None,
        "every chain verifies"
    );
    match &db.backend {
        Backend::Sqlite(sqlite) => {
            assert!(
                sqlite.largest_park_batch() > 1,
                "parks shared a job (largest batch {})",
                sqlite.largest_park_batch()
            );
            assert_eq!(
                sqlite.park_fallbacks(),
                0,
                "no batch fell back to one by one"
            );
        }
        Backend::Postgres(pg) => {
            assert_eq!(pg.batch_counts().2, 0, "no batch fell back to one by one");
        }
    }
}
