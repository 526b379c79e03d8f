//! The simulated GitHub data model: repositories, pull requests, checks, reviews, queue entries.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ci::{JobOutcome, JobSpec};
use crate::repo::{Repo, Tree};

pub mod actions;
mod derived;

pub use derived::{CheckResult, node_id, subtree, suite_status, tree_sha};

/// A webhook subscription of one repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    pub url: String,
    pub secret: String,
}

/// Per-repository settings and branch protection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RepoSettings {
    /// Whether the default branch requires the merge queue.
    pub merge_queue: bool,
    /// Dismiss approvals when new commits are pushed.
    pub dismiss_stale_reviews: bool,
    /// Approvals required before merging (0 = reviews not required).
    pub required_approvals: u32,
    /// Check / status names that must succeed before merging.
    pub required_checks: Vec<String>,
    /// Unresolved conversations block merging.
    pub require_conversation_resolution: bool,
    /// Seconds per queue position reported as `estimatedTimeToMerge` (`None` = null).
    pub queue_eta_seconds_per_entry: Option<u64>,
    /// Merge method the queue uses for its merge groups.
    pub queue_merge_method: String,
    pub webhook: Option<Webhook>,
    /// Branch names or fnmatch patterns under classic branch protection (the default branch is
    /// always protected). A branch object says `"protected": true` when one matches.
    pub protected_branches: Vec<String>,
    /// Repository rulesets (`GET rules/branches/{branch}` answers their rules).
    pub rulesets: Vec<Ruleset>,
    /// Users with no access to the repository (a public repository's passers-by): their
    /// `authorAssociation` is `NONE`. Everyone else but the owner is a `COLLABORATOR`.
    pub outside_users: Vec<String>,
    /// The most entries a recursive `GET git/trees/{sha}?recursive=1` lists before it answers
    /// only the first ones with `"truncated": true` (`None` = GitHub's limit,
    /// [`TREE_LISTING_LIMIT`]).
    pub tree_listing_limit: Option<usize>,
}

/// The most entries GitHub lists in a recursive tree (it also stops at 7 MB of response, which
/// the simulator does not count): beyond it the listing says `"truncated": true`.
pub const TREE_LISTING_LIMIT: usize = 100_000;

/// A branch ruleset: the rules (by type) applied to branches its `ref_name` conditions select.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ruleset {
    pub id: u64,
    pub name: String,
    /// `active`, `evaluate` or `disabled` (only `active` rules apply).
    pub enforcement: String,
    /// `ref_name.include`: `refs/heads/<fnmatch>`, `~DEFAULT_BRANCH` or `~ALL`.
    pub include: Vec<String>,
    /// `ref_name.exclude`, same syntax.
    pub exclude: Vec<String>,
    /// Rule types: `update`, `deletion`, `non_fast_forward`, `pull_request`, ...
    pub rules: Vec<String>,
}

impl Default for RepoSettings {
    fn default() -> Self {
        Self {
            merge_queue: false,
            dismiss_stale_reviews: false,
            required_approvals: 0,
            required_checks: Vec::new(),
            require_conversation_resolution: false,
            queue_eta_seconds_per_entry: Some(300),
            queue_merge_method: "merge".into(),
            webhook: None,
            protected_branches: Vec::new(),
            rulesets: Vec::new(),
            outside_users: Vec::new(),
            tree_listing_limit: None,
        }
    }
}

/// Whether a scripted check is reported as a check run or a commit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    #[default]
    CheckRun,
    Status,
}

/// One scripted check, started for every new head pushed to a pull request or merge group.
///
/// JSON: the shared CI job vocabulary (`{"name", "outcome": "success" | "fail" | "flaky",
/// "fail_times", "duration_secs", "trace"}`) plus `"kind": "check_run" | "status"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckScript {
    pub job: JobSpec,
    pub kind: CheckKind,
}

impl CheckScript {
    /// A check run with the given outcome.
    pub fn new(name: &str, outcome: JobOutcome) -> CheckScript {
        CheckScript {
            job: JobSpec::new(name, outcome),
            kind: CheckKind::CheckRun,
        }
    }

    /// Reports the check as a commit status instead of a check run.
    pub fn as_status(mut self) -> CheckScript {
        self.kind = CheckKind::Status;
        self
    }

    /// Sim seconds the check runs before completing.
    pub fn duration_secs(mut self, secs: u64) -> CheckScript {
        self.job.duration_secs = secs;
        self
    }

    /// Parses the control-API JSON form.
    pub fn from_json(v: &serde_json::Value) -> Result<CheckScript, String> {
        let kind = match v.get("kind") {
            None | Some(serde_json::Value::Null) => CheckKind::CheckRun,
            Some(k) => serde_json::from_value(k.clone()).map_err(|e| format!("kind: {e}"))?,
        };
        let mut job = v.clone();
        if let Some(obj) = job.as_object_mut() {
            obj.remove("kind");
        }
        let job: JobSpec = serde_json::from_value(job).map_err(|e| e.to_string())?;
        Ok(CheckScript { job, kind })
    }

    /// The control-API JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.job).unwrap_or_default();
        v["kind"] = serde_json::to_value(self.kind).unwrap_or_default();
        v
    }
}

/// A check run (or the backing record of a scripted commit status).
#[derive(Debug, Clone)]
pub struct CheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    pub kind: CheckKind,
    /// queued | in_progress | completed
    pub status: &'static str,
    /// success | failure (once completed)
    pub conclusion: Option<&'static str>,
    pub planned: &'static str,
    /// The trace / summary text of the planned outcome.
    pub summary: String,
    pub check_suite_id: u64,
    pub started_at: OffsetDateTime,
    pub completed_at: Option<OffsetDateTime>,
    pub script: CheckScript,
}

/// A commit status (`POST /statuses/{sha}` or a scripted check of kind `status`).
#[derive(Debug, Clone)]
pub struct CommitStatus {
    pub id: u64,
    pub sha: String,
    pub context: String,
    /// error | failure | pending | success
    pub state: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A check suite: one per (commit, app).
#[derive(Debug, Clone)]
pub struct CheckSuite {
    pub id: u64,
    pub head_sha: String,
    pub head_branch: Option<String>,
    pub completed_notified: bool,
}

/// A pull-request review.
#[derive(Debug, Clone)]
pub struct Review {
    pub id: u64,
    pub node_id: String,
    pub user: String,
    pub body: String,
    /// APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED
    pub state: String,
    pub commit_id: String,
    pub submitted_at: OffsetDateTime,
}

/// A review thread (conversation) on a pull request.
#[derive(Debug, Clone)]
pub struct ReviewThread {
    pub id: String,
    pub path: String,
    pub line: u32,
    pub is_resolved: bool,
}

/// An issue comment on a pull request.
#[derive(Debug, Clone)]
pub struct IssueComment {
    pub id: u64,
    pub node_id: String,
    pub issue_number: u64,
    pub user: String,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A pull request.
#[derive(Debug, Clone)]
pub struct PullRequest {
    pub id: u64,
    pub node_id: String,
    pub number: u64,
    pub title: String,
    pub body: Option<String>,
    pub user: String,
    pub open: bool,
    pub merged: bool,
    pub draft: bool,
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
    pub labels: Vec<String>,
    /// `None` while GitHub is computing mergeability after a push.
    pub mergeable: Option<bool>,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub closed_at: Option<OffsetDateTime>,
    pub merged_at: Option<OffsetDateTime>,
    pub reviews: Vec<Review>,
    pub threads: Vec<ReviewThread>,
}

/// GitHub's `MergeQueueEntryState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    Queued,
    AwaitingChecks,
    Mergeable,
    Unmergeable,
    Locked,
}

impl EntryState {
    /// The GraphQL enum value.
    pub fn as_graphql(self) -> &'static str {
        match self {
            EntryState::Queued => "QUEUED",
            EntryState::AwaitingChecks => "AWAITING_CHECKS",
            EntryState::Mergeable => "MERGEABLE",
            EntryState::Unmergeable => "UNMERGEABLE",
            EntryState::Locked => "LOCKED",
        }
    }
}

/// The temporary branch and commit a queue entry is tested on.
#[derive(Debug, Clone)]
pub struct MergeGroup {
    pub head_ref: String,
    pub head_sha: String,
    pub base_sha: String,
}

/// An entry in a repository's merge queue.
#[derive(Debug, Clone)]
pub struct QueueEntry {
    pub id: String,
    pub pr: u64,
    pub base_ref: String,
    pub head_sha: String,
    pub state: EntryState,
    pub enqueued_at: OffsetDateTime,
    pub group: Option<MergeGroup>,
    /// Why the entry failed, once `UNMERGEABLE`.
    pub failure: Option<String>,
    /// A scripted failure applied when the entry's checks would start.
    pub scripted_failure: Option<String>,
    /// Ticks the entry has spent in its current state.
    pub ticks_in_state: u32,
}

/// Scripted behaviour of `PUT .../merge-async` for one repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct MergeAsyncScript {
    /// How many ticks a request stays `pending` before it runs (0 = answer at once).
    pub pending_ticks: u32,
    /// When set, the next request fails with this message instead of running.
    pub fail_next: Option<String>,
    /// Sim-time seconds a result is kept after its last update.
    pub ttl_seconds: u64,
}

impl Default for MergeAsyncScript {
    fn default() -> Self {
        Self {
            pending_ticks: 1,
            fail_next: None,
            ttl_seconds: 24 * 3600,
        }
    }
}

/// The resolved action of an asynchronous merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeAction {
    Default,
    DirectMerge,
    MergeQueue,
}

impl MergeAction {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeAction::Default => "default",
            MergeAction::DirectMerge => "direct_merge",
            MergeAction::MergeQueue => "merge_queue",
        }
    }
}

/// Status of an asynchronous merge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsyncStatus {
    Pending,
    Merged { sha: String },
    Enqueued,
    Failed { message: String },
}

/// One `merge-async` request.
#[derive(Debug, Clone)]
pub struct AsyncMerge {
    pub uuid: String,
    pub repo: String,
    pub pr: u64,
    pub merge_method: String,
    pub merge_action: MergeAction,
    pub expected_head_sha: String,
    pub requested_by: String,
    pub commit_title: Option<String>,
    pub commit_message: Option<String>,
    pub status: AsyncStatus,
    pub remaining_ticks: u32,
    pub scripted_failure: Option<String>,
    pub updated_at: OffsetDateTime,
    pub ttl_seconds: u64,
}

/// A repository label's colour and description (its name is its key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoLabel {
    /// Six hex digits, without `#`.
    pub color: String,
    pub description: Option<String>,
}

impl Default for RepoLabel {
    /// The colour GitHub gives a label made by adding it to an issue.
    fn default() -> Self {
        Self {
            color: "ededed".to_owned(),
            description: None,
        }
    }
}

/// A simulated GitHub repository.
pub struct GhRepo {
    pub id: u64,
    pub node_id: String,
    pub owner: String,
    pub name: String,
    pub git: Repo,
    pub blobs: HashMap<String, Vec<u8>>,
    pub trees: HashMap<String, Arc<Tree>>,
    pub settings: RepoSettings,
    pub pulls: BTreeMap<u64, PullRequest>,
    /// The repository's labels by name: those created (`POST
    /// repos/:o/:r/labels`) and each one a pull request was given by a name
    /// the repository had no label of (GitHub's REST API makes it). No two
    /// differ only in case: see [`GhRepo::label_named`].
    pub labels: BTreeMap<String, RepoLabel>,
    pub next_number: u64,
    pub comments: Vec<IssueComment>,
    pub check_script: Vec<CheckScript>,
    pub check_runs: Vec<CheckRun>,
    pub check_suites: Vec<CheckSuite>,
    pub statuses: Vec<CommitStatus>,
    pub queue: Vec<QueueEntry>,
    /// Pauses the queue: entries report `LOCKED` and do not advance.
    pub queue_locked: bool,
    /// Scripted failures applied to a pull request's next queue entry.
    pub queue_failures: BTreeMap<u64, String>,
    pub merge_async: MergeAsyncScript,
    /// GitHub Actions: the scripted workflow, its runs and jobs.
    pub actions: actions::Actions,
    pub created_at: OffsetDateTime,
}

impl GhRepo {
    /// The name of the repository's label that `name` names. GitHub
    /// compares label names without regard to case: adding `bug` to an
    /// issue where the repository has `Bug` adds `Bug`, and no second
    /// label differing only in case can be made.
    pub fn label_named(&self, name: &str) -> Option<&str> {
        let folded = name.to_lowercase();
        self.labels
            .keys()
            .find(|label| label.to_lowercase() == folded)
            .map(String::as_str)
    }

    /// GraphQL / REST `authorAssociation` of `login` with this repository.
    pub fn author_association(&self, login: &str) -> &'static str {
        if login == self.owner {
            "OWNER"
        } else if self.settings.outside_users.iter().any(|u| u == login) {
            "NONE"
        } else {
            "COLLABORATOR"
        }
    }

    /// `owner/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The 1-based position of a pull request in its base branch's queue.
    pub fn queue_position(&self, pr: u64) -> Option<(usize, &QueueEntry)> {
        let entry = self.queue.iter().find(|e| e.pr == pr)?;
        let pos = self
            .queue
            .iter()
            .filter(|e| e.base_ref == entry.base_ref)
            .position(|e| e.pr == pr)?;
        Some((pos + 1, entry))
    }

    /// Whether the named branch requires the merge queue.
    pub fn queue_enabled_for(&self, branch: &str) -> bool {
        self.settings.merge_queue && branch == self.git.default_branch()
    }
}
