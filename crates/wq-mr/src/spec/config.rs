//! `mr.submission:` in the service configuration: what a caller may submit,
//! and its compiled form, [`SubmissionRules`].
//!
//! ```yaml
//! mr:
//!   submission:
//!     blocked_paths: [".gitlab-ci.yml", ".github/**"]
//!     max_file_bytes: 1048576
//!     max_total_bytes: 5242880
//!     max_actions: 500
//!     allow_binary: false
//!     protected_branches: ["main", "release/*"]
//!     blocked_content: ["-----BEGIN[A-Z0-9 ]* PRIVATE KEY( BLOCK)?-----"]
//!     max_title_chars: 255
//!     max_description_bytes: 65536
//! ```
//!
//! A list given in the file replaces its default list; it is not merged.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use regex::bytes::{RegexBuilder, RegexSet, RegexSetBuilder};
use serde::{Deserialize, Serialize};

/// Paths an untrusted caller never changes, creates, deletes or moves (glob
/// patterns, matched case-insensitively; `*` stays within one directory,
/// `**` crosses directories):
///
/// - CI definitions, which run with the project's CI secrets: GitLab's
///   `.gitlab-ci.yml` and the `.gitlab-ci/` directory some projects
///   include from, Tekton pipelines-as-code (`.tekton/`), and the common
///   hosted CI systems' files;
/// - the forges' control directories: `.gitlab/` (CI includes under
///   `.gitlab/ci/`, Kubernetes agent configs, `CODEOWNERS`, security
///   policies) and `.github/` (workflows, actions, `CODEOWNERS`,
///   dependabot and repository-settings files);
/// - `CODEOWNERS` wherever the forges read it, since it decides who must
///   approve;
/// - `.gitmodules` (points the repository at other repositories) and every
///   `.gitattributes` (can hide a file's diff from reviewers and change
///   merge and export behaviour).
///
/// `.git` components are refused by the path rules themselves.
pub const DEFAULT_BLOCKED_PATHS: &[&str] = &[
    ".gitlab-ci.yml",
    ".gitlab-ci/**",
    ".gitlab/**",
    ".github/**",
    "CODEOWNERS",
    "docs/CODEOWNERS",
    ".gitmodules",
    "**/.gitattributes",
    ".tekton/**",
    ".circleci/**",
    ".travis.yml",
    "Jenkinsfile",
    ".drone.yml",
    ".buildkite/**",
    "azure-pipelines.yml",
];
/// Largest decoded content of one file action (1 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Largest decoded content of all file actions together (5 MiB).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 5 * 1024 * 1024;
/// Most file actions in one submission.
pub const DEFAULT_MAX_ACTIONS: usize = 500;
/// Whether content that is not UTF-8 text (or holds a NUL byte) is accepted.
pub const DEFAULT_ALLOW_BINARY: bool = false;
/// Branches a submission never uses as its source branch (glob patterns,
/// matched case-insensitively; `*` also matches `/`, as in GitLab's
/// protected-branch wildcards).
pub const DEFAULT_PROTECTED_BRANCHES: &[&str] = &[
    "main",
    "master",
    "develop",
    "trunk",
    "release/*",
    "release-*",
    "stable/*",
    "production",
    "gh-pages",
];
/// Content refused in any file (regular expressions over the decoded bytes):
/// PEM private key headers (`RSA`, `EC`, `OPENSSH`, `ENCRYPTED`, PGP key
/// blocks, ...) and PuTTY private key files.
pub const DEFAULT_BLOCKED_CONTENT: &[&str] = &[
    r"-----BEGIN[A-Z0-9 ]* PRIVATE KEY( BLOCK)?-----",
    r"PuTTY-User-Key-File-[0-9]+:",
];
/// Longest title in characters.
pub const DEFAULT_MAX_TITLE_CHARS: usize = 255;
/// Largest description (and commit message) in bytes (64 KiB).
pub const DEFAULT_MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

/// Where this section sits in the configuration file, for error messages.
const SECTION: &str = "mr.submission";

/// `mr.submission:` as written in the configuration file. Every field is
/// optional; its default is the named constant above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubmissionConfig {
    /// Glob patterns of paths no file action may touch
    /// (default [`DEFAULT_BLOCKED_PATHS`]).
    pub blocked_paths: Vec<String>,
    /// Largest decoded content of one file, at least 1
    /// (default [`DEFAULT_MAX_FILE_BYTES`]).
    pub max_file_bytes: u64,
    /// Largest decoded content of all files, at least 1
    /// (default [`DEFAULT_MAX_TOTAL_BYTES`]).
    pub max_total_bytes: u64,
    /// Most file actions, at least 1 (default [`DEFAULT_MAX_ACTIONS`]).
    pub max_actions: usize,
    /// Accept binary content (default [`DEFAULT_ALLOW_BINARY`]).
    pub allow_binary: bool,
    /// Glob patterns of branches refused as `source_branch`
    /// (default [`DEFAULT_PROTECTED_BRANCHES`]).
    pub protected_branches: Vec<String>,
    /// Regular expressions refused in file content
    /// (default [`DEFAULT_BLOCKED_CONTENT`]).
    pub blocked_content: Vec<String>,
    /// Longest title in characters, at least 1
    /// (default [`DEFAULT_MAX_TITLE_CHARS`]).
    pub max_title_chars: usize,
    /// Largest description and commit message in bytes, at least 1
    /// (default [`DEFAULT_MAX_DESCRIPTION_BYTES`]).
    pub max_description_bytes: usize,
}

impl Default for SubmissionConfig {
    fn default() -> Self {
        Self {
            blocked_paths: owned(DEFAULT_BLOCKED_PATHS),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_actions: DEFAULT_MAX_ACTIONS,
            allow_binary: DEFAULT_ALLOW_BINARY,
            protected_branches: owned(DEFAULT_PROTECTED_BRANCHES),
            blocked_content: owned(DEFAULT_BLOCKED_CONTENT),
            max_title_chars: DEFAULT_MAX_TITLE_CHARS,
            max_description_bytes: DEFAULT_MAX_DESCRIPTION_BYTES,
        }
    }
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

impl SubmissionConfig {
    /// Compiles the patterns. Every bad pattern or limit is reported, each
    /// naming its field (`mr.submission.blocked_paths[2]: ...`).
    pub fn compile(&self) -> Result<SubmissionRules, Vec<String>> {
        let mut errors = Vec::new();

        for (field, value) in [
            ("max_file_bytes", self.max_file_bytes),
            ("max_total_bytes", self.max_total_bytes),
            ("max_actions", self.max_actions as u64),
            ("max_title_chars", self.max_title_chars as u64),
            ("max_description_bytes", self.max_description_bytes as u64),
        ] {
            if value == 0 {
                errors.push(format!("{SECTION}.{field}: must be at least 1"));
            }
        }

        // Paths: `*` stops at `/`, as in .gitignore; `**` crosses directories.
        let blocked_paths = compile_globs("blocked_paths", &self.blocked_paths, true, &mut errors);
        // Branches: `*` also matches `/`, as in GitLab's protected branches.
        let protected_branches = compile_globs(
            "protected_branches",
            &self.protected_branches,
            false,
            &mut errors,
        );
        let blocked_content =
            compile_regexes("blocked_content", &self.blocked_content, &mut errors);

        match (blocked_paths, protected_branches, blocked_content) {
            (Some(blocked_paths), Some(protected_branches), Some(blocked_content))
                if errors.is_empty() =>
            {
                Ok(SubmissionRules {
                    config: self.clone(),
                    blocked_paths,
                    protected_branches,
                    blocked_content,
                })
            }
            _ => Err(errors),
        }
    }
}

fn compile_globs(
    field: &str,
    patterns: &[String],
    literal_separator: bool,
    errors: &mut Vec<String>,
) -> Option<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    let mut ok = true;
    for (index, pattern) in patterns.iter().enumerate() {
        match build_glob(pattern, literal_separator) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(message) => {
                errors.push(format!("{SECTION}.{field}[{index}]: {message}"));
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    match builder.build() {
        Ok(set) => Some(set),
        Err(error) => {
            errors.push(format!("{SECTION}.{field}: {error}"));
            None
        }
    }
}

fn build_glob(pattern: &str, literal_separator: bool) -> Result<Glob, String> {
    if pattern.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(literal_separator)
        .backslash_escape(true)
        .build()
        .map_err(|error| format!("invalid glob {pattern:?}: {}", error.kind()))
}

fn compile_regexes(field: &str, patterns: &[String], errors: &mut Vec<String>) -> Option<RegexSet> {
    let mut ok = true;
    for (index, pattern) in patterns.iter().enumerate() {
        if pattern.is_empty() {
            errors.push(format!("{SECTION}.{field}[{index}]: must not be empty"));
            ok = false;
        } else if let Err(error) = RegexBuilder::new(pattern).build() {
            errors.push(format!(
                "{SECTION}.{field}[{index}]: invalid regular expression: {error}"
            ));
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    match RegexSetBuilder::new(patterns).build() {
        Ok(set) => Some(set),
        Err(error) => {
            errors.push(format!("{SECTION}.{field}: {error}"));
            None
        }
    }
}

/// [`SubmissionConfig`] with its patterns compiled: what
/// [`parse_submission`](super::parse_submission) checks against.
#[derive(Debug, Clone)]
pub struct SubmissionRules {
    config: SubmissionConfig,
    blocked_paths: GlobSet,
    protected_branches: GlobSet,
    blocked_content: RegexSet,
}

impl Default for SubmissionRules {
    /// The rules of [`SubmissionConfig::default`].
    fn default() -> Self {
        SubmissionConfig::default()
            .compile()
            .expect("the default submission config compiles")
    }
}

impl SubmissionRules {
    /// The configuration these rules were compiled from.
    pub fn config(&self) -> &SubmissionConfig {
        &self.config
    }

    /// The first blocked-path pattern `path` matches.
    pub(crate) fn blocked_path(&self, path: &str) -> Option<&str> {
        self.blocked_paths
            .matches(path)
            .first()
            .map(|&index| self.config.blocked_paths[index].as_str())
    }

    /// The first protected-branch pattern `branch` matches.
    pub(crate) fn protected_branch(&self, branch: &str) -> Option<&str> {
        self.protected_branches
            .matches(branch)
            .first()
            .map(|&index| self.config.protected_branches[index].as_str())
    }

    /// Indexes of the blocked-content patterns `content` matches.
    pub(crate) fn blocked_content(&self, content: &[u8]) -> Vec<usize> {
        self.blocked_content.matches(content).into_iter().collect()
    }
}
