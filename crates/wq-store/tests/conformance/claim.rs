//! Cases: claiming, the lease (heartbeat, release, stale leases) and the loop's writes under it.

use super::*;

pub async fn claim_only_unleased_or_expired_and_handled(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;

    let other_type = store
        .item_claim(ClaimParams {
            id: item.id,
            now,
            lease_until: now + LEASE,
            handled_types: handled(&[TYPE_B]),
        })
        .await
        .unwrap();
    assert!(other_type.is_none(), "a type this process does not handle");
    let no_types = store
        .item_claim(ClaimParams {
            id: item.id,
            now,
            lease_until: now + LEASE,
            handled_types: Vec::new(),
        })
        .await
        .unwrap();
    assert!(no_types.is_none());
    assert_eq!(get(store, item.id).await.leased_until, None);

    let (claimed, lease) = store
        .item_claim(ClaimParams {
            id: item.id,
            now,
            lease_until: now + LEASE,
            handled_types: handled(&[TYPE_A]),
        })
        .await
        .unwrap()
        .expect("unleased item is claimable");
    assert_eq!(lease.id, item.id);
    assert_eq!(lease.until, to_micros(now + LEASE));
    assert_eq!(claimed.leased_until, Some(lease.until));
    assert_eq!(get(store, item.id).await, claimed);

    assert!(try_claim(store, item.id, now).await.is_none(), "held");
    assert!(
        try_claim(store, item.id, now + LEASE - Duration::microseconds(1))
            .await
            .is_none(),
        "held until the last microsecond"
    );
    let reclaimed = try_claim(store, item.id, now + LEASE)
        .await
        .expect("expired lease is claimable");
    assert_eq!(reclaimed.until, to_micros(now + LEASE + LEASE));

    assert!(try_claim(store, ItemId::new_v7(), now).await.is_none());
}

pub async fn heartbeat_extends_the_lease(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;
    let lease = claim(store, item.id, now).await;
    let later = now + Duration::seconds(20);
    let renewed = store.item_heartbeat(lease, later + LEASE).await.unwrap();
    assert_eq!(renewed.id, item.id);
    assert_eq!(renewed.until, to_micros(later + LEASE));
    assert_eq!(get(store, item.id).await.leased_until, Some(renewed.until));
    assert!(
        try_claim(store, item.id, now + LEASE).await.is_none(),
        "the old expiry no longer frees it"
    );
    let again = store
        .item_heartbeat(renewed, later + LEASE + LEASE)
        .await
        .unwrap();
    assert_eq!(again.until, to_micros(later + LEASE + LEASE));
    assert_lease_lost(
        store.item_heartbeat(lease, later).await,
        item.id,
        "heartbeat with a superseded lease",
    );
}

pub async fn stale_lease_gets_lease_lost_on_every_loop_write(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;
    let stale = claim(store, item.id, now).await;
    let later = now + LEASE + Duration::seconds(1);
    let current = claim(store, item.id, later).await;
    let event_id = add_event(store, item.id, "push", later).await;
    // Stale writes carry their own time, so a write that landed would show.
    let stale_now = later + Duration::seconds(1);
    let dimension = DimensionUpdate::new("needs_x", false);

    assert_lease_lost(
        store.item_heartbeat(stale, stale_now + LEASE).await,
        item.id,
        "heartbeat",
    );
    assert_lease_lost(store.item_release(stale, None).await, item.id, "release");
    assert_lease_lost(
        store
            .item_apply_outcome(ApplyOutcome {
                lease: stale,
                now: stale_now,
                phase: Some(Phase::Completed),
                error: None,
                dimensions: vec![dimension.clone()],
                action: None,
                records: Vec::new(),
            })
            .await,
        item.id,
        "apply_outcome",
    );
    assert_lease_lost(
        store
            .item_record_failure(RecordFailure {
                lease: stale,
                now: stale_now,
                error: "boom".into(),
                max_attempts: 1,
                permanent: true,
                retry_at: stale_now,
                outage: false,
                outage_started_before: stale_now,
                action: None,
            })
            .await,
        item.id,
        "record_failure",
    );
    assert_lease_lost(
        store
            .event_apply(ApplyEvent {
                lease: stale,
                event_id,
                now: stale_now,
                result: EventResult::ignored()
                    .with_phase(Phase::Cancelled)
                    .with_dimension(dimension.clone()),
            })
            .await,
        item.id,
        "event_apply",
    );
    // Park checks events first; drain the event with the current lease
    // so the stale park reaches its lease check.
    assert_eq!(
        store
            .event_apply(ApplyEvent {
                lease: current,
                event_id,
                now: later,
                result: EventResult::ignored(),
            })
            .await
            .unwrap(),
        EventApplied::Applied
    );
    assert_lease_lost(store.item_park(stale, stale_now).await, item.id, "park");

    // Nothing of the stale writes landed, atomically.
    let after = get(store, item.id).await;
    assert_eq!(after.phase, Phase::Active);
    assert_eq!(after.attempts, 0);
    assert!(after.actionable);
    assert_eq!(after.leased_until, Some(current.until));
    assert_eq!(
        after.updated_at,
        to_micros(later),
        "only the current holder's write"
    );
    assert_eq!(after.error, None);
    assert!(store.dimension_list(item.id).await.unwrap().is_empty());

    // The current holder still writes.
    store.item_heartbeat(current, later + LEASE).await.unwrap();
}

pub async fn release_with_and_without_not_before(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;

    let lease = claim(store, item.id, now).await;
    store.item_release(lease, None).await.unwrap();
    let released = get(store, item.id).await;
    assert_eq!(released.leased_until, None);
    assert!(released.actionable, "release leaves actionable as it was");

    let lease = claim(store, item.id, now).await;
    let not_before = now + Duration::minutes(2);
    store.item_release(lease, Some(not_before)).await.unwrap();
    assert_eq!(
        get(store, item.id).await.leased_until,
        Some(to_micros(not_before))
    );
    assert!(
        try_claim(store, item.id, now + Duration::minutes(1))
            .await
            .is_none()
    );
    assert!(
        sweep(store, &[TYPE_A], now + Duration::minutes(1), 10)
            .await
            .is_empty()
    );
    assert_eq!(sweep(store, &[TYPE_A], not_before, 10).await, vec![item.id]);
    let lease = claim(store, item.id, not_before).await;
    assert_lease_lost(
        store
            .item_release(
                Lease {
                    id: item.id,
                    until: now,
                    epoch: lease.epoch,
                },
                None,
            )
            .await,
        item.id,
        "release with a wrong lease",
    );
    store.item_release(lease, None).await.unwrap();
}

pub async fn apply_outcome_resets_attempts_and_applies_phase_and_dimensions(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;
    let lease = claim(store, item.id, now).await;
    let retry_at = now + Duration::seconds(5);
    let failed_once = store
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
    assert_eq!(failed_once.attempts, 1);
    let lease = claim(store, item.id, retry_at).await;

    let later = retry_at + Duration::seconds(1);
    let outcome = store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now: later,
            phase: None,
            error: Some("note".into()),
            dimensions: vec![
                DimensionUpdate::new("needs_mr", false).detail(serde_json::json!({ "mr": 12 })),
            ],
            action: None,
            records: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 0, "success resets consecutive failures");
    assert_eq!(outcome.phase, Phase::Active, "no phase keeps it");
    assert_eq!(outcome.error.as_deref(), Some("note"));
    assert_eq!(outcome.updated_at, to_micros(later));
    assert_eq!(outcome.leased_until, Some(lease.until), "lease kept");
    assert!(outcome.actionable);

    let completed = store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now: later,
            phase: Some(Phase::Completed),
            error: None,
            dimensions: vec![
                DimensionUpdate::new("needs_merge", false),
                DimensionUpdate::new("needs_mr", false),
            ],
            action: None,
            records: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(completed.phase, Phase::Completed);
    assert_eq!(completed.error, None);
    assert_eq!(get(store, item.id).await, completed);
    let dimensions = store.dimension_list(item.id).await.unwrap();
    assert_eq!(dimensions.len(), 2);
    let mr = dimensions
        .iter()
        .find(|row| row.dimension == "needs_mr")
        .unwrap();
    assert_eq!(mr.detail, serde_json::json!({ "mr": 12 }), "detail kept");
}

pub async fn record_failure_counts_backs_off_and_fails(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let item = insert(store, TYPE_A, now).await;
    let mut lease = claim(store, item.id, now).await;
    let mut at = now;
    for attempt in 1..=2 {
        let retry_at = at + Duration::seconds(10 * attempt);
        let failed = store
            .item_record_failure(RecordFailure {
                lease,
                now: at,
                error: format!("failure {attempt}"),
                max_attempts: 3,
                permanent: false,
                retry_at,
                outage: false,
                outage_started_before: at,
                action: None,
            })
            .await
            .unwrap();
        assert_eq!(failed.attempts, attempt as i32);
        assert_eq!(failed.phase, Phase::Active);
        assert_eq!(
            failed.error.as_deref(),
            Some(format!("failure {attempt}").as_str())
        );
        assert_eq!(failed.leased_until, Some(to_micros(retry_at)), "backoff");
        assert_eq!(failed.updated_at, to_micros(at));
        assert!(failed.actionable);
        // The backoff holds against claims and the sweep.
        let just_before = retry_at - Duration::seconds(1);
        assert!(try_claim(store, item.id, just_before).await.is_none());
        assert!(sweep(store, &[TYPE_A], just_before, 10).await.is_empty());
        assert_eq!(sweep(store, &[TYPE_A], retry_at, 10).await, vec![item.id]);
        at = retry_at;
        lease = claim(store, item.id, at).await;
    }
    let failed = store
        .item_record_failure(RecordFailure {
            lease,
            now: at,
            error: "failure 3".into(),
            max_attempts: 3,
            permanent: false,
            retry_at: at + Duration::minutes(1),
            outage: false,
            outage_started_before: at,
            action: None,
        })
        .await
        .unwrap();
    assert_eq!(failed.attempts, 3);
    assert_eq!(
        failed.phase,
        Phase::Failed,
        "the third failure of three fails it"
    );
    assert_eq!(failed.error.as_deref(), Some("failure 3"));
    assert!(failed.actionable, "parked by the loop, not here");
    assert_eq!(
        failed.leased_until,
        Some(lease.until),
        "the holder keeps its lease to park"
    );
    assert_eq!(store.item_park(lease, at).await.unwrap(), Park::Parked);
    assert!(!get(store, item.id).await.actionable);

    // A permanent failure fails at once.
    let other = insert(store, TYPE_A, now).await;
    let lease = claim(store, other.id, now).await;
    let failed = store
        .item_record_failure(RecordFailure {
            lease,
            now,
            error: "invalid".into(),
            max_attempts: 10,
            permanent: true,
            retry_at: now + Duration::minutes(1),
            outage: false,
            outage_started_before: now,
            action: None,
        })
        .await
        .unwrap();
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.phase, Phase::Failed);
    assert_eq!(failed.leased_until, Some(lease.until));
}

pub async fn claim_snapshot_claims_and_reads_in_one_step(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut new = new_item(TYPE_A, None, now);
    new.dimensions =
        vec![DimensionUpdate::new("needs_mr", false).detail(serde_json::json!({"mr": 7}))];
    let id = store.item_insert(new).await.unwrap().id;
    add_event(store, id, "push", now).await;
    let params = |types: &[&str]| ClaimParams {
        id,
        now,
        lease_until: now + LEASE,
        handled_types: handled(types),
    };

    assert!(
        store
            .item_claim_snapshot(params(&[TYPE_B]))
            .await
            .unwrap()
            .is_none(),
        "a type this process does not handle"
    );
    let (snapshot, lease) = store
        .item_claim_snapshot(params(&[TYPE_A]))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(lease.until, to_micros(now + LEASE));
    assert!(snapshot.has_events);
    assert_eq!(snapshot.view.item, get(store, id).await);
    assert_eq!(snapshot.view.item.leased_until, Some(lease.until));
    assert_eq!(
        snapshot.view.dimensions,
        store.dimension_list(id).await.unwrap()
    );
    assert!(
        store
            .item_claim_snapshot(params(&[TYPE_A]))
            .await
            .unwrap()
            .is_none(),
        "leased: not claimable again"
    );
    // The lease it returns is the one the loop writes with.
    store
        .item_heartbeat(lease, now + LEASE + LEASE)
        .await
        .unwrap();
}

/// Every claim of an item, by each way the loop claims, draws a new lease
/// epoch, and the heartbeat keeps it: the number an executor names to
/// write under its own run's lease and no later one's.
pub async fn every_claim_draws_its_own_lease_epoch(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let ids = [
        insert(store, TYPE_A, now).await.id,
        insert(store, TYPE_A, now).await.id,
        insert(store, TYPE_A, now).await.id,
    ];
    let params = |id: ItemId| ClaimParams {
        id,
        now,
        lease_until: now + LEASE,
        handled_types: handled(&[TYPE_A]),
    };
    let mut last = Vec::new();
    for id in ids {
        let lease = claim(store, id, now).await;
        let renewed = store.item_heartbeat(lease, now + LEASE).await.unwrap();
        assert_eq!(
            renewed.epoch, lease.epoch,
            "a heartbeat keeps the claim's epoch"
        );
        store.item_release(renewed, None).await.unwrap();
        last.push(lease.epoch);
    }
    // Claims with their snapshots, arriving together (one statement for
    // all on PostgreSQL), then one alone.
    let together = tokio::join!(
        store.item_claim_snapshot(params(ids[0])),
        store.item_claim_snapshot(params(ids[1])),
        store.item_claim_snapshot(params(ids[2])),
    );
    let together = [together.0, together.1, together.2];
    for ((id, claimed), before) in ids.iter().zip(together).zip(&mut last) {
        let (_, lease) = claimed.unwrap().expect("claimed");
        assert_eq!(lease.id, *id);
        assert!(
            lease.epoch.0 > before.0,
            "{id}: {:?} after {before:?}",
            lease.epoch
        );
        store.item_release(lease, None).await.unwrap();
        *before = lease.epoch;
    }
    let (_, alone) = store
        .item_claim_snapshot(params(ids[0]))
        .await
        .unwrap()
        .expect("claimed");
    assert!(alone.epoch.0 > last[0].0);
    store.item_release(alone, None).await.unwrap();
    last[0] = alone.epoch;
    // The batch claim of due items (released items stay actionable).
    let due = claim_due(store, &[TYPE_A], now, 10).await;
    assert_eq!(claimed_ids(&due), sorted(ids.to_vec()));
    for (_, lease) in &due {
        let index = ids.iter().position(|id| *id == lease.id).unwrap();
        assert!(
            lease.epoch.0 > last[index].0,
            "{}: {:?} after {:?}",
            lease.id,
            lease.epoch,
            last[index]
        );
    }
    // A view the store reads names no run's lease: only the engine's run
    // does.
    assert_eq!(
        store
            .item_snapshot(ids[0], now)
            .await
            .unwrap()
            .unwrap()
            .view
            .lease,
        None
    );
}

pub async fn concurrent_claims_have_exactly_one_winner(db: &TestDb) {
    let now = t0();
    for round in 0..25 {
        let id = insert(db.store().as_ref(), TYPE_A, now).await.id;
        let barrier = Arc::new(Barrier::new(2));
        let mut tasks = Vec::new();
        for claimer in 0..2 {
            let store = db.store();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store
                    .item_claim(ClaimParams {
                        id,
                        now,
                        lease_until: now + LEASE + Duration::seconds(claimer),
                        handled_types: handled(&[TYPE_A]),
                    })
                    .await
                    .expect("claim")
                    .map(|(_, lease)| lease)
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            if let Some(lease) = task.await.unwrap() {
                winners.push(lease);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(
            get(db.store().as_ref(), id).await.leased_until,
            Some(winners[0].until),
            "round {round}: the winner's lease is stored"
        );
    }
}

/// Many workers claiming and parking at once (on PostgreSQL, the calls share
/// statements): each item is claimed by exactly one of its two claimers with
/// a snapshot of its own, each park writes its own outcome and records (an
/// item with an event waiting keeps its lease), and every chain verifies.
pub async fn concurrent_claims_and_parks_of_many_items_each_happen_once(db: &TestDb) {
    const ITEMS: usize = 48;
    let now = t0();
    let mut ids = Vec::new();
    for n in 0..ITEMS {
        let mut item = new_item(TYPE_A, None, now);
        item.dimensions =
            vec![DimensionUpdate::new(format!("timer_{n}"), false).pending_until(now)];
        ids.push(db.store().item_insert(item).await.expect("insert").id);
    }
    let later = now + Duration::seconds(1);
    let barrier = Arc::new(Barrier::new(2 * ITEMS));
    let mut claims = Vec::new();
    for (n, &id) in ids.iter().enumerate() {
        for claimer in 0..2i64 {
            let store = db.store();
            let barrier = barrier.clone();
            claims.push(tokio::spawn(async move {
                barrier.wait().await;
                let claimed = store
                    .item_claim_snapshot(ClaimParams {
                        id,
                        now: later,
                        lease_until: later + LEASE + Duration::seconds(claimer),
                        handled_types: handled(&[TYPE_A]),
                    })
                    .await
                    .expect("claim");
                (n, id, claimed)
            }));
        }
    }
    let mut leases: Vec<Option<Lease>> = vec![None; ITEMS];
    for claim in claims {
        let (n, id, claimed) = claim.await.unwrap();
        let Some((snapshot, lease)) = claimed else {
            continue;
        };
        assert!(leases[n].is_none(), "item {n} claimed twice");
        assert_eq!(lease.id, id);
        assert_eq!(snapshot.view.item.id, id, "its own snapshot");
        assert_eq!(snapshot.view.item.leased_until, Some(lease.until));
        assert_eq!(snapshot.view.dimensions.len(), 1);
        assert_eq!(snapshot.view.dimensions[0].dimension, format!("timer_{n}"));
        leases[n] = Some(lease);
    }
    let leases: Vec<Lease> = leases
        .into_iter()
        .enumerate()
        .map(|(n, lease)| lease.unwrap_or_else(|| panic!("item {n} not claimed")))
        .collect();
    for (n, lease) in leases.iter().enumerate() {
        assert_eq!(
            get(db.store().as_ref(), ids[n]).await.leased_until,
            Some(lease.until)
        );
    }

    // Every third item has an event waiting: its park writes the outcome
    // and keeps the lease.
    for &id in ids.iter().step_by(3) {
        add_event(db.store().as_ref(), id, "push", later).await;
    }
    let barrier = Arc::new(Barrier::new(ITEMS));
    let parks: Vec<_> = leases
        .iter()
        .enumerate()
        .map(|(n, &lease)| {
            let store = db.store();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let parked = store
                    .item_park_with(ParkParams {
                        lease,
                        now: later,
                        outcome: Some(OutcomeChanges {
                            phase: (n % 2 == 0).then_some(Phase::Completed),
                            error: None,
                            dimensions: vec![DimensionUpdate::new(format!("done_{n}"), true)],
                            action: Some("act".into()),
                            records: vec![wq_core::OutcomeRecord {
                                kind: "test.wrote".into(),
                                metadata: serde_json::json!({ "n": n }),
                            }],
                        }),
                    })
                    .await
                    .expect("park");
                (n, parked)
            })
        })
        .collect();
    for park in parks {
        let (n, parked) = park.await.unwrap();
        let expected = if n % 3 == 0 {
            Park::EventsPending
        } else {
            Park::Parked
        };
        assert_eq!(parked, expected, "item {n}");
        let item = get(db.store().as_ref(), ids[n]).await;
        let phase = if n % 2 == 0 {
            Phase::Completed
        } else {
            Phase::Active
        };
        assert_eq!(item.phase, phase, "item {n}");
        let dimensions = db.store().dimension_list(ids[n]).await.unwrap();
        assert!(
            dimensions
                .iter()
                .any(|d| d.dimension == format!("done_{n}")),
            "item {n}: its own outcome"
        );
        if n % 3 == 0 {
            assert_eq!(item.leased_until, Some(leases[n].until), "item {n}");
        } else {
            assert_eq!(item.leased_until, None, "item {n}");
            let timer = dimensions
                .iter()
                .find(|d| d.dimension == format!("timer_{n}"));
            assert_eq!(
                timer.unwrap().pending_until,
                None,
                "item {n}: timer consumed"
            );
        }
        let records = db
            .store()
            .audit_list(wq_store::audit::AuditQuery {
                item_id: Some(ids[n]),
                limit: 100,
                ..wq_store::audit::AuditQuery::default()
            })
            .await
            .unwrap();
        let kinds: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
        let mut expected = vec!["item.created"];
        if n % 3 == 0 {
            expected.push("event.received");
        }
        expected.extend(["action.succeeded", "test.wrote"]);
        assert_eq!(kinds, expected, "item {n}");
        assert_eq!(
            records.last().unwrap().metadata,
            serde_json::json!({ "n": n })
        );
    }
    let total = ITEMS * 3 + ITEMS.div_ceil(3);
    assert_eq!(
        db.store().audit_verify().await.unwrap(),
        (total as u64, None)
    );
    if let Backend::Postgres(store) = &db.backend {
        let (claims, parks) = store.largest_batches();
        assert!(
            claims > 1,
            "claims shared a statement (largest batch {claims})"
        );
        assert!(
            parks > 1,
            "parks shared a statement (largest batch {parks})"
        );
    }
}

/// Outage failures are not counted against `max_attempts`: the item fails
/// once its streak of failures began before the budget's start. A success
/// (which resets the count) starts the next streak afresh.
pub async fn outages_fail_an_item_only_after_the_budget(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let start = t0();
    let budget = Duration::hours(6);
    let item = insert(store, TYPE_A, start).await;
    let outage = |lease, at: OffsetDateTime| RecordFailure {
        lease,
        now: at,
        error: "forge answered 503".into(),
        max_attempts: 2,
        permanent: false,
        retry_at: at + Duration::minutes(5),
        outage: true,
        outage_started_before: at - budget,
        action: None,
    };
    // Many more outage failures than max_attempts, within the budget.
    let mut at = start;
    for attempt in 1..=10 {
        let lease = claim(store, item.id, at).await;
        let failed = store.item_record_failure(outage(lease, at)).await.unwrap();
        assert_eq!(failed.attempts, attempt);
        assert_eq!(failed.phase, Phase::Active, "attempt {attempt}");
        at += Duration::minutes(30);
    }
    // An ordinary failure after the outage counts as the streak's first
    // counted one: still active (max_attempts 2), the second fails it.
    for (counted, phase) in [(1, Phase::Active), (2, Phase::Failed)] {
        let lease = claim(store, item.id, at).await;
        let failed = store
            .item_record_failure(RecordFailure {
                outage: false,
                error: "forge answered 404".into(),
                ..outage(lease, at)
            })
            .await
            .unwrap();
        assert_eq!(failed.phase, phase, "counted failure {counted}");
        at += Duration::minutes(30);
        if phase == Phase::Failed {
            let retried = store.item_retry(item.id, at, "tester", None).await.unwrap();
            assert_eq!(retried.phase, Phase::Active);
        }
    }
    // A success ends the streak; the next outage starts a new one.
    let lease = claim(store, item.id, at).await;
    let lease = store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now: at,
            phase: None,
            error: None,
            dimensions: vec![],
            action: None,
            records: Vec::new(),
        })
        .await
        .map(|_| lease)
        .unwrap();
    store.item_release(lease, None).await.unwrap();
    let streak = at + Duration::minutes(1);
    let lease = claim(store, item.id, streak).await;
    let failed = store
        .item_record_failure(outage(lease, streak))
        .await
        .unwrap();
    assert_eq!((failed.attempts, failed.phase), (1, Phase::Active));
    // Just inside the budget of the new streak: still active.
    let inside = streak + budget - Duration::seconds(1);
    let lease = claim(store, item.id, inside).await;
    let failed = store
        .item_record_failure(outage(lease, inside))
        .await
        .unwrap();
    assert_eq!(
        failed.phase,
        Phase::Active,
        "the streak is younger than the budget"
    );
    // Past the budget (at the end of that failure's backoff): the item
    // fails, keeping its lease for the park.
    let spent = inside + Duration::minutes(5) + Duration::seconds(1);
    let lease = claim(store, item.id, spent).await;
    let failed = store
        .item_record_failure(outage(lease, spent))
        .await
        .unwrap();
    assert_eq!(
        failed.phase,
        Phase::Failed,
        "an outage longer than the budget"
    );
    assert_eq!(failed.leased_until, Some(to_micros(lease.until)));
}

async fn claim_due(
    store: &dyn Store,
    types: &[&str],
    now: OffsetDateTime,
    limit: u32,
) -> Vec<(wq_store::Snapshot, Lease)> {
    claim_due_after(store, types, now, limit, None).await
}

async fn claim_due_after(
    store: &dyn Store,
    types: &[&str],
    now: OffsetDateTime,
    limit: u32,
    after: Option<ItemId>,
) -> Vec<(wq_store::Snapshot, Lease)> {
    store
        .item_claim_due(ClaimDueParams {
            now,
            lease_until: now + LEASE,
            handled_types: handled(types),
            limit,
            after,
        })
        .await
        .expect("claim due")
}

fn claimed_ids(claimed: &[(wq_store::Snapshot, Lease)]) -> Vec<ItemId> {
    sorted(claimed.iter().map(|(_, lease)| lease.id).collect())
}

/// A batch claim takes what the sweep would find, of the handled types,
/// each with its own snapshot and lease, oldest first, at most the limit,
/// and nothing that is leased, idle or finished.
pub async fn claim_due_takes_what_the_sweep_finds_with_snapshots(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let idle = insert(store, TYPE_A, now).await.id;
    park(store, idle, now).await;
    let mut first = new_item(TYPE_A, None, now);
    first.dimensions =
        vec![DimensionUpdate::new("needs_mr", false).detail(serde_json::json!({"mr": 7}))];
    let first = store.item_insert(first).await.unwrap().id;
    let second = insert(store, TYPE_A, now).await.id;
    let other_type = insert(store, TYPE_B, now).await.id;
    let leased = insert(store, TYPE_A, now).await.id;
    let held = claim(store, leased, now).await;
    // Pending events with actionable forced off: the event branch.
    let with_event = insert(store, TYPE_A, now).await.id;
    park(store, with_event, now).await;
    add_event(store, with_event, "note", now).await;
    db.force_not_actionable(with_event).await;
    // A parked item whose timer expires a second later: the timer branch.
    let timer = insert(store, TYPE_A, now).await.id;
    store
        .dimension_upsert(
            timer,
            DimensionUpdate::new("needs_reconcile", true).pending_until(now + Duration::seconds(1)),
            now,
        )
        .await
        .unwrap();
    park(store, timer, now).await;
    // A failed item's expired timer wakes nothing.
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

    assert!(claim_due(store, &[], now, 10).await.is_empty(), "no types");
    let oldest = claim_due(store, &[TYPE_A], now, 1).await;
    assert_eq!(
        claimed_ids(&oldest),
        vec![first],
        "oldest first, the limit kept"
    );
    let (snapshot, lease) = &oldest[0];
    assert_eq!(lease.until, to_micros(now + LEASE));
    assert_eq!(snapshot.view.item, get(store, first).await);
    assert_eq!(snapshot.view.item.leased_until, Some(lease.until));
    assert_eq!(
        snapshot.view.dimensions,
        store.dimension_list(first).await.unwrap()
    );
    assert!(!snapshot.has_events);

    // Two seconds on: the timer expired, the leases taken at `now` hold.
    let later = now + Duration::seconds(2);
    let rest = claim_due(store, &[TYPE_A], later, 10).await;
    assert_eq!(
        claimed_ids(&rest),
        sorted(vec![second, with_event, timer]),
        "the leased, idle, other-type and failed items stay"
    );
    for (snapshot, lease) in &rest {
        assert_eq!(snapshot.view.item, get(store, lease.id).await);
        assert_eq!(
            snapshot.view.dimensions,
            store.dimension_list(lease.id).await.unwrap()
        );
        assert_eq!(snapshot.has_events, lease.id == with_event);
        assert_eq!(lease.until, to_micros(later + LEASE));
    }
    assert!(
        claim_due(store, &[TYPE_A], later, 10).await.is_empty(),
        "all leased now"
    );
    assert_eq!(get(store, leased).await.leased_until, Some(held.until));
    assert_eq!(
        claimed_ids(&claim_due(store, &[TYPE_B], later, 10).await),
        vec![other_type]
    );
    // The leases it hands out are the ones the loop writes with.
    for (_, lease) in rest {
        store.item_park(lease, later).await.unwrap();
    }
}

/// Engines claiming batches at once get different items: together they
/// take every due item exactly once.
pub async fn concurrent_batch_claims_take_each_item_once(db: &TestDb) {
    const ITEMS: usize = 60;
    let now = t0();
    for _ in 0..ITEMS {
        insert(db.store().as_ref(), TYPE_A, now).await;
    }
    let barrier = Arc::new(Barrier::new(4));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = db.store();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            loop {
                let batch = claim_due(store.as_ref(), &[TYPE_A], now, 7).await;
                if batch.is_empty() {
                    return mine;
                }
                mine.extend(batch.into_iter().map(|(_, lease)| lease.id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    assert_eq!(all.len(), ITEMS, "each item claimed once");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), ITEMS, "no item claimed twice");
}

/// A claim that goes on after an id takes the actionable items after it,
/// oldest first, and still every item with events or an expired timer.
pub async fn claim_due_after_an_id_goes_on_from_it(db: &TestDb) {
    let store = db.store();
    let store = store.as_ref();
    let now = t0();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(insert(store, TYPE_A, now).await.id);
    }
    ids.sort();
    let taken = claim_due_after(store, &[TYPE_A], now, 2, Some(ids[2])).await;
    assert_eq!(
        claimed_ids(&taken),
        vec![ids[3], ids[4]],
        "the two after the cursor, oldest first"
    );
    // An older item with an event waiting (actionable forced off): the
    // event branch does not look at the cursor.
    db.force_not_actionable(ids[0]).await;
    add_event(store, ids[0], "note", now).await;
    db.force_not_actionable(ids[0]).await;
    let rest = claim_due_after(store, &[TYPE_A], now, 10, Some(ids[4])).await;
    assert_eq!(
        claimed_ids(&rest),
        vec![ids[0], ids[5]],
        "the event branch ignores the cursor"
    );
    let from_start = claim_due_after(store, &[TYPE_A], now, 10, None).await;
    assert_eq!(
        claimed_ids(&from_start),
        vec![ids[1], ids[2]],
        "from the oldest again"
    );
}
