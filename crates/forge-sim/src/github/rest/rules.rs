//! Branch protection as GitHub reports it: classic protection (`"protected"` on branch objects)
//! and rulesets (`GET /repos/{owner}/{repo}/rules/branches/{branch}`, the active rules that
//! apply to a branch name, whether or not the branch exists).
//!
//! Ruleset `ref_name` conditions are `refs/heads/<pattern>`, `~DEFAULT_BRANCH` or `~ALL`;
//! patterns use fnmatch syntax as GitHub does: `*` matches within one path segment, `**` across
//! segments, `?` one character other than `/`. Classic protection patterns use the same syntax.

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use super::{auth, paginate, reply, with_repo};
use crate::github::error::ApiResult;
use crate::github::model::{GhRepo, Ruleset};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new().route(
        "/repos/{owner}/{repo}/rules/branches/{*branch}",
        get(branch_rules),
    )
}

/// fnmatch as GitHub's branch patterns use it (see the module docs).
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // Recursive matching; patterns are short.
    fn go(p: &[u8], n: &[u8]) -> bool {
        if p.is_empty() {
            return n.is_empty();
        }
        if p.starts_with(b"**") {
            let rest = &p[2..];
            return (0..=n.len()).any(|i| go(rest, &n[i..]));
        }
        match p[0] {
            b'*' => {
                let rest = &p[1..];
                for i in 0..=n.len() {
                    if go(rest, &n[i..]) {
                        return true;
                    }
                    if i < n.len() && n[i] == b'/' {
                        return false;
                    }
                }
                false
            }
            b'?' => !n.is_empty() && n[0] != b'/' && go(&p[1..], &n[1..]),
            c => !n.is_empty() && n[0] == c && go(&p[1..], &n[1..]),
        }
    }
    go(p, n)
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
            .any(|c| condition_matches(repo, c, branch))
        && !ruleset
            .exclude
            .iter()
            .any(|c| condition_matches(repo, c, branch))
}

/// Classic branch protection: the default branch, or a configured name/pattern.
pub fn classic_protected(repo: &GhRepo, branch: &str) -> bool {
    branch == repo.git.default_branch()
        || repo
            .settings
            .protected_branches
            .iter()
            .any(|p| fnmatch(p, branch))
}

/// The "get rules for a branch" items of `branch`.
pub fn rules_for(repo: &GhRepo, branch: &str) -> Vec<Value> {
    repo.settings
        .rulesets
        .iter()
        .filter(|rs| ruleset_applies(repo, rs, branch))
        .flat_map(|rs| {
            rs.rules.iter().map(move |kind| {
                json!({
                    "type": kind,
                    "ruleset_source_type": "Repository",
                    "ruleset_source": repo.full_name(),
                    "ruleset_id": rs.id,
                })
            })
        })
        .collect()
}

/// `GET /repos/{owner}/{repo}/rules/branches/{branch}` (paged: `per_page`, `page`).
async fn branch_rules(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path((o, r, branch)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    auth(&st, &headers)?;
    with_repo(&st, &o, &r, |repo, _| {
        let rules = paginate(rules_for(repo, &branch), &query);
        Ok(reply(StatusCode::OK, Value::Array(rules)))
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
