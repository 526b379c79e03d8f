//! Syntax of the names a submission carries: branch names (git's
//! `check-ref-format --branch` rules plus the forges' own), project paths,
//! forge instance names and file paths. Each check returns the reason a
//! name is refused, without the field name.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};

/// Longest branch name in bytes (git allows more; the forges do not).
pub const MAX_BRANCH_BYTES: usize = 255;
/// Longest file path in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest project path in bytes.
pub const MAX_PROJECT_BYTES: usize = 1024;
/// Longest forge instance name in bytes.
pub const MAX_FORGE_BYTES: usize = 128;

/// Refuses what `git check-ref-format --branch` refuses, and what GitLab
/// refuses on top of it (`HEAD`, a `refs/` prefix), and names that read as
/// a full commit id.
pub fn check_branch(name: &str) -> Result<(), String> {
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

/// A GitLab or GitHub project path: `owner/repo`, `group/sub/name`.
pub fn check_project(path: &str) -> Result<(), String> {
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
pub fn check_forge(name: &str) -> Result<(), String> {
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

/// A file path inside the repository: relative, `/`-separated, no empty,
/// `.` or `..` segment, no `.git` component in any spelling git itself
/// refuses (case, NTFS trailing dots and spaces and short name, HFS+
/// ignorable characters), no control characters.
pub fn check_file_path(path: &str) -> Result<(), String> {
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
