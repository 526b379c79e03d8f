//! The names of the `mr` type: its `needs_*` dimensions and its actions
//! (DDR-45, DDR-48).

use std::fmt;
use std::str::FromStr;

use wq_core::Action;

pub const NEEDS_MR: &str = "needs_mr";
pub const NEEDS_EMPTY_CHECK: &str = "needs_empty_check";
pub const NEEDS_DASHBOARD: &str = "needs_dashboard";
pub const NEEDS_RECONCILE: &str = "needs_reconcile";
/// Failed CI jobs to judge and retry (DDR-47); absent means none.
pub const NEEDS_CI_RETRY: &str = "needs_ci_retry";
/// A caller asked to stop managing the item (`cancel`); absent means none.
/// Its detail says who and why.
pub const NEEDS_CANCEL: &str = "needs_cancel";
/// A caller retried the item (`retry`): its change request is reopened if
/// it was closed; absent means none. Its detail says who.
pub const NEEDS_REOPEN: &str = "needs_reopen";

/// An action of the `mr` type; one executor each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MrAction {
    CancelMr,
    ReopenMr,
    EnsureMr,
    CheckEmptyDiff,
    PostDashboardNote,
    RetryCiJobs,
    ReconcileMr,
}

impl MrAction {
    /// Every action, in the decider's priority order.
    pub const ALL: [MrAction; 7] = [
        Self::CancelMr,
        Self::ReopenMr,
        Self::EnsureMr,
        Self::CheckEmptyDiff,
        Self::PostDashboardNote,
        Self::RetryCiJobs,
        Self::ReconcileMr,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CancelMr => "cancel_mr",
            Self::ReopenMr => "reopen_mr",
            Self::EnsureMr => "ensure_mr",
            Self::CheckEmptyDiff => "check_empty_diff",
            Self::PostDashboardNote => "post_dashboard_note",
            Self::RetryCiJobs => "retry_ci_jobs",
            Self::ReconcileMr => "reconcile_mr",
        }
    }

    /// The `needs_*` dimension that asks for this action.
    pub const fn dimension(self) -> &'static str {
        match self {
            Self::CancelMr => NEEDS_CANCEL,
            Self::ReopenMr => NEEDS_REOPEN,
            Self::EnsureMr => NEEDS_MR,
            Self::CheckEmptyDiff => NEEDS_EMPTY_CHECK,
            Self::PostDashboardNote => NEEDS_DASHBOARD,
            Self::RetryCiJobs => NEEDS_CI_RETRY,
            Self::ReconcileMr => NEEDS_RECONCILE,
        }
    }
}

impl fmt::Display for MrAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no action of the `mr` type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAction(pub String);

impl fmt::Display for UnknownAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown action {}", self.0)
    }
}

impl std::error::Error for UnknownAction {}

impl FromStr for MrAction {
    type Err = UnknownAction;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|action| action.as_str() == name)
            .ok_or_else(|| UnknownAction(name.to_owned()))
    }
}

impl From<MrAction> for Action {
    fn from(action: MrAction) -> Self {
        Action::new(action.as_str())
    }
}

/// Every action's name, as the engine lists them.
pub const ACTIONS: &[&str] = &{
    let mut names = [""; MrAction::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = MrAction::ALL[i].as_str();
        i += 1;
    }
    names
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_parse_back() {
        assert_eq!(ACTIONS.len(), MrAction::ALL.len());
        for (action, name) in MrAction::ALL.into_iter().zip(ACTIONS) {
            assert_eq!(action.as_str(), *name);
            assert_eq!(name.parse::<MrAction>(), Ok(action));
            assert_eq!(Action::from(action).name, *name);
        }
        assert_eq!(
            "merge".parse::<MrAction>(),
            Err(UnknownAction("merge".into()))
        );
    }
}
