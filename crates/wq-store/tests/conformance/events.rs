//! Cases: inserting, reading and applying pending events.

use super::*;

pub async fn event_insert_wakes_the_item(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    park(store, id, now).await;
    assert!(!get(store, id).await.actionable);

    let later = now + Duration::seconds(3);
    let event_id = add_event(store, id, "pipeline", later).await;
    let woken = get(store, id).await;
    assert!(woken.actionable, "set in the event's transaction");
    assert_eq!(woken.leased_until, None);
    let event = store.event_next(id).await.unwrap().unwrap();
    assert_eq!(event.id, event_id);
    assert_eq!(event.received_at, to_micros(later));

    let missing = ItemId::new_v7();
    let result = store
        .event_insert(NewEvent {
            item_id: missing,
            event_type: "pipeline".into(),
            body: serde_json::json!({}),
            now,
            origin: None,
        })
        .await;
    assert!(
        matches!(result, Err(StoreError::NotFound(found)) if found == missing),
        "{result:?}"
    );
    assert!(store.event_next(missing).await.unwrap().is_none());
}

pub async fn event_next_returns_the_oldest_event(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let other = insert(store, TYPE_A, now).await.id;
    assert!(store.event_next(id).await.unwrap().is_none());

    add_event(store, other, "other", now).await;
    let body = serde_json::json!({ "object_kind": "merge_request", "n": [1, 2, { "x": null }] });
    let first = store
        .event_insert(NewEvent {
            item_id: id,
            event_type: "merge_request".into(),
            body: body.clone(),
            now,
            origin: None,
        })
        .await
        .unwrap();
    let second = add_event(store, id, "note", now + Duration::seconds(1)).await;
    let third = add_event(store, id, "pipeline", now + Duration::seconds(2)).await;
    assert!(first < second && second < third);

    let next = store.event_next(id).await.unwrap().unwrap();
    assert_eq!(next.id, first);
    assert_eq!(next.work_item_id, id);
    assert_eq!(next.event_type, "merge_request");
    assert_eq!(next.body, body);
    assert_eq!(next.received_at, to_micros(now));

    let lease = claim(store, id, now).await;
    for expected in [first, second, third] {
        let next = store.event_next(id).await.unwrap().unwrap();
        assert_eq!(next.id, expected);
        store
            .event_apply(ApplyEvent {
                lease,
                event_id: next.id,
                now,
                result: EventResult::ignored(),
            })
            .await
            .unwrap();
    }
    assert!(store.event_next(id).await.unwrap().is_none());
    assert_eq!(
        store.event_next(other).await.unwrap().unwrap().event_type,
        "other"
    );
}

pub async fn event_apply_applies_phase_and_dimensions(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let event_id = add_event(store, id, "merge_request", now).await;
    let lease = claim(store, id, now).await;

    // A dimension-only event without a time: last_event_at = now.
    let note = add_event(store, id, "note", now).await;
    let applied = store
        .event_apply(ApplyEvent {
            lease,
            event_id,
            now,
            result: EventResult::ignored()
                .with_dimension(DimensionUpdate::new("needs_reconcile", true)),
        })
        .await
        .unwrap();
    assert_eq!(applied, EventApplied::Applied);
    let item = get(store, id).await;
    assert_eq!(item.phase, Phase::Active);
    assert_eq!(item.last_event_at, Some(to_micros(now)));

    let event_ts = now + Duration::seconds(5);
    let later = now + Duration::seconds(10);
    let mut result = EventResult::ignored()
        .with_phase(Phase::Cancelled)
        .at(event_ts)
        .with_dimension(
            DimensionUpdate::new("needs_reconcile", false)
                .detail(serde_json::json!({ "state": "closed" })),
        );
    result.reason = Some("merge request closed".into());
    let applied = store
        .event_apply(ApplyEvent {
            lease,
            event_id: note,
            now: later,
            result,
        })
        .await
        .unwrap();
    assert_eq!(applied, EventApplied::Applied);
    let item = get(store, id).await;
    assert_eq!(item.phase, Phase::Cancelled);
    assert_eq!(item.error.as_deref(), Some("merge request closed"));
    assert_eq!(item.last_event_at, Some(to_micros(event_ts)));
    assert_eq!(item.updated_at, to_micros(later));
    assert_eq!(item.leased_until, Some(lease.until), "lease kept");
    assert!(item.actionable);
    let dimensions = store.dimension_list(id).await.unwrap();
    assert_eq!(dimensions.len(), 1);
    assert_eq!(dimensions[0].status, DimensionStatus::False);
    assert_eq!(
        dimensions[0].detail,
        serde_json::json!({ "state": "closed" })
    );
    assert!(store.event_next(id).await.unwrap().is_none(), "deleted");
}

pub async fn event_apply_stale_phase_still_applies_dimensions(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let newer = add_event(store, id, "pipeline", now).await;
    let older = add_event(store, id, "merge_request", now).await;
    let lease = claim(store, id, now).await;

    let newer_ts = now - Duration::seconds(10);
    let older_ts = now - Duration::seconds(20);
    store
        .event_apply(ApplyEvent {
            lease,
            event_id: newer,
            now,
            result: EventResult::ignored().at(newer_ts),
        })
        .await
        .unwrap();
    assert_eq!(
        get(store, id).await.last_event_at,
        Some(to_micros(newer_ts))
    );

    let mut result = EventResult::ignored()
        .with_phase(Phase::Completed)
        .at(older_ts)
        .with_dimension(DimensionUpdate::new("needs_ci", false));
    result.reason = Some("stale".into());
    let applied = store
        .event_apply(ApplyEvent {
            lease,
            event_id: older,
            now,
            result,
        })
        .await
        .unwrap();
    assert_eq!(applied, EventApplied::StalePhase);
    let item = get(store, id).await;
    assert_eq!(item.phase, Phase::Active, "stale phase not applied");
    assert_eq!(item.error, None);
    assert_eq!(
        item.last_event_at,
        Some(to_micros(newer_ts)),
        "last_event_at only moves forward"
    );
    let dimensions = store.dimension_list(id).await.unwrap();
    assert_eq!(dimensions.len(), 1, "dimensions still applied");
    assert_eq!(dimensions[0].dimension, "needs_ci");
    assert!(store.event_next(id).await.unwrap().is_none(), "deleted");

    // An event at exactly last_event_at is in order.
    let same = add_event(store, id, "merge_request", now).await;
    let applied = store
        .event_apply(ApplyEvent {
            lease,
            event_id: same,
            now,
            result: EventResult::ignored()
                .with_phase(Phase::Completed)
                .at(newer_ts),
        })
        .await
        .unwrap();
    assert_eq!(applied, EventApplied::Applied);
    assert_eq!(get(store, id).await.phase, Phase::Completed);
}

pub async fn event_apply_discards_events_of_inactive_items(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let lease = move_to(store, id, Phase::Completed, now).await;
    let event_id = add_event(store, id, "merge_request", now).await;
    let before = get(store, id).await;

    let applied = store
        .event_apply(ApplyEvent {
            lease,
            event_id,
            now: now + Duration::seconds(1),
            result: EventResult::ignored()
                .with_phase(Phase::Active)
                .with_dimension(DimensionUpdate::new("needs_mr", true)),
        })
        .await
        .unwrap();
    assert_eq!(applied, EventApplied::ItemNotActive);
    let after = get(store, id).await;
    assert_eq!(after.phase, Phase::Completed);
    assert_eq!(after.last_event_at, before.last_event_at);
    assert_eq!(after.updated_at, before.updated_at);
    assert!(store.dimension_list(id).await.unwrap().is_empty());
    assert!(store.event_next(id).await.unwrap().is_none(), "discarded");
    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
}

/// The delivery an event came from is kept with it (DDR-33): the delivery
/// id and the raw body, bounded as the audit record bounds it; the
/// `event.received` record names the event and the delivery.
pub async fn an_event_keeps_its_raw_delivery(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let raw = format!(
        "{{\"object_kind\":\"pipeline\",\"pad\":\"{}\"}}",
        "é".repeat(40_000)
    );
    let event_id = store
        .event_insert(NewEvent {
            item_id: id,
            event_type: "pipeline".into(),
            body: serde_json::json!({"interpreted": true}),
            now,
            origin: Some(wq_store::EventOrigin {
                actor: "webhook:gitlab".into(),
                delivery_id: Some("delivery-7".into()),
                raw: Some(raw.clone()),
            }),
        })
        .await
        .unwrap();
    let event = store.event_next(id).await.unwrap().unwrap();
    assert_eq!(event.id, event_id);
    assert_eq!(event.body, serde_json::json!({"interpreted": true}));
    assert_eq!(event.delivery_id.as_deref(), Some("delivery-7"));
    let kept = event.raw.expect("the raw body");
    assert!(
        kept.len() <= wq_store::audit::MAX_RAW_BYTES,
        "{}",
        kept.len()
    );
    assert!(
        raw.starts_with(&kept),
        "a prefix, cut at a character boundary"
    );
    let records = store
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let received = records
        .iter()
        .find(|r| r.kind == "event.received")
        .expect("its record");
    assert_eq!(received.metadata["event_id"], event_id);
    assert_eq!(received.metadata["delivery_id"], "delivery-7");
    assert_eq!(received.metadata["raw"], kept.as_str());

    // Without an origin, nothing is kept but the event.
    add_event(store, id, "other", now).await;
    store
        .event_apply(ApplyEvent {
            lease: claim(store, id, now).await,
            event_id,
            now,
            result: EventResult::ignored(),
        })
        .await
        .unwrap();
    let plain = store.event_next(id).await.unwrap().unwrap();
    assert_eq!(plain.event_type, "other");
    assert_eq!((plain.delivery_id, plain.raw), (None, None));
}
