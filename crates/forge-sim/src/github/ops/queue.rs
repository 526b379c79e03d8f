//! The merge queue's entries: adding, removing and failing them.

use serde_json::json;

use crate::github::events;
use crate::github::model::{EntryState, GhRepo, QueueEntry, node_id};
use crate::github::{Ctx, Env};

/// Adds a pull request to its base branch's merge queue; returns the entry id.
pub fn enqueue(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    expected_head: Option<&str>,
) -> Result<String, String> {
    let pr = r
        .pulls
        .get(&number)
        .ok_or_else(|| format!("Could not resolve to a PullRequest with the number of {number}."))?
        .clone();
    if let Some(e) = r.queue.iter().find(|e| e.pr == number) {
        return Ok(e.id.clone());
    }
    if pr.merged {
        return Err("Pull request is already merged.".into());
    }
    if !pr.open {
        return Err("Pull request is closed.".into());
    }
    if pr.draft {
        return Err("Pull request is in draft state.".into());
    }
    if !r.queue_enabled_for(&pr.base_ref) {
        return Err(format!(
            "The merge queue is not enabled for the base branch '{}'.",
            pr.base_ref
        ));
    }
    if let Some(expected) = expected_head
        && expected != pr.head_sha
    {
        return Err(format!(
            "The pull request head ({}) does not match the expected head ({expected}).",
            pr.head_sha
        ));
    }
    if pr.mergeable == Some(false) || r.git.has_conflicts(&pr.base_ref, &pr.head_sha) {
        return Err("Pull request has merge conflicts.".into());
    }
    if let Some(reason) = r.merge_blocker(&pr) {
        return Err(reason);
    }
    let seq = env.next_id();
    let id = node_id("MQE", &format!("{}:{number}:{seq}", r.id));
    r.queue.push(QueueEntry {
        id: id.clone(),
        pr: number,
        base_ref: pr.base_ref.clone(),
        head_sha: pr.head_sha.clone(),
        state: EntryState::Queued,
        enqueued_at: ctx.now,
        group: None,
        failure: None,
        scripted_failure: r.queue_failures.remove(&number),
        ticks_in_state: 0,
    });
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "enqueued", json!({}));
    }
    Ok(id)
}

/// Removes a pull request from the queue (destroying its merge group); returns the entry.
pub fn dequeue(
    r: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    reason: &str,
) -> Option<QueueEntry> {
    let idx = r.queue.iter().position(|e| e.pr == number)?;
    destroy_group(r, env, ctx, idx, "dequeued");
    let entry = r.queue.remove(idx);
    if let Some(pr) = r.pulls.get(&number) {
        events::pull_request(env, ctx, r, pr, "dequeued", json!({ "reason": reason }));
    }
    Some(entry)
}

pub(super) fn destroy_group(r: &mut GhRepo, env: &mut Env, ctx: &Ctx, idx: usize, reason: &str) {
    let Some(group) = r.queue.get_mut(idx).and_then(|e| e.group.take()) else {
        return;
    };
    let base_ref = r.queue[idx].base_ref.clone();
    r.git.delete_branch(&group.head_ref);
    events::merge_group(env, ctx, r, &group, &base_ref, "destroyed", Some(reason));
}

pub(super) fn fail_entry(r: &mut GhRepo, idx: usize, message: String) {
    if let Some(e) = r.queue.get_mut(idx) {
        e.state = EntryState::Unmergeable;
        e.failure = Some(message);
        e.ticks_in_state = 0;
    }
}

pub(super) fn set_entry_state(r: &mut GhRepo, idx: usize, state: EntryState) {
    if let Some(e) = r.queue.get_mut(idx) {
        e.state = state;
        e.ticks_in_state = 0;
    }
}
