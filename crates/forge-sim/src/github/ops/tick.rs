//! The ticker step: background mergeability, checks, merge queues and asynchronous merges.

use crate::github::{Ctx, GithubState};

use super::async_merge::progress_async;
use super::checks::progress_checks;
use super::merge_groups::progress_queue;

/// One step of every asynchronous process.
pub fn tick(gh: &mut GithubState, ctx: &Ctx) {
    let keys: Vec<String> = gh.repos.keys().cloned().collect();
    for key in keys {
        let Some(r) = gh.repos.get_mut(&key) else {
            continue;
        };
        let env = &mut gh.env;
        // Mergeability is computed in the background after a push.
        let numbers: Vec<u64> = r
            .pulls
            .values()
            .filter(|p| p.open && p.mergeable.is_none())
            .map(|p| p.number)
            .collect();
        for n in numbers {
            let Some(pr) = r.pulls.get(&n) else { continue };
            let ok = !r.git.has_conflicts(&pr.base_ref, &pr.head_sha);
            if let Some(pr) = r.pulls.get_mut(&n) {
                pr.mergeable = Some(ok);
            }
        }
        progress_checks(r, env, ctx);
        progress_queue(r, env, ctx);
    }
    progress_async(gh, ctx);
}
