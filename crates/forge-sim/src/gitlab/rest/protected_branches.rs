//! GitLab protected branches: `GET /projects/:id/protected_branches` (paged, `search`) and
//! `GET /projects/:id/protected_branches/:name`.
//!
//! A protected branch entry's name is a branch name or a wildcard (`release/*`, `*-stable`);
//! as in GitLab, `*` matches any characters, `/` included, and the rest matches literally. A new
//! project protects its default branch (GitLab's default branch protection).

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;

use super::ProjectCall;
use crate::gitlab::json::protected_branch_json;
use crate::gitlab::model::ProtectedBranch;
use crate::gitlab::{ApiError, ApiResult, Params, Project};

/// `{name}`: a protected branch entry's exact name (a wildcard entry by its wildcard).
#[derive(Deserialize)]
pub struct ProtectedBranchSegment {
    name: String,
}

/// Whether the protected-branch `pattern` covers `branch`: equal, or a wildcard whose `*`s
/// match any (possibly empty) run of characters, `/` included.
pub fn wildcard_matches(pattern: &str, branch: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == branch;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields at least one part");
    let Some(mut remaining) = branch.strip_prefix(first) else {
        return false;
    };
    let (last, middle) = rest.split_last().expect("a pattern with '*' has two parts");
    for part in middle {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

impl Project {
    /// Whether a protected branch entry covers `branch` (which need not exist).
    pub fn is_protected(&self, branch: &str) -> bool {
        self.protected_branches
            .iter()
            .any(|entry| wildcard_matches(&entry.name, branch))
    }

    /// Protects a branch name or wildcard (idempotent); returns the entry's id.
    pub fn protect(&mut self, name: &str) -> u64 {
        if let Some(existing) = self
            .protected_branches
            .iter()
            .find(|entry| entry.name == name)
        {
            return existing.id;
        }
        let id = self
            .protected_branches
            .last()
            .map_or(1, |entry| entry.id + 1);
        self.protected_branches.push(ProtectedBranch {
            id,
            name: name.to_string(),
        });
        id
    }

    /// Removes a protected branch entry by its exact name; false when there is none.
    pub fn unprotect(&mut self, name: &str) -> bool {
        let before = self.protected_branches.len();
        self.protected_branches.retain(|entry| entry.name != name);
        self.protected_branches.len() != before
    }
}

/// `GET /projects/:id/protected_branches?search=`, paged ([`super::paging`]).
pub async fn list(call: ProjectCall, params: Params) -> ApiResult {
    let search = params.str("search");
    let entries: Vec<Value> = call.with_project(|ctx, pid| {
        Ok(ctx
            .project(pid)
            .protected_branches
            .iter()
            .filter(|entry| {
                search
                    .as_ref()
                    .is_none_or(|search| entry.name.contains(search.as_str()))
            })
            .map(protected_branch_json)
            .collect())
    })?;
    call.paged(&params, entries)
}

/// `GET /projects/:id/protected_branches/:name`: the entry with exactly this name (a wildcard
/// entry is asked for by its wildcard name); 404 otherwise.
pub async fn get_one(call: ProjectCall<ProtectedBranchSegment>) -> ApiResult {
    let name = &call.segments.name;
    call.with_project(|ctx, pid| {
        let entry = ctx
            .project(pid)
            .protected_branches
            .iter()
            .find(|entry| entry.name == *name)
            .ok_or_else(|| ApiError::not_found(""))?;
        Ok((StatusCode::OK, axum::Json(protected_branch_json(entry))).into_response())
    })
}

#[cfg(test)]
mod tests {
    use super::wildcard_matches;

    #[test]
    fn wildcards_match_any_characters_including_slashes() {
        assert!(wildcard_matches("main", "main"));
        assert!(!wildcard_matches("main", "main2"));
        assert!(wildcard_matches("release/*", "release/1.0"));
        assert!(wildcard_matches("release/*", "release/a/b"));
        assert!(wildcard_matches("release/*", "release/"));
        assert!(!wildcard_matches("release/*", "release"));
        assert!(wildcard_matches("*-stable", "12-3-stable"));
        assert!(wildcard_matches("*", "anything/at/all"));
        assert!(wildcard_matches("a*b*c", "a/x/b/y/c"));
        assert!(!wildcard_matches("a*b*c", "a/x/c"));
        assert!(
            !wildcard_matches("ab*ba", "aba"),
            "prefix and suffix must not overlap"
        );
        assert!(!wildcard_matches("release/*", "hotfix/release/1"));
    }
}
