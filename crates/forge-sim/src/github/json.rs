//! JSON renderings of GitHub objects, shared by REST responses and webhook payloads.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::format_description;

use super::Ctx;
use super::model;
use super::model::{CheckKind, CheckRun, CommitStatus, GhRepo, IssueComment, PullRequest, Review};

pub mod actions;

/// GitHub's timestamp format (`2024-01-02T03:04:05Z`).
pub fn ts(t: OffsetDateTime) -> String {
    let fmt = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.to_offset(time::UtcOffset::UTC)
        .format(&fmt)
        .unwrap_or_default()
}

/// Optional timestamp.
pub fn ts_opt(t: Option<OffsetDateTime>) -> Value {
    t.map(|t| Value::String(ts(t))).unwrap_or(Value::Null)
}

/// A stable numeric id for a login (FNV-1a, kept in the JS safe-integer range).
pub fn user_id(login: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in login.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % 9_000_000_000 + 1_000
}

/// A user object.
pub fn user(ctx: &Ctx, login: &str) -> Value {
    let id = user_id(login);
    let kind = if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    };
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_kgDO{id}"),
        "avatar_url": format!("{}/avatars/{login}", ctx.base_url),
        "url": format!("{}/users/{login}", ctx.base_url),
        "html_url": format!("{}/{login}", ctx.base_url),
        "type": kind,
        "site_admin": false,
    })
}

/// A repository object.
pub fn repo(ctx: &Ctx, r: &GhRepo) -> Value {
    let full = r.full_name();
    json!({
        "id": r.id,
        "node_id": r.node_id,
        "name": r.name,
        "full_name": full,
        "private": false,
        "owner": user(ctx, &r.owner),
        "html_url": format!("{}/{full}", ctx.base_url),
        "url": format!("{}/repos/{full}", ctx.base_url),
        "clone_url": format!("{}/{full}.git", ctx.base_url),
        "default_branch": r.git.default_branch(),
        "fork": false,
        "archived": false,
        "disabled": false,
        "visibility": "public",
        "allow_merge_commit": true,
        "allow_squash_merge": true,
        "allow_rebase_merge": true,
        "created_at": ts(r.created_at),
        "updated_at": ts(r.created_at),
        "pushed_at": ts(ctx.now),
    })
}

/// A label object.
/// A label's node id, the same through REST and GraphQL.
pub fn label_node_id(name: &str) -> String {
    format!("LA_kwDO{}", user_id(name))
}

pub fn label(ctx: &Ctx, r: &GhRepo, name: &str) -> Value {
    let details = r.labels.get(name).cloned().unwrap_or_default();
    json!({
        "id": user_id(&format!("label:{name}")),
        "node_id": label_node_id(name),
        "url": format!("{}/repos/{}/labels/{name}", ctx.base_url, r.full_name()),
        "name": name,
        "color": details.color,
        "default": false,
        "description": details.description,
    })
}

fn branch_ref(ctx: &Ctx, r: &GhRepo, ref_name: &str, sha: &str) -> Value {
    json!({
        "label": format!("{}:{ref_name}", r.owner),
        "ref": ref_name,
        "sha": sha,
        "user": user(ctx, &r.owner),
        "repo": repo(ctx, r),
    })
}

/// The REST `state` string of a pull request.
pub fn pr_state(pr: &PullRequest) -> &'static str {
    if pr.open { "open" } else { "closed" }
}

/// A full pull-request object (REST "get a pull request" shape).
pub fn pull(ctx: &Ctx, r: &GhRepo, pr: &PullRequest) -> Value {
    let full = r.full_name();
    let base_sha = r
        .git
        .branch_head(&pr.base_ref)
        .unwrap_or_default()
        .to_string();
    let (commits, additions, deletions, changed) = r.pr_stats(pr);
    let html = format!("{}/{full}/pull/{}", ctx.base_url, pr.number);
    let api = format!("{}/repos/{full}/pulls/{}", ctx.base_url, pr.number);
    let issue = format!("{}/repos/{full}/issues/{}", ctx.base_url, pr.number);
    let comments = r
        .comments
        .iter()
        .filter(|c| c.issue_number == pr.number)
        .count();
    let mut v = json!({
        "url": api,
        "id": pr.id,
        "node_id": pr.node_id,
        "html_url": html,
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": issue,
        "commits_url": format!("{api}/commits"),
        "review_comments_url": format!("{api}/comments"),
        "comments_url": format!("{issue}/comments"),
        "statuses_url": format!("{}/repos/{full}/statuses/{}", ctx.base_url, pr.head_sha),
        "number": pr.number,
        "state": pr_state(pr),
        "locked": false,
        "title": pr.title,
        "user": user(ctx, &pr.user),
        "body": pr.body,
        "labels": pr.labels.iter().map(|l| label(ctx, r, l)).collect::<Vec<_>>(),
        "milestone": Value::Null,
        "active_lock_reason": Value::Null,
        "created_at": ts(pr.created_at),
        "updated_at": ts(pr.updated_at),
        "closed_at": ts_opt(pr.closed_at),
        "merged_at": ts_opt(pr.merged_at),
        "merge_commit_sha": pr.merge_commit_sha,
        "assignee": Value::Null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
    });
    let more = json!({
        "head": branch_ref(ctx, r, &pr.head_ref, &pr.head_sha),
        "base": branch_ref(ctx, r, &pr.base_ref, &base_sha),
        "author_association": "MEMBER",
        "auto_merge": Value::Null,
        "draft": pr.draft,
        "merged": pr.merged,
        "mergeable": if pr.open { json!(pr.mergeable) } else { Value::Null },
        "rebaseable": if pr.open { json!(pr.mergeable) } else { Value::Null },
        "mergeable_state": r.mergeable_state(pr),
        "merged_by": pr.merged_by.as_deref().map(|l| user(ctx, l)),
        "comments": comments,
        "review_comments": pr.threads.len(),
        "maintainer_can_modify": false,
        "commits": commits,
        "additions": additions,
        "deletions": deletions,
        "changed_files": changed,
    });
    merge_objects(&mut v, more);
    v
}

/// The minimal pull-request reference embedded in check runs and suites.
pub fn pull_min(ctx: &Ctx, r: &GhRepo, pr: &PullRequest) -> Value {
    let base_sha = r
        .git
        .branch_head(&pr.base_ref)
        .unwrap_or_default()
        .to_string();
    let repo_min = json!({
        "id": r.id,
        "url": format!("{}/repos/{}", ctx.base_url, r.full_name()),
        "name": r.name,
    });
    json!({
        "url": format!("{}/repos/{}/pulls/{}", ctx.base_url, r.full_name(), pr.number),
        "id": pr.id,
        "number": pr.number,
        "head": { "ref": pr.head_ref, "sha": pr.head_sha, "repo": repo_min },
        "base": { "ref": pr.base_ref, "sha": base_sha, "repo": repo_min },
    })
}

/// The simulated CI app that owns check runs.
pub fn app(ctx: &Ctx) -> Value {
    json!({
        "id": 4242,
        "slug": "sim-ci",
        "node_id": "A_kwDOsimci",
        "name": "Sim CI",
        "owner": user(ctx, "sim-ci"),
        "html_url": format!("{}/apps/sim-ci", ctx.base_url),
    })
}

/// A check run object.
pub fn check_run(ctx: &Ctx, r: &GhRepo, run: &CheckRun) -> Value {
    let full = r.full_name();
    let prs: Vec<Value> = r
        .pulls
        .values()
        .filter(|p| p.open && p.head_sha == run.head_sha)
        .map(|p| pull_min(ctx, r, p))
        .collect();
    json!({
        "id": run.id,
        "node_id": format!("CR_kwDO{}", run.id),
        "head_sha": run.head_sha,
        "external_id": "",
        "url": format!("{}/repos/{full}/check-runs/{}", ctx.base_url, run.id),
        "html_url": format!("{}/{full}/runs/{}", ctx.base_url, run.id),
        "details_url": match r.actions.job(run.id) {
            Some(job) => actions::job_html_url(ctx, r, job),
            None => format!("{}/{full}/runs/{}", ctx.base_url, run.id),
        },
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": ts(run.started_at),
        "completed_at": ts_opt(run.completed_at),
        "output": {
            "title": run.conclusion.map(|c| format!("{} {c}", run.name)),
            "summary": run.conclusion.map(|_| run.summary.clone()),
            "text": Value::Null,
            "annotations_count": 0,
            "annotations_url": format!("{}/repos/{full}/check-runs/{}/annotations", ctx.base_url, run.id),
        },
        "name": run.name,
        "check_suite": { "id": run.check_suite_id },
        "app": if r.actions.job(run.id).is_some() { actions::app(ctx) } else { app(ctx) },
        "pull_requests": prs,
    })
}

/// A check suite object (computed from its runs).
pub fn check_suite(ctx: &Ctx, r: &GhRepo, suite_id: u64) -> Value {
    let suite = r.check_suites.iter().find(|s| s.id == suite_id);
    let runs: Vec<&CheckRun> = r
        .check_runs
        .iter()
        .filter(|c| c.check_suite_id == suite_id && c.kind == CheckKind::CheckRun)
        .collect();
    let (status, conclusion) = model::suite_status(&runs);
    let head_sha = suite.map(|s| s.head_sha.clone()).unwrap_or_default();
    let prs: Vec<Value> = r
        .pulls
        .values()
        .filter(|p| p.open && p.head_sha == head_sha)
        .map(|p| pull_min(ctx, r, p))
        .collect();
    json!({
        "id": suite_id,
        "node_id": format!("CS_kwDO{suite_id}"),
        "head_branch": suite.and_then(|s| s.head_branch.clone()),
        "head_sha": head_sha,
        "status": status,
        "conclusion": conclusion,
        "url": format!("{}/repos/{}/check-suites/{suite_id}", ctx.base_url, r.full_name()),
        "app": if r.actions.owns_suite(suite_id) { actions::app(ctx) } else { app(ctx) },
        "pull_requests": prs,
        "latest_check_runs_count": runs.len(),
        "rerequestable": true,
        "runs_rerequestable": true,
    })
}

/// A commit status object.
pub fn status(ctx: &Ctx, s: &CommitStatus) -> Value {
    json!({
        "id": s.id,
        "node_id": format!("SC_kwDO{}", s.id),
        "url": format!("{}/statuses/{}", ctx.base_url, s.sha),
        "state": s.state,
        "description": s.description,
        "target_url": s.target_url,
        "context": s.context,
        "avatar_url": Value::Null,
        "created_at": ts(s.created_at),
        "updated_at": ts(s.updated_at),
        "creator": user(ctx, "sim-ci"),
    })
}

/// A review object (REST shape; `state` upper-case).
pub fn review(ctx: &Ctx, r: &GhRepo, pr: &PullRequest, rv: &Review) -> Value {
    let html = format!("{}/{}/pull/{}", ctx.base_url, r.full_name(), pr.number);
    json!({
        "id": rv.id,
        "node_id": rv.node_id,
        "user": user(ctx, &rv.user),
        "body": rv.body,
        "state": rv.state,
        "html_url": format!("{html}#pullrequestreview-{}", rv.id),
        "pull_request_url": format!("{}/repos/{}/pulls/{}", ctx.base_url, r.full_name(), pr.number),
        "author_association": "MEMBER",
        "submitted_at": ts(rv.submitted_at),
        "commit_id": rv.commit_id,
    })
}

/// An issue comment object.
pub fn comment(ctx: &Ctx, r: &GhRepo, c: &IssueComment) -> Value {
    let full = r.full_name();
    json!({
        "id": c.id,
        "node_id": c.node_id,
        "url": format!("{}/repos/{full}/issues/comments/{}", ctx.base_url, c.id),
        "html_url": format!("{}/{full}/pull/{}#issuecomment-{}", ctx.base_url, c.issue_number, c.id),
        "issue_url": format!("{}/repos/{full}/issues/{}", ctx.base_url, c.issue_number),
        "body": c.body,
        "user": user(ctx, &c.user),
        "created_at": ts(c.created_at),
        "updated_at": ts(c.updated_at),
        "author_association": "MEMBER",
    })
}

/// A commit object (REST `GET /commits/{sha}` shape).
pub fn commit(ctx: &Ctx, r: &GhRepo, sha: &str) -> Option<Value> {
    let c = r.git.commit(sha)?;
    let full = r.full_name();
    let tree_sha = model::tree_sha(&c.tree);
    let files: Vec<Value> = match c.parents.first() {
        Some(p) => files(&r.git.diff(p, sha)),
        None => files(&r.git.diff("", sha)),
    };
    let person =
        json!({ "name": c.author_name, "email": c.author_email, "date": ts(c.created_at) });
    Some(json!({
        "sha": c.sha,
        "node_id": format!("C_kwDO{}", &c.sha[..12.min(c.sha.len())]),
        "url": format!("{}/repos/{full}/commits/{}", ctx.base_url, c.sha),
        "html_url": format!("{}/{full}/commit/{}", ctx.base_url, c.sha),
        "commit": {
            "message": c.message,
            "author": person,
            "committer": person,
            "tree": { "sha": tree_sha, "url": format!("{}/repos/{full}/git/trees/{tree_sha}", ctx.base_url) },
            "url": format!("{}/repos/{full}/git/commits/{}", ctx.base_url, c.sha),
        },
        "author": Value::Null,
        "committer": Value::Null,
        "parents": c.parents.iter().map(|p| json!({
            "sha": p,
            "url": format!("{}/repos/{full}/commits/{p}", ctx.base_url),
        })).collect::<Vec<_>>(),
        "files": files,
        "stats": {
            "additions": files_sum(&files, "additions"),
            "deletions": files_sum(&files, "deletions"),
            "total": files_sum(&files, "changes"),
        },
    }))
}

/// A git-data commit object (`POST /git/commits` shape).
pub fn git_commit(ctx: &Ctx, r: &GhRepo, sha: &str) -> Option<Value> {
    let c = r.git.commit(sha)?;
    let full = r.full_name();
    let tree_sha = model::tree_sha(&c.tree);
    let person =
        json!({ "name": c.author_name, "email": c.author_email, "date": ts(c.created_at) });
    Some(json!({
        "sha": c.sha,
        "node_id": format!("C_kwDO{}", &c.sha[..12.min(c.sha.len())]),
        "url": format!("{}/repos/{full}/git/commits/{}", ctx.base_url, c.sha),
        "html_url": format!("{}/{full}/commit/{}", ctx.base_url, c.sha),
        "author": person,
        "committer": person,
        "message": c.message,
        "tree": { "sha": tree_sha, "url": format!("{}/repos/{full}/git/trees/{tree_sha}", ctx.base_url) },
        "parents": c.parents.iter().map(|p| json!({
            "sha": p,
            "url": format!("{}/repos/{full}/git/commits/{p}", ctx.base_url),
            "html_url": format!("{}/{full}/commit/{p}", ctx.base_url),
        })).collect::<Vec<_>>(),
        "verification": { "verified": false, "reason": "unsigned", "signature": Value::Null, "payload": Value::Null },
    }))
}

/// A git reference object.
pub fn git_ref(ctx: &Ctx, r: &GhRepo, branch: &str, sha: &str) -> Value {
    json!({
        "ref": format!("refs/heads/{branch}"),
        "node_id": format!("REF_kwDO{}", user_id(branch)),
        "url": format!("{}/repos/{}/git/refs/heads/{branch}", ctx.base_url, r.full_name()),
        "object": {
            "type": "commit",
            "sha": sha,
            "url": format!("{}/repos/{}/git/commits/{sha}", ctx.base_url, r.full_name()),
        },
    })
}

/// `files[]` entries of commits and comparisons.
pub fn files(diffs: &[crate::repo::FileDiff]) -> Vec<Value> {
    diffs
        .iter()
        .map(|d| {
            let additions = d
                .diff
                .lines()
                .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
                .count();
            let deletions = d
                .diff
                .lines()
                .filter(|l| l.starts_with('-') && !l.starts_with("---"))
                .count();
            let status = if d.new_file {
                "added"
            } else if d.deleted_file {
                "removed"
            } else if d.renamed_file {
                "renamed"
            } else {
                "modified"
            };
            let mut v = json!({
                "sha": Value::Null,
                "filename": d.new_path,
                "status": status,
                "additions": additions,
                "deletions": deletions,
                "changes": additions + deletions,
                "patch": d.diff,
            });
            if d.renamed_file {
                v["previous_filename"] = json!(d.old_path);
            }
            v
        })
        .collect()
}

fn files_sum(files: &[Value], key: &str) -> u64 {
    files.iter().filter_map(|f| f[key].as_u64()).sum()
}

/// Copies `more`'s fields into `v` (both objects).
pub fn merge_objects(v: &mut Value, more: Value) {
    if let (Value::Object(a), Value::Object(b)) = (v, more) {
        a.extend(b);
    }
}
