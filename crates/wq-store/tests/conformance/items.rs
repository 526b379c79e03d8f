//! Cases: inserting, reading, listing, retrying and counting items, and dimension writes outside the loop.

use super::*;

pub async fn insert_get_view_and_health(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let expected_backend = match db.backend {
        Backend::Sqlite(_) => BackendKind::Sqlite,
        Backend::Postgres(_) => BackendKind::Postgres,
    };
    assert_eq!(store.backend(), expected_backend);
    store.ping().await.unwrap();
    store.migrate().await.expect("migrating twice is a no-op");

    let now = t0();
    let mut new = new_item(TYPE_A, Some("key-1"), now);
    new.dimensions = vec![
        DimensionUpdate::new("needs_mr", true),
        DimensionUpdate::new("needs_build", false)
            .variant("arm64")
            .detail(serde_json::json!({ "pipeline": 7 }))
            .pending_until(now + Duration::minutes(5)),
    ];
    let id = new.id;
    let inserted = store.item_insert(new).await.unwrap();
    assert_eq!(inserted.id, id);
    assert_eq!(inserted.item_type, TYPE_A);
    assert_eq!(inserted.phase, Phase::Active);
    assert!(inserted.actionable);
    assert_eq!(inserted.attempts, 0);
    assert_eq!(inserted.error, None);
    assert_eq!(inserted.leased_until, None);
    assert_eq!(inserted.idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(inserted.caller_identity.as_deref(), Some("tester"));
    assert_eq!(inserted.created_at, to_micros(now));
    assert_eq!(inserted.updated_at, to_micros(now));
    assert_eq!(inserted.last_event_at, None);
    assert_eq!(get(store, id).await, inserted);

    let view = store.item_view(id, now).await.unwrap().expect("view");
    assert_eq!(view.item, inserted);
    assert_eq!(view.now, to_micros(now));
    assert_eq!(view.dimensions.len(), 2);
    let build = view.dimension("needs_build", "arm64").expect("build row");
    assert_eq!(build.status, DimensionStatus::False);
    assert_eq!(build.detail, serde_json::json!({ "pipeline": 7 }));
    assert_eq!(
        build.pending_until,
        Some(to_micros(now + Duration::minutes(5)))
    );
    assert_eq!(build.updated_at, to_micros(now));
    let mr = view.dimension("needs_mr", "").expect("mr row");
    assert_eq!(mr.status, DimensionStatus::True);
    assert_eq!(mr.detail, serde_json::json!({}));
    assert_eq!(mr.pending_until, None);
    assert_eq!(store.dimension_list(id).await.unwrap(), view.dimensions);

    let missing = ItemId::new_v7();
    assert!(store.item_get(missing).await.unwrap().is_none());
    assert!(store.item_view(missing, now).await.unwrap().is_none());
    assert!(store.dimension_list(missing).await.unwrap().is_empty());

    let mut same_id = new_item(TYPE_A, None, now);
    same_id.id = id;
    assert!(matches!(
        store.item_insert(same_id).await,
        Err(StoreError::Duplicate(_))
    ));
}

pub async fn list_filters_and_keyset_pages(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut ids_a = Vec::new();
    for _ in 0..5 {
        ids_a.push(insert(store, TYPE_A, now).await.id);
    }
    let mut ids_b = Vec::new();
    for _ in 0..2 {
        ids_b.push(insert(store, TYPE_B, now).await.id);
    }
    move_to(store, ids_a[1], Phase::Completed, now).await;
    move_to(store, ids_b[0], Phase::Completed, now).await;

    let all = store
        .item_list(ItemListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let listed: Vec<ItemId> = all.iter().map(|item| item.id).collect();
    let mut newest_first: Vec<ItemId> = ids_a.iter().chain(&ids_b).copied().collect();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, newest_first, "newest first");

    let only_a = store
        .item_list(ItemListParams {
            item_type: Some(TYPE_A.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(only_a.len(), 5);
    assert!(only_a.iter().all(|item| item.item_type == TYPE_A));

    let completed = store
        .item_list(ItemListParams {
            phase: Some(Phase::Completed),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        sorted(completed.iter().map(|item| item.id).collect()),
        sorted(vec![ids_a[1], ids_b[0]])
    );

    let completed_a = store
        .item_list(ItemListParams {
            phase: Some(Phase::Completed),
            item_type: Some(TYPE_A.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(completed_a.len(), 1);
    assert_eq!(completed_a[0].id, ids_a[1]);

    // Keyset pages of 3 reassemble the full list.
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .item_list(ItemListParams {
                before,
                limit: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        paged.extend(page.iter().map(|item| item.id));
    }
    assert_eq!(paged, newest_first);

    // A keyset page combined with a filter.
    let page = store
        .item_list(ItemListParams {
            item_type: Some(TYPE_A.into()),
            before: Some(ids_a[3]),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let page: Vec<ItemId> = page.iter().map(|item| item.id).collect();
    assert_eq!(page, vec![ids_a[2], ids_a[1], ids_a[0]]);
}

pub async fn list_narrows_to_visible_places_and_reports_them(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let placed = |item_type: &str, forge: &str, project: &str| NewItem {
        place: Some((forge.to_owned(), project.to_owned())),
        ..new_item(item_type, None, now)
    };
    let team_app = store
        .item_insert(placed(TYPE_A, "gitlab", "team/app"))
        .await
        .unwrap()
        .id;
    let team_upper = store
        .item_insert(placed(TYPE_A, "gitlab", "Team/Lib"))
        .await
        .unwrap()
        .id;
    let other = store
        .item_insert(placed(TYPE_A, "gitlab", "other/app"))
        .await
        .unwrap()
        .id;
    // `_` and `%` in a pattern's literal prefix are literal.
    let underscore = store
        .item_insert(placed(TYPE_A, "gitlab", "aXb/app"))
        .await
        .unwrap()
        .id;
    let github = store
        .item_insert(placed(TYPE_A, "github", "team/app"))
        .await
        .unwrap()
        .id;
    let unplaced = insert(store, TYPE_B, now).await.id;

    let list = |visibility: Visibility| async move {
        let listed = store
            .item_list_placed(ItemListParams {
                limit: 100,
                visibility,
                ..Default::default()
            })
            .await
            .unwrap();
        sorted(listed.iter().map(|listed| listed.item.id).collect())
    };
    let grant =
        |item_types: Option<&[&str]>, forges: Option<&[&str]>, projects: Option<&[&str]>| {
            let owned = |values: Option<&[&str]>| {
                values.map(|values| values.iter().map(|value| (*value).to_owned()).collect())
            };
            VisibleScope {
                item_types: owned(item_types),
                forges: owned(forges),
                projects: owned(projects),
            }
        };

    // The stored place comes back with the row.
    let all = store
        .item_list_placed(ItemListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 6);
    let place_of = |id: ItemId| all.iter().find(|l| l.item.id == id).unwrap().place.clone();
    assert_eq!(
        place_of(team_app),
        Some(("gitlab".to_owned(), "team/app".to_owned()))
    );
    assert_eq!(place_of(unplaced), None);

    // Unrestricted and no grants at all.
    assert_eq!(list(Visibility::All).await.len(), 6);
    assert_eq!(
        list(Visibility::Grants(Vec::new())).await,
        Vec::<ItemId>::new()
    );

    // A project glob keeps its prefix (ASCII case ignored, as project
    // patterns match) and rows without a place.
    assert_eq!(
        list(Visibility::Grants(vec![grant(
            None,
            None,
            Some(&["team/*"])
        )]))
        .await,
        sorted(vec![team_app, team_upper, github, unplaced])
    );
    // Forge and project together; an exact pattern is exact.
    assert_eq!(
        list(Visibility::Grants(vec![grant(
            None,
            Some(&["gitlab"]),
            Some(&["team/app"])
        )]))
        .await,
        sorted(vec![team_app, unplaced])
    );
    // A LIKE wildcard in the glob's literal part matches itself only.
    assert_eq!(
        list(Visibility::Grants(vec![grant(
            None,
            None,
            Some(&["a_b/*", "a%b/*"])
        )]))
        .await,
        sorted(vec![unplaced])
    );
    let _ = underscore;
    // Item types narrow every row; grants add up.
    assert_eq!(
        list(Visibility::Grants(vec![
            grant(Some(&[TYPE_B]), None, None),
            grant(Some(&[TYPE_A]), None, Some(&["other/**"])),
        ]))
        .await,
        sorted(vec![other, unplaced])
    );
    // Combined with the other filters and the keyset cursor.
    let page = store
        .item_list_placed(ItemListParams {
            item_type: Some(TYPE_A.into()),
            before: Some(github),
            limit: 1,
            visibility: Visibility::Grants(vec![grant(None, None, Some(&["team/*"]))]),
            ..Default::default()
        })
        .await
        .unwrap();
    let page: Vec<ItemId> = page.iter().map(|listed| listed.item.id).collect();
    assert_eq!(page, vec![team_upper]);
}

pub async fn idempotency_key_is_unique_among_live_items(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let first = store
        .item_insert(new_item(TYPE_A, Some("mr:p:b:1"), now))
        .await
        .unwrap();
    let duplicate = store
        .item_insert(new_item(TYPE_A, Some("mr:p:b:1"), now))
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Duplicate(_))),
        "active holds the key: {duplicate:?}"
    );

    let lease = fail_permanently(store, first.id, now).await;
    store.item_park(lease, now).await.unwrap();
    let duplicate = store
        .item_insert(new_item(TYPE_A, Some("mr:p:b:1"), now))
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Duplicate(_))),
        "failed still holds the key: {duplicate:?}"
    );

    // Cancelled frees it.
    store
        .item_retry(first.id, now, "tester", None)
        .await
        .unwrap();
    move_to(store, first.id, Phase::Cancelled, now).await;
    let second = store
        .item_insert(new_item(TYPE_A, Some("mr:p:b:1"), now))
        .await
        .expect("a cancelled item frees its key");

    // Completed frees it too.
    move_to(store, second.id, Phase::Completed, now).await;
    store
        .item_insert(new_item(TYPE_A, Some("mr:p:b:1"), now))
        .await
        .expect("a completed item frees its key");

    // Items without a key never collide.
    insert(store, TYPE_A, now).await;
    insert(store, TYPE_A, now).await;
}

/// A retry with the item type's event stores the event in the retry's
/// transaction: with it when the retry happens, and not at all when the
/// retry is refused.
pub async fn a_retry_stores_the_types_event_in_its_transaction(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let later = now + Duration::minutes(1);
    let cancelled = insert(store, TYPE_A, now).await.id;
    move_to(store, cancelled, Phase::Cancelled, now).await;
    store
        .item_retry(cancelled, later, "tester", Some("a.retried"))
        .await
        .unwrap();
    let event = store
        .event_next(cancelled)
        .await
        .unwrap()
        .expect("the event");
    assert_eq!(event.event_type, "a.retried");
    assert_eq!(event.body, serde_json::json!({"caller": "tester"}));
    let trail = store
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(cancelled),
            limit: 100,
            ..wq_store::audit::AuditQuery::default()
        })
        .await
        .unwrap();
    let last: Vec<(&str, &str)> = trail
        .iter()
        .rev()
        .take(2)
        .map(|record| (record.kind.as_str(), record.actor.as_str()))
        .collect();
    assert_eq!(
        last,
        [("event.received", "tester"), ("item.retried", "tester")]
    );

    let active = insert(store, TYPE_A, now).await.id;
    assert!(matches!(
        store
            .item_retry(active, later, "tester", Some("a.retried"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.event_next(active).await.unwrap(),
        None,
        "a refused retry stores no event"
    );
}

pub async fn retry_reactivates_failed_and_cancelled_items(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let later = now + Duration::minutes(1);

    let failed = insert(store, TYPE_A, now).await.id;
    let lease = fail_permanently(store, failed, now).await;
    store.item_park(lease, now).await.unwrap();
    let retried = store
        .item_retry(failed, later, "tester", None)
        .await
        .unwrap();
    assert_eq!(retried.phase, Phase::Active);
    assert!(retried.actionable);
    assert_eq!(retried.attempts, 0);
    assert_eq!(retried.error, None);
    assert_eq!(retried.leased_until, None);
    assert_eq!(retried.updated_at, to_micros(later));
    assert_eq!(get(store, failed).await, retried);

    let cancelled = insert(store, TYPE_A, now).await.id;
    let lease = move_to(store, cancelled, Phase::Cancelled, now).await;
    let retried = store
        .item_retry(cancelled, later, "tester", None)
        .await
        .unwrap();
    assert_eq!(retried.phase, Phase::Active);
    assert_eq!(retried.leased_until, None, "a held lease is dropped");
    assert_lease_lost(store.item_park(lease, now).await, cancelled, "old holder");

    let active = insert(store, TYPE_A, now).await.id;
    match store.item_retry(active, later, "tester", None).await {
        Err(StoreError::Conflict(message)) => assert_eq!(
            message,
            "work item is active; only failed or cancelled items can be retried"
        ),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let completed = insert(store, TYPE_A, now).await.id;
    move_to(store, completed, Phase::Completed, now).await;
    match store.item_retry(completed, later, "tester", None).await {
        Err(StoreError::Conflict(message)) => assert!(message.contains("completed")),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let missing = ItemId::new_v7();
    assert!(matches!(
        store.item_retry(missing, later, "tester", None).await,
        Err(StoreError::NotFound(found)) if found == missing
    ));

    // A cancelled generation cannot come back while a newer one holds
    // its key.
    let old = store
        .item_insert(new_item(TYPE_A, Some("k"), now))
        .await
        .unwrap()
        .id;
    move_to(store, old, Phase::Cancelled, now).await;
    store
        .item_insert(new_item(TYPE_A, Some("k"), now))
        .await
        .unwrap();
    let result = store.item_retry(old, later, "tester", None).await;
    assert!(
        matches!(result, Err(StoreError::Duplicate(_))),
        "{result:?}"
    );
    assert_eq!(get(store, old).await.phase, Phase::Cancelled);
}

pub async fn count_by_phase_groups_by_type_and_phase(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    assert!(store.item_count_by_phase().await.unwrap().is_empty());
    for _ in 0..3 {
        insert(store, TYPE_A, now).await;
    }
    let done = insert(store, TYPE_A, now).await.id;
    move_to(store, done, Phase::Completed, now).await;
    let failed = insert(store, TYPE_B, now).await.id;
    fail_permanently(store, failed, now).await;
    insert(store, TYPE_B, now).await;

    let mut counts = store.item_count_by_phase().await.unwrap();
    counts.sort_by(|a, b| (&a.item_type, a.phase.as_str()).cmp(&(&b.item_type, b.phase.as_str())));
    let count = |item_type: &str, phase: Phase, count: i64| PhaseCount {
        item_type: item_type.into(),
        phase,
        count,
    };
    assert_eq!(
        counts,
        vec![
            count(TYPE_A, Phase::Active, 3),
            count(TYPE_A, Phase::Completed, 1),
            count(TYPE_B, Phase::Active, 1),
            count(TYPE_B, Phase::Failed, 1),
        ]
    );
}

pub async fn dimension_upsert_replaces_status_and_keeps_detail(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;

    store
        .dimension_upsert(
            id,
            DimensionUpdate::new("needs_dashboard", true)
                .detail(serde_json::json!({ "note": 5 }))
                .pending_until(now + Duration::minutes(5)),
            now,
        )
        .await
        .unwrap();
    let later = now + Duration::seconds(30);
    store
        .dimension_upsert(id, DimensionUpdate::new("needs_dashboard", false), later)
        .await
        .unwrap();
    store
        .dimension_upsert(
            id,
            DimensionUpdate::new("needs_dashboard", true).variant("other"),
            later,
        )
        .await
        .unwrap();

    let rows = store.dimension_list(id).await.unwrap();
    assert_eq!(rows.len(), 2, "variants are separate rows");
    let main = rows.iter().find(|row| row.variant.is_empty()).unwrap();
    assert_eq!(main.status, DimensionStatus::False, "status replaced");
    assert_eq!(
        main.detail,
        serde_json::json!({ "note": 5 }),
        "None keeps detail"
    );
    assert_eq!(main.pending_until, None, "pending_until replaced");
    assert_eq!(main.updated_at, to_micros(later));
    let other = rows.iter().find(|row| row.variant == "other").unwrap();
    assert_eq!(
        other.detail,
        serde_json::json!({}),
        "new row without detail"
    );

    store
        .dimension_upsert(
            id,
            DimensionUpdate::new("needs_dashboard", false).detail(serde_json::json!({ "note": 6 })),
            later,
        )
        .await
        .unwrap();
    let rows = store.dimension_list(id).await.unwrap();
    let main = rows.iter().find(|row| row.variant.is_empty()).unwrap();
    assert_eq!(
        main.detail,
        serde_json::json!({ "note": 6 }),
        "Some replaces"
    );

    let missing = ItemId::new_v7();
    let result = store
        .dimension_upsert(missing, DimensionUpdate::new("needs_x", true), now)
        .await;
    assert!(
        matches!(result, Err(StoreError::NotFound(found)) if found == missing),
        "{result:?}"
    );
}

pub async fn mark_actionable_wakes_a_parked_item(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    park(store, id, now).await;
    assert!(sweep(store, &[TYPE_A], now, 10).await.is_empty());
    let later = now + Duration::seconds(1);
    store.item_mark_actionable(id, later).await.unwrap();
    let item = get(store, id).await;
    assert!(item.actionable);
    assert_eq!(item.updated_at, to_micros(later));
    assert_eq!(sweep(store, &[TYPE_A], later, 10).await, vec![id]);
    let missing = ItemId::new_v7();
    assert!(matches!(
        store.item_mark_actionable(missing, now).await,
        Err(StoreError::NotFound(found)) if found == missing
    ));
}
