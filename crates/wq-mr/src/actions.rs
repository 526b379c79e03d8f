//! The dispatch of an action to its executor (the four in [`crate::exec`]
//! and `retry_ci_jobs` in [`crate::ci_retry`]), and the status note that
//! follows every step.

use wq_core::{Action, DimensionUpdate, ExecError, ExecOutcome, ItemView, Phase};

use crate::MrType;
use crate::ci_retry::retry_ci_jobs;
use crate::dashboard::{self, StatusNote};
use crate::dims::{MrAction, NEEDS_DASHBOARD, NEEDS_RECONCILE};
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
        seen: std::sync::OnceLock::new(),
        written: std::sync::Mutex::new(None),
    };
    let outcome = match action {
        MrAction::CancelMr => run.cancel_mr().await,
        MrAction::ReopenMr => run.reopen_mr().await,
        MrAction::EnsureMr => run.ensure_mr().await,
        MrAction::CheckEmptyDiff => run.check_empty_diff().await,
        MrAction::PostDashboardNote => return run.post_dashboard_note().await,
        MrAction::RetryCiJobs => {
            retry_ci_jobs(
                &mr.herder,
                run.forge,
                run.details,
                view,
                &run,
                mr.clock.now(),
            )
            .await
        }
        MrAction::ReconcileMr => run.reconcile_mr().await,
    }?;
    follow_with_note(&run, outcome).await
}

/// The status note follows the step's outcome. The gates the reconcile saw
/// are kept with every outcome it gives (also the merge's). An item that
/// ends (merged, closed, cancelled) gets its final note now, best effort:
/// a failed edit never stops the end. Otherwise an edit is asked for when
/// the text would change, at most every `mr.note_min_interval_seconds`.
async fn follow_with_note(
    run: &Run<'_>,
    mut outcome: ExecOutcome,
) -> Result<ExecOutcome, ExecError> {
    if let Some(seen) = run.seen.get() {
        for update in &mut outcome.dimensions {
            if update.dimension == NEEDS_RECONCILE && update.detail.is_none() {
                update.detail = Some(seen.clone());
            }
        }
    }
    let ends = matches!(outcome.phase, Some(Phase::Completed | Phase::Cancelled));
    let asked = outcome
        .dimensions
        .iter()
        .any(|u| u.dimension == NEEDS_DASHBOARD);
    if asked && !ends {
        return Ok(outcome);
    }
    // The step may have written (the merge journal, the queue entry).
    let Some(details) = run
        .mr
        .store
        .get(run.view.item.id)
        .await
        .map_err(store_error)?
    else {
        return Ok(outcome);
    };
    let Some(number) = details.mr_number else {
        return Ok(outcome);
    };
    let next = dashboard::projected(run.view, &outcome);
    let note = StatusNote::of(
        &run.mr.config.public_url,
        &next,
        &details,
        run.person_review(),
    );
    if ends {
        match run.write_note(number, &note).await {
            Ok(write) => {
                let written = dashboard::written(number, write.id, &note, run.mr.clock.now());
                outcome
                    .dimensions
                    .retain(|u| u.dimension != NEEDS_DASHBOARD);
                outcome = write.recorded(
                    number,
                    outcome.with_dimension(
                        DimensionUpdate::new(NEEDS_DASHBOARD, false).detail(written),
                    ),
                );
            }
            Err(error) => {
                tracing::warn!(item = %run.view.item.id, %error, "the final status note was not written");
            }
        }
        return Ok(outcome);
    }
    let interval = MrType::seconds(run.mr.config.note_min_interval_seconds);
    if let Some(update) = dashboard::refresh(&next, &note, interval) {
        outcome = outcome.with_dimension(update);
    }
    Ok(outcome)
}
