//! Git data API (blobs, trees, commits, refs), commits, contents, compare, repository and `/user`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    BranchSegment, Caller, ReferenceSegment, RepoCall, ShaSegment, query_param, reply, reply_paged,
};
use crate::github::error::{ApiError, ApiResult, parse_body};
use crate::github::json as render;
use crate::github::model::GhRepo;
use crate::github::{Ctx, model, ops};
use crate::repo::{FileEntry, Tree};
use crate::state::Shared;

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/user", get(get_user))
        .route("/repos/{owner}/{repo}", get(get_repo))
        .route("/repos/{owner}/{repo}/branches", get(list_branches))
        .route("/repos/{owner}/{repo}/branches/{*branch}", get(get_branch))
        .route("/repos/{owner}/{repo}/git/blobs", post(create_blob))
        .route("/repos/{owner}/{repo}/git/blobs/{sha}", get(get_blob))
        .route("/repos/{owner}/{repo}/git/trees", post(create_tree))
        .route("/repos/{owner}/{repo}/git/trees/{sha}", get(get_tree))
        .route("/repos/{owner}/{repo}/git/commits", post(create_commit))
        .route(
            "/repos/{owner}/{repo}/git/commits/{sha}",
            get(get_git_commit),
        )
        .route("/repos/{owner}/{repo}/git/ref/{*reference}", get(get_ref))
        .route(
            "/repos/{owner}/{repo}/git/matching-refs/{*reference}",
            get(matching_refs),
        )
        .route(
            "/repos/{owner}/{repo}/git/refs",
            post(create_ref).get(list_refs),
        )
        .route(
            "/repos/{owner}/{repo}/git/refs/{*reference}",
            get(get_refs_legacy).patch(update_ref).delete(delete_ref),
        )
        .route("/repos/{owner}/{repo}/commits/{reference}", get(get_commit))
        .route("/repos/{owner}/{repo}/contents/{*path}", get(get_contents))
        .route("/repos/{owner}/{repo}/compare/{*basehead}", get(compare))
}

/// `{path}`: a file or directory path in the repository.
#[derive(Deserialize)]
struct ContentSegment {
    path: String,
}

/// `{basehead}`: `base...head` of a comparison.
#[derive(Deserialize)]
struct CompareSegment {
    basehead: String,
}

async fn get_user(Caller(ctx): Caller) -> ApiResult<Response> {
    let mut user = render::user(&ctx, &ctx.sender);
    user["name"] = json!(ctx.sender);
    user["email"] = json!(format!("{}@example.com", ctx.sender));
    Ok(reply(StatusCode::OK, user))
}

async fn get_repo(call: RepoCall) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    target.with_repo(|repo, _| Ok(reply(StatusCode::OK, render::repo(&ctx, repo))))
}

/// `GET /repos/{owner}/{repo}/branches?protected=`: branches by name, each with its head
/// commit's sha and url and whether it is protected (paged).
async fn list_branches(call: RepoCall, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let protected = query_param(&query, "protected").map(|value| value == "true" || value == "1");
    call.target.with_repo(|repo, _| {
        let full = repo.full_name();
        let branches: Vec<Value> = repo
            .git
            .branches()
            .map(|(name, sha)| (name, sha, super::rules::classic_protected(repo, name)))
            .filter(|(_, _, is_protected)| protected.is_none_or(|wanted| wanted == *is_protected))
            .map(|(name, sha, is_protected)| {
                json!({
                    "name": name,
                    "commit": {
                        "sha": sha,
                        "url": format!("{}/repos/{full}/commits/{sha}", call.ctx.base_url),
                    },
                    "protected": is_protected,
                })
            })
            .collect();
        let page = call.paginate(branches);
        Ok(reply_paged(
            StatusCode::OK,
            Value::Array(page.items),
            page.link,
        ))
    })
}

async fn get_branch(call: RepoCall<BranchSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: BranchSegment { branch },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let sha = repo
            .git
            .branch_head(&branch)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "Branch not found"))?;
        let commit = render::commit(&ctx, repo, sha).unwrap_or(Value::Null);
        Ok(reply(
            StatusCode::OK,
            json!({
                "name": branch,
                "commit": commit,
                "protected": super::rules::classic_protected(repo, &branch),
            }),
        ))
    })
}

#[derive(Deserialize)]
struct BlobBody {
    content: Option<String>,
    encoding: Option<String>,
}

async fn create_blob(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let body: BlobBody = parse_body(&body)?;
    let content = body
        .content
        .ok_or_else(|| ApiError::missing_field("Blob", "content"))?;
    let bytes = match body.encoding.as_deref().unwrap_or("utf-8") {
        "utf-8" | "utf8" => content.into_bytes(),
        "base64" => {
            let cleaned: String = content
                .chars()
                .filter(|character| !character.is_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(cleaned)
                .map_err(|_| ApiError::invalid_field("Blob", "content"))?
        }
        _ => return Err(ApiError::invalid_field("Blob", "encoding")),
    };
    target.with_repo(|repo, _| {
        let sha = FileEntry::new(bytes.clone()).blob_id();
        repo.blobs.insert(sha.clone(), bytes);
        Ok(reply(
            StatusCode::CREATED,
            json!({ "sha": sha, "url": format!("{}/repos/{}/git/blobs/{sha}", ctx.base_url, repo.full_name()) }),
        ))
    })
}

/// The content of a blob: stored blobs first, then any file in a reachable tree.
fn blob_content(repo: &GhRepo, sha: &str) -> Option<Vec<u8>> {
    if let Some(blob) = repo.blobs.get(sha) {
        return Some(blob.clone());
    }
    for tree in repo.trees.values() {
        if let Some(file) = tree.values().find(|file| file.blob_id() == sha) {
            return Some(file.content.clone());
        }
    }
    let heads: Vec<String> = repo.git.branches().map(|(_, head)| head.clone()).collect();
    for head in heads {
        if let Some(commit) = repo.git.commit(&head)
            && let Some(file) = commit.tree.values().find(|file| file.blob_id() == sha)
        {
            return Some(file.content.clone());
        }
    }
    None
}

async fn get_blob(call: RepoCall<ShaSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ShaSegment { sha },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let content = blob_content(repo, &sha).ok_or_else(ApiError::not_found)?;
        Ok(reply(
            StatusCode::OK,
            json!({
                "sha": sha,
                "node_id": format!("B_kwDO{}", sha.chars().take(12).collect::<String>()),
                "size": content.len(),
                "url": format!("{}/repos/{}/git/blobs/{sha}", ctx.base_url, repo.full_name()),
                "content": base64::engine::general_purpose::STANDARD.encode(&content),
                "encoding": "base64",
            }),
        ))
    })
}

#[derive(Deserialize)]
struct TreeItem {
    path: Option<String>,
    mode: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "explicit_null")]
    sha: Option<Option<String>>,
    content: Option<String>,
}

/// Distinguishes `"sha": null` (delete) from an absent `sha`.
fn explicit_null<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::deserialize(deserializer)?))
}

#[derive(Deserialize)]
struct TreeBody {
    base_tree: Option<String>,
    tree: Option<Vec<TreeItem>>,
}

/// Every directory of a flat tree (each ancestor of a file path).
fn directories(tree: &Tree) -> std::collections::BTreeSet<String> {
    let mut dirs = std::collections::BTreeSet::new();
    for path in tree.keys() {
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            dirs.insert(path[..end].to_string());
            end += 1;
        }
    }
    dirs
}

/// A tree as GitHub lists it: its own entries, or with `recursive` every blob and subtree
/// (`type: tree`, mode `040000`) below it. Subtrees are stored so they can be read by sha.
///
/// A recursive listing holds at most the repository's `tree_listing_limit` entries (GitHub's
/// 100,000 by default): beyond it GitHub answers the first entries (in the listing's order) and
/// `"truncated": true`.
fn tree_json(ctx: &Ctx, repo: &mut GhRepo, sha: &str, tree: &Tree, recursive: bool) -> Value {
    let full = repo.full_name();
    let mut entries: Vec<(String, Value)> = Vec::new();
    for dir in directories(tree) {
        if !recursive && dir.contains('/') {
            continue;
        }
        let sub = model::subtree(tree, &dir);
        let sub_sha = model::tree_sha(&sub);
        entries.push((
            dir.clone(),
            json!({
                "path": dir,
                "mode": "040000",
                "type": "tree",
                "sha": sub_sha,
                "url": format!("{}/repos/{full}/git/trees/{sub_sha}", ctx.base_url),
            }),
        ));
        repo.trees.entry(sub_sha).or_insert_with(|| Arc::new(sub));
    }
    for (path, file) in tree {
        if !recursive && path.contains('/') {
            continue;
        }
        let blob = file.blob_id();
        entries.push((
            path.clone(),
            json!({
                "path": path,
                "mode": file.mode(),
                "type": "blob",
                "sha": blob,
                "size": file.content.len(),
                "url": format!("{}/repos/{full}/git/blobs/{blob}", ctx.base_url),
            }),
        ));
    }
    entries.sort_by(|left, right| left.0.cmp(&right.0));
    let limit = repo
        .settings
        .tree_listing_limit
        .unwrap_or(model::TREE_LISTING_LIMIT);
    let truncated = recursive && entries.len() > limit;
    if truncated {
        entries.truncate(limit);
    }
    json!({
        "sha": sha,
        "url": format!("{}/repos/{full}/git/trees/{sha}", ctx.base_url),
        "tree": entries.into_iter().map(|(_, entry)| entry).collect::<Vec<_>>(),
        "truncated": truncated,
    })
}

/// Puts a blob at `path` as GitHub's tree API does: it replaces a directory at that path (with
/// everything in it) and turns a file at any parent path into a directory.
fn put_blob(tree: &mut Tree, path: String, entry: FileEntry) {
    let prefix = format!("{path}/");
    tree.retain(|existing, _| !existing.starts_with(&prefix));
    let mut end = 0;
    while let Some(slash) = path[end..].find('/') {
        end += slash;
        tree.remove(&path[..end]);
        end += 1;
    }
    tree.insert(path, entry);
}

async fn create_tree(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let body: TreeBody = parse_body(&body)?;
    let items = body
        .tree
        .ok_or_else(|| ApiError::missing_field("Tree", "tree"))?;
    target.with_repo(|repo, _| {
        let mut tree: Tree = match &body.base_tree {
            Some(base) => repo
                .find_tree(base)
                .map(|found| (*found).clone())
                .ok_or_else(|| ApiError::unprocessable("base_tree is not a valid tree oid"))?,
            None => Tree::new(),
        };
        for item in items {
            let path = item
                .path
                .filter(|path| !crate::repo::malformed_path(path))
                .ok_or_else(|| {
                    ApiError::unprocessable("tree.path contains a malformed path component")
                })?;
            let executable = match item.mode.as_deref() {
                Some("100644") | None => false,
                Some("100755") => true,
                Some(other) => {
                    return Err(ApiError::unprocessable(format!(
                        "tree.mode {other} is not supported by this simulator (only 100644 and 100755)"
                    )));
                }
            };
            if let Some(kind) = item.kind.as_deref()
                && kind != "blob"
            {
                return Err(ApiError::unprocessable(format!(
                    "tree.type {kind} is not supported by this simulator (only blob)"
                )));
            }
            match (item.sha, item.content) {
                (Some(None), _) => {
                    // "sha": null deletes the path: a file, or a directory with everything in it.
                    let prefix = format!("{path}/");
                    tree.retain(|existing, _| existing != &path && !existing.starts_with(&prefix));
                }
                (Some(Some(sha)), None) => {
                    let content = blob_content(repo, &sha).ok_or_else(|| {
                        ApiError::unprocessable(format!("tree.sha {sha} is not a valid blob"))
                    })?;
                    put_blob(
                        &mut tree,
                        path,
                        FileEntry {
                            content,
                            executable,
                        },
                    );
                }
                (None, Some(content)) => {
                    let bytes = content.into_bytes();
                    repo.blobs
                        .insert(FileEntry::new(bytes.clone()).blob_id(), bytes.clone());
                    put_blob(
                        &mut tree,
                        path,
                        FileEntry {
                            content: bytes,
                            executable,
                        },
                    );
                }
                (Some(Some(_)), Some(_)) => {
                    return Err(ApiError::unprocessable(
                        "Must supply either tree.sha or tree.content, not both",
                    ));
                }
                (None, None) => {
                    return Err(ApiError::unprocessable(
                        "Must supply either tree.sha or tree.content",
                    ));
                }
            }
        }
        let sha = model::tree_sha(&tree);
        let body = tree_json(&ctx, repo, &sha, &tree, false);
        repo.trees.insert(sha, Arc::new(tree));
        Ok(reply(StatusCode::CREATED, body))
    })
}

async fn get_tree(call: RepoCall<ShaSegment>, RawQuery(query): RawQuery) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ShaSegment { sha },
        target,
        ..
    } = call;
    // GitHub: any value of `recursive` lists the whole tree.
    let recursive = query_param(&query, "recursive").is_some();
    target.with_repo(|repo, _| {
        let tree = repo.find_tree(&sha).ok_or_else(ApiError::not_found)?;
        let tree_sha = model::tree_sha(&tree);
        Ok(reply(
            StatusCode::OK,
            tree_json(&ctx, repo, &tree_sha, &tree, recursive),
        ))
    })
}

#[derive(Deserialize)]
struct Person {
    name: Option<String>,
    email: Option<String>,
}

#[derive(Deserialize)]
struct CommitBody {
    message: Option<String>,
    tree: Option<String>,
    #[serde(default)]
    parents: Vec<String>,
    author: Option<Person>,
}

async fn create_commit(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let body: CommitBody = parse_body(&body)?;
    let message = body
        .message
        .ok_or_else(|| ApiError::missing_field("Commit", "message"))?;
    let tree_sha = body
        .tree
        .ok_or_else(|| ApiError::missing_field("Commit", "tree"))?;
    target.with_repo(|repo, _| {
        let tree = repo
            .find_tree(&tree_sha)
            .ok_or_else(|| ApiError::unprocessable("Tree SHA does not exist"))?;
        for parent in &body.parents {
            if repo.git.commit(parent).is_none() {
                return Err(ApiError::unprocessable(
                    "Parent SHA does not exist or is not a commit object",
                ));
            }
        }
        let name = body
            .author
            .as_ref()
            .and_then(|author| author.name.clone())
            .unwrap_or_else(|| ctx.sender.clone());
        let email = body
            .author
            .as_ref()
            .and_then(|author| author.email.clone())
            .unwrap_or_else(|| format!("{}@example.com", ctx.sender));
        let sha =
            repo.git
                .create_commit(body.parents.clone(), tree, &message, &name, &email, ctx.now);
        let rendered = render::git_commit(&ctx, repo, &sha).unwrap_or(Value::Null);
        Ok(reply(StatusCode::CREATED, rendered))
    })
}

async fn get_git_commit(call: RepoCall<ShaSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ShaSegment { sha },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        render::git_commit(&ctx, repo, &sha)
            .map(|rendered| reply(StatusCode::OK, rendered))
            .ok_or_else(ApiError::not_found)
    })
}

/// `heads/<branch>` (or `refs/heads/<branch>`) → branch name.
fn branch_of(reference: &str) -> Option<&str> {
    let reference = reference.strip_prefix("refs/").unwrap_or(reference);
    reference
        .strip_prefix("heads/")
        .filter(|branch| !branch.is_empty())
}

async fn get_ref(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let branch = branch_of(&reference).ok_or_else(ApiError::not_found)?;
        let sha = repo
            .git
            .branch_head(branch)
            .ok_or_else(ApiError::not_found)?;
        Ok(reply(
            StatusCode::OK,
            render::git_ref(&ctx, repo, branch, sha),
        ))
    })
}

fn refs_with_prefix(ctx: &Ctx, repo: &GhRepo, prefix: &str) -> Vec<Value> {
    repo.git
        .branches()
        .filter(|(name, _)| format!("heads/{name}").starts_with(prefix))
        .map(|(name, sha)| render::git_ref(ctx, repo, name, sha))
        .collect()
}

async fn matching_refs(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let prefix = reference.strip_prefix("refs/").unwrap_or(&reference);
        Ok(reply(
            StatusCode::OK,
            Value::Array(refs_with_prefix(&ctx, repo, prefix)),
        ))
    })
}

async fn list_refs(call: RepoCall) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    target.with_repo(|repo, _| {
        Ok(reply(
            StatusCode::OK,
            Value::Array(refs_with_prefix(&ctx, repo, "heads/")),
        ))
    })
}

/// Legacy `GET /git/refs/{ref}`: the exact ref, else every ref under the prefix.
async fn get_refs_legacy(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        if let Some(branch) = branch_of(&reference)
            && let Some(sha) = repo.git.branch_head(branch)
        {
            return Ok(reply(
                StatusCode::OK,
                render::git_ref(&ctx, repo, branch, sha),
            ));
        }
        let prefix = reference.strip_prefix("refs/").unwrap_or(&reference);
        let refs = refs_with_prefix(&ctx, repo, prefix);
        if refs.is_empty() {
            return Err(ApiError::not_found());
        }
        Ok(reply(StatusCode::OK, Value::Array(refs)))
    })
}

#[derive(Deserialize)]
struct CreateRefBody {
    #[serde(rename = "ref")]
    reference: Option<String>,
    sha: Option<String>,
}

async fn create_ref(call: RepoCall, body: Bytes) -> ApiResult<Response> {
    let RepoCall { ctx, target, .. } = call;
    let body: CreateRefBody = parse_body(&body)?;
    let reference = body
        .reference
        .ok_or_else(|| ApiError::missing_field("Reference", "ref"))?;
    let sha = body
        .sha
        .ok_or_else(|| ApiError::missing_field("Reference", "sha"))?;
    if !reference.starts_with("refs/") || reference.matches('/').count() < 2 {
        return Err(ApiError::unprocessable(
            "Reference name must start with 'refs' and have at least two slashes.",
        ));
    }
    let Some(branch) = reference.strip_prefix("refs/heads/").map(str::to_string) else {
        return Err(ApiError::unprocessable(
            "Only refs/heads/* references are supported by this simulator",
        ));
    };
    if branch.is_empty() || branch.contains("..") || branch.ends_with('/') || branch.contains(' ') {
        return Err(ApiError::unprocessable("Reference name is invalid"));
    }
    target.with_repo(|repo, env| {
        if repo.git.branch_head(&branch).is_some() {
            return Err(ApiError::unprocessable("Reference already exists"));
        }
        if repo.git.commit(&sha).is_none() {
            return Err(ApiError::unprocessable("Object does not exist"));
        }
        ops::set_branch(repo, env, &ctx, &branch, Some(&sha));
        Ok(reply(
            StatusCode::CREATED,
            render::git_ref(&ctx, repo, &branch, &sha),
        ))
    })
}

#[derive(Deserialize)]
struct UpdateRefBody {
    sha: Option<String>,
    #[serde(default)]
    force: bool,
}

async fn update_ref(call: RepoCall<ReferenceSegment>, body: Bytes) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    let body: UpdateRefBody = parse_body(&body)?;
    let sha = body
        .sha
        .ok_or_else(|| ApiError::missing_field("Reference", "sha"))?;
    target.with_repo(|repo, env| {
        let branch = branch_of(&reference)
            .map(str::to_string)
            .ok_or_else(|| ApiError::unprocessable("Reference does not exist"))?;
        let current = repo
            .git
            .branch_head(&branch)
            .map(str::to_string)
            .ok_or_else(|| ApiError::unprocessable("Reference does not exist"))?;
        if repo.git.commit(&sha).is_none() {
            return Err(ApiError::unprocessable("Object does not exist"));
        }
        if !body.force && !repo.git.is_ancestor(&current, &sha) {
            return Err(ApiError::unprocessable("Update is not a fast forward"));
        }
        ops::set_branch(repo, env, &ctx, &branch, Some(&sha));
        Ok(reply(
            StatusCode::OK,
            render::git_ref(&ctx, repo, &branch, &sha),
        ))
    })
}

async fn delete_ref(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    target.with_repo(|repo, env| {
        let branch = branch_of(&reference)
            .map(str::to_string)
            .ok_or_else(|| ApiError::unprocessable("Reference does not exist"))?;
        if repo.git.branch_head(&branch).is_none() {
            return Err(ApiError::unprocessable("Reference does not exist"));
        }
        if branch == repo.git.default_branch() {
            return Err(ApiError::unprocessable("Cannot delete the default branch"));
        }
        ops::set_branch(repo, env, &ctx, &branch, None);
        Ok(reply(StatusCode::NO_CONTENT, Value::Null))
    })
}

async fn get_commit(call: RepoCall<ReferenceSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ReferenceSegment { reference },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let sha = repo
            .git
            .resolve(&reference)
            .map(|commit| commit.sha.clone())
            .ok_or_else(|| {
                ApiError::unprocessable(format!("No commit found for SHA: {reference}"))
            })?;
        Ok(reply(
            StatusCode::OK,
            render::commit(&ctx, repo, &sha).unwrap_or(Value::Null),
        ))
    })
}

async fn get_contents(
    call: RepoCall<ContentSegment>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: ContentSegment { path },
        target,
        ..
    } = call;
    target.with_repo(|repo, _| {
        let reference =
            query_param(&query, "ref").unwrap_or_else(|| repo.git.default_branch().to_string());
        let commit = repo.git.resolve(&reference).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("No commit found for the ref {reference}"),
            )
        })?;
        let full = repo.full_name();
        let path = path.trim_matches('/').to_string();
        let file_json = |file_path: &str, file: &FileEntry, with_content: bool| {
            let blob = file.blob_id();
            let name = file_path.rsplit('/').next().unwrap_or(file_path);
            let mut rendered = json!({
                "type": "file",
                "name": name,
                "path": file_path,
                "sha": blob,
                "size": file.content.len(),
                "url": format!("{}/repos/{full}/contents/{file_path}?ref={reference}", ctx.base_url),
                "html_url": format!("{}/{full}/blob/{reference}/{file_path}", ctx.base_url),
                "git_url": format!("{}/repos/{full}/git/blobs/{blob}", ctx.base_url),
                "download_url": format!("{}/{full}/raw/{reference}/{file_path}", ctx.base_url),
            });
            if with_content {
                let encoded = base64::engine::general_purpose::STANDARD.encode(&file.content);
                // GitHub wraps the base64 content at 60 characters.
                let wrapped: Vec<String> = encoded
                    .as_bytes()
                    .chunks(60)
                    .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
                    .collect();
                rendered["content"] = json!(format!("{}\n", wrapped.join("\n")));
                rendered["encoding"] = json!("base64");
            }
            rendered
        };
        if let Some(file) = commit.tree.get(&path) {
            return Ok(reply(StatusCode::OK, file_json(&path, file, true)));
        }
        // A directory: list its direct children.
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut entries: Vec<Value> = Vec::new();
        let mut dirs: Vec<String> = Vec::new();
        for (file_path, file) in commit
            .tree
            .iter()
            .filter(|(file_path, _)| file_path.starts_with(&prefix))
        {
            let rest = &file_path[prefix.len()..];
            match rest.split_once('/') {
                None => entries.push(file_json(file_path, file, false)),
                Some((dir, _)) => {
                    let dir_path = format!("{prefix}{dir}");
                    if !dirs.contains(&dir_path) {
                        dirs.push(dir_path);
                    }
                }
            }
        }
        for dir_path in dirs {
            let name = dir_path.rsplit('/').next().unwrap_or(&dir_path).to_string();
            entries.push(json!({
                "type": "dir",
                "name": name,
                "path": dir_path,
                "url": format!("{}/repos/{full}/contents/{dir_path}?ref={reference}", ctx.base_url),
            }));
        }
        if entries.is_empty() {
            return Err(ApiError::not_found());
        }
        Ok(reply(StatusCode::OK, Value::Array(entries)))
    })
}

async fn compare(call: RepoCall<CompareSegment>) -> ApiResult<Response> {
    let RepoCall {
        ctx,
        segments: CompareSegment { basehead },
        target,
        ..
    } = call;
    let (base, head) = basehead.split_once("...").ok_or_else(ApiError::not_found)?;
    let (base, head) = (base.to_string(), head.to_string());
    target.with_repo(|repo, _| {
        let base_sha = repo
            .git
            .resolve(&base)
            .map(|commit| commit.sha.clone())
            .ok_or_else(ApiError::not_found)?;
        let head_sha = repo
            .git
            .resolve(&head)
            .map(|commit| commit.sha.clone())
            .ok_or_else(ApiError::not_found)?;
        let ahead: Vec<String> = repo
            .git
            .commits_between(&base_sha, &head_sha)
            .iter()
            .map(|commit| commit.sha.clone())
            .collect();
        let behind_by = repo.git.commits_between(&head_sha, &base_sha).len();
        let status = if base_sha == head_sha {
            "identical"
        } else if behind_by == 0 {
            "ahead"
        } else if ahead.is_empty() {
            "behind"
        } else {
            "diverged"
        };
        let merge_base = repo
            .git
            .merge_base(&base_sha, &head_sha)
            .unwrap_or_default();
        let files = render::files(&repo.git.diff(&merge_base, &head_sha));
        let full = repo.full_name();
        let commits: Vec<Value> = ahead
            .iter()
            .filter_map(|sha| render::commit(&ctx, repo, sha))
            .map(|mut commit| {
                if let Some(fields) = commit.as_object_mut() {
                    fields.remove("files");
                    fields.remove("stats");
                }
                commit
            })
            .collect();
        Ok(reply(
            StatusCode::OK,
            json!({
                "url": format!("{}/repos/{full}/compare/{basehead}", ctx.base_url),
                "html_url": format!("{}/{full}/compare/{basehead}", ctx.base_url),
                "permalink_url": format!("{}/{full}/compare/{base_sha}...{head_sha}", ctx.base_url),
                "diff_url": format!("{}/{full}/compare/{basehead}.diff", ctx.base_url),
                "patch_url": format!("{}/{full}/compare/{basehead}.patch", ctx.base_url),
                "base_commit": render::commit(&ctx, repo, &base_sha),
                "merge_base_commit": render::commit(&ctx, repo, &merge_base),
                "status": status,
                "ahead_by": ahead.len(),
                "behind_by": behind_by,
                "total_commits": ahead.len(),
                "commits": commits,
                "files": files,
            }),
        ))
    })
}
