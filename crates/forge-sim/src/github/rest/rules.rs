//! Branch protection as GitHub reports it: classic protection (`"protected"` on branch objects)
//! and rulesets (`GET /repos/{owner}/{repo}/rules/branches/{branch}`, the active rules that
//! apply to a branch name, whether or not the branch exists; `GET /repos/{owner}/{repo}/rulesets`,
//! the rulesets themselves, summarised as GitHub lists them).
//!
//! Ruleset `ref_name` conditions are `refs/heads/<pattern>`, `~DEFAULT_BRANCH` or `~ALL`;
//! patterns use fnmatch syntax as GitHub does: `*` matches within one path segment, `**` across
//! segments, `?` one character other than `/`. Classic protection patterns use the same syntax.

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use super::{BranchSegment, RepoCall, paginate, reply_paged};
use crate::github::error::ApiResult;
use crate::github::model::{GhRepo, Ruleset};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/repos/{owner}/{repo}/rules/branches/{*branch}",
            get(branch_rules),
        )
        .route("/repos/{owner}/{repo}/rulesets", get(list_rulesets))
}

/// fnmatch as GitHub's branch patterns use it (see the module docs).
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    // Recursive matching; patterns are short.
    fn matches(pattern: &[u8], name: &[u8]) -> bool {
        if pattern.is_empty() {
            return name.is_empty();
        }
        if pattern.starts_with(b"**") {
            let rest = &pattern[2..];
            return (0..=name.len()).any(|start| matches(rest, &name[start..]));
        }
        match pattern[0] {
            b'*' => {
                let rest = &pattern[1..];
                for start in 0..=name.len() {
                    if matches(rest, &name[start..]) {
                        return true;
                    }
                    if start < name.len() && name[start] == b'/' {
                        return false;
                    }
                }
                false
            }
            b'?' => !name.is_empty() && name[0] != b'/' && matches(&pattern[1..], &name[1..]),
            literal => !name.is_empty() && name[0] == literal && matches(&pattern[1..], &name[1..]),
        }
    }
    matches(pattern.as_bytes(), name.as_bytes())
}

/// Whether a `ref_name` condition entry selects `branch`.
fn condition_matches(repo: &GhRepo, condition: &str, branch: &str) -> bool {
    match condition {
        "~ALL" => true,
        "~DEFAULT_BRANCH" => branch == repo.git.default_branch(),
        other => fnmatch(other.strip_prefix("refs/heads/").unwrap_or(other), branch),
    }
}

/// Whether an active ruleset applies to `branch`.
pub fn ruleset_applies(repo: &GhRepo, ruleset: &Ruleset, branch: &str) -> bool {
    ruleset.enforcement == "active"
        && ruleset
            .include
            .iter()
            .any(|condition| condition_matches(repo, condition, branch))
        && !ruleset
            .exclude
            .iter()
            .any(|condition| condition_matches(repo, condition, branch))
}

/// Classic branch protection: the default branch, or a configured name/pattern.
pub fn classic_protected(repo: &GhRepo, branch: &str) -> bool {
    branch == repo.git.default_branch()
        || repo
            .settings
            .protected_branches
            .iter()
            .any(|pattern| fnmatch(pattern, branch))
}

/// The "get rules for a branch" items of `branch`.
pub fn rules_for(repo: &GhRepo, branch: &str) -> Vec<Value> {
    repo.settings
        .rulesets
        .iter()
        .filter(|ruleset| ruleset_applies(repo, ruleset, branch))
        .flat_map(|ruleset| {
            ruleset.rules.iter().map(move |kind| {
                json!({
                    "type": kind,
                    "ruleset_source_type": "Repository",
                    "ruleset_source": repo.full_name(),
                    "ruleset_id": ruleset.id,
                })
            })
        })
        .collect()
}

/// `GET /repos/{owner}/{repo}/rulesets` (paged: `per_page`, `page`): every ruleset of the
/// repository, whatever its enforcement, as "Get all repository rulesets" summarises them (no
/// conditions, no rules). `targets` (comma-separated: `branch`, `tag`, `push`) keeps those of
/// the targets named; the simulator's rulesets are all branch rulesets. `includes_parents` is
/// accepted: a simulated repository has no organisation's rulesets above it.
async fn list_rulesets(call: RepoCall) -> ApiResult<Response> {
    let RepoCall {
        ctx, target, uri, ..
    } = call;
    let query = uri.query().map(str::to_string);
    let branch_target = super::query_param(&query, "targets")
        .is_none_or(|targets| targets.split(',').any(|target| target.trim() == "branch"));
    target.with_repo(|repo, _| {
        let full = repo.full_name();
        let listed = if branch_target {
            repo.settings
                .rulesets
                .iter()
                .map(|ruleset| {
                    json!({
                        "id": ruleset.id,
                        "name": ruleset.name,
                        "target": "branch",
                        "source_type": "Repository",
                        "source": full,
                        "enforcement": ruleset.enforcement,
                        "node_id": crate::github::model::node_id("RRS", &ruleset.id.to_string()),
                        "_links": {
                            "self": {"href": format!("{}/repos/{full}/rulesets/{}", ctx.base_url, ruleset.id)},
                            "html": {"href": format!("{}/{full}/rules/{}", ctx.base_url, ruleset.id)},
                        },
                        "created_at": crate::github::json::ts(repo.created_at),
                        "updated_at": crate::github::json::ts(repo.created_at),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let page = paginate(listed, &ctx.base_url, &uri);
        Ok(reply_paged(
            StatusCode::OK,
            Value::Array(page.items),
            page.link,
        ))
    })
}

/// `GET /repos/{owner}/{repo}/rules/branches/{branch}` (paged: `per_page`, `page`).
async fn branch_rules(call: RepoCall<BranchSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: BranchSegment { branch },
        target,
        uri,
    } = call;
    target.with_repo(|repo, _| {
        let page = paginate(rules_for(repo, &branch), &ctx.base_url, &uri);
        Ok(reply_paged(
            StatusCode::OK,
            Value::Array(page.items),
            page.link,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn fnmatch_keeps_single_stars_within_a_segment() {
        assert!(fnmatch("main", "main"));
        assert!(fnmatch("release/*", "release/1.0"));
        assert!(!fnmatch("release/*", "release/1/hotfix"));
        assert!(fnmatch("release/**", "release/1/hotfix"));
        assert!(fnmatch("**", "any/thing"));
        assert!(fnmatch("*", "main"));
        assert!(!fnmatch("*", "a/b"));
        assert!(fnmatch("v?", "v1"));
        assert!(!fnmatch("v?", "v/"));
        assert!(!fnmatch("release/*", "releases/1"));
    }
}
