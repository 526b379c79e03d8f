//! GitLab merge requests: create/get/list/update, mergeability (`detailed_merge_status`),
//! approvals, merge (immediate, merge-when-pipeline-succeeds, via merge train) and rebase.
//! Quick actions in a description (on create and update) run as the API user
//! (see [`crate::gitlab::quick_actions`]).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use super::{MergeRequestSegment, ProjectCall};
use crate::gitlab::json::{approvals_json, mr_json};
use crate::gitlab::model::{
    MergeRequest, detailed_merge_status, head_pipeline, is_draft_title, mr_head_ref,
};
use crate::gitlab::ops::auto_merge::set_auto_merge;
use crate::gitlab::ops::merge::{mr_mut, mr_ref};
use crate::gitlab::ops::pipelines::create_pipeline;
use crate::gitlab::ops::{self, approve_mr, do_merge, emit_mr_hook, unapprove_mr};
use crate::gitlab::{
    ApiError, ApiResult, Ctx, Params, Project, created, ok, quick_actions, user_json,
};
use crate::state::User;

fn duplicate_check(
    project: &Project,
    source: &str,
    target: &str,
    except: Option<u64>,
) -> Result<(), ApiError> {
    if let Some(other) = project.merge_requests.values().find(|mr| {
        mr.is_open()
            && mr.source_branch == source
            && mr.target_branch == target
            && Some(mr.iid) != except
    }) {
        return Err(ApiError::message(
            StatusCode::CONFLICT,
            json!([format!(
                "Another open merge request already exists for this source branch: !{}",
                other.iid
            )]),
        ));
    }
    Ok(())
}

/// Starts a pipeline for the MR head when it has none: a merge request pipeline on
/// `refs/merge-requests/<iid>/head` when the project runs them, else the branch pipeline GitLab
/// would have run for the push.
fn ensure_pipeline(ctx: &mut Ctx<'_>, pid: u64, iid: u64, user: &User) {
    let project = ctx.project(pid);
    let Some(mr) = project.merge_requests.get(&iid) else {
        return;
    };
    if head_pipeline(project, mr).is_some() {
        return;
    }
    let (ref_name, source) = if project.settings.merge_request_pipelines {
        (mr_head_ref(iid), "merge_request_event")
    } else {
        (mr.source_branch.clone(), "push")
    };
    let sha = mr.sha.clone();
    create_pipeline(ctx, pid, &ref_name, &sha, None, source, user, Some(iid));
}

pub async fn create(call: ProjectCall, params: Params) -> ApiResult {
    params.require(&["source_branch", "target_branch", "title"])?;
    let source = params.req_str("source_branch")?;
    let mut target = params.req_str("target_branch")?;
    let mut title = params.req_str("title")?;
    let (description, actions) =
        quick_actions::extract(&params.str("description").unwrap_or_default());
    let mut labels = params.labels("labels").unwrap_or_default();
    let remove_source = params.flag("remove_source_branch")?;
    let squash = params.flag("squash")?;
    call.with_project(|ctx, pid| {
        let now = ctx.now;
        let project = ctx.project(pid);
        // The quick actions GitLab allows on a merge request being created.
        let updates = {
            let users = crate::state::lock(&ctx.sim.users);
            quick_actions::interpret(
                &actions,
                &quick_actions::Target {
                    persisted: false,
                    state: "opened",
                    draft: is_draft_title(&title),
                    source_branch: &source,
                    target_branch: &target,
                    labels: &labels,
                    approved_by_user: false,
                },
                &call.user,
                |branch| project.repo.branch_head(branch).is_some(),
                |name| users.by_username(name).cloned(),
            )
        };
        if let Some(branch) = &updates.target_branch {
            target = branch.clone();
        }
        for label in &updates.add_labels {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
        if let Some(draft) = updates.draft {
            title = with_draft(&title, draft);
        }
        let reviewers = updates.add_reviewers;
        if source == target {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!(["You can't use same project/branch for source and target"]),
            ));
        }
        let Some(sha) = project.repo.branch_head(&source).map(str::to_string) else {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!([format!("Source branch \"{source}\" does not exist")]),
            ));
        };
        if project.repo.branch_head(&target).is_none() {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!([format!("Target branch \"{target}\" does not exist")]),
            ));
        }
        duplicate_check(project, &source, &target, None)?;
        let id = ctx.gl.alloc_mr_id();
        let project = ctx.project_mut(pid);
        project.next_mr_iid += 1;
        let iid = project.next_mr_iid;
        project.merge_requests.insert(
            iid,
            MergeRequest {
                id,
                iid,
                project_id: pid,
                title,
                description,
                state: "opened".to_string(),
                source_branch: source,
                target_branch: target,
                labels,
                author: call.user.clone(),
                created_at: now,
                updated_at: now,
                merged_at: None,
                closed_at: None,
                merged_by: None,
                closed_by: None,
                sha,
                merge_commit_sha: None,
                squash_commit_sha: None,
                squash,
                force_remove_source_branch: remove_source,
                approved_by: Vec::new(),
                reviewers,
                unresolved_discussions: 0,
                auto_merge: None,
                merge_error: None,
                notes: Vec::new(),
            },
        );
        emit_mr_hook(ctx, pid, iid, "open", &call.user, json!({}), None);
        ensure_pipeline(ctx, pid, iid, &call.user);
        let project = ctx.project(pid);
        created(as_created(mr_json(
            project,
            mr_ref(project, iid)?,
            ctx.base,
            true,
        )))
    })
}

/// The answer to a creation: the merge request as GitLab has it before its
/// preparation, which runs after the answer (`MergeRequests::CreateService`
/// marks it `preparing` and leaves its diff, pipeline and head pipeline to
/// `NewMergeRequestWorker` / `AfterCreateService`). So no head pipeline
/// yet, and the merge status is `preparing`; a read afterwards shows the
/// prepared state.
fn as_created(mut body: Value) -> Value {
    body["merge_status"] = json!("preparing");
    body["detailed_merge_status"] = json!("preparing");
    body["pipeline"] = Value::Null;
    body["head_pipeline"] = Value::Null;
    body
}

pub async fn list(call: ProjectCall, params: Params) -> ApiResult {
    let state_filter = params.str("state").unwrap_or_else(|| "all".to_string());
    if !["opened", "closed", "locked", "merged", "all"].contains(&state_filter.as_str()) {
        return Err(ApiError::param("state does not have a valid value"));
    }
    let source = params.str("source_branch");
    let target = params.str("target_branch");
    let labels = params.labels("labels").unwrap_or_default();
    let iids: Vec<u64> = ["iids", "iids[]"]
        .iter()
        .filter_map(|key| params.0.get(*key))
        .flat_map(|value| match value {
            Value::Array(items) => items
                .iter()
                .filter_map(|item| item.as_u64().or_else(|| item.as_str()?.parse().ok()))
                .collect(),
            Value::String(text) => text
                .split(',')
                .filter_map(|item| item.trim().parse().ok())
                .collect(),
            Value::Number(number) => number.as_u64().into_iter().collect(),
            _ => Vec::new(),
        })
        .collect();
    let ascending = params.str("sort").as_deref() == Some("asc");
    let items = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let mut mrs: Vec<&MergeRequest> = project
            .merge_requests
            .values()
            .filter(|mr| state_filter == "all" || mr.state == state_filter)
            .filter(|mr| {
                source
                    .as_ref()
                    .is_none_or(|source| &mr.source_branch == source)
            })
            .filter(|mr| {
                target
                    .as_ref()
                    .is_none_or(|target| &mr.target_branch == target)
            })
            .filter(|mr| labels.iter().all(|label| mr.labels.contains(label)))
            .filter(|mr| iids.is_empty() || iids.contains(&mr.iid))
            .collect();
        mrs.sort_by_key(|mr| (mr.created_at, mr.iid));
        if !ascending {
            mrs.reverse();
        }
        Ok(mrs
            .into_iter()
            .map(|mr| mr_json(project, mr, ctx.base, false))
            .collect())
    })?;
    call.paged(&params, items)
}

pub async fn get_one(call: ProjectCall<MergeRequestSegment>) -> ApiResult {
    let iid = call.segments.iid()?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        ok(mr_json(project, mr_ref(project, iid)?, ctx.base, true))
    })
}

const UPDATE_KEYS: [&str; 12] = [
    "assignee_id",
    "description",
    "labels",
    "add_labels",
    "remove_labels",
    "milestone_id",
    "remove_source_branch",
    "state_event",
    "target_branch",
    "title",
    "discussion_locked",
    "squash",
];

pub async fn update(call: ProjectCall<MergeRequestSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    if !UPDATE_KEYS.iter().any(|key| params.0.contains_key(*key)) {
        return Err(ApiError::param(format!(
            "{} are missing, at least one parameter must be provided",
            UPDATE_KEYS.join(", ")
        )));
    }
    let state_event = params.str("state_event");
    if let Some(event) = &state_event
        && event != "close"
        && event != "reopen"
    {
        return Err(ApiError::param("state_event does not have a valid value"));
    }
    if params.0.contains_key("title")
        && params
            .str("title")
            .is_none_or(|title| title.trim().is_empty())
    {
        return Err(ApiError::param("title is empty"));
    }
    if params.0.contains_key("target_branch")
        && params
            .str("target_branch")
            .is_none_or(|branch| branch.is_empty())
    {
        return Err(ApiError::param("target_branch is empty"));
    }
    let mut request = MrUpdate {
        title: params.str("title"),
        description: params.str("description"),
        labels: params.labels("labels"),
        add_labels: params.labels("add_labels").unwrap_or_default(),
        remove_labels: params.labels("remove_labels").unwrap_or_default(),
        target_branch: params.str("target_branch"),
        remove_source: params.bool("remove_source_branch")?,
        squash: params.bool("squash")?,
        state_event,
        ..MrUpdate::default()
    };
    // GitLab runs the quick actions of a new description; their updates win over the parameters.
    let actions = request
        .description
        .take()
        .map(|text| quick_actions::extract(&text));
    call.with_project(|ctx, pid| {
        let mut immediate = None;
        if let Some((text, actions)) = actions {
            request.description = Some(text);
            let updates = interpret_for(ctx, pid, iid, &actions, &call.user)?;
            request.add_quick_actions(&updates);
            immediate = Some(updates);
        }
        apply_update(ctx, pid, iid, &call.user, request)?;
        if let Some(updates) = immediate {
            run_immediate_actions(ctx, pid, iid, &call.user, &updates)?;
        }
        let project = ctx.project(pid);
        ok(mr_json(project, mr_ref(project, iid)?, ctx.base, true))
    })
}

/// One change to a merge request: from the update API's parameters, from quick actions, or both.
#[derive(Debug, Clone, Default)]
pub struct MrUpdate {
    pub title: Option<String>,
    pub description: Option<String>,
    /// Replaces the labels.
    pub labels: Option<Vec<String>>,
    pub add_labels: Vec<String>,
    pub remove_labels: Vec<String>,
    pub target_branch: Option<String>,
    pub remove_source: Option<bool>,
    pub squash: Option<bool>,
    /// `close` or `reopen`.
    pub state_event: Option<String>,
    pub add_reviewers: Vec<User>,
    /// `Some(true)` marks the MR as a draft, `Some(false)` as ready (on the resulting title).
    pub draft: Option<bool>,
}

impl MrUpdate {
    /// Folds the updates of quick actions in (they win over parameters, as in GitLab).
    pub fn add_quick_actions(&mut self, updates: &quick_actions::Updates) {
        if let Some(title) = &updates.title {
            self.title = Some(title.clone());
        }
        if updates.remove_all_labels {
            self.labels = Some(Vec::new());
            self.add_labels.clear();
        }
        for label in &updates.add_labels {
            self.remove_labels.retain(|removed| removed != label);
            if !self.add_labels.contains(label) {
                self.add_labels.push(label.clone());
            }
        }
        for label in &updates.remove_labels {
            self.add_labels.retain(|added| added != label);
            if !self.remove_labels.contains(label) {
                self.remove_labels.push(label.clone());
            }
        }
        if let Some(branch) = &updates.target_branch {
            self.target_branch = Some(branch.clone());
        }
        if let Some(event) = updates.state_event {
            self.state_event = Some(event.to_string());
        }
        self.add_reviewers
            .extend(updates.add_reviewers.iter().cloned());
        if updates.draft.is_some() {
            self.draft = updates.draft;
        }
    }

    fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.description.is_none()
            && self.labels.is_none()
            && self.add_labels.is_empty()
            && self.remove_labels.is_empty()
            && self.target_branch.is_none()
            && self.remove_source.is_none()
            && self.squash.is_none()
            && self.state_event.is_none()
            && self.add_reviewers.is_empty()
            && self.draft.is_none()
    }
}

/// `title` marked as a draft (`Draft: ` prefix) or ready (draft prefixes removed).
pub fn with_draft(title: &str, draft: bool) -> String {
    if draft {
        if is_draft_title(title) {
            title.to_string()
        } else {
            format!("Draft: {title}")
        }
    } else {
        let mut rest = title.trim_start();
        loop {
            let lower = rest.to_ascii_lowercase();
            let Some(prefix) = ["draft:", "[draft]", "(draft)", "draft -", "wip:", "[wip]"]
                .iter()
                .find(|prefix| lower.starts_with(*prefix))
            else {
                break;
            };
            rest = rest[prefix.len()..].trim_start();
        }
        rest.to_string()
    }
}

/// Resolves quick actions against an existing merge request as `user`.
fn interpret_for(
    ctx: &Ctx<'_>,
    pid: u64,
    iid: u64,
    actions: &[quick_actions::QuickAction],
    user: &User,
) -> Result<quick_actions::Updates, ApiError> {
    let project = ctx.project(pid);
    let mr = mr_ref(project, iid)?;
    let users = crate::state::lock(&ctx.sim.users);
    Ok(quick_actions::interpret(
        actions,
        &quick_actions::Target {
            persisted: true,
            state: &mr.state,
            draft: mr.draft(),
            source_branch: &mr.source_branch,
            target_branch: &mr.target_branch,
            labels: &mr.labels,
            approved_by_user: mr.approved_by.iter().any(|approver| approver.id == user.id),
        },
        user,
        |branch| project.repo.branch_head(branch).is_some(),
        |name| users.by_username(name).cloned(),
    ))
}

/// Runs quick actions found in a note or an updated description: the field updates through
/// the update service, then approvals and `/merge`.
pub fn execute_quick_actions(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    actions: &[quick_actions::QuickAction],
    user: &User,
) -> Result<quick_actions::Updates, ApiError> {
    let updates = interpret_for(ctx, pid, iid, actions, user)?;
    let mut request = MrUpdate::default();
    request.add_quick_actions(&updates);
    if !request.is_empty() {
        apply_update(ctx, pid, iid, user, request)?;
    }
    run_immediate_actions(ctx, pid, iid, user, &updates)?;
    Ok(updates)
}

/// `/approve`, `/unapprove` and `/merge`, which GitLab runs outside the field update.
fn run_immediate_actions(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    updates: &quick_actions::Updates,
) -> Result<(), ApiError> {
    if updates.approve {
        approve_mr(ctx, pid, iid, user)?;
    }
    if updates.unapprove {
        unapprove_mr(ctx, pid, iid, user)?;
    }
    if updates.merge {
        merge_from_quick_action(ctx, pid, iid, user)?;
    }
    Ok(())
}

/// `/merge`: merges now when mergeable, else sets the automatic merge GitLab would pick while
/// the pipeline runs (merge train or merge when the pipeline succeeds); otherwise nothing.
fn merge_from_quick_action(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
) -> Result<(), ApiError> {
    let project = ctx.project(pid);
    let mr = mr_ref(project, iid)?.clone();
    if mr.auto_merge.is_some() {
        return Ok(());
    }
    let trains_enabled = project.settings.merge_trains_enabled;
    let remove_source = mr.force_remove_source_branch;
    match detailed_merge_status(project, &mr) {
        "mergeable" if trains_enabled => {
            set_auto_merge(
                ctx,
                pid,
                iid,
                "merge_train",
                user,
                mr.squash,
                remove_source,
                None,
            );
            ops::add_car(ctx, pid, iid, user, mr.squash)?;
        }
        "mergeable" => {
            // A merge that fails (e.g. a race with the target) leaves the MR open, as in GitLab.
            let _ = do_merge(ctx, pid, iid, user, mr.squash, None, remove_source);
        }
        "ci_still_running" => {
            let strategy = if trains_enabled {
                "add_to_merge_train_when_pipeline_succeeds"
            } else {
                "merge_when_pipeline_succeeds"
            };
            set_auto_merge(
                ctx,
                pid,
                iid,
                strategy,
                user,
                mr.squash,
                remove_source,
                None,
            );
        }
        _ => {}
    }
    Ok(())
}

/// Applies one update to a merge request as the update API does (validation, changes, state
/// event, one `Merge Request Hook`).
pub fn apply_update(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    user: &User,
    request: MrUpdate,
) -> Result<(), ApiError> {
    let now = ctx.now;
    let base = ctx.base;
    let project = ctx.project(pid);
    let current = mr_ref(project, iid)?.clone();
    if let Some(target) = &request.target_branch {
        if project.repo.branch_head(target).is_none() {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!([format!("Target branch \"{target}\" does not exist")]),
            ));
        }
        if *target == current.source_branch {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!(["You can't use same project/branch for source and target"]),
            ));
        }
    }
    let state_event = request.state_event.as_deref();
    if state_event == Some("reopen") && current.state == "closed" {
        let target = request
            .target_branch
            .clone()
            .unwrap_or_else(|| current.target_branch.clone());
        duplicate_check(project, &current.source_branch, &target, Some(iid))?;
    }
    let mut changes = Map::new();
    let mr = mr_mut(ctx.project_mut(pid), iid)?;
    let mut title = request.title.clone().unwrap_or_else(|| mr.title.clone());
    if let Some(draft) = request.draft {
        title = with_draft(&title, draft);
    }
    if title != mr.title {
        changes.insert(
            "title".into(),
            json!({ "previous": mr.title, "current": title }),
        );
        if is_draft_title(&title) != mr.draft() {
            changes.insert(
                "draft".into(),
                json!({ "previous": mr.draft(), "current": is_draft_title(&title) }),
            );
        }
        mr.title = title;
    }
    if let Some(description) = request.description
        && description != mr.description
    {
        changes.insert(
            "description".into(),
            json!({ "previous": mr.description, "current": description }),
        );
        mr.description = description;
    }
    let mut labels = mr.labels.clone();
    if let Some(replace) = request.labels {
        labels = replace;
    }
    for label in request.add_labels {
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    labels.retain(|label| !request.remove_labels.contains(label));
    if labels != mr.labels {
        changes.insert(
            "labels".into(),
            json!({
                "previous": mr.labels.iter().map(|label| json!({"title": label})).collect::<Vec<_>>(),
                "current": labels.iter().map(|label| json!({"title": label})).collect::<Vec<_>>(),
            }),
        );
        mr.labels = labels;
    }
    let mut reviewers = mr.reviewers.clone();
    for reviewer in request.add_reviewers {
        if !reviewers.iter().any(|existing| existing.id == reviewer.id) {
            reviewers.push(reviewer);
        }
    }
    if reviewers.len() != mr.reviewers.len() {
        changes.insert(
            "reviewers".into(),
            json!({
                "previous": mr.reviewers.iter().map(|reviewer| user_json(reviewer, base)).collect::<Vec<_>>(),
                "current": reviewers.iter().map(|reviewer| user_json(reviewer, base)).collect::<Vec<_>>(),
            }),
        );
        mr.reviewers = reviewers;
    }
    if let Some(target) = request.target_branch
        && target != mr.target_branch
    {
        changes.insert(
            "target_branch".into(),
            json!({ "previous": mr.target_branch, "current": target }),
        );
        mr.target_branch = target;
    }
    if let Some(remove) = request.remove_source {
        mr.force_remove_source_branch = remove;
    }
    if let Some(squash) = request.squash {
        mr.squash = squash;
    }
    let mut action = "update";
    match state_event {
        Some("close") if mr.state == "opened" => {
            mr.state = "closed".to_string();
            mr.closed_at = Some(now);
            mr.closed_by = Some(user.clone());
            mr.auto_merge = None;
            changes.insert("state_id".into(), json!({ "previous": 1, "current": 2 }));
            action = "close";
        }
        Some("reopen") if mr.state == "closed" => {
            mr.state = "opened".to_string();
            mr.closed_at = None;
            mr.closed_by = None;
            changes.insert("state_id".into(), json!({ "previous": 2, "current": 1 }));
            action = "reopen";
        }
        _ => {}
    }
    let source_head = ctx
        .project(pid)
        .repo
        .branch_head(&current.source_branch)
        .map(str::to_string);
    let mr = mr_mut(ctx.project_mut(pid), iid)?;
    if action == "reopen"
        && let Some(head) = source_head
    {
        mr.sha = head;
    }
    if !changes.is_empty() {
        mr.updated_at = now;
    }
    if action == "close" {
        ops::trains::drop_car(ctx, pid, iid, None);
    }
    if !changes.is_empty() {
        emit_mr_hook(ctx, pid, iid, action, user, Value::Object(changes), None);
    }
    if action == "reopen" {
        ensure_pipeline(ctx, pid, iid, user);
    }
    Ok(())
}

/// `GET /projects/:id/approvals`: the project's approval settings, as GitLab's "Merge request
/// approvals" API answers them.
pub async fn project_approvals(call: ProjectCall) -> ApiResult {
    call.with_project(|ctx, pid| {
        let settings = &ctx.project(pid).settings;
        ok(serde_json::json!({
            "approvals_before_merge": settings.approvals_required,
            "reset_approvals_on_push": settings.reset_approvals_on_push,
            "selective_code_owner_removals": false,
            "disable_overriding_approvers_per_merge_request": false,
            "merge_requests_author_approval": true,
            "merge_requests_disable_committers_approval": false,
            "require_password_to_approve": false,
        }))
    })
}

pub async fn approvals(call: ProjectCall<MergeRequestSegment>) -> ApiResult {
    let iid = call.segments.iid()?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        ok(approvals_json(
            project,
            mr_ref(project, iid)?,
            ctx.base,
            &call.user,
        ))
    })
}

pub async fn approve(call: ProjectCall<MergeRequestSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let sha = params.str("sha");
    call.with_project(|ctx, pid| {
        let mr = mr_ref(ctx.project(pid), iid)?;
        if let Some(sha) = &sha
            && sha != &mr.sha
        {
            return Err(ApiError::message(
                StatusCode::CONFLICT,
                format!("SHA does not match HEAD of source branch: {}", mr.sha),
            ));
        }
        if !approve_mr(ctx, pid, iid, &call.user)? {
            return Err(ApiError::unauthorized());
        }
        let project = ctx.project(pid);
        created(approvals_json(
            project,
            mr_ref(project, iid)?,
            ctx.base,
            &call.user,
        ))
    })
}

pub async fn unapprove(call: ProjectCall<MergeRequestSegment>) -> ApiResult {
    let iid = call.segments.iid()?;
    call.with_project(|ctx, pid| {
        if !unapprove_mr(ctx, pid, iid, &call.user)? {
            return Err(ApiError::not_found(""));
        }
        let project = ctx.project(pid);
        created(approvals_json(
            project,
            mr_ref(project, iid)?,
            ctx.base,
            &call.user,
        ))
    })
}

pub async fn merge(call: ProjectCall<MergeRequestSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let auto = params.flag("auto_merge")? || params.flag("merge_when_pipeline_succeeds")?;
    let sha = params.str("sha");
    let squash_param = params.bool("squash")?;
    let message = params
        .str("merge_commit_message")
        .or_else(|| params.str("squash_commit_message"))
        .filter(|message| !message.is_empty());
    let remove_source = params.flag("should_remove_source_branch")?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let mr = mr_ref(project, iid)?.clone();
        let status = detailed_merge_status(project, &mr);
        let pipeline_status = head_pipeline(project, &mr).map(|pipeline| pipeline.status.clone());
        let pipeline_active = matches!(
            pipeline_status.as_deref(),
            Some("created" | "pending" | "running")
        );
        let trains_enabled = project.settings.merge_trains_enabled;
        // GitLab order: mergeable state (405) → conflicts (422) → sha (409).
        let mergeable_state = match status {
            "mergeable" | "conflict" => true,
            "ci_still_running" => auto,
            _ => false,
        };
        if !mergeable_state {
            return Err(ApiError::method_not_allowed());
        }
        if status == "conflict" {
            return Err(ApiError::message(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Branch cannot be merged",
            ));
        }
        if let Some(sha) = &sha
            && sha != &mr.sha
        {
            return Err(ApiError::message(
                StatusCode::CONFLICT,
                format!("SHA does not match HEAD of source branch: {}", mr.sha),
            ));
        }
        let squash = squash_param.unwrap_or(mr.squash);
        if let Some(squash) = squash_param {
            mr_mut(ctx.project_mut(pid), iid)?.squash = squash;
        }
        if auto && trains_enabled {
            if pipeline_active {
                set_auto_merge(
                    ctx,
                    pid,
                    iid,
                    "add_to_merge_train_when_pipeline_succeeds",
                    &call.user,
                    squash,
                    remove_source,
                    message,
                );
            } else {
                set_auto_merge(
                    ctx,
                    pid,
                    iid,
                    "merge_train",
                    &call.user,
                    squash,
                    remove_source,
                    message,
                );
                ops::add_car(ctx, pid, iid, &call.user, squash)?;
            }
        } else if auto && pipeline_active {
            set_auto_merge(
                ctx,
                pid,
                iid,
                "merge_when_pipeline_succeeds",
                &call.user,
                squash,
                remove_source,
                message,
            );
        } else {
            do_merge(ctx, pid, iid, &call.user, squash, message, remove_source)?;
        }
        let project = ctx.project(pid);
        ok(mr_json(project, mr_ref(project, iid)?, ctx.base, true))
    })
}

/// `PUT .../rebase`: replays the MR's changes on the target head (a push to the source branch).
pub async fn rebase(call: ProjectCall<MergeRequestSegment>) -> ApiResult {
    let iid = call.segments.iid()?;
    call.with_project(|ctx, pid| {
        let now = ctx.now;
        let project = ctx.project_mut(pid);
        let mr = mr_ref(project, iid)?.clone();
        if !mr.is_open() {
            return Err(ApiError::forbidden("Cannot push to source branch"));
        }
        let target = project
            .repo
            .branch_head(&mr.target_branch)
            .map(str::to_string)
            .ok_or_else(|| ApiError::not_found("Branch"))?;
        if !project.repo.is_ancestor(&target, &mr.sha) {
            let tree = project
                .repo
                .merge_trees(&target, &mr.sha)
                .map_err(|_| ApiError::forbidden("Rebase failed: conflicts"))?;
            let source_commit = project.repo.commit(&mr.sha).cloned();
            let (message, name, email) = source_commit
                .map(|commit| (commit.message, commit.author_name, commit.author_email))
                .unwrap_or_else(|| {
                    (
                        mr.title.clone(),
                        call.user.name.clone(),
                        call.user.email.clone(),
                    )
                });
            let sha = project.repo.create_commit(
                vec![target],
                Arc::new((*tree).clone()),
                &message,
                &name,
                &email,
                now,
            );
            project.repo.set_branch(&mr.source_branch, &sha);
            ops::on_branch_updated(ctx, pid, &mr.source_branch, Some(&mr.sha), &sha, &call.user);
        }
        Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({ "rebase_in_progress": false })),
        )
            .into_response())
    })
}
