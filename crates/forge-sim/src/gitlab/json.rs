//! REST and webhook renderings of the GitLab model.

use serde_json::{Value, json};
use time::OffsetDateTime;

use super::model::{
    Job, MergeRequest, Note, Pipeline, Project, ProtectedBranch, TrainCar, approvals_left,
    detailed_merge_status, has_conflicts, head_pipeline,
};
use crate::repo::{Commit, MergeMethod};
use crate::state::User;

/// GitLab's timestamp format (`2024-01-01T12:00:00.000Z`).
pub fn ts(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

pub fn opt_ts(t: Option<OffsetDateTime>) -> Value {
    t.map(|t| Value::String(ts(t))).unwrap_or(Value::Null)
}

pub fn user_json(user: &User, base: &str) -> Value {
    json!({
        "id": user.id,
        "username": user.username,
        "name": user.name,
        "state": "active",
        "locked": false,
        "avatar_url": Value::Null,
        "web_url": format!("{base}/{}", user.username),
    })
}

pub fn project_json(project: &Project, base: &str) -> Value {
    let web_url = project.web_url(base);
    let merge_method = match project.settings.merge_method {
        MergeMethod::Rebase => "ff",
        MergeMethod::Merge | MergeMethod::Squash => "merge",
    };
    json!({
        "id": project.id,
        "name": project.name(),
        "path": project.name(),
        "path_with_namespace": project.path_with_namespace,
        "name_with_namespace": project.path_with_namespace.replace('/', " / "),
        "namespace": {
            "id": project.id,
            "name": project.namespace(),
            "path": project.namespace(),
            "kind": "group",
            "full_path": project.namespace(),
        },
        "default_branch": project.repo.default_branch(),
        "visibility": "private",
        "web_url": web_url,
        "http_url_to_repo": format!("{web_url}.git"),
        "ssh_url_to_repo": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "merge_method": merge_method,
        "merge_trains_enabled": project.settings.merge_trains_enabled,
        "merge_pipelines_enabled": project.settings.merge_trains_enabled,
        "only_allow_merge_if_pipeline_succeeds": project.settings.only_allow_merge_if_pipeline_succeeds,
        "only_allow_merge_if_all_discussions_are_resolved": project.settings.only_allow_merge_if_all_discussions_are_resolved,
        "approvals_before_merge": project.settings.approvals_required,
        "squash_option": "default_off",
    })
}

/// The MR entity; `full` adds the single-MR fields (head_pipeline, diff_refs, user...).
pub fn mr_json(project: &Project, mr: &MergeRequest, base: &str, full: bool) -> Value {
    let detailed = detailed_merge_status(project, mr);
    let conflicts = has_conflicts(project, mr);
    let auto_merge_strategy = mr.auto_merge.as_ref().map(|a| a.strategy.clone());
    let mut body = json!({
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "description": mr.description,
        "state": mr.state,
        "created_at": ts(mr.created_at),
        "updated_at": ts(mr.updated_at),
        "merged_by": mr.merged_by.as_ref().map(|u| user_json(u, base)),
        "merge_user": mr.merged_by.as_ref().or(mr.auto_merge.as_ref().map(|a| &a.user)).map(|u| user_json(u, base)),
        "merged_at": opt_ts(mr.merged_at),
        "closed_by": mr.closed_by.as_ref().map(|u| user_json(u, base)),
        "closed_at": opt_ts(mr.closed_at),
        "target_branch": mr.target_branch,
        "source_branch": mr.source_branch,
        "user_notes_count": mr.notes.iter().filter(|n| !n.system).count(),
        "upvotes": 0,
        "downvotes": 0,
        "author": user_json(&mr.author, base),
        "assignees": [],
        "assignee": Value::Null,
        "reviewers": mr.reviewers.iter().map(|u| user_json(u, base)).collect::<Vec<_>>(),
        "source_project_id": project.id,
        "target_project_id": project.id,
        "labels": mr.labels,
        "draft": mr.draft(),
        "work_in_progress": mr.draft(),
        "milestone": Value::Null,
        "merge_when_pipeline_succeeds": mr.auto_merge.is_some(),
        "auto_merge_strategy": auto_merge_strategy,
        "merge_status": if detailed == "mergeable" { "can_be_merged" } else if conflicts { "cannot_be_merged" } else if mr.is_open() { "can_be_merged" } else { "unchecked" },
        "detailed_merge_status": detailed,
        "sha": mr.sha,
        "merge_commit_sha": mr.merge_commit_sha,
        "squash_commit_sha": mr.squash_commit_sha,
        "discussion_locked": Value::Null,
        "should_remove_source_branch": Value::Null,
        "force_remove_source_branch": mr.force_remove_source_branch,
        "prepared_at": ts(mr.created_at),
        "reference": format!("!{}", mr.iid),
        "references": {
            "short": format!("!{}", mr.iid),
            "relative": format!("!{}", mr.iid),
            "full": format!("{}!{}", project.path_with_namespace, mr.iid),
        },
        "web_url": mr.web_url(project, base),
        "time_stats": { "time_estimate": 0, "total_time_spent": 0, "human_time_estimate": Value::Null, "human_total_time_spent": Value::Null },
        "squash": mr.squash,
        "squash_on_merge": mr.squash,
        "task_completion_status": { "count": 0, "completed_count": 0 },
        "has_conflicts": conflicts,
        "blocking_discussions_resolved": mr.unresolved_discussions == 0,
        "approvals_before_merge": Value::Null,
    });
    if full {
        let head = head_pipeline(project, mr);
        let head_json = head.map(|p| {
            let mut pipeline = pipeline_json(project, p, base);
            pipeline["project_id"] = json!(project.id);
            pipeline
        });
        let target_head = project
            .repo
            .branch_head(&mr.target_branch)
            .unwrap_or_default()
            .to_string();
        let base_sha = project
            .repo
            .merge_base(&target_head, &mr.sha)
            .unwrap_or_else(|| target_head.clone());
        let changes = project.repo.diff(&base_sha, &mr.sha).len();
        let extra = json!({
            "pipeline": head.map(|p| pipeline_basic_json(project, p, base)),
            "head_pipeline": head_json,
            "diff_refs": { "base_sha": base_sha, "head_sha": mr.sha, "start_sha": target_head },
            "merge_error": mr.merge_error,
            "first_contribution": false,
            "user": { "can_merge": true },
            "changes_count": changes.to_string(),
            "latest_build_started_at": opt_ts(head.and_then(|p| p.started_at)),
            "latest_build_finished_at": opt_ts(head.and_then(|p| p.finished_at)),
            "first_deployed_to_production_at": Value::Null,
            "diverged_commits_count": 0,
            "rebase_in_progress": false,
        });
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
    }
    body
}

pub fn approvals_json(project: &Project, mr: &MergeRequest, base: &str, user: &User) -> Value {
    let left = approvals_left(project, mr);
    json!({
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "description": mr.description,
        "state": mr.state,
        "created_at": ts(mr.created_at),
        "updated_at": ts(mr.updated_at),
        "merge_status": if has_conflicts(project, mr) { "cannot_be_merged" } else { "can_be_merged" },
        "approved": left == 0,
        "approvals_required": project.settings.approvals_required,
        "approvals_left": left,
        "require_password_to_approve": false,
        "approved_by": mr.approved_by.iter().map(|u| json!({ "user": user_json(u, base) })).collect::<Vec<_>>(),
        "suggested_approvers": [],
        "approvers": [],
        "approver_groups": [],
        "user_has_approved": mr.approved_by.iter().any(|u| u.id == user.id),
        "user_can_approve": !mr.approved_by.iter().any(|u| u.id == user.id),
        "approval_rules_left": [],
        "has_approval_rules": project.settings.approvals_required > 0,
        "merge_request_approvers_available": true,
        "multiple_approval_rules_available": false,
        "invalid_approvers_rules": [],
    })
}

pub fn note_json(project: &Project, mr: &MergeRequest, note: &Note, base: &str) -> Value {
    json!({
        "id": note.id,
        "type": Value::Null,
        "body": note.body,
        "attachment": Value::Null,
        "author": user_json(&note.author, base),
        "created_at": ts(note.created_at),
        "updated_at": ts(note.updated_at),
        "system": note.system,
        "noteable_id": mr.id,
        "noteable_type": "MergeRequest",
        "noteable_iid": mr.iid,
        "project_id": project.id,
        "commit_id": Value::Null,
        "resolvable": false,
        "confidential": false,
        "internal": false,
        "imported": false,
        "imported_from": "none",
    })
}

pub fn commit_json(project: &Project, commit: &Commit, base: &str) -> Value {
    json!({
        "id": commit.sha,
        "short_id": commit.short_id(),
        "title": commit.title(),
        "message": commit.message,
        "author_name": commit.author_name,
        "author_email": commit.author_email,
        "authored_date": ts(commit.created_at),
        "committer_name": commit.author_name,
        "committer_email": commit.author_email,
        "committed_date": ts(commit.created_at),
        "created_at": ts(commit.created_at),
        "parent_ids": commit.parents,
        "trailers": {},
        "extended_trailers": {},
        "web_url": format!("{}/-/commit/{}", project.web_url(base), commit.sha),
    })
}

/// The commit entity with `stats` (as returned by create and single get).
pub fn commit_detail_json(project: &Project, commit: &Commit, base: &str) -> Value {
    let mut body = commit_json(project, commit, base);
    let (mut additions, mut deletions) = (0usize, 0usize);
    if let Some(parent) = commit.parents.first() {
        for diff in project.repo.diff(parent, &commit.sha) {
            for line in diff.diff.lines() {
                if line.starts_with('+') {
                    additions += 1;
                } else if line.starts_with('-') {
                    deletions += 1;
                }
            }
        }
    }
    body["stats"] =
        json!({ "additions": additions, "deletions": deletions, "total": additions + deletions });
    body["status"] = Value::Null;
    body["project_id"] = json!(project.id);
    body["last_pipeline"] = project
        .pipelines
        .values()
        .rev()
        .find(|p| p.sha == commit.sha)
        .map(|p| pipeline_basic_json(project, p, base))
        .unwrap_or(Value::Null);
    body
}

pub fn detailed_status(status: &str) -> Value {
    let text = match status {
        "success" => "passed",
        other => other,
    };
    json!({
        "icon": format!("status_{status}"),
        "text": text,
        "label": text,
        "group": status,
        "tooltip": text,
        "has_details": true,
        "favicon": format!("favicon_status_{status}"),
    })
}

pub fn pipeline_basic_json(project: &Project, pipeline: &Pipeline, base: &str) -> Value {
    json!({
        "id": pipeline.id,
        "iid": pipeline.iid,
        "project_id": project.id,
        "sha": pipeline.sha,
        "ref": pipeline.ref_name,
        "status": pipeline.status,
        "source": pipeline.source,
        "created_at": ts(pipeline.created_at),
        "updated_at": ts(pipeline.updated_at),
        "web_url": format!("{}/-/pipelines/{}", project.web_url(base), pipeline.id),
    })
}

pub fn pipeline_json(project: &Project, pipeline: &Pipeline, base: &str) -> Value {
    let mut body = pipeline_basic_json(project, pipeline, base);
    let extra = json!({
        "before_sha": pipeline.before_sha,
        "tag": false,
        "yaml_errors": Value::Null,
        "user": user_json(&pipeline.user, base),
        "started_at": opt_ts(pipeline.started_at),
        "finished_at": opt_ts(pipeline.finished_at),
        "committed_at": Value::Null,
        "duration": pipeline.duration_secs(),
        "queued_duration": Value::Null,
        "coverage": Value::Null,
        "name": Value::Null,
        "detailed_status": detailed_status(&pipeline.status),
    });
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    body
}

pub fn job_json(project: &Project, job: &Job, base: &str) -> Value {
    let pipeline = project.pipelines.get(&job.pipeline_id);
    let commit = pipeline
        .and_then(|p| project.repo.commit(&p.sha))
        .map(|c| commit_json(project, c, base))
        .unwrap_or(Value::Null);
    let mut body = json!({
        "id": job.id,
        "status": job.status,
        "stage": job.stage,
        "name": job.name,
        "ref": pipeline.map(|p| p.ref_name.clone()),
        "tag": false,
        "coverage": Value::Null,
        "allow_failure": false,
        "created_at": ts(job.created_at),
        "started_at": opt_ts(job.started_at),
        "finished_at": opt_ts(job.finished_at),
        "erased_at": Value::Null,
        "duration": job.duration(),
        "queued_duration": job.queued_duration(),
        "user": user_json(&job.user, base),
        "commit": commit,
        "pipeline": pipeline.map(|p| pipeline_basic_json(project, p, base)),
        "web_url": format!("{}/-/jobs/{}", project.web_url(base), job.id),
        "project": { "ci_job_token_scope_enabled": false },
        "artifacts": [],
        "artifacts_expire_at": Value::Null,
        "runner": job.started_at.map(|_| runner_json()),
        "archived": false,
        "tag_list": [],
        "retried": job.retried,
        "retries_count": job.retries_count,
    });
    if job.status == "failed" {
        body["failure_reason"] = json!(
            job.failure_reason
                .clone()
                .unwrap_or_else(|| "unknown_failure".to_string())
        );
    }
    body
}

pub fn runner_json() -> Value {
    json!({
        "id": 1,
        "description": "forge-sim shared runner",
        "active": true,
        "paused": false,
        "is_shared": true,
        "runner_type": "instance_type",
        "name": "gitlab-runner",
        "online": true,
        "status": "online",
        "tags": [],
    })
}

pub fn car_json(project: &Project, car: &TrainCar, base: &str) -> Value {
    let mr = project.merge_requests.get(&car.mr_iid);
    let pipeline = car.pipeline_id.and_then(|id| project.pipelines.get(&id));
    json!({
        "id": car.id,
        "merge_request": mr.map(|mr| json!({
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project.id,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "created_at": ts(mr.created_at),
            "updated_at": ts(mr.updated_at),
            "web_url": mr.web_url(project, base),
        })),
        "user": user_json(&car.user, base),
        "pipeline": pipeline.map(|p| pipeline_basic_json(project, p, base)),
        "created_at": ts(car.created_at),
        "updated_at": ts(car.updated_at),
        "target_branch": car.target_branch,
        "status": car.status,
        "merged_at": opt_ts(car.merged_at),
        "duration": car.merged_at.map(|m| (m - car.created_at).whole_seconds()),
    })
}

/// The protected branch entity of GitLab's API.
pub fn protected_branch_json(entry: &ProtectedBranch) -> Value {
    json!({
        "id": entry.id,
        "name": entry.name,
        "push_access_levels": access_levels(),
        "merge_access_levels": access_levels(),
        "unprotect_access_levels": [],
        "allow_force_push": false,
        "code_owner_approval_required": false,
    })
}

fn access_levels() -> Value {
    json!([{
        "id": 1,
        "access_level": 40,
        "access_level_description": "Maintainers",
        "deploy_key_id": Value::Null,
        "user_id": Value::Null,
        "group_id": Value::Null,
    }])
}
