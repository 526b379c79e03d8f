//! GitLab repository endpoints: project, files, branches, tree, commits (list, create with actions), compare.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ProjectCall;
use crate::gitlab::json::{commit_detail_json, commit_json};
use crate::gitlab::{ApiError, ApiResult, Ctx, Params, Project, created, ok, ops, project_json};
use crate::repo::{FileEntry, Repo};
use crate::state::User;

/// `{file_path}`: a URL-encoded file path.
#[derive(Deserialize)]
pub struct FileSegment {
    file_path: String,
}

/// `{branch}`: a URL-encoded branch name.
#[derive(Deserialize)]
pub struct BranchSegment {
    branch: String,
}

/// `{sha}`: a commit sha or any ref.
#[derive(Deserialize)]
pub struct CommitSegment {
    sha: String,
}

fn branch_json(project: &Project, name: &str, base: &str) -> Value {
    let repo = &project.repo;
    let head = repo.branch_head(name).unwrap_or_default();
    let default_head = repo.branch_head(repo.default_branch()).unwrap_or_default();
    let commit = repo
        .commit(head)
        .map(|commit| commit_json(project, commit, base))
        .unwrap_or(Value::Null);
    json!({
        "name": name,
        "merged": name != repo.default_branch() && repo.is_ancestor(head, default_head),
        "protected": project.is_protected(name),
        "default": name == repo.default_branch(),
        "developers_can_push": !project.is_protected(name),
        "developers_can_merge": true,
        "can_push": true,
        "web_url": format!("{}/-/tree/{}", project.web_url(base), name),
        "commit": commit,
    })
}

pub async fn get_project(call: ProjectCall) -> ApiResult {
    call.with_project(|ctx, pid| ok(project_json(ctx.project(pid), ctx.base)))
}

fn last_commit_touching(repo: &Repo, start: &str, path: &str) -> String {
    let mut current = start.to_string();
    loop {
        let Some(commit) = repo.commit(&current) else {
            return current;
        };
        let entry = commit.tree.get(path);
        let Some(parent) = commit.parents.first() else {
            return current;
        };
        match repo.commit(parent) {
            Some(parent_commit) if parent_commit.tree.get(path) == entry => {
                current = parent.clone()
            }
            _ => return current,
        }
    }
}

pub async fn get_file(call: ProjectCall<FileSegment>, params: Params) -> ApiResult {
    let file_path = &call.segments.file_path;
    let reference = params.req_str("ref")?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let commit = project
            .repo
            .resolve(&reference)
            .ok_or_else(|| ApiError::not_found("Commit"))?;
        let entry = commit
            .tree
            .get(file_path)
            .ok_or_else(|| ApiError::not_found("File"))?;
        use sha2::Digest;
        let sha256 = hex::encode(sha2::Sha256::digest(&entry.content));
        ok(json!({
            "file_name": file_path.rsplit('/').next().unwrap_or(file_path),
            "file_path": file_path,
            "size": entry.content.len(),
            "encoding": "base64",
            "content": BASE64.encode(&entry.content),
            "content_sha256": sha256,
            "ref": reference,
            "blob_id": entry.blob_id(),
            "commit_id": commit.sha,
            "last_commit_id": last_commit_touching(&project.repo, &commit.sha, file_path),
            "execute_filemode": entry.executable,
        }))
    })
}

pub async fn get_file_raw(call: ProjectCall<FileSegment>, params: Params) -> ApiResult {
    let file_path = &call.segments.file_path;
    let content = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let reference = params
            .str("ref")
            .unwrap_or_else(|| project.repo.default_branch().to_string());
        let commit = project
            .repo
            .resolve(&reference)
            .ok_or_else(|| ApiError::not_found("Commit"))?;
        let entry = commit
            .tree
            .get(file_path)
            .ok_or_else(|| ApiError::not_found("File"))?;
        Ok(entry.content.clone())
    })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        content,
    )
        .into_response())
}

pub async fn list_branches(call: ProjectCall, params: Params) -> ApiResult {
    let search = params.str("search");
    let branches = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let branches: Vec<Value> = project
            .repo
            .branches()
            .filter(|(name, _)| {
                search
                    .as_ref()
                    .is_none_or(|search| name.contains(search.as_str()))
            })
            .map(|(name, _)| branch_json(project, name, ctx.base))
            .collect();
        Ok(branches)
    })?;
    call.paged(&params, branches)
}

pub async fn get_branch(call: ProjectCall<BranchSegment>) -> ApiResult {
    let branch = &call.segments.branch;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        if project.repo.branch_head(branch).is_none() {
            return Err(ApiError::not_found("Branch"));
        }
        ok(branch_json(project, branch, ctx.base))
    })
}

/// Git's ref-name rules, roughly.
pub fn valid_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.starts_with('-')
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name != "HEAD"
        && !name.chars().any(|character| {
            character.is_ascii_control()
                || matches!(character, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
        })
}

pub async fn create_branch(call: ProjectCall, params: Params) -> ApiResult {
    params.require(&["branch", "ref"])?;
    let branch = params.req_str("branch")?;
    let reference = params.req_str("ref")?;
    call.with_project(|ctx, pid| {
        let project = ctx.project_mut(pid);
        if !valid_branch_name(&branch) {
            return Err(ApiError::bad_request("Branch name is invalid"));
        }
        if project.repo.branch_head(&branch).is_some() {
            return Err(ApiError::bad_request("Branch already exists"));
        }
        let sha = project
            .repo
            .resolve(&reference)
            .map(|commit| commit.sha.clone())
            .ok_or_else(|| ApiError::bad_request(format!("Invalid reference name: {reference}")))?;
        project.repo.set_branch(&branch, &sha);
        ops::on_branch_updated(ctx, pid, &branch, None, &sha, &call.user);
        created(branch_json(ctx.project(pid), &branch, ctx.base))
    })
}

pub async fn delete_branch(call: ProjectCall<BranchSegment>) -> ApiResult {
    let branch = &call.segments.branch;
    call.with_project(|ctx, pid| {
        let project = ctx.project_mut(pid);
        if project.repo.branch_head(branch).is_none() {
            return Err(ApiError::not_found("Branch"));
        }
        if branch == project.repo.default_branch() {
            return Err(ApiError::bad_request(
                "The default branch of a project cannot be deleted.",
            ));
        }
        project.repo.delete_branch(branch);
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}

pub async fn get_commit(call: ProjectCall<CommitSegment>) -> ApiResult {
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let commit = project
            .repo
            .resolve(&call.segments.sha)
            .ok_or_else(|| ApiError::not_found("Commit"))?;
        ok(commit_detail_json(project, commit, ctx.base))
    })
}

/// One file action of a commit request.
#[derive(Debug, Clone)]
pub enum FileAction {
    Create {
        path: String,
        content: Vec<u8>,
        executable: bool,
    },
    Update {
        path: String,
        content: Vec<u8>,
    },
    Delete {
        path: String,
    },
    Move {
        path: String,
        previous_path: String,
        content: Option<Vec<u8>>,
    },
    Chmod {
        path: String,
        executable: bool,
    },
}

/// A parsed `POST /repository/commits` request (also used by the control API's push).
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub branch: String,
    pub start_branch: Option<String>,
    pub start_sha: Option<String>,
    pub force: bool,
    pub message: String,
    pub actions: Vec<FileAction>,
    pub author_name: Option<String>,
    pub author_email: Option<String>,
}

fn parse_actions(value: &Value) -> Result<Vec<FileAction>, ApiError> {
    let items = value
        .as_array()
        .ok_or_else(|| ApiError::param("actions is invalid"))?;
    if items.is_empty() {
        return Err(ApiError::param("actions is empty"));
    }
    let mut actions = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let object = item
            .as_object()
            .ok_or_else(|| ApiError::param(format!("actions[{index}] is invalid")))?;
        let field = |name: &str| object.get(name).and_then(Value::as_str).map(str::to_string);
        let action = field("action")
            .ok_or_else(|| ApiError::param(format!("actions[{index}][action] is missing")))?;
        let path = field("file_path")
            .filter(|path| !path.is_empty())
            .ok_or_else(|| ApiError::param(format!("actions[{index}][file_path] is missing")))?;
        let path = path.trim_start_matches('/').to_string();
        let encoding = field("encoding").unwrap_or_else(|| "text".to_string());
        let content = match object.get("content") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(match encoding.as_str() {
                "text" => text.clone().into_bytes(),
                "base64" => BASE64.decode(text.trim()).map_err(|_| {
                    ApiError::bad_request(format!("Invalid base64 content for {path}"))
                })?,
                _ => {
                    return Err(ApiError::param(format!(
                        "actions[{index}][encoding] does not have a valid value"
                    )));
                }
            }),
            Some(_) => {
                return Err(ApiError::param(format!(
                    "actions[{index}][content] is invalid"
                )));
            }
        };
        let executable = match object.get("execute_filemode") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) if s == "true" => Some(true),
            Some(Value::String(s)) if s == "false" => Some(false),
            Some(_) => {
                return Err(ApiError::param(format!(
                    "actions[{index}][execute_filemode] is invalid"
                )));
            }
        };
        let parsed = match action.as_str() {
            "create" => FileAction::Create {
                path,
                content: content.unwrap_or_default(),
                executable: executable.unwrap_or(false),
            },
            "update" => FileAction::Update {
                path,
                content: content.unwrap_or_default(),
            },
            "delete" => FileAction::Delete { path },
            "move" => FileAction::Move {
                path,
                previous_path: field("previous_path")
                    .filter(|path| !path.is_empty())
                    .ok_or_else(|| ApiError::bad_request("You must supply a previous path"))?,
                content,
            },
            "chmod" => FileAction::Chmod {
                path,
                executable: executable.ok_or_else(|| {
                    ApiError::param(format!("actions[{index}][execute_filemode] is missing"))
                })?,
            },
            _ => {
                return Err(ApiError::param(format!(
                    "actions[{index}][action] does not have a valid value"
                )));
            }
        };
        actions.push(parsed);
    }
    Ok(actions)
}

impl CommitRequest {
    pub fn from_params(params: &Params) -> Result<CommitRequest, ApiError> {
        params.require(&["branch", "commit_message", "actions"])?;
        if params.has("start_branch") && params.has("start_sha") {
            return Err(ApiError::param(
                "start_branch, start_sha are mutually exclusive",
            ));
        }
        let start_sha = params.str("start_sha");
        if let Some(sha) = &start_sha
            && (sha.len() != 40 || !sha.chars().all(|digit| digit.is_ascii_hexdigit()))
        {
            return Err(ApiError::param("start_sha is invalid"));
        }
        let actions = parse_actions(params.0.get("actions").unwrap_or(&Value::Null))?;
        Ok(CommitRequest {
            branch: params.req_str("branch")?,
            start_branch: params
                .str("start_branch")
                .filter(|branch| !branch.is_empty()),
            start_sha,
            force: params.flag("force")?,
            message: params.req_str("commit_message")?,
            actions,
            author_name: params.str("author_name"),
            author_email: params.str("author_email"),
        })
    }
}

fn file_exists_error() -> ApiError {
    ApiError::bad_request("A file with this name already exists")
}

fn file_missing_error() -> ApiError {
    ApiError::bad_request("A file with this name doesn't exist")
}

/// Applies a commit request: validates like GitLab, writes the commit, moves the branch, and
/// reacts to the push (MR updates, pipelines). Returns the new commit sha.
pub fn apply_commit(
    ctx: &mut Ctx<'_>,
    pid: u64,
    request: &CommitRequest,
    user: &User,
) -> Result<String, ApiError> {
    let now = ctx.now;
    let project = ctx.project_mut(pid);
    let repo = &mut project.repo;
    if !valid_branch_name(&request.branch) {
        return Err(ApiError::bad_request("Branch name is invalid"));
    }
    let existing = repo.branch_head(&request.branch).map(str::to_string);
    let (start, different_branch) = match (&request.start_sha, &request.start_branch) {
        (Some(sha), _) => {
            let commit = repo
                .commit(&sha.to_ascii_lowercase())
                .ok_or_else(|| ApiError::bad_request(format!("Cannot find start_sha '{sha}'")))?;
            (commit.sha.clone(), true)
        }
        (None, Some(start_branch)) => {
            let head = repo.branch_head(start_branch).ok_or_else(|| {
                ApiError::bad_request("You can only create or edit files when you are on a branch")
            })?;
            (head.to_string(), start_branch != &request.branch)
        }
        (None, None) => {
            let head = existing.clone().ok_or_else(|| {
                ApiError::bad_request("You can only create or edit files when you are on a branch")
            })?;
            (head, false)
        }
    };
    if different_branch && existing.is_some() && !request.force {
        return Err(ApiError::bad_request(format!(
            "A branch called '{}' already exists. Switch to that branch in order to make changes",
            request.branch
        )));
    }
    let start_commit = repo
        .commit(&start)
        .ok_or_else(|| ApiError::not_found("Commit"))?;
    let mut tree = start_commit.tree.as_ref().clone();
    for action in &request.actions {
        match action {
            FileAction::Create {
                path,
                content,
                executable,
            } => {
                if tree.contains_key(path) {
                    return Err(file_exists_error());
                }
                tree.insert(
                    path.clone(),
                    FileEntry {
                        content: content.clone(),
                        executable: *executable,
                    },
                );
            }
            FileAction::Update { path, content } => {
                let entry = tree.get_mut(path).ok_or_else(file_missing_error)?;
                entry.content = content.clone();
            }
            FileAction::Delete { path } => {
                tree.remove(path).ok_or_else(file_missing_error)?;
            }
            FileAction::Move {
                path,
                previous_path,
                content,
            } => {
                if tree.contains_key(path) {
                    return Err(file_exists_error());
                }
                let mut entry = tree.remove(previous_path).ok_or_else(file_missing_error)?;
                if let Some(content) = content {
                    entry.content = content.clone();
                }
                tree.insert(path.clone(), entry);
            }
            FileAction::Chmod { path, executable } => {
                let entry = tree.get_mut(path).ok_or_else(file_missing_error)?;
                entry.executable = *executable;
            }
        }
    }
    let author_name = request
        .author_name
        .clone()
        .unwrap_or_else(|| user.name.clone());
    let author_email = request
        .author_email
        .clone()
        .unwrap_or_else(|| user.email.clone());
    let sha = repo.create_commit(
        vec![start],
        Arc::new(tree),
        &request.message,
        &author_name,
        &author_email,
        now,
    );
    repo.set_branch(&request.branch, &sha);
    ops::on_branch_updated(ctx, pid, &request.branch, existing.as_deref(), &sha, user);
    Ok(sha)
}

pub async fn create_commit(call: ProjectCall, params: Params) -> ApiResult {
    let request = CommitRequest::from_params(&params)?;
    call.with_project(|ctx, pid| {
        let sha = apply_commit(ctx, pid, &request, &call.user)?;
        let project = ctx.project(pid);
        let commit = project.repo.commit(&sha).expect("commit just created");
        created(commit_detail_json(project, commit, ctx.base))
    })
}

pub async fn compare(call: ProjectCall, params: Params) -> ApiResult {
    params.require(&["from", "to"])?;
    let from = params.req_str("from")?;
    let to = params.req_str("to")?;
    let straight = params.flag("straight")?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let repo = &project.repo;
        let from_commit = repo
            .resolve(&from)
            .ok_or_else(|| ApiError::not_found("Ref"))?;
        let to_commit = repo
            .resolve(&to)
            .ok_or_else(|| ApiError::not_found("Ref"))?;
        let base_sha = if straight {
            from_commit.sha.clone()
        } else {
            repo.merge_base(&from_commit.sha, &to_commit.sha)
                .unwrap_or_else(|| from_commit.sha.clone())
        };
        let commits: Vec<Value> = repo
            .commits_between(&from_commit.sha, &to_commit.sha)
            .into_iter()
            .map(|commit| commit_json(project, commit, ctx.base))
            .collect();
        let diffs: Vec<Value> = repo
            .diff(&base_sha, &to_commit.sha)
            .into_iter()
            .map(|diff| {
                json!({
                    "old_path": diff.old_path,
                    "new_path": diff.new_path,
                    "a_mode": diff.a_mode,
                    "b_mode": diff.b_mode,
                    "diff": diff.diff,
                    "new_file": diff.new_file,
                    "renamed_file": diff.renamed_file,
                    "deleted_file": diff.deleted_file,
                    "generated_file": Value::Null,
                })
            })
            .collect();
        ok(json!({
            "commit": commits.last().cloned().unwrap_or(Value::Null),
            "commits": commits,
            "diffs": diffs,
            "compare_timeout": false,
            "compare_same_ref": from_commit.sha == to_commit.sha,
            "web_url": format!("{}/-/compare/{}...{}", project.web_url(ctx.base), from_commit.short_id(), to_commit.short_id()),
        }))
    })
}

/// A git-like id of the tree under `dir` ("" for the root): a digest of its entries.
fn tree_id(tree: &crate::repo::Tree, dir: &str) -> String {
    use sha2::Digest;
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"tree ");
    for (path, entry) in tree.range(prefix.clone()..) {
        let Some(relative) = path.strip_prefix(&prefix) else {
            break;
        };
        hasher.update(relative.as_bytes());
        hasher.update([0u8]);
        hasher.update(entry.blob_id().as_bytes());
    }
    hex::encode(hasher.finalize())[..40].to_string()
}

/// `GET /projects/:id/repository/tree?path=&ref=&recursive=`: the entries under `path` (the
/// root by default) at `ref` (the default branch by default), directories (`type: tree`, mode
/// `040000`) first, then files (`type: blob`), each sorted by path; `path` is the full path
/// from the repository root. Without `recursive` only the directory's own entries. Paged.
/// 404 `Tree Not Found` when the ref or the directory does not exist.
pub async fn tree(call: ProjectCall, params: Params) -> ApiResult {
    let dir = params
        .str("path")
        .unwrap_or_default()
        .trim_matches('/')
        .to_string();
    let recursive = params.flag("recursive")?;
    let reference = params.str("ref");
    let entries = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let reference = reference.unwrap_or_else(|| project.repo.default_branch().to_string());
        let commit = project
            .repo
            .resolve(&reference)
            .ok_or_else(|| ApiError::not_found("Tree"))?;
        let tree = &commit.tree;
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut dirs = std::collections::BTreeSet::new();
        let mut files = Vec::new();
        for (path, entry) in tree.iter() {
            let Some(relative) = path.strip_prefix(&prefix) else {
                continue;
            };
            let parts: Vec<&str> = relative.split('/').collect();
            let depth = if recursive { parts.len() - 1 } else { 1 };
            for end in 1..=depth.min(parts.len() - 1) {
                dirs.insert(format!("{prefix}{}", parts[..end].join("/")));
            }
            if recursive || parts.len() == 1 {
                files.push((path.clone(), entry));
            }
        }
        if !dir.is_empty() && dirs.is_empty() && files.is_empty() {
            return Err(ApiError::not_found("Tree"));
        }
        let name = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
        let mut entries: Vec<Value> = dirs
            .into_iter()
            .map(|path| {
                json!({
                    "id": tree_id(tree, &path),
                    "name": name(&path),
                    "type": "tree",
                    "path": path,
                    "mode": "040000",
                })
            })
            .collect();
        entries.extend(files.into_iter().map(|(path, entry)| {
            json!({
                "id": entry.blob_id(),
                "name": name(&path),
                "type": "blob",
                "path": path,
                "mode": entry.mode(),
            })
        }));
        Ok(entries)
    })?;
    call.paged(&params, entries)
}

/// `GET /projects/:id/repository/commits?ref_name=&path=`: the commits reachable from
/// `ref_name` (the default branch by default), newest first, optionally only those changing
/// `path`. Paged; an unknown ref lists nothing.
pub async fn list_commits(call: ProjectCall, params: Params) -> ApiResult {
    let reference = params.str("ref_name");
    let path = params.str("path");
    let commits = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let repo = &project.repo;
        let reference = reference.unwrap_or_else(|| repo.default_branch().to_string());
        let Some(head) = repo.resolve(&reference) else {
            return Ok(Vec::new());
        };
        let mut commits = repo.commits_between("", &head.sha);
        commits.reverse();
        Ok(commits
            .into_iter()
            .filter(|commit| {
                path.as_ref().is_none_or(|path| {
                    let before = commit
                        .parents
                        .first()
                        .and_then(|parent| repo.commit(parent))
                        .and_then(|parent| parent.tree.get(path.as_str()));
                    before != commit.tree.get(path.as_str())
                })
            })
            .map(|commit| commit_json(project, commit, ctx.base))
            .collect())
    })?;
    call.paged(&params, commits)
}
