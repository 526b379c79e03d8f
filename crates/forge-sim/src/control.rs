//! The control API (`/_sim/...`) and the operations behind it, shared with the Rust [`crate::SimHandle`].
//!
//! Control routes are neither authenticated, faulted nor logged. Errors are `{"error": "..."}`.
//! GitHub-specific control routes live under `/_sim/github/...` in `crate::github`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ci::JobSpec;
use crate::faults::{FaultRule, WebhookFaultRule};
use crate::gitlab::rest::repository::{CommitRequest, FileAction, apply_commit};
use crate::gitlab::{HookConfig, NewProject, ProjectSettings, with_project};
use crate::repo::MergeMethod;
use crate::state::{Shared, SimState, User, lock};

/// A control-API failure.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        let status = match self {
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
        };
        (status, Json(json!({ "error": self.to_string() }))).into_response()
    }
}

impl From<crate::gitlab::ApiError> for ControlError {
    fn from(error: crate::gitlab::ApiError) -> ControlError {
        let message = error
            .body
            .get("message")
            .or_else(|| error.body.get("error"))
            .map(|m| {
                m.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| m.to_string())
            })
            .unwrap_or_default();
        if error.status == StatusCode::NOT_FOUND {
            ControlError::NotFound(message)
        } else {
            ControlError::Invalid(message)
        }
    }
}

type ControlResult = Result<Response, ControlError>;

/// Settings of a GitLab project, as the control API takes them (all optional on update).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GitlabProjectSpec {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub merge_trains_enabled: Option<bool>,
    /// `merge` or `ff`.
    #[serde(default)]
    pub merge_method: Option<String>,
    #[serde(default)]
    pub approvals_required: Option<u32>,
    #[serde(default)]
    pub only_allow_merge_if_pipeline_succeeds: Option<bool>,
    #[serde(default)]
    pub only_allow_merge_if_all_discussions_are_resolved: Option<bool>,
    /// The project runs merge request pipelines (`refs/merge-requests/<iid>/head`).
    #[serde(default)]
    pub merge_request_pipelines: Option<bool>,
    /// A push clears the MR's approvals (GitLab's default).
    #[serde(default)]
    pub reset_approvals_on_push: Option<bool>,
    #[serde(default)]
    pub jobs: Option<Vec<JobSpec>>,
    #[serde(default)]
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub webhook_secret: Option<String>,
}

fn apply_settings(
    settings: &mut ProjectSettings,
    spec: &GitlabProjectSpec,
) -> Result<(), ControlError> {
    if let Some(enabled) = spec.merge_trains_enabled {
        settings.merge_trains_enabled = enabled;
    }
    if let Some(method) = &spec.merge_method {
        settings.merge_method = match method.as_str() {
            "merge" | "rebase_merge" => MergeMethod::Merge,
            "ff" => MergeMethod::Rebase,
            other => {
                return Err(ControlError::Invalid(format!(
                    "unknown merge_method {other:?} (merge, ff)"
                )));
            }
        };
    }
    if let Some(required) = spec.approvals_required {
        settings.approvals_required = required;
    }
    if let Some(value) = spec.only_allow_merge_if_pipeline_succeeds {
        settings.only_allow_merge_if_pipeline_succeeds = value;
    }
    if let Some(value) = spec.only_allow_merge_if_all_discussions_are_resolved {
        settings.only_allow_merge_if_all_discussions_are_resolved = value;
    }
    if let Some(value) = spec.merge_request_pipelines {
        settings.merge_request_pipelines = value;
    }
    if let Some(value) = spec.reset_approvals_on_push {
        settings.reset_approvals_on_push = value;
    }
    Ok(())
}

/// Creates a GitLab project; returns its id.
pub fn create_gitlab_project(
    state: &SimState,
    spec: &GitlabProjectSpec,
) -> Result<u64, ControlError> {
    let mut new = NewProject::new(&spec.path);
    if let Some(branch) = &spec.default_branch {
        new.default_branch = branch.clone();
    }
    apply_settings(&mut new.settings, spec)?;
    if let Some(jobs) = &spec.jobs {
        new.jobs = jobs.clone();
    }
    if let Some(url) = &spec.webhook_url {
        new.hook = Some(HookConfig {
            url: url.clone(),
            secret: spec.webhook_secret.clone().unwrap_or_default(),
        });
    }
    let now = state.clock.now();
    lock(&state.gitlab)
        .create_project(new, now)
        .map_err(ControlError::Invalid)
}

/// Updates settings, jobs and webhook of an existing project (only the fields given).
pub fn update_gitlab_project(
    state: &SimState,
    key: &str,
    spec: &GitlabProjectSpec,
) -> Result<(), ControlError> {
    let mut gitlab = lock(&state.gitlab);
    let project = gitlab.project_mut(key)?;
    apply_settings(&mut project.settings, spec)?;
    if let Some(jobs) = &spec.jobs {
        project.ci.jobs = jobs.clone();
    }
    if let Some(url) = &spec.webhook_url {
        project.hook = Some(HookConfig {
            url: url.clone(),
            secret: spec.webhook_secret.clone().unwrap_or_default(),
        });
    }
    Ok(())
}

/// Replaces (or adds) one job's script.
pub fn set_gitlab_job(state: &SimState, key: &str, spec: JobSpec) -> Result<(), ControlError> {
    let mut gitlab = lock(&state.gitlab);
    gitlab.project_mut(key)?.ci.set_job(spec);
    Ok(())
}

/// Approves an MR as `username` (created if unknown).
pub fn approve_gitlab_mr(
    state: &SimState,
    key: &str,
    iid: u64,
    username: &str,
) -> Result<(), ControlError> {
    let user = lock(&state.users).ensure(username);
    with_project(state, key, |ctx, pid| {
        crate::gitlab::ops::approve_mr(ctx, pid, iid, &user)
    })?;
    Ok(())
}

/// Sets the number of unresolved blocking discussions on an MR.
pub fn set_gitlab_unresolved(
    state: &SimState,
    key: &str,
    iid: u64,
    unresolved: u32,
) -> Result<(), ControlError> {
    let mut gitlab = lock(&state.gitlab);
    let project = gitlab.project_mut(key)?;
    let mr = project
        .merge_requests
        .get_mut(&iid)
        .ok_or_else(|| ControlError::NotFound(format!("merge request !{iid} not found")))?;
    mr.unresolved_discussions = unresolved;
    Ok(())
}

/// A human push: file contents (`None` deletes) committed onto a branch.
#[derive(Debug, Clone, Deserialize)]
pub struct PushSpec {
    pub branch: String,
    /// Where a new branch starts (default: the default branch).
    #[serde(default)]
    pub start_branch: Option<String>,
    #[serde(default)]
    pub files: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub message: Option<String>,
    /// Username of the pusher (created if unknown); default `human`.
    #[serde(default)]
    pub author: Option<String>,
}

/// Pushes a commit to a GitLab branch (as a human would); returns the new sha.
pub fn push_gitlab(state: &SimState, key: &str, spec: &PushSpec) -> Result<String, ControlError> {
    let user: User = lock(&state.users).ensure(spec.author.as_deref().unwrap_or("human"));
    let sha = with_project(state, key, |ctx, pid| {
        let repo = &ctx.project(pid).repo;
        let exists = repo.branch_head(&spec.branch).is_some();
        let start = if exists {
            None
        } else {
            Some(
                spec.start_branch
                    .clone()
                    .unwrap_or_else(|| repo.default_branch().to_string()),
            )
        };
        let start_head = start
            .as_deref()
            .or(Some(spec.branch.as_str()))
            .and_then(|b| repo.branch_head(b))
            .and_then(|sha| repo.commit(sha))
            .ok_or_else(|| crate::gitlab::ApiError::not_found("Branch"))?;
        let actions = spec
            .files
            .iter()
            .filter_map(
                |(path, content)| match (content, start_head.tree.contains_key(path)) {
                    (Some(text), true) => Some(FileAction::Update {
                        path: path.clone(),
                        content: text.clone().into_bytes(),
                    }),
                    (Some(text), false) => Some(FileAction::Create {
                        path: path.clone(),
                        content: text.clone().into_bytes(),
                        executable: false,
                    }),
                    (None, true) => Some(FileAction::Delete { path: path.clone() }),
                    (None, false) => None,
                },
            )
            .collect();
        let request = CommitRequest {
            branch: spec.branch.clone(),
            start_branch: start,
            start_sha: None,
            force: false,
            message: spec
                .message
                .clone()
                .unwrap_or_else(|| "Human commit".to_string()),
            actions,
            author_name: None,
            author_email: None,
        };
        apply_commit(ctx, pid, &request, &user)
    })?;
    Ok(sha)
}

/// Protects a branch name or wildcard (`release/*`) of a GitLab project.
pub fn protect_gitlab_branch(state: &SimState, key: &str, name: &str) -> Result<(), ControlError> {
    if name.is_empty() {
        return Err(ControlError::Invalid("name is required".to_string()));
    }
    lock(&state.gitlab).project_mut(key)?.protect(name);
    Ok(())
}

/// Removes a protected branch entry (by its exact name or wildcard).
pub fn unprotect_gitlab_branch(
    state: &SimState,
    key: &str,
    name: &str,
) -> Result<(), ControlError> {
    if lock(&state.gitlab).project_mut(key)?.unprotect(name) {
        Ok(())
    } else {
        Err(ControlError::NotFound(format!(
            "protected branch {name} not found"
        )))
    }
}

/// A merge request opened by a person (not the token's user).
#[derive(Debug, Clone, Deserialize)]
pub struct OpenMrSpec {
    pub source_branch: String,
    pub target_branch: String,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    /// Username of the author (created if unknown); default `human`.
    #[serde(default)]
    pub author: Option<String>,
}

/// Opens a GitLab merge request as `spec.author`, through the same path as
/// `POST /projects/:id/merge_requests` (hooks, pipeline); returns the MR as the API renders it.
pub async fn open_gitlab_mr(
    state: &Shared,
    key: &str,
    spec: &OpenMrSpec,
) -> Result<Value, ControlError> {
    let user: User = lock(&state.users).ensure(spec.author.as_deref().unwrap_or("human"));
    let mut params = serde_json::Map::new();
    params.insert("source_branch".into(), json!(spec.source_branch));
    params.insert("target_branch".into(), json!(spec.target_branch));
    params.insert("title".into(), json!(spec.title));
    if let Some(description) = &spec.description {
        params.insert("description".into(), json!(description));
    }
    if !spec.labels.is_empty() {
        params.insert("labels".into(), json!(spec.labels.join(",")));
    }
    let response = crate::gitlab::rest::merge_requests::create(
        crate::gitlab::rest::ProjectCall::new(state, key, user, ()),
        crate::gitlab::Params(params),
    )
    .await?;
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| ControlError::Invalid(format!("unreadable answer: {e}")))?;
    serde_json::from_slice(&body)
        .map_err(|e| ControlError::Invalid(format!("answer is not JSON: {e}")))
}

/// Advances sim time and progresses everything that became due.
pub fn advance(state: &SimState, by: Duration) {
    state.clock.advance(by);
    state.tick();
}

// ---------------------------------------------------------------------------------------------
// HTTP routes

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/health", get(|| async { Json(json!({ "ok": true })) }))
        .route("/users", post(add_user))
        .route("/gitlab/projects", post(create_project_route))
        .route(
            "/gitlab/projects/{id}",
            get(get_project_route).put(update_project_route),
        )
        .route("/gitlab/projects/{id}/jobs", post(set_job_route))
        .route("/gitlab/projects/{id}/push", post(push_route))
        .route(
            "/gitlab/projects/{id}/protected_branches",
            post(protect_route).delete(unprotect_route),
        )
        .route("/gitlab/projects/{id}/merge_requests", post(open_mr_route))
        .route(
            "/gitlab/projects/{id}/merge_requests/{iid}/approve",
            post(approve_route),
        )
        .route(
            "/gitlab/projects/{id}/merge_requests/{iid}/discussions",
            put(discussions_route),
        )
        .route("/advance", post(advance_route))
        .route("/tick", post(tick_route))
        .route("/time", get(time_route))
        .route(
            "/requests",
            get(requests_route).delete(clear_requests_route),
        )
        .route(
            "/faults",
            get(list_faults_route)
                .post(add_fault_route)
                .delete(clear_faults_route),
        )
        .route("/faults/cancel_hangs", post(cancel_hangs_route))
        .route("/faults/seed", post(seed_faults_route))
        .route("/webhook_faults", post(add_webhook_fault_route))
        .route(
            "/webhooks",
            get(deliveries_route).delete(clear_deliveries_route),
        )
        .route("/webhooks/release", post(release_route))
        .route("/webhooks/flush", post(flush_route))
}

#[derive(Deserialize)]
struct NewUser {
    username: String,
    token: String,
}

async fn add_user(State(state): State<Shared>, Json(body): Json<NewUser>) -> ControlResult {
    if body.username.is_empty() || body.token.is_empty() {
        return Err(ControlError::Invalid(
            "username and token are required".to_string(),
        ));
    }
    let user = lock(&state.users).add(&body.username, &body.token);
    Ok((StatusCode::CREATED, Json(json!(user))).into_response())
}

fn project_summary(state: &SimState, key: &str) -> Result<Value, ControlError> {
    let base = state.base_url();
    let gitlab = lock(&state.gitlab);
    let id = gitlab
        .project_id(key)
        .ok_or_else(|| ControlError::NotFound(format!("project {key} not found")))?;
    let project = &gitlab.projects[&id];
    let mut body = crate::gitlab::project_json(project, &base);
    body["branches"] = json!(project.repo.branches().collect::<BTreeMap<_, _>>());
    body["jobs"] = json!(project.ci.jobs);
    body["webhook_url"] = json!(project.hook.as_ref().map(|h| h.url.clone()));
    Ok(body)
}

async fn create_project_route(
    State(state): State<Shared>,
    Json(spec): Json<GitlabProjectSpec>,
) -> ControlResult {
    let id = create_gitlab_project(&state, &spec)?;
    Ok((
        StatusCode::CREATED,
        Json(project_summary(&state, &id.to_string())?),
    )
        .into_response())
}

async fn get_project_route(State(state): State<Shared>, Path(id): Path<String>) -> ControlResult {
    Ok(Json(project_summary(&state, &id)?).into_response())
}

async fn update_project_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(spec): Json<GitlabProjectSpec>,
) -> ControlResult {
    update_gitlab_project(&state, &id, &spec)?;
    Ok(Json(project_summary(&state, &id)?).into_response())
}

async fn set_job_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(spec): Json<JobSpec>,
) -> ControlResult {
    set_gitlab_job(&state, &id, spec)?;
    Ok(Json(project_summary(&state, &id)?).into_response())
}

async fn push_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(spec): Json<PushSpec>,
) -> ControlResult {
    let sha = push_gitlab(&state, &id, &spec)?;
    Ok((StatusCode::CREATED, Json(json!({ "sha": sha }))).into_response())
}

#[derive(Deserialize)]
struct ProtectBody {
    name: String,
}

async fn protect_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<ProtectBody>,
) -> ControlResult {
    protect_gitlab_branch(&state, &id, &body.name)?;
    Ok((StatusCode::CREATED, Json(json!({ "name": body.name }))).into_response())
}

async fn unprotect_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<ProtectBody>,
) -> ControlResult {
    unprotect_gitlab_branch(&state, &id, &body.name)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn open_mr_route(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Json(spec): Json<OpenMrSpec>,
) -> ControlResult {
    let mr = open_gitlab_mr(&state, &id, &spec).await?;
    Ok((StatusCode::CREATED, Json(mr)).into_response())
}

#[derive(Deserialize)]
struct ApproveBody {
    username: String,
}

async fn approve_route(
    State(state): State<Shared>,
    Path((id, iid)): Path<(String, u64)>,
    Json(body): Json<ApproveBody>,
) -> ControlResult {
    approve_gitlab_mr(&state, &id, iid, &body.username)?;
    Ok(Json(json!({ "ok": true })).into_response())
}

#[derive(Deserialize)]
struct DiscussionsBody {
    unresolved: u32,
}

async fn discussions_route(
    State(state): State<Shared>,
    Path((id, iid)): Path<(String, u64)>,
    Json(body): Json<DiscussionsBody>,
) -> ControlResult {
    set_gitlab_unresolved(&state, &id, iid, body.unresolved)?;
    Ok(Json(json!({ "ok": true })).into_response())
}

#[derive(Deserialize)]
struct AdvanceBody {
    seconds: f64,
}

async fn advance_route(
    State(state): State<Shared>,
    Json(body): Json<AdvanceBody>,
) -> ControlResult {
    if !body.seconds.is_finite() || body.seconds < 0.0 {
        return Err(ControlError::Invalid(
            "seconds must be a non-negative number".to_string(),
        ));
    }
    advance(&state, Duration::from_secs_f64(body.seconds));
    time_route(State(state)).await
}

async fn tick_route(State(state): State<Shared>) -> ControlResult {
    state.tick();
    Ok(Json(json!({ "ok": true })).into_response())
}

async fn time_route(State(state): State<Shared>) -> ControlResult {
    let now = state.clock.now();
    Ok(Json(json!({
        "now": crate::gitlab::ts(now),
        "unix": now.unix_timestamp(),
        "offset_seconds": state.clock.offset().as_secs_f64(),
    }))
    .into_response())
}

#[derive(Deserialize)]
struct RequestFilter {
    #[serde(default)]
    path_prefix: Option<String>,
    #[serde(default)]
    method: Option<String>,
}

async fn requests_route(
    State(state): State<Shared>,
    Query(filter): Query<RequestFilter>,
) -> ControlResult {
    let entries: Vec<_> = state
        .log
        .entries()
        .into_iter()
        .filter(|e| {
            filter
                .path_prefix
                .as_ref()
                .is_none_or(|p| e.path.starts_with(p.as_str()))
        })
        .filter(|e| {
            filter
                .method
                .as_ref()
                .is_none_or(|m| e.method.eq_ignore_ascii_case(m))
        })
        .collect();
    Ok(Json(json!(entries)).into_response())
}

async fn clear_requests_route(State(state): State<Shared>) -> ControlResult {
    state.log.clear();
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_faults_route(State(state): State<Shared>) -> ControlResult {
    let (http, webhook) = state.faults.list();
    Ok(Json(json!({ "http": http, "webhook": webhook })).into_response())
}

async fn add_fault_route(
    State(state): State<Shared>,
    Json(rule): Json<FaultRule>,
) -> ControlResult {
    if rule.path_prefix.is_none() && rule.path_pattern.is_none() {
        return Err(ControlError::Invalid(
            "path_prefix or path_pattern is required".to_string(),
        ));
    }
    let id = state.faults.add_http(rule);
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

async fn clear_faults_route(State(state): State<Shared>) -> ControlResult {
    state.faults.clear();
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn cancel_hangs_route(State(state): State<Shared>) -> ControlResult {
    state.faults.cancel_hangs();
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct SeedBody {
    seed: u64,
}

/// `POST /_sim/faults/seed {"seed": n}`: restarts the draws of probabilistic rules.
async fn seed_faults_route(
    State(state): State<Shared>,
    Json(body): Json<SeedBody>,
) -> ControlResult {
    state.faults.seed(body.seed);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn add_webhook_fault_route(
    State(state): State<Shared>,
    Json(rule): Json<WebhookFaultRule>,
) -> ControlResult {
    let id = state.faults.add_webhook(rule);
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))).into_response())
}

async fn deliveries_route(State(state): State<Shared>) -> ControlResult {
    Ok(Json(json!(state.webhooks.deliveries())).into_response())
}

async fn clear_deliveries_route(State(state): State<Shared>) -> ControlResult {
    state.webhooks.clear_log();
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn release_route(State(state): State<Shared>) -> ControlResult {
    let released = state.webhooks.release_held();
    Ok(Json(json!({ "released": released })).into_response())
}

async fn flush_route(State(state): State<Shared>) -> ControlResult {
    let idle = state.webhooks.flush(Duration::from_secs(10)).await;
    Ok(Json(json!({ "idle": idle, "pending": state.webhooks.pending() })).into_response())
}
