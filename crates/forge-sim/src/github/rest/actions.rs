//! GitHub Actions REST: workflow runs, their jobs, a job's log (a 302 to a signed, expiring
//! log URL served without credentials) and re-running a job.

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{IdSegment, RepoCall, paginate, query_param, reply, reply_paged};
use crate::github::error::{ApiError, ApiResult};
use crate::github::json::actions as render;
use crate::github::model::actions::log_signature;
use crate::github::ops::actions::{RerunError, rerun_job};
use crate::github::{Ctx, with_github};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/repos/{owner}/{repo}/actions/runs", get(list_runs))
        .route("/repos/{owner}/{repo}/actions/runs/{id}", get(get_run))
        .route(
            "/repos/{owner}/{repo}/actions/runs/{id}/jobs",
            get(list_jobs),
        )
        .route("/repos/{owner}/{repo}/actions/jobs/{id}", get(get_job))
        .route(
            "/repos/{owner}/{repo}/actions/jobs/{id}/logs",
            get(job_logs),
        )
        .route("/repos/{owner}/{repo}/actions/jobs/{id}/rerun", post(rerun))
        .route("/_logs/{owner}/{repo}/jobs/{id}", get(log_download))
}

/// `GET actions/runs?head_sha=&branch=`: the repository's workflow runs, newest first,
/// narrowed by commit and branch, paged like GitHub's lists (`{total_count, workflow_runs}`).
async fn list_runs(call: RepoCall, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let head_sha = query_param(&query, "head_sha");
    let branch = query_param(&query, "branch");
    let RepoCall {
        ctx, target, uri, ..
    } = call;
    target.with_repo(|repo, _| {
        let runs: Vec<_> = repo
            .actions
            .runs
            .iter()
            .rev()
            .filter(|run| head_sha.as_ref().is_none_or(|sha| &run.head_sha == sha))
            .filter(|run| {
                branch
                    .as_ref()
                    .is_none_or(|branch| run.head_branch.as_ref() == Some(branch))
            })
            .collect();
        Ok(counted_page(
            runs,
            &ctx.base_url,
            &uri,
            "workflow_runs",
            |run| render::run_json(&ctx, repo, run),
        ))
    })
}

/// One page of `items` in the Actions lists' shape, `{"total_count": n, key: [...]}`, with
/// GitHub's `Link` header.
fn counted_page<T>(
    items: Vec<T>,
    base: &str,
    uri: &axum::http::Uri,
    key: &str,
    render: impl Fn(T) -> Value,
) -> Response {
    let total = items.len();
    let page = paginate(items, base, uri);
    let rendered: Vec<Value> = page.items.into_iter().map(render).collect();
    let mut body = json!({ "total_count": total });
    body[key] = Value::Array(rendered);
    reply_paged(StatusCode::OK, body, page.link)
}

async fn get_run(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let run = repo.actions.run(id).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::run_json(&ctx, repo, run)))
    })
}

/// `filter`: `latest` (the default: each job's latest attempt) or `all` (every attempt).
async fn list_jobs(call: RepoCall<IdSegment>, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let filter = query_param(&query, "filter").unwrap_or_else(|| "latest".into());
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        repo.actions.run(id).ok_or_else(ApiError::not_found)?;
        let jobs = match filter.as_str() {
            "latest" => repo.latest_run_jobs(id),
            "all" => repo.run_jobs(id),
            _ => {
                return Err(ApiError::validation(
                    "WorkflowJob",
                    Some("filter"),
                    "invalid",
                    Some("filter must be one of latest, all"),
                ));
            }
        };
        Ok(counted_page(jobs, &ctx.base_url, &uri, "jobs", |job| {
            render::job_json(&ctx, repo, job)
        }))
    })
}

async fn get_job(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let job = repo.actions.job(id).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::job_json(&ctx, repo, job)))
    })
}

/// 302 to the log's short-lived URL; 404 while the job has no log yet.
async fn job_logs(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let job = repo.actions.job(id).ok_or_else(ApiError::not_found)?;
        render::log_text(repo, job).ok_or_else(ApiError::not_found)?;
        let location = render::log_url(&ctx, repo, id);
        Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response())
    })
}

/// 201 with an empty body, as GitHub answers; 403 while a job of the run is still running.
async fn rerun(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, env| match rerun_job(repo, env, &ctx, id) {
        Ok(_) => Ok(StatusCode::CREATED.into_response()),
        Err(RerunError::NotFound) => Err(ApiError::not_found()),
        Err(RerunError::RunInProgress) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "This workflow run is not complete yet; its jobs cannot be re-run",
        )),
    })
}

#[derive(Deserialize)]
struct LogSegments {
    owner: String,
    repo: String,
    id: u64,
}

/// The log behind a signed URL. Like a storage host's pre-signed URL it takes no credentials:
/// a request carrying `Authorization` is refused (403), as is a wrong or expired signature.
async fn log_download(
    State(state): State<Shared>,
    Path(segments): Path<LogSegments>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let refuse = |status: StatusCode, message: &str| {
        (
            status,
            [(header::CONTENT_TYPE, "application/xml")],
            format!("<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code><Message>{message}</Message></Error>"),
        )
            .into_response()
    };
    if headers.contains_key(header::AUTHORIZATION) {
        return refuse(
            StatusCode::FORBIDDEN,
            "The request carries an Authorization header besides the signed URL.",
        );
    }
    let ctx = Ctx::new(&state, "anonymous");
    let expires = query_param(&query, "expires").and_then(|e| e.parse::<i64>().ok());
    let sig = query_param(&query, "sig");
    let (Some(expires), Some(sig)) = (expires, sig) else {
        return refuse(StatusCode::FORBIDDEN, "The signature is missing.");
    };
    with_github(&state, |github| {
        let Some(repo) = github.repo(&segments.owner, &segments.repo) else {
            return refuse(StatusCode::NOT_FOUND, "The specified blob does not exist.");
        };
        if log_signature(&repo.full_name(), segments.id, expires) != sig {
            return refuse(StatusCode::FORBIDDEN, "The signature does not match.");
        }
        if ctx.now.unix_timestamp() > expires {
            return refuse(StatusCode::FORBIDDEN, "The signed URL has expired.");
        }
        match repo
            .actions
            .job(segments.id)
            .and_then(|job| render::log_text(repo, job))
        {
            Some(text) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                text,
            )
                .into_response(),
            None => refuse(StatusCode::NOT_FOUND, "The specified blob does not exist."),
        }
    })
}
