//! GitLab REST v4 endpoints (mounted under `/api/v4`): authentication, routes and handlers.

pub mod merge_requests;
pub mod notes;
pub mod pipelines;
pub mod protected_branches;
pub mod repository;
pub mod trains;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};

use super::{ApiError, ApiResult, ok, user_json};
use crate::state::{Shared, User};

/// `PRIVATE-TOKEN` or `Authorization: Bearer` → the user; 401 otherwise.
async fn auth(State(state): State<Shared>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    let token = headers
        .get("private-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(|t| t.trim().to_string())
        });
    let user = token.and_then(|t| state.user_for_token(&t));
    match user {
        Some(user) => {
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}

/// The GitLab REST router (mounted under `/api/v4`).
pub fn router(state: Shared) -> Router<Shared> {
    let project = "/projects/{id}";
    let mr = "/projects/{id}/merge_requests/{iid}";
    Router::new()
        .route("/user", get(current_user))
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
            post(repository::create_commit),
        )
        .route(
            &format!("{project}/repository/commits/{{sha}}"),
            get(repository::get_commit),
        )
        .route(
            &format!("{project}/repository/compare"),
            get(repository::compare),
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
