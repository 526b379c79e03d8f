//! Webhook events: payloads shaped as GitHub documents them, signed with the repo's secret.

use serde_json::{Value, json};

use super::json as js;
use super::model;
use super::model::{CheckRun, CommitStatus, GhRepo, MergeGroup, PullRequest, Review};
use super::{Ctx, Delivery, Env, sign};

/// The hook id reported in `X-GitHub-Hook-ID`.
const HOOK_ID: &str = "424242";

/// The exact bytes delivered for a payload (what the signature covers).
pub fn body_bytes(payload: &Value) -> Vec<u8> {
    serde_json::to_vec(payload).unwrap_or_default()
}

/// Queues a delivery of `event` to the repository's webhook, if it has one.
pub fn emit(env: &mut Env, ctx: &Ctx, r: &GhRepo, event: &str, mut payload: Value) {
    let Some(hook) = r.settings.webhook.clone() else {
        return;
    };
    if let Value::Object(map) = &mut payload {
        map.insert("repository".into(), js::repo(ctx, r));
        map.insert("sender".into(), js::user(ctx, &ctx.sender));
    }
    let body = body_bytes(&payload);
    let headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        (
            "User-Agent".to_string(),
            "GitHub-Hookshot/forge-sim".to_string(),
        ),
        ("X-GitHub-Event".to_string(), event.to_string()),
        (
            "X-GitHub-Delivery".to_string(),
            uuid::Uuid::new_v4().to_string(),
        ),
        ("X-GitHub-Hook-ID".to_string(), HOOK_ID.to_string()),
        (
            "X-GitHub-Hook-Installation-Target-Type".to_string(),
            "repository".to_string(),
        ),
        (
            "X-GitHub-Hook-Installation-Target-ID".to_string(),
            r.id.to_string(),
        ),
        (
            "X-Hub-Signature-256".to_string(),
            sign::signature_256(hook.secret.as_bytes(), &body),
        ),
    ];
    env.outbox.push(Delivery {
        url: hook.url,
        headers,
        body: payload,
    });
}

/// `pull_request` with the given action; `extra` fields are merged at the top level.
pub fn pull_request(
    env: &mut Env,
    ctx: &Ctx,
    r: &GhRepo,
    pr: &PullRequest,
    action: &str,
    extra: Value,
) {
    let mut payload = json!({
        "action": action,
        "number": pr.number,
        "pull_request": js::pull(ctx, r, pr),
    });
    if let (Value::Object(map), Value::Object(more)) = (&mut payload, extra) {
        map.extend(more);
    }
    emit(env, ctx, r, "pull_request", payload);
}

/// `check_run` (`created` / `completed` / `rerequested`).
pub fn check_run(env: &mut Env, ctx: &Ctx, r: &GhRepo, run: &CheckRun, action: &str) {
    let mut run_json = js::check_run(ctx, r, run);
    run_json["check_suite"] = js::check_suite(ctx, r, run.check_suite_id);
    emit(
        env,
        ctx,
        r,
        "check_run",
        json!({ "action": action, "check_run": run_json }),
    );
}

/// `check_suite` `completed`.
pub fn check_suite_completed(env: &mut Env, ctx: &Ctx, r: &GhRepo, suite_id: u64) {
    emit(
        env,
        ctx,
        r,
        "check_suite",
        json!({ "action": "completed", "check_suite": js::check_suite(ctx, r, suite_id) }),
    );
}

/// `status` (a commit status was created or changed).
pub fn status(env: &mut Env, ctx: &Ctx, r: &GhRepo, s: &CommitStatus) {
    let full = r.full_name();
    let branches: Vec<Value> = r
        .git
        .branches()
        .filter(|(_, sha)| **sha == s.sha)
        .map(|(name, sha)| {
            json!({
                "name": name,
                "commit": { "sha": sha, "url": format!("{}/repos/{full}/commits/{sha}", ctx.base_url) },
                "protected": name == r.git.default_branch(),
            })
        })
        .collect();
    let commit = js::commit(ctx, r, &s.sha).unwrap_or(Value::Null);
    emit(
        env,
        ctx,
        r,
        "status",
        json!({
            "id": s.id,
            "sha": s.sha,
            "name": full,
            "target_url": s.target_url,
            "context": s.context,
            "description": s.description,
            "state": s.state,
            "commit": commit,
            "branches": branches,
            "created_at": js::ts(s.created_at),
            "updated_at": js::ts(s.updated_at),
        }),
    );
}

/// `pull_request_review` `submitted` (the payload's review state is lower-case).
pub fn review_submitted(env: &mut Env, ctx: &Ctx, r: &GhRepo, pr: &PullRequest, rv: &Review) {
    let mut review = js::review(ctx, r, pr, rv);
    review["state"] = json!(rv.state.to_ascii_lowercase());
    emit(
        env,
        ctx,
        r,
        "pull_request_review",
        json!({
            "action": "submitted",
            "review": review,
            "pull_request": js::pull(ctx, r, pr),
        }),
    );
}

/// `merge_group` (`checks_requested` / `destroyed` with a reason).
pub fn merge_group(
    env: &mut Env,
    ctx: &Ctx,
    r: &GhRepo,
    group: &MergeGroup,
    base_ref: &str,
    action: &str,
    reason: Option<&str>,
) {
    let head_commit = r.git.commit(&group.head_sha).map(|c| {
        let person = json!({ "name": c.author_name, "email": c.author_email });
        json!({
            "id": c.sha,
            "tree_id": model::tree_sha(&c.tree),
            "message": c.message,
            "timestamp": js::ts(c.created_at),
            "author": person,
            "committer": person,
        })
    });
    let mut payload = json!({
        "action": action,
        "merge_group": {
            "head_sha": group.head_sha,
            "head_ref": format!("refs/heads/{}", group.head_ref),
            "base_sha": group.base_sha,
            "base_ref": format!("refs/heads/{base_ref}"),
            "head_commit": head_commit,
        },
    });
    if let Some(reason) = reason {
        payload["reason"] = json!(reason);
    }
    emit(env, ctx, r, "merge_group", payload);
}

/// `workflow_job` (`queued` / `in_progress` / `completed`) for a GitHub Actions job.
pub fn workflow_job(env: &mut Env, ctx: &Ctx, r: &GhRepo, job_id: u64, action: &str) {
    let Some(job) = r.actions.job(job_id) else {
        return;
    };
    let payload = json!({ "action": action, "workflow_job": js::actions::job_json(ctx, r, job) });
    emit(env, ctx, r, "workflow_job", payload);
}
