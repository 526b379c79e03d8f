//! Commits made on a branch without the Git data API: GraphQL's
//! `createCommitOnBranch`, which appends one commit of file additions and
//! deletions to a branch's head, as GitHub's web editor does.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine as _;

use crate::github::model::GhRepo;
use crate::github::{Ctx, Env};
use crate::repo::{FileEntry, malformed_path};

use super::pulls::set_branch;

/// One `createCommitOnBranch`, its input decoded.
pub struct CommitOnBranch<'a> {
    pub branch: &'a str,
    /// `expectedHeadOid`: the commit the branch must point at.
    pub expected_head: &'a str,
    /// `fileChanges.additions`: path and base64 contents.
    pub additions: Vec<(&'a str, &'a str)>,
    /// `fileChanges.deletions`: paths.
    pub deletions: Vec<&'a str>,
    pub headline: &'a str,
    pub body: Option<&'a str>,
}

/// Appends the commit to the branch and moves the branch to it (pull
/// requests following the branch synchronize, as on a push). `Err` is
/// GitHub's message; nothing is written then.
///
/// As GitHub documents `FileChanges`: paths are unique across additions and
/// deletions, contents are RFC 4648 base64 with padding, an addition
/// replaces a file's whole content, and no changes at all make a commit
/// with the parent's tree. A path that does not exist cannot be deleted,
/// and a file cannot replace a directory or sit below a file. An addition
/// keeps an existing file's mode and makes a new file `100644`: GitHub's
/// documentation says nothing of modes (the mutation takes none).
pub fn commit_on_branch(
    repo: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    input: &CommitOnBranch<'_>,
) -> Result<String, String> {
    let branch = input
        .branch
        .strip_prefix("refs/heads/")
        .unwrap_or(input.branch);
    let head = repo
        .git
        .branch_head(branch)
        .map(str::to_owned)
        .ok_or_else(|| format!("A ref named \"refs/heads/{branch}\" does not exist."))?;
    if head != input.expected_head {
        return Err(format!(
            "Expected branch to point to \"{}\" but it did not. Pull and try again.",
            input.expected_head
        ));
    }
    if input.headline.is_empty() {
        return Err("A commit message headline is required.".into());
    }
    let mut seen = BTreeSet::new();
    for path in input
        .additions
        .iter()
        .map(|(path, _)| *path)
        .chain(input.deletions.iter().copied())
    {
        if malformed_path(path) {
            return Err(format!("The path \"{path}\" is not a valid file path."));
        }
        if !seen.insert(path) {
            return Err(format!(
                "The path \"{path}\" appears more than once in the file changes."
            ));
        }
    }
    let parent = repo
        .git
        .commit(&head)
        .ok_or_else(|| format!("commit {head} is missing"))?;
    let mut tree = (*parent.tree).clone();
    for path in &input.deletions {
        if tree.remove(*path).is_none() {
            return Err(format!(
                "A path was requested for deletion which does not exist as of commit oid `{head}`"
            ));
        }
    }
    let engine = base64::engine::general_purpose::STANDARD;
    for (path, contents) in &input.additions {
        let content = engine
            .decode(contents)
            .map_err(|_| format!("The contents of \"{path}\" are not valid base64."))?;
        let prefix = format!("{path}/");
        if tree.keys().any(|p| p.starts_with(&prefix)) {
            return Err(format!("\"{path}\" is a directory."));
        }
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            if tree.contains_key(&path[..end]) {
                return Err(format!("\"{}\" is a file.", &path[..end]));
            }
            end += 1;
        }
        let executable = tree.get(*path).is_some_and(|file| file.executable);
        tree.insert(
            (*path).to_owned(),
            FileEntry {
                content,
                executable,
            },
        );
    }
    let message = match input.body.filter(|body| !body.is_empty()) {
        Some(body) => format!("{}\n\n{body}", input.headline),
        None => input.headline.to_owned(),
    };
    let email = format!("{}@users.noreply.github.com", ctx.sender);
    let sha = repo.git.create_commit(
        vec![head],
        Arc::new(tree),
        &message,
        &ctx.sender,
        &email,
        ctx.now,
    );
    set_branch(repo, env, ctx, branch, Some(&sha));
    Ok(sha)
}
