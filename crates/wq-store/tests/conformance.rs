//! The `Store` conformance suite: every case runs against SQLite and
//! PostgreSQL, each on a fresh database, through `Arc<dyn Store>`. Cases that
//! need to reach past the trait (to break an invariant on purpose, or to
//! check what only one backend promises) use `TestDb`'s backend handles.

use std::sync::Arc;

use time::{Duration, OffsetDateTime};
use tokio::sync::Barrier;
use wq_core::{DimensionStatus, DimensionUpdate, EventResult, ItemId, Phase, WorkItem};
use wq_store::postgres::PgStore;
use wq_store::sqlite::SqliteStore;
use wq_store::testing::{drop_postgres_database, fresh_postgres_url, fresh_sqlite_url};
use wq_store::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, ItemListParams, Lease,
    NewEvent, NewItem, OutcomeChanges, Park, ParkParams, PhaseCount, RecordFailure, Store,
    StoreError, SweepParams, Visibility, VisibleScope, to_micros,
};

// --- harness -----------------------------------------------------------------

enum Backend {
    Sqlite(SqliteStore),
    Postgres { store: PgStore, url: String },
}

/// A migrated store on a fresh database, and the concrete backend behind it.
struct TestDb {
    store: Arc<dyn Store>,
    backend: Backend,
}

impl TestDb {
    async fn sqlite() -> Self {
        let url = fresh_sqlite_url();
        let store = SqliteStore::connect(&url, 4)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        store.migrate().await.expect("migrate sqlite");
        Self {
            store: Arc::new(store.clone()),
            backend: Backend::Sqlite(store),
        }
    }

    async fn postgres() -> Self {
        let url = fresh_postgres_url().await;
        let store = PgStore::connect(&url, 4)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        store.migrate().await.expect("migrate postgres");
        Self {
            store: Arc::new(store.clone()),
            backend: Backend::Postgres { store, url },
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Drops the PostgreSQL database of a passed test (a failed one keeps
    /// it for inspection).
    async fn finish(self) {
        if let Backend::Postgres { store, url } = self.backend {
            store.pool().close().await;
            drop_postgres_database(&url).await;
        }
    }

    /// Breaks the DDR-49 invariant on purpose: an item with pending events
    /// but `actionable = false` (as after a crash in older code), so the
    /// sweep's event branch can be seen on its own.
    async fn force_not_actionable(&self, id: ItemId) {
        match &self.backend {
            Backend::Sqlite(store) => {
                sqlx::query("UPDATE work_items SET actionable = 0 WHERE id = ?1")
                    .bind(id.0.hyphenated().to_string())
                    .execute(store.writer())
                    .await
                    .expect("force actionable = 0");
            }
            Backend::Postgres { store, .. } => {
                sqlx::query("UPDATE work_items SET actionable = false WHERE id = $1")
                    .bind(id.0)
                    .execute(store.pool())
                    .await
                    .expect("force actionable = false");
            }
        }
    }
}

/// Defines `sqlite::NAME` and `postgres::NAME` tests that run
/// `cases::NAME(&TestDb)` on a fresh database.
macro_rules! conformance_suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = super::TestDb::sqlite().await;
                    super::cases::$case(&db).await;
                    db.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = super::TestDb::postgres().await;
                    super::cases::$case(&db).await;
                    db.finish().await;
                }
            )*
        }
    };
}

conformance_suite!(
    insert_get_view_and_health,
    list_filters_and_keyset_pages,
    list_narrows_to_visible_places_and_reports_them,
    idempotency_key_is_unique_among_live_items,
    claim_only_unleased_or_expired_and_handled,
    heartbeat_extends_the_lease,
    stale_lease_gets_lease_lost_on_every_loop_write,
    release_with_and_without_not_before,
    apply_outcome_resets_attempts_and_applies_phase_and_dimensions,
    record_failure_counts_backs_off_and_fails,
    park_parks_and_clears_expired_timers,
    park_refuses_while_events_are_pending,
    snapshot_reports_the_view_and_pending_events,
    claim_snapshot_claims_and_reads_in_one_step,
    park_with_outcome_writes_it_and_parks,
    park_with_outcome_while_events_are_pending_keeps_the_lease,
    park_with_stale_lease_writes_nothing,
    event_insert_wakes_the_item,
    event_next_returns_the_oldest_event,
    event_apply_applies_phase_and_dimensions,
    event_apply_stale_phase_still_applies_dimensions,
    event_apply_discards_events_of_inactive_items,
    retry_reactivates_failed_and_cancelled_items,
    count_by_phase_groups_by_type_and_phase,
    dimension_upsert_replaces_status_and_keeps_detail,
    mark_actionable_wakes_a_parked_item,
    sweep_finds_each_kind_of_candidate,
    sweep_excludes_leased_items_and_other_types,
    sweep_respects_limit_and_empty_types,
    concurrent_claims_have_exactly_one_winner,
);

// --- helpers -----------------------------------------------------------------

const TYPE_A: &str = "type_a";
const TYPE_B: &str = "type_b";
const LEASE: Duration = Duration::seconds(30);

/// A fixed start time with sub-microsecond digits, so every case also checks
/// that stored times are truncated to what the caller gets back.
fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(1_750_000_000_123_456_789).unwrap()
}

fn handled(types: &[&str]) -> Vec<String> {
    types.iter().map(|name| (*name).to_owned()).collect()
}

fn new_item(item_type: &str, key: Option<&str>, now: OffsetDateTime) -> NewItem {
    NewItem {
        id: ItemId::new_v7(),
        item_type: item_type.to_owned(),
        idempotency_key: key.map(str::to_owned),
        caller_identity: Some("tester".to_owned()),
        place: None,
        now,
        dimensions: Vec::new(),
    }
}

async fn insert(store: &dyn Store, item_type: &str, now: OffsetDateTime) -> WorkItem {
    store
        .item_insert(new_item(item_type, None, now))
        .await
        .expect("insert")
}

async fn get(store: &dyn Store, id: ItemId) -> WorkItem {
    store.item_get(id).await.expect("get").expect("item exists")
}

async fn try_claim(store: &dyn Store, id: ItemId, now: OffsetDateTime) -> Option<Lease> {
    store
        .item_claim(ClaimParams {
            id,
            now,
            lease_until: now + LEASE,
            handled_types: handled(&[TYPE_A, TYPE_B]),
        })
        .await
        .expect("claim")
        .map(|(_, lease)| lease)
}

async fn claim(store: &dyn Store, id: ItemId, now: OffsetDateTime) -> Lease {
    try_claim(store, id, now).await.expect("item is claimable")
}

/// Claims and parks an item: `actionable = false`, no lease.
async fn park(store: &dyn Store, id: ItemId, now: OffsetDateTime) {
    let lease = claim(store, id, now).await;
    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
}

/// Claims the item and applies an executor outcome with `phase`.
async fn move_to(store: &dyn Store, id: ItemId, phase: Phase, now: OffsetDateTime) -> Lease {
    let lease = claim(store, id, now).await;
    store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now,
            phase: Some(phase),
            error: None,
            dimensions: Vec::new(),
        })
        .await
        .expect("apply outcome");
    lease
}

async fn fail_permanently(store: &dyn Store, id: ItemId, now: OffsetDateTime) -> Lease {
    let lease = claim(store, id, now).await;
    let item = store
        .item_record_failure(RecordFailure {
            lease,
            now,
            error: "boom".into(),
            max_attempts: 5,
            permanent: true,
            retry_at: now + Duration::minutes(1),
        })
        .await
        .expect("record failure");
    assert_eq!(item.phase, Phase::Failed);
    lease
}

async fn add_event(store: &dyn Store, id: ItemId, event_type: &str, now: OffsetDateTime) -> i64 {
    store
        .event_insert(NewEvent {
            item_id: id,
            event_type: event_type.to_owned(),
            body: serde_json::json!({ "kind": event_type }),
            now,
        })
        .await
        .expect("event insert")
}

async fn sweep(store: &dyn Store, types: &[&str], now: OffsetDateTime, limit: u32) -> Vec<ItemId> {
    let mut ids = store
        .sweep_candidates(SweepParams {
            handled_types: handled(types),
            now,
            limit,
        })
        .await
        .expect("sweep");
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<ItemId>) -> Vec<ItemId> {
    ids.sort();
    ids
}

fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T, StoreError>, id: ItemId, what: &str) {
    match result {
        Err(StoreError::LeaseLost(lost)) => assert_eq!(lost, id, "{what}"),
        other => panic!("{what}: expected LeaseLost, got {other:?}"),
    }
}

// --- cases ---------------------------------------------------------------------

mod cases {
    use super::*;

    pub async fn insert_get_view_and_health(db: &TestDb) {
        let store = db.store();
        let store = store.as_ref();
        let expected_backend = match db.backend {
            Backend::Sqlite(_) => BackendKind::Sqlite,
            Backend::Postgres { .. } => BackendKind::Postgres,
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
        store.item_retry(first.id, now).await.unwrap();
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
            })
            .await
            .unwrap();
        assert_eq!(failed.attempts, 1);
        assert_eq!(failed.phase, Phase::Failed);
        assert_eq!(failed.leased_until, Some(lease.until));
    }

    pub async fn park_parks_and_clears_expired_timers(db: &TestDb) {
        let store = db.store();
        let store = store.as_ref();
        let now = t0();
        let mut new = new_item(TYPE_A, None, now);
        new.dimensions = vec![
            DimensionUpdate::new("needs_reconcile", true).pending_until(now - Duration::minutes(1)),
            DimensionUpdate::new("needs_empty_check", true)
                .pending_until(now + Duration::minutes(30)),
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
                        DimensionUpdate::new("needs_mr", false)
                            .detail(serde_json::json!({ "mr": 7 })),
                    ],
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
        let body =
            serde_json::json!({ "object_kind": "merge_request", "n": [1, 2, { "x": null }] });
        let first = store
            .event_insert(NewEvent {
                item_id: id,
                event_type: "merge_request".into(),
                body: body.clone(),
                now,
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

    pub async fn retry_reactivates_failed_and_cancelled_items(db: &TestDb) {
        let store = db.store();
        let store = store.as_ref();
        let now = t0();
        let later = now + Duration::minutes(1);

        let failed = insert(store, TYPE_A, now).await.id;
        let lease = fail_permanently(store, failed, now).await;
        store.item_park(lease, now).await.unwrap();
        let retried = store.item_retry(failed, later).await.unwrap();
        assert_eq!(retried.phase, Phase::Active);
        assert!(retried.actionable);
        assert_eq!(retried.attempts, 0);
        assert_eq!(retried.error, None);
        assert_eq!(retried.leased_until, None);
        assert_eq!(retried.updated_at, to_micros(later));
        assert_eq!(get(store, failed).await, retried);

        let cancelled = insert(store, TYPE_A, now).await.id;
        let lease = move_to(store, cancelled, Phase::Cancelled, now).await;
        let retried = store.item_retry(cancelled, later).await.unwrap();
        assert_eq!(retried.phase, Phase::Active);
        assert_eq!(retried.leased_until, None, "a held lease is dropped");
        assert_lease_lost(store.item_park(lease, now).await, cancelled, "old holder");

        let active = insert(store, TYPE_A, now).await.id;
        match store.item_retry(active, later).await {
            Err(StoreError::Conflict(message)) => assert_eq!(
                message,
                "work item is active; only failed or cancelled items can be retried"
            ),
            other => panic!("expected Conflict, got {other:?}"),
        }
        let completed = insert(store, TYPE_A, now).await.id;
        move_to(store, completed, Phase::Completed, now).await;
        match store.item_retry(completed, later).await {
            Err(StoreError::Conflict(message)) => assert!(message.contains("completed")),
            other => panic!("expected Conflict, got {other:?}"),
        }
        let missing = ItemId::new_v7();
        assert!(matches!(
            store.item_retry(missing, later).await,
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
        let result = store.item_retry(old, later).await;
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
        counts.sort_by(|a, b| {
            (&a.item_type, a.phase.as_str()).cmp(&(&b.item_type, b.phase.as_str()))
        });
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
                DimensionUpdate::new("needs_dashboard", false)
                    .detail(serde_json::json!({ "note": 6 })),
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
}

// --- backend-specific ------------------------------------------------------------

/// DDR-34 on PostgreSQL: the loop's exit and an event insert race; after
/// both, an item is never parked (not actionable) while an event is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_park_never_strands_a_racing_event() {
    let db = TestDb::postgres().await;
    let store = db.store();
    let now = t0();
    let (mut parked_first, mut event_first) = (0, 0);
    for round in 0..200 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        let lease = claim(store.as_ref(), id, now).await;
        let barrier = Arc::new(Barrier::new(2));
        let parker = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.item_park(lease, now).await.expect("park")
            })
        };
        let inserter = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                add_event(store.as_ref(), id, "note", now).await
            })
        };
        let park = parker.await.unwrap();
        inserter.await.unwrap();

        let item = get(store.as_ref(), id).await;
        let pending = store.event_next(id).await.unwrap();
        assert!(pending.is_some(), "round {round}: the event is stored");
        assert!(
            item.actionable,
            "round {round}: parked ({park:?}) with an event pending"
        );
        match park {
            Park::Parked => {
                parked_first += 1;
                assert_eq!(item.leased_until, None, "round {round}");
            }
            Park::EventsPending => {
                event_first += 1;
                assert_eq!(item.leased_until, Some(lease.until), "round {round}");
            }
        }
    }
    eprintln!("park-vs-event race: parked first {parked_first}, event first {event_first}");
    db.finish().await;
}

/// The same race on SQLite, where the write lock serialises the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_park_never_strands_a_racing_event() {
    let db = TestDb::sqlite().await;
    let store = db.store();
    let now = t0();
    for round in 0..50 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        let lease = claim(store.as_ref(), id, now).await;
        let barrier = Arc::new(Barrier::new(2));
        let parker = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.item_park(lease, now).await.expect("park")
            })
        };
        let inserter = {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                add_event(store.as_ref(), id, "note", now).await
            })
        };
        let park = parker.await.unwrap();
        inserter.await.unwrap();
        let item = get(store.as_ref(), id).await;
        assert!(
            item.actionable,
            "round {round}: parked ({park:?}) with an event pending"
        );
    }
    db.finish().await;
}

/// `sqlite::memory:` is one database shared by every pool connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_database_is_shared_by_the_pool() {
    let store: Arc<dyn Store> = wq_store::connect("sqlite::memory:", 8).await.unwrap();
    store.migrate().await.unwrap();
    let now = t0();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            insert(store.as_ref(), TYPE_A, now).await.id
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    for id in &ids {
        get(store.as_ref(), *id).await;
    }
    assert_eq!(
        store.item_count_by_phase().await.unwrap()[0].count,
        8,
        "every connection sees every write"
    );
    // A second in-memory store is a different database.
    let other = wq_store::connect("sqlite::memory:", 2).await.unwrap();
    other.migrate().await.unwrap();
    assert!(other.item_get(ids[0]).await.unwrap().is_none());
}

/// Group commit: many concurrent writers, each claiming and parking its own
/// items (with reads in between), all succeed; on a file database and on
/// `sqlite::memory:`, whose single connection serves reads and the batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_share_batches() {
    let file = TestDb::sqlite().await;
    let memory: Arc<dyn Store> = wq_store::connect("sqlite::memory:", 4).await.unwrap();
    memory.migrate().await.unwrap();
    for store in [file.store(), memory] {
        let now = t0();
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..3 {
                    let id = insert(store.as_ref(), TYPE_A, now).await.id;
                    let lease = claim(store.as_ref(), id, now).await;
                    assert!(get(store.as_ref(), id).await.leased_until.is_some());
                    assert_eq!(store.item_park(lease, now).await.unwrap(), Park::Parked);
                    ids.push(id);
                }
                ids
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.extend(task.await.unwrap());
        }
        assert_eq!(ids.len(), 150);
        for id in ids {
            let item = get(store.as_ref(), id).await;
            assert!(!item.actionable, "parked");
            assert_eq!(item.leased_until, None);
        }
    }
}

/// Group commit: a write that fails inside a batch (stale lease, missing
/// item, duplicate key) is rolled back alone; the batch's other writes
/// commit, and each caller gets its own result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_failing_write_does_not_roll_back_its_batch() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(sqlite) = &db.backend else {
        unreachable!()
    };
    let store = db.store();
    let now = t0();
    let later = now + LEASE + Duration::seconds(1);
    let mut leases = Vec::new();
    for _ in 0..10 {
        let id = insert(store.as_ref(), TYPE_A, now).await.id;
        leases.push(claim(store.as_ref(), id, now).await);
    }
    let contested = insert(store.as_ref(), TYPE_A, now).await.id;
    let stale = claim(store.as_ref(), contested, now).await;
    let current = claim(store.as_ref(), contested, later).await;
    store
        .item_insert(new_item(TYPE_A, Some("taken"), now))
        .await
        .unwrap();

    // Hold the writer connection so the writes below queue up and run as one
    // batch once it is released.
    let held = sqlite.begin_write().await.unwrap();
    let blocker = {
        let store = store.clone();
        tokio::spawn(async move { insert(store.as_ref(), TYPE_B, now).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (n, lease) in leases.iter().copied().enumerate() {
        let writer = store.clone();
        good.push(tokio::spawn(async move {
            writer
                .item_apply_outcome(ApplyOutcome {
                    lease,
                    now: later,
                    phase: Some(Phase::Completed),
                    error: None,
                    dimensions: vec![DimensionUpdate::new("needs_mr", false)],
                })
                .await
        }));
        let store = store.clone();
        bad.push(tokio::spawn(async move {
            let result = match n % 3 {
                0 => store
                    .item_park_with(ParkParams {
                        lease: stale,
                        now: later,
                        outcome: Some(OutcomeChanges {
                            phase: Some(Phase::Cancelled),
                            error: Some("stale".into()),
                            dimensions: vec![DimensionUpdate::new("stale", true)],
                        }),
                    })
                    .await
                    .map(|_| ()),
                1 => store
                    .event_insert(NewEvent {
                        item_id: ItemId::new_v7(),
                        event_type: "push".into(),
                        body: serde_json::json!({}),
                        now,
                    })
                    .await
                    .map(|_| ()),
                _ => store
                    .item_insert(new_item(TYPE_A, Some("taken"), now))
                    .await
                    .map(|_| ()),
            };
            (n, result)
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    held.commit().await.unwrap();
    blocker.await.unwrap();

    for task in good {
        let item = task.await.unwrap().expect("the good writes commit");
        assert_eq!(item.phase, Phase::Completed);
    }
    for task in bad {
        match task.await.unwrap() {
            (n, Err(StoreError::LeaseLost(id))) if n % 3 == 0 => assert_eq!(id, contested),
            (n, Err(StoreError::NotFound(_))) if n % 3 == 1 => {}
            (n, Err(StoreError::Duplicate(_))) if n % 3 == 2 => {}
            other => panic!("unexpected result {other:?}"),
        }
    }
    for lease in &leases {
        assert_eq!(get(store.as_ref(), lease.id).await.phase, Phase::Completed);
        assert_eq!(store.dimension_list(lease.id).await.unwrap().len(), 1);
    }
    let contested_item = get(store.as_ref(), contested).await;
    assert_eq!(
        contested_item.phase,
        Phase::Active,
        "the stale write left nothing"
    );
    assert_eq!(contested_item.error, None);
    assert_eq!(contested_item.leased_until, Some(current.until));
    assert!(store.dimension_list(contested).await.unwrap().is_empty());
    db.finish().await;
}

/// A file database survives reopening, and `synchronous=normal` is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_database_survives_reopening() {
    let url = fresh_sqlite_url();
    let id = {
        let store = SqliteStore::connect(&url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let id = insert(&store, TYPE_A, t0()).await.id;
        store.pool().close().await;
        id
    };
    let store = SqliteStore::connect(&format!("{url}?synchronous=normal"), 2)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert_eq!(get(&store, id).await.phase, Phase::Active);
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 1, "NORMAL");
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    let default = SqliteStore::connect(&url, 1).await.unwrap();
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(default.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 2, "FULL by default");
    assert!(
        SqliteStore::connect(&format!("{url}?synchronous=off"), 1)
            .await
            .is_err()
    );
}

/// An item type adds its own table with its own migrator, then creates its
/// item and detail row in one transaction; a failed detail insert leaves no
/// item behind. Re-running the generic migrator ignores the type's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_item_type_extends_the_schema_in_one_transaction() {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};

    let store = SqliteStore::connect(&fresh_sqlite_url(), 2).await.unwrap();
    store.migrate().await.unwrap();
    let mut type_migrator = Migrator::with_migrations(vec![Migration::new(
        1000,
        "demo_details".into(),
        MigrationType::Simple,
        "CREATE TABLE demo_details (
             work_item_id TEXT NOT NULL PRIMARY KEY REFERENCES work_items (id) ON DELETE CASCADE,
             title TEXT NOT NULL CHECK (title <> '')
         ) STRICT"
            .into_sql_str(),
        false,
    )]);
    type_migrator.set_ignore_missing(true);
    type_migrator.run(store.pool()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the generic migrator ignores version 1000");

    let now = t0();
    let item = new_item(TYPE_A, Some("demo"), now);
    let mut tx = store.begin_write().await.unwrap();
    let created = wq_store::sqlite::insert_item(&mut tx, &item).await.unwrap();
    wq_store::sqlite::upsert_dimension(
        &mut tx,
        created.id,
        &DimensionUpdate::new("needs_x", true),
        now,
    )
    .await
    .unwrap();
    sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES (?1, ?2)")
        .bind(created.id.0.hyphenated().to_string())
        .bind("hello")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.dimension_list(created.id).await.unwrap().len(), 1);

    let failing = new_item(TYPE_A, Some("demo-2"), now);
    let mut tx = store.begin_write().await.unwrap();
    wq_store::sqlite::insert_item(&mut tx, &failing)
        .await
        .unwrap();
    let bad = sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES (?1, '')")
        .bind(failing.id.0.hyphenated().to_string())
        .execute(&mut *tx)
        .await;
    assert!(bad.is_err());
    tx.rollback().await.unwrap();
    assert!(store.item_get(failing.id).await.unwrap().is_none());
}

/// The same extension path on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_item_type_extends_the_schema_in_one_transaction() {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};

    let db = TestDb::postgres().await;
    let Backend::Postgres { store, .. } = &db.backend else {
        unreachable!()
    };
    let mut type_migrator = Migrator::with_migrations(vec![Migration::new(
        1000,
        "demo_details".into(),
        MigrationType::Simple,
        "CREATE TABLE demo_details (
             work_item_id uuid NOT NULL PRIMARY KEY REFERENCES work_items (id) ON DELETE CASCADE,
             title text NOT NULL CHECK (title <> '')
         )"
        .into_sql_str(),
        false,
    )]);
    type_migrator.set_ignore_missing(true);
    type_migrator.run(store.pool()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the generic migrator ignores version 1000");

    let now = t0();
    let item = new_item(TYPE_A, Some("demo"), now);
    let mut tx = store.pool().begin().await.unwrap();
    let created = wq_store::postgres::insert_item(&mut tx, &item)
        .await
        .unwrap();
    wq_store::postgres::upsert_dimension(
        &mut tx,
        created.id,
        &DimensionUpdate::new("needs_x", true),
        now,
    )
    .await
    .unwrap();
    sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES ($1, $2)")
        .bind(created.id.0)
        .bind("hello")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.dimension_list(created.id).await.unwrap().len(), 1);

    let failing = new_item(TYPE_A, Some("demo-2"), now);
    let mut tx = store.pool().begin().await.unwrap();
    wq_store::postgres::insert_item(&mut tx, &failing)
        .await
        .unwrap();
    let bad = sqlx::query("INSERT INTO demo_details (work_item_id, title) VALUES ($1, '')")
        .bind(failing.id.0)
        .execute(&mut *tx)
        .await;
    assert!(bad.is_err());
    tx.rollback().await.unwrap();
    assert!(store.item_get(failing.id).await.unwrap().is_none());
    db.finish().await;
}

/// `wq_store::connect` picks the backend from the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_picks_the_backend_from_the_url() {
    let sqlite = wq_store::connect(&fresh_sqlite_url(), 1).await.unwrap();
    assert_eq!(sqlite.backend(), BackendKind::Sqlite);
    let url = fresh_postgres_url().await;
    let postgres = wq_store::connect(&url, 1).await.unwrap();
    assert_eq!(postgres.backend(), BackendKind::Postgres);
    postgres.ping().await.unwrap();
    drop(postgres);
    drop_postgres_database(&url).await;
    assert!(wq_store::connect("mysql://x", 1).await.is_err());
}

/// The sweep reads only its small indexes on SQLite, even without ANALYZE
/// statistics (which would otherwise steer it to every item of a type).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sweep_plan_never_walks_idle_items() {
    let db = TestDb::sqlite().await;
    let Backend::Sqlite(store) = &db.backend else {
        unreachable!()
    };
    let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {}",
        include_str!("../src/sqlite/queries/sweep/candidates.sql")
    )))
    .bind(r#"["type_a"]"#)
    .bind(0_i64)
    .bind(10_i64)
    .fetch_all(store.pool())
    .await
    .unwrap();
    let plan: Vec<&str> = rows.iter().map(|row| row.3.as_str()).collect();
    let on_items: Vec<&&str> = plan.iter().filter(|line| line.contains(" w ")).collect();
    assert_eq!(on_items.len(), 3, "{plan:#?}");
    for line in on_items {
        assert!(
            line.contains("USING INDEX work_items_actionable") || line.ends_with("(id=?)"),
            "work_items must be read through the actionable index or by id: {plan:#?}"
        );
    }
    assert!(
        plan.iter()
            .any(|line| line.contains("work_item_statuses_pending_until (pending_until")),
        "{plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|line| line.contains("SCAN e USING COVERING INDEX pending_events_work_item_id")),
        "{plan:#?}"
    );
    db.finish().await;
}

/// The sweep's PostgreSQL plan with 200k idle items, as a generic plan
/// (what a prepared statement may switch to): every branch reads its small
/// index and looks items up by id; nothing scans or joins all of work_items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sweep_plan_never_walks_idle_items() {
    let db = TestDb::postgres().await;
    let Backend::Postgres { store, .. } = &db.backend else {
        unreachable!()
    };
    let mut conn = store.pool().acquire().await.unwrap();
    for statement in [
        "INSERT INTO work_items (id, item_type, phase, actionable, created_at, updated_at)
         SELECT gen_random_uuid(), 'type_a',
                (ARRAY['active', 'completed', 'failed', 'cancelled'])[1 + g % 4],
                false, now(), now()
         FROM generate_series(1, 200000) AS g",
        "INSERT INTO work_item_statuses (work_item_id, dimension, status, pending_until, updated_at)
         SELECT id, 'needs_reconcile', 'false', now() + interval '30 minutes', now()
         FROM work_items WHERE phase = 'active'",
        "UPDATE work_items SET actionable = true
         WHERE id IN (SELECT id FROM work_items WHERE phase = 'active' LIMIT 20)",
        "ANALYZE",
        "SET plan_cache_mode = force_generic_plan",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PREPARE sweep (text[], timestamptz, bigint) AS {}",
        include_str!("../src/postgres/queries/sweep/candidates.sql")
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> =
        sqlx::query_scalar("EXPLAIN (COSTS OFF) EXECUTE sweep (ARRAY['type_a'], now(), 100)")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on work_items"), "{plan}");
    assert!(
        !plan.contains("Hash Join") && !plan.contains("Merge Join"),
        "{plan}"
    );
    assert!(plan.contains("work_items_actionable"), "{plan}");
    assert!(plan.contains("work_item_statuses_pending_until"), "{plan}");
    drop(conn);
    db.finish().await;
}
