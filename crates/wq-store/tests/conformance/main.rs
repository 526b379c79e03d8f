//! The `Store` conformance suite: every case runs against SQLite and
//! PostgreSQL, each on a fresh database, through `Arc<dyn Store>`. Cases that
//! need to reach past the trait (to break an invariant on purpose, or to
//! check what only one backend promises) use `TestDb`'s backend handles.

use std::sync::Arc;

use time::{Duration, OffsetDateTime};
use tokio::sync::Barrier;
use wq_core::{DimensionStatus, DimensionUpdate, EventResult, ItemId, Phase, WorkItem};
use wq_store::sqlite::SqliteStore;
use wq_store::testing::{drop_postgres_database, fresh_postgres_url, fresh_sqlite_url};
use wq_store::{
    ApplyEvent, ApplyOutcome, Backend, BackendKind, BeginAction, ClaimDueParams, ClaimParams,
    EventApplied, ItemListParams, Lease, NewEvent, NewItem, OutcomeChanges, Park, ParkParams,
    PhaseCount, RecordFailure, Store, StoreError, SweepParams, Visibility, VisibleScope, to_micros,
};

// --- harness -----------------------------------------------------------------

/// A migrated store on a fresh database of one [`wq_testkit::Backend`],
/// and the concrete store behind it ([`Backend`], `wq_store`'s handle).
struct TestDb {
    store: Arc<dyn Store>,
    backend: Backend,
    url: String,
}

impl TestDb {
    async fn open(backend: wq_testkit::Backend) -> Self {
        let url = backend.fresh_url().await;
        let store = wq_store::connect(&url, 4)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
        store
            .migrate()
            .await
            .unwrap_or_else(|error| panic!("cannot migrate {url}: {error}"));
        Self {
            backend: store.handle(),
            store,
            url,
        }
    }

    async fn sqlite() -> Self {
        Self::open(wq_testkit::Backend::Sqlite).await
    }

    async fn postgres() -> Self {
        Self::open(wq_testkit::Backend::Postgres).await
    }

    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Drops the PostgreSQL database of a passed test (a failed one keeps
    /// it for inspection).
    async fn finish(self) {
        if let Backend::Postgres(store) = self.backend {
            store.pool().close().await;
            drop_postgres_database(&self.url).await;
        }
    }

    /// Rewrites a stored audit record's actor behind the store's back.
    async fn tamper_audit(&self, seq: i64) {
        let statement = match &self.backend {
            Backend::Sqlite(_) => "UPDATE audit_records SET actor = 'intruder' WHERE seq = ?1",
            Backend::Postgres(_) => "UPDATE audit_records SET actor = 'intruder' WHERE seq = $1",
        };
        match &self.backend {
            Backend::Sqlite(store) => {
                sqlx::query(statement)
                    .bind(seq)
                    .execute(store.writer())
                    .await
                    .expect("tamper");
            }
            Backend::Postgres(store) => {
                sqlx::query(statement)
                    .bind(seq)
                    .execute(store.pool())
                    .await
                    .expect("tamper");
            }
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
            Backend::Postgres(store) => {
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
/// `cases::NAME(&TestDb)` on a fresh database of that [`wq_testkit::Backend`].
macro_rules! conformance_suite {
    ($($case:ident),* $(,)?) => {
        conformance_suite!(@backend sqlite, Sqlite, $($case),*);
        conformance_suite!(@backend postgres, Postgres, $($case),*);
    };
    (@backend $module:ident, $backend:ident, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = super::TestDb::open(wq_testkit::Backend::$backend).await;
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
    outages_fail_an_item_only_after_the_budget,
    park_parks_and_clears_expired_timers,
    park_refuses_while_events_are_pending,
    snapshot_reports_the_view_and_pending_events,
    claim_snapshot_claims_and_reads_in_one_step,
    every_claim_draws_its_own_lease_epoch,
    claim_due_takes_what_the_sweep_finds_with_snapshots,
    concurrent_batch_claims_take_each_item_once,
    claim_due_after_an_id_goes_on_from_it,
    park_with_outcome_writes_it_and_parks,
    park_with_outcome_while_events_are_pending_keeps_the_lease,
    park_with_stale_lease_writes_nothing,
    parks_that_arrive_together_each_get_their_own_answer,
    event_insert_wakes_the_item,
    event_next_returns_the_oldest_event,
    event_apply_applies_phase_and_dimensions,
    event_apply_stale_phase_still_applies_dimensions,
    event_apply_discards_events_of_inactive_items,
    retry_reactivates_failed_and_cancelled_items,
    a_retry_stores_the_types_event_in_its_transaction,
    count_by_phase_groups_by_type_and_phase,
    dimension_upsert_replaces_status_and_keeps_detail,
    mark_actionable_wakes_a_parked_item,
    sweep_finds_each_kind_of_candidate,
    sweep_excludes_leased_items_and_other_types,
    sweep_respects_limit_and_empty_types,
    concurrent_claims_have_exactly_one_winner,
    concurrent_claims_and_parks_of_many_items_each_happen_once,
    audit_records_chain_per_item_and_verify,
    concurrent_audit_appends_chain_without_forking,
    audit_list_filters_by_item_since_actor_kind_and_seq,
    every_loop_write_leaves_its_record_in_its_transaction,
    an_action_starts_on_the_record_with_the_outcome_before_it,
    an_event_keeps_its_raw_delivery,
    seeded_items_get_the_created_record_real_items_have,
    a_record_after_the_whole_chain_was_pruned_chains_to_its_pruned_head,
    parks_that_arrive_together_chain_to_their_pruned_or_last_heads,
    ui_sessions_expire_are_taken_once_and_pruned,
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
            action: None,
            records: Vec::new(),
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
            outage: false,
            outage_started_before: now,
            action: None,
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
            origin: None,
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

mod audit;
mod claim;
mod events;
mod items;
mod park;
mod sweep;

/// Every case, by name, for `conformance_suite!`.
mod cases {
    pub use super::audit::*;
    pub use super::claim::*;
    pub use super::events::*;
    pub use super::items::*;
    pub use super::park::*;
    pub use super::sweep::*;
}

mod backend_specific;
