//! The names a submission carries, as types: [`BranchName`] (git's
//! `check-ref-format --branch` rules plus the forges' own), [`ProjectPath`]
//! and [`RepoPath`] (a file path inside the repository), each built only
//! through a fallible constructor that holds its rules, and the syntax of a
//! forge instance name. A refusal is a [`NameError`]: the reason, without the
//! field name.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::Serialize;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};

/// Longest branch name in bytes (git allows more; the forges do not).
pub const MAX_BRANCH_BYTES: usize = 255;
/// Longest file path in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest project path in bytes.
pub const MAX_PROJECT_BYTES: usize = 1024;
/// Longest forge instance name in bytes.
pub const MAX_FORGE_BYTES: usize = 128;

/// Why a name is refused (`must not be empty`), without the field name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(String);

/// The parts the three name types share: a `String` that passed `rules`,
/// built by `TryFrom<String>`, `TryFrom<&str>` or `FromStr`, read as a
/// `&str`, serialized as a plain string.
macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $rules:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Why `value` is refused, if it is.
            pub fn check(value: &str) -> Result<(), NameError> {
                $rules(value).map_err(NameError)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;

            fn try_from(value: String) -> Result<Self, NameError> {
                Self::check(&value)?;
                Ok(Self(value))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;

            fn try_from(value: &str) -> Result<Self, NameError> {
                Self::check(value)?;
                Ok(Self(value.to_owned()))
            }
        }

        impl FromStr for $name {
            type Err = NameError;

            fn from_str(value: &str) -> Result<Self, NameError> {
                Self::try_from(value)
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

name_type!(
    /// A branch name: what `git check-ref-format --branch` accepts, less
    /// what GitLab refuses on top of it (`HEAD`, a `refs/` prefix) and names
    /// that read as a full commit id, at most [`MAX_BRANCH_BYTES`] bytes.
    BranchName,
    branch_rules
);

name_type!(
    /// A GitLab or GitHub project path: `owner/repo`, `group/sub/name`.
    ProjectPath,
    project_rules
);

name_type!(
    /// A file path inside the repository: relative, `/`-separated, no empty,
    /// `.` or `..` segment, no `.git` component in any spelling git itself
    /// refuses (case, NTFS trailing dots and spaces and short name, HFS+
    /// ignorable characters), no control or format characters.
    RepoPath,
    repo_path_rules
);

/// `from_store` for the names the store reads back.
macro_rules! from_store {
    ($($name:ident),*) => {$(
        impl $name {
            /// A value the store holds. It passed the rules when it was
            /// submitted; it is not checked again, so that an item accepted
            /// once stays readable when a rule tightens later.
            pub(crate) fn from_store(value: String) -> Self {
                Self(value)
            }
        }
    )*};
}

from_store!(BranchName, ProjectPath);

fn branch_rules(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_BRANCH_BYTES {
        return Err(format!("must be at most {MAX_BRANCH_BYTES} bytes"));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!(
            "must not contain control characters (found {})",
            c.escape_unicode()
        ));
    }
    check_format_characters(name)?;
    if name.contains(' ') {
        return Err("must not contain a space".to_owned());
    }
    if let Some(c) = name.chars().find(|c| "~^:?*[\\".contains(*c)) {
        return Err(format!("must not contain '{c}'"));
    }
    if name == "@" {
        return Err("must not be '@'".to_owned());
    }
    if name == "HEAD" {
        return Err("must not be 'HEAD'".to_owned());
    }
    if name.starts_with('-') {
        return Err("must not start with '-'".to_owned());
    }
    if name.starts_with("refs/") {
        return Err("must not start with 'refs/'".to_owned());
    }
    if name.contains("..") {
        return Err("must not contain '..'".to_owned());
    }
    if name.contains("@{") {
        return Err("must not contain '@{'".to_owned());
    }
    if name.starts_with('/') || name.ends_with('/') {
        return Err("must not start or end with '/'".to_owned());
    }
    if name.contains("//") {
        return Err("must not contain '//'".to_owned());
    }
    if name.ends_with('.') {
        return Err("must not end with '.'".to_owned());
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Err("no '/'-separated component may start with '.'".to_owned());
        }
        if component.ends_with(".lock") {
            return Err("no '/'-separated component may end with '.lock'".to_owned());
        }
    }
    if (name.len() == 40 || name.len() == 64) && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("must not look like a commit id".to_owned());
    }
    Ok(())
}

fn project_rules(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if path.len() > MAX_PROJECT_BYTES {
        return Err(format!("must be at most {MAX_PROJECT_BYTES} bytes"));
    }
    if path.starts_with('/') || path.ends_with('/') {
        return Err("must not start or end with '/'".to_owned());
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() < 2 {
        return Err("must be a path like 'group/name' or 'owner/repo'".to_owned());
    }
    for segment in segments {
        if segment.is_empty() {
            return Err("must not contain empty segments".to_owned());
        }
        if segment.contains("..") || segment == "." {
            return Err("must not contain '.' or '..' segments".to_owned());
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            return Err("segments may only contain A-Z, a-z, 0-9, '_', '.' and '-'".to_owned());
        }
    }
    Ok(())
}

/// A forge instance name; whether it is configured is the caller's check.
pub(super) fn check_forge(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_FORGE_BYTES {
        return Err(format!("must be at most {MAX_FORGE_BYTES} bytes"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err("must not contain control characters".to_owned());
    }
    Ok(())
}

fn repo_path_rules(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("must be at most {MAX_PATH_BYTES} bytes"));
    }
    if path.contains('\0') {
        return Err("must not contain NUL bytes".to_owned());
    }
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(format!(
            "must not contain control characters (found {})",
            c.escape_unicode()
        ));
    }
    if path.starts_with('/') {
        return Err("must be relative (no leading '/')".to_owned());
    }
    if path.contains('\\') {
        return Err("must use '/' as separator (found '\\')".to_owned());
    }
    for segment in path.split('/') {
        if segment.is_empty() {
            return Err("must not contain empty segments ('//' or a trailing '/')".to_owned());
        }
        if segment == "." || segment == ".." {
            return Err(format!("must not contain '{segment}' segments"));
        }
        if is_git_dir_name(segment) {
            return Err("must not contain a .git component".to_owned());
        }
    }
    check_format_characters(path)
}

/// Refuses Unicode format characters (general category Cf: bidirectional
/// overrides and isolates such as U+202E, zero-width characters such as
/// U+200B, U+FEFF, the soft hyphen U+00AD, ...): invisible or reordering
/// text in a name shows a reviewer something other than what git stores.
pub fn check_format_characters(name: &str) -> Result<(), String> {
    match name
        .chars()
        .find(|c| c.general_category() == GeneralCategory::Format)
    {
        Some(c) => Err(format!(
            "must not contain Unicode format characters (found U+{:04X})",
            u32::from(c)
        )),
        None => Ok(()),
    }
}

/// Whether a path segment names the `.git` directory on some file system
/// git runs on.
fn is_git_dir_name(segment: &str) -> bool {
    // HFS+ ignores these code points when comparing names.
    let hfs: String = segment.chars().filter(|c| !is_hfs_ignorable(*c)).collect();
    // NTFS drops trailing dots and spaces, and knows `.git` as `GIT~1`.
    let ntfs = hfs.trim_end_matches(['.', ' ']);
    ntfs.eq_ignore_ascii_case(".git") || ntfs.eq_ignore_ascii_case("git~1")
}

fn is_hfs_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_branch(name: &str) -> Result<(), String> {
        BranchName::check(name).map_err(|error| error.to_string())
    }

    fn check_project(path: &str) -> Result<(), String> {
        ProjectPath::check(path).map_err(|error| error.to_string())
    }

    fn check_file_path(path: &str) -> Result<(), String> {
        RepoPath::check(path).map_err(|error| error.to_string())
    }

    #[test]
    fn the_types_are_built_only_from_names_their_rules_accept() {
        let branch: BranchName = "bot/bump-foo".parse().expect("valid branch");
        assert_eq!(branch, "bot/bump-foo");
        assert_eq!(branch.as_str(), "bot/bump-foo");
        assert_eq!(branch.to_string(), "bot/bump-foo");
        assert_eq!(
            BranchName::try_from("a..b".to_owned()),
            Err(NameError("must not contain '..'".to_owned()))
        );
        assert_eq!(
            ProjectPath::try_from("group/name").map(String::from),
            Ok("group/name".to_owned())
        );
        assert!(ProjectPath::try_from("name").is_err());
        assert_eq!(
            "src/lib.rs".parse::<RepoPath>().map(RepoPath::into_string),
            Ok("src/lib.rs".to_owned())
        );
        assert_eq!(
            "/etc/passwd".parse::<RepoPath>().unwrap_err().to_string(),
            "must be relative (no leading '/')"
        );
        // Serialized as the plain string, as stored before the types.
        assert_eq!(
            serde_json::to_value(&branch).unwrap(),
            serde_json::json!("bot/bump-foo")
        );
    }

    #[test]
    fn branch_names_git_accepts() {
        for name in [
            "feature/x",
            "wq/bump-1.2.3",
            "a",
            "foo./bar",
            "heads/foo@bar",
            "release-notes_v2",
            "ünïcode",
            "main",
        ] {
            assert_eq!(check_branch(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn branch_names_git_refuses() {
        for (name, fragment) in [
            ("", "empty"),
            ("a..b", "'..'"),
            ("a b", "space"),
            ("a\tb", "control"),
            ("a\u{7f}b", "control"),
            ("a~1", "'~'"),
            ("a^", "'^'"),
            ("a:b", "':'"),
            ("a?", "'?'"),
            ("a*", "'*'"),
            ("a[b", "'['"),
            ("a\\b", "'\\'"),
            ("-x", "'-'"),
            ("/x", "'/'"),
            ("x/", "'/'"),
            ("a//b", "'//'"),
            (".x", "start with '.'"),
            ("a/.x", "start with '.'"),
            ("x.lock", ".lock"),
            ("a.lock/b", ".lock"),
            ("x.", "end with '.'"),
            ("a@{b", "'@{'"),
            ("@", "'@'"),
            ("HEAD", "HEAD"),
            ("refs/heads/x", "refs/"),
            ("0123456789abcdef0123456789abcdef01234567", "commit id"),
            ("bot/\u{202e}fdp.exe", "format characters (found U+202E)"),
            ("bot/a\u{200b}b", "U+200B"),
            ("\u{feff}bot", "U+FEFF"),
            ("bot/so\u{ad}ft", "U+00AD"),
            ("bot/\u{2066}x\u{2069}", "U+2066"),
        ] {
            let error = check_branch(name).expect_err(name);
            assert!(error.contains(fragment), "{name:?}: {error}");
        }
        let long = "b".repeat(MAX_BRANCH_BYTES + 1);
        assert!(check_branch(&long).unwrap_err().contains("at most"));
        assert_eq!(check_branch(&"b".repeat(MAX_BRANCH_BYTES)), Ok(()));
    }

    #[test]
    fn project_paths() {
        for path in [
            "group/name",
            "owner/repo",
            "g/sub/name",
            "o/.github",
            "a-b/c_d.e",
        ] {
            assert_eq!(check_project(path), Ok(()), "{path}");
        }
        for (path, fragment) in [
            ("", "empty"),
            ("name", "path like"),
            ("/g/n", "'/'"),
            ("g/n/", "'/'"),
            ("g//n", "empty segments"),
            ("g/../n", "'..'"),
            ("g/./n", "'..'"),
            ("g/n m", "may only contain"),
            ("g/n%2F", "may only contain"),
        ] {
            let error = check_project(path).expect_err(path);
            assert!(error.contains(fragment), "{path:?}: {error}");
        }
    }

    #[test]
    fn file_paths() {
        for path in [
            "a",
            "src/lib.rs",
            ".gitignore",
            "a/.github",
            "x.git/y",
            "..a/b..",
        ] {
            assert_eq!(check_file_path(path), Ok(()), "{path}");
        }
        for (path, fragment) in [
            ("", "empty"),
            ("/etc/passwd", "relative"),
            ("a\\b", "'\\'"),
            ("a//b", "empty segments"),
            ("a/", "empty segments"),
            ("./a", "'.'"),
            ("a/../b", "'..'"),
            (".git/config", ".git"),
            ("a/.GIT/config", ".git"),
            (".git./hooks/x", ".git"),
            (".git /hooks/x", ".git"),
            ("GIT~1/config", ".git"),
            (".g\u{200c}it/config", ".git"),
            ("a\0b", "NUL"),
            ("a\nb", "control"),
            ("src/\u{202e}txt.rs", "format characters (found U+202E)"),
            ("a\u{200d}b", "U+200D"),
            ("docs/\u{2060}x", "U+2060"),
            ("\u{feff}x", "U+FEFF"),
            ("a\u{e0001}", "U+E0001"),
        ] {
            let error = check_file_path(path).expect_err(path);
            assert!(error.contains(fragment), "{path:?}: {error}");
        }
        assert!(
            check_file_path(&"p".repeat(MAX_PATH_BYTES + 1))
                .unwrap_err()
                .contains("at most")
        );
    }
}
