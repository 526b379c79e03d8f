//! The merge queue's progress: building merge groups, waiting for their checks, merging them.

use std::collections::BTreeSet;

use crate::github::events;
use crate::github::model::{CheckResult, EntryState, GhRepo, MergeGroup};
use crate::github::{Ctx, Env};

use super::checks::start_checks;
use super::pulls::{mark_merged, merge_message, set_branch};
use super::queue::{dequeue, destroy_group, fail_entry, set_entry_state};
use super::repos::parse_merge_method;

/// Whether a merge group's checks passed, failed (naming a check), or are still running.
enum GroupChecks {
    Pending,
    Passed,
    Failed(String),
}

fn group_checks(r: &GhRepo, sha: &str) -> GroupChecks {
    let mut names: Vec<String> = r.latest_runs(sha).iter().map(|c| c.name.clone()).collect();
    names.extend(r.latest_statuses(sha).iter().map(|s| s.context.clone()));
    for req in &r.settings.required_checks {
        if !names.contains(req) {
            names.push(req.clone());
        }
    }
    let mut pending = false;
    for name in names {
        match r.check_result(sha, &name) {
            CheckResult::Failure => return GroupChecks::Failed(name),
            CheckResult::Pending | CheckResult::Missing => pending = true,
            CheckResult::Success => {}
        }
    }
    if pending {
        GroupChecks::Pending
    } else {
        GroupChecks::Passed
    }
}

/// One tick of every merge queue of the repository; whether anything moved (an unlocked queue
/// always does: its entries count the ticks they spend in a state).
pub(super) fn progress_queue(r: &mut GhRepo, env: &mut Env, ctx: &Ctx) -> bool {
    if r.queue.is_empty() {
        return false;
    }
    if r.queue_locked {
        let mut moved = false;
        for idx in 0..r.queue.len() {
            if r.queue[idx].state != EntryState::Locked {
                destroy_group(r, env, ctx, idx, "invalidated");
                set_entry_state(r, idx, EntryState::Locked);
                moved = true;
            }
        }
        return moved;
    }
    for e in r.queue.iter_mut() {
        if e.state == EntryState::Locked {
            e.state = EntryState::Queued;
            e.ticks_in_state = 0;
        }
        e.ticks_in_state += 1;
    }
    // Entries that failed on an earlier tick leave the queue now.
    while let Some(idx) = r
        .queue
        .iter()
        .position(|e| e.state == EntryState::Unmergeable && e.ticks_in_state > 1)
    {
        let number = r.queue[idx].pr;
        let reason = match r.queue[idx].failure.as_deref() {
            Some(m) if m.contains("conflict") => "MERGE_CONFLICT",
            _ => "CI_FAILURE",
        };
        dequeue(r, env, ctx, number, reason);
    }
    let bases: BTreeSet<String> = r.queue.iter().map(|e| e.base_ref.clone()).collect();
    for base in bases {
        step_head(r, env, ctx, &base);
    }
    true
}

fn step_head(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, base: &str) {
    let Some(idx) = r.queue.iter().position(|e| e.base_ref == base) else {
        return;
    };
    let entry = r.queue[idx].clone();
    let base_head = r.git.branch_head(base).unwrap_or_default().to_string();
    match entry.state {
        EntryState::Queued => build_group(r, env, ctx, idx),
        EntryState::AwaitingChecks | EntryState::Mergeable => {
            let Some(group) = entry.group.clone() else {
                set_entry_state(r, idx, EntryState::Queued);
                return;
            };
            if group.base_sha != base_head {
                // The base moved under the group: rebuild it on the new base.
                destroy_group(r, env, ctx, idx, "invalidated");
                set_entry_state(r, idx, EntryState::Queued);
                return;
            }
            if let Some(msg) = entry.scripted_failure.clone() {
                destroy_group(r, env, ctx, idx, "dequeued");
                fail_entry(r, idx, msg);
                return;
            }
            if entry.state == EntryState::AwaitingChecks {
                match group_checks(r, &group.head_sha) {
                    GroupChecks::Pending => {}
                    GroupChecks::Passed => set_entry_state(r, idx, EntryState::Mergeable),
                    GroupChecks::Failed(name) => {
                        destroy_group(r, env, ctx, idx, "dequeued");
                        fail_entry(r, idx, format!("Required check \"{name}\" failed."));
                    }
                }
            } else {
                complete_merge(r, env, ctx, idx, group);
            }
        }
        EntryState::Unmergeable | EntryState::Locked => {}
    }
}

fn build_group(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize) {
    let entry = r.queue[idx].clone();
    let Some(pr) = r.pulls.get(&entry.pr).cloned() else {
        r.queue.remove(idx);
        return;
    };
    let Some(base_sha) = r.git.branch_head(&entry.base_ref).map(str::to_string) else {
        fail_entry(r, idx, "The base branch no longer exists.".into());
        return;
    };
    let group_ref = format!(
        "gh-readonly-queue/{}/pr-{}-{}",
        entry.base_ref, pr.number, pr.head_sha
    );
    let method = parse_merge_method(&r.settings.queue_merge_method).unwrap_or_default();
    let msg = merge_message(r, &pr, method, None, None);
    r.git.set_branch(&group_ref, &base_sha);
    match r
        .git
        .merge_into(&group_ref, &pr.head_sha, method, &msg, ctx.now)
    {
        Err(conflict) => {
            r.git.delete_branch(&group_ref);
            fail_entry(r, idx, format!("Merge conflict: {conflict}"));
        }
        Ok(sha) => {
            let group = MergeGroup {
                head_ref: group_ref.clone(),
                head_sha: sha.clone(),
                base_sha,
            };
            if let Some(e) = r.queue.get_mut(idx) {
                e.group = Some(group.clone());
            }
            set_entry_state(r, idx, EntryState::AwaitingChecks);
            start_checks(r, env, ctx, &sha, Some(&group_ref));
            events::merge_group(
                env,
                ctx,
                r,
                &group,
                &entry.base_ref,
                "checks_requested",
                None,
            );
        }
    }
}

fn complete_merge(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize, group: MergeGroup) {
    let entry = r.queue.remove(idx);
    r.git.delete_branch(&group.head_ref);
    events::merge_group(
        env,
        ctx,
        r,
        &group,
        &entry.base_ref,
        "destroyed",
        Some("merged"),
    );
    mark_merged(r, env, ctx, entry.pr, &group.head_sha, &ctx.sender.clone());
    set_branch(r, env, ctx, &entry.base_ref, Some(&group.head_sha));
}
