//! The decider (DDR-45, DDR-48): a priority scan over `needs_*` rows; an
//! absent row asks for action, a deferred one waits.

use wq_core::{DimensionStatus, ItemView, Phase};

use crate::dims::{MrAction, NEEDS_CANCEL, NEEDS_CI_RETRY, NEEDS_REOPEN};

/// The next action: `cancel_mr` → `reopen_mr` → `ensure_mr` →
/// `check_empty_diff` → `post_dashboard_note` → `retry_ci_jobs` →
/// `reconcile_mr`. Pure; called only by the loop. `needs_cancel`,
/// `needs_reopen` and `needs_ci_retry` are the rows whose absence means
/// nothing to do: they exist once a caller asked for the cancel or retried
/// the item, or a failed job was reported. A cancel asked for goes before
/// everything else, and while it waits (a change request being merged)
/// nothing else runs: no push, merge or retry after it.
pub fn decide(view: &ItemView) -> Option<MrAction> {
    if view.item.phase != Phase::Active {
        return None;
    }
    if let Some(cancel) = view.dimension(NEEDS_CANCEL, "")
        && cancel.status == DimensionStatus::True
    {
        return cancel.is_actionable(view.now).then_some(MrAction::CancelMr);
    }
    MrAction::ALL
        .into_iter()
        .find(|action| match action.dimension() {
            dimension @ (NEEDS_CI_RETRY | NEEDS_CANCEL | NEEDS_REOPEN) => {
                view.needs_present(dimension, "")
            }
            dimension => view.needs(dimension),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dims::{NEEDS_DASHBOARD, NEEDS_EMPTY_CHECK, NEEDS_MR, NEEDS_RECONCILE};
    use time::OffsetDateTime;
    use time::macros::datetime;
    use wq_core::{Dimension, DimensionStatus, ItemId, WorkItem};

    const NOW: OffsetDateTime = datetime!(2026-11-30 12:00 UTC);

    fn view(phase: Phase, rows: &[(&str, bool, Option<OffsetDateTime>)]) -> ItemView {
        ItemView {
            item: WorkItem {
                id: ItemId::new_v7(),
                item_type: "mr".into(),
                phase,
                actionable: true,
                attempts: 0,
                error: None,
                leased_until: None,
                idempotency_key: None,
                caller_identity: None,
                created_at: NOW,
                updated_at: NOW,
                last_event_at: None,
            },
            dimensions: rows
                .iter()
                .map(|(name, status, pending)| Dimension {
                    dimension: (*name).into(),
                    variant: String::new(),
                    status: DimensionStatus::from(*status),
                    detail: serde_json::json!({}),
                    pending_until: *pending,
                    updated_at: NOW,
                })
                .collect(),
            now: NOW,
            lease: None,
        }
    }

    /// (dimension, status, pending_until) rows of one case.
    type Rows = &'static [(&'static str, bool, Option<OffsetDateTime>)];

    #[test]
    fn scans_needs_in_priority_order() {
        const LATER: Option<OffsetDateTime> = Some(datetime!(2026-11-30 12:30 UTC));
        const EARLIER: Option<OffsetDateTime> = Some(datetime!(2026-11-30 11:59 UTC));
        let cases: Vec<(Rows, Option<MrAction>)> = vec![
            // A new item: every row absent → create the MR first.
            (&[], Some(MrAction::EnsureMr)),
            (&[(NEEDS_MR, true, None)], Some(MrAction::EnsureMr)),
            (&[(NEEDS_MR, false, None)], Some(MrAction::CheckEmptyDiff)),
            (
                &[(NEEDS_MR, false, None), (NEEDS_EMPTY_CHECK, true, LATER)],
                Some(MrAction::PostDashboardNote),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                ],
                Some(MrAction::ReconcileMr),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_RECONCILE, true, LATER),
                ],
                None,
            ),
            // An expired deferral asks again, ahead of later priorities.
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, EARLIER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::CheckEmptyDiff),
            ),
            // A reported failed job is judged before the reconcile; a
            // scheduled retry waits for its time.
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_CI_RETRY, true, None),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::RetryCiJobs),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_CI_RETRY, true, LATER),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::ReconcileMr),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_CI_RETRY, true, EARLIER),
                    (NEEDS_RECONCILE, true, LATER),
                ],
                Some(MrAction::RetryCiJobs),
            ),
            // A content update re-arms ensure_mr ahead of everything.
            (
                &[
                    (NEEDS_MR, true, None),
                    (NEEDS_EMPTY_CHECK, true, EARLIER),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::EnsureMr),
            ),
            // A cancel asked for goes before everything, a content update
            // and a due merge included; done, it asks for nothing.
            (
                &[
                    (NEEDS_CANCEL, true, None),
                    (NEEDS_MR, true, None),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::CancelMr),
            ),
            // Waiting (the change request is being merged), it still holds
            // everything else back.
            (
                &[
                    (NEEDS_CANCEL, true, LATER),
                    (NEEDS_MR, true, None),
                    (NEEDS_RECONCILE, true, None),
                ],
                None,
            ),
            // A retry's reopen goes before a content update and a
            // reconcile (which would see the change request closed); done,
            // or absent, it asks for nothing.
            (
                &[
                    (NEEDS_REOPEN, true, None),
                    (NEEDS_MR, true, None),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(MrAction::ReopenMr),
            ),
            (
                &[
                    (NEEDS_CANCEL, false, None),
                    (NEEDS_REOPEN, false, None),
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_RECONCILE, true, LATER),
                ],
                None,
            ),
        ];
        for (rows, expected) in cases {
            assert_eq!(decide(&view(Phase::Active, rows)), expected, "{rows:?}");
        }
    }

    #[test]
    fn terminal_and_failed_items_have_nothing_to_do() {
        for phase in [Phase::Completed, Phase::Cancelled, Phase::Failed] {
            assert_eq!(decide(&view(phase, &[])), None, "{phase:?}");
        }
    }
}
