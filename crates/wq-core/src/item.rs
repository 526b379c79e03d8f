//! The work item: identity, coarse lifecycle phase and queue bookkeeping,
//! and `ItemView`, the read-only snapshot a decider and handlers see.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::dimension::{Dimension, DimensionUpdate};

/// A work item id: a UUIDv7, so ids sort by creation time (keyset pagination
/// relies on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct ItemId(pub Uuid);

impl ItemId {
    /// A new time-ordered id.
    pub fn new_v7() -> Self {
        Self(Uuid::now_v7())
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ItemId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(ItemId)
    }
}

/// Coarse lifecycle (DDR-2). Only `active` items accept events (DDR-37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Active,
    Completed,
    Failed,
    Cancelled,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Active,
        Phase::Completed,
        Phase::Failed,
        Phase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Active => "active",
            Phase::Completed => "completed",
            Phase::Failed => "failed",
            Phase::Cancelled => "cancelled",
        }
    }

    /// Completed and cancelled items free their idempotency key (DDR-39).
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Completed | Phase::Cancelled)
    }

    /// Failed and cancelled items may be retried (DDR-37).
    pub fn is_retryable(self) -> bool {
        matches!(self, Phase::Failed | Phase::Cancelled)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown phase name.
#[derive(Debug, thiserror::Error)]
#[error("unknown phase {0:?}: expected one of active, completed, failed, cancelled")]
pub struct UnknownPhase(pub String);

impl FromStr for Phase {
    type Err = UnknownPhase;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "active" => Ok(Phase::Active),
            "completed" => Ok(Phase::Completed),
            "failed" => Ok(Phase::Failed),
            "cancelled" => Ok(Phase::Cancelled),
            other => Err(UnknownPhase(other.to_owned())),
        }
    }
}

/// The generic queue row (`work_items`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkItem {
    pub id: ItemId,
    pub item_type: String,
    pub phase: Phase,
    /// A wake-up signal for the sweep; written `true` when work is enqueued
    /// and `false` only when the loop parks the item (DDR-49).
    pub actionable: bool,
    /// Consecutive executor failures (DDR-14).
    pub attempts: i32,
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub leased_until: Option<OffsetDateTime>,
    pub idempotency_key: Option<String>,
    pub caller_identity: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_event_at: Option<OffsetDateTime>,
}

/// Which claim of its item a run holds. Every claim draws the item's next
/// number and heartbeats keep it (they move only `leased_until`), so a
/// write that must happen under this run's lease and no other names it
/// (`wq_store`'s `finish_leased`): a later claim of the same item, after
/// this lease expired, holds another number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseEpoch(pub i64);

/// What deciders and event handlers see: the item, its dimensions and the
/// time of the snapshot. Read-only by construction.
#[derive(Debug, Clone)]
pub struct ItemView {
    pub item: WorkItem,
    pub dimensions: Vec<Dimension>,
    pub now: OffsetDateTime,
    /// The claim the engine's run holds the item under; `None` outside a
    /// run (a read for the API, a test's view).
    pub lease: Option<LeaseEpoch>,
}

impl ItemView {
    /// The dimension row, if any.
    pub fn dimension(&self, name: &str, variant: &str) -> Option<&Dimension> {
        self.dimensions
            .iter()
            .find(|d| d.dimension == name && d.variant == variant)
    }

    /// DDR-48: a `needs_*` dimension asks for action when its row is absent,
    /// or its status is not `"false"` and it is not deferred to the future.
    pub fn needs(&self, name: &str) -> bool {
        self.needs_variant(name, "")
    }

    /// Like [`ItemView::needs`] for one variant.
    pub fn needs_variant(&self, name: &str, variant: &str) -> bool {
        match self.dimension(name, variant) {
            None => true,
            Some(row) => row.is_actionable(self.now),
        }
    }

    /// This view with a successful executor's changes applied, as the store
    /// writes them: phase (if given), error, attempts reset, dimension
    /// upserts (a `None` detail keeps the stored one).
    pub fn apply_outcome(
        &mut self,
        phase: Option<Phase>,
        error: Option<String>,
        updates: &[DimensionUpdate],
        now: OffsetDateTime,
    ) {
        if let Some(phase) = phase {
            self.item.phase = phase;
        }
        self.item.error = error;
        self.item.attempts = 0;
        self.item.updated_at = now;
        for update in updates {
            let existing = self
                .dimensions
                .iter_mut()
                .find(|row| row.dimension == update.dimension && row.variant == update.variant);
            match existing {
                Some(row) => {
                    row.status = update.status;
                    if let Some(detail) = &update.detail {
                        row.detail = detail.clone();
                    }
                    row.pending_until = update.pending_until;
                    row.updated_at = now;
                }
                None => self.dimensions.push(Dimension {
                    dimension: update.dimension.clone(),
                    variant: update.variant.clone(),
                    status: update.status,
                    detail: update
                        .detail
                        .clone()
                        .unwrap_or_else(|| serde_json::json!({})),
                    pending_until: update.pending_until,
                    updated_at: now,
                }),
            }
        }
    }

    /// A dimension whose row exists and asks for action (absent is `false`).
    pub fn needs_present(&self, name: &str, variant: &str) -> bool {
        self.dimension(name, variant)
            .is_some_and(|row| row.is_actionable(self.now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_round_trips_through_its_name() {
        for phase in Phase::ALL {
            assert_eq!(phase.as_str().parse::<Phase>().unwrap(), phase);
        }
        assert!("pending".parse::<Phase>().is_err());
    }

    #[test]
    fn applying_an_outcome_matches_what_the_store_writes() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(1);
        let mut view = ItemView {
            item: WorkItem {
                id: ItemId::new_v7(),
                item_type: "t".into(),
                phase: Phase::Active,
                actionable: true,
                attempts: 2,
                error: Some("old".into()),
                leased_until: None,
                idempotency_key: None,
                caller_identity: None,
                created_at: now,
                updated_at: now,
                last_event_at: None,
            },
            dimensions: Vec::new(),
            now,
            lease: None,
        };
        view.apply_outcome(
            None,
            None,
            &[DimensionUpdate::new("needs_a", false).detail(serde_json::json!({"n": 1}))],
            now,
        );
        assert_eq!((view.item.attempts, view.item.error.clone()), (0, None));
        assert!(!view.needs("needs_a"));
        view.apply_outcome(
            Some(Phase::Cancelled),
            Some("why".into()),
            &[DimensionUpdate::new("needs_a", true)],
            now,
        );
        assert_eq!(view.item.phase, Phase::Cancelled);
        let row = view.dimension("needs_a", "").unwrap();
        assert_eq!(
            row.detail,
            serde_json::json!({"n": 1}),
            "None keeps the detail"
        );
        assert!(view.needs("needs_a"));
    }

    #[test]
    fn ids_are_time_ordered() {
        let first = ItemId::new_v7();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = ItemId::new_v7();
        assert!(first < second);
    }
}
