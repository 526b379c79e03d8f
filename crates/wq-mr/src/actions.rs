//! The dispatch of an action to its executor: the four in [`crate::exec`]
//! and `retry_ci_jobs` in [`crate::ci_retry`].

use wq_core::{Action, ExecError, ExecOutcome, ItemView};

use crate::MrType;
use crate::ci_retry::retry_ci_jobs;
use crate::dims::MrAction;
use crate::errors::store_error;
use crate::exec::Run;

/// Runs `action` on the item: loads its detail row and its forge, then the
/// action's executor.
pub(crate) async fn execute(
    mr: &MrType,
    action: Action,
    view: &ItemView,
) -> Result<ExecOutcome, ExecError> {
    let action: MrAction = action
        .name
        .parse()
        .map_err(|error| ExecError::permanent(format!("{error}")))?;
    let details = mr
        .store
        .get(view.item.id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ExecError::permanent("the item has no mr_details row"))?;
    let forge = mr.forges.get(&details.spec.forge).ok_or_else(|| {
        ExecError::permanent(format!(
            "forge {:?} is not configured on this instance",
            details.spec.forge
        ))
    })?;
    let run = Run {
        mr,
        view,
        details: &details,
        forge: forge.as_ref(),
    };
    match action {
        MrAction::EnsureMr => run.ensure_mr().await,
        MrAction::CheckEmptyDiff => run.check_empty_diff().await,
        MrAction::PostDashboardNote => run.post_dashboard_note().await,
        MrAction::RetryCiJobs => {
            retry_ci_jobs(&mr.herder, run.forge, run.details, view, mr.clock.now()).await
        }
        MrAction::ReconcileMr => run.reconcile_mr().await,
    }
}
