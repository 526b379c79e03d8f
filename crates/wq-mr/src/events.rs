//! The event handler (DDR-33, DDR-38): interprets a stored event into an
//! [`EventResult`]; the generic layer applies it (only to active items,
//! DDR-37). Handlers write nothing.
//!
//! Webhook events ask for a reconcile, which reads the forge's current
//! state: duplicates cost one read and change nothing twice, and a late,
//! reordered delivery cannot undo newer state. `merged` and `closed` end
//! the item through that read too (a reopen may have overtaken a close),
//! in the step that also writes the final status note. The webhook of the
//! item's own status note (the note id its `needs_dashboard` detail keeps,
//! on the same change request) asks for nothing: writing it told the forge
//! nothing new. Nor does news of CI that started or still runs (a
//! pipeline or check pending or running): no gate passes on it, and its
//! end asks. The opening of the change request the item recorded is its
//! own creation, whose answer was its first observation; the label the
//! item sets, added (GitHub's `labeled`, after the creation), is its own
//! call, and no gate depends on a label.

use wq_core::{DimensionUpdate, EventResult, ExecError, ItemView, PendingEvent};
use wq_forge::{ChangeAction, CiStatus, ForgeEvent};

use crate::MrType;
use crate::ci_retry::{ReportedJob, on_job};
use crate::commands::{CANCEL_EVENT, MANUAL_MERGE_EVENT, REFRESH_EVENT, RETRIED_EVENT};
use crate::dims::{NEEDS_CANCEL, NEEDS_RECONCILE, NEEDS_REOPEN};
use crate::errors::store_error;
use crate::queue_sync::QUEUE_OBSERVED_EVENT;
use crate::store::{RETRY_MERGE_EVENT, SUBMISSION_EVENT, submission_dimensions};
use crate::webhook::WEBHOOK_EVENT;

fn reconcile() -> EventResult {
    EventResult::ignored().with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, true))
}

pub(crate) async fn handle(
    mr: &MrType,
    view: &ItemView,
    event: &PendingEvent,
) -> Result<EventResult, ExecError> {
    match event.event_type.as_str() {
        SUBMISSION_EVENT => {
            let change = event.body["change"].as_str().unwrap_or_default();
            let mut result = EventResult::ignored();
            result.dimensions = submission_dimensions(change);
            Ok(result)
        }
        RETRY_MERGE_EVENT | MANUAL_MERGE_EVENT | QUEUE_OBSERVED_EVENT | REFRESH_EVENT => {
            Ok(reconcile())
        }
        // Asked once or several times, the same row: one cancel runs.
        CANCEL_EVENT => Ok(EventResult::ignored().with_dimension(
            DimensionUpdate::new(NEEDS_CANCEL, true).detail(serde_json::json!({
                "by": event.body["caller"],
                "reason": event.body["reason"],
            })),
        )),
        // The retry made the item active again; its change request may
        // have been closed (by a person, or by a cancel).
        RETRIED_EVENT => Ok(EventResult::ignored().with_dimension(
            DimensionUpdate::new(NEEDS_REOPEN, true)
                .detail(serde_json::json!({ "by": event.body["caller"] })),
        )),
        WEBHOOK_EVENT => {
            let Ok(forge_event) = serde_json::from_value::<ForgeEvent>(event.body["event"].clone())
            else {
                tracing::warn!(item = %view.item.id, event = event.id, "unreadable stored webhook event ignored");
                return Ok(EventResult::ignored());
            };
            handle_forge_event(mr, view, forge_event).await
        }
        other => {
            tracing::warn!(item = %view.item.id, event_type = other, "unknown event type ignored");
            Ok(EventResult::ignored())
        }
    }
}

async fn handle_forge_event(
    mr: &MrType,
    view: &ItemView,
    event: ForgeEvent,
) -> Result<EventResult, ExecError> {
    match event {
        // The reconcile reads the merge (confirming our attempt in the
        // journal) or the close, and ends the item.
        // The opening of the change request this item recorded: its own
        // creation, which the reconcile after it reads anyway.
        ForgeEvent::Change {
            number,
            action: ChangeAction::Opened,
            ..
        } if mr
            .store
            .get(view.item.id)
            .await
            .map_err(store_error)?
            .is_some_and(|details| details.mr_number == Some(number)) =>
        {
            Ok(EventResult::ignored())
        }
        // A label the item sets (its submitted labels and the managed one)
        // added: workqueue's own label call (GitHub labels a pull request
        // after opening it), which no gate depends on.
        ForgeEvent::Change {
            action: ChangeAction::Labeled,
            label: Some(label),
            ..
        } if mr
            .store
            .get(view.item.id)
            .await
            .map_err(store_error)?
            .is_some_and(|details| {
                // Named as the forge names labels: on GitHub, the `Bug` a
                // submitted `bug` added.
                let case = mr
                    .forges()
                    .get(&details.spec.forge)
                    .map(|forge| forge.label_case())
                    .unwrap_or_default();
                case.contains(&details.spec.labels, &label)
                    || case.same(&label, &mr.config.managed_label)
            }) =>
        {
            Ok(EventResult::ignored())
        }
        ForgeEvent::Change { .. } => Ok(reconcile()),
        // The item's own status note, posted or edited: nothing to read.
        ForgeEvent::Note {
            number, note_id, ..
        } if crate::dashboard::last_written(view, number).is_some_and(|(id, _)| id == note_id) => {
            Ok(EventResult::ignored())
        }
        // CI that started or still runs: no gate can pass on it, and the
        // read after the push saw it start; its end asks again (and the
        // busy timer makes up a lost one).
        ForgeEvent::Pipeline {
            status: CiStatus::Pending | CiStatus::Running,
            ..
        }
        | ForgeEvent::Checks {
            status: CiStatus::Pending | CiStatus::Running,
            ..
        } => Ok(EventResult::ignored()),
        ForgeEvent::Pipeline { .. }
        | ForgeEvent::Note { .. }
        | ForgeEvent::Checks { .. }
        | ForgeEvent::Queue { .. } => Ok(reconcile()),
        ForgeEvent::Job {
            pipeline_id,
            job_id,
            name,
            stage,
            status,
            failure_reason,
            finished_at,
            sha,
            ..
        } => {
            let Some(details) = mr.store.get(view.item.id).await.map_err(store_error)? else {
                return Ok(EventResult::ignored());
            };
            Ok(on_job(
                &details,
                view,
                ReportedJob {
                    pipeline_id,
                    job_id,
                    name,
                    stage,
                    status,
                    failure_reason,
                    finished_at,
                    head_sha: sha,
                },
            ))
        }
        ForgeEvent::Ignored { .. } => Ok(EventResult::ignored()),
    }
}
