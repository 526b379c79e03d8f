//! A commit that creates its branch, in one GraphQL request: `createRef`
//! at the base head, then `createCommitOnBranch` of the file changes on
//! it. The Git data API takes three requests for the same (a tree, a
//! commit, the ref).
//!
//! `createCommitOnBranch` takes whole files (base64) to add and paths to
//! delete, and no file modes. So this path is taken only when every file
//! the commit writes is a regular file (`100644`) replacing nothing but a
//! regular file, with its bytes known (not a move or chmod that keeps a
//! base blob), and when the message is a headline with an optional body
//! after a blank line, which is how GitHub builds it back.
//!
//! The mutations of one request run in order, and a failed one does not
//! stop the next. So:
//!
//! - both succeed: the commit is the branch head;
//! - the ref was created but the commit refused: the ref is deleted again
//!   and the Git data API tries, which answers the refusal its own way
//!   (its error then also tells of the branch made and deleted, so the
//!   failed action's audit record names every write);
//! - neither: nothing was written (the branch appeared meanwhile, which
//!   the base read had not seen); the Git data API tries, and `POST
//!   git/refs` answers an existing branch with a conflict;
//! - the ref was not created but the commit landed: the branch appeared
//!   meanwhile at exactly the base head and the commit went onto it. The
//!   branch is set back to the base head, where it was, and the push is a
//!   conflict, as for any branch that exists; the error names the commit
//!   taken back.
//!
//! A request that failed as a whole (transport, HTTP error) may have
//! landed: its error is the caller's, as a failed `POST git/refs` is.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::GithubClient;
use super::commit::{Content, Planned};
use super::http::Repo;
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{CommitRequest, PushedCommit};

/// What the one-request commit of a new branch came to.
pub(super) enum NewBranch {
    /// The branch and its commit.
    Pushed(PushedCommit),
    /// Nothing was written: the Git data API is to try.
    NothingWritten,
    /// The branch was created, its commit refused, and the branch deleted
    /// again (what happened, for the error of the Git data API's try, if
    /// that fails too).
    Undone(String),
}

/// The request: the branch created at the base head, the commit appended.
const CREATE_AND_COMMIT: &str = "mutation($repository: ID!, $ref: String!, $base: GitObjectID!, \
$commit: CreateCommitOnBranchInput!) { \
created: createRef(input: {repositoryId: $repository, name: $ref, oid: $base}) { ref { id } } \
commit: createCommitOnBranch(input: $commit) { commit { oid tree { oid } } ref { id } } }";

const DELETE_REF: &str =
    "mutation($ref: ID!) { deleteRef(input: {refId: $ref}) { clientMutationId } }";

const RESET_REF: &str = "mutation($ref: ID!, $oid: GitObjectID!) { \
updateRef(input: {refId: $ref, oid: $oid, force: true}) { ref { id } } }";

/// A regular file's mode, the only one `createCommitOnBranch` writes.
const REGULAR: &str = "100644";

/// What `createCommitOnBranch` is given: the request's net changes.
pub(super) struct NewBranchCommit<'a> {
    /// Final content by path (each path once).
    additions: Vec<(&'a str, &'a [u8])>,
    /// Paths of the base removed and not written again.
    deletions: Vec<&'a str>,
    headline: &'a str,
    body: Option<&'a str>,
}

impl<'a> NewBranchCommit<'a> {
    /// The commit `planned` makes, when GraphQL can make exactly it (see
    /// the module's documentation).
    pub fn of(request: &CommitRequest<'a>, planned: &[Planned<'a>]) -> Option<Self> {
        let (headline, body) = headline_and_body(request.message)?;
        // Each path's final state, in the order first touched, and whether
        // the base held a file there.
        let mut paths: Vec<(&'a str, bool, Option<&'a [u8]>)> = Vec::new();
        for step in planned {
            let (path, in_base, content) = match step {
                Planned::Delete { path } => (*path, true, None),
                Planned::Write {
                    path,
                    mode,
                    content,
                    replaced,
                } => {
                    if mode != REGULAR || replaced.as_deref().is_some_and(|m| m != REGULAR) {
                        return None;
                    }
                    let Content::Bytes(bytes) = content else {
                        return None;
                    };
                    (*path, replaced.is_some(), Some(*bytes))
                }
            };
            match paths.iter_mut().find(|(p, ..)| *p == path) {
                Some(entry) => entry.2 = content,
                None => paths.push((path, in_base, content)),
            }
        }
        let mut additions = Vec::new();
        let mut deletions = Vec::new();
        for (path, in_base, content) in paths {
            match content {
                Some(bytes) => additions.push((path, bytes)),
                None if in_base => deletions.push(path),
                None => {}
            }
        }
        Some(Self {
            additions,
            deletions,
            headline,
            body,
        })
    }

    fn file_changes(&self) -> Value {
        json!({
            "additions": self.additions.iter().map(|(path, bytes)| {
                json!({ "path": path, "contents": BASE64.encode(bytes) })
            }).collect::<Vec<_>>(),
            "deletions": self.deletions.iter().map(|path| json!({ "path": path })).collect::<Vec<_>>(),
        })
    }
}

/// `message` as `createCommitOnBranch`'s headline and body, which GitHub
/// joins with a blank line: a message it would not give back byte for
/// byte (empty, or a second line that is not blank) is `None`.
fn headline_and_body(message: &str) -> Option<(&str, Option<&str>)> {
    match message.split_once('\n') {
        None if !message.is_empty() => Some((message, None)),
        None => None,
        Some((headline, rest)) => {
            let body = rest.strip_prefix('\n')?;
            (!headline.is_empty() && !body.is_empty() && !body.starts_with('\n'))
                .then_some((headline, Some(body)))
        }
    }
}

impl GithubClient {
    /// The commit of a new branch in one GraphQL request (see the module's
    /// documentation).
    pub(super) async fn commit_on_new_branch(
        &self,
        repo: &Repo<'_>,
        request: &CommitRequest<'_>,
        repository_id: &str,
        (base_sha, base_tree): (&str, &str),
        commit: &NewBranchCommit<'_>,
    ) -> ForgeResult<NewBranch> {
        let mut message = json!({ "headline": commit.headline });
        if let Some(body) = commit.body {
            message["body"] = json!(body);
        }
        let variables = json!({
            "repository": repository_id,
            "ref": format!("refs/heads/{}", request.branch),
            "base": base_sha,
            "commit": {
                "branch": {
                    "repositoryNameWithOwner": format!("{}/{}", repo.owner, repo.name),
                    "branchName": request.branch,
                },
                "expectedHeadOid": base_sha,
                "fileChanges": commit.file_changes(),
                "message": message,
            },
        });
        let answer = self.http.graphql(CREATE_AND_COMMIT, variables).await?;
        let data = &answer["data"];
        let created = data["created"]["ref"]["id"].as_str();
        let landed = &data["commit"]["commit"];
        match (created, landed["oid"].as_str()) {
            (Some(_), Some(sha)) => {
                // Without the commit's tree the push cannot tell whether it
                // changes anything: the caller compares (`empty: None`).
                let tree = landed["tree"]["oid"].as_str();
                if let Some(tree) = tree {
                    self.keep_tree(request.project, sha, tree);
                }
                self.keep_tree(request.project, base_sha, base_tree);
                Ok(NewBranch::Pushed(PushedCommit {
                    sha: sha.to_owned(),
                    empty: tree.map(|tree| tree == base_tree),
                }))
            }
            (Some(ref_id), None) => {
                let errors = wire::error_messages(&answer);
                tracing::info!(
                    owner = repo.owner, repo = repo.name, branch = request.branch,
                    errors = %errors,
                    "GitHub created the branch but refused the commit; deleting the branch and trying the Git data API"
                );
                self.undo(DELETE_REF, json!({ "ref": ref_id }), request)
                    .await?;
                Ok(NewBranch::Undone(format!(
                    "a GraphQL request created branch {} at {base_sha} and GitHub refused its commit: {errors}; the branch was deleted again",
                    request.branch
                )))
            }
            (None, None) => {
                tracing::info!(
                    owner = repo.owner, repo = repo.name, branch = request.branch,
                    errors = %wire::error_messages(&answer),
                    "GitHub wrote nothing; trying the Git data API"
                );
                Ok(NewBranch::NothingWritten)
            }
            (None, Some(sha)) => {
                let ref_id = data["commit"]["ref"]["id"].as_str().unwrap_or_default();
                tracing::warn!(
                    owner = repo.owner,
                    repo = repo.name,
                    branch = request.branch,
                    commit = sha,
                    "the branch appeared at the base head before the commit landed on it; setting it back"
                );
                self.undo(
                    RESET_REF,
                    json!({ "ref": ref_id, "oid": base_sha }),
                    request,
                )
                .await?;
                Err(ForgeError::new(
                    ForgeErrorKind::Conflict,
                    Some(422),
                    format!(
                        "branch {}: Reference already exists in {} (it appeared at the base head {base_sha} while a GraphQL request committed; the commit {sha} that landed on it was taken back, the branch set back to {base_sha})",
                        request.branch, request.project
                    ),
                ))
            }
        }
    }

    /// Runs a mutation that undoes part of the request. When it fails, the
    /// branch may hold what this client wrote: the error is
    /// [`ForgeErrorKind::Unavailable`], so the caller keeps the branch as
    /// possibly its own.
    async fn undo(
        &self,
        mutation: &str,
        variables: Value,
        request: &CommitRequest<'_>,
    ) -> ForgeResult<()> {
        let answer = match self.http.graphql(mutation, variables).await {
            Ok(answer) => answer,
            Err(error) => {
                return Err(ForgeError {
                    kind: ForgeErrorKind::Unavailable,
                    message: format!(
                        "branch {}: undoing a partial GraphQL commit failed: {}",
                        request.branch, error.message
                    ),
                    ..error
                });
            }
        };
        let errors = wire::error_messages(&answer);
        if errors.is_empty() {
            return Ok(());
        }
        Err(ForgeError::new(
            ForgeErrorKind::Unavailable,
            Some(200),
            format!(
                "branch {}: undoing a partial GraphQL commit failed: {errors}",
                request.branch
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_messages_github_gives_back_byte_for_byte_are_split() {
        assert_eq!(headline_and_body("Add x"), Some(("Add x", None)));
        assert_eq!(
            headline_and_body("Add x\n\nWhy.\nMore.\n"),
            Some(("Add x", Some("Why.\nMore.\n")))
        );
        assert_eq!(headline_and_body(""), None);
        assert_eq!(headline_and_body("Add x\nno blank line"), None);
        assert_eq!(headline_and_body("Add x\n"), None);
        assert_eq!(headline_and_body("Add x\n\n"), None);
        assert_eq!(headline_and_body("Add x\n\n\nthree"), None);
        assert_eq!(headline_and_body("\n\nno headline"), None);
    }

    fn write<'a>(
        path: &'a str,
        mode: &str,
        bytes: &'a [u8],
        replaced: Option<&str>,
    ) -> Planned<'a> {
        Planned::Write {
            path,
            mode: mode.into(),
            content: Content::Bytes(bytes),
            replaced: replaced.map(Into::into),
        }
    }

    fn request() -> CommitRequest<'static> {
        CommitRequest {
            project: "octo/app",
            branch: "wq/x",
            base_branch: "main",
            mode: crate::model::CommitMode::CreateBranch,
            message: "m",
            actions: &[],
        }
    }

    #[test]
    fn net_changes_name_each_path_once() {
        let planned = [
            write("a.txt", REGULAR, b"1", None),
            Planned::Delete { path: "a.txt" },
            Planned::Delete { path: "old.txt" },
            write("new.txt", REGULAR, b"2", None),
            write("kept.txt", REGULAR, b"3", Some(REGULAR)),
            Planned::Delete { path: "gone.txt" },
            write("gone.txt", REGULAR, b"4", None),
        ];
        let commit = NewBranchCommit::of(&request(), &planned).expect("GraphQL can");
        assert_eq!(
            commit.additions,
            [
                ("new.txt", &b"2"[..]),
                ("kept.txt", &b"3"[..]),
                ("gone.txt", &b"4"[..])
            ]
        );
        // `a.txt` was new and is gone again: nothing to delete.
        assert_eq!(commit.deletions, ["old.txt"]);
    }

    #[test]
    fn modes_and_kept_blobs_go_through_the_git_data_api() {
        for planned in [
            vec![write("run.sh", "100755", b"#!", None)],
            vec![write("run.sh", REGULAR, b"#!", Some("100755"))],
            vec![write("link", REGULAR, b"target", Some("120000"))],
            vec![Planned::Write {
                path: "moved.txt",
                mode: REGULAR.into(),
                content: Content::Blob("abc".into()),
                replaced: None,
            }],
        ] {
            assert!(NewBranchCommit::of(&request(), &planned).is_none());
        }
        let mut unsplittable = request();
        unsplittable.message = "a\nb";
        assert!(NewBranchCommit::of(&unsplittable, &[write("x", REGULAR, b"x", None)]).is_none());
    }
}
