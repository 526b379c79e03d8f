//! The ticker step: background mergeability, checks, merge queues and asynchronous merges.

use crate::github::{Ctx, GithubState};

use super::async_merge::progress_async;
use super::checks::progress_checks;
use super::merge_groups::progress_queue;

/// One step of every asynchronous process; whether anything moved (a counter of ticks
/// included: merge-queue entries and asynchronous merges wait a number of ticks).
pub fn tick(github: &mut GithubState, ctx: &Ctx) -> bool {
    let mut moved = false;
    let keys: Vec<String> = github.repos.keys().cloned().collect();
    for key in keys {
        let Some(repo) = github.repos.get_mut(&key) else {
            continue;
        };
        let env = &mut github.env;
        // Mergeability is computed in the background after a push.
        let numbers: Vec<u64> = repo
            .pulls
            .values()
            .filter(|pull| pull.open && pull.mergeable.is_none())
            .map(|pull| pull.number)
            .collect();
        for number in numbers {
            let Some(pr) = repo.pulls.get(&number) else {
                continue;
            };
            let mergeable = !repo.git.has_conflicts(&pr.base_ref, &pr.head_sha);
            if let Some(pr) = repo.pulls.get_mut(&number) {
                pr.mergeable = Some(mergeable);
                moved = true;
            }
        }
        moved |= progress_checks(repo, env, ctx);
        moved |= progress_queue(repo, env, ctx);
    }
    moved |= progress_async(github, ctx);
    moved
}
