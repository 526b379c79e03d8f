//! Cases: the audit trail's chains, its listing and its verification.

use wq_store::audit::{AuditQuery, NewAudit};

use super::*;

fn record(id: ItemId, at: OffsetDateTime, actor: &str, kind: &str) -> NewAudit {
    NewAudit::new(id, at, actor, kind)
        .states(
            Some(serde_json::json!({"phase": "active"})),
            Some(serde_json::json!({"phase": "active", "n": 1})),
        )
        .trigger(serde_json::json!({"source": "api"}))
        .metadata(serde_json::json!({"content_hash": "ab12"}))
}

pub async fn audit_records_chain_per_item_and_verify(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let a = insert(store, TYPE_A, now).await.id;
    let b = insert(store, TYPE_A, now).await.id;
    let mut appended = Vec::new();
    for (step, id) in [a, b, a, a, b].into_iter().enumerate() {
        let at = now + Duration::seconds(step as i64);
        appended.push(
            store
                .audit_append(record(id, at, "ci-bot", "submission.created"))
                .await
                .expect("append"),
        );
    }
    let of_a = store
        .audit_list(AuditQuery {
            item_id: Some(a),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    // The item's creation, then what was appended.
    assert_eq!(of_a.len(), 4);
    assert_eq!(of_a[0].kind, "item.created");
    assert_eq!(of_a[0].actor, "tester", "by the identity on the item");
    assert_eq!(of_a[0].prev_hash, "", "a chain starts empty");
    for pair in of_a.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
        assert!(pair[0].seq < pair[1].seq);
    }
    assert_eq!(of_a[1], appended[0], "stored as appended");
    assert_eq!(of_a[1].at, to_micros(now));
    assert_eq!(store.audit_verify().await.unwrap(), (7, None));

    // Rewriting a stored record is found, at that record.
    db.tamper_audit(of_a[2].seq).await;
    let (checked, broken) = store.audit_verify().await.unwrap();
    let broken = broken.expect("broken");
    assert_eq!(broken.id, of_a[2].id);
    assert_eq!(broken.item_id, a);
    assert!(broken.reason.contains("does not match"), "{broken}");
    assert_eq!(checked, 4, "the records before it held");
}

pub async fn concurrent_audit_appends_chain_without_forking(db: &TestDb) {
    let store = db.store();
    let now = t0();
    let id = insert(store.as_ref(), TYPE_A, now).await.id;
    let barrier = Arc::new(Barrier::new(16));
    let writers: Vec<_> = (0..16)
        .map(|n| {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .audit_append(record(id, now, &format!("writer-{n}"), "event.received"))
                    .await
                    .expect("append")
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    let records = store
        .audit_list(AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    // The creation and the 16.
    assert_eq!(records.len(), 17);
    let mut prevs: Vec<&str> = records.iter().map(|r| r.prev_hash.as_str()).collect();
    prevs.sort_unstable();
    prevs.dedup();
    assert_eq!(prevs.len(), 17, "no two records share a predecessor");
    assert_eq!(store.audit_verify().await.unwrap(), (17, None));
}

pub async fn audit_list_filters_by_item_since_actor_kind_and_seq(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let a = insert(store, TYPE_A, now).await.id;
    let b = insert(store, TYPE_A, now).await.id;
    store
        .audit_append(record(a, now, "ci-bot", "submission.created"))
        .await
        .unwrap();
    store
        .audit_append(record(
            b,
            now + Duration::minutes(5),
            "engine",
            "action.succeeded",
        ))
        .await
        .unwrap();
    let third = store
        .audit_append(record(
            a,
            now + Duration::minutes(10),
            "engine",
            "forge.merge",
        ))
        .await
        .unwrap();
    let list = |query: AuditQuery| async move {
        store
            .audit_list(AuditQuery {
                limit: 100,
                ..query
            })
            .await
            .unwrap()
            .into_iter()
            .map(|record| (record.item_id, record.kind))
            .collect::<Vec<_>>()
    };
    // Two creations and three appended.
    assert_eq!(list(AuditQuery::default()).await.len(), 5);
    assert_eq!(
        list(AuditQuery {
            actor: Some("engine".into()),
            ..AuditQuery::default()
        })
        .await,
        vec![(b, "action.succeeded".into()), (a, "forge.merge".into())]
    );
    assert_eq!(
        list(AuditQuery {
            since: Some(now + Duration::minutes(5)),
            kind: Some("forge.merge".into()),
            ..AuditQuery::default()
        })
        .await,
        vec![(a, "forge.merge".into())]
    );
    // Up to a sequence number: the records after `after` up to it.
    assert_eq!(
        list(AuditQuery {
            after: third.seq - 3,
            until: Some(third.seq - 1),
            ..AuditQuery::default()
        })
        .await,
        vec![
            (a, "submission.created".into()),
            (b, "action.succeeded".into())
        ]
    );
    assert_eq!(
        list(AuditQuery {
            after: third.seq,
            ..AuditQuery::default()
        })
        .await,
        vec![]
    );
    let page = store
        .audit_list(AuditQuery {
            limit: 2,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.len(), 2);

    // A record numbered after the others whose time is before theirs (its
    // change was made earlier, its transaction wrote later): a time filter
    // holds record by record, not from where the numbers pass the time.
    store
        .audit_append(record(b, now + Duration::minutes(1), "engine", "late"))
        .await
        .unwrap();
    let since = |minutes: i64, item_id: Option<ItemId>| AuditQuery {
        since: Some(now + Duration::minutes(minutes)),
        item_id,
        ..AuditQuery::default()
    };
    assert_eq!(
        list(since(5, None)).await,
        vec![(b, "action.succeeded".into()), (a, "forge.merge".into())]
    );
    assert_eq!(
        list(since(1, None)).await,
        vec![
            (b, "action.succeeded".into()),
            (a, "forge.merge".into()),
            (b, "late".into())
        ]
    );
    assert_eq!(
        list(since(1, Some(b))).await,
        vec![(b, "action.succeeded".into()), (b, "late".into())]
    );
    assert_eq!(list(since(11, None)).await, vec![]);
    // Of one item, after a sequence number and up to another.
    assert_eq!(
        list(AuditQuery {
            item_id: Some(a),
            after: third.seq - 3,
            until: Some(third.seq),
            ..AuditQuery::default()
        })
        .await,
        vec![(a, "submission.created".into()), (a, "forge.merge".into())]
    );
    // Up to a sequence number alone: the records from the start up to it.
    assert_eq!(
        list(AuditQuery {
            until: Some(third.seq - 1),
            ..AuditQuery::default()
        })
        .await
        .len(),
        4
    );
}

/// The kinds of an item's records, in order.
async fn kinds(store: &dyn Store, id: ItemId) -> Vec<String> {
    store
        .audit_list(AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.kind)
        .collect()
}

pub async fn every_loop_write_leaves_its_record_in_its_transaction(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let mut lease = claim(store, id, now).await;
    let dimension = DimensionUpdate::new("needs_mr", false);
    store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now,
            phase: None,
            error: None,
            dimensions: vec![dimension.clone()],
            action: Some("ensure_mr".into()),
            records: Vec::new(),
        })
        .await
        .unwrap();
    let failed = store
        .item_record_failure(RecordFailure {
            lease,
            now,
            error: "forge said 500".into(),
            max_attempts: 5,
            permanent: false,
            retry_at: now + Duration::seconds(1),
            outage: true,
            outage_started_before: now - Duration::hours(6),
            action: Some("reconcile_mr".into()),
        })
        .await
        .unwrap();
    lease.until = failed.leased_until.expect("backing off under the lease");
    let event_id = add_event(store, id, "pipeline", now).await;
    store
        .event_apply(ApplyEvent {
            lease,
            event_id,
            now,
            result: EventResult::ignored(),
        })
        .await
        .unwrap();
    let parked = store
        .item_park_with(ParkParams {
            lease,
            now,
            outcome: Some(OutcomeChanges {
                phase: Some(Phase::Completed),
                action: Some("reconcile_mr".into()),
                ..OutcomeChanges::default()
            }),
        })
        .await
        .unwrap();
    assert_eq!(parked, Park::Parked);
    assert_eq!(
        kinds(store, id).await,
        [
            "item.created",
            "action.succeeded",
            "action.failed",
            "event.received",
            "event.applied",
            "action.succeeded",
        ]
    );
    let records = store
        .audit_list(AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(records[1].trigger.as_ref().unwrap()["action"], "ensure_mr");
    assert_eq!(
        records[1].new_state.as_ref().unwrap()["dimensions"][0]["dimension"],
        "needs_mr"
    );
    assert_eq!(
        records[2].trigger.as_ref().unwrap()["error"],
        "forge said 500"
    );
    assert_eq!(records[2].metadata["outage"], true);
    assert_eq!(records[3].metadata["event_id"], event_id);
    assert_eq!(records[4].trigger.as_ref().unwrap()["event_id"], event_id);
    assert_eq!(records[5].new_state.as_ref().unwrap()["phase"], "completed");

    // A write refused for a lost lease leaves no record.
    let stale = Lease {
        id,
        until: now - Duration::hours(1),
        epoch: wq_core::LeaseEpoch(0),
    };
    assert!(matches!(
        store
            .item_apply_outcome(ApplyOutcome {
                lease: stale,
                now,
                phase: None,
                error: None,
                dimensions: Vec::new(),
                action: Some("ensure_mr".into()),
                records: Vec::new(),
            })
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    assert_eq!(kinds(store, id).await.len(), 6);
    assert_eq!(store.audit_verify().await.unwrap(), (6, None));
}

/// An action with outside effects starts on the record: alone (attempts
/// kept, so a backoff still counts), or after the pending outcome of the
/// action before it with that executor's own records, in one transaction;
/// never under a lost lease.
pub async fn an_action_starts_on_the_record_with_the_outcome_before_it(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let mut lease = claim(store, id, now).await;
    let failed = store
        .item_record_failure(RecordFailure {
            lease,
            now,
            error: "forge said 500".into(),
            max_attempts: 5,
            permanent: false,
            retry_at: now + Duration::seconds(1),
            outage: false,
            outage_started_before: now,
            action: Some("ensure_mr".into()),
        })
        .await
        .unwrap();
    assert_eq!(failed.attempts, 1);
    lease.until = failed.leased_until.expect("backing off under the lease");

    store
        .item_begin_action(BeginAction {
            lease,
            now,
            action: "ensure_mr".into(),
            outcome: None,
        })
        .await
        .unwrap();
    assert_eq!(get(store, id).await.attempts, 1, "a start is no success");

    store
        .item_begin_action(BeginAction {
            lease,
            now,
            action: "post_dashboard_note".into(),
            outcome: Some(OutcomeChanges {
                dimensions: vec![DimensionUpdate::new("needs_mr", false)],
                action: Some("ensure_mr".into()),
                records: vec![wq_core::OutcomeRecord {
                    kind: "forge.push".into(),
                    metadata: serde_json::json!({"commit_sha": "abc"}),
                }],
                ..OutcomeChanges::default()
            }),
        })
        .await
        .unwrap();
    let item = get(store, id).await;
    assert_eq!(item.attempts, 0, "the outcome before it resets attempts");
    let dimensions = store.dimension_list(id).await.unwrap();
    assert!(dimensions.iter().any(|d| d.dimension == "needs_mr"));
    assert_eq!(
        kinds(store, id).await,
        [
            "item.created",
            "action.failed",
            "action.started",
            "action.succeeded",
            "forge.push",
            "action.started",
        ]
    );
    let records = store
        .audit_list(AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(records[2].trigger.as_ref().unwrap()["action"], "ensure_mr");
    assert_eq!(records[4].metadata["commit_sha"], "abc");
    assert_eq!(records[4].trigger.as_ref().unwrap()["action"], "ensure_mr");
    assert_eq!(
        records[5].trigger.as_ref().unwrap()["action"],
        "post_dashboard_note"
    );

    let stale = Lease {
        id,
        until: now - Duration::hours(1),
        epoch: wq_core::LeaseEpoch(0),
    };
    assert!(matches!(
        store
            .item_begin_action(BeginAction {
                lease: stale,
                now,
                action: "ensure_mr".into(),
                outcome: None,
            })
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    assert_eq!(kinds(store, id).await.len(), 6);
    assert_eq!(store.audit_verify().await.unwrap(), (6, None));
}

pub async fn ui_sessions_expire_are_taken_once_and_pruned(db: &TestDb) {
    use wq_store::sessions::{LINK, SESSION, UiSession};
    let store = db.store();
    let store = store.as_ref();
    let now = to_micros(t0());
    for wait in [true, false] {
        assert_eq!(
            store.audit_horizon(wait).await.unwrap(),
            Some(0),
            "no record yet"
        );
    }
    let session = |hash: &str, kind: &str, ttl: i64| UiSession {
        id_hash: hash.to_owned(),
        kind: kind.to_owned(),
        principal: serde_json::json!({"kind": "static_token", "name": "n"}),
        csrf_token: format!("csrf-{hash}"),
        created_at: now,
        expires_at: now + Duration::seconds(ttl),
    };
    store
        .ui_session_insert(session("s1", SESSION, 60))
        .await
        .unwrap();
    store
        .ui_session_insert(session("l1", LINK, 60))
        .await
        .unwrap();
    store
        .ui_session_insert(session("old", SESSION, 1))
        .await
        .unwrap();
    let got = store.ui_session_get("s1", SESSION, now).await.unwrap();
    assert_eq!(got, Some(session("s1", SESSION, 60)));
    assert_eq!(
        store.ui_session_get("s1", LINK, now).await.unwrap(),
        None,
        "a session is no link"
    );
    let later = now + Duration::seconds(2);
    assert_eq!(
        store.ui_session_get("old", SESSION, later).await.unwrap(),
        None
    );
    // A link is taken once.
    assert!(
        store
            .ui_session_take("l1", LINK, now)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .ui_session_take("l1", LINK, now)
            .await
            .unwrap()
            .is_none()
    );
    // Sign-out ends the session.
    assert!(
        store
            .ui_session_take("s1", SESSION, now)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.ui_session_get("s1", SESSION, now).await.unwrap(),
        None
    );
    assert_eq!(
        store.ui_session_prune(later).await.unwrap(),
        1,
        "only the expired one"
    );
    let id = insert(store, TYPE_A, now).await.id;
    let appended = store
        .audit_append(record(id, now, "ci-bot", "submission.created"))
        .await
        .unwrap();
    for wait in [true, false] {
        assert_eq!(
            store.audit_horizon(wait).await.unwrap(),
            Some(appended.seq),
            "nothing in progress: the horizon is the newest record"
        );
    }
}

/// The benchmarks' backlog (`testing::seed_items`) carries the
/// `item.created` record real items are created with
/// (`testing::seed_created_records`): one chained record per seeded item,
/// none for other types, and a later append chains onto it.
pub async fn seeded_items_get_the_created_record_real_items_have(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let other = insert(store, TYPE_A, t0()).await.id;
    wq_store::testing::seed_items(&db.url, TYPE_B, 30, true, false).await;
    wq_store::testing::seed_created_records(&db.url, TYPE_B).await;
    let records = store
        .audit_list(AuditQuery {
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let seeded: Vec<_> = records.iter().filter(|r| r.item_id != other).collect();
    assert_eq!(seeded.len(), 30, "one record per seeded item");
    let mut items: Vec<_> = seeded.iter().map(|r| r.item_id).collect();
    items.sort();
    items.dedup();
    assert_eq!(items.len(), 30, "each on its own item");
    for record in &seeded {
        assert_eq!(record.kind, "item.created");
        assert_eq!(record.prev_hash, "", "each starts its chain");
        assert_eq!(
            record.new_state,
            Some(serde_json::json!({"phase": "active", "item_type": TYPE_B}))
        );
    }
    let first = seeded[0];
    let next = store
        .audit_append(record(first.item_id, t0(), "ci-bot", "submission.created"))
        .await
        .unwrap();
    assert_eq!(next.prev_hash, first.hash, "a later record chains onto it");
    // The other item's creation, the 30 seeded records and the append.
    assert_eq!(store.audit_verify().await.unwrap(), (32, None));
}

/// A chain whose records were all archived and pruned goes on from its
/// pruned head: the next record chains to the last pruned one, and the
/// trail still verifies.
pub async fn a_record_after_the_whole_chain_was_pruned_chains_to_its_pruned_head(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let id = insert(store, TYPE_A, now).await.id;
    let last = store
        .audit_append(record(id, now, "ci-bot", "submission.created"))
        .await
        .unwrap();
    let seqs: Vec<i64> = store
        .audit_unarchived(100)
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    assert_eq!(seqs.len(), 2, "the creation and the submission");
    store.audit_mark_archived(&seqs, now).await.unwrap();
    let later = now + Duration::days(400);
    assert_eq!(store.audit_prune_archived(later).await.unwrap(), 2);
    let next = store
        .audit_append(record(id, later, "webhook:gitlab", "event.received"))
        .await
        .unwrap();
    assert_eq!(next.prev_hash, last.hash, "chained to the pruned head");
    assert_eq!(store.audit_verify().await.unwrap(), (1, None));
}

/// Parks that arrive together (one set-based statement on both backends)
/// chain each item's records to its head as a park alone does: half the
/// items' chains were archived and pruned whole (their heads are only the
/// pruned hashes), the other half still hold their records. Every new
/// record's previous hash is its chain's head, and the trail verifies.
pub async fn parks_that_arrive_together_chain_to_their_pruned_or_last_heads(db: &TestDb) {
    const ITEMS: usize = 16;
    let now = t0();
    let store = db.store();
    // A new item and one record after its creation: the item and its head.
    let chain = |at: OffsetDateTime, actor: &'static str, kind: &'static str| {
        let store = db.store();
        async move {
            let id = insert(store.as_ref(), TYPE_A, at).await.id;
            let last = store
                .audit_append(record(id, at, actor, kind))
                .await
                .unwrap();
            (id, last.hash)
        }
    };
    let mut pruned = Vec::new();
    for _ in 0..ITEMS / 2 {
        pruned.push(chain(now, "ci-bot", "submission.created").await);
    }
    let seqs: Vec<i64> = store
        .audit_unarchived(100)
        .await
        .unwrap()
        .iter()
        .map(|record| record.seq)
        .collect();
    store.audit_mark_archived(&seqs, now).await.unwrap();
    let later = now + Duration::days(400);
    assert_eq!(
        store.audit_prune_archived(later).await.unwrap(),
        ITEMS as u64,
        "each pruned chain's creation and submission"
    );
    let mut kept = Vec::new();
    for _ in 0..ITEMS / 2 {
        kept.push(chain(later, "webhook:gitlab", "event.received").await);
    }
    let mut parks = Vec::new();
    for (id, head) in pruned.iter().chain(&kept) {
        let lease = claim(store.as_ref(), *id, later).await;
        parks.push((*id, head.clone(), lease));
    }
    let barrier = Arc::new(Barrier::new(ITEMS));
    let tasks: Vec<_> = parks
        .into_iter()
        .map(|(id, head, lease)| {
            let store = db.store();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let params = ParkParams {
                    lease,
                    now: later,
                    outcome: Some(OutcomeChanges {
                        phase: None,
                        error: None,
                        dimensions: vec![DimensionUpdate::new("needs_x", false)],
                        action: Some("step".into()),
                        records: vec![wq_core::OutcomeRecord {
                            kind: "forge.note_posted".into(),
                            metadata: serde_json::json!({ "item": id.to_string() }),
                        }],
                    }),
                };
                (id, head, store.item_park_with(params).await)
            })
        })
        .collect();
    for task in tasks {
        let (id, head, result) = task.await.unwrap();
        assert_eq!(result.unwrap(), Park::Parked, "item {id}");
        let records = store
            .audit_list(wq_store::audit::AuditQuery {
                item_id: Some(id),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        let new: Vec<(&str, &str, &str)> = records
            .iter()
            .filter(|record| {
                ["action.succeeded", "forge.note_posted"].contains(&record.kind.as_str())
            })
            .map(|record| {
                (
                    record.kind.as_str(),
                    record.prev_hash.as_str(),
                    record.hash.as_str(),
                )
            })
            .collect();
        assert_eq!(new.len(), 2, "item {id}: {new:?}");
        assert_eq!(new[0].0, "action.succeeded");
        assert_eq!(new[0].1, head, "item {id}: chained to its head");
        assert_eq!(new[1].0, "forge.note_posted");
        assert_eq!(new[1].1, new[0].2, "item {id}: then to its own record");
    }
    assert_eq!(
        store.audit_verify().await.unwrap(),
        (ITEMS as u64 * 3, None),
        "the kept chains' four records and the pruned chains' two new ones verify"
    );
    match &db.backend {
        Backend::Sqlite(sqlite) => assert!(
            sqlite.largest_park_batch() > 1,
            "parks shared a job (largest batch {})",
            sqlite.largest_park_batch()
        ),
        Backend::Postgres(pg) => {
            let (parks, statements) = pg.batch_counts().1;
            assert!(
                statements < parks,
                "parks shared a statement ({parks} parks in {statements})"
            );
        }
    }
}
