//! Checks and commit statuses: check runs per ref, re-runs, combined status, status creation.

use axum::Router;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    IdSegment, ReferenceSegment, RepoCall, ShaSegment, paginate, query_param, reply, reply_paged,
};
use crate::github::error::{ApiError, ApiResult, parse_body};
use crate::github::model::{CheckKind, CommitStatus, GhRepo};
use crate::github::{Ctx, events, json as render, ops};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/repos/{owner}/{repo}/commits/{reference}/check-runs",
            get(list_check_runs),
        )
        .route(
            "/repos/{owner}/{repo}/commits/{reference}/check-suites",
            get(list_check_suites),
        )
        .route(
            "/repos/{owner}/{repo}/commits/{reference}/status",
            get(combined_status),
        )
        .route(
            "/repos/{owner}/{repo}/commits/{reference}/statuses",
            get(list_statuses),
        )
        .route("/repos/{owner}/{repo}/check-runs/{id}", get(get_check_run))
        .route(
            "/repos/{owner}/{repo}/check-runs/{id}/rerequest",
            post(rerequest),
        )
        .route(
            "/repos/{owner}/{repo}/statuses/{sha}",
            post(create_status).get(list_statuses_legacy),
        )
}

fn resolve(repo: &GhRepo, reference: &str) -> ApiResult<String> {
    repo.git
        .resolve(reference)
        .map(|commit| commit.sha.clone())
        .ok_or_else(|| ApiError::unprocessable(format!("No commit found for SHA: {reference}")))
}

async fn list_check_runs(
    call: RepoCall<ReferenceSegment>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        uri,
    } = call;
    let filter = query_param(&query, "filter").unwrap_or_else(|| "latest".into());
    let name = query_param(&query, "check_name");
    let status = query_param(&query, "status");
    target.with_repo(|repo, _| {
        let sha = resolve(repo, &reference)?;
        let runs: Vec<_> = match filter.as_str() {
            "all" => repo
                .check_runs
                .iter()
                .filter(|run| run.head_sha == sha && run.kind == CheckKind::CheckRun)
                .collect(),
            "latest" => repo.latest_runs(&sha),
            _ => return Err(ApiError::invalid_field("CheckRun", "filter")),
        };
        let runs: Vec<_> = runs
            .into_iter()
            .filter(|run| name.as_ref().is_none_or(|name| &run.name == name))
            .filter(|run| status.as_ref().is_none_or(|status| run.status == status))
            .collect();
        let total = runs.len();
        let page = paginate(runs, &ctx.base_url, &uri);
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|run| render::check_run(&ctx, repo, run))
            .collect();
        Ok(reply_paged(
            StatusCode::OK,
            json!({ "total_count": total, "check_runs": items }),
            page.link,
        ))
    })
}

async fn list_check_suites(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let sha = resolve(repo, &reference)?;
        let suites: Vec<_> = repo
            .check_suites
            .iter()
            .filter(|suite| suite.head_sha == sha)
            .collect();
        let total = suites.len();
        let page = paginate(suites, &ctx.base_url, &uri);
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|suite| render::check_suite(&ctx, repo, suite.id))
            .collect();
        Ok(reply_paged(
            StatusCode::OK,
            json!({ "total_count": total, "check_suites": items }),
            page.link,
        ))
    })
}

async fn get_check_run(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let run = repo
            .check_runs
            .iter()
            .find(|run| run.id == id && run.kind == CheckKind::CheckRun)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::check_run(&ctx, repo, run)))
    })
}

async fn rerequest(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, env| {
        let run = repo
            .check_runs
            .iter()
            .find(|run| run.id == id && run.kind == CheckKind::CheckRun)
            .ok_or_else(ApiError::not_found)?;
        if run.status != "completed" {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "This check run is not rerequestable while it is still in progress",
            ));
        }
        ops::rerequest(repo, env, &ctx, id).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::CREATED, json!({})))
    })
}

/// The combined status and its `Link` header; `statuses` is paged (`per_page`, `page`) as on
/// GitHub, `total_count` counts them all.
fn combined(ctx: &Ctx, repo: &GhRepo, sha: &str, uri: &Uri) -> (Value, Option<String>) {
    let latest = repo.latest_statuses(sha);
    let total = latest.len();
    let page = paginate(latest, &ctx.base_url, uri);
    let statuses: Vec<Value> = page
        .items
        .into_iter()
        .map(|status| render::status(ctx, status))
        .collect();
    let full = repo.full_name();
    let body = json!({
        "state": repo.combined_state(sha),
        "statuses": statuses,
        "sha": sha,
        "total_count": total,
        "repository": render::repo(ctx, repo),
        "commit_url": format!("{}/repos/{full}/commits/{sha}", ctx.base_url),
        "url": format!("{}/repos/{full}/commits/{sha}/status", ctx.base_url),
    });
    (body, page.link)
}

async fn combined_status(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let sha = resolve(repo, &reference)?;
        let (body, link) = combined(&ctx, repo, &sha, &uri);
        Ok(reply_paged(StatusCode::OK, body, link))
    })
}

async fn list_statuses(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let sha = resolve(repo, &reference)?;
        // Reverse chronological order, as GitHub lists them.
        let all: Vec<&CommitStatus> = repo
            .statuses
            .iter()
            .rev()
            .filter(|status| status.sha == sha)
            .collect();
        let page = paginate(all, &ctx.base_url, &uri);
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|status| render::status(&ctx, status))
            .collect();
        Ok(reply_paged(StatusCode::OK, Value::Array(items), page.link))
    })
}

/// `GET /repos/{owner}/{repo}/statuses/{ref}`: GitHub's legacy route of
/// `GET .../commits/{ref}/statuses` (PyGithub's `Commit.get_statuses` reads it).
async fn list_statuses_legacy(call: RepoCall<ShaSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ShaSegment { sha },
        target,
        uri,
    } = call;
    list_statuses(RepoCall {
        ctx,
        segments: ReferenceSegment { reference: sha },
        target,
        uri,
    })
    .await
}

#[derive(Deserialize)]
struct StatusBody {
    state: Option<String>,
    target_url: Option<String>,
    description: Option<String>,
    context: Option<String>,
}

async fn create_status(call: RepoCall<ShaSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ShaSegment { sha },
        target,
        ..
    } = call;
    let request: StatusBody = parse_body(&body)?;
    let state = request
        .state
        .ok_or_else(|| ApiError::missing_field("Status", "state"))?;
    if !matches!(state.as_str(), "error" | "failure" | "pending" | "success") {
        return Err(ApiError::invalid_field("Status", "state"));
    }
    target.with_repo(|repo, env| {
        let sha = repo
            .git
            .commit(&sha)
            .map(|commit| commit.sha.clone())
            .ok_or_else(|| ApiError::unprocessable(format!("No commit found for SHA: {sha}")))?;
        let id = env.next_id();
        let status = CommitStatus {
            id,
            sha,
            context: request.context.unwrap_or_else(|| "default".into()),
            state,
            description: request.description,
            target_url: request.target_url,
            created_at: ctx.now,
            updated_at: ctx.now,
        };
        events::status(env, &ctx, repo, &status);
        let rendered = render::status(&ctx, &status);
        repo.statuses.push(status);
        Ok(reply(StatusCode::CREATED, rendered))
    })
}
