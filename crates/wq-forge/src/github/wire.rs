//! GitHub's JSON (the fields this client reads) and how it maps onto the
//! forge-neutral model.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::error::ForgeError;
use crate::http_util::null_default;
use crate::model::{
    ChangeRequest, ChangeState, CiStatus, Mergeable, QueueEntry, QueueObservation, ReviewDecision,
};

#[derive(Debug, Deserialize)]
pub struct Sha {
    pub sha: String,
}

/// `GET /repos/{o}/{r}/branches/{b}` and `GET /repos/{o}/{r}/commits/{ref}`.
#[derive(Debug, Deserialize)]
pub struct Commit {
    pub sha: String,
    pub commit: CommitDetail,
}

#[derive(Debug, Deserialize)]
pub struct CommitDetail {
    pub tree: Sha,
}

#[derive(Debug, Deserialize)]
pub struct Branch {
    pub commit: Commit,
    /// Classic branch protection.
    #[serde(default, deserialize_with = "null_default")]
    pub protected: bool,
}

/// `GET /user`.
#[derive(Debug, Deserialize)]
pub struct User {
    pub id: u64,
    pub login: String,
}

/// A user reference (`user` of a pull request).
#[derive(Debug, Deserialize)]
pub struct Login {
    #[serde(default, deserialize_with = "null_default")]
    pub login: String,
}

/// `GET /repos/{o}/{r}`: the repository's own spelling of its name.
#[derive(Debug, Deserialize)]
pub struct Repository {
    pub full_name: String,
}

/// One item of `GET /repos/{o}/{r}/rules/branches/{branch}`.
#[derive(Debug, Deserialize)]
pub struct BranchRule {
    #[serde(rename = "type")]
    pub kind: String,
}

/// One item of `GET /repos/{o}/{r}/rulesets` (a summary: no conditions,
/// no rules).
#[derive(Debug, Deserialize)]
pub struct RulesetSummary {
    /// `active`, `evaluate` or `disabled`.
    #[serde(default, deserialize_with = "null_default")]
    pub enforcement: String,
    /// `branch`, `tag`, `push` or `repository`; older servers leave it out.
    #[serde(default)]
    pub target: Option<String>,
}

impl RulesetSummary {
    /// Whether its rules may apply to a branch name: everything but a
    /// ruleset that says it enforces nothing (`evaluate`, `disabled`: the
    /// rules endpoint leaves their rules out) or that it targets tags,
    /// pushes or the repository itself. An unknown enforcement or a missing
    /// target may.
    pub fn may_apply_to_branches(&self) -> bool {
        !matches!(self.enforcement.as_str(), "evaluate" | "disabled")
            && !matches!(self.target.as_deref(), Some("tag" | "push" | "repository"))
    }
}

/// Ruleset rule types that only constrain metadata or content of what is
/// pushed (commit messages, author e-mails, names, file paths and sizes);
/// every other rule type — `creation`, `update`, `deletion`,
/// `non_fast_forward`, `pull_request`, `required_status_checks`,
/// `required_linear_history`, `required_signatures`, `merge_queue`, ... and
/// any type GitHub adds later — counts as protecting the branch.
const CONTENT_ONLY_RULES: &[&str] = &[
    "commit_message_pattern",
    "commit_author_email_pattern",
    "committer_email_pattern",
    "branch_name_pattern",
    "tag_name_pattern",
    "file_path_restriction",
    "file_extension_restriction",
    "max_file_path_length",
    "max_file_size",
];

impl BranchRule {
    /// True unless the rule only constrains content ([`CONTENT_ONLY_RULES`]).
    pub fn protects(&self) -> bool {
        !CONTENT_ONLY_RULES.contains(&self.kind.as_str())
    }
}

/// `GET /repos/{o}/{r}/git/trees/{sha}?recursive=1`.
#[derive(Debug, Deserialize)]
pub struct Tree {
    #[serde(default, deserialize_with = "null_default")]
    pub tree: Vec<TreeEntry>,
    #[serde(default, deserialize_with = "null_default")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TreeEntry {
    pub path: String,
    pub mode: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub sha: String,
}

#[derive(Debug, Deserialize)]
pub struct Label {
    pub name: String,
    /// The GraphQL node id (REST answers carry it).
    #[serde(default)]
    pub node_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct BranchRef {
    #[serde(rename = "ref")]
    pub name: String,
    #[serde(default)]
    pub sha: Option<String>,
}

/// A pull request (`GET /repos/{o}/{r}/pulls/{n}`; the list entity lacks
/// `mergeable`, `mergeable_state` and `merged`).
#[derive(Debug, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    /// The GraphQL node id.
    #[serde(default)]
    pub node_id: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub html_url: String,
    pub state: String,
    #[serde(default, deserialize_with = "null_default")]
    pub draft: bool,
    #[serde(default, deserialize_with = "null_default")]
    pub merged: bool,
    #[serde(default)]
    pub merged_at: Option<String>,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub title: String,
    #[serde(default, deserialize_with = "null_default")]
    pub body: String,
    #[serde(default, deserialize_with = "null_default")]
    pub labels: Vec<Label>,
    pub head: BranchRef,
    pub base: BranchRef,
    #[serde(default)]
    pub mergeable: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub mergeable_state: String,
    /// Who opened it.
    #[serde(default)]
    pub user: Option<Login>,
}

impl PullRequest {
    pub fn change_state(&self) -> ChangeState {
        if self.merged || self.merged_at.is_some() {
            ChangeState::Merged
        } else if self.state == "open" {
            ChangeState::Open
        } else {
            ChangeState::Closed
        }
    }

    /// The REST view alone: CI, reviews and threads are not in it (`None`,
    /// `ReviewRequired`, 0) and the queue is `Unobserved`. `get_change`
    /// fills them in.
    pub fn into_change(self) -> ChangeRequest {
        let state = self.change_state();
        ChangeRequest {
            number: self.number,
            url: self.html_url,
            state,
            draft: self.draft,
            title: self.title,
            description: self.body,
            labels: self.labels.into_iter().map(|l| l.name).collect(),
            source_branch: self.head.name,
            target_branch: self.base.name,
            head_sha: self.head.sha.filter(|sha| !sha.is_empty()),
            pipeline_id: None,
            ci: CiStatus::None,
            pending_checks: 0,
            review: ReviewDecision::ReviewRequired,
            approvals: 0,
            required_approvals: None,
            approved_by: Vec::new(),
            mergeable: match self.mergeable {
                Some(true) => Mergeable::Yes,
                Some(false) => Mergeable::No,
                None => Mergeable::Unknown,
            },
            merge_status: self.mergeable_state,
            unresolved_threads: 0,
            queue: QueueObservation::Unobserved,
            author: self.user.map(|u| u.login).filter(|login| !login.is_empty()),
            merge_commit_sha: self
                .merge_commit_sha
                .filter(|sha| state == ChangeState::Merged && !sha.is_empty()),
            review_read: true,
        }
    }
}

/// `GET /repos/{o}/{r}/commits/{sha}/check-runs` (latest run per name).
#[derive(Debug, Deserialize)]
pub struct CheckRuns {
    #[serde(default, deserialize_with = "null_default")]
    pub total_count: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub check_runs: Vec<CheckRun>,
}

#[derive(Debug, Deserialize)]
pub struct CheckRun {
    #[serde(default, deserialize_with = "null_default")]
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
}

/// `GET /repos/{o}/{r}/commits/{sha}/status`: the latest status per
/// context. Its `state` is `pending` when there is no status at all, so
/// only the list is read.
#[derive(Debug, Deserialize)]
pub struct CombinedStatus {
    #[serde(default, deserialize_with = "null_default")]
    pub total_count: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub statuses: Vec<CommitStatus>,
}

#[derive(Debug, Deserialize)]
pub struct CommitStatus {
    #[serde(default, deserialize_with = "null_default")]
    pub state: String,
}

/// One check's result in GitHub's words (a check run's conclusion or
/// status, a commit status's state): GitHub counts `neutral` and `skipped`
/// as passing, `error`/`startup_failure` as failing, `stale` (never
/// finished) as pending.
pub fn check_word(word: &str) -> CiStatus {
    match word {
        "neutral" | "skipped" => CiStatus::Success,
        "error" | "startup_failure" => CiStatus::Failed,
        "stale" | "queued" | "requested" | "waiting" | "pending" => CiStatus::Pending,
        other => CiStatus::from_forge(other),
    }
}

/// The combined CI of a head from its check runs and commit statuses:
/// nothing at all is `None`; any failure is `Failed`; else any cancelled
/// `Canceled`; else any running `Running`; else any waiting `Pending`;
/// else `Success`. `pending_checks` counts the checks not finished.
pub fn combine_checks(runs: &[CheckRun], statuses: &[CommitStatus]) -> (CiStatus, u32) {
    let mut results: Vec<CiStatus> = Vec::with_capacity(runs.len() + statuses.len());
    for run in runs {
        let result = if run.status == "completed" {
            check_word(run.conclusion.as_deref().unwrap_or("stale"))
        } else {
            check_word(&run.status)
        };
        results.push(result);
    }
    results.extend(statuses.iter().map(|s| check_word(&s.state)));
    if results.is_empty() {
        return (CiStatus::None, 0);
    }
    let pending = results
        .iter()
        .filter(|r| matches!(r, CiStatus::Pending | CiStatus::Running))
        .count();
    let ci = [
        CiStatus::Failed,
        CiStatus::Canceled,
        CiStatus::Running,
        CiStatus::Pending,
    ]
    .into_iter()
    .find(|wanted| results.contains(wanted))
    .unwrap_or(CiStatus::Success);
    (ci, u32::try_from(pending).unwrap_or(u32::MAX))
}

/// Normalizes a GraphQL `mergeQueueEntry` (`state`, `position`,
/// `estimatedTimeToMerge`): known states lower-case with underscores,
/// unknown ones lower-cased; a position ≤ 0 and a negative estimate are
/// `None`.
pub fn queue_entry(state: &str, position: Option<i64>, eta_seconds: Option<i64>) -> QueueEntry {
    let state = match state {
        "QUEUED" => "queued".to_owned(),
        "AWAITING_CHECKS" => "awaiting_checks".to_owned(),
        "MERGEABLE" => "mergeable".to_owned(),
        "UNMERGEABLE" => "unmergeable".to_owned(),
        "LOCKED" => "locked".to_owned(),
        other => other.to_ascii_lowercase(),
    };
    QueueEntry {
        state,
        position: position.filter(|p| *p > 0),
        eta_seconds: eta_seconds.filter(|s| *s >= 0),
    }
}

/// A `mergeQueueEntry` value: `null` is authoritatively `Absent`; an
/// object without a readable `state` is `Unobserved`.
pub fn queue_observation(value: Option<&Value>) -> QueueObservation {
    match value {
        None => QueueObservation::Unobserved,
        Some(Value::Null) => QueueObservation::Absent,
        Some(entry) => match entry.get("state").and_then(Value::as_str) {
            Some(state) if !state.is_empty() => QueueObservation::Entry(queue_entry(
                state,
                entry.get("position").and_then(Value::as_i64),
                entry.get("estimatedTimeToMerge").and_then(Value::as_i64),
            )),
            _ => QueueObservation::Unobserved,
        },
    }
}

/// The `errors[].path` of a GraphQL answer, as strings.
pub fn error_paths(answer: &Value) -> Vec<Vec<String>> {
    answer
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|error| {
                    error
                        .get("path")
                        .and_then(Value::as_array)
                        .map(|path| {
                            path.iter()
                                .map(|p| match p {
                                    Value::String(s) => s.clone(),
                                    other => other.to_string(),
                                })
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The messages of a GraphQL answer's `errors`, joined.
pub fn error_messages(answer: &Value) -> String {
    answer
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e.get("message").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

/// True when an error touches `path`: its own path lies on it (an
/// ancestor, the field itself or below) or it has no path (an error about
/// the whole document touches everything).
pub fn errored_at(paths: &[Vec<String>], path: &[&str]) -> bool {
    paths.iter().any(|error| {
        let n = error.len().min(path.len());
        error[..n]
            .iter()
            .zip(&path[..n])
            .all(|(got, want)| got == want)
    })
}

/// What `get_change`'s GraphQL query read about one pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphqlView {
    pub review: ReviewDecision,
    pub approvals: u32,
    /// Logins whose latest decisive review approves, sorted.
    pub approved_by: Vec<String>,
    pub unresolved_threads: u32,
    pub queue: QueueObservation,
}

impl GraphqlView {
    /// What is assumed when the GraphQL read failed: not known to be
    /// approved (the approval gate fails closed), no approvals counted,
    /// threads not counted, queue unobserved.
    pub fn unknown() -> Self {
        Self {
            review: ReviewDecision::ReviewRequired,
            approvals: 0,
            approved_by: Vec::new(),
            unresolved_threads: 0,
            queue: QueueObservation::Unobserved,
        }
    }

    /// `change` with this view's review, threads and queue, and the head's
    /// combined CI.
    pub fn apply(self, change: &mut ChangeRequest, ci: CiStatus, pending_checks: u32) {
        change.ci = ci;
        change.pending_checks = pending_checks;
        change.review = self.review;
        change.approvals = self.approvals;
        change.approved_by = self.approved_by;
        change.unresolved_threads = self.unresolved_threads;
        change.queue = self.queue;
    }
}

/// Reads `data.repository.pullRequest` of `get_change`'s query. `None`
/// when the pull request part is missing (the caller then uses
/// [`GraphqlView::unknown`]). Errors below `mergeQueueEntry` only make the
/// queue `Unobserved`; errors on reviews or threads make the review
/// unknown the same way.
pub fn graphql_view(answer: &Value, head: Option<&str>) -> Option<GraphqlView> {
    let pr = answer
        .get("data")?
        .get("repository")?
        .get("pullRequest")
        .filter(|v| v.is_object())?;
    let paths = error_paths(answer);
    let field = |name: &'static str| ["repository", "pullRequest", name];
    if errored_at(&paths, &field("reviewDecision"))
        || errored_at(&paths, &field("reviews"))
        || errored_at(&paths, &field("reviewThreads"))
    {
        return None;
    }
    let queue = if errored_at(&paths, &field("mergeQueueEntry")) {
        QueueObservation::Unobserved
    } else {
        queue_observation(pr.get("mergeQueueEntry"))
    };
    let reviews = latest_reviews(pr.pointer("/reviews/nodes"));
    let changes_requested = reviews
        .values()
        .any(|review| review.state == "CHANGES_REQUESTED");
    let approving = || {
        reviews
            .iter()
            .filter(|(_, review)| review.state == "APPROVED")
    };
    // A person's approval covers the head it was given for (content pushed
    // after it was not looked at), and only when the person has access to
    // the repository.
    let approved_by: Vec<String> = approving()
        .filter(|(_, review)| head.is_some_and(|head| review.commit == head))
        .filter(|(_, review)| review.by_someone_with_access())
        .map(|(login, _)| (*login).to_owned())
        .collect();
    let approvals = approving().count();
    let review = match pr.get("reviewDecision").and_then(Value::as_str) {
        Some("APPROVED") => ReviewDecision::Approved,
        Some("CHANGES_REQUESTED") => ReviewDecision::ChangesRequested,
        Some(_) => ReviewDecision::ReviewRequired,
        // null: branch protection requires no review. A standing request
        // for changes still holds the merge back.
        None if changes_requested => ReviewDecision::ChangesRequested,
        None => ReviewDecision::NotRequired,
    };
    let threads = pr.get("reviewThreads");
    let nodes = threads
        .and_then(|t| t.get("nodes"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let unresolved = nodes
        .iter()
        .filter(|t| t.get("isResolved").and_then(Value::as_bool) != Some(true))
        .count() as u64;
    // Threads beyond the first page are not read: counted as unresolved.
    let total = threads
        .and_then(|t| t.get("totalCount"))
        .and_then(Value::as_u64)
        .unwrap_or(nodes.len() as u64);
    let unread = total.saturating_sub(nodes.len() as u64);
    Some(GraphqlView {
        review,
        approvals: u32::try_from(approvals).unwrap_or(u32::MAX),
        approved_by,
        unresolved_threads: u32::try_from(unresolved + unread).unwrap_or(u32::MAX),
        queue,
    })
}

/// The whole change request from `get_change`'s query: the pull request's
/// fields, and for an open one its CI (the head's check runs and statuses,
/// combined as [`combine_checks`] does) and the [`graphql_view`]. `None`
/// when the answer does not tell all of it: any error, no pull request,
/// more labels or checks than the page read, or a field missing.
pub fn graphql_change(answer: &Value) -> Option<ChangeRequest> {
    if answer
        .get("errors")
        .and_then(Value::as_array)
        .is_some_and(|errors| !errors.is_empty())
    {
        return None;
    }
    let pr = answer
        .pointer("/data/repository/pullRequest")
        .filter(|v| v.is_object())?;
    let text = |key: &str| pr.get(key).and_then(Value::as_str);
    let state = match text("state")? {
        "MERGED" => ChangeState::Merged,
        "OPEN" => ChangeState::Open,
        _ if pr.get("merged").and_then(Value::as_bool) == Some(true) => ChangeState::Merged,
        _ => ChangeState::Closed,
    };
    let labels = pr.get("labels")?;
    let label_nodes = labels.get("nodes")?.as_array()?;
    if labels.get("totalCount").and_then(Value::as_u64) != Some(label_nodes.len() as u64) {
        return None;
    }
    let head_sha = text("headRefOid")
        .filter(|sha| !sha.is_empty())
        .map(str::to_owned);
    let mut change = ChangeRequest {
        number: pr.get("number")?.as_u64()?,
        url: text("url").unwrap_or_default().to_owned(),
        state,
        draft: pr.get("isDraft").and_then(Value::as_bool).unwrap_or(false),
        title: text("title").unwrap_or_default().to_owned(),
        description: text("body").unwrap_or_default().to_owned(),
        labels: label_nodes
            .iter()
            .filter_map(|label| label.get("name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect(),
        source_branch: text("headRefName")?.to_owned(),
        target_branch: text("baseRefName")?.to_owned(),
        head_sha,
        pipeline_id: None,
        ci: CiStatus::None,
        pending_checks: 0,
        review: ReviewDecision::ReviewRequired,
        approvals: 0,
        required_approvals: None,
        approved_by: Vec::new(),
        mergeable: match text("mergeable") {
            Some("MERGEABLE") => Mergeable::Yes,
            Some("CONFLICTING") => Mergeable::No,
            _ => Mergeable::Unknown,
        },
        // REST's `mergeable_state` words (`clean`, `blocked`, ...).
        merge_status: text("mergeStateStatus")
            .unwrap_or("unknown")
            .to_ascii_lowercase(),
        unresolved_threads: 0,
        queue: QueueObservation::Absent,
        author: pr
            .pointer("/author/login")
            .and_then(Value::as_str)
            .filter(|login| !login.is_empty())
            .map(str::to_owned),
        merge_commit_sha: pr
            .pointer("/mergeCommit/oid")
            .and_then(Value::as_str)
            .filter(|sha| state == ChangeState::Merged && !sha.is_empty())
            .map(str::to_owned),
        review_read: true,
    };
    if state != ChangeState::Open {
        // Merged or closed: out of any queue, nothing to gate.
        return Some(change);
    }
    let (ci, pending) = match pr.get("statusCheckRollup")? {
        // No check run and no status on the head.
        Value::Null => (CiStatus::None, 0),
        rollup => {
            let contexts = rollup.get("contexts")?;
            let nodes = contexts.get("nodes")?.as_array()?;
            if contexts.get("totalCount").and_then(Value::as_u64) != Some(nodes.len() as u64) {
                return None;
            }
            let lower = |node: &Value, key: &str| {
                node.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_ascii_lowercase)
            };
            let mut runs = Vec::new();
            let mut statuses = Vec::new();
            for node in nodes {
                match node.get("__typename").and_then(Value::as_str)? {
                    "CheckRun" => runs.push(CheckRun {
                        status: lower(node, "status")?,
                        conclusion: lower(node, "conclusion"),
                    }),
                    "StatusContext" => statuses.push(CommitStatus {
                        state: lower(node, "state")?,
                    }),
                    _ => return None,
                }
            }
            combine_checks(&runs, &statuses)
        }
    };
    graphql_view(answer, change.head_sha.as_deref())?.apply(&mut change, ci, pending);
    Some(change)
}

/// Each reviewer's latest decisive review (`APPROVED`, `CHANGES_REQUESTED`,
/// `DISMISSED`; the nodes come oldest first) as (state, commit oid), by
/// login, sorted.
fn latest_reviews(nodes: Option<&Value>) -> BTreeMap<&str, LatestReview<'_>> {
    let mut latest = BTreeMap::new();
    for review in nodes.and_then(Value::as_array).into_iter().flatten() {
        let text = |pointer: &str| {
            review
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let (state, author) = (text("/state"), text("/author/login"));
        if !author.is_empty() && matches!(state, "APPROVED" | "CHANGES_REQUESTED" | "DISMISSED") {
            latest.insert(
                author,
                LatestReview {
                    state,
                    commit: text("/commit/oid"),
                    association: text("/authorAssociation"),
                },
            );
        }
    }
    latest
}

/// A reviewer's latest decisive review.
struct LatestReview<'a> {
    state: &'a str,
    /// The commit it was given for.
    commit: &'a str,
    /// The reviewer's `authorAssociation` with the repository.
    association: &'a str,
}

impl LatestReview<'_> {
    /// The reviewer may write to the repository: an approval by anyone
    /// else (any account may review a public repository's pull request)
    /// is nobody's review for the gate.
    fn by_someone_with_access(&self) -> bool {
        matches!(self.association, "OWNER" | "MEMBER" | "COLLABORATOR")
    }
}

/// An unknown or non-object GraphQL answer for one field.
pub fn graphql_error(what: &str, answer: &Value) -> ForgeError {
    let messages = error_messages(answer);
    ForgeError::rejected(
        None,
        if messages.is_empty() {
            format!("GraphQL {what}: the answer has no data")
        } else {
            format!("GraphQL {what}: {messages}")
        },
    )
}

/// A non-empty string in a `merge-async` answer's `details`.
pub fn details_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get("details")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_rulesets_that_say_they_cannot_apply_to_branches_are_passed_over() {
        let may = |summary: Value| {
            serde_json::from_value::<RulesetSummary>(summary)
                .expect("a ruleset summary")
                .may_apply_to_branches()
        };
        let base = |enforcement: &str| json!({"id": 1, "name": "r", "source": "o/r", "enforcement": enforcement});
        assert!(may(base("active")), "no target: maybe a branch ruleset");
        assert!(may(json!({"enforcement": "active", "target": "branch"})));
        assert!(
            may(json!({"enforcement": "enabled", "target": "branch"})),
            "unknown enforcement"
        );
        assert!(
            may(json!({"enforcement": null, "target": "branch"})),
            "no enforcement"
        );
        assert!(may(
            json!({"enforcement": "active", "target": "something_new"})
        ));
        assert!(!may(base("evaluate")));
        assert!(!may(base("disabled")));
        for target in ["tag", "push", "repository"] {
            assert!(
                !may(json!({"enforcement": "active", "target": target})),
                "{target}"
            );
        }
    }

    #[test]
    fn queue_states_normalize() {
        let cases = [
            ("QUEUED", "queued"),
            ("AWAITING_CHECKS", "awaiting_checks"),
            ("MERGEABLE", "mergeable"),
            ("UNMERGEABLE", "unmergeable"),
            ("LOCKED", "locked"),
            ("SOME_NEW_STATE", "some_new_state"),
        ];
        for (github, normalized) in cases {
            assert_eq!(queue_entry(github, Some(1), Some(60)).state, normalized);
        }
        assert_eq!(queue_entry("QUEUED", Some(0), None).position, None);
        assert_eq!(queue_entry("QUEUED", Some(-3), None).position, None);
        assert_eq!(queue_entry("QUEUED", Some(2), None).position, Some(2));
        assert_eq!(queue_entry("QUEUED", None, Some(-1)).eta_seconds, None);
        assert_eq!(queue_entry("QUEUED", None, Some(0)).eta_seconds, Some(0));
        assert_eq!(
            queue_observation(Some(&Value::Null)),
            QueueObservation::Absent
        );
        assert_eq!(queue_observation(None), QueueObservation::Unobserved);
        assert_eq!(
            queue_observation(Some(&json!({"position": 1}))),
            QueueObservation::Unobserved
        );
    }

    #[test]
    fn pull_request_state_mergeable_and_nulls() {
        let pr = |state: &str, merged: bool, mergeable: Value| -> PullRequest {
            serde_json::from_value(json!({
                "number": 3, "html_url": "u", "state": state, "draft": null, "merged": merged,
                "title": "t", "body": null, "labels": null,
                "head": {"ref": "wq/x", "sha": "abc"}, "base": {"ref": "main", "sha": "def"},
                "mergeable": mergeable, "mergeable_state": "unknown",
            }))
            .expect("pull request JSON")
        };
        let unknown = pr("open", false, Value::Null).into_change();
        assert_eq!(unknown.mergeable, Mergeable::Unknown);
        assert_eq!(unknown.state, ChangeState::Open);
        assert_eq!(unknown.description, "");
        assert!(!unknown.draft);
        assert_eq!(unknown.merge_status, "unknown");
        assert_eq!(
            pr("open", false, json!(true)).into_change().mergeable,
            Mergeable::Yes
        );
        assert_eq!(
            pr("open", false, json!(false)).into_change().mergeable,
            Mergeable::No
        );
        assert_eq!(
            pr("closed", true, Value::Null).into_change().state,
            ChangeState::Merged
        );
        assert_eq!(
            pr("closed", false, Value::Null).into_change().state,
            ChangeState::Closed
        );
    }

    fn run(status: &str, conclusion: Option<&str>) -> CheckRun {
        CheckRun {
            status: status.into(),
            conclusion: conclusion.map(str::to_owned),
        }
    }

    fn status(state: &str) -> CommitStatus {
        CommitStatus {
            state: state.into(),
        }
    }

    #[test]
    fn a_graphql_read_tells_the_whole_change_or_nothing() {
        let answer = |pr: Value| json!({ "data": { "repository": { "pullRequest": pr } } });
        let pr = json!({
            "number": 7, "url": "u", "state": "OPEN", "isDraft": false, "merged": false,
            "title": "t", "body": "b", "headRefName": "wq/x", "headRefOid": "abc",
            "baseRefName": "main", "mergeable": "MERGEABLE", "mergeStateStatus": "UNSTABLE",
            "author": { "login": "bot" }, "mergeCommit": null,
            "labels": { "totalCount": 1, "nodes": [{ "name": "l" }] },
            "reviewDecision": null, "reviews": { "nodes": [] },
            "reviewThreads": { "totalCount": 0, "nodes": [] }, "mergeQueueEntry": null,
            "statusCheckRollup": { "contexts": { "totalCount": 2, "nodes": [
                { "__typename": "CheckRun", "status": "IN_PROGRESS", "conclusion": null },
                { "__typename": "StatusContext", "state": "SUCCESS" },
            ] } },
        });
        let change = graphql_change(&answer(pr.clone())).expect("whole");
        assert_eq!(change.number, 7);
        assert_eq!(change.head_sha.as_deref(), Some("abc"));
        assert_eq!((change.ci, change.pending_checks), (CiStatus::Running, 1));
        assert_eq!(change.merge_status, "unstable");
        assert_eq!(change.mergeable, Mergeable::Yes);
        assert_eq!(change.labels, ["l"]);
        assert_eq!(change.queue, QueueObservation::Absent);
        assert_eq!(change.review, ReviewDecision::NotRequired);

        let mut bare = pr.clone();
        bare["statusCheckRollup"] = Value::Null;
        let change = graphql_change(&answer(bare)).expect("no checks");
        assert_eq!((change.ci, change.pending_checks), (CiStatus::None, 0));

        // More checks than the page: the REST reads make it up.
        let mut paged = pr.clone();
        paged["statusCheckRollup"]["contexts"]["totalCount"] = json!(101);
        assert!(graphql_change(&answer(paged)).is_none());
        let mut labels = pr.clone();
        labels["labels"]["totalCount"] = json!(101);
        assert!(graphql_change(&answer(labels)).is_none());
        // Any error, even beside the data.
        let mut failed = answer(pr.clone());
        failed["errors"] =
            json!([{ "message": "x", "path": ["repository", "pullRequest", "mergeQueueEntry"] }]);
        assert!(graphql_change(&failed).is_none());
        assert!(graphql_change(&answer(Value::Null)).is_none());

        // Merged: no CI or review read, out of any queue.
        let mut merged = pr;
        merged["state"] = json!("MERGED");
        merged["merged"] = json!(true);
        merged["mergeCommit"] = json!({ "oid": "def" });
        merged["statusCheckRollup"] = json!({});
        let change = graphql_change(&answer(merged)).expect("merged");
        assert_eq!(change.state, ChangeState::Merged);
        assert_eq!(change.merge_commit_sha.as_deref(), Some("def"));
        assert_eq!(change.ci, CiStatus::None);
    }

    #[test]
    fn checks_and_statuses_combine() {
        assert_eq!(combine_checks(&[], &[]), (CiStatus::None, 0));
        assert_eq!(
            combine_checks(&[run("completed", Some("success"))], &[status("success")]),
            (CiStatus::Success, 0)
        );
        assert_eq!(
            combine_checks(
                &[
                    run("completed", Some("skipped")),
                    run("completed", Some("neutral"))
                ],
                &[]
            ),
            (CiStatus::Success, 0)
        );
        assert_eq!(
            combine_checks(&[run("in_progress", None)], &[status("pending")]),
            (CiStatus::Running, 2)
        );
        assert_eq!(
            combine_checks(&[run("queued", None)], &[]),
            (CiStatus::Pending, 1)
        );
        assert_eq!(
            combine_checks(&[run("completed", Some("success"))], &[status("pending")]),
            (CiStatus::Pending, 1)
        );
        assert_eq!(
            combine_checks(&[run("in_progress", None)], &[status("error")]),
            (CiStatus::Failed, 1)
        );
        assert_eq!(
            combine_checks(&[run("completed", Some("cancelled"))], &[status("success")]),
            (CiStatus::Canceled, 0)
        );
        assert_eq!(
            combine_checks(&[run("completed", Some("timed_out"))], &[]),
            (CiStatus::Failed, 0)
        );
    }

    fn view(pr: Value) -> Option<GraphqlView> {
        graphql_view(
            &json!({"data": {"repository": {"pullRequest": pr}}}),
            Some("head"),
        )
    }

    #[test]
    fn null_review_decision_is_not_required_unless_changes_are_requested() {
        let review = |state: &str, login: &str| json!({"state": state, "author": {"login": login}, "authorAssociation": "COLLABORATOR", "commit": {"oid": "head"}});
        let base = |reviews: Vec<Value>| {
            json!({
                "reviewDecision": null,
                "reviews": {"nodes": reviews},
                "reviewThreads": {"totalCount": 0, "nodes": []},
                "mergeQueueEntry": null,
            })
        };
        let none = view(base(vec![])).expect("view");
        assert_eq!(none.review, ReviewDecision::NotRequired);
        assert_eq!(none.queue, QueueObservation::Absent);
        let approved = view(base(vec![review("APPROVED", "a")])).expect("view");
        assert_eq!(
            (approved.review, approved.approvals),
            (ReviewDecision::NotRequired, 1)
        );
        assert_eq!(approved.approved_by, vec!["a".to_owned()]);
        let changed = view(base(vec![
            review("APPROVED", "a"),
            review("CHANGES_REQUESTED", "b"),
        ]))
        .expect("view");
        assert_eq!(changed.review, ReviewDecision::ChangesRequested);
        let dismissed = view(base(vec![
            review("APPROVED", "a"),
            review("DISMISSED", "a"),
        ]))
        .expect("view");
        assert_eq!(
            (dismissed.review, dismissed.approvals),
            (ReviewDecision::NotRequired, 0)
        );
        assert!(dismissed.approved_by.is_empty());
        // An approval of an older head is GitHub's, not a review of this
        // head.
        let stale = view(base(vec![
            json!({"state": "APPROVED", "author": {"login": "a"}, "commit": {"oid": "older"}}),
            review("APPROVED", "b"),
        ]))
        .expect("view");
        assert_eq!(stale.approvals, 2);
        assert_eq!(stale.approved_by, vec!["b".to_owned()]);
        // Only a reviewer with access to the repository reviews for the
        // gate; GitHub counts every approval.
        let outside = view(base(vec![
            json!({"state": "APPROVED", "author": {"login": "c"}, "authorAssociation": "NONE", "commit": {"oid": "head"}}),
            json!({"state": "APPROVED", "author": {"login": "d"}, "authorAssociation": "CONTRIBUTOR", "commit": {"oid": "head"}}),
            json!({"state": "APPROVED", "author": {"login": "e"}, "authorAssociation": "OWNER", "commit": {"oid": "head"}}),
            json!({"state": "APPROVED", "author": {"login": "f"}, "authorAssociation": "MEMBER", "commit": {"oid": "head"}}),
        ]))
        .expect("view");
        assert_eq!(outside.approvals, 4);
        assert_eq!(outside.approved_by, vec!["e".to_owned(), "f".to_owned()]);
    }

    #[test]
    fn threads_beyond_the_page_count_as_unresolved_and_queue_errors_are_unobserved() {
        let answer = json!({
            "data": {"repository": {"pullRequest": {
                "reviewDecision": "APPROVED",
                "reviews": {"nodes": []},
                "reviewThreads": {"totalCount": 102, "nodes": [{"isResolved": true}, {"isResolved": false}]},
                "mergeQueueEntry": null,
            }}},
            "errors": [{"path": ["repository", "pullRequest", "mergeQueueEntry"], "message": "no access"}],
        });
        let view = graphql_view(&answer, Some("head")).expect("view");
        assert_eq!(view.unresolved_threads, 1 + 100);
        assert_eq!(view.queue, QueueObservation::Unobserved);
        let failed = json!({"data": {"repository": {"pullRequest": null}}, "errors": [{"path": ["repository", "pullRequest"], "message": "x"}]});
        assert_eq!(graphql_view(&failed, None), None);
        let whole = json!({"errors": [{"message": "Something went wrong"}]});
        assert_eq!(graphql_view(&whole, None), None);
    }
}
