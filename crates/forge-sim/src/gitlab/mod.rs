//! Simulated GitLab (REST v4 subset): state, routing, auth and parameter parsing.
//!
//! Layout as in the GitHub half: [`model`] holds the entities and derived merge-request state,
//! [`json`](mod@json) the REST renderings, [`hooks`] the webhook payloads, [`quick_actions`] the note
//! command parser, [`ops`] the state transitions, [`rest`] the HTTP surface.
//!
//! Pipelines: every push to a branch that is the source of an open merge request starts a branch
//! pipeline (source `push`); opening or reopening a merge request starts one (source
//! `merge_request_event`) when its head commit has none yet; merge trains run their own pipelines
//! on `refs/merge-requests/<iid>/train`. Pushes to branches without an open MR start no pipeline.

pub mod hooks;
pub mod json;
pub mod model;
pub mod ops;
pub mod quick_actions;
pub mod rest;

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::ci::CiScript;
use crate::repo::Repo;
use crate::state::{SimState, lock};

pub use json::{opt_ts, project_json, ts, user_json};
pub use model::{HookConfig, NewProject, Project, ProjectSettings};
pub use rest::router;

/// All GitLab-side state.
#[derive(Default)]
pub struct GitlabState {
    next_project_id: u64,
    next_mr_id: u64,
    next_note_id: u64,
    next_pipeline_id: u64,
    next_job_id: u64,
    next_car_id: u64,
    pub projects: BTreeMap<u64, Project>,
}

impl GitlabState {
    /// Creates a project; fails when the path is taken or malformed.
    pub fn create_project(&mut self, new: NewProject, now: OffsetDateTime) -> Result<u64, String> {
        let path = new.path.trim_matches('/').to_string();
        if path.is_empty() || path.split('/').any(str::is_empty) {
            return Err(format!("invalid project path {path:?}"));
        }
        if self
            .projects
            .values()
            .any(|p| p.path_with_namespace.eq_ignore_ascii_case(&path))
        {
            return Err(format!("project {path} already exists"));
        }
        self.next_project_id += 1;
        let id = self.next_project_id;
        let protected_branches = vec![model::ProtectedBranch {
            id: 1,
            name: new.default_branch.clone(),
        }];
        self.projects.insert(
            id,
            Project {
                id,
                path_with_namespace: path,
                repo: Repo::new(&new.default_branch, now),
                settings: new.settings,
                ci: CiScript::new(new.jobs),
                hook: new.hook,
                merge_requests: BTreeMap::new(),
                next_mr_iid: 0,
                pipelines: BTreeMap::new(),
                next_pipeline_iid: 0,
                jobs: BTreeMap::new(),
                train: Vec::new(),
                train_history: Vec::new(),
                protected_branches,
            },
        );
        Ok(id)
    }

    /// Finds a project by numeric id or full path. Paths compare case-insensitively, as GitLab
    /// resolves them (`Team/Service` and `team/service` are one project); answers carry the
    /// project's own spelling (`path_with_namespace`).
    pub fn project_id(&self, key: &str) -> Option<u64> {
        if let Ok(id) = key.parse::<u64>() {
            return self.projects.contains_key(&id).then_some(id);
        }
        self.projects
            .values()
            .find(|p| p.path_with_namespace.eq_ignore_ascii_case(key))
            .map(|p| p.id)
    }

    pub fn project_mut(&mut self, key: &str) -> Result<&mut Project, ApiError> {
        let id = self
            .project_id(key)
            .ok_or_else(|| ApiError::not_found("Project"))?;
        self.projects
            .get_mut(&id)
            .ok_or_else(|| ApiError::not_found("Project"))
    }

    pub(crate) fn alloc_mr_id(&mut self) -> u64 {
        self.next_mr_id += 1;
        self.next_mr_id
    }

    pub(crate) fn alloc_note_id(&mut self) -> u64 {
        self.next_note_id += 1;
        self.next_note_id
    }

    pub(crate) fn alloc_pipeline_id(&mut self) -> u64 {
        self.next_pipeline_id += 1;
        self.next_pipeline_id
    }

    pub(crate) fn alloc_job_id(&mut self) -> u64 {
        self.next_job_id += 1;
        self.next_job_id
    }

    pub(crate) fn alloc_car_id(&mut self) -> u64 {
        self.next_car_id += 1;
        self.next_car_id
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A GitLab-style error response: `{"message": ...}` or, for parameter validation, `{"error": ...}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
}

impl ApiError {
    pub fn message(status: StatusCode, message: impl Into<Value>) -> ApiError {
        ApiError {
            status,
            body: json!({ "message": message.into() }),
        }
    }

    /// 400 `{"error": "..."}` as Grape's parameter validation answers.
    pub fn param(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            body: json!({ "error": message.into() }),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::message(StatusCode::BAD_REQUEST, message.into())
    }

    /// 404 `{"message": "404 <What> Not Found"}`.
    /// With an empty `what`: `"404 Not found"` (GitLab's generic form).
    pub fn not_found(what: &str) -> ApiError {
        if what.is_empty() {
            return ApiError::message(StatusCode::NOT_FOUND, "404 Not found");
        }
        ApiError::message(StatusCode::NOT_FOUND, format!("404 {what} Not Found"))
    }

    pub fn unauthorized() -> ApiError {
        ApiError::message(StatusCode::UNAUTHORIZED, "401 Unauthorized")
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::message(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed")
    }

    pub fn forbidden(detail: &str) -> ApiError {
        ApiError::message(StatusCode::FORBIDDEN, format!("403 Forbidden - {detail}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

pub type ApiResult = Result<Response, ApiError>;

/// 200 with a JSON body.
pub fn ok(body: Value) -> ApiResult {
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// 201 with a JSON body.
pub fn created(body: Value) -> ApiResult {
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

// ---------------------------------------------------------------------------------------------
// Parameters

/// Request parameters merged from the query string and a JSON or form body (body wins),
/// as GitLab (Grape) accepts them from either place.
#[derive(Debug, Default, Clone)]
pub struct Params(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Params, ApiError> {
        let mut map = Map::new();
        if let Ok(axum::extract::Query(pairs)) =
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(request.uri())
        {
            for (key, value) in pairs {
                map.insert(key, Value::String(value));
            }
        }
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("application/x-www-form-urlencoded") {
            let axum::Form(pairs) =
                axum::Form::<Vec<(String, String)>>::from_request(request, state)
                    .await
                    .map_err(|e| ApiError::param(format!("invalid form body: {e}")))?;
            for (key, value) in pairs {
                map.insert(key, Value::String(value));
            }
            return Ok(Params(map));
        }
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|e| ApiError::param(format!("unreadable body: {e}")))?;
        if !bytes.iter().all(u8::is_ascii_whitespace) {
            let body: Value = serde_json::from_slice(&bytes).map_err(|_| {
                ApiError::param("There was a problem with the JSON in your request")
            })?;
            match body {
                Value::Object(fields) => map.extend(fields),
                _ => return Err(ApiError::param("The request body must be a JSON object")),
            }
        }
        Ok(Params(map))
    }
}

impl Params {
    /// Fails with Grape's `"a is missing, b is missing"` when any key is absent or blank.
    pub fn require(&self, keys: &[&str]) -> Result<(), ApiError> {
        let missing: Vec<String> = keys
            .iter()
            .filter(|k| match self.0.get(**k) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            })
            .map(|k| format!("{k} is missing"))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ApiError::param(missing.join(", ")))
        }
    }

    pub fn has(&self, key: &str) -> bool {
        !matches!(self.0.get(key), None | Some(Value::Null))
    }

    /// A string parameter (numbers and booleans are accepted and printed).
    pub fn str(&self, key: &str) -> Option<String> {
        match self.0.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// A required string (400 `"<key> is missing"`).
    pub fn req_str(&self, key: &str) -> Result<String, ApiError> {
        self.require(&[key])?;
        self.str(key)
            .ok_or_else(|| ApiError::param(format!("{key} is invalid")))
    }

    /// A boolean parameter, Grape-style: true/false/1/0/"true"/"false"; 400 `"<key> is invalid"`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(Some(true)),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(Some(false)),
            Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "t" => Ok(Some(true)),
                "false" | "0" | "no" | "f" | "" => Ok(Some(false)),
                _ => Err(ApiError::param(format!("{key} is invalid"))),
            },
            Some(_) => Err(ApiError::param(format!("{key} is invalid"))),
        }
    }

    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        Ok(self.bool(key)?.unwrap_or(false))
    }

    /// An unsigned integer parameter; 400 `"<key> is invalid"`.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| ApiError::param(format!("{key} is invalid"))),
            Some(Value::String(s)) => s
                .parse()
                .map(Some)
                .map_err(|_| ApiError::param(format!("{key} is invalid"))),
            Some(_) => Err(ApiError::param(format!("{key} is invalid"))),
        }
    }

    /// Labels as GitLab takes them: a comma-separated string or an array of strings.
    pub fn labels(&self, key: &str) -> Option<Vec<String>> {
        let labels: Vec<String> = match self.0.get(key)? {
            Value::String(s) => s.split(',').map(|l| l.trim().to_string()).collect(),
            Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(|s| s.trim().to_string()))
                .collect(),
            _ => return None,
        };
        let mut unique: Vec<String> = Vec::new();
        for label in labels {
            if !label.is_empty() && !unique.contains(&label) {
                unique.push(label);
            }
        }
        Some(unique)
    }
}

/// Progresses pipelines, jobs, auto-merges and merge trains of every project; whether anything
/// moved.
pub fn tick(state: &SimState) -> bool {
    let now = state.clock.now();
    let base = state.base_url();
    let mut gitlab = lock(&state.gitlab);
    let ids: Vec<u64> = gitlab.projects.keys().copied().collect();
    let mut moved = false;
    for id in ids {
        let mut ctx = Ctx::new(&mut gitlab, state, now, &base);
        moved |= ops::progress(&mut ctx, id);
    }
    moved
}

// ---------------------------------------------------------------------------------------------
// Context for mutations that emit webhooks

/// A mutation context: the locked GitLab state plus what is needed to emit webhooks.
pub struct Ctx<'a> {
    pub gl: &'a mut GitlabState,
    pub sim: &'a SimState,
    pub now: OffsetDateTime,
    pub base: &'a str,
}

impl<'a> Ctx<'a> {
    pub fn new(
        gl: &'a mut GitlabState,
        sim: &'a SimState,
        now: OffsetDateTime,
        base: &'a str,
    ) -> Ctx<'a> {
        Ctx { gl, sim, now, base }
    }

    pub fn project(&self, id: u64) -> &Project {
        self.gl
            .projects
            .get(&id)
            .expect("project ids in a Ctx come from the project map")
    }

    pub fn project_mut(&mut self, id: u64) -> &mut Project {
        self.gl
            .projects
            .get_mut(&id)
            .expect("project ids in a Ctx come from the project map")
    }

    /// Queues a webhook for the project if it has a hook configured.
    pub fn emit(&self, project_id: u64, event: &str, body: Value) {
        let Some(project) = self.gl.projects.get(&project_id) else {
            return;
        };
        let Some(hook) = &project.hook else {
            return;
        };
        let uuid = uuid::Uuid::new_v4().to_string();
        let headers = vec![
            ("Content-Type".to_string(), "application/json".to_string()),
            ("User-Agent".to_string(), "GitLab/17.11.0".to_string()),
            ("X-Gitlab-Event".to_string(), event.to_string()),
            ("X-Gitlab-Token".to_string(), hook.secret.clone()),
            ("X-Gitlab-Instance".to_string(), self.base.to_string()),
            ("X-Gitlab-Webhook-UUID".to_string(), uuid.clone()),
            ("X-Gitlab-Event-UUID".to_string(), uuid),
        ];
        self.sim.webhooks.send(hook.url.clone(), headers, body);
    }
}

// ---------------------------------------------------------------------------------------------
// Shared entities

/// Runs `f` on a project (by id or path) with a mutation context; the project id is passed in.
pub fn with_project<T>(
    state: &SimState,
    key: &str,
    f: impl FnOnce(&mut Ctx<'_>, u64) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let now = state.clock.now();
    let base = state.base_url();
    let mut gitlab = lock(&state.gitlab);
    let id = gitlab
        .project_id(key)
        .ok_or_else(|| ApiError::not_found("Project"))?;
    let mut ctx = Ctx::new(&mut gitlab, state, now, &base);
    f(&mut ctx, id)
}
