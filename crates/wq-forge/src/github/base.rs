//! The base a commit is built on: the base branch's head and tree, and
//! the files of that tree the request's actions touch.
//!
//! One GraphQL query reads the head, its tree and each path the actions
//! name (with every parent directory of it) through `Commit.file(path:)`,
//! [`LOOKUPS_PER_QUERY`] paths a query. That is one request where the REST
//! reads took two (`GET branches/:base`, then the whole tree listed with
//! `GET git/trees/:tree?recursive=1`), and it works on a tree of any size:
//! GitHub truncates a recursive listing at 100,000 entries or 7 MB.
//!
//! A commit that creates its branch is refused before anything is written
//! when the branch exists: the same query reads the branch
//! ([`CommitMode::CreateBranch`]; `POST git/refs` would refuse it only
//! after the tree and the commit were written). It also reads the
//! repository's node id, which GraphQL's `createRef` takes.
//!
//! The whole tree is still listed, over REST, where a path lookup cannot
//! tell the answer: when a request removes files below a directory and
//! also names that directory (the directory may be emptied, which only the
//! full listing shows), and when the GraphQL read fails.

use std::collections::{BTreeSet, HashMap};

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::GithubClient;
use super::http::{Call, Repo};
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{CommitMode, CommitRequest, FileOp};

/// The most paths one GraphQL query looks up (each an aliased
/// `file(path:)` field).
pub const LOOKUPS_PER_QUERY: usize = 100;

/// The base branch's head commit and its tree.
pub(super) struct Base {
    pub sha: String,
    pub tree: String,
    /// The repository's node id, when GraphQL read the base (a commit on a
    /// new branch can then go through GraphQL).
    pub repository_id: Option<String>,
    pub files: Files,
}

/// The base tree's files as the actions see them, changed action by action.
pub(super) enum Files {
    /// The whole tree, listed: files only, by path.
    Listed(HashMap<String, wire::TreeEntry>),
    /// Only the paths looked up (files and directories; `None`: nothing
    /// there), and what the request's actions did to paths so far.
    LookedUp {
        base: HashMap<String, Option<wire::TreeEntry>>,
        changed: HashMap<String, Option<wire::TreeEntry>>,
    },
}

impl Files {
    /// The file at `path` (not a directory), if any.
    pub fn file(&self, path: &str) -> Option<&wire::TreeEntry> {
        match self {
            Self::Listed(files) => files.get(path),
            Self::LookedUp { base, changed } => match changed.get(path) {
                Some(entry) => entry.as_ref(),
                None => base
                    .get(path)
                    .and_then(Option::as_ref)
                    .filter(|entry| entry.kind != "tree"),
            },
        }
    }

    /// Whether `path` is a directory (a directory exists while it holds a
    /// file).
    pub fn is_directory(&self, path: &str) -> bool {
        let prefix = format!("{path}/");
        match self {
            Self::Listed(files) => files.keys().any(|p| p.starts_with(&prefix)),
            Self::LookedUp { base, changed } => {
                // A base directory the request removes nothing below stays
                // one (see `needs_listing`); else only what the request
                // wrote below it makes one.
                base.get(path)
                    .and_then(Option::as_ref)
                    .is_some_and(|entry| entry.kind == "tree")
                    || changed
                        .iter()
                        .any(|(p, entry)| entry.is_some() && p.starts_with(&prefix))
            }
        }
    }

    pub fn insert(&mut self, path: &str, entry: wire::TreeEntry) {
        match self {
            Self::Listed(files) => {
                files.insert(path.to_owned(), entry);
            }
            Self::LookedUp { changed, .. } => {
                changed.insert(path.to_owned(), Some(entry));
            }
        }
    }

    pub fn remove(&mut self, path: &str) {
        match self {
            Self::Listed(files) => {
                files.remove(path);
            }
            Self::LookedUp { changed, .. } => {
                changed.insert(path.to_owned(), None);
            }
        }
    }
}

/// The paths a request's actions name: each path and previous path.
fn named<'a>(request: &CommitRequest<'a>) -> impl Iterator<Item = &'a str> {
    request.actions.iter().flat_map(|action| {
        std::iter::once(action.path.as_str()).chain(action.previous_path.as_deref())
    })
}

/// What a request's actions look up: each path they name, and every
/// parent directory of it.
fn lookups<'a>(request: &CommitRequest<'a>) -> BTreeSet<&'a str> {
    let mut paths = BTreeSet::new();
    for path in named(request) {
        paths.insert(path);
        paths.extend(path.match_indices('/').map(|(end, _)| &path[..end]));
    }
    paths
}

/// Whether a path lookup cannot tell what the actions see: a path an
/// action names is a directory on the base, and the request removes a file
/// below it (deletes or moves it away), which may empty it.
fn needs_listing(
    request: &CommitRequest<'_>,
    base: &HashMap<String, Option<wire::TreeEntry>>,
) -> bool {
    let removed: Vec<&str> = request
        .actions
        .iter()
        .filter_map(|action| match action.op {
            FileOp::Delete => Some(action.path.as_str()),
            FileOp::Move => action.previous_path.as_deref(),
            _ => None,
        })
        .collect();
    named(request)
        .filter(|path| {
            base.get(*path)
                .and_then(Option::as_ref)
                .is_some_and(|entry| entry.kind == "tree")
        })
        .any(|directory| {
            let prefix = format!("{directory}/");
            removed.iter().any(|path| path.starts_with(&prefix))
        })
}

/// The selection of one looked-up path.
const ENTRY_FRAGMENT: &str = "fragment entry on TreeEntry { type mode oid }";

/// The query of one batch of lookups: the first batch reads the base
/// branch's head and tree with them (and the branch to be created, when
/// `creates`), later ones read the same commit by its oid.
fn lookup_query(first: bool, creates: bool, count: usize, offset: usize) -> String {
    let mut declarations = String::from("$owner: String!, $name: String!, ");
    declarations.push_str(if first {
        "$ref: String!"
    } else {
        "$oid: GitObjectID!"
    });
    let mut branch = String::new();
    if first && creates {
        declarations.push_str(", $branch: String!");
        branch.push_str(" branch: ref(qualifiedName: $branch) { target { oid } }");
    }
    let mut fields = String::new();
    for index in offset..offset + count {
        declarations.push_str(&format!(", $p{index}: String!"));
        fields.push_str(&format!(" f{index}: file(path: $p{index}) {{ ...entry }}"));
    }
    let commit = if first {
        format!(
            "id ref(qualifiedName: $ref) {{ target {{ oid ... on Commit {{ tree {{ oid }}{fields} }} }} }}{branch}"
        )
    } else {
        format!("object(oid: $oid) {{ ... on Commit {{ oid{fields} }} }}")
    };
    format!(
        "query({declarations}) {{ repository(owner: $owner, name: $name) {{ {commit} }} }} {ENTRY_FRAGMENT}"
    )
}

/// `Commit.file` as the query selects it.
#[derive(Debug, Deserialize)]
struct LookedUpEntry {
    #[serde(rename = "type")]
    kind: String,
    /// The Unix mode (`33188` = `0o100644`).
    mode: u32,
    oid: String,
}

impl LookedUpEntry {
    fn into_tree_entry(self, path: &str) -> wire::TreeEntry {
        wire::TreeEntry {
            path: path.to_owned(),
            // As the REST tree spells it: `100644`, `100755`, `040000`.
            mode: format!("{:06o}", self.mode),
            kind: self.kind,
            sha: self.oid,
        }
    }
}

/// Why a lookup answer is not used (the REST reads are, instead).
fn unusable(answer: &Value) -> Option<String> {
    let errors = wire::error_messages(answer);
    (!errors.is_empty()).then_some(errors)
}

impl GithubClient {
    /// The base of `request`: looked up path by path, or listed whole
    /// where that cannot tell (see the module's documentation).
    pub(super) async fn commit_base(
        &self,
        repo: &Repo<'_>,
        request: &CommitRequest<'_>,
    ) -> ForgeResult<Base> {
        match self.look_up_base(repo, request).await {
            Ok(Lookup::Found(base)) => return Ok(base),
            Ok(Lookup::Missing) => return Err(missing_base(request)),
            Ok(Lookup::BranchExists) => return Err(branch_exists(request)),
            Ok(Lookup::NeedsListing) => {}
            Err(why) => {
                tracing::warn!(
                    owner = repo.owner, repo = repo.name, branch = request.base_branch, %why,
                    "GraphQL lookup of the base tree failed; listing the tree"
                );
            }
        }
        self.list_base(repo, request).await
    }

    /// The base from the REST reads: the branch to be created (which must
    /// not exist), the base branch, then its whole tree.
    async fn list_base(&self, repo: &Repo<'_>, request: &CommitRequest<'_>) -> ForgeResult<Base> {
        if request.mode == CommitMode::CreateBranch
            && self.branch(repo, request.branch).await?.is_some()
        {
            return Err(branch_exists(request));
        }
        let head = self
            .branch(repo, request.base_branch)
            .await?
            .ok_or_else(|| missing_base(request))?;
        let (files, truncated) = self.tree(repo, &head.commit.tree.sha).await?;
        if truncated {
            return Err(ForgeError::new(
                ForgeErrorKind::Rejected,
                None,
                format!(
                    "the tree of {} at {} is too large for GitHub to list (truncated); the \
                     files to change cannot be checked",
                    request.project, request.base_branch
                ),
            ));
        }
        Ok(Base {
            sha: head.sha,
            tree: head.commit.tree.sha,
            repository_id: None,
            files: Files::Listed(files),
        })
    }

    /// The base from GraphQL lookups, [`LOOKUPS_PER_QUERY`] paths a query.
    /// An error is why the lookup's answer is not used.
    async fn look_up_base(
        &self,
        repo: &Repo<'_>,
        request: &CommitRequest<'_>,
    ) -> Result<Lookup, String> {
        let paths: Vec<&str> = lookups(request).into_iter().collect();
        let mut base: HashMap<String, Option<wire::TreeEntry>> = HashMap::new();
        let mut head: Option<(String, String)> = None;
        let mut repository_id = None;
        let mut offset = 0;
        loop {
            let count = paths.len().saturating_sub(offset).min(LOOKUPS_PER_QUERY);
            let mut variables = Map::new();
            variables.insert("owner".into(), json!(repo.owner));
            variables.insert("name".into(), json!(repo.name));
            let creates = request.mode == CommitMode::CreateBranch;
            match &head {
                None => {
                    variables.insert(
                        "ref".into(),
                        json!(format!("refs/heads/{}", request.base_branch)),
                    );
                    if creates {
                        variables.insert(
                            "branch".into(),
                            json!(format!("refs/heads/{}", request.branch)),
                        );
                    }
                }
                Some((sha, _)) => {
                    variables.insert("oid".into(), json!(sha));
                }
            }
            for (index, path) in paths.iter().enumerate().skip(offset).take(count) {
                variables.insert(format!("p{index}"), json!(path));
            }
            let query = lookup_query(head.is_none(), creates, count, offset);
            let answer = self
                .http
                .graphql(&query, Value::Object(variables))
                .await
                .map_err(|error| error.to_string())?;
            if let Some(errors) = unusable(&answer) {
                return Err(errors);
            }
            let repository = &answer["data"]["repository"];
            let commit = match &head {
                None => {
                    if creates && !repository["branch"].is_null() {
                        return Ok(Lookup::BranchExists);
                    }
                    let reference = &repository["ref"];
                    if reference.is_null() {
                        return Ok(Lookup::Missing);
                    }
                    let target = &reference["target"];
                    let (Some(sha), Some(tree)) =
                        (target["oid"].as_str(), target["tree"]["oid"].as_str())
                    else {
                        return Err(format!("no commit and tree in {target}"));
                    };
                    head = Some((sha.to_owned(), tree.to_owned()));
                    repository_id = repository["id"].as_str().map(str::to_owned);
                    target
                }
                Some(_) => &repository["object"],
            };
            for (index, path) in paths.iter().enumerate().skip(offset).take(count) {
                let entry = match &commit[format!("f{index}")] {
                    Value::Null => None,
                    found => Some(
                        LookedUpEntry::deserialize(found)
                            .map_err(|error| format!("{path}: {error}"))?
                            .into_tree_entry(path),
                    ),
                };
                base.insert((*path).to_owned(), entry);
            }
            offset += count;
            if offset >= paths.len() {
                break;
            }
        }
        let (sha, tree) = head.expect("the first query reads the head");
        if needs_listing(request, &base) {
            return Ok(Lookup::NeedsListing);
        }
        Ok(Lookup::Found(Base {
            sha,
            tree,
            repository_id,
            files: Files::LookedUp {
                base,
                changed: HashMap::new(),
            },
        }))
    }
}

/// What the GraphQL lookup found.
enum Lookup {
    Found(Base),
    /// The base branch does not exist.
    Missing,
    /// The branch the commit would create exists.
    BranchExists,
    /// A path lookup cannot tell what the actions see.
    NeedsListing,
}

fn missing_base(request: &CommitRequest<'_>) -> ForgeError {
    ForgeError::new(
        ForgeErrorKind::NotFound,
        None,
        format!(
            "base branch {} does not exist in {}",
            request.base_branch, request.project
        ),
    )
}

/// A [`CommitMode::CreateBranch`] commit onto a branch that exists, as
/// `POST git/refs` answers it.
fn branch_exists(request: &CommitRequest<'_>) -> ForgeError {
    ForgeError::new(
        ForgeErrorKind::Conflict,
        Some(422),
        format!(
            "branch {}: Reference already exists in {}",
            request.branch, request.project
        ),
    )
}

/// The REST reads of the base, kept for [`GithubClient::list_base`].
impl GithubClient {
    /// The entries of a tree (recursive), by path: files only.
    pub(super) async fn tree(
        &self,
        repo: &Repo<'_>,
        tree_sha: &str,
    ) -> ForgeResult<(HashMap<String, wire::TreeEntry>, bool)> {
        let call =
            Call::repo(Method::GET, repo, &["git", "trees", tree_sha]).query("recursive", "1");
        let tree: wire::Tree = self.http.json(&call, "a tree").await?;
        let entries = tree
            .tree
            .into_iter()
            .filter(|e| e.kind != "tree")
            .map(|e| (e.path.clone(), e))
            .collect();
        Ok((entries, tree.truncated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CommitMode, FileAction};

    fn action(op: FileOp, path: &str, previous: Option<&str>) -> FileAction {
        FileAction {
            op,
            path: path.into(),
            previous_path: previous.map(Into::into),
            content: None,
            execute_filemode: None,
        }
    }

    fn request(actions: &[FileAction]) -> CommitRequest<'_> {
        CommitRequest {
            project: "octo/app",
            branch: "wq/x",
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message: "m",
            actions,
        }
    }

    fn entry(kind: &str) -> Option<wire::TreeEntry> {
        Some(wire::TreeEntry {
            path: String::new(),
            mode: if kind == "tree" { "040000" } else { "100644" }.into(),
            kind: kind.into(),
            sha: String::new(),
        })
    }

    #[test]
    fn every_named_path_and_its_directories_are_looked_up() {
        let actions = [
            action(FileOp::Create, "a/b/c.txt", None),
            action(FileOp::Move, "d.txt", Some("a/e.txt")),
        ];
        let paths: Vec<&str> = lookups(&request(&actions)).into_iter().collect();
        assert_eq!(paths, ["a", "a/b", "a/b/c.txt", "a/e.txt", "d.txt"]);
    }

    #[test]
    fn a_named_directory_with_removals_below_it_is_listed() {
        let base: HashMap<String, Option<wire::TreeEntry>> = [
            ("src".to_owned(), entry("tree")),
            ("src/lib.rs".to_owned(), entry("blob")),
            ("notes.txt".to_owned(), entry("blob")),
        ]
        .into();
        let emptied = [
            action(FileOp::Delete, "src/lib.rs", None),
            action(FileOp::Create, "src", None),
        ];
        assert!(needs_listing(&request(&emptied), &base));
        let moved_away = [
            action(FileOp::Move, "lib.rs", Some("src/lib.rs")),
            action(FileOp::Chmod, "src", None),
        ];
        assert!(needs_listing(&request(&moved_away), &base));
        // Nothing removed below a named directory, or no directory named.
        let kept = [action(FileOp::Create, "src", None)];
        assert!(!needs_listing(&request(&kept), &base));
        let file_below = [
            action(FileOp::Delete, "notes.txt", None),
            action(FileOp::Create, "notes.txt/today.md", None),
        ];
        assert!(!needs_listing(&request(&file_below), &base));
    }

    #[test]
    fn looked_up_files_follow_the_actions() {
        let mut files = Files::LookedUp {
            base: [
                ("src".to_owned(), entry("tree")),
                ("notes.txt".to_owned(), entry("blob")),
                ("new".to_owned(), None),
            ]
            .into(),
            changed: HashMap::new(),
        };
        assert!(files.is_directory("src"));
        assert!(files.file("src").is_none(), "a directory is not a file");
        assert!(files.file("notes.txt").is_some());
        assert!(!files.is_directory("new"));
        files.insert("new/a.txt", entry("blob").expect("entry"));
        assert!(files.is_directory("new"));
        files.remove("notes.txt");
        assert!(files.file("notes.txt").is_none());
        files.remove("new/a.txt");
        assert!(!files.is_directory("new"));
    }

    #[test]
    fn lookup_queries_declare_what_they_use() {
        let first = lookup_query(true, false, 2, 0);
        assert!(
            first.contains("$ref: String!, $p0: String!, $p1: String!"),
            "{first}"
        );
        assert!(
            first.contains("f1: file(path: $p1) { ...entry }"),
            "{first}"
        );
        assert!(first.ends_with(ENTRY_FRAGMENT), "{first}");
        let later = lookup_query(false, true, 1, 100);
        assert!(
            later.contains("$oid: GitObjectID!, $p100: String!"),
            "{later}"
        );
        assert!(later.contains("object(oid: $oid)"), "{later}");
        assert!(
            !later.contains("$ref") && !later.contains("$branch"),
            "{later}"
        );
        let creating = lookup_query(true, true, 1, 0);
        assert!(
            creating.contains("$ref: String!, $branch: String!, $p0: String!"),
            "{creating}"
        );
        assert!(
            creating.contains("branch: ref(qualifiedName: $branch) { target { oid } }"),
            "{creating}"
        );
    }

    #[test]
    fn graphql_modes_read_as_the_rest_tree_spells_them() {
        let entry = |mode: u32, kind: &str| {
            LookedUpEntry {
                kind: kind.into(),
                mode,
                oid: "x".into(),
            }
            .into_tree_entry("p")
            .mode
        };
        assert_eq!(entry(0o100644, "blob"), "100644");
        assert_eq!(entry(0o100755, "blob"), "100755");
        assert_eq!(entry(0o120000, "blob"), "120000");
        assert_eq!(entry(0o40000, "tree"), "040000");
    }
}
