//! Forge-neutral data: what is committed, what a change request looks like.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// What a file action does (GitLab's commit action vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Create,
    Update,
    Delete,
    Move,
    Chmod,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Move => "move",
            Self::Chmod => "chmod",
        }
    }
}

/// One validated file action. `content` is the decoded bytes (a client
/// sends UTF-8 as text and anything else base64-encoded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAction {
    pub op: FileOp,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_base64")]
    pub content: Option<Vec<u8>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_filemode: Option<bool>,
}

mod opt_base64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(bytes) => s.serialize_some(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| STANDARD.decode(t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Whether a commit creates its branch or overwrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// The branch must not exist; it is created from `base_branch`.
    CreateBranch,
    /// The branch is reset to `base_branch` plus this commit (force push).
    ForceUpdate,
}

/// One commit of file actions.
#[derive(Debug, Clone, Copy)]
pub struct CommitRequest<'a> {
    pub project: &'a str,
    pub branch: &'a str,
    pub base_branch: &'a str,
    pub mode: CommitMode,
    pub message: &'a str,
    pub actions: &'a [FileAction],
}

/// A commit `commit_files` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedCommit {
    /// The branch's new head.
    pub sha: String,
    /// Whether the commit changes nothing against its parent, the base
    /// branch's head it was built on, when the forge's answer to the push
    /// tells (GitHub: the new tree is the base's tree; GitLab: its `stats`
    /// count changed lines, so only a nonzero count tells, `Some(false)`).
    /// `None`: ask [`Forge::diff_is_empty`](crate::Forge::diff_is_empty).
    pub empty: Option<bool>,
}

/// What a push to a branch needs to know first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBranch {
    /// The branch's head, `None` when it does not exist.
    pub head: Option<String>,
    /// The forge protects the branch (whether or not it exists).
    pub protected: bool,
}

/// A new change request.
#[derive(Debug, Clone, Copy)]
pub struct NewChange<'a> {
    pub project: &'a str,
    pub source_branch: &'a str,
    pub target_branch: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    pub labels: &'a [String],
}

/// Labels to add to a change request and labels to take off it. Every
/// other label stays as it is on the forge when the update lands, so a
/// label a person added after the caller last read the change request is
/// kept (an update that named the whole set would drop it).
#[derive(Debug, Clone, Copy, Default)]
pub struct LabelChange<'a> {
    pub add: &'a [String],
    pub remove: &'a [String],
}

impl LabelChange<'_> {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

/// How a forge tells label names apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LabelCase {
    /// Names that differ in case are different labels (GitLab: `Bug` and
    /// `bug` can both exist).
    #[default]
    Sensitive,
    /// One label per name whatever its case (GitHub): adding `bug` where
    /// the repository has `Bug` adds `Bug`, and `bug` removes it.
    Insensitive,
}

impl LabelCase {
    /// Whether `a` and `b` name the same label.
    pub fn same(self, a: &str, b: &str) -> bool {
        match self {
            Self::Sensitive => a == b,
            Self::Insensitive => a == b || a.to_lowercase() == b.to_lowercase(),
        }
    }

    /// Whether `labels` holds a label that `label` names.
    pub fn contains(self, labels: &[String], label: &str) -> bool {
        labels.iter().any(|other| self.same(other, label))
    }
}

/// What takes a change request's labels from `current` (as last read) to
/// `wanted`: the labels to add and the labels to remove, for a
/// [`LabelChange`], names compared as the forge compares them.
pub fn label_diff(
    current: &[String],
    wanted: &[String],
    case: LabelCase,
) -> (Vec<String>, Vec<String>) {
    let add = wanted
        .iter()
        .filter(|label| !case.contains(current, label))
        .cloned()
        .collect();
    let remove = current
        .iter()
        .filter(|label| !case.contains(wanted, label))
        .cloned()
        .collect();
    (add, remove)
}

/// Fields to change on a change request; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChangeUpdate<'a> {
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    pub labels: Option<LabelChange<'a>>,
    /// `Some(false)` closes, `Some(true)` reopens.
    pub open: Option<bool>,
    /// A new target branch (GitLab `target_branch`, GitHub `base`).
    pub target_branch: Option<&'a str>,
}

/// Lifecycle of a change request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeState {
    Open,
    Closed,
    Merged,
    /// GitLab's transient `locked` (merge in progress).
    Locked,
}

impl ChangeState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Merged => "merged",
            Self::Locked => "locked",
        }
    }
}

/// Combined CI conclusion of the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CiStatus {
    /// No pipeline or check for the head.
    None,
    Pending,
    Running,
    Success,
    Failed,
    Canceled,
}

impl CiStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Maps a GitLab pipeline status / GitHub conclusion string.
    pub fn from_forge(status: &str) -> Self {
        match status {
            "success" | "passed" => Self::Success,
            "failed" | "failure" | "timed_out" | "action_required" => Self::Failed,
            "canceled" | "cancelled" | "skipped" => Self::Canceled,
            "running" | "in_progress" => Self::Running,
            "" => Self::None,
            _ => Self::Pending,
        }
    }
}

/// Review state of a change request by the forge's own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The approvals the forge requires are given.
    Approved,
    ReviewRequired,
    ChangesRequested,
    /// The forge requires no review (GitHub `reviewDecision` null, a GitLab
    /// project without approval rules) and nobody requested changes.
    NotRequired,
}

impl ReviewDecision {
    /// Whether the forge's own review rules allow the merge.
    pub fn allows_merge(self) -> bool {
        matches!(self, Self::Approved | Self::NotRequired)
    }
}

/// Whether the forge would merge now. `Unknown` means it is still
/// computing: wait, don't fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mergeable {
    Yes,
    No,
    Unknown,
}

/// One merge queue / merge train entry as the forge reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// Normalized: `queued`, `awaiting_checks`, `mergeable`, `unmergeable`,
    /// `locked`, or an unknown state in lowercase.
    pub state: String,
    /// One-based; `None` when the forge gave none or a value ≤ 0.
    pub position: Option<i64>,
    /// Non-negative seconds; `None` when unknown.
    pub eta_seconds: Option<i64>,
}

/// What one read said about queue membership.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum QueueObservation {
    /// The read could not see the queue: keep what is stored.
    #[default]
    Unobserved,
    /// Authoritatively not in a queue: clear what is stored.
    Absent,
    Entry(QueueEntry),
}

/// A change request (GitLab MR, GitHub PR) as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequest {
    pub number: u64,
    pub url: String,
    pub state: ChangeState,
    pub draft: bool,
    pub title: String,
    pub description: String,
    pub labels: Vec<String>,
    pub source_branch: String,
    pub target_branch: String,
    pub head_sha: Option<String>,
    /// GitLab's head pipeline; `None` on GitHub.
    pub pipeline_id: Option<u64>,
    pub ci: CiStatus,
    /// Checks not finished yet (GitLab: 1 while the head pipeline runs).
    pub pending_checks: u32,
    pub review: ReviewDecision,
    pub approvals: u32,
    /// Approvals the forge requires, when it says.
    pub required_approvals: Option<u32>,
    /// Who approves now, sorted: GitLab `approved_by`; on GitHub the
    /// reviewers whose latest decisive review approves the current head (an
    /// approval of an older head does not cover what was pushed since).
    /// The review gate tells a person from the token's own user.
    pub approved_by: Vec<String>,
    pub mergeable: Mergeable,
    /// The forge's own merge status word (GitLab `detailed_merge_status`,
    /// GitHub `mergeable_state`), for display and the readiness signature.
    pub merge_status: String,
    pub unresolved_threads: u32,
    pub queue: QueueObservation,
    /// Who opened it (GitLab `author.username`, GitHub `user.login`), when
    /// the forge said.
    pub author: Option<String>,
    /// Once merged: the commit the target branch got (GitLab
    /// `merge_commit_sha`, else `squash_commit_sha`; GitHub
    /// `merge_commit_sha`, read only once merged since before that it names
    /// a test merge).
    pub merge_commit_sha: Option<String>,
    /// The review was read: `review`, `approvals`, `required_approvals` and
    /// `approved_by` say what the forge holds. False in the answer to
    /// [`Forge::create_change`](crate::Forge::create_change), which carries
    /// no review (GitLab's approvals are a request of their own; GitHub's
    /// answer has no reviews): they are then placeholders, and the review
    /// gates are not judged from them.
    #[serde(default = "read")]
    pub review_read: bool,
}

fn read() -> bool {
    true
}

/// The forge user a client's token acts as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeUser {
    pub id: u64,
    /// GitLab `username`, GitHub `login`.
    pub username: String,
}

/// How to merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMethod {
    Merge,
    Squash,
    Rebase,
}

/// A merge call.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeParams<'a> {
    /// The head that passed the gates; the forge refuses another head.
    pub expected_head_sha: Option<&'a str>,
    pub method: Option<MergeMethod>,
    pub commit_message: Option<&'a str>,
}

/// What the forge did with a merge call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeOutcome {
    /// Merged, with the commit the target branch got when the forge said
    /// (GitLab `merge_commit_sha` or `squash_commit_sha`, GitHub `sha`).
    Merged { commit_sha: Option<String> },
    /// Entered the merge queue or merge train.
    Queued,
}

impl MergeOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Merged { .. } => "merged",
            Self::Queued => "queued",
        }
    }
}

/// A posted comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteRef {
    pub id: u64,
    pub url: Option<String>,
}

/// A comment as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub id: u64,
    pub body: String,
    pub author: String,
}

/// One CI job: a GitLab job, or a GitHub Actions workflow job (its
/// "pipeline" is the workflow run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiJob {
    pub id: u64,
    pub name: String,
    pub stage: Option<String>,
    /// GitLab's status word: `failed`, `success`, `running`, ... (a GitHub
    /// job's status and conclusion are mapped to it, see
    /// [`job_status`](crate::github::job_status)).
    pub status: String,
    pub failure_reason: Option<String>,
    pub pipeline_id: u64,
    /// True when a newer attempt of this job exists (GitLab `retried`;
    /// on GitHub a job of the same name in a later run attempt).
    pub retried: bool,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// The commit the job ran on.
    #[serde(default)]
    pub head_sha: Option<String>,
}

/// How the forge tells a CI job of the change request's current head from
/// a superseded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CiHeadCheck {
    /// GitLab: the job's pipeline is the merge request's head pipeline.
    HeadPipeline,
    /// GitHub: the job ran on the pull request's head commit (workflow
    /// runs are per commit; a pull request has no head pipeline).
    HeadSha,
}
