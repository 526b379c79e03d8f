//! Pull requests: create/get/update/list, merge, merge-async, reviews, labels, issue comments.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{auth, number, paginate, query_param, reply, with_repo};
use crate::github::error::{ApiError, ApiResult, DOCS_URL, parse_body};
use crate::github::model::{self, AsyncMerge, AsyncStatus, IssueComment, MergeAction, Review};
use crate::github::{Ctx, events, json as js, ops, repo_key, with_github};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/repos/{owner}/{repo}/pulls",
            get(list_pulls).post(create_pull),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}",
            get(get_pull).patch(update_pull),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}/merge",
            put(merge).get(is_merged),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}/merge-async",
            put(merge_async),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}/merge-async/{uuid}",
            get(merge_async_result),
        )
        .route(
            "/repos/{owner}/{repo}/pulls/{number}/reviews",
            get(list_reviews).post(create_review),
        )
        .route(
            "/repos/{owner}/{repo}/issues/{number}/labels",
            post(add_labels).get(list_labels),
        )
        .route(
            "/repos/{owner}/{repo}/issues/{number}/labels/{name}",
            axum::routing::delete(remove_label),
        )
        .route(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            get(list_comments).post(create_comment),
        )
        .route(
            "/repos/{owner}/{repo}/issues/comments/{id}",
            patch(update_comment)
                .get(get_comment)
                .delete(delete_comment),
        )
}

type P2 = Path<(String, String)>;
type P3 = Path<(String, String, String)>;
type P4 = Path<(String, String, String, String)>;

#[derive(Deserialize)]
struct CreatePull {
    title: Option<String>,
    head: Option<String>,
    base: Option<String>,
    body: Option<String>,
    #[serde(default)]
    draft: bool,
}

async fn create_pull(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r)): P2,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let b: CreatePull = parse_body(&body)?;
    let title = b
        .title
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| ApiError::missing_field("PullRequest", "title"))?;
    let head = b
        .head
        .ok_or_else(|| ApiError::missing_field("PullRequest", "head"))?;
    let base = b
        .base
        .ok_or_else(|| ApiError::missing_field("PullRequest", "base"))?;
    with_repo(&st, &o, &r, |repo, env| {
        let n = ops::open_pr(repo, env, &ctx, &title, &head, &base, b.body, b.draft)?;
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::CREATED, js::pull(&ctx, repo, pr)))
    })
}

async fn get_pull(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, _| {
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, js::pull(&ctx, repo, pr)))
    })
}

async fn list_pulls(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r)): P2,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let state_filter = query_param(&query, "state").unwrap_or_else(|| "open".into());
    if !matches!(state_filter.as_str(), "open" | "closed" | "all") {
        return Err(ApiError::invalid_field("PullRequest", "state"));
    }
    let head = query_param(&query, "head");
    let base = query_param(&query, "base");
    let asc = query_param(&query, "direction").as_deref() == Some("asc");
    with_repo(&st, &o, &r, |repo, _| {
        let mut prs: Vec<_> = repo
            .pulls
            .values()
            .filter(|p| match state_filter.as_str() {
                "open" => p.open,
                "closed" => !p.open,
                _ => true,
            })
            .filter(|p| match &head {
                None => true,
                Some(h) => match h.split_once(':') {
                    Some((owner, branch)) => {
                        owner.eq_ignore_ascii_case(&repo.owner) && p.head_ref == branch
                    }
                    None => p.head_ref == *h,
                },
            })
            .filter(|p| base.as_ref().is_none_or(|b| &p.base_ref == b))
            .collect();
        prs.sort_by_key(|p| p.number);
        if !asc {
            prs.reverse();
        }
        let items: Vec<Value> = paginate(prs, &query)
            .into_iter()
            .map(|p| js::pull(&ctx, repo, p))
            .collect();
        Ok(reply(StatusCode::OK, Value::Array(items)))
    })
}

#[derive(Deserialize)]
struct UpdatePull {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    base: Option<String>,
}

async fn update_pull(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let b: UpdatePull = parse_body(&body)?;
    with_repo(&st, &o, &r, |repo, env| {
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?.clone();
        if let Some(state) = &b.state
            && !matches!(state.as_str(), "open" | "closed")
        {
            return Err(ApiError::invalid_field("PullRequest", "state"));
        }
        if let Some(base) = &b.base {
            if repo.git.branch_head(base).is_none() {
                return Err(ApiError::invalid_field("PullRequest", "base"));
            }
            if !pr.open {
                return Err(ApiError::validation(
                    "PullRequest",
                    Some("base"),
                    "custom",
                    Some("Cannot change the base branch of a closed pull request."),
                ));
            }
        }
        let mut changes = serde_json::Map::new();
        if let Some(p) = repo.pulls.get_mut(&n) {
            if let Some(t) = &b.title
                && *t != p.title
            {
                changes.insert("title".into(), json!({ "from": p.title }));
                p.title = t.clone();
            }
            if let Some(body) = &b.body
                && Some(body) != p.body.as_ref()
            {
                changes.insert("body".into(), json!({ "from": p.body }));
                p.body = Some(body.clone());
            }
            if let Some(base) = &b.base
                && *base != p.base_ref
            {
                changes.insert(
                    "base".into(),
                    json!({ "ref": { "from": p.base_ref }, "sha": { "from": Value::Null } }),
                );
                p.base_ref = base.clone();
                p.mergeable = None;
            }
            if !changes.is_empty() {
                p.updated_at = ctx.now;
            }
        }
        if changes.contains_key("base") && repo.queue.iter().any(|e| e.pr == n) {
            ops::dequeue(repo, env, &ctx, n, "BASE_CHANGED");
        }
        if !changes.is_empty()
            && let Some(p) = repo.pulls.get(&n)
        {
            events::pull_request(env, &ctx, repo, p, "edited", json!({ "changes": changes }));
        }
        match b.state.as_deref() {
            Some("closed") if pr.open => {
                ops::close_pr(repo, env, &ctx, n);
            }
            Some("open") if !pr.open => ops::reopen_pr(repo, env, &ctx, n)?,
            _ => {}
        }
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, js::pull(&ctx, repo, pr)))
    })
}

async fn is_merged(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
) -> ApiResult<Response> {
    auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, _| match repo.pulls.get(&n) {
        Some(pr) if pr.merged => Ok(StatusCode::NO_CONTENT.into_response()),
        _ => Err(ApiError::not_found()),
    })
}

#[derive(Deserialize)]
struct MergeBody {
    commit_title: Option<String>,
    commit_message: Option<String>,
    sha: Option<String>,
    merge_method: Option<String>,
    merge_action: Option<String>,
}

fn method_of(b: &MergeBody) -> ApiResult<(String, crate::repo::MergeMethod)> {
    let name = b.merge_method.clone().unwrap_or_else(|| "merge".into());
    let method = ops::parse_merge_method(&name)
        .ok_or_else(|| ApiError::invalid_field("PullRequest", "merge_method"))?;
    Ok((name, method))
}

async fn merge(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let b: MergeBody = parse_body(&body)?;
    let (_, method) = method_of(&b)?;
    if let Some(sha) = &b.sha
        && (sha.len() != 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Err(ApiError::invalid_field("PullRequest", "sha"));
    }
    with_repo(&st, &o, &r, |repo, env| {
        let sha = ops::merge_pr(
            repo,
            env,
            &ctx,
            n,
            method,
            b.sha.as_deref(),
            b.commit_title.as_deref(),
            b.commit_message.as_deref(),
        )?;
        Ok(reply(
            StatusCode::OK,
            json!({ "sha": sha, "merged": true, "message": "Pull Request successfully merged" }),
        ))
    })
}

/// The `{status, details}` body of an asynchronous merge request.
pub fn async_body(m: &AsyncMerge) -> Value {
    match &m.status {
        AsyncStatus::Pending => json!({
            "status": "pending",
            "details": {
                "message": "Merge request is in progress.",
                "uuid": m.uuid,
                "merge_method": m.merge_method,
                "merge_action": m.merge_action.as_str(),
                "expected_head_sha": m.expected_head_sha,
            },
        }),
        AsyncStatus::Merged { sha } => json!({
            "status": "merged",
            "details": { "message": "Pull request was merged.", "sha": sha },
        }),
        AsyncStatus::Enqueued => json!({
            "status": "enqueued",
            "details": { "message": "Pull request was added to the merge queue." },
        }),
        AsyncStatus::Failed { message } => json!({
            "status": "failed",
            "details": { "message": message },
        }),
    }
}

/// A 400 for a pull request that cannot be merged at submit time (`status: failed`).
fn async_failed(message: &str) -> Response {
    reply(
        StatusCode::BAD_REQUEST,
        json!({
            "status": "failed",
            "details": { "message": message },
            "message": message,
            "documentation_url": DOCS_URL,
        }),
    )
}

async fn merge_async(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let b: MergeBody = parse_body(&body)?;
    let (method_name, _) = method_of(&b)?;
    let action = match b.merge_action.as_deref().unwrap_or("default") {
        "default" => MergeAction::Default,
        "direct_merge" => MergeAction::DirectMerge,
        "merge_queue" => MergeAction::MergeQueue,
        _ => return Err(ApiError::invalid_field("PullRequest", "merge_action")),
    };
    let key = repo_key(&o, &r);
    with_github(&st, |gh| {
        let repo = gh.repos.get_mut(&key).ok_or_else(ApiError::not_found)?;
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?.clone();
        if pr.merged {
            return Ok(reply(
                StatusCode::OK,
                json!({
                    "status": "merged",
                    "details": {
                        "message": "Pull request is already merged.",
                        "sha": pr.merge_commit_sha,
                    },
                }),
            ));
        }
        if !pr.open {
            return Ok(async_failed("Pull request is closed."));
        }
        if pr.draft {
            return Ok(async_failed("Pull request is in draft state."));
        }
        if let Some(existing) = gh.async_merges.values().find(|m| {
            m.repo == key
                && m.pr == n
                && m.status == AsyncStatus::Pending
                && !ops::is_expired(m, &ctx)
        }) {
            let mut body = async_body(existing);
            body["details"]["message"] =
                json!("A merge request already exists for this pull request.");
            body["message"] = json!("A merge request already exists for this pull request.");
            body["documentation_url"] = json!(DOCS_URL);
            return Ok(reply(StatusCode::CONFLICT, body));
        }
        let repo = gh.repos.get_mut(&key).ok_or_else(ApiError::not_found)?;
        if repo.queue.iter().any(|e| e.pr == n) {
            return Ok(reply(
                StatusCode::OK,
                json!({
                    "status": "enqueued",
                    "details": { "message": "Pull request is already in the merge queue." },
                }),
            ));
        }
        let script = repo.merge_async.clone();
        let scripted_failure = repo.merge_async.fail_next.take();
        let mut rec = AsyncMerge {
            uuid: uuid::Uuid::new_v4().to_string(),
            repo: key.clone(),
            pr: n,
            merge_method: method_name,
            merge_action: action,
            expected_head_sha: b.sha.clone().unwrap_or_else(|| pr.head_sha.clone()),
            requested_by: ctx.sender.clone(),
            commit_title: b.commit_title.clone(),
            commit_message: b.commit_message.clone(),
            status: AsyncStatus::Pending,
            remaining_ticks: script.pending_ticks,
            scripted_failure,
            updated_at: ctx.now,
            ttl_seconds: script.ttl_seconds,
        };
        if script.pending_ticks == 0 {
            // Resolved during the request: answer with the terminal result.
            rec.status = ops::run_async(gh, &ctx, &rec);
            let body = async_body(&rec);
            let failed = matches!(rec.status, AsyncStatus::Failed { .. });
            let message = body["details"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            gh.async_merges.insert(rec.uuid.clone(), rec);
            return Ok(if failed {
                async_failed(&message)
            } else {
                reply(StatusCode::OK, body)
            });
        }
        let mut body = async_body(&rec);
        body["details"]["message"] = json!("Merge request enqueued.");
        gh.async_merges.insert(rec.uuid.clone(), rec);
        Ok(reply(StatusCode::ACCEPTED, body))
    })
}

async fn merge_async_result(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n, uuid)): P4,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let key = repo_key(&o, &r);
    with_github(&st, |gh| {
        if !gh.repos.contains_key(&key) {
            return Err(ApiError::not_found());
        }
        let Some(m) = gh.async_merges.get(&uuid) else {
            return Err(ApiError::not_found());
        };
        if m.repo != key || m.pr != n {
            return Err(ApiError::not_found());
        }
        if ops::is_expired(m, &ctx) {
            gh.async_merges.remove(&uuid);
            return Err(ApiError::not_found());
        }
        Ok(reply(StatusCode::OK, async_body(m)))
    })
}

async fn list_reviews(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, _| {
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
        let items: Vec<Value> = paginate(
            pr.reviews
                .iter()
                .filter(|rv| rv.state != "PENDING")
                .collect(),
            &query,
        )
        .into_iter()
        .map(|rv| js::review(&ctx, repo, pr, rv))
        .collect();
        Ok(reply(StatusCode::OK, Value::Array(items)))
    })
}

#[derive(Deserialize)]
struct ReviewBody {
    body: Option<String>,
    event: Option<String>,
    commit_id: Option<String>,
}

/// Submits a review (shared with the control API); returns the review id.
#[allow(
    clippy::too_many_arguments,
    reason = "the review request's fields, each used once"
)]
pub fn submit_review(
    repo: &mut crate::github::model::GhRepo,
    env: &mut crate::github::Env,
    ctx: &Ctx,
    n: u64,
    event: Option<&str>,
    body: Option<String>,
    commit_id: Option<String>,
) -> ApiResult<u64> {
    let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?.clone();
    let state = match event {
        None | Some("") => "PENDING",
        Some("APPROVE") => "APPROVED",
        Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
        Some("COMMENT") => "COMMENTED",
        Some(_) => return Err(ApiError::invalid_field("PullRequestReview", "event")),
    };
    let body_text = body.unwrap_or_default();
    if matches!(state, "CHANGES_REQUESTED" | "COMMENTED") && body_text.trim().is_empty() {
        let mut e = ApiError::unprocessable("Unprocessable Entity");
        e.body["errors"] = json!([format!(
            "Review {} requires a body",
            if state == "COMMENTED" {
                "comment"
            } else {
                "request changes"
            }
        )]);
        return Err(e);
    }
    if pr.user == ctx.sender && matches!(state, "APPROVED" | "CHANGES_REQUESTED") {
        let mut e = ApiError::unprocessable("Unprocessable Entity");
        let what = if state == "APPROVED" {
            "approve"
        } else {
            "request changes on"
        };
        e.body["errors"] = json!([format!("Review Can not {what} your own pull request")]);
        return Err(e);
    }
    let commit_id = commit_id.unwrap_or_else(|| pr.head_sha.clone());
    if repo.git.commit(&commit_id).is_none() {
        return Err(ApiError::invalid_field("PullRequestReview", "commit_id"));
    }
    let id = env.next_id();
    let rv = Review {
        id,
        node_id: model::node_id("PRR", &id.to_string()),
        user: ctx.sender.clone(),
        body: body_text,
        state: state.to_string(),
        commit_id,
        submitted_at: ctx.now,
    };
    if let Some(p) = repo.pulls.get_mut(&n) {
        p.reviews.push(rv.clone());
        p.updated_at = ctx.now;
    }
    if state != "PENDING"
        && let Some(p) = repo.pulls.get(&n)
    {
        events::review_submitted(env, ctx, repo, p, &rv);
    }
    Ok(id)
}

async fn create_review(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let b: ReviewBody = parse_body(&body)?;
    with_repo(&st, &o, &r, |repo, env| {
        let id = submit_review(repo, env, &ctx, n, b.event.as_deref(), b.body, b.commit_id)?;
        let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
        let rv = pr
            .reviews
            .iter()
            .find(|rv| rv.id == id)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, js::review(&ctx, repo, pr, rv)))
    })
}

fn labels_json(ctx: &Ctx, repo: &crate::github::model::GhRepo, n: u64) -> ApiResult<Value> {
    let pr = repo.pulls.get(&n).ok_or_else(ApiError::not_found)?;
    Ok(Value::Array(
        pr.labels.iter().map(|l| js::label(ctx, repo, l)).collect(),
    ))
}

async fn add_labels(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let v: Value = parse_body(&body)?;
    // Accepts {"labels": ["a"]}, {"labels": [{"name": "a"}]} or a bare array.
    let list = match &v {
        Value::Array(a) => a.clone(),
        Value::Object(o) => match o.get("labels") {
            Some(Value::Array(a)) => a.clone(),
            _ => return Err(ApiError::missing_field("Label", "labels")),
        },
        _ => return Err(ApiError::missing_field("Label", "labels")),
    };
    let mut names = Vec::new();
    for item in list {
        let name = match item {
            Value::String(s) => s,
            Value::Object(o) => o
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_default(),
            _ => String::new(),
        };
        if name.trim().is_empty() {
            return Err(ApiError::invalid_field("Label", "name"));
        }
        names.push(name);
    }
    with_repo(&st, &o, &r, |repo, env| {
        let pr = repo.pulls.get_mut(&n).ok_or_else(ApiError::not_found)?;
        let mut added = Vec::new();
        for name in names {
            if !pr.labels.contains(&name) {
                pr.labels.push(name.clone());
                added.push(name);
            }
        }
        for name in added {
            if let Some(p) = repo.pulls.get(&n) {
                let label = js::label(&ctx, repo, &name);
                events::pull_request(env, &ctx, repo, p, "labeled", json!({ "label": label }));
            }
        }
        Ok(reply(StatusCode::OK, labels_json(&ctx, repo, n)?))
    })
}

async fn list_labels(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, _| {
        Ok(reply(StatusCode::OK, labels_json(&ctx, repo, n)?))
    })
}

async fn remove_label(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n, name)): P4,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, env| {
        let pr = repo.pulls.get_mut(&n).ok_or_else(ApiError::not_found)?;
        let before = pr.labels.len();
        pr.labels.retain(|l| *l != name);
        if pr.labels.len() == before {
            return Err(ApiError::new(StatusCode::NOT_FOUND, "Label does not exist"));
        }
        if let Some(p) = repo.pulls.get(&n) {
            let label = js::label(&ctx, repo, &name);
            events::pull_request(env, &ctx, repo, p, "unlabeled", json!({ "label": label }));
        }
        Ok(reply(StatusCode::OK, labels_json(&ctx, repo, n)?))
    })
}

#[derive(Deserialize)]
struct CommentBody {
    body: Option<String>,
}

async fn list_comments(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    with_repo(&st, &o, &r, |repo, _| {
        if !repo.pulls.contains_key(&n) {
            return Err(ApiError::not_found());
        }
        let items: Vec<Value> = paginate(
            repo.comments
                .iter()
                .filter(|c| c.issue_number == n)
                .collect(),
            &query,
        )
        .into_iter()
        .map(|c| js::comment(&ctx, repo, c))
        .collect();
        Ok(reply(StatusCode::OK, Value::Array(items)))
    })
}

async fn create_comment(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, n)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let n = number(&n)?;
    let b: CommentBody = parse_body(&body)?;
    let text = b
        .body
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::missing_field("IssueComment", "body"))?;
    with_repo(&st, &o, &r, |repo, env| {
        if !repo.pulls.contains_key(&n) {
            return Err(ApiError::not_found());
        }
        let id = env.next_id();
        let c = IssueComment {
            id,
            node_id: model::node_id("IC", &id.to_string()),
            issue_number: n,
            user: ctx.sender.clone(),
            body: text,
            created_at: ctx.now,
            updated_at: ctx.now,
        };
        let v = js::comment(&ctx, repo, &c);
        repo.comments.push(c);
        Ok(reply(StatusCode::CREATED, v))
    })
}

fn comment_id(s: &str) -> ApiResult<u64> {
    s.parse().map_err(|_| ApiError::not_found())
}

async fn get_comment(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, id)): P3,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let id = comment_id(&id)?;
    with_repo(&st, &o, &r, |repo, _| {
        let c = repo
            .comments
            .iter()
            .find(|c| c.id == id)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, js::comment(&ctx, repo, c)))
    })
}

async fn update_comment(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, id)): P3,
    body: Bytes,
) -> ApiResult<Response> {
    let ctx = auth(&st, &headers)?;
    let id = comment_id(&id)?;
    let b: CommentBody = parse_body(&body)?;
    let text = b
        .body
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::missing_field("IssueComment", "body"))?;
    with_repo(&st, &o, &r, |repo, _| {
        let c = repo
            .comments
            .iter_mut()
            .find(|c| c.id == id)
            .ok_or_else(ApiError::not_found)?;
        c.body = text;
        c.updated_at = ctx.now;
        let c = c.clone();
        Ok(reply(StatusCode::OK, js::comment(&ctx, repo, &c)))
    })
}

async fn delete_comment(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, id)): P3,
) -> ApiResult<Response> {
    auth(&st, &headers)?;
    let id = comment_id(&id)?;
    with_repo(&st, &o, &r, |repo, _| {
        let before = repo.comments.len();
        repo.comments.retain(|c| c.id != id);
        if repo.comments.len() == before {
            return Err(ApiError::not_found());
        }
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
