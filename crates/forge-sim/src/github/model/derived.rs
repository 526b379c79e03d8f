//! Derived state: pure reads of the model that REST, GraphQL, webhooks and transitions share.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use base64::Engine as _;

use super::{CheckKind, CheckRun, CommitStatus, GhRepo, PullRequest, Review};
use crate::github::sign;
use crate::repo::Tree;

/// The git-like id of a tree.
pub fn tree_sha(tree: &Tree) -> String {
    let mut buf = Vec::new();
    for (path, entry) in tree {
        buf.extend_from_slice(entry.mode().as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(path.as_bytes());
        buf.push(0);
        buf.extend_from_slice(entry.blob_id().as_bytes());
    }
    sign::object_id("tree", &buf)
}

/// The subtree of a flat `tree` under the directory `dir` (no leading or trailing `/`), its
/// paths relative to `dir`: what GitHub stores as the directory's own tree object. Empty when
/// no file lies under `dir`.
pub fn subtree(tree: &Tree, dir: &str) -> Tree {
    let prefix = format!("{dir}/");
    tree.range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
        .map_while(|(path, file)| Some((path.strip_prefix(&prefix)?.to_string(), file.clone())))
        .collect()
}

/// An opaque GraphQL-style node id: `<prefix>_kwDO<base64url(parts)>`.
pub fn node_id(prefix: &str, parts: &str) -> String {
    format!(
        "{prefix}_kwDO{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(parts)
    )
}

/// (status, conclusion) of a check suite made of `runs`.
pub fn suite_status(runs: &[&CheckRun]) -> (&'static str, Option<&'static str>) {
    if runs.iter().any(|r| r.status != "completed") {
        let status = if runs.iter().any(|r| r.status == "in_progress") {
            "in_progress"
        } else {
            "queued"
        };
        return (status, None);
    }
    if runs.iter().any(|r| r.conclusion == Some("failure")) {
        ("completed", Some("failure"))
    } else {
        ("completed", Some("success"))
    }
}

/// The result of one named check (check run or status context) on a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckResult {
    Missing,
    Pending,
    Success,
    Failure,
}

impl GhRepo {
    /// Finds a tree by its id (or a commit id, leniently) among stored trees and reachable commits.
    pub fn find_tree(&self, sha: &str) -> Option<Arc<Tree>> {
        if let Some(t) = self.trees.get(sha) {
            return Some(t.clone());
        }
        if let Some(c) = self.git.commit(sha) {
            return Some(c.tree.clone());
        }
        let mut queue: VecDeque<String> = self.git.branches().map(|(_, s)| s.clone()).collect();
        let mut seen = BTreeSet::new();
        while let Some(c) = queue.pop_front() {
            if !seen.insert(c.clone()) {
                continue;
            }
            let Some(commit) = self.git.commit(&c) else {
                continue;
            };
            if tree_sha(&commit.tree) == sha {
                return Some(commit.tree.clone());
            }
            queue.extend(commit.parents.iter().cloned());
        }
        None
    }

    /// (commits, additions, deletions, changed files) of a pull request against its base.
    pub fn pr_stats(&self, pr: &PullRequest) -> (usize, usize, usize, usize) {
        let Some(base) = self.git.branch_head(&pr.base_ref) else {
            return (0, 0, 0, 0);
        };
        let commits = self.git.commits_between(base, &pr.head_sha).len();
        let mb = self.git.merge_base(base, &pr.head_sha).unwrap_or_default();
        let diffs = self.git.diff(&mb, &pr.head_sha);
        let (mut add, mut del) = (0, 0);
        for d in &diffs {
            for l in d.diff.lines() {
                if l.starts_with('+') && !l.starts_with("+++") {
                    add += 1;
                } else if l.starts_with('-') && !l.starts_with("---") {
                    del += 1;
                }
            }
        }
        (commits, add, del, diffs.len())
    }

    /// (approvals, changes requested) counting each reviewer's latest decisive review.
    ///
    /// With `dismiss_stale_reviews`, approvals of an older head do not count.
    pub fn review_counts(&self, pr: &PullRequest) -> (usize, bool) {
        let mut latest: BTreeMap<&str, &Review> = Default::default();
        for rv in &pr.reviews {
            if matches!(
                rv.state.as_str(),
                "APPROVED" | "CHANGES_REQUESTED" | "DISMISSED"
            ) {
                latest.insert(rv.user.as_str(), rv);
            }
        }
        let approvals = latest
            .values()
            .filter(|rv| rv.state == "APPROVED")
            .filter(|rv| !self.settings.dismiss_stale_reviews || rv.commit_id == pr.head_sha)
            .count();
        let changes = latest.values().any(|rv| rv.state == "CHANGES_REQUESTED");
        (approvals, changes)
    }

    /// GraphQL `reviewDecision`, as GitHub derives it from branch protection: `None` (null) when
    /// the base branch requires no approving review; otherwise CHANGES_REQUESTED when a
    /// reviewer's latest decisive review requests changes, APPROVED with the required number of
    /// approvals, REVIEW_REQUIRED before that. The requirement is `required_approvals`, the one
    /// [`GhRepo::merge_blocker`] enforces.
    pub fn review_decision(&self, pr: &PullRequest) -> Option<&'static str> {
        let required = self.settings.required_approvals as usize;
        if required == 0 {
            return None;
        }
        let (approvals, changes) = self.review_counts(pr);
        Some(if changes {
            "CHANGES_REQUESTED"
        } else if approvals >= required {
            "APPROVED"
        } else {
            "REVIEW_REQUIRED"
        })
    }

    /// The latest check run per name on a commit.
    pub fn latest_runs<'a>(&'a self, sha: &str) -> Vec<&'a CheckRun> {
        let mut out: Vec<&CheckRun> = Vec::new();
        for run in self
            .check_runs
            .iter()
            .filter(|c| c.head_sha == sha && c.kind == CheckKind::CheckRun)
        {
            if let Some(pos) = out.iter().position(|o| o.name == run.name) {
                out[pos] = run;
            } else {
                out.push(run);
            }
        }
        out
    }

    /// The latest status per context on a commit.
    pub fn latest_statuses<'a>(&'a self, sha: &str) -> Vec<&'a CommitStatus> {
        let mut out: Vec<&CommitStatus> = Vec::new();
        for s in self.statuses.iter().filter(|s| s.sha == sha) {
            if let Some(pos) = out.iter().position(|o| o.context == s.context) {
                out[pos] = s;
            } else {
                out.push(s);
            }
        }
        out
    }

    /// The combined commit status state (`success` / `pending` / `failure`).
    pub fn combined_state(&self, sha: &str) -> &'static str {
        let statuses = self.latest_statuses(sha);
        if statuses
            .iter()
            .any(|s| s.state == "failure" || s.state == "error")
        {
            "failure"
        } else if statuses.is_empty() || statuses.iter().any(|s| s.state == "pending") {
            "pending"
        } else {
            "success"
        }
    }

    /// The latest result of the check or status called `name` on `sha`.
    pub fn check_result(&self, sha: &str, name: &str) -> CheckResult {
        if let Some(run) = self.latest_runs(sha).into_iter().find(|c| c.name == name) {
            return match (run.status, run.conclusion) {
                ("completed", Some("success" | "neutral" | "skipped")) => CheckResult::Success,
                ("completed", _) => CheckResult::Failure,
                _ => CheckResult::Pending,
            };
        }
        if let Some(s) = self
            .latest_statuses(sha)
            .into_iter()
            .find(|s| s.context == name)
        {
            return match s.state.as_str() {
                "success" => CheckResult::Success,
                "pending" => CheckResult::Pending,
                _ => CheckResult::Failure,
            };
        }
        CheckResult::Missing
    }

    /// The rollup of every check and status on a commit: SUCCESS / FAILURE / PENDING, or `None`.
    pub fn rollup(&self, sha: &str) -> Option<&'static str> {
        let mut names: Vec<String> = self
            .latest_runs(sha)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        names.extend(self.latest_statuses(sha).iter().map(|s| s.context.clone()));
        if names.is_empty() {
            return None;
        }
        let results: Vec<CheckResult> = names.iter().map(|n| self.check_result(sha, n)).collect();
        Some(if results.contains(&CheckResult::Failure) {
            "FAILURE"
        } else if results.contains(&CheckResult::Pending) {
            "PENDING"
        } else {
            "SUCCESS"
        })
    }

    /// Why branch protection blocks merging (or queueing) the pull request, if it does.
    pub fn merge_blocker(&self, pr: &PullRequest) -> Option<String> {
        let required = self.settings.required_approvals as usize;
        if required > 0 {
            let (approvals, changes) = self.review_counts(pr);
            if changes {
                return Some("Changes have been requested on this pull request.".into());
            }
            if approvals < required {
                let plural = if required == 1 {
                    "review is"
                } else {
                    "reviews are"
                };
                return Some(format!(
                    "At least {required} approving {plural} required by reviewers with write access."
                ));
            }
        }
        for name in &self.settings.required_checks {
            match self.check_result(&pr.head_sha, name) {
                CheckResult::Success => {}
                CheckResult::Failure => {
                    return Some(format!("Required status check \"{name}\" is failing."));
                }
                CheckResult::Missing | CheckResult::Pending => {
                    return Some(format!("Required status check \"{name}\" is expected."));
                }
            }
        }
        if self.settings.require_conversation_resolution && pr.unresolved_threads() > 0 {
            return Some("All comments must be resolved.".into());
        }
        None
    }

    /// REST `mergeable_state`.
    pub fn mergeable_state(&self, pr: &PullRequest) -> &'static str {
        if !pr.open {
            return "unknown";
        }
        if pr.draft {
            return "draft";
        }
        match pr.mergeable {
            None => return "unknown",
            Some(false) => return "dirty",
            Some(true) => {}
        }
        if self.merge_blocker(pr).is_some() {
            return "blocked";
        }
        match self.rollup(&pr.head_sha) {
            Some("FAILURE") | Some("PENDING") => "unstable",
            _ => "clean",
        }
    }

    /// GraphQL `mergeStateStatus`.
    pub fn merge_state_status(&self, pr: &PullRequest) -> &'static str {
        match self.mergeable_state(pr) {
            "clean" => "CLEAN",
            "dirty" => "DIRTY",
            "blocked" => "BLOCKED",
            "unstable" => "UNSTABLE",
            "draft" => "DRAFT",
            "behind" => "BEHIND",
            _ => "UNKNOWN",
        }
    }
}

impl PullRequest {
    /// Unresolved review threads.
    pub fn unresolved_threads(&self) -> usize {
        self.threads.iter().filter(|t| !t.is_resolved).count()
    }

    /// GraphQL `mergeable`: MERGEABLE / CONFLICTING / UNKNOWN.
    pub fn graphql_mergeable(&self) -> &'static str {
        match (self.open, self.mergeable) {
            (false, _) | (true, None) => "UNKNOWN",
            (true, Some(true)) => "MERGEABLE",
            (true, Some(false)) => "CONFLICTING",
        }
    }
}
