//! GitLab state transitions shared by the REST handlers, the control API and the ticker.
//!
//! Each module depends only on those listed before it: `pipelines` (pipelines and jobs) →
//! `merge` (a merge request's own state, notes, hooks) → `trains` (the cars) → `push` (merging
//! now, a branch moving) → `auto_merge` (merging when the pipeline succeeds, train progress).

pub mod auto_merge;
pub mod merge;
pub mod pipelines;
pub mod push;
pub mod trains;

use crate::gitlab::Ctx;

pub use auto_merge::{add_car, cancel_auto_merge, progress_auto_merge, progress_trains};
pub use merge::{add_system_note, approve_mr, emit_mr_hook, finish_merge, unapprove_mr};
pub use push::{do_merge, on_branch_updated};

/// Progresses one project: jobs, pipelines, auto-merge, trains (until nothing changes); whether
/// anything changed.
pub fn progress(ctx: &mut Ctx<'_>, project_id: u64) -> bool {
    let mut moved = false;
    for _ in 0..8 {
        let mut changed = pipelines::progress_pipelines(ctx, project_id);
        changed |= progress_auto_merge(ctx, project_id);
        changed |= progress_trains(ctx, project_id);
        if !changed {
            break;
        }
        moved = true;
    }
    moved
}
