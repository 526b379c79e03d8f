//! The simulated GitLab data model: projects, merge requests, notes, pipelines, jobs, train cars,
//! and the derived merge-request state every layer reads.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::ci::CiScript;
use crate::repo::{MergeMethod, Repo};
use crate::state::User;

/// Project settings the simulator honours.
#[derive(Debug, Clone)]
pub struct ProjectSettings {
    pub merge_trains_enabled: bool,
    /// `Merge` (GitLab `merge`) or `Rebase` (GitLab `ff`: fast-forward only, else `need_rebase`).
    pub merge_method: MergeMethod,
    pub approvals_required: u32,
    pub only_allow_merge_if_pipeline_succeeds: bool,
    pub only_allow_merge_if_all_discussions_are_resolved: bool,
    /// The project's CI runs merge request pipelines (`rules: - if: $CI_PIPELINE_SOURCE ==
    /// "merge_request_event"`): a push to a branch with an open MR starts a pipeline on
    /// `refs/merge-requests/<iid>/head` instead of the branch.
    pub merge_request_pipelines: bool,
    /// GitLab's "Remove all approvals when commits are added to the source branch"
    /// (`reset_approvals_on_push`, on by default): a new head clears the MR's approvals.
    pub reset_approvals_on_push: bool,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        ProjectSettings {
            merge_trains_enabled: false,
            merge_method: MergeMethod::Merge,
            approvals_required: 0,
            only_allow_merge_if_pipeline_succeeds: true,
            only_allow_merge_if_all_discussions_are_resolved: true,
            merge_request_pipelines: false,
            reset_approvals_on_push: true,
        }
    }
}

/// Where a project's webhooks go.
#[derive(Debug, Clone)]
pub struct HookConfig {
    pub url: String,
    pub secret: String,
}

/// One project.
pub struct Project {
    pub id: u64,
    pub path_with_namespace: String,
    pub repo: Repo,
    pub settings: ProjectSettings,
    pub ci: CiScript,
    pub hook: Option<HookConfig>,
    pub merge_requests: BTreeMap<u64, MergeRequest>,
    pub(super) next_mr_iid: u64,
    pub pipelines: BTreeMap<u64, Pipeline>,
    pub(super) next_pipeline_iid: u64,
    pub jobs: BTreeMap<u64, Job>,
    /// Active cars, in train order (all target branches).
    pub train: Vec<TrainCar>,
    /// Merged cars.
    pub train_history: Vec<TrainCar>,
    /// Protected branch names and wildcards (the default branch from the start).
    pub protected_branches: Vec<ProtectedBranch>,
}

impl Project {
    pub fn name(&self) -> &str {
        self.path_with_namespace
            .rsplit('/')
            .next()
            .unwrap_or(&self.path_with_namespace)
    }

    pub fn namespace(&self) -> &str {
        match self.path_with_namespace.rsplit_once('/') {
            Some((namespace, _)) => namespace,
            None => "",
        }
    }

    pub fn web_url(&self, base: &str) -> String {
        format!("{base}/{}", self.path_with_namespace)
    }
}

/// Options for a new project.
#[derive(Debug, Clone)]
pub struct NewProject {
    pub path: String,
    pub default_branch: String,
    pub settings: ProjectSettings,
    pub jobs: Vec<crate::ci::JobSpec>,
    pub hook: Option<HookConfig>,
}

impl NewProject {
    pub fn new(path: &str) -> NewProject {
        NewProject {
            path: path.to_string(),
            default_branch: "main".to_string(),
            settings: ProjectSettings::default(),
            jobs: CiScript::default_jobs(),
            hook: None,
        }
    }
}

/// One protected branch name or wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedBranch {
    pub id: u64,
    pub name: String,
}

/// Automatic merge configured on an MR.
#[derive(Debug, Clone)]
pub struct AutoMerge {
    /// `merge_when_pipeline_succeeds`, `merge_train` or `add_to_merge_train_when_pipeline_succeeds`.
    pub strategy: String,
    pub user: User,
    pub squash: bool,
    pub remove_source_branch: bool,
    pub commit_message: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MergeRequest {
    pub id: u64,
    pub iid: u64,
    pub project_id: u64,
    pub title: String,
    pub description: String,
    /// `opened`, `closed`, `merged`, `locked`.
    pub state: String,
    pub source_branch: String,
    pub target_branch: String,
    pub labels: Vec<String>,
    pub author: User,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub merged_at: Option<OffsetDateTime>,
    pub closed_at: Option<OffsetDateTime>,
    pub merged_by: Option<User>,
    pub closed_by: Option<User>,
    /// Head of the source branch (kept after the branch is deleted).
    pub sha: String,
    pub merge_commit_sha: Option<String>,
    pub squash_commit_sha: Option<String>,
    pub squash: bool,
    pub force_remove_source_branch: bool,
    pub approved_by: Vec<User>,
    pub reviewers: Vec<User>,
    /// Unresolved blocking discussions (set through the control API).
    pub unresolved_discussions: u32,
    pub auto_merge: Option<AutoMerge>,
    pub merge_error: Option<String>,
    pub notes: Vec<Note>,
}

impl MergeRequest {
    pub fn is_open(&self) -> bool {
        self.state == "opened"
    }

    pub fn draft(&self) -> bool {
        is_draft_title(&self.title)
    }

    pub fn web_url(&self, project: &Project, base: &str) -> String {
        format!("{}/-/merge_requests/{}", project.web_url(base), self.iid)
    }
}

/// GitLab's draft title prefixes: `Draft:`, `[Draft]`, `(Draft)` (case-insensitive).
pub fn is_draft_title(title: &str) -> bool {
    let lower = title.trim_start().to_ascii_lowercase();
    ["draft:", "[draft]", "(draft)", "draft -", "wip:", "[wip]"]
        .iter()
        .any(|prefix| lower.starts_with(prefix))
}

pub fn approvals_left(project: &Project, mr: &MergeRequest) -> u32 {
    project
        .settings
        .approvals_required
        .saturating_sub(mr.approved_by.len() as u32)
}

pub fn has_conflicts(project: &Project, mr: &MergeRequest) -> bool {
    mr.is_open() && project.repo.has_conflicts(&mr.target_branch, &mr.sha)
}

/// GitLab's `detailed_merge_status` (checks in GitLab's order; `ci_*` only when the project
/// requires a successful pipeline).
pub fn detailed_merge_status(project: &Project, mr: &MergeRequest) -> &'static str {
    if !mr.is_open() {
        return "not_open";
    }
    if mr.draft() {
        return "draft_status";
    }
    if project.repo.branch_head(&mr.source_branch).is_none()
        || project.repo.branch_head(&mr.target_branch).is_none()
    {
        return "broken_status";
    }
    if has_conflicts(project, mr) {
        return "conflict";
    }
    if project.settings.merge_method == MergeMethod::Rebase {
        let target = project
            .repo
            .branch_head(&mr.target_branch)
            .unwrap_or_default();
        if !project.repo.is_ancestor(target, &mr.sha) {
            return "need_rebase";
        }
    }
    if project
        .settings
        .only_allow_merge_if_all_discussions_are_resolved
        && mr.unresolved_discussions > 0
    {
        return "discussions_not_resolved";
    }
    if project.settings.only_allow_merge_if_pipeline_succeeds {
        match head_pipeline(project, mr).map(|p| p.status.as_str()) {
            None => return "ci_must_pass",
            Some("success") => {}
            Some("created" | "pending" | "running") => return "ci_still_running",
            Some(_) => return "ci_must_pass",
        }
    }
    if approvals_left(project, mr) > 0 {
        return "not_approved";
    }
    "mergeable"
}

#[derive(Debug, Clone)]
pub struct Note {
    pub id: u64,
    pub body: String,
    pub author: User,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub system: bool,
}

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub id: u64,
    pub iid: u64,
    pub project_id: u64,
    pub sha: String,
    pub ref_name: String,
    pub before_sha: String,
    /// `push`, `merge_request_event`, `web`...
    pub source: String,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`.
    pub status: String,
    pub stages: Vec<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub user: User,
    pub job_ids: Vec<u64>,
    /// Set for merge request and merge train pipelines.
    pub mr_iid: Option<u64>,
}

impl Pipeline {
    pub fn is_finished(&self) -> bool {
        matches!(
            self.status.as_str(),
            "success" | "failed" | "canceled" | "skipped"
        )
    }

    pub fn duration_secs(&self) -> Option<i64> {
        match (self.started_at, self.finished_at) {
            (Some(start), Some(end)) => Some((end - start).whole_seconds()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Job {
    pub id: u64,
    pub pipeline_id: u64,
    pub name: String,
    pub stage: String,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `skipped`.
    pub status: String,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub duration_secs: u64,
    pub failure_reason: Option<String>,
    pub trace: String,
    pub retried: bool,
    pub retries_count: u32,
    pub user: User,
}

impl Job {
    pub fn duration(&self) -> Value {
        match (self.started_at, self.finished_at) {
            (Some(start), Some(end)) => json!((end - start).as_seconds_f64()),
            _ => Value::Null,
        }
    }

    pub fn queued_duration(&self) -> Value {
        match self.started_at {
            Some(start) => json!((start - self.created_at).as_seconds_f64()),
            None => Value::Null,
        }
    }
}

/// The latest (not retried) jobs of a pipeline, in creation order.
pub fn latest_jobs<'a>(project: &'a Project, pipeline: &Pipeline) -> Vec<&'a Job> {
    pipeline
        .job_ids
        .iter()
        .filter_map(|id| project.jobs.get(id))
        .filter(|job| !job.retried)
        .collect()
}

/// The MR's head pipeline: the newest branch pipeline for its source branch at its head sha.
/// The MR's head pipeline: the newest pipeline for its head commit, on its source branch or
/// (a merge request pipeline) on `refs/merge-requests/<iid>/head`.
pub fn head_pipeline<'a>(project: &'a Project, mr: &MergeRequest) -> Option<&'a Pipeline> {
    let mr_ref = mr_head_ref(mr.iid);
    project
        .pipelines
        .values()
        .rev()
        .find(|p| p.sha == mr.sha && (p.ref_name == mr.source_branch || p.ref_name == mr_ref))
}

/// The ref GitLab gives a merge request pipeline.
pub fn mr_head_ref(iid: u64) -> String {
    format!("refs/merge-requests/{iid}/head")
}

#[derive(Debug, Clone)]
pub struct TrainCar {
    pub id: u64,
    pub mr_iid: u64,
    pub target_branch: String,
    pub user: User,
    /// `idle`, `stale`, `fresh`, `merging`, `merged`.
    pub status: String,
    pub pipeline_id: Option<u64>,
    pub base_sha: Option<String>,
    pub train_sha: Option<String>,
    pub squash: bool,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub merged_at: Option<OffsetDateTime>,
}

/// The ref train pipelines run on.
pub fn train_ref(iid: u64) -> String {
    format!("refs/merge-requests/{iid}/train")
}
