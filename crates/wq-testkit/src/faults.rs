//! Database faults for tests: [`FaultyStore`] wraps a real store and
//! injects the [`Faults`] it is given; everything else is delegated.

use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{Dimension, DimensionUpdate, ItemId, ItemView, PendingEvent, WorkItem};
use wq_store::{
    ApplyEvent, ApplyOutcome, BackendKind, ClaimParams, EventApplied, Lease, NewEvent, NewItem,
    Park, PhaseCount, RecordFailure, Store, StoreError, StoreResult, SweepParams,
};

/// Faults a [`FaultyStore`] injects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// `ping` fails.
    pub ping_fails: bool,
    /// Listing items waits this long first (a slow query, for timeouts).
    pub list_delay: Option<std::time::Duration>,
}

impl Faults {
    /// True when no fault is set.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

/// The real store with [`Faults`] injected; everything else is delegated.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Faults,
}

impl FaultyStore {
    /// `inner` with `faults`.
    pub fn wrap(inner: Arc<dyn Store>, faults: Faults) -> Arc<dyn Store> {
        Arc::new(Self { inner, faults })
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }
    fn handle(&self) -> wq_store::Backend {
        self.inner.handle()
    }
    async fn migrate(&self) -> StoreResult<()> {
        self.inner.migrate().await
    }
    async fn ping(&self) -> StoreResult<()> {
        if self.faults.ping_fails {
            return Err(StoreError::Corrupt(
                "ping refused by the test wrapper".to_owned(),
            ));
        }
        self.inner.ping().await
    }
    async fn lead(&self, task: &str) -> StoreResult<Option<wq_store::Leadership>> {
        self.inner.lead(task).await
    }
    async fn item_insert(&self, item: NewItem) -> StoreResult<WorkItem> {
        self.inner.item_insert(item).await
    }
    async fn item_get(&self, id: ItemId) -> StoreResult<Option<WorkItem>> {
        self.inner.item_get(id).await
    }
    async fn item_view(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<Option<ItemView>> {
        self.inner.item_view(id, now).await
    }
    async fn item_snapshot(
        &self,
        id: ItemId,
        now: OffsetDateTime,
    ) -> StoreResult<Option<wq_store::Snapshot>> {
        self.inner.item_snapshot(id, now).await
    }
    async fn item_list_placed(
        &self,
        params: wq_store::ItemListParams,
    ) -> StoreResult<Vec<wq_store::ListedItem>> {
        if let Some(delay) = self.faults.list_delay {
            // The injected fault itself (a slow query), not a wait for
            // anything: the request timeout must cut it short.
            tokio::time::sleep(delay).await;
        }
        self.inner.item_list_placed(params).await
    }
    async fn item_claim(&self, params: ClaimParams) -> StoreResult<Option<(WorkItem, Lease)>> {
        self.inner.item_claim(params).await
    }
    async fn work_hints(&self) -> StoreResult<Option<wq_store::WorkHints>> {
        self.inner.work_hints().await
    }
    async fn item_claim_due(
        &self,
        params: wq_store::ClaimDueParams,
    ) -> StoreResult<Vec<(wq_store::Snapshot, Lease)>> {
        self.inner.item_claim_due(params).await
    }
    async fn item_heartbeat(&self, lease: Lease, until: OffsetDateTime) -> StoreResult<Lease> {
        self.inner.item_heartbeat(lease, until).await
    }
    async fn item_release(&self, lease: Lease, until: Option<OffsetDateTime>) -> StoreResult<()> {
        self.inner.item_release(lease, until).await
    }
    async fn item_apply_outcome(&self, outcome: ApplyOutcome) -> StoreResult<WorkItem> {
        self.inner.item_apply_outcome(outcome).await
    }
    async fn item_begin_action(&self, begin: wq_store::BeginAction) -> StoreResult<()> {
        self.inner.item_begin_action(begin).await
    }
    async fn item_record_failure(&self, failure: RecordFailure) -> StoreResult<WorkItem> {
        self.inner.item_record_failure(failure).await
    }
    async fn item_park_with(&self, params: wq_store::ParkParams) -> StoreResult<Park> {
        self.inner.item_park_with(params).await
    }
    async fn item_retry(
        &self,
        id: ItemId,
        now: OffsetDateTime,
        actor: &str,
        event_type: Option<&str>,
    ) -> StoreResult<WorkItem> {
        self.inner.item_retry(id, now, actor, event_type).await
    }
    async fn item_mark_actionable(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()> {
        self.inner.item_mark_actionable(id, now).await
    }
    async fn item_count_by_phase(&self) -> StoreResult<Vec<PhaseCount>> {
        self.inner.item_count_by_phase().await
    }
    async fn dimension_list(&self, id: ItemId) -> StoreResult<Vec<Dimension>> {
        self.inner.dimension_list(id).await
    }
    async fn dimension_upsert(
        &self,
        id: ItemId,
        update: DimensionUpdate,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.inner.dimension_upsert(id, update, now).await
    }
    async fn event_insert(&self, event: NewEvent) -> StoreResult<i64> {
        self.inner.event_insert(event).await
    }
    async fn event_next(&self, id: ItemId) -> StoreResult<Option<PendingEvent>> {
        self.inner.event_next(id).await
    }
    async fn event_apply(&self, apply: ApplyEvent) -> StoreResult<EventApplied> {
        self.inner.event_apply(apply).await
    }
    async fn sweep_candidates(&self, params: SweepParams) -> StoreResult<Vec<ItemId>> {
        self.inner.sweep_candidates(params).await
    }
    async fn audit_append(
        &self,
        record: wq_store::audit::NewAudit,
    ) -> StoreResult<wq_store::audit::AuditRecord> {
        self.inner.audit_append(record).await
    }
    async fn audit_list(
        &self,
        query: wq_store::audit::AuditQuery,
    ) -> StoreResult<Vec<wq_store::audit::AuditRecord>> {
        self.inner.audit_list(query).await
    }
    async fn audit_unarchived(&self, limit: u32) -> StoreResult<Vec<wq_store::audit::AuditRecord>> {
        self.inner.audit_unarchived(limit).await
    }
    async fn audit_mark_archived(&self, seqs: &[i64], now: OffsetDateTime) -> StoreResult<()> {
        self.inner.audit_mark_archived(seqs, now).await
    }
    async fn audit_prune_archived(&self, before: OffsetDateTime) -> StoreResult<u64> {
        self.inner.audit_prune_archived(before).await
    }
    async fn audit_unarchived_stats(&self) -> StoreResult<(i64, Option<OffsetDateTime>)> {
        self.inner.audit_unarchived_stats().await
    }
    async fn audit_pruned_heads(&self) -> StoreResult<Vec<(ItemId, String)>> {
        self.inner.audit_pruned_heads().await
    }
    async fn audit_horizon(&self, wait: bool) -> StoreResult<Option<i64>> {
        self.inner.audit_horizon(wait).await
    }
    async fn ui_session_insert(&self, session: wq_store::sessions::UiSession) -> StoreResult<()> {
        self.inner.ui_session_insert(session).await
    }
    async fn ui_session_get(
        &self,
        id_hash: &str,
        kind: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<wq_store::sessions::UiSession>> {
        self.inner.ui_session_get(id_hash, kind, now).await
    }
    async fn ui_session_take(
        &self,
        id_hash: &str,
        kind: &str,
        now: OffsetDateTime,
    ) -> StoreResult<Option<wq_store::sessions::UiSession>> {
        self.inner.ui_session_take(id_hash, kind, now).await
    }
    async fn ui_session_prune(&self, now: OffsetDateTime) -> StoreResult<u64> {
        self.inner.ui_session_prune(now).await
    }
}
