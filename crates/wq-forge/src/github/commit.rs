//! Commits through the Git data API (blobs, a tree, a commit, the ref) on
//! the base [`super::base`] reads, and the empty-diff check.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::Method;
use serde_json::{Value, json};

use super::GithubClient;
use super::base::{Base, Files};
use super::http::{Call, Repo};
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{CommitMode, CommitRequest, FileOp, PushedCommit};

impl GithubClient {
    /// The Git data API on the base branch's head and the files the
    /// actions touch ([`GithubClient::commit_base`]): one tree on top
    /// of the base tree, with UTF-8 content inline (the entry's `content`,
    /// which GitHub writes out as a blob) and a blob (base64) only for
    /// other bytes (a delete is `sha: null`, a move deletes the old path
    /// and adds the new one, a chmod re-adds the existing blob with mode
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
        // The base's files, changed action by action: a delete or move takes only a file
        // that exists (GitHub's `sha: null` on a directory would remove all of it), and a
        // file never replaces a directory or sits under a file (GitHub's tree API would silently
        // do either); GitLab's commits API refuses all of these.
        let Base {
            sha: base_sha,
            tree: base_tree,
            mut files,
        } = self.commit_base(&repo, request).await?;
        let mut entries: Vec<Value> = Vec::new();
        // The content of files this request writes inline, by path: a later
        // move or chmod of one names it again (it has no blob sha yet).
        let mut inline: HashMap<String, String> = HashMap::new();
        for action in request.actions {
            let path = action.path.as_str();
            let op = action.op.as_str();
            match action.op {
                FileOp::Create | FileOp::Update => {
                    let content = action.content.as_deref().ok_or_else(|| {
                        ForgeError::invalid(format!("{op} {path}: content required"))
                    })?;
                    check_file_path(&files, op, path)?;
                    let mode = file_mode(action.execute_filemode, files.file(path));
                    let source = self.source_of(&repo, content).await?;
                    entries.push(source.entry(path, &mode));
                    files.insert(path, source.remember(path, &mode, &mut inline));
                }
                FileOp::Delete => {
                    existing_file(&files, op, path)?;
                    entries.push(delete_entry(path));
                    files.remove(path);
                    inline.remove(path);
                }
                FileOp::Move => {
                    let previous = action.previous_path.as_deref().ok_or_else(|| {
                        ForgeError::invalid(format!("move {path}: previous_path required"))
                    })?;
                    let old = existing_file(&files, op, previous)?.clone();
                    files.remove(previous);
                    check_file_path(&files, op, path)?;
                    let mode = file_mode(action.execute_filemode, Some(&old));
                    let kept = inline.remove(previous);
                    let source = match action.content.as_deref() {
                        Some(content) => self.source_of(&repo, content).await?,
                        None => Source::existing(&old, kept),
                    };
                    entries.push(delete_entry(previous));
                    entries.push(source.entry(path, &mode));
                    files.insert(path, source.remember(path, &mode, &mut inline));
                }
                FileOp::Chmod => {
                    let old = existing_file(&files, op, path)?.clone();
                    let executable = action.execute_filemode.ok_or_else(|| {
                        ForgeError::invalid(format!("chmod {path}: execute_filemode required"))
                    })?;
                    let mode = file_mode(Some(executable), None);
                    let source = Source::existing(&old, inline.remove(path));
                    entries.push(source.entry(path, &mode));
                    files.insert(path, source.remember(path, &mode, &mut inline));
                }
            }
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
        self.keep_tree(request.project, &base_sha, &base_tree);
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

    /// Where the tree takes `content` from: inline when it is UTF-8 (an
    /// entry's `content` is a string, which GitHub writes out as a blob),
    /// else a blob of its own (base64).
    async fn source_of(&self, repo: &Repo<'_>, content: &[u8]) -> ForgeResult<Source> {
        Ok(match std::str::from_utf8(content) {
            Ok(text) => Source::Inline(text.to_owned()),
            Err(_) => Source::Blob(self.blob(repo, content).await?),
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

/// A file's content in a tree request: a blob by its sha, or text GitHub
/// writes out as a blob.
enum Source {
    Blob(String),
    Inline(String),
}

impl Source {
    /// An existing file's content: its text when this request wrote it
    /// inline, else its blob.
    fn existing(entry: &wire::TreeEntry, inline: Option<String>) -> Self {
        match inline {
            Some(text) => Self::Inline(text),
            None => Self::Blob(entry.sha.clone()),
        }
    }

    fn entry(&self, path: &str, mode: &str) -> Value {
        match self {
            Self::Blob(sha) => json!({ "path": path, "mode": mode, "type": "blob", "sha": sha }),
            Self::Inline(text) => {
                json!({ "path": path, "mode": mode, "type": "blob", "content": text })
            }
        }
    }

    /// The file as later actions of the request see it (inline text kept
    /// in `inline`, with no sha in its entry).
    fn remember(
        self,
        path: &str,
        mode: &str,
        inline: &mut HashMap<String, String>,
    ) -> wire::TreeEntry {
        match self {
            Self::Blob(sha) => {
                inline.remove(path);
                tree_entry(path, mode, &sha)
            }
            Self::Inline(text) => {
                inline.insert(path.to_owned(), text);
                tree_entry(path, mode, "")
            }
        }
    }
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
