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
//! | `get_change` (open PR) | 4: `GET pulls/:n`, then at once one GraphQL query (review decision, reviews, review threads, merge queue entry), `GET commits/:head/check-runs` and `GET commits/:head/status` (one more each per further page of 100) |
//! | `get_change` (merged or closed PR) | 1: `GET pulls/:n` (the queue is `Absent`, CI not read) |
//! | `find_open_change` | `GET pulls?state=open&head=owner:branch`, then `get_change` of the match |
//! | `create_change` | `POST pulls`, the three reads of `get_change`, then one `POST issues/:n/labels` when there are labels |
//! | `update_change` | `PATCH pulls/:n` (or `GET` when only labels change), the three reads, then one `POST` for the labels to add and a `DELETE` per label to remove |
//! | `queue_entries` | 1 GraphQL query with an alias per pull request (up to [`QUEUE_ALIASES_PER_QUERY`]) |
//! | `merge_change` | `PUT pulls/:n/merge-async`, then `GET pulls/:n/merge-async/:uuid` every [`MERGE_POLL_INTERVAL`] while pending, within [`MERGE_BUDGET`] |
//! | `commit_files` | `GET branches/:base`, `GET git/trees/:tree?recursive=1` (deletes, moves and writes are checked against the base tree's files), `POST git/blobs` per file content, `POST git/trees`, `POST git/commits`, `POST git/refs` or `PATCH git/refs/heads/:branch` |
//! | `diff_is_empty` | `GET commits/:base` and `GET commits/:head` (their trees compared) |
//! | `current_user` | `GET /user`, once per client (an error is not kept) |
//! | `project_path` | `GET repos/:owner/:repo` |
//! | `branch_protected` | `GET branches/:branch` (classic protection), then, unless that said protected, `GET rules/branches/:branch` (rulesets; every page) |
//!
//! Redirects are never followed: a 3xx answer is a
//! [`ForgeErrorKind::Rejected`] error naming its `Location`, so the token
//! never leaves for another host.
//!
//! The check runs and statuses take two requests because the simulated
//! GitHub's GraphQL has no `statusCheckRollup.contexts`; with it, the CI
//! would fit into the GraphQL query.
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
//! or errors on the pull request), the queue is `Unobserved`, the review
//! `ReviewRequired` with no approvals and no threads counted: the read
//! never claims an approval or a queue absence it did not see.

mod http;
mod webhook;
mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::Forge;
use crate::config::{ForgeConfig, ForgeKind};
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::events::{ForgeEvent, WebhookRejection};
use crate::model::{
    ChangeRequest, ChangeState, ChangeUpdate, CommitMode, CommitRequest, FileOp, MergeMethod,
    MergeOutcome, MergeParams, NewChange, Note, NoteRef, QueueObservation,
};

pub use self::http::{API_VERSION, USER_AGENT};
use self::http::{Answer, Call, Http, Repo};
pub use self::webhook::queue_branch_number;

/// The shortest wait between two reads of a pending `merge-async` request.
pub const MERGE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long `merge_change` follows a pending `merge-async` request.
pub const MERGE_BUDGET: Duration = Duration::from_secs(120);

/// Pull requests per `queue_entries` GraphQL query (larger asks are split).
pub const QUEUE_ALIASES_PER_QUERY: usize = 100;

/// `get_change`'s GraphQL query.
const CHANGE_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!) { \
repository(owner: $owner, name: $name) { pullRequest(number: $number) { \
reviewDecision \
reviews(last: 100, states: [APPROVED, CHANGES_REQUESTED, DISMISSED]) { nodes { state author { login } } } \
reviewThreads(first: 100) { totalCount nodes { isResolved } } \
mergeQueueEntry { state position estimatedTimeToMerge } } } }";

/// A GitHub (or GitHub Enterprise) instance.
pub struct GithubClient {
    http: Http,
    webhook_secret: Option<String>,
    merge_poll_interval: Duration,
    merge_budget: Duration,
    /// The token's user, read once.
    user: tokio::sync::OnceCell<crate::ForgeUser>,
}

impl fmt::Debug for GithubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubClient")
            .field("api", &self.http.base().as_str())
            .field("graphql", &self.http.graphql_url().as_str())
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

/// Where a `merge-async` answer leaves the merge.
enum Step {
    Done(MergeOutcome),
    /// Pending: follow the request with this uuid.
    Poll(String),
}

impl GithubClient {
    /// A client for `config.url` (the REST base: `https://api.github.com`,
    /// GitHub Enterprise `https://host/api/v3`) with `config.token`. Errors
    /// name the field (`url`, `token`, `timeout_seconds`);
    /// `config.token_env` must already be resolved
    /// ([`ForgeConfig::resolve_secrets`]).
    pub fn new(config: &ForgeConfig) -> ForgeResult<Self> {
        let settings = config.client_settings(ForgeKind::Github)?;
        let http = Http::new(&config.url, settings.token, settings.timeout)?;
        Ok(Self {
            http,
            webhook_secret: settings.webhook_secret,
            merge_poll_interval: MERGE_POLL_INTERVAL,
            merge_budget: MERGE_BUDGET,
            user: tokio::sync::OnceCell::new(),
        })
    }

    /// Sets how `merge_change` follows a pending request: the wait between
    /// reads (never below [`MERGE_POLL_INTERVAL`]) and the total budget.
    pub fn with_merge_polling(mut self, interval: Duration, budget: Duration) -> Self {
        self.merge_poll_interval = interval.max(MERGE_POLL_INTERVAL);
        self.merge_budget = budget;
        self
    }

    /// (wait between pending reads, total budget) of `merge_change`.
    pub fn merge_polling(&self) -> (Duration, Duration) {
        (self.merge_poll_interval, self.merge_budget)
    }

    /// The REST base every request goes to.
    pub fn api_url(&self) -> &str {
        self.http.base().as_str()
    }

    /// The GraphQL endpoint.
    pub fn graphql_url(&self) -> &str {
        self.http.graphql_url().as_str()
    }

    async fn read_pr(&self, repo: &Repo<'_>, number: u64) -> ForgeResult<wire::PullRequest> {
        let n = number.to_string();
        self.http
            .json(
                &Call::repo(Method::GET, repo, &["pulls", &n]),
                "a pull request",
            )
            .await
    }

    /// The REST view of `pr` completed with CI, reviews, threads and the
    /// queue (open pull requests only; see the module docs).
    async fn complete(&self, repo: &Repo<'_>, pr: wire::PullRequest) -> ForgeResult<ChangeRequest> {
        let mut change = pr.into_change();
        if change.state != ChangeState::Open {
            // Merged or closed: out of any queue, nothing to gate.
            change.queue = QueueObservation::Absent;
            return Ok(change);
        }
        let head = change.head_sha.clone();
        let (view, checks) = tokio::join!(
            self.graphql_view(repo, change.number),
            self.checks(repo, head.as_deref())
        );
        let (ci, pending_checks) = checks?;
        change.ci = ci;
        change.pending_checks = pending_checks;
        change.review = view.review;
        change.approvals = view.approvals;
        change.unresolved_threads = view.unresolved_threads;
        change.queue = view.queue;
        Ok(change)
    }

    /// Reviews, threads and the queue entry from one GraphQL query; a
    /// failed query reads as [`wire::GraphqlView::unknown`].
    async fn graphql_view(&self, repo: &Repo<'_>, number: u64) -> wire::GraphqlView {
        let variables = json!({ "owner": repo.owner, "name": repo.name, "number": number });
        match self.http.graphql(CHANGE_QUERY, variables).await {
            Ok(answer) => wire::graphql_view(&answer).unwrap_or_else(|| {
                tracing::warn!(
                    owner = repo.owner, repo = repo.name, number,
                    errors = %wire::error_messages(&answer),
                    "GraphQL read of the pull request failed; review unknown, queue unobserved"
                );
                wire::GraphqlView::unknown()
            }),
            Err(error) => {
                tracing::warn!(
                    owner = repo.owner, repo = repo.name, number, %error,
                    "GraphQL read of the pull request failed; review unknown, queue unobserved"
                );
                wire::GraphqlView::unknown()
            }
        }
    }

    /// The combined CI of `head`: its check runs (latest per name, all
    /// pages) and commit statuses (latest per context).
    async fn checks(
        &self,
        repo: &Repo<'_>,
        head: Option<&str>,
    ) -> ForgeResult<(crate::model::CiStatus, u32)> {
        let Some(head) = head else {
            return Ok((crate::model::CiStatus::None, 0));
        };
        let (runs_path, status_path) =
            (["commits", head, "check-runs"], ["commits", head, "status"]);
        let (runs, statuses) = tokio::join!(
            self.counted_pages(
                repo,
                &runs_path,
                "a list of check runs",
                |page: wire::CheckRuns| (page.total_count, page.check_runs),
            ),
            self.counted_pages(
                repo,
                &status_path,
                "a combined commit status",
                |page: wire::CombinedStatus| (page.total_count, page.statuses),
            ),
        );
        Ok(wire::combine_checks(&runs?, &statuses?))
    }

    /// Every page of a list GitHub wraps in an object with `total_count`
    /// (check runs, a combined status): read until a short page, or until
    /// `total_count` items when GitHub gives it, at most
    /// [`http::MAX_PAGES`] pages.
    async fn counted_pages<W: serde::de::DeserializeOwned, T>(
        &self,
        repo: &Repo<'_>,
        segments: &[&str],
        what: &str,
        split: impl Fn(W) -> (u64, Vec<T>),
    ) -> ForgeResult<Vec<T>> {
        let mut items = Vec::new();
        for page in 1..=http::MAX_PAGES {
            let call = Call::repo(Method::GET, repo, segments)
                .query("per_page", http::PER_PAGE.to_string())
                .query("page", page.to_string());
            let (total, mut chunk) = split(self.http.json(&call, what).await?);
            let short = chunk.len() < http::PER_PAGE;
            items.append(&mut chunk);
            if short || (total > 0 && items.len() as u64 >= total) {
                break;
            }
        }
        Ok(items)
    }

    /// The branch's head commit, `None` when GitHub says "Branch not found"
    /// (a missing repository is an error, not a missing branch).
    async fn branch(&self, repo: &Repo<'_>, branch: &str) -> ForgeResult<Option<wire::Commit>> {
        let call = Call::repo(Method::GET, repo, &["branches"]).branch_path(branch);
        match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(found) => Ok(Some(found.commit)),
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && error.message.contains("Branch not found") =>
            {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The entries of a tree (recursive), by path.
    async fn tree(
        &self,
        repo: &Repo<'_>,
        tree_sha: &str,
    ) -> ForgeResult<(HashMap<String, wire::TreeEntry>, bool)> {
        let call =
            Call::repo(Method::GET, repo, &["git", "trees", tree_sha]).query("recursive", "1");
        let tree: wire::Tree = self.http.json(&call, "a tree").await?;
        let entries = tree
            .tree
            .into_iter()
            .filter(|e| e.kind != "tree")
            .map(|e| (e.path.clone(), e))
            .collect();
        Ok((entries, tree.truncated))
    }

    async fn blob(&self, repo: &Repo<'_>, content: &[u8]) -> ForgeResult<String> {
        let call = Call::repo(Method::POST, repo, &["git", "blobs"])
            .body(json!({ "content": BASE64.encode(content), "encoding": "base64" }));
        let blob: wire::Sha = self.http.json(&call, "a blob").await?;
        Ok(blob.sha)
    }

    async fn create_ref(&self, repo: &Repo<'_>, branch: &str, sha: &str) -> ForgeResult<()> {
        let call = Call::repo(Method::POST, repo, &["git", "refs"])
            .body(json!({ "ref": format!("refs/heads/{branch}"), "sha": sha }));
        match self.http.send(&call).await {
            Ok(_) => Ok(()),
            Err(error) if error.status == Some(422) && error.message.contains("already exists") => {
                Err(ForgeError {
                    kind: ForgeErrorKind::Conflict,
                    message: format!("branch {branch}: {}", error.message),
                    ..error
                })
            }
            Err(error) => Err(error),
        }
    }

    /// Labels to what `labels` says: the missing ones added in one
    /// request, the extra ones removed one by one (GitHub's
    /// `PUT issues/:n/labels` replaces in one request, but the simulated
    /// GitHub has no such route). Returns the labels afterwards.
    async fn set_labels(
        &self,
        repo: &Repo<'_>,
        number: u64,
        current: &[String],
        wanted: &[String],
    ) -> ForgeResult<Vec<String>> {
        let n = number.to_string();
        let mut labels = current.to_vec();
        let add: Vec<&String> = wanted.iter().filter(|l| !current.contains(l)).collect();
        if !add.is_empty() {
            let call = Call::repo(Method::POST, repo, &["issues", &n, "labels"])
                .body(json!({ "labels": add }));
            let now: Vec<wire::Label> = self.http.json(&call, "a list of labels").await?;
            labels = now.into_iter().map(|l| l.name).collect();
        }
        for extra in current.iter().filter(|l| !wanted.contains(l)) {
            let call = Call::repo(Method::DELETE, repo, &["issues", &n, "labels", extra]);
            match self
                .http
                .json::<Vec<wire::Label>>(&call, "a list of labels")
                .await
            {
                Ok(now) => labels = now.into_iter().map(|l| l.name).collect(),
                // Removed meanwhile: what was wanted.
                Err(error) if error.kind == ForgeErrorKind::NotFound => {
                    labels.retain(|l| l != extra);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(labels)
    }

    /// Follows a pending `merge-async` request until it ends, waiting
    /// `merge_poll_interval` before each read, within `merge_budget`.
    /// Dropping the future stops following (GitHub keeps the request; the
    /// next `merge_change` resumes it through the 409).
    async fn follow_merge(
        &self,
        repo: &Repo<'_>,
        number: u64,
        uuid: &str,
        params: &MergeParams<'_>,
        what: &str,
    ) -> ForgeResult<MergeOutcome> {
        let started = tokio::time::Instant::now();
        let n = number.to_string();
        let call = Call::repo(Method::GET, repo, &["pulls", &n, "merge-async", uuid]);
        loop {
            if started.elapsed() + self.merge_poll_interval > self.merge_budget {
                return Err(ForgeError::unavailable(format!(
                    "{what}: GitHub's merge request {uuid} is still pending after {} s; \
                     GitHub keeps it and the next merge call resumes it",
                    started.elapsed().as_secs()
                )));
            }
            tokio::time::sleep(self.merge_poll_interval).await;
            let answer = self.http.answer(&call).await?;
            if answer.status == StatusCode::NOT_FOUND {
                return Err(ForgeError::new(
                    ForgeErrorKind::NotFound,
                    Some(404),
                    format!("{what}: GitHub's merge request {uuid} expired or is unknown"),
                ));
            }
            if !answer.status.is_success() {
                let error = answer.error();
                return Err(ForgeError {
                    message: format!("{what}: reading merge request {uuid}: {}", error.message),
                    ..error
                });
            }
            match result_step(what, answer.status, &answer.json(), params)? {
                Step::Done(outcome) => return Ok(outcome),
                Step::Poll(_) => continue,
            }
        }
    }
}

/// How a `PUT merge-async` answer continues.
fn submit_step(what: &str, answer: &Answer, params: &MergeParams<'_>) -> ForgeResult<Step> {
    let body = answer.json();
    let status = answer.status;
    match status.as_u16() {
        200..=299 => result_step(what, status, &body, params),
        409 => {
            // A request already exists for this pull request: resume it.
            // A call bound to a head resumes only a request bound to the
            // same head: one naming no head could merge any revision.
            let pending = body.get("status").and_then(Value::as_str) == Some("pending");
            let theirs = wire::details_str(&body, "expected_head_sha");
            let same_head = params
                .expected_head_sha
                .is_none_or(|ours| theirs == Some(ours));
            match wire::details_str(&body, "uuid") {
                Some(uuid) if pending && same_head => Ok(Step::Poll(uuid.to_owned())),
                _ => Err(conflict(what, status, &body)),
            }
        }
        400 if body.get("status").and_then(Value::as_str) == Some("failed") => {
            Err(failed(what, status, &body))
        }
        405 => Err(ForgeError::rejected(
            Some(405),
            format!("{what}: not mergeable: {}", answer.error().message),
        )),
        422 => Err(ForgeError::new(
            ForgeErrorKind::Invalid,
            Some(422),
            format!("{what}: {}", answer.error().message),
        )),
        _ => {
            let error = answer.error();
            Err(ForgeError {
                message: format!("{what}: {}", error.message),
                ..error
            })
        }
    }
}

/// How a `merge-async` result (`{status, details}`) continues. Only
/// `merged` and `enqueued` are successes; anything GitHub may add later
/// fails closed.
fn result_step(
    what: &str,
    status: StatusCode,
    body: &Value,
    params: &MergeParams<'_>,
) -> ForgeResult<Step> {
    match body.get("status").and_then(Value::as_str) {
        Some("merged") => Ok(Step::Done(MergeOutcome::Merged)),
        Some("enqueued") => Ok(Step::Done(MergeOutcome::Queued)),
        Some("pending") => match wire::details_str(body, "uuid") {
            Some(uuid) => {
                let theirs = wire::details_str(body, "expected_head_sha");
                match (theirs, params.expected_head_sha) {
                    (Some(theirs), Some(ours)) if theirs != ours => {
                        Err(conflict(what, status, body))
                    }
                    _ => Ok(Step::Poll(uuid.to_owned())),
                }
            }
            None => Err(ForgeError::rejected(
                Some(status.as_u16()),
                format!(
                    "{what}: GitHub answered pending without details.uuid; \
                     the request cannot be followed"
                ),
            )),
        },
        Some("failed") => Err(failed(what, status, body)),
        other => Err(ForgeError::rejected(
            Some(status.as_u16()),
            format!(
                "{what}: GitHub answered status {}; not taken as merged or queued",
                other.map_or_else(|| "(none)".to_owned(), |s| format!("{s:?}"))
            ),
        )),
    }
}

/// True when GitHub's message says the head is not the expected one.
fn head_mismatch(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "head branch was modified",
        "expected head",
        "expected_head_sha",
        "head sha",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

fn message_of(body: &Value) -> String {
    wire::details_str(body, "message")
        .or_else(|| body.get("message").and_then(Value::as_str))
        .unwrap_or("no message")
        .to_owned()
}

/// A `failed` merge request: `Conflict` when the head moved, else
/// `Rejected`, with GitHub's `details.message`.
fn failed(what: &str, status: StatusCode, body: &Value) -> ForgeError {
    let message = message_of(body);
    if head_mismatch(&message) {
        return conflict(what, status, body);
    }
    ForgeError::rejected(Some(status.as_u16()), format!("{what} failed: {message}"))
}

fn conflict(what: &str, status: StatusCode, body: &Value) -> ForgeError {
    let mut message = format!("{what}: {}", message_of(body));
    if let Some(expected) = wire::details_str(body, "expected_head_sha") {
        message.push_str(&format!(" (expected head {expected})"));
    }
    ForgeError::new(ForgeErrorKind::Conflict, Some(status.as_u16()), message)
}

fn method_str(method: MergeMethod) -> &'static str {
    match method {
        MergeMethod::Merge => "merge",
        MergeMethod::Squash => "squash",
        MergeMethod::Rebase => "rebase",
    }
}

/// The git file mode for a new blob: as asked, else the existing file's,
/// else a regular file.
fn file_mode(executable: Option<bool>, existing: Option<&wire::TreeEntry>) -> String {
    match executable {
        Some(true) => "100755".to_owned(),
        Some(false) => "100644".to_owned(),
        None => existing
            .map(|e| e.mode.clone())
            .filter(|m| m == "100755")
            .unwrap_or_else(|| "100644".to_owned()),
    }
}

fn tree_entry(path: &str, mode: &str, sha: &str) -> wire::TreeEntry {
    wire::TreeEntry {
        path: path.to_owned(),
        mode: mode.to_owned(),
        kind: "blob".to_owned(),
        sha: sha.to_owned(),
    }
}

/// Whether `path` is a directory among `files` (a directory exists while it holds a file).
fn is_directory(files: &HashMap<String, wire::TreeEntry>, path: &str) -> bool {
    let prefix = format!("{path}/");
    files.keys().any(|p| p.starts_with(&prefix))
}

/// The file at `path`, refusing a directory or a missing path (GitLab: "A file with this name
/// doesn't exist").
fn existing_file<'a>(
    files: &'a HashMap<String, wire::TreeEntry>,
    op: &str,
    path: &str,
) -> ForgeResult<&'a wire::TreeEntry> {
    if is_directory(files, path) {
        return Err(ForgeError::invalid(format!(
            "{op} {path}: {path} is a directory on the base branch; only files can be changed"
        )));
    }
    files.get(path).ok_or_else(|| {
        ForgeError::invalid(format!(
            "{op} {path}: {path} does not exist on the base branch"
        ))
    })
}

/// Refuses to write a file where a directory is, or below a file.
fn check_file_path(
    files: &HashMap<String, wire::TreeEntry>,
    op: &str,
    path: &str,
) -> ForgeResult<()> {
    if is_directory(files, path) {
        return Err(ForgeError::invalid(format!(
            "{op} {path}: {path} is a directory on the base branch"
        )));
    }
    let mut end = 0;
    while let Some(slash) = path[end..].find('/') {
        end += slash;
        let parent = &path[..end];
        if files.contains_key(parent) {
            return Err(ForgeError::invalid(format!(
                "{op} {path}: {parent} is a file on the base branch"
            )));
        }
        end += 1;
    }
    Ok(())
}

fn delete_entry(path: &str) -> Value {
    json!({ "path": path, "mode": "100644", "type": "blob", "sha": Value::Null })
}

#[async_trait]
impl Forge for GithubClient {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Github
    }

    /// `GET /user`, once: later calls answer from memory; a failed read is
    /// not kept, the next call asks again.
    async fn current_user(&self) -> ForgeResult<crate::ForgeUser> {
        self.user
            .get_or_try_init(|| async {
                let user: wire::User = self
                    .http
                    .json(&Call::new(Method::GET, &["user"]), "a user")
                    .await?;
                Ok(crate::ForgeUser {
                    id: user.id,
                    username: user.login,
                })
            })
            .await
            .cloned()
    }

    /// `GET repos/{owner}/{repo}` → `full_name` (GitHub resolves the names
    /// case-insensitively).
    async fn project_path(&self, project: &str) -> ForgeResult<String> {
        let repo = Repo::parse(project)?;
        let found: wire::Repository = self
            .http
            .json(&Call::repo(Method::GET, &repo, &[]), "a repository")
            .await?;
        Ok(found.full_name)
    }

    /// Classic protection (`protected` of an existing branch), else the
    /// rulesets that would apply to the name (`GET rules/branches/:branch`,
    /// which answers for branches that do not exist yet): any rule but
    /// the content-only ones ([`wire::BranchRule::protects`]) protects. A
    /// 404 from the rules endpoint (a server without rulesets) means no
    /// rules; a missing repository is an error.
    async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        let repo = Repo::parse(project)?;
        let call = Call::repo(Method::GET, &repo, &["branches"]).branch_path(branch);
        match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(found) if found.protected => return Ok(true),
            Ok(_) => {}
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && error.message.contains("Branch not found") => {}
            Err(error) => return Err(error),
        }
        let call = Call::repo(Method::GET, &repo, &["rules", "branches"]).branch_path(branch);
        match self
            .http
            .list::<wire::BranchRule>(call, "a list of branch rules")
            .await
        {
            Ok(rules) => Ok(rules.iter().any(wire::BranchRule::protects)),
            Err(error) if error.kind == ForgeErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn branch_head(&self, project: &str, branch: &str) -> ForgeResult<Option<String>> {
        let repo = Repo::parse(project)?;
        Ok(self.branch(&repo, branch).await?.map(|commit| commit.sha))
    }

    /// The Git data API: the base branch's head and tree; a blob per new
    /// content (base64); one tree on top of the base tree (a delete is
    /// `sha: null`, a move deletes the old path and adds the new one, a
    /// chmod re-adds the existing blob with mode `100755`/`100644`); a
    /// commit whose parent is the base head; then the branch is created
    /// (`POST git/refs`, an existing branch is [`ForgeErrorKind::Conflict`])
    /// or force-moved (`PATCH git/refs/heads/:branch`, `force: true`;
    /// created when missing).
    async fn commit_files(&self, request: &CommitRequest<'_>) -> ForgeResult<String> {
        let repo = Repo::parse(request.project)?;
        let base = self
            .branch(&repo, request.base_branch)
            .await?
            .ok_or_else(|| {
                ForgeError::new(
                    ForgeErrorKind::NotFound,
                    None,
                    format!(
                        "base branch {} does not exist in {}",
                        request.base_branch, request.project
                    ),
                )
            })?;
        // The base tree's files, changed action by action: a delete or move takes only a file
        // that exists (GitHub's `sha: null` on a directory would remove all of it), and a
        // file never replaces a directory or sits under a file (GitHub's tree API would silently
        // do either); GitLab's commits API refuses all of these.
        let (mut files, truncated) = self.tree(&repo, &base.commit.tree.sha).await?;
        if truncated {
            return Err(ForgeError::new(
                ForgeErrorKind::Rejected,
                None,
                format!(
                    "the tree of {} at {} is too large for GitHub to list (truncated); the \
                     files to change cannot be checked",
                    request.project, request.base_branch
                ),
            ));
        }
        let mut entries: Vec<Value> = Vec::new();
        for action in request.actions {
            let path = action.path.as_str();
            let op = action.op.as_str();
            match action.op {
                FileOp::Create | FileOp::Update => {
                    let content = action.content.as_deref().ok_or_else(|| {
                        ForgeError::invalid(format!("{op} {path}: content required"))
                    })?;
                    check_file_path(&files, op, path)?;
                    let sha = self.blob(&repo, content).await?;
                    let mode = file_mode(action.execute_filemode, files.get(path));
                    entries.push(json!({ "path": path, "mode": mode, "type": "blob", "sha": sha }));
                    files.insert(path.to_owned(), tree_entry(path, &mode, &sha));
                }
                FileOp::Delete => {
                    existing_file(&files, op, path)?;
                    entries.push(delete_entry(path));
                    files.remove(path);
                }
                FileOp::Move => {
                    let previous = action.previous_path.as_deref().ok_or_else(|| {
                        ForgeError::invalid(format!("move {path}: previous_path required"))
                    })?;
                    let old = existing_file(&files, op, previous)?.clone();
                    let rest: HashMap<String, wire::TreeEntry> = files
                        .iter()
                        .filter(|(p, _)| p.as_str() != previous)
                        .map(|(p, e)| (p.clone(), e.clone()))
                        .collect();
                    check_file_path(&rest, op, path)?;
                    let (sha, mode) = match action.content.as_deref() {
                        Some(content) => (
                            self.blob(&repo, content).await?,
                            file_mode(action.execute_filemode, Some(&old)),
                        ),
                        None => (
                            old.sha.clone(),
                            file_mode(action.execute_filemode, Some(&old)),
                        ),
                    };
                    entries.push(delete_entry(previous));
                    entries.push(json!({ "path": path, "mode": mode, "type": "blob", "sha": sha }));
                    files = rest;
                    files.insert(path.to_owned(), tree_entry(path, &mode, &sha));
                }
                FileOp::Chmod => {
                    let old = existing_file(&files, op, path)?.clone();
                    let executable = action.execute_filemode.ok_or_else(|| {
                        ForgeError::invalid(format!("chmod {path}: execute_filemode required"))
                    })?;
                    let mode = file_mode(Some(executable), None);
                    entries.push(
                        json!({ "path": path, "mode": mode, "type": "blob", "sha": old.sha }),
                    );
                    files.insert(path.to_owned(), tree_entry(path, &mode, &old.sha));
                }
            }
        }
        let tree: wire::Sha = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["git", "trees"])
                    .body(json!({ "base_tree": base.commit.tree.sha, "tree": entries })),
                "a tree",
            )
            .await?;
        let commit: wire::Sha = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["git", "commits"]).body(json!({
                    "message": request.message,
                    "tree": tree.sha,
                    "parents": [base.sha],
                })),
                "a commit",
            )
            .await?;
        match request.mode {
            CommitMode::CreateBranch => self.create_ref(&repo, request.branch, &commit.sha).await?,
            CommitMode::ForceUpdate => {
                let call = Call::repo(Method::PATCH, &repo, &["git", "refs", "heads"])
                    .branch_path(request.branch)
                    .body(json!({ "sha": commit.sha, "force": true }));
                match self.http.send(&call).await {
                    Ok(_) => {}
                    Err(error)
                        if error.status == Some(422)
                            && error.message.contains("does not exist") =>
                    {
                        self.create_ref(&repo, request.branch, &commit.sha).await?;
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(commit.sha)
    }

    /// True when the two commits' trees are identical (`git diff base
    /// head` is empty: merging would change nothing), like the GitLab
    /// client's straight compare. GitHub's compare is a merge-base diff
    /// (`base...head`), which shows the branch's own commits even when
    /// the base already holds the same content, so the trees are compared
    /// instead.
    async fn diff_is_empty(&self, project: &str, base: &str, head: &str) -> ForgeResult<bool> {
        let repo = Repo::parse(project)?;
        let read = |reference: &str| {
            let call = Call::repo(Method::GET, &repo, &["commits", reference]);
            async move { self.http.json::<wire::Commit>(&call, "a commit").await }
        };
        let (base, head) = tokio::join!(read(base), read(head));
        Ok(base?.commit.tree.sha == head?.commit.tree.sha)
    }

    /// The open pull request from `source_branch` (of the repository's
    /// owner) with the lowest number, read in full (`get_change`).
    async fn find_open_change(
        &self,
        project: &str,
        source_branch: &str,
    ) -> ForgeResult<Option<ChangeRequest>> {
        let repo = Repo::parse(project)?;
        let call = Call::repo(Method::GET, &repo, &["pulls"])
            .query("state", "open")
            .query("head", format!("{}:{source_branch}", repo.owner));
        let open: Vec<Value> = self.http.list(call, "a list of pull requests").await?;
        let first = open
            .iter()
            .filter(|pr| {
                pr.get("state").and_then(Value::as_str) == Some("open")
                    && pr.pointer("/head/ref").and_then(Value::as_str) == Some(source_branch)
            })
            .filter_map(|pr| pr.get("number").and_then(Value::as_u64))
            .min();
        match first {
            Some(number) => self.get_change(project, number).await.map(Some),
            None => Ok(None),
        }
    }

    /// `POST pulls`, then the labels; "a pull request already exists" is
    /// [`ForgeErrorKind::Conflict`].
    async fn create_change(&self, request: &NewChange<'_>) -> ForgeResult<ChangeRequest> {
        let repo = Repo::parse(request.project)?;
        let call = Call::repo(Method::POST, &repo, &["pulls"]).body(json!({
            "title": request.title,
            "head": request.source_branch,
            "base": request.target_branch,
            "body": request.description,
        }));
        let pr: wire::PullRequest = match self.http.json(&call, "a pull request").await {
            Ok(pr) => pr,
            Err(error) if error.status == Some(422) && error.message.contains("already exists") => {
                return Err(ForgeError {
                    kind: ForgeErrorKind::Conflict,
                    ..error
                });
            }
            Err(error) => return Err(error),
        };
        let number = pr.number;
        let mut change = self.complete(&repo, pr).await?;
        if !request.labels.is_empty() {
            change.labels = self
                .set_labels(&repo, number, &change.labels, request.labels)
                .await?;
        }
        Ok(change)
    }

    /// Title, body and state through `PATCH pulls/:n`; labels are made
    /// exactly `labels` (added and removed through the issues API).
    async fn update_change(
        &self,
        project: &str,
        number: u64,
        update: &ChangeUpdate<'_>,
    ) -> ForgeResult<ChangeRequest> {
        let repo = Repo::parse(project)?;
        let mut body = serde_json::Map::new();
        if let Some(title) = update.title {
            body.insert("title".into(), json!(title));
        }
        if let Some(description) = update.description {
            body.insert("body".into(), json!(description));
        }
        if let Some(open) = update.open {
            body.insert("state".into(), json!(if open { "open" } else { "closed" }));
        }
        let pr = if body.is_empty() {
            self.read_pr(&repo, number).await?
        } else {
            let n = number.to_string();
            self.http
                .json(
                    &Call::repo(Method::PATCH, &repo, &["pulls", &n]).body(Value::Object(body)),
                    "a pull request",
                )
                .await?
        };
        let mut change = self.complete(&repo, pr).await?;
        if let Some(labels) = update.labels {
            change.labels = self
                .set_labels(&repo, number, &change.labels, labels)
                .await?;
        }
        Ok(change)
    }

    async fn get_change(&self, project: &str, number: u64) -> ForgeResult<ChangeRequest> {
        let repo = Repo::parse(project)?;
        let pr = self.read_pr(&repo, number).await?;
        self.complete(&repo, pr).await
    }

    /// One GraphQL query, an alias per pull request
    /// (`pr7: pullRequest(number: 7) { mergeQueueEntry { … } }`). A pull
    /// request the answer has an error for (missing, no access) is
    /// `Unobserved`; `null` is `Absent`. A failed request is an error.
    async fn queue_entries(
        &self,
        project: &str,
        numbers: &[u64],
    ) -> ForgeResult<BTreeMap<u64, QueueObservation>> {
        let repo = Repo::parse(project)?;
        let unique: Vec<u64> = numbers
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut observed = BTreeMap::new();
        for chunk in unique.chunks(QUEUE_ALIASES_PER_QUERY) {
            let aliases: Vec<String> = chunk
                .iter()
                .map(|n| {
                    format!(
                        "pr{n}: pullRequest(number: {n}) {{ mergeQueueEntry {{ state position estimatedTimeToMerge }} }}"
                    )
                })
                .collect();
            let query = format!(
                "query($owner: String!, $name: String!) {{ repository(owner: $owner, name: $name) {{ {} }} }}",
                aliases.join(" ")
            );
            let answer = self
                .http
                .graphql(&query, json!({ "owner": repo.owner, "name": repo.name }))
                .await?;
            let Some(data) = answer.pointer("/data/repository").filter(|r| r.is_object()) else {
                return Err(wire::graphql_error(
                    &format!("merge queue entries of {project}"),
                    &answer,
                ));
            };
            let paths = wire::error_paths(&answer);
            for n in chunk {
                let alias = format!("pr{n}");
                let observation =
                    if wire::errored_at(&paths, &["repository", &alias, "mergeQueueEntry"]) {
                        QueueObservation::Unobserved
                    } else {
                        match data.get(&alias).filter(|pr| pr.is_object()) {
                            Some(pr) => wire::queue_observation(pr.get("mergeQueueEntry")),
                            None => QueueObservation::Unobserved,
                        }
                    };
                observed.insert(*n, observation);
            }
        }
        Ok(observed)
    }

    /// `PUT pulls/:n/merge-async` with `merge_action: default` (GitHub
    /// picks the merge queue when the base branch requires it), the head
    /// bound through `sha`. `merged` is [`MergeOutcome::Merged`] (also for
    /// an already merged pull request), `enqueued` [`MergeOutcome::Queued`];
    /// `pending` is followed through `GET merge-async/:uuid`; a 409 for a
    /// request already pending resumes that request (no second `PUT`).
    ///
    /// Errors: a moved head is [`ForgeErrorKind::Conflict`]; `failed`
    /// carries GitHub's `details.message` (`Rejected`); 405 is `Rejected`,
    /// 422 `Invalid`; a request that expired while followed is `NotFound`;
    /// `pending` without a uuid and any unknown status fail closed
    /// (`Rejected`); a request still pending after the budget is
    /// `Unavailable`.
    async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let mut body = json!({ "merge_action": "default" });
        if let Some(method) = request.method {
            body["merge_method"] = json!(method_str(method));
        }
        if let Some(sha) = request.expected_head_sha {
            body["sha"] = json!(sha);
        }
        if let Some(message) = request.commit_message {
            body["commit_message"] = json!(message);
        }
        let what = format!("merge of {project}#{number}");
        let call = Call::repo(Method::PUT, &repo, &["pulls", &n, "merge-async"]).body(body);
        // The budget bounds the whole call: a read started just before it
        // ends does not get its own full request timeout on top.
        let merge = async {
            let answer = self.http.answer(&call).await?;
            match submit_step(&what, &answer, request)? {
                Step::Done(outcome) => Ok(outcome),
                Step::Poll(uuid) => {
                    self.follow_merge(&repo, number, &uuid, request, &what)
                        .await
                }
            }
        };
        tokio::time::timeout(self.merge_budget, merge)
            .await
            .unwrap_or_else(|_| {
                Err(ForgeError::unavailable(format!(
                    "{what}: no final answer from GitHub within the {} s budget; \
                     a pending request stays with GitHub and the next merge call resumes it",
                    self.merge_budget.as_secs()
                )))
            })
    }

    async fn create_note(&self, project: &str, number: u64, body: &str) -> ForgeResult<NoteRef> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let note: Value = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["issues", &n, "comments"])
                    .body(json!({ "body": body })),
                "a comment",
            )
            .await?;
        let id = note.get("id").and_then(Value::as_u64).ok_or_else(|| {
            ForgeError::rejected(None, "GitHub answered a new comment without an id")
        })?;
        Ok(NoteRef {
            id,
            url: note
                .get("html_url")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The pull request's issue comments, oldest first (GitHub's order).
    async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let call = Call::repo(Method::GET, &repo, &["issues", &n, "comments"]);
        let comments: Vec<Value> = self.http.list(call, "a list of comments").await?;
        comments
            .into_iter()
            .map(|c| {
                let id = c.get("id").and_then(Value::as_u64).ok_or_else(|| {
                    ForgeError::rejected(None, "GitHub listed a comment without an id")
                })?;
                Ok(Note {
                    id,
                    body: c
                        .get("body")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    author: c
                        .pointer("/user/login")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                })
            })
            .collect()
    }

    /// `PATCH issues/comments/:id` (comment ids are unique per repository;
    /// `number` is not needed).
    async fn update_note(
        &self,
        project: &str,
        _number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()> {
        let repo = Repo::parse(project)?;
        let id = note_id.to_string();
        let _: serde::de::IgnoredAny = self
            .http
            .json(
                &Call::repo(Method::PATCH, &repo, &["issues", "comments", &id])
                    .body(json!({ "body": body })),
                "a comment",
            )
            .await?;
        Ok(())
    }

    fn parse_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection> {
        webhook::parse(self.webhook_secret.as_deref(), headers, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            headers: reqwest::header::HeaderMap::new(),
            body: serde_json::to_vec(&body).expect("json"),
        }
    }

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn merge_answers_map_to_outcomes_and_errors() {
        let bound = MergeParams {
            expected_head_sha: Some(SHA),
            ..MergeParams::default()
        };
        let step = |status: u16, body: Value| submit_step("m", &answer(status, body), &bound);
        assert!(matches!(
            step(200, json!({"status": "merged"})),
            Ok(Step::Done(MergeOutcome::Merged))
        ));
        assert!(matches!(
            step(200, json!({"status": "enqueued"})),
            Ok(Step::Done(MergeOutcome::Queued))
        ));
        assert!(matches!(
            step(202, json!({"status": "pending", "details": {"uuid": "u1", "expected_head_sha": SHA}})),
            Ok(Step::Poll(uuid)) if uuid == "u1"
        ));
        assert!(matches!(
            step(409, json!({"status": "pending", "details": {"uuid": "u2", "expected_head_sha": SHA}})),
            Ok(Step::Poll(uuid)) if uuid == "u2"
        ));
        // A request binding no head is resumed only by a call binding none.
        let unbound = json!({"status": "pending", "details": {"uuid": "u4"}});
        assert!(matches!(
            step(409, unbound.clone()).err().map(|e| e.kind),
            Some(ForgeErrorKind::Conflict)
        ));
        assert!(matches!(
            submit_step("m", &answer(409, unbound), &MergeParams::default()),
            Ok(Step::Poll(uuid)) if uuid == "u4"
        ));
        let other_head = step(
            409,
            json!({"status": "pending", "details": {"uuid": "u3", "expected_head_sha": "f".repeat(40)}}),
        )
        .err()
        .expect("another head's request is not resumed");
        assert_eq!(other_head.kind, ForgeErrorKind::Conflict);
        let mismatch = step(
            409,
            json!({"message": "Head branch was modified", "details": {"expected_head_sha": SHA}}),
        )
        .err()
        .expect("head mismatch");
        assert_eq!(mismatch.kind, ForgeErrorKind::Conflict);
        assert!(mismatch.message.contains(SHA), "{}", mismatch.message);
        let no_uuid = step(202, json!({"status": "pending", "details": {}}))
            .err()
            .expect("pending without uuid");
        assert_eq!(no_uuid.kind, ForgeErrorKind::Rejected);
        assert!(
            no_uuid.message.contains("details.uuid"),
            "{}",
            no_uuid.message
        );
        let failed = step(
            200,
            json!({"status": "failed", "details": {"message": "Rules violated"}}),
        )
        .err()
        .expect("failed");
        assert_eq!(failed.kind, ForgeErrorKind::Rejected);
        assert!(
            failed.message.contains("Rules violated"),
            "{}",
            failed.message
        );
        let unknown = step(200, json!({"status": "scheduled"}))
            .err()
            .expect("unknown status fails closed");
        assert_eq!(unknown.kind, ForgeErrorKind::Rejected);
        assert!(
            unknown.message.contains("\"scheduled\""),
            "{}",
            unknown.message
        );
        let not_mergeable = step(405, json!({"message": "Pull Request is not mergeable"}))
            .err()
            .expect("405");
        assert_eq!(not_mergeable.kind, ForgeErrorKind::Rejected);
        assert!(
            not_mergeable
                .message
                .contains("Pull Request is not mergeable")
        );
        let invalid = step(422, json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": "merge_method", "code": "invalid"}]}))
            .err()
            .expect("422");
        assert_eq!(invalid.kind, ForgeErrorKind::Invalid);
        assert!(
            invalid.message.contains("merge_method"),
            "{}",
            invalid.message
        );
    }

    #[test]
    fn merge_polling_never_below_one_second() {
        let config = ForgeConfig::literal(ForgeKind::Github, "https://api.github.com", "t", "s");
        let client = GithubClient::new(&config)
            .expect("client")
            .with_merge_polling(Duration::from_millis(10), Duration::from_secs(5));
        assert_eq!(
            client.merge_polling(),
            (Duration::from_secs(1), Duration::from_secs(5))
        );
        let default = GithubClient::new(&config).expect("client");
        assert_eq!(default.merge_polling(), (MERGE_POLL_INTERVAL, MERGE_BUDGET));
    }

    #[test]
    fn config_errors_name_the_field() {
        let mut config = ForgeConfig::literal(
            ForgeKind::Github,
            "https://ghe.example.com/api/v3",
            "t",
            "s",
        );
        let client = GithubClient::new(&config).expect("valid");
        assert_eq!(client.api_url(), "https://ghe.example.com/api/v3");
        assert_eq!(client.graphql_url(), "https://ghe.example.com/api/graphql");
        // The shared checks (token, timeout) are ForgeConfig::client_settings'.
        config.token = None;
        let error = GithubClient::new(&config).expect_err("no token");
        assert!(error.message.starts_with("token: "), "{}", error.message);
        config.token = Some("t".into());
        config.url = "not a url".into();
        let error = GithubClient::new(&config).expect_err("bad url");
        assert!(error.message.starts_with("url: "), "{}", error.message);
        config.url = "https://api.github.com".into();
        config.kind = ForgeKind::Gitlab;
        let error = GithubClient::new(&config).expect_err("wrong kind");
        assert!(error.message.starts_with("kind: "), "{}", error.message);
    }

    #[test]
    fn file_modes_follow_the_request_then_the_existing_file() {
        let entry = |mode: &str| wire::TreeEntry {
            path: "x".into(),
            mode: mode.into(),
            kind: "blob".into(),
            sha: SHA.into(),
        };
        assert_eq!(file_mode(None, None), "100644");
        assert_eq!(file_mode(None, Some(&entry("100755"))), "100755");
        assert_eq!(file_mode(None, Some(&entry("120000"))), "100644");
        assert_eq!(file_mode(Some(false), Some(&entry("100755"))), "100644");
        assert_eq!(file_mode(Some(true), None), "100755");
    }
}
