//! Webhook deliveries parsed into forge-neutral events.
//!
//! The receiver stores the raw body as a pending event (DDR-33) and only
//! needs enough of it to find the item: the project and change number, or
//! the pipeline id. The item type's handler parses the stored body again.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::model::{ChangeState, CiStatus};

/// What happened to a change request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeAction {
    Opened,
    /// Title, description, labels or similar changed; no new commits.
    Updated,
    /// A label was added (GitHub's `labeled`; the event's `label` names
    /// it).
    Labeled,
    /// New commits were pushed.
    Pushed,
    Approved,
    Unapproved,
    Merged,
    Closed,
    Reopened,
    /// Any other action word.
    Other,
}

/// A webhook delivery, normalized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ForgeEvent {
    Change {
        project: String,
        number: u64,
        action: ChangeAction,
        state: ChangeState,
        source_branch: Option<String>,
        head_sha: Option<String>,
        /// The label a [`ChangeAction::Labeled`] delivery names.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    Pipeline {
        project: String,
        pipeline_id: u64,
        status: CiStatus,
        sha: Option<String>,
        /// The branch (or ref) the pipeline ran for.
        ref_name: Option<String>,
        /// The change request the pipeline runs for, when the forge says
        /// (GitLab: the hook's `merge_request`, or the merge request ref).
        number: Option<u64>,
    },
    Job {
        project: String,
        pipeline_id: u64,
        job_id: u64,
        name: String,
        stage: Option<String>,
        status: String,
        failure_reason: Option<String>,
        #[serde(with = "time::serde::rfc3339::option")]
        finished_at: Option<OffsetDateTime>,
        /// The branch the job ran for (finds the item while its new head
        /// pipeline is not recorded yet).
        #[serde(default)]
        ref_name: Option<String>,
        /// The change request of a merge request pipeline's job (GitLab's
        /// `refs/merge-requests/<iid>/head` ref), when the ref names one.
        #[serde(default)]
        number: Option<u64>,
        /// The commit the job ran on (on GitHub, what tells a job of the
        /// pull request's head from a superseded one).
        #[serde(default)]
        sha: Option<String>,
    },
    Note {
        project: String,
        number: u64,
        note_id: u64,
        author: String,
        body: String,
    },
    /// GitHub check runs, check suites and commit statuses: CI news about a
    /// commit. `numbers` are the pull requests the forge says it belongs to
    /// (often empty for statuses); `ref_name` the branch, when given.
    Checks {
        project: String,
        sha: Option<String>,
        ref_name: Option<String>,
        numbers: Vec<u64>,
        status: CiStatus,
    },
    /// GitHub merge queue news (`merge_group`, `pull_request` `enqueued` /
    /// `dequeued`): the pull request's queue entry changed.
    Queue {
        project: String,
        number: u64,
        /// The forge's action word (`checks_requested`, `destroyed`,
        /// `enqueued`, `dequeued`).
        action: String,
    },
    /// Authentic but of no interest (event type or object we don't handle).
    Ignored { reason: String },
}

impl ForgeEvent {
    /// A short name for logs and the stored event type.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Change { .. } => "change",
            Self::Pipeline { .. } => "pipeline",
            Self::Job { .. } => "job",
            Self::Note { .. } => "note",
            Self::Checks { .. } => "checks",
            Self::Queue { .. } => "queue",
            Self::Ignored { .. } => "ignored",
        }
    }
}

/// Why a webhook delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRejection {
    /// Missing or wrong token / signature: answer 401, store nothing.
    #[error("webhook authentication failed: {0}")]
    Unauthenticated(String),
    /// Authentic but unreadable: answer 202 and ignore with a log line.
    #[error("malformed webhook: {0}")]
    Malformed(String),
}
