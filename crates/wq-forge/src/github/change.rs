//! Pull requests: find, create, update and read one, completed with its
//! CI, reviews, threads and queue entry.

use reqwest::Method;
use serde_json::{Value, json};

use super::GithubClient;
use super::http::{Call, Repo};
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{
    ChangeRequest, ChangeState, ChangeUpdate, LabelCase, LabelChange, NewChange, QueueObservation,
};

/// `get_change`'s GraphQL query: the pull request's whole state in one
/// request (its fields, labels, review decision, reviews, review threads,
/// merge queue entry, and its head's checks and statuses).
const CHANGE_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!) { \
repository(owner: $owner, name: $name) { pullRequest(number: $number) { \
number url state isDraft merged title body headRefName headRefOid baseRefName \
mergeable mergeStateStatus author { login } mergeCommit { oid } \
labels(first: 100) { totalCount nodes { name } } \
reviewDecision \
reviews(last: 100, states: [APPROVED, CHANGES_REQUESTED, DISMISSED]) { nodes { state author { login } authorAssociation commit { oid } } } \
reviewThreads(first: 100) { totalCount nodes { isResolved } } \
mergeQueueEntry { state position estimatedTimeToMerge } \
statusCheckRollup { contexts(first: 100) { totalCount nodes { __typename \
... on CheckRun { status conclusion } ... on StatusContext { state } } } } } } }";

impl GithubClient {
    /// The open pull request from `source_branch` (of the repository's
    /// owner) with the lowest number, read in full (`get_change`).
    pub(super) async fn find_open_change(
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
    /// [`ForgeErrorKind::Conflict`]. The pull request is the one in the
    /// creation's answer (GitHub's REST pull request: no CI, reviews or
    /// threads, so `review_read` is false); the labels are the label call's
    /// answer.
    pub(super) async fn create_change(
        &self,
        request: &NewChange<'_>,
    ) -> ForgeResult<ChangeRequest> {
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
        if let Some(node_id) = &pr.node_id {
            self.keep_created(request.project, number, node_id);
        }
        let mut change = pr.into_change();
        change.review_read = false;
        if !request.labels.is_empty() {
            let labels = LabelChange {
                add: request.labels,
                remove: &[],
            };
            change.labels = self
                .change_labels(&repo, number, &change.labels, labels)
                .await?;
        }
        Ok(change)
    }

    /// Title, body, base and state through `PATCH pulls/:n`; labels added
    /// and removed by name through the issues API; then the pull request
    /// read whole.
    pub(super) async fn update_change(
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
        if let Some(target) = update.target_branch {
            body.insert("base".into(), json!(target));
        }
        if let Some(open) = update.open {
            body.insert("state".into(), json!(if open { "open" } else { "closed" }));
        }
        if !body.is_empty() {
            let n = number.to_string();
            let _: wire::PullRequest = self
                .http
                .json(
                    &Call::repo(Method::PATCH, &repo, &["pulls", &n]).body(Value::Object(body)),
                    "a pull request",
                )
                .await?;
        }
        if let Some(labels) = update.labels {
            self.change_labels(&repo, number, &[], labels).await?;
        }
        self.read_change(&repo, number).await
    }

    pub(super) async fn get_change(
        &self,
        project: &str,
        number: u64,
    ) -> ForgeResult<ChangeRequest> {
        let repo = Repo::parse(project)?;
        self.read_change(&repo, number).await
    }

    /// The pull request's whole state from one GraphQL query. When the
    /// query fails or does not tell everything (errors, more labels or
    /// checks than one page holds), the REST reads make it up (see
    /// [`GithubClient::read_rest`]).
    pub(super) async fn read_change(
        &self,
        repo: &Repo<'_>,
        number: u64,
    ) -> ForgeResult<ChangeRequest> {
        let variables = json!({ "owner": repo.owner, "name": repo.name, "number": number });
        match self.http.graphql(CHANGE_QUERY, variables).await {
            Ok(answer) => match wire::graphql_change(&answer) {
                Some(change) => Ok(change),
                None => self.read_rest(repo, number, Some(&answer)).await,
            },
            Err(error) => {
                tracing::warn!(
                    owner = repo.owner, repo = repo.name, number, %error,
                    "GraphQL read of the pull request failed; review unknown, queue unobserved"
                );
                self.read_rest(repo, number, None).await
            }
        }
    }

    pub(super) async fn read_pr(
        &self,
        repo: &Repo<'_>,
        number: u64,
    ) -> ForgeResult<wire::PullRequest> {
        let n = number.to_string();
        self.http
            .json(
                &Call::repo(Method::GET, repo, &["pulls", &n]),
                "a pull request",
            )
            .await
    }

    /// The REST view of the pull request (`GET pulls/:n`), completed for
    /// an open one with its head's check runs and statuses and with what
    /// the GraphQL `answer` tells of reviews, threads and the queue; a
    /// failed query (or none) reads as [`wire::GraphqlView::unknown`].
    pub(super) async fn read_rest(
        &self,
        repo: &Repo<'_>,
        number: u64,
        answer: Option<&Value>,
    ) -> ForgeResult<ChangeRequest> {
        let pr = self.read_pr(repo, number).await?;
        let mut change = pr.into_change();
        if change.state != ChangeState::Open {
            // Merged or closed: out of any queue, nothing to gate.
            change.queue = QueueObservation::Absent;
            return Ok(change);
        }
        let head = change.head_sha.clone();
        let view = answer
            .and_then(|answer| {
                let view = wire::graphql_view(answer, head.as_deref());
                if view.is_none() {
                    tracing::warn!(
                        owner = repo.owner, repo = repo.name, number,
                        errors = %wire::error_messages(answer),
                        "GraphQL read of the pull request failed; review unknown, queue unobserved"
                    );
                }
                view
            })
            .unwrap_or_else(wire::GraphqlView::unknown);
        let (ci, pending_checks) = self.checks(repo, head.as_deref()).await?;
        view.apply(&mut change, ci, pending_checks);
        Ok(change)
    }

    /// The combined CI of `head`: its check runs (latest per name, all
    /// pages) and commit statuses (latest per context).
    pub(super) async fn checks(
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
    /// (check runs, a combined status), following GitHub's `Link` header
    /// (see [`super::http::Http::pages`]); the items of all pages.
    pub(super) async fn counted_pages<W: serde::de::DeserializeOwned, T>(
        &self,
        repo: &Repo<'_>,
        segments: &[&str],
        what: &str,
        split: impl Fn(W) -> (u64, Vec<T>),
    ) -> ForgeResult<Vec<T>> {
        let call = Call::repo(Method::GET, repo, segments);
        let pages: Vec<W> = self.http.pages(call, what).await?;
        Ok(pages.into_iter().flat_map(|page| split(page).1).collect())
    }

    /// Adds `labels.add` in one request (`POST issues/:n/labels` adds,
    /// leaving the others) and takes each of `labels.remove` off by name;
    /// a label someone else added or removed meanwhile is left as they left
    /// it. Returns the labels afterwards, as the last call answered them
    /// (`current` when no call was made).
    pub(super) async fn change_labels(
        &self,
        repo: &Repo<'_>,
        number: u64,
        current: &[String],
        labels: LabelChange<'_>,
    ) -> ForgeResult<Vec<String>> {
        let n = number.to_string();
        let mut now = current.to_vec();
        if !labels.add.is_empty() {
            let call = Call::repo(Method::POST, repo, &["issues", &n, "labels"])
                .body(json!({ "labels": labels.add }));
            let answer: Vec<wire::Label> = self.http.json(&call, "a list of labels").await?;
            let ids = answer
                .iter()
                .filter_map(|l| Some((l.name.to_lowercase(), l.node_id.clone()?)))
                .collect();
            self.keep_label_ids(&format!("{}/{}", repo.owner, repo.name), Some(ids));
            now = answer.into_iter().map(|l| l.name).collect();
        }
        for extra in labels.remove {
            let call = Call::repo(Method::DELETE, repo, &["issues", &n, "labels", extra]);
            match self
                .http
                .json::<Vec<wire::Label>>(&call, "a list of labels")
                .await
            {
                Ok(answer) => now = answer.into_iter().map(|l| l.name).collect(),
                // Removed meanwhile: what was wanted.
                Err(error) if error.kind == ForgeErrorKind::NotFound => {
                    now.retain(|l| !LabelCase::Insensitive.same(l, extra));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(now)
    }
}
