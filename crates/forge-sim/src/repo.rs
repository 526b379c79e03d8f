//! In-memory git-like repository model shared by both forges: commits, trees, branches, diffs, merges.
//!
//! There is no git binary and no object database: a commit holds its whole tree (behind an `Arc`,
//! so unchanged trees are shared), and three-way merges are file-level (a conflict is a path both
//! sides changed differently since the merge base).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// One file in a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub content: Vec<u8>,
    pub executable: bool,
}

impl FileEntry {
    /// A non-executable file with the given content.
    pub fn new(content: impl Into<Vec<u8>>) -> FileEntry {
        FileEntry {
            content: content.into(),
            executable: false,
        }
    }

    /// Git file mode as GitLab prints it (`100644` / `100755`).
    pub fn mode(&self) -> &'static str {
        if self.executable { "100755" } else { "100644" }
    }

    /// A git-like blob id (40 lowercase hex) of the content.
    pub fn blob_id(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"blob ");
        hasher.update(self.content.len().to_string().as_bytes());
        hasher.update([0u8]);
        hasher.update(&self.content);
        hex::encode(hasher.finalize())[..40].to_string()
    }
}

/// A snapshot: path → file.
pub type Tree = BTreeMap<String, FileEntry>;

/// Whether git refuses `path` in a tree: empty, absolute, or with an
/// empty, `.`, `..` or `.git` component.
pub fn malformed_path(path: &str) -> bool {
    path.is_empty()
        || path.split('/').any(|part| {
            part.is_empty() || part == "." || part == ".." || part.eq_ignore_ascii_case(".git")
        })
}

/// One commit.
#[derive(Debug, Clone)]
pub struct Commit {
    /// 40 lowercase hex characters.
    pub sha: String,
    pub parents: Vec<String>,
    pub tree: Arc<Tree>,
    pub message: String,
    pub author_name: String,
    pub author_email: String,
    pub created_at: OffsetDateTime,
}

impl Commit {
    /// The first line of the message.
    pub fn title(&self) -> &str {
        self.message.lines().next().unwrap_or("")
    }

    /// The first 8 characters of the sha (GitLab's `short_id`).
    pub fn short_id(&self) -> &str {
        &self.sha[..8.min(self.sha.len())]
    }
}

/// How a source is brought into a target branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MergeMethod {
    /// A merge commit with two parents.
    #[default]
    Merge,
    /// One new commit on the target with the combined changes.
    Squash,
    /// Fast-forward when possible, otherwise replay the changes as one commit on the target.
    Rebase,
}

/// A failed three-way merge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("merge conflict in {}", paths.join(", "))]
pub struct MergeConflict {
    /// Paths both sides changed differently.
    pub paths: Vec<String>,
}

/// One changed file between two commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    pub old_path: String,
    pub new_path: String,
    pub new_file: bool,
    pub renamed_file: bool,
    pub deleted_file: bool,
    /// `0` when the file did not exist.
    pub a_mode: String,
    /// `0` when the file no longer exists.
    pub b_mode: String,
    /// A unified-diff-like hunk text (`@@ -1,n +1,m @@` then `-`/`+` lines).
    pub diff: String,
}

/// A repository: commits by sha and branches (name → head sha).
#[derive(Debug, Clone)]
pub struct Repo {
    default_branch: String,
    branches: BTreeMap<String, String>,
    commits: HashMap<String, Commit>,
}

impl Repo {
    /// A repository whose default branch holds one initial commit with a README.md.
    pub fn new(default_branch: &str, now: OffsetDateTime) -> Repo {
        let mut repo = Repo {
            default_branch: default_branch.to_string(),
            branches: BTreeMap::new(),
            commits: HashMap::new(),
        };
        let mut tree = Tree::new();
        tree.insert("README.md".to_string(), FileEntry::new("# Project\n"));
        let sha = repo.create_commit(
            Vec::new(),
            Arc::new(tree),
            "Initial commit",
            "Administrator",
            "admin@example.com",
            now,
        );
        repo.set_branch(default_branch, &sha);
        repo
    }

    pub fn default_branch(&self) -> &str {
        &self.default_branch
    }

    pub fn branch_head(&self, name: &str) -> Option<&str> {
        self.branches.get(name).map(String::as_str)
    }

    /// All branches, sorted by name.
    pub fn branches(&self) -> impl Iterator<Item = (&String, &String)> {
        self.branches.iter()
    }

    pub fn commit(&self, sha: &str) -> Option<&Commit> {
        self.commits.get(sha)
    }

    /// Resolves a branch name, a full sha or a unique sha prefix (at least 7 characters).
    pub fn resolve(&self, reference: &str) -> Option<&Commit> {
        if let Some(sha) = self.branches.get(reference) {
            return self.commits.get(sha);
        }
        if let Some(commit) = self.commits.get(reference) {
            return Some(commit);
        }
        if reference.len() >= 7 && reference.chars().all(|c| c.is_ascii_hexdigit()) {
            let mut matches = self
                .commits
                .values()
                .filter(|c| c.sha.starts_with(reference));
            let first = matches.next()?;
            if matches.next().is_none() {
                return Some(first);
            }
        }
        None
    }

    /// Stores a new commit and returns its sha (a sha256 over the content, truncated to 40 hex).
    pub fn create_commit(
        &mut self,
        parents: Vec<String>,
        tree: Arc<Tree>,
        message: &str,
        author_name: &str,
        author_email: &str,
        now: OffsetDateTime,
    ) -> String {
        let mut hasher = Sha256::new();
        for (path, entry) in tree.iter() {
            hasher.update(path.as_bytes());
            hasher.update([0u8, u8::from(entry.executable)]);
            hasher.update(entry.blob_id().as_bytes());
        }
        for parent in &parents {
            hasher.update(b"parent ");
            hasher.update(parent.as_bytes());
        }
        hasher.update(message.as_bytes());
        hasher.update(author_name.as_bytes());
        hasher.update(author_email.as_bytes());
        hasher.update(now.unix_timestamp_nanos().to_le_bytes());
        let mut sha = hex::encode(hasher.finalize())[..40].to_string();
        // Identical content at the identical instant would collide; keep shas unique per repo.
        let mut salt = 0u32;
        while self.commits.contains_key(&sha) {
            salt += 1;
            let mut hasher = Sha256::new();
            hasher.update(sha.as_bytes());
            hasher.update(salt.to_le_bytes());
            sha = hex::encode(hasher.finalize())[..40].to_string();
        }
        self.commits.insert(
            sha.clone(),
            Commit {
                sha: sha.clone(),
                parents,
                tree,
                message: message.to_string(),
                author_name: author_name.to_string(),
                author_email: author_email.to_string(),
                created_at: now,
            },
        );
        sha
    }

    /// Points a branch at a commit (creating or moving it).
    pub fn set_branch(&mut self, name: &str, sha: &str) {
        debug_assert!(
            self.commits.contains_key(sha),
            "branch {name} set to unknown commit {sha}"
        );
        self.branches.insert(name.to_string(), sha.to_string());
    }

    /// Removes a branch; false when it did not exist.
    pub fn delete_branch(&mut self, name: &str) -> bool {
        self.branches.remove(name).is_some()
    }

    /// The changes from one commit's tree to another's (renames detected by identical content).
    pub fn diff(&self, from_sha: &str, to_sha: &str) -> Vec<FileDiff> {
        let empty = Tree::new();
        let from = self
            .commits
            .get(from_sha)
            .map(|c| c.tree.as_ref())
            .unwrap_or(&empty);
        let to = self
            .commits
            .get(to_sha)
            .map(|c| c.tree.as_ref())
            .unwrap_or(&empty);
        diff_trees(from, to)
    }

    /// True when `ancestor` is reachable from `descendant` (a commit is its own ancestor).
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> bool {
        self.ancestors(descendant).contains(ancestor)
    }

    /// The nearest common ancestor of two commits (by breadth-first distance from `b`).
    pub fn merge_base(&self, a: &str, b: &str) -> Option<String> {
        let of_a = self.ancestors(a);
        let mut queue = VecDeque::from([b.to_string()]);
        let mut seen = BTreeSet::new();
        while let Some(sha) = queue.pop_front() {
            if !seen.insert(sha.clone()) {
                continue;
            }
            if of_a.contains(&sha) {
                return Some(sha);
            }
            if let Some(commit) = self.commits.get(&sha) {
                queue.extend(commit.parents.iter().cloned());
            }
        }
        None
    }

    /// Commits reachable from `to` but not from `from`, oldest first.
    pub fn commits_between(&self, from: &str, to: &str) -> Vec<&Commit> {
        let excluded = self.ancestors(from);
        let mut result: Vec<&Commit> = self
            .ancestors(to)
            .iter()
            .filter(|sha| !excluded.contains(*sha))
            .filter_map(|sha| self.commits.get(sha))
            .collect();
        result.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.sha.cmp(&b.sha)));
        result
    }

    /// The file-level three-way merge of `theirs` into `ours`, or the conflicting paths.
    pub fn merge_trees(&self, ours: &str, theirs: &str) -> Result<Arc<Tree>, MergeConflict> {
        let empty = Tree::new();
        let base_sha = self.merge_base(ours, theirs);
        let base = base_sha
            .as_deref()
            .and_then(|sha| self.commits.get(sha))
            .map(|c| c.tree.as_ref())
            .unwrap_or(&empty);
        let our_tree = self
            .commits
            .get(ours)
            .map(|c| c.tree.as_ref())
            .unwrap_or(&empty);
        let their_tree = self
            .commits
            .get(theirs)
            .map(|c| c.tree.as_ref())
            .unwrap_or(&empty);
        three_way(base, our_tree, their_tree).map(Arc::new)
    }

    /// True when merging `source_sha` into the branch would conflict.
    pub fn has_conflicts(&self, target_branch: &str, source_sha: &str) -> bool {
        match self.branch_head(target_branch) {
            Some(target) => self.merge_trees(target, source_sha).is_err(),
            None => false,
        }
    }

    /// Merges `source_sha` into `target_branch` and returns the branch's new head.
    ///
    /// `Merge` always writes a merge commit (like GitLab's `--no-ff`), `Squash` writes one commit
    /// with the combined changes, `Rebase` fast-forwards when the target is an ancestor of the
    /// source and otherwise replays the changes as one commit on the target.
    pub fn merge_into(
        &mut self,
        target_branch: &str,
        source_sha: &str,
        method: MergeMethod,
        message: &str,
        now: OffsetDateTime,
    ) -> Result<String, MergeConflict> {
        let target = self
            .branch_head(target_branch)
            .map(str::to_string)
            .ok_or_else(|| MergeConflict { paths: Vec::new() })?;
        if !self.commits.contains_key(source_sha) {
            return Err(MergeConflict { paths: Vec::new() });
        }
        if method == MergeMethod::Rebase && self.is_ancestor(&target, source_sha) {
            self.set_branch(target_branch, source_sha);
            return Ok(source_sha.to_string());
        }
        let tree = self.merge_trees(&target, source_sha)?;
        let (author_name, author_email) = self
            .commits
            .get(source_sha)
            .map(|c| (c.author_name.clone(), c.author_email.clone()))
            .unwrap_or_default();
        let parents = match method {
            MergeMethod::Merge => vec![target.clone(), source_sha.to_string()],
            MergeMethod::Squash | MergeMethod::Rebase => vec![target.clone()],
        };
        let sha = self.create_commit(parents, tree, message, &author_name, &author_email, now);
        self.set_branch(target_branch, &sha);
        Ok(sha)
    }

    fn ancestors(&self, sha: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![sha.to_string()];
        while let Some(current) = stack.pop() {
            let Some(commit) = self.commits.get(&current) else {
                continue;
            };
            if seen.insert(current) {
                stack.extend(commit.parents.iter().cloned());
            }
        }
        seen
    }
}

/// File-level three-way merge.
pub fn three_way(base: &Tree, ours: &Tree, theirs: &Tree) -> Result<Tree, MergeConflict> {
    let paths: BTreeSet<&String> = base
        .keys()
        .chain(ours.keys())
        .chain(theirs.keys())
        .collect();
    let mut merged = Tree::new();
    let mut conflicts = Vec::new();
    for path in paths {
        let b = base.get(path);
        let o = ours.get(path);
        let t = theirs.get(path);
        let chosen = if o == t || t == b {
            o
        } else if o == b {
            t
        } else {
            conflicts.push(path.clone());
            continue;
        };
        if let Some(entry) = chosen {
            merged.insert(path.clone(), entry.clone());
        }
    }
    if conflicts.is_empty() {
        Ok(merged)
    } else {
        Err(MergeConflict { paths: conflicts })
    }
}

/// The changes between two trees.
pub fn diff_trees(from: &Tree, to: &Tree) -> Vec<FileDiff> {
    let mut added: Vec<&String> = Vec::new();
    let mut deleted: Vec<&String> = Vec::new();
    let mut diffs = Vec::new();
    for (path, old) in from {
        match to.get(path) {
            None => deleted.push(path),
            Some(new) if new != old => diffs.push(FileDiff {
                old_path: path.clone(),
                new_path: path.clone(),
                new_file: false,
                renamed_file: false,
                deleted_file: false,
                a_mode: old.mode().to_string(),
                b_mode: new.mode().to_string(),
                diff: text_diff(&old.content, &new.content),
            }),
            Some(_) => {}
        }
    }
    for path in to.keys() {
        if !from.contains_key(path) {
            added.push(path);
        }
    }
    // Rename detection: a deleted path whose exact content reappears under an added path.
    let mut renamed_targets = BTreeSet::new();
    let mut remaining_deleted = Vec::new();
    for old_path in deleted {
        let old = &from[old_path];
        let target = added
            .iter()
            .find(|p| !renamed_targets.contains(**p) && to[**p].content == old.content);
        match target {
            Some(new_path) => {
                renamed_targets.insert((*new_path).clone());
                let new = &to[*new_path];
                diffs.push(FileDiff {
                    old_path: old_path.clone(),
                    new_path: (*new_path).clone(),
                    new_file: false,
                    renamed_file: true,
                    deleted_file: false,
                    a_mode: old.mode().to_string(),
                    b_mode: new.mode().to_string(),
                    diff: String::new(),
                });
            }
            None => remaining_deleted.push(old_path),
        }
    }
    for old_path in remaining_deleted {
        let old = &from[old_path];
        diffs.push(FileDiff {
            old_path: old_path.clone(),
            new_path: old_path.clone(),
            new_file: false,
            renamed_file: false,
            deleted_file: true,
            a_mode: old.mode().to_string(),
            b_mode: "0".to_string(),
            diff: text_diff(&old.content, b""),
        });
    }
    for new_path in added {
        if renamed_targets.contains(new_path) {
            continue;
        }
        let new = &to[new_path];
        diffs.push(FileDiff {
            old_path: new_path.clone(),
            new_path: new_path.clone(),
            new_file: true,
            renamed_file: false,
            deleted_file: false,
            a_mode: "0".to_string(),
            b_mode: new.mode().to_string(),
            diff: text_diff(b"", &new.content),
        });
    }
    diffs.sort_by(|a, b| a.new_path.cmp(&b.new_path));
    diffs
}

/// A whole-file hunk: every old line removed, every new line added (no LCS; good enough for review).
fn text_diff(old: &[u8], new: &[u8]) -> String {
    if old == new {
        return String::new();
    }
    let old_text = String::from_utf8_lossy(old);
    let new_text = String::from_utf8_lossy(new);
    let old_lines: Vec<&str> = old_text.lines().collect();
    let new_lines: Vec<&str> = new_text.lines().collect();
    let old_start = usize::from(!old_lines.is_empty());
    let new_start = usize::from(!new_lines.is_empty());
    let mut out = format!(
        "@@ -{},{} +{},{} @@\n",
        old_start,
        old_lines.len(),
        new_start,
        new_lines.len()
    );
    for line in &old_lines {
        out.push('-');
        out.push_str(line);
        out.push('\n');
    }
    for line in &new_lines {
        out.push('+');
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn commit_files(repo: &mut Repo, branch: &str, files: &[(&str, Option<&str>)]) -> String {
        let head = repo.branch_head(branch).expect("branch exists").to_string();
        let mut tree = repo
            .commit(&head)
            .expect("head exists")
            .tree
            .as_ref()
            .clone();
        for (path, content) in files {
            match content {
                Some(text) => {
                    tree.insert(path.to_string(), FileEntry::new(*text));
                }
                None => {
                    tree.remove(*path);
                }
            }
        }
        let sha = repo.create_commit(vec![head], Arc::new(tree), "change", "A", "a@x", now());
        repo.set_branch(branch, &sha);
        sha
    }

    #[test]
    fn new_repo_has_readme_on_default_branch() {
        let repo = Repo::new("main", now());
        let head = repo.branch_head("main").expect("main exists");
        assert_eq!(head.len(), 40);
        assert!(
            head.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        let commit = repo.commit(head).expect("commit exists");
        assert!(commit.tree.contains_key("README.md"));
        assert_eq!(repo.default_branch(), "main");
        assert_eq!(repo.branches().count(), 1);
    }

    #[test]
    fn ancestry_and_merge_base() {
        let mut repo = Repo::new("main", now());
        let root = repo.branch_head("main").expect("main").to_string();
        repo.set_branch("feature", &root);
        let f1 = commit_files(&mut repo, "feature", &[("a.txt", Some("a"))]);
        let m1 = commit_files(&mut repo, "main", &[("b.txt", Some("b"))]);
        assert!(repo.is_ancestor(&root, &f1));
        assert!(!repo.is_ancestor(&f1, &m1));
        assert_eq!(repo.merge_base(&f1, &m1).as_deref(), Some(root.as_str()));
        assert_eq!(repo.commits_between(&root, &f1).len(), 1);
        assert_eq!(
            repo.resolve(&f1[..8]).map(|c| c.sha.clone()),
            Some(f1.clone())
        );
        assert!(repo.delete_branch("feature"));
        assert!(!repo.delete_branch("feature"));
    }

    #[test]
    fn diff_reports_new_deleted_renamed_and_modified() {
        let mut repo = Repo::new("main", now());
        let root = repo.branch_head("main").expect("main").to_string();
        commit_files(
            &mut repo,
            "main",
            &[("keep.txt", Some("x")), ("old.txt", Some("same"))],
        );
        let before = repo.branch_head("main").expect("main").to_string();
        let after = commit_files(
            &mut repo,
            "main",
            &[
                ("old.txt", None),
                ("new.txt", Some("same")),
                ("keep.txt", Some("y")),
                ("README.md", None),
                ("added.txt", Some("hello\n")),
            ],
        );
        let diffs = repo.diff(&before, &after);
        let by_path: BTreeMap<&str, &FileDiff> =
            diffs.iter().map(|d| (d.new_path.as_str(), d)).collect();
        assert!(by_path["added.txt"].new_file);
        assert_eq!(by_path["added.txt"].a_mode, "0");
        assert!(by_path["added.txt"].diff.contains("+hello"));
        assert!(by_path["README.md"].deleted_file);
        assert!(by_path["new.txt"].renamed_file);
        assert_eq!(by_path["new.txt"].old_path, "old.txt");
        assert!(by_path["keep.txt"].diff.contains("-x\n+y"));
        assert!(repo.diff(&root, &root).is_empty());
    }

    #[test]
    fn merge_methods_and_conflicts() {
        let mut repo = Repo::new("main", now());
        let root = repo.branch_head("main").expect("main").to_string();
        repo.set_branch("feature", &root);
        let feature = commit_files(&mut repo, "feature", &[("f.txt", Some("f"))]);

        // Fast-forward with rebase when the target did not move.
        let mut ff = repo.clone();
        let head = ff
            .merge_into("main", &feature, MergeMethod::Rebase, "m", now())
            .expect("ff");
        assert_eq!(head, feature);

        commit_files(&mut repo, "main", &[("m.txt", Some("m"))]);
        let mut squash = repo.clone();
        let merged = squash
            .merge_into("main", &feature, MergeMethod::Squash, "squash", now())
            .expect("squash merges");
        let commit = squash.commit(&merged).expect("commit");
        assert_eq!(commit.parents.len(), 1);
        assert!(commit.tree.contains_key("f.txt") && commit.tree.contains_key("m.txt"));

        let merged = repo
            .merge_into("main", &feature, MergeMethod::Merge, "merge", now())
            .expect("merge commit");
        assert_eq!(repo.commit(&merged).expect("commit").parents.len(), 2);
        assert!(repo.is_ancestor(&feature, &merged));

        // Both sides change the same file differently: conflict, branch untouched.
        repo.set_branch("other", &root);
        let other = commit_files(&mut repo, "other", &[("README.md", Some("theirs"))]);
        commit_files(&mut repo, "main", &[("README.md", Some("ours"))]);
        let main_before = repo.branch_head("main").expect("main").to_string();
        assert!(repo.has_conflicts("main", &other));
        let err = repo
            .merge_into("main", &other, MergeMethod::Merge, "x", now())
            .expect_err("conflict");
        assert_eq!(err.paths, vec!["README.md".to_string()]);
        assert_eq!(repo.branch_head("main"), Some(main_before.as_str()));
    }
}
