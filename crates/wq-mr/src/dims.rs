//! Dimension names and the decider (DDR-45, DDR-48): a priority scan over
//! `needs_*` rows; an absent row asks for action, a deferred one waits.

use wq_core::{Action, ItemView, Phase};

pub const NEEDS_MR: &str = "needs_mr";
pub const NEEDS_EMPTY_CHECK: &str = "needs_empty_check";
pub const NEEDS_DASHBOARD: &str = "needs_dashboard";
pub const NEEDS_RECONCILE: &str = "needs_reconcile";
/// Failed CI jobs to judge and retry (DDR-47); absent means none.
pub const NEEDS_CI_RETRY: &str = "needs_ci_retry";

pub const ENSURE_MR: Action = Action::new("ensure_mr");
pub const CHECK_EMPTY_DIFF: Action = Action::new("check_empty_diff");
pub const POST_DASHBOARD_NOTE: Action = Action::new("post_dashboard_note");
pub const RECONCILE_MR: Action = Action::new("reconcile_mr");
pub const RETRY_CI_JOBS: Action = Action::new("retry_ci_jobs");

/// Every action of the type.
pub const ACTIONS: &[&str] = &[
    ENSURE_MR.name,
    CHECK_EMPTY_DIFF.name,
    POST_DASHBOARD_NOTE.name,
    RETRY_CI_JOBS.name,
    RECONCILE_MR.name,
];

/// The next action: `ensure_mr` → `check_empty_diff` →
/// `post_dashboard_note` → `retry_ci_jobs` → `reconcile_mr`. Pure; called
/// only by the loop. `needs_ci_retry` is the one row whose absence means
/// nothing to do: it exists once a failed job was reported.
pub fn decide(view: &ItemView) -> Option<Action> {
    if view.item.phase != Phase::Active {
        return None;
    }
    [
        (NEEDS_MR, ENSURE_MR),
        (NEEDS_EMPTY_CHECK, CHECK_EMPTY_DIFF),
        (NEEDS_DASHBOARD, POST_DASHBOARD_NOTE),
        (NEEDS_CI_RETRY, RETRY_CI_JOBS),
        (NEEDS_RECONCILE, RECONCILE_MR),
    ]
    .into_iter()
    .find(|(dimension, _)| {
        if *dimension == NEEDS_CI_RETRY {
            view.needs_present(dimension, "")
        } else {
            view.needs(dimension)
        }
    })
    .map(|(_, action)| action)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        }
    }

    /// (dimension, status, pending_until) rows of one case.
    type Rows = &'static [(&'static str, bool, Option<OffsetDateTime>)];

    #[test]
    fn scans_needs_in_priority_order() {
        const LATER: Option<OffsetDateTime> = Some(datetime!(2026-11-30 12:30 UTC));
        const EARLIER: Option<OffsetDateTime> = Some(datetime!(2026-11-30 11:59 UTC));
        let cases: Vec<(Rows, Option<Action>)> = vec![
            // A new item: every row absent → create the MR first.
            (&[], Some(ENSURE_MR)),
            (&[(NEEDS_MR, true, None)], Some(ENSURE_MR)),
            (&[(NEEDS_MR, false, None)], Some(CHECK_EMPTY_DIFF)),
            (
                &[(NEEDS_MR, false, None), (NEEDS_EMPTY_CHECK, true, LATER)],
                Some(POST_DASHBOARD_NOTE),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                ],
                Some(RECONCILE_MR),
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
                Some(CHECK_EMPTY_DIFF),
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
                Some(RETRY_CI_JOBS),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_CI_RETRY, true, LATER),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(RECONCILE_MR),
            ),
            (
                &[
                    (NEEDS_MR, false, None),
                    (NEEDS_EMPTY_CHECK, true, LATER),
                    (NEEDS_DASHBOARD, false, None),
                    (NEEDS_CI_RETRY, true, EARLIER),
                    (NEEDS_RECONCILE, true, LATER),
                ],
                Some(RETRY_CI_JOBS),
            ),
            // A content update re-arms ensure_mr ahead of everything.
            (
                &[
                    (NEEDS_MR, true, None),
                    (NEEDS_EMPTY_CHECK, true, EARLIER),
                    (NEEDS_RECONCILE, true, None),
                ],
                Some(ENSURE_MR),
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
