//! GitLab REST v4 endpoints (mounted under `/api/v4`): authentication, routes and handlers.

pub mod merge_requests;
pub mod notes;
pub mod paging;
pub mod pipelines;
pub mod protected_branches;
pub mod repository;
pub mod trains;

use axum::extract::{FromRequestParts, OriginalUri, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{ApiError, ApiResult, Ctx, Params, ok, user_json, with_project};
use crate::state::{Shared, User};

/// `PRIVATE-TOKEN` or `Authorization: Bearer` → the user; 401 otherwise.
async fn auth(State(state): State<Shared>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    let token = headers
        .get("private-token")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| {
                    value
                        .strip_prefix("Bearer ")
                        .or_else(|| value.strip_prefix("bearer "))
                })
                .map(|token| token.trim().to_string())
        });
    let user = token.and_then(|token| state.user_for_token(&token));
    match user {
        Some(user) => {
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}

/// The `{id}` of a project route: a numeric id or a URL-encoded `group/name` path.
#[derive(Deserialize)]
struct ProjectSegment {
    id: String,
}

/// A call on one project (`/projects/{id}/...`) by the user the auth middleware found, with the
/// route's further segments deserialized into `Segments` (a struct naming them, `()` for none).
///
/// Segments stay text: Grape checks a numeric one together with the parameters, so handlers
/// parse it (with [`path_number`]) after the parameters and report it the way Grape does. Whether
/// the project exists is only known under the state lock, in [`ProjectCall::with_project`].
pub struct ProjectCall<Segments = ()> {
    pub user: User,
    pub segments: Segments,
    state: Shared,
    project: String,
    /// The request's URI as sent (`/api/v4/...?query`), for the `Link` headers of lists.
    uri: Uri,
}

impl<Segments: DeserializeOwned + Send> FromRequestParts<Shared> for ProjectCall<Segments> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Response> {
        let Path(project) = Path::<ProjectSegment>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(segments) = Path::<Segments>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Extension(user) = Extension::<User>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let OriginalUri(uri) = OriginalUri::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(ProjectCall {
            user,
            segments,
            state: state.clone(),
            project: project.id,
            uri,
        })
    }
}

impl<Segments> ProjectCall<Segments> {
    /// A call made by the simulator itself (the control API opening a merge request as a
    /// person), without an HTTP request.
    pub fn new(state: &Shared, project: &str, user: User, segments: Segments) -> Self {
        ProjectCall {
            user,
            segments,
            state: state.clone(),
            project: project.to_string(),
            uri: Uri::default(),
        }
    }

    /// Runs `f` on the project (404 `Project Not Found` when there is none) with a mutation
    /// context; `f` gets the project's numeric id.
    pub fn with_project<T>(
        &self,
        f: impl FnOnce(&mut Ctx<'_>, u64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        with_project(&self.state, &self.project, f)
    }

    /// 200 with the page of `items` that `params` ask for, with GitLab's pagination headers.
    pub fn paged(&self, params: &Params, items: Vec<Value>) -> ApiResult {
        paging::ok_paged(&self.state.base_url(), &self.uri, params, items)
    }
}

/// A numeric path segment; Grape's 400 `"<param> is invalid"` when it is not a number.
pub fn path_number(segment: &str, param: &str) -> Result<u64, ApiError> {
    segment
        .parse()
        .map_err(|_| ApiError::param(format!("{param} is invalid")))
}

/// `{iid}` of a merge request route.
#[derive(Deserialize)]
pub struct MergeRequestSegment {
    iid: String,
}

impl MergeRequestSegment {
    pub fn iid(&self) -> Result<u64, ApiError> {
        path_number(&self.iid, "merge_request_iid")
    }
}

/// The GitLab REST router (mounted under `/api/v4`).
pub fn router(state: Shared) -> Router<Shared> {
    let project = "/projects/{id}";
    let mr = "/projects/{id}/merge_requests/{iid}";
    Router::new()
        .route("/user", get(current_user))
        .route("/projects", get(list_projects))
        .route("/users", get(list_users))
        .route(project, get(repository::get_project))
        .route(
            &format!("{project}/repository/files/{{file_path}}"),
            get(repository::get_file),
        )
        .route(
            &format!("{project}/repository/files/{{file_path}}/raw"),
            get(repository::get_file_raw),
        )
        .route(
            &format!("{project}/repository/branches"),
            get(repository::list_branches).post(repository::create_branch),
        )
        .route(
            &format!("{project}/repository/branches/{{branch}}"),
            get(repository::get_branch).delete(repository::delete_branch),
        )
        .route(
            &format!("{project}/repository/commits"),
            get(repository::list_commits).post(repository::create_commit),
        )
        .route(&format!("{project}/repository/tree"), get(repository::tree))
        .route(
            &format!("{project}/repository/commits/{{sha}}"),
            get(repository::get_commit),
        )
        .route(
            &format!("{project}/repository/compare"),
            get(repository::compare),
        )
        .route(
            &format!("{project}/approvals"),
            get(merge_requests::project_approvals),
        )
        .route(
            &format!("{project}/merge_requests"),
            get(merge_requests::list).post(merge_requests::create),
        )
        .route(mr, get(merge_requests::get_one).put(merge_requests::update))
        .route(&format!("{mr}/merge"), put(merge_requests::merge))
        .route(&format!("{mr}/rebase"), put(merge_requests::rebase))
        .route(&format!("{mr}/approvals"), get(merge_requests::approvals))
        .route(&format!("{mr}/approve"), post(merge_requests::approve))
        .route(&format!("{mr}/unapprove"), post(merge_requests::unapprove))
        .route(&format!("{mr}/pipelines"), get(pipelines::mr_pipelines))
        .route(&format!("{mr}/notes"), get(notes::list).post(notes::create))
        .route(
            &format!("{mr}/notes/{{note_id}}"),
            get(notes::get_one).put(notes::update),
        )
        .route(&format!("{project}/pipelines"), get(pipelines::list))
        .route(
            &format!("{project}/pipelines/{{pipeline_id}}"),
            get(pipelines::get_one),
        )
        .route(
            &format!("{project}/pipelines/{{pipeline_id}}/jobs"),
            get(pipelines::pipeline_jobs),
        )
        .route(&format!("{project}/jobs"), get(pipelines::project_jobs))
        .route(
            &format!("{project}/jobs/{{job_id}}"),
            get(pipelines::get_job),
        )
        .route(
            &format!("{project}/jobs/{{job_id}}/trace"),
            get(pipelines::job_trace),
        )
        .route(
            &format!("{project}/jobs/{{job_id}}/retry"),
            post(pipelines::retry_job),
        )
        .route(
            &format!("{project}/protected_branches"),
            get(protected_branches::list),
        )
        .route(
            &format!("{project}/protected_branches/{{name}}"),
            get(protected_branches::get_one),
        )
        .route(&format!("{project}/merge_trains"), get(trains::list))
        .route(
            &format!("{project}/merge_trains/merge_requests/{{iid}}"),
            get(trains::get_car).post(trains::add_car_endpoint),
        )
        .fallback(|| async { ApiError::not_found("").into_response() })
        .layer(axum::middleware::from_fn_with_state(state, auth))
}

async fn current_user(
    axum::Extension(user): axum::Extension<User>,
    State(state): State<Shared>,
) -> ApiResult {
    ok(user_json(&user, &state.base_url()))
}

/// `GET /projects?search=&sort=`: every project (the simulator has no visibility levels), newest
/// first as GitLab orders them (`order_by=created_at`, `sort=desc`; `sort=asc` reverses). Paged.
async fn list_projects(
    State(state): State<Shared>,
    OriginalUri(uri): OriginalUri,
    params: Params,
) -> ApiResult {
    let search = params.str("search").map(|search| search.to_lowercase());
    let ascending = params.str("sort").as_deref() == Some("asc");
    let base = state.base_url();
    let mut projects: Vec<Value> = {
        let gitlab = crate::state::lock(&state.gitlab);
        gitlab
            .projects
            .values()
            .filter(|project| {
                search.as_ref().is_none_or(|search| {
                    project
                        .path_with_namespace
                        .to_lowercase()
                        .contains(search.as_str())
                })
            })
            .map(|project| super::project_json(project, &base))
            .collect()
    };
    if !ascending {
        projects.reverse();
    }
    paging::ok_paged(&base, &uri, &params, projects)
}

/// `GET /users?username=&search=`: the users, newest first as GitLab orders them (`order_by=id`,
/// `sort=desc`; `sort=asc` reverses); `username` matches exactly (case-insensitively), `search`
/// any part of the username or name. Paged.
async fn list_users(
    State(state): State<Shared>,
    OriginalUri(uri): OriginalUri,
    params: Params,
) -> ApiResult {
    let username = params.str("username").map(|name| name.to_lowercase());
    let search = params.str("search").map(|search| search.to_lowercase());
    let ascending = params.str("sort").as_deref() == Some("asc");
    let base = state.base_url();
    let mut users: Vec<Value> = crate::state::lock(&state.users)
        .all()
        .filter(|user| {
            username
                .as_ref()
                .is_none_or(|name| user.username.to_lowercase() == *name)
        })
        .filter(|user| {
            search.as_ref().is_none_or(|search| {
                user.username.to_lowercase().contains(search.as_str())
                    || user.name.to_lowercase().contains(search.as_str())
            })
        })
        .map(|user| user_json(user, &base))
        .collect();
    if !ascending {
        users.reverse();
    }
    paging::ok_paged(&base, &uri, &params, users)
}
