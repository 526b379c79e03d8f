//! GitLab webhook payloads (Merge Request, Pipeline, Job, Note hooks) in GitLab's documented shapes.

use serde_json::{Value, json};

use super::model::{MergeRequest, Note, detailed_merge_status, has_conflicts, head_pipeline};
use super::{Project, ts};
use crate::state::User;

/// GitLab's hook timestamp format (`2024-01-01 12:00:00 UTC`).
fn hook_ts(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn opt_hook_ts(t: Option<time::OffsetDateTime>) -> Value {
    t.map(|t| Value::String(hook_ts(t))).unwrap_or(Value::Null)
}

pub fn hook_user(user: &User, base: &str) -> Value {
    json!({
        "id": user.id,
        "name": user.name,
        "username": user.username,
        "avatar_url": format!("{base}/uploads/-/system/user/avatar/{}/avatar.png", user.id),
        "email": "[REDACTED]",
    })
}

pub fn hook_project(project: &Project, base: &str) -> Value {
    let web_url = project.web_url(base);
    json!({
        "id": project.id,
        "name": project.name(),
        "description": "",
        "web_url": web_url,
        "avatar_url": Value::Null,
        "git_ssh_url": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "git_http_url": format!("{web_url}.git"),
        "namespace": project.namespace(),
        "visibility_level": 0,
        "path_with_namespace": project.path_with_namespace,
        "default_branch": project.repo.default_branch(),
        "ci_config_path": Value::Null,
        "homepage": web_url,
        "url": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "ssh_url": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "http_url": format!("{web_url}.git"),
    })
}

fn hook_repository(project: &Project, base: &str) -> Value {
    let web_url = project.web_url(base);
    json!({
        "name": project.name(),
        "url": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "description": "",
        "homepage": web_url,
        "git_http_url": format!("{web_url}.git"),
        "git_ssh_url": format!("git@127.0.0.1:{}.git", project.path_with_namespace),
        "visibility_level": 0,
    })
}

fn hook_commit(project: &Project, sha: &str, base: &str) -> Value {
    match project.repo.commit(sha) {
        Some(commit) => json!({
            "id": commit.sha,
            "message": commit.message,
            "title": commit.title(),
            "timestamp": ts(commit.created_at),
            "url": format!("{}/-/commit/{}", project.web_url(base), commit.sha),
            "author": { "name": commit.author_name, "email": commit.author_email },
        }),
        None => Value::Null,
    }
}

fn labels_json(mr: &MergeRequest) -> Value {
    Value::Array(
        mr.labels
            .iter()
            .enumerate()
            .map(|(i, l)| json!({ "id": i + 1, "title": l, "color": "#428BCA", "project_id": mr.project_id, "type": "ProjectLabel", "group_id": Value::Null }))
            .collect(),
    )
}

/// `object_attributes` of a Merge Request Hook (also the `merge_request` of Note/Pipeline hooks).
pub fn hook_mr_attributes(project: &Project, mr: &MergeRequest, base: &str) -> Value {
    let head = head_pipeline(project, mr);
    json!({
        "id": mr.id,
        "iid": mr.iid,
        "target_branch": mr.target_branch,
        "source_branch": mr.source_branch,
        "source_project_id": project.id,
        "target_project_id": project.id,
        "author_id": mr.author.id,
        "assignee_ids": [],
        "reviewer_ids": [],
        "title": mr.title,
        "description": mr.description,
        "created_at": hook_ts(mr.created_at),
        "updated_at": hook_ts(mr.updated_at),
        "merged_at": opt_hook_ts(mr.merged_at),
        "closed_at": opt_hook_ts(mr.closed_at),
        "milestone_id": Value::Null,
        "state": mr.state,
        "state_id": match mr.state.as_str() { "opened" => 1, "closed" => 2, "merged" => 3, _ => 4 },
        "blocking_discussions_resolved": mr.unresolved_discussions == 0,
        "work_in_progress": mr.draft(),
        "draft": mr.draft(),
        "first_contribution": false,
        "merge_status": if has_conflicts(project, mr) { "cannot_be_merged" } else { "can_be_merged" },
        "detailed_merge_status": detailed_merge_status(project, mr),
        "merge_commit_sha": mr.merge_commit_sha,
        "merge_when_pipeline_succeeds": mr.auto_merge.is_some(),
        "head_pipeline_id": head.map(|p| p.id),
        "url": mr.web_url(project, base),
        "source": hook_project(project, base),
        "target": hook_project(project, base),
        "last_commit": hook_commit(project, &mr.sha, base),
        "labels": labels_json(mr),
        "prepared_at": hook_ts(mr.created_at),
        "time_estimate": 0,
        "total_time_spent": 0,
    })
}

pub fn merge_request_hook(
    project: &Project,
    mr: &MergeRequest,
    action: &str,
    user: &User,
    changes: Value,
    oldrev: Option<&str>,
    base: &str,
) -> Value {
    let mut attributes = hook_mr_attributes(project, mr, base);
    attributes["action"] = json!(action);
    if let Some(oldrev) = oldrev {
        attributes["oldrev"] = json!(oldrev);
    }
    json!({
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": hook_user(user, base),
        "project": hook_project(project, base),
        "repository": hook_repository(project, base),
        "object_attributes": attributes,
        "labels": labels_json(mr),
        "changes": changes,
        "assignees": [],
        "reviewers": [],
    })
}

fn hook_build(job: &super::model::Job, base: &str) -> Value {
    json!({
        "id": job.id,
        "stage": job.stage,
        "name": job.name,
        "status": job.status,
        "created_at": hook_ts(job.created_at),
        "started_at": opt_hook_ts(job.started_at),
        "finished_at": opt_hook_ts(job.finished_at),
        "duration": job.duration(),
        "queued_duration": job.queued_duration(),
        "failure_reason": job.failure_reason,
        "when": "on_success",
        "manual": false,
        "allow_failure": false,
        "user": hook_user(&job.user, base),
        "runner": job.started_at.map(|_| super::json::runner_json()),
        "artifacts_file": { "filename": Value::Null, "size": Value::Null },
        "environment": Value::Null,
    })
}

/// The MR of a merge request pipeline (source `merge_request_event`: MR and merge train
/// pipelines). GitLab's Pipeline Hook carries `merge_request` for those only; a branch pipeline's
/// is null even when the branch has an open MR.
fn pipeline_mr<'a>(
    project: &'a Project,
    pipeline: &super::model::Pipeline,
) -> Option<&'a MergeRequest> {
    if pipeline.source != "merge_request_event" {
        return None;
    }
    project.merge_requests.get(&pipeline.mr_iid?)
}

pub fn pipeline_hook(project: &Project, pipeline_id: u64, base: &str) -> Value {
    let Some(pipeline) = project.pipelines.get(&pipeline_id) else {
        return Value::Null;
    };
    let builds: Vec<Value> = super::model::latest_jobs(project, pipeline)
        .into_iter()
        .map(|job| hook_build(job, base))
        .collect();
    let merge_request = pipeline_mr(project, pipeline).map(|mr| {
        json!({
            "id": mr.id,
            "iid": mr.iid,
            "title": mr.title,
            "source_branch": mr.source_branch,
            "source_project_id": project.id,
            "target_branch": mr.target_branch,
            "target_project_id": project.id,
            "state": mr.state,
            "merge_status": if has_conflicts(project, mr) { "cannot_be_merged" } else { "can_be_merged" },
            "detailed_merge_status": detailed_merge_status(project, mr),
            "url": mr.web_url(project, base),
        })
    });
    json!({
        "object_kind": "pipeline",
        "object_attributes": {
            "id": pipeline.id,
            "iid": pipeline.iid,
            "name": Value::Null,
            "ref": pipeline.ref_name,
            "tag": false,
            "sha": pipeline.sha,
            "before_sha": pipeline.before_sha,
            "source": pipeline.source,
            "status": pipeline.status,
            "detailed_status": super::json::detailed_status(&pipeline.status)["text"],
            "stages": pipeline.stages,
            "created_at": hook_ts(pipeline.created_at),
            "finished_at": opt_hook_ts(pipeline.finished_at),
            "duration": pipeline.duration_secs(),
            "queued_duration": Value::Null,
            "variables": [],
            "url": format!("{}/-/pipelines/{}", project.web_url(base), pipeline.id),
        },
        "merge_request": merge_request,
        "user": hook_user(&pipeline.user, base),
        "project": hook_project(project, base),
        "commit": hook_commit(project, &pipeline.sha, base),
        "source_pipeline": Value::Null,
        "builds": builds,
    })
}

pub fn job_hook(project: &Project, job_id: u64, base: &str) -> Value {
    let Some(job) = project.jobs.get(&job_id) else {
        return Value::Null;
    };
    let pipeline = project.pipelines.get(&job.pipeline_id);
    let sha = pipeline.map(|p| p.sha.clone()).unwrap_or_default();
    let commit = project.repo.commit(&sha);
    json!({
        "object_kind": "build",
        "ref": pipeline.map(|p| p.ref_name.clone()),
        "tag": false,
        "before_sha": pipeline.map(|p| p.before_sha.clone()),
        "sha": sha,
        "retries_count": job.retries_count,
        "build_id": job.id,
        "build_name": job.name,
        "build_stage": job.stage,
        "build_status": job.status,
        "build_created_at": hook_ts(job.created_at),
        "build_started_at": opt_hook_ts(job.started_at),
        "build_finished_at": opt_hook_ts(job.finished_at),
        "build_duration": job.duration(),
        "build_queued_duration": job.queued_duration(),
        "build_allow_failure": false,
        "build_failure_reason": job.failure_reason.clone().unwrap_or_else(|| "unknown_failure".to_string()),
        "pipeline_id": job.pipeline_id,
        "runner": job.started_at.map(|_| super::json::runner_json()),
        "project_id": project.id,
        "project_name": project.path_with_namespace.replace('/', " / "),
        "user": hook_user(&job.user, base),
        "commit": {
            "id": pipeline.map(|p| p.id),
            "name": Value::Null,
            "sha": sha,
            "message": commit.map(|c| c.message.clone()),
            "author_name": commit.map(|c| c.author_name.clone()),
            "author_email": commit.map(|c| c.author_email.clone()),
            "author_url": Value::Null,
            "status": pipeline.map(|p| p.status.clone()),
            "duration": pipeline.and_then(|p| p.duration_secs()),
            "started_at": opt_hook_ts(pipeline.and_then(|p| p.started_at)),
            "finished_at": opt_hook_ts(pipeline.and_then(|p| p.finished_at)),
        },
        "repository": hook_repository(project, base),
        "project": hook_project(project, base),
        "environment": Value::Null,
    })
}

pub fn note_hook(
    project: &Project,
    mr: &MergeRequest,
    note: &Note,
    action: &str,
    base: &str,
) -> Value {
    json!({
        "object_kind": "note",
        "event_type": "note",
        "user": hook_user(&note.author, base),
        "project_id": project.id,
        "project": hook_project(project, base),
        "repository": hook_repository(project, base),
        "object_attributes": {
            "id": note.id,
            "note": note.body,
            "noteable_type": "MergeRequest",
            "author_id": note.author.id,
            "created_at": hook_ts(note.created_at),
            "updated_at": hook_ts(note.updated_at),
            "project_id": project.id,
            "attachment": Value::Null,
            "line_code": Value::Null,
            "commit_id": "",
            "noteable_id": mr.id,
            "system": note.system,
            "st_diff": Value::Null,
            "action": action,
            "url": format!("{}#note_{}", mr.web_url(project, base), note.id),
        },
        "merge_request": hook_mr_attributes(project, mr, base),
    })
}
