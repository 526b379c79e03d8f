//! The GitHub implementation of [`Forge`] over the REST API (version
//! `2022-11-28`) and GraphQL, for github.com and GitHub Enterprise.
//!
//! Projects are `owner/repo`, change numbers are pull request numbers,
//! authentication is a bearer token, and every request has the configured
//! timeout. Nothing here retries: errors carry their kind and, for rate
//! limits (429, or 403 with no requests left) and 503, when to retry.
//!
//! Requests per trait call:
//!
//! | call | requests |
//! |---|---|
//! | `get_change` | 1: one GraphQL query for the whole state (the pull request's fields and labels, review decision, reviews, review threads, merge queue entry, the head's check runs and statuses through `statusCheckRollup.contexts`); when it fails or does not tell everything (errors, more than 100 labels or checks), `GET pulls/:n` and for an open PR `GET commits/:head/check-runs` and `GET commits/:head/status` (one more each per further page of 100) make it up |
//! | `find_open_change` | `GET pulls?state=open&head=owner:branch`, then `get_change` of the match |
//! | `create_change` | `POST pulls` (its answer is the pull request: CI, reviews and threads unread), then one `POST issues/:n/labels` when there are labels (the `mr` type gives none: they go with the first note) |
//! | `open_note` | of a pull request this client just created, with labels whose node ids it learnt from an earlier answer of `POST issues/:n/labels`: one GraphQL request (`addLabelsToLabelable`, `addComment`); else (a label not added by this client yet, a pull request it did not create) `POST issues/:n/labels` and `POST issues/:n/comments` |
//! | `update_change` | `PATCH pulls/:n` (none when only labels change), one `POST` for the labels to add and a `DELETE` per label to remove, then the read of `get_change` |
//! | `queue_entries` | 1 GraphQL query with an alias per pull request (up to [`QUEUE_ALIASES_PER_QUERY`]) |
//! | `merge_change` | `PUT pulls/:n/merge-async`, then `GET pulls/:n/merge-async/:uuid` every [`MERGE_POLL_INTERVAL`] while pending, within [`MERGE_BUDGET`] |
//! | `commit_files` | one GraphQL query for the base branch's head, its tree and each path the actions name with its parent directories (`Commit.file`, 100 paths a query), against which deletes, moves and writes are checked; the REST reads `GET branches/:base` and `GET git/trees/:tree?recursive=1` instead when that query fails or a path lookup cannot tell (a named directory with files removed below it); then, for a new branch of regular files whose message GitHub gives back as is, one GraphQL request (`createRef` at the base head, `createCommitOnBranch`; a part that landed alone is undone with one more: `deleteRef` or `updateRef`); otherwise, or when that request wrote nothing, `POST git/blobs` per file content that is not UTF-8 (UTF-8 goes inline in the tree), `POST git/trees`, `POST git/commits`, `POST git/refs` or `PATCH git/refs/heads/:branch` |
//! | `diff_is_empty` | `GET commits/:base` and `GET commits/:head` (their trees compared; the tree of a commit this client made or read is known and not read again) |
//! | `current_user` | `GET /user`, once per client (an error is not kept) |
//! | `project_path` | `GET repos/:owner/:repo` |
//! | `branch_protected` | `GET branches/:branch` (classic protection), then, unless that said protected, the rulesets: `GET rulesets?targets=branch` (every page; `304` after the first read while nothing changes), and `GET rules/branches/:branch` (every page) only when a listed ruleset may apply to branches |
//! | `source_branch` | the requests of `branch_protected`, whose `GET branches/:branch` also tells the head |
//! | `protects_new_branch` | the rulesets' requests of `branch_protected`: classic protection shows only in an existing branch's answer, and an existing branch refuses the creating commit |
//!
//! Every REST `GET` is conditional once its URL was read: the client keeps
//! the last answer with its `ETag` and sends `If-None-Match`; a `304 Not
//! Modified`, which GitHub does not count against the rate limit, reads
//! as the kept answer (see `http_util::Etags`). GraphQL has no validators.
//!
//! Redirects are never followed: a 3xx answer is a
//! [`ForgeErrorKind::Rejected`](crate::ForgeErrorKind::Rejected) error
//! naming its `Location`, so the token never leaves for another host.
//!
//! The CI is the head's check runs (the latest per name) and commit
//! statuses (the latest per context), as `statusCheckRollup.contexts`
//! lists them or the REST reads do.
//!
//! **Review decision.** `reviewDecision` is GitHub's own word when branch
//! protection requires reviews. When it is `null` (no review required),
//! the change counts as approved only when GitHub shows at least one
//! reviewer whose latest decisive review approves and none whose latest
//! requests changes; with no review at all it is `ReviewRequired`, so the
//! approval gate never passes on silence. `approvals` counts reviewers
//! whose latest decisive (`APPROVED`, `CHANGES_REQUESTED`, `DISMISSED`)
//! review is `APPROVED`; `required_approvals` is `None` (branch protection
//! is not read).
//!
//! **Queue.** The GraphQL `mergeQueueEntry` is authoritative: an entry, or
//! `null` = `Absent`. When the GraphQL query fails (transport, HTTP error,
//! or errors on the pull request), the REST reads give the rest, the queue is `Unobserved`, the review
//! `ReviewRequired` with no approvals and no threads counted: the read
//! never claims an approval or a queue absence it did not see.
//!
//! **Mergeable and CI.** `mergeable: null` (GitHub is still computing it)
//! is [`Mergeable::Unknown`](crate::Mergeable::Unknown): the merge gate
//! waits. Check runs and commit statuses both count for the CI status.
//!
//! **Merging.** `PUT pulls/:n/merge-async` with `merge_action: default`
//! (GitHub picks its merge queue when the base branch requires it), the
//! method and, for automatic merges, `sha` = the checked head. `pending` is
//! polled at least [`MERGE_POLL_INTERVAL`] apart within [`MERGE_BUDGET`],
//! which bounds the whole call; a 409 carrying the uuid of a request
//! already running resumes it when it is bound to the same head (a call
//! without a head resumes any). Anything else (no uuid, `failed`, 404 on a
//! poll, an unknown status) is an error and never claimed as merged or
//! queued.
//!
//! **Commits** that create their branch with regular files only go
//! through GraphQL: the branch created at the base head and the commit
//! appended to it in one request (see the `new_branch` module). The others
//! go through the Git data API: one tree on the base's tree (UTF-8
//! content inline, other bytes as blobs), a commit, the ref created or
//! force-updated. A new tree with the base tree's SHA changes nothing:
//! the push's answer tells the empty diff.
//!
//! **Webhooks** are authenticated by `X-Hub-Signature-256`, an HMAC-SHA256
//! over the raw body, checked in constant time.
//!
//! **CI jobs.** GitHub Actions workflow jobs are offered as
//! [`CiJobs`](crate::CiJobs) (a workflow run is the pipeline; see the `ci`
//! module for the requests). A job's log is behind a 302 to a short-lived
//! URL on another host: that one redirect is followed, without the token,
//! and only the log's tail is kept. Jobs of the pull request's head commit
//! are current ([`CiHeadCheck::HeadSha`](crate::CiHeadCheck::HeadSha)).

mod base;
mod change;
mod ci;
mod client;
mod commit;
mod http;
mod merge;
mod new_branch;
mod notes;
mod queue;
pub(crate) mod webhook;
mod wire;

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Forge;
use crate::config::ForgeKind;
use crate::error::ForgeResult;
use crate::events::{ForgeEvent, WebhookRejection};
use crate::model::{
    ChangeRequest, ChangeUpdate, CommitRequest, ForgeUser, LabelCase, MergeOutcome, MergeParams,
    NewChange, Note, NoteRef, PushedCommit, QueueObservation, SourceBranch,
};

pub use self::ci::job_status;
pub use self::client::GithubClient;
pub use self::http::{API_VERSION, USER_AGENT};
pub use self::merge::{MERGE_BUDGET, MERGE_POLL_INTERVAL};
pub use self::queue::QUEUE_ALIASES_PER_QUERY;
pub use self::webhook::queue_branch_number;

/// Each method is the inherent one of the module that owns the call
/// (inherent methods take precedence over the trait's).
#[async_trait]
impl Forge for GithubClient {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Github
    }

    async fn current_user(&self) -> ForgeResult<ForgeUser> {
        self.current_user().await
    }

    async fn project_path(&self, project: &str) -> ForgeResult<String> {
        self.project_path(project).await
    }

    async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        self.branch_protected(project, branch).await
    }

    async fn branch_head(&self, project: &str, branch: &str) -> ForgeResult<Option<String>> {
        self.branch_head(project, branch).await
    }

    async fn source_branch(&self, project: &str, branch: &str) -> ForgeResult<SourceBranch> {
        self.source_branch(project, branch).await
    }

    async fn protects_new_branch(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        self.protects_new_branch(project, branch).await
    }

    fn creates_branch_atomically(&self) -> bool {
        true
    }

    async fn commit_files(&self, request: &CommitRequest<'_>) -> ForgeResult<PushedCommit> {
        self.commit_files(request).await
    }

    async fn diff_is_empty(&self, project: &str, base: &str, head: &str) -> ForgeResult<bool> {
        self.diff_is_empty(project, base, head).await
    }

    async fn find_open_change(
        &self,
        project: &str,
        source_branch: &str,
    ) -> ForgeResult<Option<ChangeRequest>> {
        self.find_open_change(project, source_branch).await
    }

    async fn create_change(&self, request: &NewChange<'_>) -> ForgeResult<ChangeRequest> {
        self.create_change(request).await
    }

    async fn update_change(
        &self,
        project: &str,
        number: u64,
        update: &ChangeUpdate<'_>,
    ) -> ForgeResult<ChangeRequest> {
        self.update_change(project, number, update).await
    }

    async fn get_change(&self, project: &str, number: u64) -> ForgeResult<ChangeRequest> {
        self.get_change(project, number).await
    }

    async fn queue_entries(
        &self,
        project: &str,
        numbers: &[u64],
    ) -> ForgeResult<BTreeMap<u64, QueueObservation>> {
        self.queue_entries(project, numbers).await
    }

    async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        self.merge_change(project, number, request).await
    }

    async fn create_note(&self, project: &str, number: u64, body: &str) -> ForgeResult<NoteRef> {
        self.create_note(project, number, body).await
    }

    /// A pull request's labels are a request of their own (`POST
    /// issues/:n/labels`); with the first note they are not.
    fn labels_on_creation(&self) -> bool {
        false
    }

    /// GitHub keeps one label per name whatever its case.
    fn label_case(&self) -> LabelCase {
        LabelCase::Insensitive
    }

    async fn open_note(
        &self,
        project: &str,
        number: u64,
        labels: &[String],
        body: &str,
    ) -> ForgeResult<NoteRef> {
        self.open_note(project, number, labels, body).await
    }

    async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>> {
        self.list_notes(project, number).await
    }

    async fn update_note(
        &self,
        project: &str,
        number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()> {
        self.update_note(project, number, note_id, body).await
    }

    fn rate_budgets(&self) -> Vec<crate::RateBudget> {
        self.http.budgets.all()
    }

    fn ci_jobs(&self) -> Option<&dyn crate::CiJobs> {
        Some(self)
    }

    fn parse_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection> {
        webhook::parse(self.webhook_secret.as_deref(), headers, body)
    }

    fn parse_trusted_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection> {
        webhook::parse_unverified(headers, body)
    }
}
