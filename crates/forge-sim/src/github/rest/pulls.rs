//! Pull requests: create/get/update/list, merge, merge-async, reviews, labels, issue comments.

use axum::Router;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{IdSegment, NumberSegment, RepoCall, paginate, query_param, reply, reply_paged};
use crate::github::error::{ApiError, ApiResult, DOCS_URL, parse_body};
use crate::github::model::{self, AsyncMerge, AsyncStatus, GhRepo, MergeAction, RepoLabel, Review};
use crate::github::{Ctx, Env, events, json as render, ops};
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
            "/repos/{owner}/{repo}/labels",
            post(create_repo_label).get(list_repo_labels),
        )
        .route("/repos/{owner}/{repo}/labels/{name}", get(get_repo_label))
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

/// `{number}/merge-async/{uuid}`: one asynchronous merge request of a pull request.
#[derive(Deserialize)]
struct AsyncMergeSegments {
    number: u64,
    uuid: String,
}

/// `labels/{name}`: one label of a repository.
#[derive(Deserialize)]
struct RepoLabelSegment {
    name: String,
}

/// `POST repos/:o/:r/labels`.
#[derive(Deserialize)]
struct CreateLabel {
    name: Option<String>,
    color: Option<String>,
    description: Option<String>,
}

/// `{number}/labels/{name}`: one label of an issue.
#[derive(Deserialize)]
struct LabelSegments {
    number: u64,
    name: String,
}

#[derive(Deserialize)]
struct CreatePull {
    title: Option<String>,
    head: Option<String>,
    base: Option<String>,
    body: Option<String>,
    #[serde(default)]
    draft: bool,
}

async fn create_pull(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let request: CreatePull = parse_body(&body)?;
    let title = request
        .title
        .filter(|title| !title.trim().is_empty())
        .ok_or_else(|| ApiError::missing_field("PullRequest", "title"))?;
    let head = request
        .head
        .ok_or_else(|| ApiError::missing_field("PullRequest", "head"))?;
    let base = request
        .base
        .ok_or_else(|| ApiError::missing_field("PullRequest", "base"))?;
    target.with_repo(|repo, env| {
        let number = ops::open_pr(
            repo,
            env,
            &ctx,
            &title,
            &head,
            &base,
            request.body,
            request.draft,
        )?;
        let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::CREATED, render::pull(&ctx, repo, pr)))
    })
}

async fn get_pull(call: RepoCall<NumberSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::pull(&ctx, repo, pr)))
    })
}

async fn list_pulls(call: RepoCall, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let RepoCall {
        ctx, target, uri, ..
    } = call;
    let state_filter = query_param(&query, "state").unwrap_or_else(|| "open".into());
    if !matches!(state_filter.as_str(), "open" | "closed" | "all") {
        return Err(ApiError::invalid_field("PullRequest", "state"));
    }
    let head = query_param(&query, "head");
    let base = query_param(&query, "base");
    let ascending = query_param(&query, "direction").as_deref() == Some("asc");
    target.with_repo(|repo, _| {
        let mut pulls: Vec<_> = repo
            .pulls
            .values()
            .filter(|pull| match state_filter.as_str() {
                "open" => pull.open,
                "closed" => !pull.open,
                _ => true,
            })
            .filter(|pull| match &head {
                None => true,
                Some(head) => match head.split_once(':') {
                    Some((owner, branch)) => {
                        owner.eq_ignore_ascii_case(&repo.owner) && pull.head_ref == branch
                    }
                    None => pull.head_ref == *head,
                },
            })
            .filter(|pull| base.as_ref().is_none_or(|base| &pull.base_ref == base))
            .collect();
        pulls.sort_by_key(|pull| pull.number);
        if !ascending {
            pulls.reverse();
        }
        let page = paginate(pulls, &ctx.base_url, &uri);
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|pull| render::pull(&ctx, repo, pull))
            .collect();
        Ok(reply_paged(StatusCode::OK, Value::Array(items), page.link))
    })
}

#[derive(Deserialize)]
struct UpdatePull {
    title: Option<String>,
    body: Option<String>,
    state: Option<String>,
    base: Option<String>,
}

async fn update_pull(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: UpdatePull = parse_body(&body)?;
    target.with_repo(|repo, env| {
        let pr = repo
            .pulls
            .get(&number)
            .ok_or_else(ApiError::not_found)?
            .clone();
        if let Some(state) = &request.state
            && !matches!(state.as_str(), "open" | "closed")
        {
            return Err(ApiError::invalid_field("PullRequest", "state"));
        }
        if let Some(base) = &request.base {
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
        if let Some(pull) = repo.pulls.get_mut(&number) {
            if let Some(title) = &request.title
                && *title != pull.title
            {
                changes.insert("title".into(), json!({ "from": pull.title }));
                pull.title = title.clone();
            }
            if let Some(body) = &request.body
                && Some(body) != pull.body.as_ref()
            {
                changes.insert("body".into(), json!({ "from": pull.body }));
                pull.body = Some(body.clone());
            }
            if let Some(base) = &request.base
                && *base != pull.base_ref
            {
                changes.insert(
                    "base".into(),
                    json!({ "ref": { "from": pull.base_ref }, "sha": { "from": Value::Null } }),
                );
                pull.base_ref = base.clone();
                pull.mergeable = None;
            }
            if !changes.is_empty() {
                pull.updated_at = ctx.now;
            }
        }
        if changes.contains_key("base") && repo.queue.iter().any(|entry| entry.pr == number) {
            ops::dequeue(repo, env, &ctx, number, "BASE_CHANGED");
        }
        if !changes.is_empty()
            && let Some(pull) = repo.pulls.get(&number)
        {
            events::pull_request(
                env,
                &ctx,
                repo,
                pull,
                "edited",
                json!({ "changes": changes }),
            );
        }
        match request.state.as_deref() {
            Some("closed") if pr.open => {
                ops::close_pr(repo, env, &ctx, number);
            }
            Some("open") if !pr.open => ops::reopen_pr(repo, env, &ctx, number)?,
            _ => {}
        }
        let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::pull(&ctx, repo, pr)))
    })
}

async fn is_merged(call: RepoCall<NumberSegment>) -> ApiResult<Response> {
    let NumberSegment { number } = call.segments;
    call.target
        .with_repo(|repo, _| match repo.pulls.get(&number) {
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

fn method_of(request: &MergeBody) -> ApiResult<(String, crate::repo::MergeMethod)> {
    let name = request
        .merge_method
        .clone()
        .unwrap_or_else(|| "merge".into());
    let method = ops::parse_merge_method(&name)
        .ok_or_else(|| ApiError::invalid_field("PullRequest", "merge_method"))?;
    Ok((name, method))
}

async fn merge(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: MergeBody = parse_body(&body)?;
    let (_, method) = method_of(&request)?;
    if let Some(sha) = &request.sha
        && (sha.len() != 40 || !sha.chars().all(|digit| digit.is_ascii_hexdigit()))
    {
        return Err(ApiError::invalid_field("PullRequest", "sha"));
    }
    target.with_repo(|repo, env| {
        let sha = ops::merge_pr(
            repo,
            env,
            &ctx,
            number,
            method,
            request.sha.as_deref(),
            request.commit_title.as_deref(),
            request.commit_message.as_deref(),
        )?;
        Ok(reply(
            StatusCode::OK,
            json!({ "sha": sha, "merged": true, "message": "Pull Request successfully merged" }),
        ))
    })
}

/// The `{status, details}` body of an asynchronous merge request.
pub fn async_body(merge: &AsyncMerge) -> Value {
    match &merge.status {
        AsyncStatus::Pending => json!({
            "status": "pending",
            "details": {
                "message": "Merge request is in progress.",
                "uuid": merge.uuid,
                "merge_method": merge.merge_method,
                "merge_action": merge.merge_action.as_str(),
                "expected_head_sha": merge.expected_head_sha,
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

async fn merge_async(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: MergeBody = parse_body(&body)?;
    let (method_name, _) = method_of(&request)?;
    let action = match request.merge_action.as_deref().unwrap_or("default") {
        "default" => MergeAction::Default,
        "direct_merge" => MergeAction::DirectMerge,
        "merge_queue" => MergeAction::MergeQueue,
        _ => return Err(ApiError::invalid_field("PullRequest", "merge_action")),
    };
    target.with_github(|github, key| {
        let repo = github.repos.get_mut(key).ok_or_else(ApiError::not_found)?;
        let pr = repo
            .pulls
            .get(&number)
            .ok_or_else(ApiError::not_found)?
            .clone();
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
        if let Some(existing) = github.async_merges.values().find(|merge| {
            merge.repo == key
                && merge.pr == number
                && merge.status == AsyncStatus::Pending
                && !ops::is_expired(merge, &ctx)
        }) {
            let mut body = async_body(existing);
            body["details"]["message"] =
                json!("A merge request already exists for this pull request.");
            body["message"] = json!("A merge request already exists for this pull request.");
            body["documentation_url"] = json!(DOCS_URL);
            return Ok(reply(StatusCode::CONFLICT, body));
        }
        let repo = github.repos.get_mut(key).ok_or_else(ApiError::not_found)?;
        if repo.queue.iter().any(|entry| entry.pr == number) {
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
        let mut record = AsyncMerge {
            uuid: uuid::Uuid::new_v4().to_string(),
            repo: key.to_string(),
            pr: number,
            merge_method: method_name,
            merge_action: action,
            expected_head_sha: request.sha.clone().unwrap_or_else(|| pr.head_sha.clone()),
            requested_by: ctx.sender.clone(),
            commit_title: request.commit_title.clone(),
            commit_message: request.commit_message.clone(),
            status: AsyncStatus::Pending,
            remaining_ticks: script.pending_ticks,
            scripted_failure,
            updated_at: ctx.now,
            ttl_seconds: script.ttl_seconds,
        };
        if script.pending_ticks == 0 {
            // Resolved during the request: answer with the terminal result.
            record.status = ops::run_async(github, &ctx, &record);
            let body = async_body(&record);
            let failed = matches!(record.status, AsyncStatus::Failed { .. });
            let message = body["details"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            github.async_merges.insert(record.uuid.clone(), record);
            return Ok(if failed {
                async_failed(&message)
            } else {
                reply(StatusCode::OK, body)
            });
        }
        let mut body = async_body(&record);
        body["details"]["message"] = json!("Merge request enqueued.");
        github.async_merges.insert(record.uuid.clone(), record);
        Ok(reply(StatusCode::ACCEPTED, body))
    })
}

async fn merge_async_result(call: RepoCall<AsyncMergeSegments>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: AsyncMergeSegments { number, uuid },
        target,
        ..
    } = call;
    target.with_github(|github, key| {
        if !github.repos.contains_key(key) {
            return Err(ApiError::not_found());
        }
        let Some(merge) = github.async_merges.get(&uuid) else {
            return Err(ApiError::not_found());
        };
        if merge.repo != key || merge.pr != number {
            return Err(ApiError::not_found());
        }
        if ops::is_expired(merge, &ctx) {
            github.async_merges.remove(&uuid);
            return Err(ApiError::not_found());
        }
        Ok(reply(StatusCode::OK, async_body(merge)))
    })
}

async fn list_reviews(call: RepoCall<NumberSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        let page = paginate(
            pr.reviews
                .iter()
                .filter(|review| review.state != "PENDING")
                .collect(),
            &ctx.base_url,
            &uri,
        );
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|review| render::review(&ctx, repo, pr, review))
            .collect();
        Ok(reply_paged(StatusCode::OK, Value::Array(items), page.link))
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
    repo: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    event: Option<&str>,
    body: Option<String>,
    commit_id: Option<String>,
) -> ApiResult<u64> {
    let pr = repo
        .pulls
        .get(&number)
        .ok_or_else(ApiError::not_found)?
        .clone();
    let state = match event {
        None | Some("") => "PENDING",
        Some("APPROVE") => "APPROVED",
        Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
        Some("COMMENT") => "COMMENTED",
        Some(_) => return Err(ApiError::invalid_field("PullRequestReview", "event")),
    };
    let body_text = body.unwrap_or_default();
    if matches!(state, "CHANGES_REQUESTED" | "COMMENTED") && body_text.trim().is_empty() {
        let mut error = ApiError::unprocessable("Unprocessable Entity");
        error.body["errors"] = json!([format!(
            "Review {} requires a body",
            if state == "COMMENTED" {
                "comment"
            } else {
                "request changes"
            }
        )]);
        return Err(error);
    }
    if pr.user == ctx.sender && matches!(state, "APPROVED" | "CHANGES_REQUESTED") {
        let mut error = ApiError::unprocessable("Unprocessable Entity");
        let what = if state == "APPROVED" {
            "approve"
        } else {
            "request changes on"
        };
        error.body["errors"] = json!([format!("Review Can not {what} your own pull request")]);
        return Err(error);
    }
    let commit_id = commit_id.unwrap_or_else(|| pr.head_sha.clone());
    if repo.git.commit(&commit_id).is_none() {
        return Err(ApiError::invalid_field("PullRequestReview", "commit_id"));
    }
    let id = env.next_id();
    let review = Review {
        id,
        node_id: model::node_id("PRR", &id.to_string()),
        user: ctx.sender.clone(),
        body: body_text,
        state: state.to_string(),
        commit_id,
        submitted_at: ctx.now,
    };
    if let Some(pull) = repo.pulls.get_mut(&number) {
        pull.reviews.push(review.clone());
        pull.updated_at = ctx.now;
    }
    if state != "PENDING"
        && let Some(pull) = repo.pulls.get(&number)
    {
        events::review_submitted(env, ctx, repo, pull, &review);
    }
    Ok(id)
}

async fn create_review(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: ReviewBody = parse_body(&body)?;
    target.with_repo(|repo, env| {
        let id = submit_review(
            repo,
            env,
            &ctx,
            number,
            request.event.as_deref(),
            request.body,
            request.commit_id,
        )?;
        let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        let review = pr
            .reviews
            .iter()
            .find(|review| review.id == id)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(
            StatusCode::OK,
            render::review(&ctx, repo, pr, review),
        ))
    })
}

fn labels_json(ctx: &Ctx, repo: &GhRepo, number: u64) -> ApiResult<Value> {
    let pr = repo.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    Ok(Value::Array(
        pr.labels
            .iter()
            .map(|label| render::label(ctx, repo, label))
            .collect(),
    ))
}

async fn add_labels(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: Value = parse_body(&body)?;
    // Accepts {"labels": ["a"]}, {"labels": [{"name": "a"}]} or a bare array.
    let list = match &request {
        Value::Array(items) => items.clone(),
        Value::Object(fields) => match fields.get("labels") {
            Some(Value::Array(items)) => items.clone(),
            _ => return Err(ApiError::missing_field("Label", "labels")),
        },
        _ => return Err(ApiError::missing_field("Label", "labels")),
    };
    let mut names = Vec::new();
    for item in list {
        let name = match item {
            Value::String(name) => name,
            Value::Object(fields) => fields
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
    target.with_repo(|repo, env| {
        if !ops::add_labels(repo, env, &ctx, number, &names) {
            return Err(ApiError::not_found());
        }
        Ok(reply(StatusCode::OK, labels_json(&ctx, repo, number)?))
    })
}

/// Creates a repository label: 201 and the label; 422 `already_exists`
/// when the repository has a label of that name in any case, `invalid`
/// for a colour that is not six hex digits (given without `#`).
async fn create_repo_label(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let request: CreateLabel = parse_body(&body)?;
    let name = request.name.unwrap_or_default();
    if name.trim().is_empty() {
        return Err(ApiError::missing_field("Label", "name"));
    }
    let color = request
        .color
        .map(|color| color.trim_start_matches('#').to_lowercase())
        .unwrap_or_else(|| RepoLabel::default().color);
    if color.len() != 6 || !color.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::invalid_field("Label", "color"));
    }
    target.with_repo(|repo, _| {
        if repo.label_named(&name).is_some() {
            return Err(ApiError::validation(
                "Label",
                Some("name"),
                "already_exists",
                None,
            ));
        }
        repo.labels.insert(
            name.clone(),
            RepoLabel {
                color,
                description: request.description,
            },
        );
        Ok(reply(StatusCode::CREATED, render::label(&ctx, repo, &name)))
    })
}

/// A repository label by name, in any case.
async fn get_repo_label(call: RepoCall<RepoLabelSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: RepoLabelSegment { name },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let label = repo.label_named(&name).ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::label(&ctx, repo, label)))
    })
}

/// The repository's labels, by name, in pages.
async fn list_repo_labels(call: RepoCall) -> ApiResult<Response> {
    let RepoCall {
        ctx, target, uri, ..
    } = call;
    target.with_repo(|repo, _| {
        let labels = repo
            .labels
            .keys()
            .map(|name| render::label(&ctx, repo, name))
            .collect();
        let page = paginate(labels, &ctx.base_url, &uri);
        Ok(reply_paged(
            StatusCode::OK,
            Value::Array(page.items),
            page.link,
        ))
    })
}

async fn list_labels(call: RepoCall<NumberSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let labels = match labels_json(&ctx, repo, number)? {
            Value::Array(labels) => labels,
            other => vec![other],
        };
        let page = paginate(labels, &ctx.base_url, &uri);
        Ok(reply_paged(
            StatusCode::OK,
            Value::Array(page.items),
            page.link,
        ))
    })
}

async fn remove_label(call: RepoCall<LabelSegments>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: LabelSegments { number, name },
        target,
        ..
    } = call;
    target.with_repo(|repo, env| {
        // The repository's label of that name, in any case.
        let name = repo.label_named(&name).unwrap_or(&name).to_owned();
        let pr = repo
            .pulls
            .get_mut(&number)
            .ok_or_else(ApiError::not_found)?;
        let before = pr.labels.len();
        pr.labels.retain(|label| *label != name);
        if pr.labels.len() == before {
            return Err(ApiError::new(StatusCode::NOT_FOUND, "Label does not exist"));
        }
        if let Some(pull) = repo.pulls.get(&number) {
            let label = render::label(&ctx, repo, &name);
            events::pull_request(
                env,
                &ctx,
                repo,
                pull,
                "unlabeled",
                json!({ "label": label }),
            );
        }
        Ok(reply(StatusCode::OK, labels_json(&ctx, repo, number)?))
    })
}

#[derive(Deserialize)]
struct CommentBody {
    body: Option<String>,
}

async fn list_comments(call: RepoCall<NumberSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        if !repo.pulls.contains_key(&number) {
            return Err(ApiError::not_found());
        }
        let page = paginate(
            repo.comments
                .iter()
                .filter(|comment| comment.issue_number == number)
                .collect(),
            &ctx.base_url,
            &uri,
        );
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|comment| render::comment(&ctx, repo, comment))
            .collect();
        Ok(reply_paged(StatusCode::OK, Value::Array(items), page.link))
    })
}

async fn create_comment(call: RepoCall<NumberSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: NumberSegment { number },
        target,
        ..
    } = call;
    let request: CommentBody = parse_body(&body)?;
    let text = request
        .body
        .filter(|text| !text.is_empty())
        .ok_or_else(|| ApiError::missing_field("IssueComment", "body"))?;
    target.with_repo(|repo, env| {
        let id = ops::add_comment(repo, env, &ctx, number, text).ok_or_else(ApiError::not_found)?;
        let comment = repo
            .comments
            .iter()
            .find(|comment| comment.id == id)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(
            StatusCode::CREATED,
            render::comment(&ctx, repo, comment),
        ))
    })
}

async fn get_comment(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let comment = repo
            .comments
            .iter()
            .find(|comment| comment.id == id)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(StatusCode::OK, render::comment(&ctx, repo, comment)))
    })
}

async fn update_comment(call: RepoCall<IdSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: IdSegment { id },
        target,
        ..
    } = call;
    let request: CommentBody = parse_body(&body)?;
    let text = request
        .body
        .filter(|text| !text.is_empty())
        .ok_or_else(|| ApiError::missing_field("IssueComment", "body"))?;
    target.with_repo(|repo, _| {
        let comment = repo
            .comments
            .iter_mut()
            .find(|comment| comment.id == id)
            .ok_or_else(ApiError::not_found)?;
        comment.body = text;
        comment.updated_at = ctx.now;
        let comment = comment.clone();
        Ok(reply(StatusCode::OK, render::comment(&ctx, repo, &comment)))
    })
}

async fn delete_comment(call: RepoCall<IdSegment>) -> ApiResult<Response> {
    let IdSegment { id } = call.segments;
    call.target.with_repo(|repo, _| {
        let before = repo.comments.len();
        repo.comments.retain(|comment| comment.id != id);
        if repo.comments.len() == before {
            return Err(ApiError::not_found());
        }
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
