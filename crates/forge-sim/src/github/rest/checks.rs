//! Checks and commit statuses: check runs per ref, re-runs, combined status, status creation.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{auth, paginate, query_param, reply, with_repo};
use crate::github::error::{ApiError, ApiResult, parse_body};
use crate::github::model::{CheckKind, CommitStatus, GhRepo};
use crate::github::{events, json as js, ops};
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
        .route("/repos/{owner}/{repo}/statuses/{sha}", post(create_status))
}

type P3 = Path<(String, String, String)>;

fn resolve(repo: &GhRepo, reference: &str) -> ApiResult<String> {
    repo.git
        .resolve(reference)
        .map(|c| c.sha.clone())
        .ok_or_else(|| ApiError::unprocessable(format!("No commit found for SHA: {reference}")))
}

async fn list_check_runs(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, reference)): P3,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let filter = query_param(&query, "filter").unwrap_or_else(|| "latest".into());
    let name = query_param(&query, "check_name");
    let status = query_param(&query, "status");
    with_repo(&st, &o, &r, |repo, _| {
        let sha = resolve(repo, &reference)?;
        let runs: Vec<_> = match filter.as_str() {
            "all" => repo
                .check_runs
                .iter()
                .filter(|c| c.head_sha == sha && c.kind == CheckKind::CheckRun)
                .collect(),
            "latest" => repo.latest_runs(&sha),
            _ => return Err(ApiError::invalid_field("CheckRun", "filter")),
        };
        let runs: Vec<_> = runs
            .into_iter()
            .filter(|c| name.as_ref().is_none_or(|n| &c.name == n))
            .filter(|c| status.as_ref().is_none_or(|s| c.status == s))
            .collect();
        let total = runs.len();
        let items: Vec<Value> = paginate(runs, &query)
            .into_iter()
            .map(|c| js::check_run(&ctx, repo, c))
            .collect();
        Ok(reply(
            StatusCode::OK,
            json!({ "total_count": total, "check_runs": items }),
        ))
    })
}

async fn list_check_suites(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, reference)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    with_repo(&st, &o, &r, |repo, _| {
        let sha = resolve(repo, &reference)?;
        let suites: Vec<Value> = repo
            .check_suites
            .iter()
            .filter(|s| s.head_sha == sha)
            .map(|s| js::check_suite(&ctx, repo, s.id))
            .collect();
        Ok(reply(
            StatusCode::OK,
            json!({ "total_count": suites.len(), "check_suites": suites }),
        ))
    })
}

async fn get_check_run(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, id)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let id: u64 = id.parse().map_err(|_| ApiError::not_found())?;
    with_repo(&st, &o, &r, |repo, _| {
        let run = repo
            .check_runs
            .iter()
            .find(|c| c.id == id && c.kind == CheckKind::CheckRun)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, js::check_run(&ctx, repo, run)))
    })
}

async fn rerequest(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, id)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let id: u64 = id.parse().map_err(|_| ApiError::not_found())?;
    with_repo(&st, &o, &r, |repo, env| {
        let run = repo
            .check_runs
            .iter()
            .find(|c| c.id == id && c.kind == CheckKind::CheckRun)
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

/// The combined status; `statuses` is paged (`per_page`, `page`) as on
/// GitHub, `total_count` counts them all.
fn combined(ctx: &crate::github::Ctx, repo: &GhRepo, sha: &str, query: &Option<String>) -> Value {
    let latest = repo.latest_statuses(sha);
    let total = latest.len();
    let statuses: Vec<Value> = paginate(latest, query)
        .into_iter()
        .map(|s| js::status(ctx, s))
        .collect();
    let full = repo.full_name();
    json!({
        "state": repo.combined_state(sha),
        "statuses": statuses,
        "sha": sha,
        "total_count": total,
        "repository": js::repo(ctx, repo),
        "commit_url": format!("{}/repos/{full}/commits/{sha}", ctx.base_url),
        "url": format!("{}/repos/{full}/commits/{sha}/status", ctx.base_url),
    })
}

async fn combined_status(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, reference)): P3,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    with_repo(&st, &o, &r, |repo, _| {
        let sha = resolve(repo, &reference)?;
        Ok(reply(StatusCode::OK, combined(&ctx, repo, &sha, &query)))
    })
}

async fn list_statuses(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, reference)): P3,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    with_repo(&st, &o, &r, |repo, _| {
        let sha = resolve(repo, &reference)?;
        // Reverse chronological order, as GitHub lists them.
        let all: Vec<&CommitStatus> = repo
            .statuses
            .iter()
            .rev()
            .filter(|s| s.sha == sha)
            .collect();
        let items: Vec<Value> = paginate(all, &query)
            .into_iter()
            .map(|s| js::status(&ctx, s))
            .collect();
        Ok(reply(StatusCode::OK, Value::Array(items)))
    })
}

#[derive(Deserialize)]
struct StatusBody {
    state: Option<String>,
    target_url: Option<String>,
    description: Option<String>,
    context: Option<String>,
}

async fn create_status(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, sha)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let b: StatusBody = parse_body(&body)?;
    let state = b
        .state
        .ok_or_else(|| ApiError::missing_field("Status", "state"))?;
    if !matches!(state.as_str(), "error" | "failure" | "pending" | "success") {
        return Err(ApiError::invalid_field("Status", "state"));
    }
    with_repo(&st, &o, &r, |repo, env| {
        let sha = repo
            .git
            .commit(&sha)
            .map(|c| c.sha.clone())
            .ok_or_else(|| ApiError::unprocessable(format!("No commit found for SHA: {sha}")))?;
        let id = env.next_id();
        let s = CommitStatus {
            id,
            sha,
            context: b.context.unwrap_or_else(|| "default".into()),
            state,
            description: b.description,
            target_url: b.target_url,
            created_at: ctx.now,
            updated_at: ctx.now,
        };
        events::status(env, &ctx, repo, &s);
        let v = js::status(&ctx, &s);
        repo.statuses.push(s);
        Ok(reply(StatusCode::CREATED, v))
    })
}
