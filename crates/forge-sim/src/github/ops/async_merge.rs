//! Asynchronous merges (the `merge_async` API) and their retention.

use crate::github::model::{AsyncMerge, AsyncStatus, MergeAction};
use crate::github::{Ctx, GithubState};

use super::pulls::merge_pr;
use super::queue::enqueue;
use super::repos::parse_merge_method;

/// Runs an asynchronous merge request now and returns its terminal status.
pub fn run_async(gh: &mut GithubState, ctx: &Ctx, rec: &AsyncMerge) -> AsyncStatus {
    let failed = |m: &str| AsyncStatus::Failed {
        message: m.to_string(),
    };
    if let Some(msg) = &rec.scripted_failure {
        return failed(msg);
    }
    let Some(r) = gh.repos.get_mut(&rec.repo) else {
        return failed("Repository not found.");
    };
    let env = &mut gh.env;
    let Some(pr) = r.pulls.get(&rec.pr).cloned() else {
        return failed("Pull request not found.");
    };
    if pr.merged {
        return AsyncStatus::Merged {
            sha: pr.merge_commit_sha.unwrap_or_default(),
        };
    }
    if !pr.open {
        return failed("Pull request is closed.");
    }
    if pr.draft {
        return failed("Pull request is in draft state.");
    }
    if pr.head_sha != rec.expected_head_sha {
        return failed("Head branch was modified. Review and try the merge again.");
    }
    let queue = r.queue_enabled_for(&pr.base_ref);
    let action = match rec.merge_action {
        MergeAction::Default if queue => MergeAction::MergeQueue,
        MergeAction::Default => MergeAction::DirectMerge,
        other => other,
    };
    let actx = Ctx {
        sender: rec.requested_by.clone(),
        ..ctx.clone()
    };
    match action {
        MergeAction::MergeQueue => {
            if !queue {
                return failed("Merge queue is not enabled for the base branch.");
            }
            match enqueue(r, env, &actx, pr.number, Some(&rec.expected_head_sha)) {
                Ok(_) => AsyncStatus::Enqueued,
                Err(m) => failed(&m),
            }
        }
        _ => {
            let method = parse_merge_method(&rec.merge_method).unwrap_or_default();
            match merge_pr(
                r,
                env,
                &actx,
                pr.number,
                method,
                Some(&rec.expected_head_sha),
                rec.commit_title.as_deref(),
                rec.commit_message.as_deref(),
            ) {
                Ok(sha) => AsyncStatus::Merged { sha },
                Err(e) => failed(
                    e.body["message"]
                        .as_str()
                        .unwrap_or("Pull Request is not mergeable"),
                ),
            }
        }
    }
}

/// One tick of every pending asynchronous merge; whether anything moved (a pending merge always
/// does: it counts down its ticks).
pub(super) fn progress_async(gh: &mut GithubState, ctx: &Ctx) -> bool {
    let before = gh.async_merges.len();
    let pending = gh
        .async_merges
        .values()
        .any(|merge| merge.status == AsyncStatus::Pending);
    let due: Vec<String> = gh
        .async_merges
        .iter_mut()
        .filter(|(_, m)| m.status == AsyncStatus::Pending)
        .filter_map(|(uuid, m)| {
            m.remaining_ticks = m.remaining_ticks.saturating_sub(1);
            (m.remaining_ticks == 0).then(|| uuid.clone())
        })
        .collect();
    for uuid in due {
        let Some(rec) = gh.async_merges.get(&uuid).cloned() else {
            continue;
        };
        let status = run_async(gh, ctx, &rec);
        if let Some(m) = gh.async_merges.get_mut(&uuid) {
            m.status = status;
            m.updated_at = ctx.now;
        }
    }
    gh.async_merges.retain(|_, m| !is_expired(m, ctx));
    pending || gh.async_merges.len() != before
}

/// Whether an asynchronous merge result has passed its retention window.
pub fn is_expired(m: &AsyncMerge, ctx: &Ctx) -> bool {
    (ctx.now - m.updated_at).whole_seconds() > m.ttl_seconds as i64
}
