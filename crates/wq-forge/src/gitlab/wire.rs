//! GitLab's JSON (the fields this client reads) and how it maps onto the
//! forge-neutral model.

use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::{ForgeError, ForgeResult};
use crate::http_util::null_default;
use crate::model::{
    ChangeRequest, ChangeState, CiJob, CiStatus, Mergeable, QueueEntry, QueueObservation,
    ReviewDecision,
};

#[derive(Debug, Deserialize)]
pub struct Id {
    pub id: u64,
}

/// `GET /user`.
#[derive(Debug, Deserialize)]
pub struct User {
    pub id: u64,
    pub username: String,
}

/// One entry of `GET /projects/:id/protected_branches`: a branch name or
/// a wildcard (`release/*`).
#[derive(Debug, Deserialize)]
pub struct ProtectedBranch {
    pub name: String,
}

/// Whether a protected-branch name covers `branch`: equal, or a wildcard
/// whose `*`s match any (possibly empty) run of characters, `/` included,
/// as GitLab matches them; everything else is literal.
pub fn protected_name_matches(pattern: &str, branch: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let Some((last, middle)) = rest.split_last() else {
        return pattern == branch;
    };
    let Some(mut remaining) = branch.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last)
}

#[derive(Debug, Deserialize)]
pub struct CommitRef {
    pub id: String,
}

#[derive(Debug, Deserialize)]
pub struct Branch {
    pub commit: CommitRef,
}

/// `POST /projects/:id/repository/commits`: the commit, with the lines it
/// changes against its parent (`stats`, which the answer carries unless
/// the request turns it off).
#[derive(Debug, Deserialize)]
pub struct CreatedCommit {
    pub id: String,
    #[serde(default)]
    pub stats: Option<CommitStats>,
}

#[derive(Debug, Deserialize)]
pub struct CommitStats {
    #[serde(default, deserialize_with = "null_default")]
    pub total: u64,
}

#[derive(Debug, Deserialize)]
pub struct Compare {
    #[serde(deserialize_with = "null_default")]
    pub diffs: Vec<serde_json::Value>,
    /// True when GitLab gave up computing the diff (the list is then not
    /// the whole answer).
    #[serde(default, deserialize_with = "null_default")]
    pub compare_timeout: bool,
}

/// The project settings the client acts on.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectSettings {
    /// Premium; absent on instances without merge trains.
    #[serde(default, deserialize_with = "null_default")]
    pub merge_trains_enabled: bool,
    /// `merge`, `rebase_merge` or `ff`.
    #[serde(default, deserialize_with = "null_default")]
    pub merge_method: String,
    /// The project's own spelling of its path.
    #[serde(default, deserialize_with = "null_default")]
    pub path_with_namespace: String,
}

#[derive(Debug, Deserialize)]
pub struct Pipeline {
    pub id: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub status: String,
}

#[derive(Debug, Deserialize)]
pub struct MergeRequest {
    pub iid: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub web_url: String,
    pub state: String,
    #[serde(default)]
    pub draft: Option<bool>,
    #[serde(default)]
    pub work_in_progress: Option<bool>,
    #[serde(default, deserialize_with = "null_default")]
    pub title: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    #[serde(default, deserialize_with = "null_default")]
    pub labels: Vec<String>,
    pub source_branch: String,
    pub target_branch: String,
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default)]
    pub squash_commit_sha: Option<String>,
    #[serde(default)]
    pub head_pipeline: Option<Pipeline>,
    #[serde(default)]
    pub detailed_merge_status: Option<String>,
    #[serde(default)]
    pub merge_status: Option<String>,
    #[serde(default)]
    pub blocking_discussions_resolved: Option<bool>,
    #[serde(default)]
    pub author: Option<NoteAuthor>,
}

/// Pipeline statuses that will still change on their own.
fn pipeline_active(status: &str) -> bool {
    matches!(
        status,
        "created" | "waiting_for_resource" | "preparing" | "pending" | "running" | "scheduled"
    )
}

/// `detailed_merge_status` values that mean "still computing".
fn merge_status_pending(status: &str) -> bool {
    matches!(
        status,
        "checking" | "unchecked" | "preparing" | "approvals_syncing"
    )
}

impl MergeRequest {
    /// The commit a merge gave the target branch (a squash merge without
    /// a merge commit names its squash commit).
    pub fn merged_commit(&self) -> Option<String> {
        if self.state != "merged" {
            return None;
        }
        self.merge_commit_sha
            .clone()
            .or_else(|| self.squash_commit_sha.clone())
            .filter(|sha| !sha.is_empty())
    }

    /// The forge-neutral view. `queue` is what the caller learnt about the
    /// merge train (only `get_change` reads it).
    ///
    /// Review, mergeability and threads all come from the one
    /// `detailed_merge_status` word GitLab computes, so they cost no extra
    /// request. GitLab reports the first failing check only: an MR that
    /// lacks approvals *and* has a running pipeline says
    /// `ci_still_running`, and review then reads `NotRequired` until the
    /// pipeline ends. That is safe because every such word also makes
    /// `mergeable` `No`/`Unknown`. The approvals themselves come from
    /// `GET .../approvals` ([`Approvals::apply`], `get_change` of open
    /// merge requests); without it `approvals` is 0, `approved_by` empty
    /// and `required_approvals` `None`.
    pub fn into_change(self, queue: QueueObservation) -> ForgeResult<ChangeRequest> {
        let merge_commit_sha = self.merged_commit();
        let state = match self.state.as_str() {
            "opened" => ChangeState::Open,
            "closed" => ChangeState::Closed,
            "merged" => ChangeState::Merged,
            "locked" => ChangeState::Locked,
            other => {
                return Err(ForgeError::rejected(
                    None,
                    format!("merge request !{}: unknown state {other:?}", self.iid),
                ));
            }
        };
        let merge_status = self
            .detailed_merge_status
            .or(self.merge_status)
            .unwrap_or_default();
        let (pipeline_id, ci, pending_checks) = match &self.head_pipeline {
            Some(pipeline) => (
                Some(pipeline.id),
                CiStatus::from_forge(&pipeline.status),
                u32::from(pipeline_active(&pipeline.status)),
            ),
            None => (None, CiStatus::None, 0),
        };
        let review = match merge_status.as_str() {
            "not_approved" | "approvals_syncing" => ReviewDecision::ReviewRequired,
            "requested_changes" => ReviewDecision::ChangesRequested,
            _ => ReviewDecision::NotRequired,
        };
        let mergeable = match merge_status.as_str() {
            "mergeable" => Mergeable::Yes,
            status if merge_status_pending(status) => Mergeable::Unknown,
            _ => Mergeable::No,
        };
        let unresolved = self.blocking_discussions_resolved == Some(false)
            || merge_status == "discussions_not_resolved";
        Ok(ChangeRequest {
            number: self.iid,
            url: self.web_url,
            state,
            draft: self.draft.or(self.work_in_progress).unwrap_or(false),
            title: self.title,
            description: self.description,
            labels: self.labels,
            source_branch: self.source_branch,
            target_branch: self.target_branch,
            head_sha: self.sha.filter(|sha| !sha.is_empty()),
            pipeline_id,
            ci,
            pending_checks,
            review,
            approvals: 0,
            required_approvals: None,
            approved_by: Vec::new(),
            mergeable,
            merge_status,
            unresolved_threads: u32::from(unresolved),
            queue,
            author: self
                .author
                .map(|a| a.username)
                .filter(|name| !name.is_empty()),
            merge_commit_sha,
            review_read: true,
        })
    }
}

/// `GET /projects/:id/merge_requests/:iid/approvals`.
#[derive(Debug, Deserialize)]
pub struct Approvals {
    #[serde(default, deserialize_with = "null_default")]
    pub approved_by: Vec<Approver>,
    #[serde(default, deserialize_with = "null_default")]
    pub approvals_required: u32,
    #[serde(default, deserialize_with = "null_default")]
    pub approvals_left: u32,
}

/// `GET /projects/:id/approvals`: only what ties approvals to a head.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ApprovalSettings {
    /// A push clears the merge request's approvals; absent reads as no.
    #[serde(default, deserialize_with = "null_default")]
    pub reset_approvals_on_push: bool,
}

/// One `approved_by` entry.
#[derive(Debug, Deserialize)]
pub struct Approver {
    pub user: NoteAuthor,
}

impl Approvals {
    /// Approvers, counts and the review decision onto `change`: approvals
    /// still missing mean `ReviewRequired` whatever the status word says
    /// (it names only the first unmet check); all given, `Approved` when
    /// the project requires some, else the status word's decision stands.
    pub fn apply(self, change: &mut ChangeRequest) {
        let mut approved_by: Vec<String> = self
            .approved_by
            .into_iter()
            .map(|a| a.user.username)
            .filter(|name| !name.is_empty())
            .collect();
        approved_by.sort();
        approved_by.dedup();
        change.approvals = u32::try_from(approved_by.len()).unwrap_or(u32::MAX);
        change.approved_by = approved_by;
        change.required_approvals = Some(self.approvals_required);
        if change.review == ReviewDecision::ChangesRequested {
            return;
        }
        if self.approvals_left > 0 {
            change.review = ReviewDecision::ReviewRequired;
        } else if self.approvals_required > 0 && change.review == ReviewDecision::NotRequired {
            change.review = ReviewDecision::Approved;
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct NoteAuthor {
    #[serde(default, deserialize_with = "null_default")]
    pub username: String,
}

#[derive(Debug, Deserialize)]
pub struct Note {
    pub id: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub body: String,
    pub author: Option<NoteAuthor>,
    #[serde(default, deserialize_with = "null_default")]
    pub system: bool,
}

#[derive(Debug, Deserialize)]
pub struct Job {
    pub id: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub status: String,
    #[serde(default)]
    pub failure_reason: Option<String>,
    #[serde(default)]
    pub pipeline: Option<Id>,
    #[serde(default)]
    pub retried: Option<bool>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// The commit the job ran on (`commit.id`).
    #[serde(default)]
    pub commit: Option<JobCommit>,
}

/// A job's `commit`.
#[derive(Debug, Deserialize)]
pub struct JobCommit {
    pub id: String,
}

impl Job {
    /// `pipeline_id` is used when the job JSON names none.
    pub fn into_ci_job(self, pipeline_id: Option<u64>) -> ForgeResult<CiJob> {
        let pipeline_id = self.pipeline.map(|p| p.id).or(pipeline_id).ok_or_else(|| {
            ForgeError::rejected(None, format!("job {}: no pipeline.id", self.id))
        })?;
        let finished_at = match self.finished_at.as_deref() {
            None | Some("") => None,
            Some(text) => Some(OffsetDateTime::parse(text, &Rfc3339).map_err(|e| {
                ForgeError::rejected(
                    None,
                    format!("job {}: finished_at {text:?} is not RFC 3339: {e}", self.id),
                )
            })?),
        };
        Ok(CiJob {
            id: self.id,
            name: self.name,
            stage: self.stage.filter(|s| !s.is_empty()),
            failure_reason: self.failure_reason.filter(|r| !r.is_empty()),
            status: self.status,
            pipeline_id,
            retried: self.retried.unwrap_or(false),
            finished_at,
            head_sha: self.commit.map(|c| c.id).filter(|id| !id.is_empty()),
        })
    }
}

/// Marks every job older than another job of the same name as retried
/// (for GitLab versions whose job JSON has no `retried` field).
pub fn mark_retried(jobs: &mut [CiJob], had_field: bool) {
    if had_field {
        return;
    }
    let newest: std::collections::HashMap<&str, u64> =
        jobs.iter().fold(Default::default(), |mut newest, job| {
            let entry = newest.entry(job.name.as_str()).or_insert(job.id);
            *entry = (*entry).max(job.id);
            newest
        });
    let retried: Vec<bool> = jobs
        .iter()
        .map(|job| newest.get(job.name.as_str()).is_some_and(|&id| id > job.id))
        .collect();
    for (job, retried) in jobs.iter_mut().zip(retried) {
        job.retried = retried;
    }
}

#[derive(Debug, Deserialize)]
pub struct CarMergeRequest {
    pub iid: u64,
}

/// One merge train car (`GET /projects/:id/merge_trains`).
#[derive(Debug, Deserialize)]
pub struct TrainCar {
    pub merge_request: Option<CarMergeRequest>,
    #[serde(default, deserialize_with = "null_default")]
    pub target_branch: String,
    #[serde(default, deserialize_with = "null_default")]
    pub status: String,
    #[serde(default)]
    pub pipeline: Option<Pipeline>,
}

impl TrainCar {
    pub fn iid(&self) -> Option<u64> {
        self.merge_request.as_ref().map(|mr| mr.iid)
    }

    /// Cars still on their way (not `merged` / `skip_merged`).
    pub fn is_active(&self) -> bool {
        !matches!(self.status.as_str(), "merged" | "skip_merged")
    }

    /// The car as a queue entry: `idle`/`stale` wait for a pipeline
    /// (`queued`), `fresh` runs one (`awaiting_checks`, or by its result
    /// `mergeable`/`unmergeable`), `merging` is `locked`.
    pub fn entry(&self, position: Option<i64>) -> QueueEntry {
        let pipeline = self.pipeline.as_ref().map(|p| p.status.as_str());
        let state = match self.status.as_str() {
            "idle" | "stale" => "queued".to_owned(),
            "fresh" => match pipeline.map(CiStatus::from_forge) {
                Some(CiStatus::Success) => "mergeable".to_owned(),
                Some(CiStatus::Failed | CiStatus::Canceled) => "unmergeable".to_owned(),
                _ => "awaiting_checks".to_owned(),
            },
            "merging" => "locked".to_owned(),
            other => other.to_ascii_lowercase(),
        };
        QueueEntry {
            state,
            position: position.filter(|p| *p > 0),
            eta_seconds: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_names_match_exactly_or_by_wildcard_across_slashes() {
        assert!(protected_name_matches("main", "main"));
        assert!(!protected_name_matches("main", "Main"));
        assert!(!protected_name_matches("main", "main-2"));
        assert!(protected_name_matches("release/*", "release/1.0"));
        assert!(protected_name_matches("release/*", "release/a/b"));
        assert!(!protected_name_matches("release/*", "release"));
        assert!(protected_name_matches("*-stable", "16-2-stable"));
        assert!(protected_name_matches("*", "wq/anything"));
        assert!(protected_name_matches("a*b*c", "a/1/b/2/c"));
        assert!(!protected_name_matches("a*b*c", "a/1/c"));
        assert!(!protected_name_matches("ab*ba", "aba"));
        assert!(!protected_name_matches("release/*", "wq/release/1"));
        // Other glob characters are literal in GitLab's names.
        assert!(!protected_name_matches("v?", "v1"));
        assert!(protected_name_matches("v?", "v?"));
    }
    use serde_json::json;

    fn mr(detailed: &str, pipeline: Option<&str>) -> MergeRequest {
        let mut value = json!({
            "iid": 4, "state": "opened", "web_url": "u", "title": "t", "description": null,
            "labels": ["a"], "source_branch": "s", "target_branch": "main", "sha": "abc",
            "detailed_merge_status": detailed, "blocking_discussions_resolved": true,
        });
        if let Some(status) = pipeline {
            value["head_pipeline"] = json!({"id": 9, "status": status});
        }
        serde_json::from_value(value).expect("merge request JSON")
    }

    #[test]
    fn merge_status_words_map_to_review_mergeable_and_threads() {
        let cases = [
            ("mergeable", ReviewDecision::NotRequired, Mergeable::Yes, 0),
            (
                "not_approved",
                ReviewDecision::ReviewRequired,
                Mergeable::No,
                0,
            ),
            (
                "approvals_syncing",
                ReviewDecision::ReviewRequired,
                Mergeable::Unknown,
                0,
            ),
            (
                "requested_changes",
                ReviewDecision::ChangesRequested,
                Mergeable::No,
                0,
            ),
            (
                "checking",
                ReviewDecision::NotRequired,
                Mergeable::Unknown,
                0,
            ),
            (
                "unchecked",
                ReviewDecision::NotRequired,
                Mergeable::Unknown,
                0,
            ),
            (
                "preparing",
                ReviewDecision::NotRequired,
                Mergeable::Unknown,
                0,
            ),
            (
                "ci_still_running",
                ReviewDecision::NotRequired,
                Mergeable::No,
                0,
            ),
            (
                "discussions_not_resolved",
                ReviewDecision::NotRequired,
                Mergeable::No,
                1,
            ),
            ("need_rebase", ReviewDecision::NotRequired, Mergeable::No, 0),
            (
                "some_future_word",
                ReviewDecision::NotRequired,
                Mergeable::No,
                0,
            ),
        ];
        for (word, review, mergeable, threads) in cases {
            let change = mr(word, None)
                .into_change(QueueObservation::Unobserved)
                .expect(word);
            assert_eq!(change.review, review, "{word}");
            assert_eq!(change.mergeable, mergeable, "{word}");
            assert_eq!(change.unresolved_threads, threads, "{word}");
            assert_eq!(change.merge_status, word);
        }
    }

    #[test]
    fn head_pipeline_gives_ci_and_pending_checks() {
        let none = mr("mergeable", None)
            .into_change(QueueObservation::Unobserved)
            .expect("mr");
        assert_eq!(
            (none.pipeline_id, none.ci, none.pending_checks),
            (None, CiStatus::None, 0)
        );
        for (status, ci, pending) in [
            ("created", CiStatus::Pending, 1),
            ("pending", CiStatus::Pending, 1),
            ("running", CiStatus::Running, 1),
            ("success", CiStatus::Success, 0),
            ("failed", CiStatus::Failed, 0),
            ("canceled", CiStatus::Canceled, 0),
            ("manual", CiStatus::Pending, 0),
        ] {
            let change = mr("x", Some(status))
                .into_change(QueueObservation::Unobserved)
                .expect(status);
            assert_eq!(change.pipeline_id, Some(9));
            assert_eq!(
                (change.ci, change.pending_checks),
                (ci, pending),
                "{status}"
            );
        }
    }

    #[test]
    fn unknown_state_and_nulls() {
        let mut value = serde_json::to_value(json!({
            "iid": 1, "state": "weird", "source_branch": "s", "target_branch": "t",
            "labels": null, "title": null, "web_url": null,
        }))
        .expect("json");
        let weird: MergeRequest = serde_json::from_value(value.clone()).expect("parses");
        let error = weird
            .into_change(QueueObservation::Unobserved)
            .expect_err("unknown state");
        assert!(error.message.contains("\"weird\""), "{}", error.message);
        value["state"] = json!("locked");
        value["work_in_progress"] = json!(true);
        let locked: MergeRequest = serde_json::from_value(value).expect("parses");
        let change = locked
            .into_change(QueueObservation::Absent)
            .expect("locked");
        assert_eq!(change.state, ChangeState::Locked);
        assert!(change.draft, "work_in_progress counts as draft");
        assert!(change.labels.is_empty());
        assert_eq!(change.queue, QueueObservation::Absent);
    }

    #[test]
    fn train_cars_normalize() {
        let car = |status: &str, pipeline: Option<&str>| -> TrainCar {
            let mut value =
                json!({"merge_request": {"iid": 1}, "target_branch": "main", "status": status});
            if let Some(p) = pipeline {
                value["pipeline"] = json!({"id": 1, "status": p});
            }
            serde_json::from_value(value).expect("car")
        };
        assert_eq!(car("idle", None).entry(Some(1)).state, "queued");
        assert_eq!(car("stale", Some("canceled")).entry(None).state, "queued");
        assert_eq!(
            car("fresh", Some("running")).entry(None).state,
            "awaiting_checks"
        );
        assert_eq!(car("fresh", Some("success")).entry(None).state, "mergeable");
        assert_eq!(
            car("fresh", Some("failed")).entry(None).state,
            "unmergeable"
        );
        assert_eq!(car("merging", None).entry(None).state, "locked");
        assert_eq!(car("NewState", None).entry(None).state, "newstate");
        assert_eq!(car("idle", None).entry(Some(0)).position, None);
        assert!(!car("merged", None).is_active());
        assert!(car("fresh", None).is_active());
    }

    #[test]
    fn retried_is_derived_when_the_field_is_missing() {
        let job = |id: u64, name: &str| CiJob {
            id,
            name: name.into(),
            stage: None,
            status: "failed".into(),
            failure_reason: None,
            pipeline_id: 1,
            retried: false,
            finished_at: None,
            head_sha: None,
        };
        let mut jobs = vec![job(5, "unit"), job(3, "unit"), job(4, "lint")];
        mark_retried(&mut jobs, false);
        let retried: Vec<bool> = jobs.iter().map(|j| j.retried).collect();
        assert_eq!(retried, [false, true, false]);
    }

    #[test]
    fn approvals_give_the_approvers_and_override_a_status_word_that_hides_them() {
        let approvals = |by: &[&str], required: u32, left: u32| -> Approvals {
            serde_json::from_value(json!({
                "approved_by": by.iter().map(|u| json!({"user": {"username": u, "id": 1}})).collect::<Vec<_>>(),
                "approvals_required": required,
                "approvals_left": left,
                "approved": left == 0,
            }))
            .expect("approvals JSON")
        };
        // The pipeline runs: GitLab says ci_still_running, not not_approved.
        let mut running = mr("ci_still_running", Some("running"))
            .into_change(QueueObservation::Unobserved)
            .expect("change");
        approvals(&["b", "a"], 2, 1).apply(&mut running);
        assert_eq!(running.review, ReviewDecision::ReviewRequired);
        assert_eq!(
            (running.approvals, running.required_approvals),
            (2, Some(2))
        );
        assert_eq!(running.approved_by, vec!["a".to_owned(), "b".to_owned()]);

        let mut done = mr("mergeable", None)
            .into_change(QueueObservation::Unobserved)
            .expect("change");
        approvals(&["a", "b"], 2, 0).apply(&mut done);
        assert_eq!(done.review, ReviewDecision::Approved);

        let mut optional = mr("mergeable", None)
            .into_change(QueueObservation::Unobserved)
            .expect("change");
        approvals(&["a"], 0, 0).apply(&mut optional);
        assert_eq!(optional.review, ReviewDecision::NotRequired);
        assert_eq!(optional.approved_by, vec!["a".to_owned()]);

        let mut changes = mr("requested_changes", None)
            .into_change(QueueObservation::Unobserved)
            .expect("change");
        approvals(&[], 0, 0).apply(&mut changes);
        assert_eq!(changes.review, ReviewDecision::ChangesRequested);
    }
}
