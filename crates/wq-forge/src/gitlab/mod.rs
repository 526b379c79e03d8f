//! The GitLab implementation of [`Forge`] over the REST API v4.
//!
//! Projects are addressed by their URL-encoded path (`group%2Fname`),
//! authentication is a `PRIVATE-TOKEN` header, and every request has the
//! configured timeout. Nothing here retries: errors carry their kind and,
//! for 429/503, GitLab's `Retry-After`.
//!
//! Requests per trait call:
//!
//! | call | requests |
//! |---|---|
//! | `get_change` | `GET merge_requests/:iid`; for an open MR also `GET merge_requests/:iid/approvals` and the project's approval settings (`GET approvals`, read at most every [`PROJECT_SETTINGS_TTL`]); on merge-train projects with an open MR also `GET merge_trains` (the project's settings are read at most every [`PROJECT_SETTINGS_TTL`]) |
//! | `find_open_change` | `GET merge_requests?source_branch&state=opened`, then `get_change` of the match |
//! | `create_change` | `POST merge_requests` (its answer is the merge request, approvals unread; another open one from the branch is a 409) |
//! | `commit_files` | `POST repository/commits` (creating the branch from `start_branch`, or with `force`; its `stats` tell a non-empty commit) |
//! | `merge_change` | `PUT merge_requests/:iid/merge`, or `POST merge_trains/merge_requests/:iid` on merge-train projects |
//! | `diff_is_empty` | `GET repository/compare?straight=true` |
//! | `source_branch` | `GET repository/branches/:branch`, then `branch_protected` |
//! | `current_user` | `GET /user`, once per client (an error is not kept) |
//! | `project_path` | `GET /projects/:path` (shares the project settings cache) |
//! | `branch_protected` | `GET protected_branches` (every page) |
//! | `job_trace` | `GET jobs/:id/trace`, streamed; the last [`TRACE_TAIL_BYTES`] are kept |
//!
//! Every `GET` whose answer is read whole is conditional once its URL was
//! read: the client keeps the last answer with its `ETag` (GitLab's weak
//! validator of the body) and sends `If-None-Match`; a `304 Not Modified`
//! reads as the kept answer (see `http_util::Etags`). A 304 still counts
//! against GitLab's rate limit, but carries no body.
//!
//! Redirects are never followed: a 3xx answer is a
//! [`ForgeErrorKind::Rejected`](crate::ForgeErrorKind::Rejected) error
//! naming its `Location`, so the `PRIVATE-TOKEN` never leaves for another
//! host.
//!
//! Settings the project decides and this client reads: `merge_trains_enabled`
//! (a merge becomes "add to the train") and `merge_method` (GitLab has no
//! per-request merge method; only squashing is per merge request).
//!
//! This client offers the [`CiJobs`] capability (`ci`): a pipeline's jobs,
//! a job's trace tail, retrying a job. Webhook deliveries are authenticated
//! by their `X-Gitlab-Token`, compared in constant time with the
//! configured secret.

mod change;
mod ci;
mod client;
mod commit;
mod http;
mod merge;
mod notes;
mod queue;
pub(crate) mod webhook;
mod wire;

use async_trait::async_trait;

use crate::config::ForgeKind;
use crate::error::ForgeResult;
use crate::events::{ForgeEvent, WebhookRejection};
use crate::model::{
    ChangeRequest, ChangeUpdate, CommitRequest, ForgeUser, MergeOutcome, MergeParams, NewChange,
    Note, NoteRef, PushedCommit,
};
use crate::{CiJobs, Forge};

pub use self::client::{GitlabClient, PROJECT_SETTINGS_TTL};
pub use self::http::USER_AGENT;
pub use self::webhook::parse_hook_time;
pub use crate::http_util::TRACE_TAIL_BYTES;

/// Each method is the inherent one of the module that owns the call
/// (inherent methods take precedence over the trait's).
#[async_trait]
impl Forge for GitlabClient {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitlab
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

    fn ci_jobs(&self) -> Option<&dyn CiJobs> {
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
