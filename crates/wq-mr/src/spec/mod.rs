//! The submission schema of the `mr` item type: its validation into an
//! [`MrSpec`] (DDR-9: inspection is a pure function over the submitted data,
//! before any forge call), and the content and metadata hashes the upsert
//! compares (DDR-40).
//!
//! A submission is the JSON body of `POST /api/v1/work-items`:
//!
//! ```json
//! {
//!   "item_type": "mr",
//!   "forge": "gitlab",
//!   "project": "group/name",
//!   "source_branch": "bot/bump-foo",
//!   "target_branch": "main",
//!   "title": "Bump foo to 1.2",
//!   "description": "",
//!   "commit_message": "Bump foo to 1.2",
//!   "labels": ["bot"],
//!   "file_actions": [
//!     {"action": "update", "file_path": "foo.spec", "content": "..."},
//!     {"action": "create", "file_path": "logo.png", "content": "iVBORw0...", "encoding": "base64"}
//!   ],
//!   "automation": {"auto_merge": true, "ci_retry": true}
//! }
//! ```
//!
//! [`parse_submission`] reads it through serde wire types (`wire`), checks
//! every field against the [`SubmissionRules`] with garde (`rules`) and
//! builds the domain values ([`BranchName`], [`ProjectPath`], [`RepoPath`]);
//! it does not know which forges are configured, so the caller checks that
//! `forge` names one.

mod config;
mod names;
mod parse;
mod rules;
mod schema;
mod wire;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use wq_forge::FileAction;

pub use config::{
    ConfigErrors, DEFAULT_ALLOW_BINARY, DEFAULT_BLOCKED_CONTENT, DEFAULT_BLOCKED_PATHS,
    DEFAULT_MAX_ACTIONS, DEFAULT_MAX_DESCRIPTION_BYTES, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_TITLE_CHARS, DEFAULT_MAX_TOTAL_BYTES, DEFAULT_PROTECTED_BRANCHES,
    ProjectSubmissionConfig, SubmissionConfig, SubmissionRules,
};
pub use names::{
    BranchName, MAX_BRANCH_BYTES, MAX_FORGE_BYTES, MAX_PATH_BYTES, MAX_PROJECT_BYTES, NameError,
    ProjectPath, RepoPath, check_format_characters,
};
pub use parse::{MAX_ERRORS, parse_submission};
pub use rules::{MAX_LABEL_CHARS, MAX_LABELS};
pub use schema::submission_schema;

/// What the service does on its own once the merge request exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Automation {
    /// Merge when every gate passes.
    pub auto_merge: bool,
    /// Retry CI jobs that failed for infrastructure reasons.
    pub ci_retry: bool,
}

impl Default for Automation {
    fn default() -> Self {
        Self {
            auto_merge: true,
            ci_retry: true,
        }
    }
}

/// A validated submission: the desired state of one merge request. Its
/// identity is `(forge, project, source_branch)`. It is built by
/// [`parse_submission`] or read back by the store, never deserialized: the
/// store keeps its own columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MrSpec {
    pub forge: String,
    pub project: ProjectPath,
    pub source_branch: BranchName,
    pub target_branch: BranchName,
    pub title: String,
    pub description: String,
    pub commit_message: String,
    pub labels: Vec<String>,
    /// In submission order; content decoded; each path a valid
    /// [`RepoPath`].
    pub file_actions: Vec<FileAction>,
    pub automation: Automation,
}

/// Marks the hash input format, so that a future change of it is explicit.
const CONTENT_HASH_DOMAIN: &str = "wq-mr/content/v1";
const METADATA_HASH_DOMAIN: &str = "wq-mr/metadata/v1";

/// One file action as the content hash sees it.
#[derive(Serialize)]
struct NormalizedAction<'a> {
    action: &'static str,
    file_path: &'a str,
    previous_path: Option<&'a str>,
    /// SHA-256 hex of the decoded bytes: the same whether they were sent as
    /// text or base64.
    content_sha256: Option<String>,
    execute_filemode: Option<bool>,
}

/// The metadata the merge request shows, as the metadata hash sees it.
#[derive(Serialize)]
struct NormalizedMetadata<'a> {
    target_branch: &'a str,
    title: &'a str,
    description: &'a str,
    commit_message: &'a str,
    labels: Vec<&'a str>,
    auto_merge: bool,
    ci_retry: bool,
}

impl MrSpec {
    /// SHA-256 hex over the normalized file actions: sorted by
    /// `(file_path, action)`, compact JSON, content as the SHA-256 of its
    /// decoded bytes, so the same bytes sent as text or base64 hash alike.
    /// Equal hashes mean the branch needs no new commit.
    pub fn content_hash(&self) -> String {
        let mut actions: Vec<NormalizedAction<'_>> = self
            .file_actions
            .iter()
            .map(|action| NormalizedAction {
                action: action.op.as_str(),
                file_path: &action.path,
                previous_path: action.previous_path.as_deref(),
                content_sha256: action.content.as_deref().map(sha256_hex),
                execute_filemode: action.execute_filemode,
            })
            .collect();
        actions.sort_by(|a, b| (a.file_path, a.action).cmp(&(b.file_path, b.action)));
        hash_json(CONTENT_HASH_DOMAIN, &actions)
    }

    /// SHA-256 hex over the metadata the merge request shows: target
    /// branch, title, description, commit message, sorted labels and
    /// automation. A change here without a content change updates the merge
    /// request without a new commit.
    pub fn metadata_hash(&self) -> String {
        let mut labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        labels.sort_unstable();
        let metadata = NormalizedMetadata {
            target_branch: &self.target_branch,
            title: &self.title,
            description: &self.description,
            commit_message: &self.commit_message,
            labels,
            auto_merge: self.automation.auto_merge,
            ci_retry: self.automation.ci_retry,
        };
        hash_json(METADATA_HASH_DOMAIN, &metadata)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn hash_json<T: Serialize>(domain: &str, value: &T) -> String {
    let json = serde_json::to_vec(&(domain, value)).expect("hash input serializes to JSON");
    sha256_hex(&json)
}

/// One refused field of a submission (path like `file_actions[3].file_path`).
pub use wq_core::FieldError;
