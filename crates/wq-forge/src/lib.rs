//! Forge clients: the [`Forge`] trait the `mr` item type talks to, and its
//! implementations: [`GitlabClient`] (REST v4, merge trains) and
//! [`GithubClient`] (REST and GraphQL, the merge queue through
//! `merge-async`). The trait speaks in forge-neutral terms — a *change
//! request* is a GitLab merge request or a GitHub pull request — so the
//! item type does not know which forge it talks to.
//!
//! Every call is one or a few HTTP requests with a timeout; nothing here
//! retries. The caller (an executor) turns a [`ForgeError`] into a
//! transient or permanent failure and the engine's backoff does the rest,
//! honouring [`ForgeError::retry_after`].

pub mod budget;
pub mod config;
mod error;
pub mod events;
pub mod github;
pub mod gitlab;
mod http_util;
pub mod metrics;
mod model;
mod payload;

pub use budget::{MAX_PACE, RateBudget};
pub use config::{ForgeConfig, ForgeKind, ForgesConfig};
pub use error::{ForgeError, ForgeErrorKind, ForgeResult};
pub use events::{ChangeAction, ForgeEvent, WebhookRejection};
pub use github::GithubClient;
pub use gitlab::GitlabClient;
pub use http_util::TRACE_TAIL_BYTES;
pub use model::*;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// One forge instance (a GitLab server, GitHub or GitHub Enterprise).
///
/// `project` is the forge's project path (`group/name` on GitLab,
/// `owner/repo` on GitHub); `number` is the change request's number within
/// the project (GitLab `iid`, GitHub PR number).
#[async_trait]
pub trait Forge: Send + Sync + 'static {
    fn kind(&self) -> ForgeKind;

    /// The forge user this client's token acts as (GitLab and GitHub
    /// `GET /user`), read once and cached by the client: what workqueue
    /// created is recognised by this author.
    async fn current_user(&self) -> ForgeResult<ForgeUser>;

    /// The project's path as the forge spells it (GitLab
    /// `path_with_namespace`, GitHub `full_name`): `Team/Service` for a
    /// caller's `team/service`. [`ForgeErrorKind::NotFound`] when the
    /// project does not exist.
    async fn project_path(&self, project: &str) -> ForgeResult<String>;

    /// Whether the forge protects `branch`, whether or not it exists yet
    /// (GitLab protected branches, wildcards included; GitHub branch
    /// protection or a branch ruleset).
    async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool>;

    /// The head commit of `branch`, or `None` when it does not exist.
    async fn branch_head(&self, project: &str, branch: &str) -> ForgeResult<Option<String>>;

    /// What a push to `branch` needs to know first: its head and whether
    /// the forge protects it. The default asks [`Forge::branch_head`] and
    /// [`Forge::branch_protected`]; a client that reads both in fewer
    /// requests says so (GitHub: the branch's own answer tells its classic
    /// protection).
    async fn source_branch(&self, project: &str, branch: &str) -> ForgeResult<SourceBranch> {
        let head = self.branch_head(project, branch).await?;
        let protected = self.branch_protected(project, branch).await?;
        Ok(SourceBranch { head, protected })
    }

    /// Whether the forge protects `branch` as a push that creates it sees
    /// it: the check before a [`CommitMode::CreateBranch`] commit where
    /// [`Forge::creates_branch_atomically`] (a branch that exists already
    /// refuses that commit, and is then read whole with
    /// [`Forge::source_branch`]). The default asks
    /// [`Forge::branch_protected`]; GitHub reads only its rulesets, as
    /// classic protection shows only in an existing branch's answer.
    async fn protects_new_branch(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        self.branch_protected(project, branch).await
    }

    /// True when a [`CommitMode::CreateBranch`] commit onto a branch that
    /// exists already is refused as [`ForgeErrorKind::Conflict`] before
    /// anything shows on any branch (GitLab's commits API with
    /// `start_branch`; GitHub's client reads the branch with the base and
    /// creates it with `createRef` before `createCommitOnBranch`, or with
    /// `POST git/refs` after a tree and commit no branch reaches; a branch
    /// that appears at exactly the base head between that read and the
    /// commit holds the commit for a moment and is set back), so a first
    /// push needs no read of the branch before it. False (the default)
    /// where the refusal would come after a visible write.
    fn creates_branch_atomically(&self) -> bool {
        false
    }

    /// Commits `actions` as one commit on `branch`, based on the current head
    /// of `base_branch` ([`CommitMode::CreateBranch`] creates `branch`, and
    /// an existing one is [`ForgeErrorKind::Conflict`];
    /// [`CommitMode::ForceUpdate`] overwrites it). Returns the new head and,
    /// when the forge's answer tells, whether it changes anything.
    async fn commit_files(&self, request: &CommitRequest<'_>) -> ForgeResult<PushedCommit>;

    /// True when `head` has no changes against `base` (the two trees are
    /// identical: merging would change nothing), DDR-43.
    async fn diff_is_empty(&self, project: &str, base: &str, head: &str) -> ForgeResult<bool>;

    /// The open change request from `source_branch`, if any.
    async fn find_open_change(
        &self,
        project: &str,
        source_branch: &str,
    ) -> ForgeResult<Option<ChangeRequest>>;

    /// Opens a change request. Another one open from the same source
    /// branch is [`ForgeErrorKind::Conflict`] (GitLab 409, GitHub 422 "A
    /// pull request already exists"). The answer is the forge's answer to
    /// the creation: what the readiness gates need that it does not carry
    /// (GitLab's approvals, GitHub's CI, reviews and threads) is left
    /// unread ([`ChangeRequest::review_read`] is false).
    async fn create_change(&self, request: &NewChange<'_>) -> ForgeResult<ChangeRequest>;

    /// Changes title, description, labels or state; `None` fields are left
    /// alone.
    async fn update_change(
        &self,
        project: &str,
        number: u64,
        update: &ChangeUpdate<'_>,
    ) -> ForgeResult<ChangeRequest>;

    /// One read of the change request with everything the readiness gates
    /// need (CI, reviews, mergeability, threads, queue where cheap).
    async fn get_change(&self, project: &str, number: u64) -> ForgeResult<ChangeRequest>;

    /// The merge queue entries of several change requests of one project in
    /// one request (GitHub: one GraphQL query with an alias per pull
    /// request). Every asked number is in the answer: an entry, `Absent`
    /// (authoritatively in no queue), or `Unobserved` when the forge cannot
    /// tell (no queue API; the default).
    async fn queue_entries(
        &self,
        _project: &str,
        numbers: &[u64],
    ) -> ForgeResult<BTreeMap<u64, QueueObservation>> {
        Ok(numbers
            .iter()
            .map(|n| (*n, QueueObservation::Unobserved))
            .collect())
    }

    /// Merges, or enters the merge queue / merge train. With
    /// `expected_head_sha`, the forge refuses (409, [`ForgeErrorKind::Conflict`])
    /// rather than merge another head.
    async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome>;

    /// Posts a comment on the change request.
    async fn create_note(&self, project: &str, number: u64, body: &str) -> ForgeResult<NoteRef>;

    /// Whether [`Forge::create_change`] takes a new change request's labels
    /// in the creation itself (GitLab's API does; the default). False where
    /// they cost requests of their own: they then go with the first note
    /// ([`Forge::open_note`]).
    fn labels_on_creation(&self) -> bool {
        true
    }

    /// How this forge tells label names apart (GitLab: by case, the
    /// default; GitHub: not).
    fn label_case(&self) -> LabelCase {
        LabelCase::Sensitive
    }

    /// Adds `labels` to the change request `number` just created and posts
    /// its first note, in as few requests as the forge allows (GitHub: one
    /// GraphQL request). The default: the labels through
    /// [`Forge::update_change`] (when there are any), then
    /// [`Forge::create_note`]. An error may leave the labels added and the
    /// note not, or both done: the caller looks again.
    async fn open_note(
        &self,
        project: &str,
        number: u64,
        labels: &[String],
        body: &str,
    ) -> ForgeResult<NoteRef> {
        if !labels.is_empty() {
            let update = ChangeUpdate {
                labels: Some(LabelChange {
                    add: labels,
                    remove: &[],
                }),
                ..ChangeUpdate::default()
            };
            self.update_change(project, number, &update).await?;
        }
        self.create_note(project, number, body).await
    }

    /// The comments on a change request (id and body), oldest first.
    async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>>;

    /// Replaces the body of a comment posted earlier.
    async fn update_note(
        &self,
        project: &str,
        number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()>;

    /// The rate-limit budgets of this client's token as the forge's last
    /// answers reported them (GitHub: one per resource, `core` and
    /// `graphql`); empty (the default) when none was reported. Every
    /// caller of the client shares them.
    fn rate_budgets(&self) -> Vec<RateBudget> {
        Vec::new()
    }

    /// The forge's CI job API, when it offers one (GitLab jobs, GitHub
    /// Actions workflow jobs); `None` (the default) when CI jobs cannot be
    /// listed, read or retried through this client.
    fn ci_jobs(&self) -> Option<&dyn CiJobs> {
        None
    }

    /// Checks a webhook delivery's authenticity (constant time) and parses
    /// it into a [`ForgeEvent`]. `headers` are (lower-case name, value).
    fn parse_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection>;

    /// Parses a delivery that came through a channel the operator trusts
    /// (a queue whose access policy admits only the forge's relay): the
    /// token or signature is not checked, everything else is as
    /// [`Forge::parse_webhook`].
    fn parse_trusted_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection>;
}

/// A forge's CI jobs: list a pipeline's jobs, read a job's log, retry a
/// job. A capability a [`Forge`] may offer through [`Forge::ci_jobs`].
/// A *pipeline* is a GitLab pipeline or a GitHub Actions workflow run.
#[async_trait]
pub trait CiJobs: Send + Sync {
    /// How a job of the change request's current head is told from a
    /// superseded one (GitLab: its head pipeline, the default).
    fn head_check(&self) -> CiHeadCheck {
        CiHeadCheck::HeadPipeline
    }

    /// All jobs of a pipeline (every attempt, as the forge lists them).
    async fn pipeline_jobs(&self, project: &str, pipeline_id: u64) -> ForgeResult<Vec<CiJob>>;

    /// All jobs that ran on a commit, for a forge whose head check is
    /// [`CiHeadCheck::HeadSha`] (GitHub: the jobs of every workflow run of
    /// the commit). A forge with head pipelines lists none here: its head
    /// pipeline's jobs come from [`CiJobs::pipeline_jobs`].
    async fn commit_jobs(&self, _project: &str, _sha: &str) -> ForgeResult<Vec<CiJob>> {
        Ok(Vec::new())
    }

    /// The end of a job's log: at most its last [`TRACE_TAIL_BYTES`],
    /// streamed (a log is never read whole), starting at a line when cut,
    /// invalid UTF-8 replaced.
    async fn job_trace(&self, project: &str, job_id: u64) -> ForgeResult<String>;

    /// Retries a job; returns the new job when the forge names it (GitLab
    /// answers with it; GitHub's re-run answers with no body, so the new
    /// attempt is looked up and may not be listed yet).
    async fn retry_job(&self, project: &str, job_id: u64) -> ForgeResult<Option<CiJob>>;
}

/// The configured forge instances by name.
#[derive(Clone, Default)]
pub struct Forges {
    by_name: BTreeMap<String, Arc<dyn Forge>>,
}

impl fmt::Debug for Forges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Forges {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client per configured instance. Secrets named by `*_env` are read
    /// from the environment where the config does not hold them already.
    /// Errors name the field (`forges.<name>.<field>`).
    pub fn from_config(config: &ForgesConfig) -> Result<Self, ForgeError> {
        crate::metrics::describe();
        let mut forges = Self::new();
        for (name, instance) in &config.instances {
            let mut instance = instance.clone();
            instance
                .resolve_secrets(name)
                .map_err(ForgeError::invalid)?;
            let named =
                |error: ForgeError| ForgeError::invalid(format!("forges.{name}.{}", error.message));
            let forge: Arc<dyn Forge> = match instance.kind {
                ForgeKind::Gitlab => Arc::new(GitlabClient::new(&instance).map_err(named)?),
                ForgeKind::Github => Arc::new(GithubClient::new(&instance).map_err(named)?),
            };
            forges.insert(name.clone(), forge);
        }
        Ok(forges)
    }

    pub fn insert(&mut self, name: impl Into<String>, forge: Arc<dyn Forge>) {
        self.by_name.insert(name.into(), forge);
    }

    pub fn with(mut self, name: impl Into<String>, forge: Arc<dyn Forge>) -> Self {
        self.insert(name, forge);
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Forge>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
