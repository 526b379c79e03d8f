//! Commits on the base [`super::base`] reads: the request's actions
//! checked and planned, then GraphQL for a new branch where it can
//! ([`super::new_branch`]), else the Git data API (blobs, a tree, a
//! commit, the ref); and the empty-diff check.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::Method;
use serde_json::{Value, json};

use super::GithubClient;
use super::base::{Base, Files};
use super::http::{Call, Repo};
use super::new_branch::{NewBranch, NewBranchCommit};
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{CommitMode, CommitRequest, FileOp, PushedCommit};

impl GithubClient {
    /// A commit of the actions on the base branch's head, as its own
    /// branch's head ([`GithubClient::commit_base`] reads the base and the
    /// files the actions touch, against which every action is checked
    /// first: [`plan`]).
    ///
    /// A commit that creates its branch goes through GraphQL when it can
    /// ([`GithubClient::commit_on_new_branch`]): one request creates the
    /// branch at the base and appends the commit. Otherwise, and whenever
    /// that request wrote nothing, the Git data API: one tree on top of the
    /// base tree, with UTF-8 content inline (the entry's `content`, which
    /// GitHub writes out as a blob) and a blob (base64) only for other
    /// bytes (a delete is `sha: null`, a move deletes the old path and adds
    /// the new one, a chmod re-adds the existing blob with mode
    /// `100755`/`100644`); a commit whose parent is the base head; then the
    /// branch is created (`POST git/refs`, an existing branch is
    /// [`ForgeErrorKind::Conflict`]) or force-moved (`PATCH
    /// git/refs/heads/:branch`, `force: true`; created when missing). The
    /// commit is empty exactly when the new tree is the base's tree (a
    /// tree's SHA is its content's).
    pub(super) async fn commit_files(
        &self,
        request: &CommitRequest<'_>,
    ) -> ForgeResult<PushedCommit> {
        let repo = Repo::parse(request.project)?;
        let Base {
            sha: base_sha,
            tree: base_tree,
            repository_id,
            mut files,
        } = self.commit_base(&repo, request).await?;
        let planned = plan(request, &mut files)?;
        let mut undone = None;
        if request.mode == CommitMode::CreateBranch
            && let Some(repository_id) = repository_id.as_deref()
            && let Some(commit) = NewBranchCommit::of(request, &planned)
        {
            let base = (base_sha.as_str(), base_tree.as_str());
            match self
                .commit_on_new_branch(&repo, request, repository_id, base, &commit)
                .await?
            {
                NewBranch::Pushed(pushed) => return Ok(pushed),
                NewBranch::NothingWritten => {}
                NewBranch::Undone(what) => undone = Some(what),
            }
        }
        let base = (base_sha.as_str(), base_tree.as_str());
        self.commit_git_data(&repo, request, base, &planned)
            .await
            .map_err(|error| match undone {
                // What the failed push wrote and took back goes with its
                // error (and so into the action's audit record).
                Some(what) => ForgeError {
                    message: format!("{} (before it, {what})", error.message),
                    ..error
                },
                None => error,
            })
    }

    /// The commit of `planned` on the base through the Git data API, and
    /// the branch created or force-moved to it ([`GithubClient::commit_files`]).
    async fn commit_git_data(
        &self,
        repo: &Repo<'_>,
        request: &CommitRequest<'_>,
        (base_sha, base_tree): (&str, &str),
        planned: &[Planned<'_>],
    ) -> ForgeResult<PushedCommit> {
        let repo = *repo;
        // Content written more than once (moved after it was written) is
        // one blob.
        let mut blobs: HashMap<&[u8], String> = HashMap::new();
        let mut entries: Vec<Value> = Vec::with_capacity(planned.len());
        for step in planned {
            entries.push(match step {
                Planned::Delete { path, .. } => delete_entry(path),
                Planned::Write {
                    path,
                    mode,
                    content: Content::Blob(sha),
                    ..
                } => blob_entry(path, mode, sha),
                Planned::Write {
                    path,
                    mode,
                    content: Content::Bytes(bytes),
                    ..
                } => match std::str::from_utf8(bytes) {
                    Ok(text) => {
                        json!({ "path": path, "mode": mode, "type": "blob", "content": text })
                    }
                    Err(_) => {
                        let sha = match blobs.get(bytes) {
                            Some(sha) => sha.clone(),
                            None => {
                                let sha = self.blob(&repo, bytes).await?;
                                blobs.insert(bytes, sha.clone());
                                sha
                            }
                        };
                        blob_entry(path, mode, &sha)
                    }
                },
            });
        }
        let tree: wire::Sha = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["git", "trees"])
                    .body(json!({ "base_tree": base_tree, "tree": entries })),
                "a tree",
            )
            .await?;
        let commit: wire::Sha = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["git", "commits"]).body(json!({
                    "message": request.message,
                    "tree": tree.sha,
                    "parents": [base_sha],
                })),
                "a commit",
            )
            .await?;
        self.keep_tree(request.project, &commit.sha, &tree.sha);
        self.keep_tree(request.project, base_sha, base_tree);
        let empty = tree.sha == base_tree;
        match request.mode {
            CommitMode::CreateBranch => self.create_ref(&repo, request.branch, &commit.sha).await?,
            CommitMode::ForceUpdate => {
                let call = Call::repo(Method::PATCH, &repo, &["git", "refs", "heads"])
                    .branch_path(request.branch)
                    .body(json!({ "sha": commit.sha, "force": true }));
                match self.http.send(&call).await {
                    Ok(_) => {}
                    Err(error)
                        if error.status == Some(422)
                            && error.message.contains("does not exist") =>
                    {
                        self.create_ref(&repo, request.branch, &commit.sha).await?;
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(PushedCommit {
            sha: commit.sha,
            empty: Some(empty),
        })
    }

    /// True when the two commits' trees are identical (`git diff base
    /// head` is empty: merging would change nothing), like the GitLab
    /// client's straight compare. GitHub's compare is a merge-base diff
    /// (`base...head`), which shows the branch's own commits even when
    /// the base already holds the same content, so the trees are compared
    /// instead.
    pub(super) async fn diff_is_empty(
        &self,
        project: &str,
        base: &str,
        head: &str,
    ) -> ForgeResult<bool> {
        let repo = Repo::parse(project)?;
        let read = |reference: &str| {
            let call = Call::repo(Method::GET, &repo, &["commits", reference]);
            let known = self.known_tree(project, reference);
            async move {
                if let Some(tree) = known {
                    return Ok(tree);
                }
                let commit = self.http.json::<wire::Commit>(&call, "a commit").await?;
                self.keep_tree(project, &commit.sha, &commit.commit.tree.sha);
                Ok::<_, crate::ForgeError>(commit.commit.tree.sha)
            }
        };
        let (base, head) = tokio::join!(read(base), read(head));
        Ok(base? == head?)
    }

    pub(super) async fn blob(&self, repo: &Repo<'_>, content: &[u8]) -> ForgeResult<String> {
        let call = Call::repo(Method::POST, repo, &["git", "blobs"])
            .body(json!({ "content": BASE64.encode(content), "encoding": "base64" }));
        let blob: wire::Sha = self.http.json(&call, "a blob").await?;
        Ok(blob.sha)
    }

    pub(super) async fn create_ref(
        &self,
        repo: &Repo<'_>,
        branch: &str,
        sha: &str,
    ) -> ForgeResult<()> {
        let call = Call::repo(Method::POST, repo, &["git", "refs"])
            .body(json!({ "ref": format!("refs/heads/{branch}"), "sha": sha }));
        match self.http.send(&call).await {
            Ok(_) => Ok(()),
            Err(error) if error.status == Some(422) && error.message.contains("already exists") => {
                Err(ForgeError {
                    kind: ForgeErrorKind::Conflict,
                    message: format!("branch {branch}: {}", error.message),
                    ..error
                })
            }
            Err(error) => Err(error),
        }
    }
}

/// One step of a request's commit, checked against the base's files.
pub(super) enum Planned<'a> {
    /// A file written at `path` with `mode`. `replaced` is the mode of the
    /// file this write replaces, if any.
    Write {
        path: &'a str,
        mode: String,
        content: Content<'a>,
        replaced: Option<String>,
    },
    /// The file at `path` removed.
    Delete { path: &'a str },
}

/// A written file's content.
pub(super) enum Content<'a> {
    /// Bytes of the request (written, or moved after this request wrote
    /// them).
    Bytes(&'a [u8]),
    /// An existing blob of the base, by its sha (a move or chmod that
    /// keeps the content).
    Blob(String),
}

/// The steps of `request`'s actions on the base's `files`, which follow
/// them: a delete or move takes only a file that exists (GitHub's `sha:
/// null` on a directory would remove all of it), and a file never
/// replaces a directory or sits under a file (GitHub's tree API would
/// silently do either); GitLab's commits API refuses all of these. Nothing
/// is written here.
pub(super) fn plan<'a>(
    request: &CommitRequest<'a>,
    files: &mut Files,
) -> ForgeResult<Vec<Planned<'a>>> {
    let mut steps = Vec::with_capacity(request.actions.len());
    // What this request wrote, by path: a later move or chmod of such a
    // file takes its bytes (it has no blob sha yet).
    let mut written: HashMap<&'a str, &'a [u8]> = HashMap::new();
    for action in request.actions {
        let path = action.path.as_str();
        let op = action.op.as_str();
        match action.op {
            FileOp::Create | FileOp::Update => {
                let content = action
                    .content
                    .as_deref()
                    .ok_or_else(|| ForgeError::invalid(format!("{op} {path}: content required")))?;
                check_file_path(files, op, path)?;
                let replaced = files.file(path).map(|entry| entry.mode.clone());
                let mode = file_mode(action.execute_filemode, files.file(path));
                files.insert(path, tree_entry(path, &mode, ""));
                written.insert(path, content);
                steps.push(Planned::Write {
                    path,
                    mode,
                    content: Content::Bytes(content),
                    replaced,
                });
            }
            FileOp::Delete => {
                existing_file(files, op, path)?;
                files.remove(path);
                written.remove(path);
                steps.push(Planned::Delete { path });
            }
            FileOp::Move => {
                let previous = action.previous_path.as_deref().ok_or_else(|| {
                    ForgeError::invalid(format!("move {path}: previous_path required"))
                })?;
                let old = existing_file(files, op, previous)?.clone();
                files.remove(previous);
                check_file_path(files, op, path)?;
                let replaced = files.file(path).map(|entry| entry.mode.clone());
                let mode = file_mode(action.execute_filemode, Some(&old));
                let kept = written.remove(previous);
                let content = match (action.content.as_deref(), kept) {
                    (Some(content), _) | (None, Some(content)) => Content::Bytes(content),
                    (None, None) => Content::Blob(old.sha.clone()),
                };
                let sha = match &content {
                    Content::Bytes(bytes) => {
                        written.insert(path, bytes);
                        ""
                    }
                    Content::Blob(sha) => sha.as_str(),
                };
                files.insert(path, tree_entry(path, &mode, sha));
                steps.push(Planned::Delete { path: previous });
                steps.push(Planned::Write {
                    path,
                    mode,
                    content,
                    replaced,
                });
            }
            FileOp::Chmod => {
                let old = existing_file(files, op, path)?.clone();
                let executable = action.execute_filemode.ok_or_else(|| {
                    ForgeError::invalid(format!("chmod {path}: execute_filemode required"))
                })?;
                let mode = file_mode(Some(executable), None);
                let content = match written.get(path) {
                    Some(bytes) => Content::Bytes(bytes),
                    None => Content::Blob(old.sha.clone()),
                };
                files.insert(path, tree_entry(path, &mode, &old.sha));
                steps.push(Planned::Write {
                    path,
                    mode,
                    content,
                    replaced: Some(old.mode),
                });
            }
        }
    }
    Ok(steps)
}

fn blob_entry(path: &str, mode: &str, sha: &str) -> Value {
    json!({ "path": path, "mode": mode, "type": "blob", "sha": sha })
}

/// The git file mode for a new blob: as asked, else the existing file's,
/// else a regular file.
fn file_mode(executable: Option<bool>, existing: Option<&wire::TreeEntry>) -> String {
    match executable {
        Some(true) => "100755".to_owned(),
        Some(false) => "100644".to_owned(),
        None => existing
            .map(|e| e.mode.clone())
            .filter(|m| m == "100755")
            .unwrap_or_else(|| "100644".to_owned()),
    }
}

fn tree_entry(path: &str, mode: &str, sha: &str) -> wire::TreeEntry {
    wire::TreeEntry {
        path: path.to_owned(),
        mode: mode.to_owned(),
        kind: "blob".to_owned(),
        sha: sha.to_owned(),
    }
}

/// The file at `path`, refusing a directory or a missing path (GitLab: "A file with this name
/// doesn't exist").
fn existing_file<'a>(files: &'a Files, op: &str, path: &str) -> ForgeResult<&'a wire::TreeEntry> {
    if files.is_directory(path) {
        return Err(ForgeError::invalid(format!(
            "{op} {path}: {path} is a directory on the base branch; only files can be changed"
        )));
    }
    files.file(path).ok_or_else(|| {
        ForgeError::invalid(format!(
            "{op} {path}: {path} does not exist on the base branch"
        ))
    })
}

/// Refuses to write a file where a directory is, or below a file.
fn check_file_path(files: &Files, op: &str, path: &str) -> ForgeResult<()> {
    if files.is_directory(path) {
        return Err(ForgeError::invalid(format!(
            "{op} {path}: {path} is a directory on the base branch"
        )));
    }
    let mut end = 0;
    while let Some(slash) = path[end..].find('/') {
        end += slash;
        let parent = &path[..end];
        if files.file(parent).is_some() {
            return Err(ForgeError::invalid(format!(
                "{op} {path}: {parent} is a file on the base branch"
            )));
        }
        end += 1;
    }
    Ok(())
}

fn delete_entry(path: &str) -> Value {
    json!({ "path": path, "mode": "100644", "type": "blob", "sha": Value::Null })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn file_modes_follow_the_request_then_the_existing_file() {
        let entry = |mode: &str| wire::TreeEntry {
            path: "x".into(),
            mode: mode.into(),
            kind: "blob".into(),
            sha: SHA.into(),
        };
        assert_eq!(file_mode(None, None), "100644");
        assert_eq!(file_mode(None, Some(&entry("100755"))), "100755");
        assert_eq!(file_mode(None, Some(&entry("120000"))), "100644");
        assert_eq!(file_mode(Some(false), Some(&entry("100755"))), "100644");
        assert_eq!(file_mode(Some(true), None), "100755");
    }
}
