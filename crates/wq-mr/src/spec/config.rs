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
//!     projects:
//!       # CI configuration lives in another repository: this list
//!       # replaces `blocked_paths` for this project.
//!       "team/infra":
//!         blocked_paths: ["CODEOWNERS", ".gitmodules"]
//!       # Added to whichever list applies.
//!       "team/*":
//!         extra_blocked_paths: ["deploy/**"]
//! ```
//!
//! A list given in the file replaces its default list; it is not merged.
//!
//! `projects` keys are project paths or globs over them (matched
//! case-insensitively, `*` within one path segment, `**` across). One entry
//! applies to a submission, chosen by its `project`: an entry whose key
//! equals the project (ignoring case) wins; otherwise the matching key with
//! the most characters other than `*` and `?` (the most specific: `team/app-*`
//! over `team/*`), ties broken by the keys' order. The entry's
//! `blocked_paths` replaces the section's list; its `extra_blocked_paths` is
//! added to the list that applies (the section's, or the entry's own). An
//! entry must set at least one of them, and unknown keys are refused, so a
//! misspelt key cannot quietly leave a project unprotected.

use std::collections::BTreeMap;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::bytes::{RegexBuilder, RegexSet, RegexSetBuilder};
use serde::{Deserialize, Serialize};

use super::FieldError;

/// Paths an untrusted caller never changes, creates, deletes or moves (glob
/// patterns, matched case-insensitively; `*` stays within one directory,
/// `**` crosses directories):
///
/// - CI definitions, which run with the project's CI secrets: GitLab's
///   `.gitlab-ci.yml` and the `.gitlab-ci/` directory some projects
///   include from, Tekton pipelines-as-code (`.tekton/`), and the common
///   hosted CI systems' files (CircleCI, Travis, Jenkins, Drone, Buildkite,
///   Azure Pipelines in either spelling);
/// - the forges' control directories: `.gitlab/` (CI includes under
///   `.gitlab/ci/`, Kubernetes agent configs, `CODEOWNERS`, security
///   policies) and `.github/` (workflows, actions, `CODEOWNERS`,
///   dependabot and repository-settings files);
/// - `CODEOWNERS` wherever the forges read it, since it decides who must
///   approve;
/// - `.gitmodules` (points the repository at other repositories), every
///   `.gitattributes` (can hide a file's diff from reviewers and change
///   merge and export behaviour) and `.lfsconfig` (points Git LFS at
///   another server);
/// - bots that merge or push on their own: Renovate (`renovate.json`,
///   `renovate.json5`, `.renovaterc*`), Mergify (`.mergify.yml`,
///   `.mergify/`), Kodiak (`.kodiak.toml`);
/// - development containers (`.devcontainer/`, `.devcontainer.json`), which
///   run commands on whoever opens the repository.
///
/// `.git` components are refused by the path rules themselves. A path is
/// also refused when one of its ancestors matches (`CODEOWNERS/x`), or when
/// it could be a directory holding a match (`.github`, `docs` for
/// `docs/CODEOWNERS`): see [`SubmissionRules`].
pub const DEFAULT_BLOCKED_PATHS: &[&str] = &[
    ".gitlab-ci.yml",
    ".gitlab-ci/**",
    ".gitlab/**",
    ".github/**",
    "CODEOWNERS",
    "docs/CODEOWNERS",
    ".gitmodules",
    "**/.gitattributes",
    ".lfsconfig",
    ".tekton/**",
    ".circleci/**",
    ".travis.yml",
    "Jenkinsfile",
    ".drone.yml",
    ".buildkite/**",
    "azure-pipelines.y*ml",
    "renovate.json",
    "renovate.json5",
    ".renovaterc*",
    ".mergify.yml",
    ".mergify/**",
    ".kodiak.toml",
    ".devcontainer/**",
    ".devcontainer.json",
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

/// Every problem found in a configuration section, each naming its field
/// (`mr.submission.blocked_paths[2]`); shown one `field: message` per line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<FieldError>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                formatter.write_str("\n")?;
            }
            write!(formatter, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// Each problem as `field: message`.
    pub fn lines(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

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
    /// Per-project path blocklists, keyed by project path or glob (none by
    /// default); see the module documentation for which entry applies.
    pub projects: BTreeMap<String, ProjectSubmissionConfig>,
}

/// One entry of `mr.submission.projects`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectSubmissionConfig {
    /// Replaces `mr.submission.blocked_paths` for the matching projects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_paths: Option<Vec<String>>,
    /// Added to the list that applies to the matching projects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_blocked_paths: Vec<String>,
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
            projects: BTreeMap::new(),
        }
    }
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

impl SubmissionConfig {
    /// Compiles the patterns. Every bad pattern or limit is reported, each
    /// naming its field (`mr.submission.blocked_paths[2]: ...`,
    /// `mr.submission.projects["team/*"].extra_blocked_paths[0]: ...`).
    pub fn compile(&self) -> Result<SubmissionRules, ConfigErrors> {
        let mut errors = Vec::new();

        for (field, value) in [
            ("max_file_bytes", self.max_file_bytes),
            ("max_total_bytes", self.max_total_bytes),
            ("max_actions", self.max_actions as u64),
            ("max_title_chars", self.max_title_chars as u64),
            ("max_description_bytes", self.max_description_bytes as u64),
        ] {
            if value == 0 {
                errors.push(FieldError::new(
                    format!("{SECTION}.{field}"),
                    "must be at least 1",
                ));
            }
        }

        let blocked_paths = PathRules::compile(
            &format!("{SECTION}.blocked_paths"),
            &self.blocked_paths,
            &mut errors,
        );
        // Branches: `*` also matches `/`, as in GitLab's protected branches.
        let protected_branches = compile_globs(
            "protected_branches",
            &self.protected_branches,
            false,
            &mut errors,
        );
        let blocked_content =
            compile_regexes("blocked_content", &self.blocked_content, &mut errors);
        let projects = self.compile_projects(blocked_paths.is_some(), &mut errors);

        match (blocked_paths, protected_branches, blocked_content) {
            (Some(blocked_paths), Some(protected_branches), Some(blocked_content))
                if errors.is_empty() =>
            {
                Ok(SubmissionRules {
                    config: self.clone(),
                    blocked_paths,
                    projects,
                    protected_branches,
                    blocked_content,
                })
            }
            _ => Err(ConfigErrors(errors)),
        }
    }

    /// `section_ok`: the section's own `blocked_paths` compiled (its errors
    /// are reported once, not again for every entry that extends it).
    fn compile_projects(
        &self,
        section_ok: bool,
        errors: &mut Vec<FieldError>,
    ) -> Vec<ProjectRules> {
        let mut projects = Vec::new();
        for (key, entry) in &self.projects {
            let prefix = format!("{SECTION}.projects[{key:?}]");
            let matcher = match build_glob(key, true) {
                Ok(glob) => Some(glob.compile_matcher()),
                Err(message) => {
                    errors.push(FieldError::new(prefix.clone(), message));
                    None
                }
            };
            if entry.blocked_paths.is_none() && entry.extra_blocked_paths.is_empty() {
                errors.push(FieldError::new(
                    prefix,
                    "sets neither blocked_paths nor extra_blocked_paths",
                ));
                continue;
            }
            let before = errors.len();
            // Each list is checked on its own, so errors name the list and
            // the index the operator wrote.
            if let Some(list) = &entry.blocked_paths {
                PathRules::compile(&format!("{prefix}.blocked_paths"), list, errors);
            }
            PathRules::compile(
                &format!("{prefix}.extra_blocked_paths"),
                &entry.extra_blocked_paths,
                errors,
            );
            if errors.len() != before || (entry.blocked_paths.is_none() && !section_ok) {
                continue;
            }
            let mut patterns = entry
                .blocked_paths
                .clone()
                .unwrap_or_else(|| self.blocked_paths.clone());
            patterns.extend(entry.extra_blocked_paths.iter().cloned());
            let paths = PathRules::compile(&format!("{prefix} (combined list)"), &patterns, errors);
            if let (Some(matcher), Some(paths)) = (matcher, paths) {
                projects.push(ProjectRules {
                    key: key.clone(),
                    matcher,
                    paths,
                });
            }
        }
        projects
    }
}

fn compile_globs(
    field: &str,
    patterns: &[String],
    literal_separator: bool,
    errors: &mut Vec<FieldError>,
) -> Option<GlobSet> {
    compile_glob_set(
        &format!("{SECTION}.{field}"),
        patterns,
        literal_separator,
        errors,
    )
}

/// `field` is the full name of the list, for error messages.
fn compile_glob_set(
    field: &str,
    patterns: &[String],
    literal_separator: bool,
    errors: &mut Vec<FieldError>,
) -> Option<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    let mut ok = true;
    for (index, pattern) in patterns.iter().enumerate() {
        match build_glob(pattern, literal_separator) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(message) => {
                errors.push(FieldError::new(format!("{field}[{index}]"), message));
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
            errors.push(FieldError::new(field, error.to_string()));
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

fn compile_regexes(
    field: &str,
    patterns: &[String],
    errors: &mut Vec<FieldError>,
) -> Option<RegexSet> {
    let mut ok = true;
    for (index, pattern) in patterns.iter().enumerate() {
        if pattern.is_empty() {
            errors.push(FieldError::new(
                format!("{SECTION}.{field}[{index}]"),
                "must not be empty",
            ));
            ok = false;
        } else if let Err(error) = RegexBuilder::new(pattern).build() {
            errors.push(FieldError::new(
                format!("{SECTION}.{field}[{index}]"),
                format!("invalid regular expression: {error}"),
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
            errors.push(FieldError::new(
                format!("{SECTION}.{field}"),
                error.to_string(),
            ));
            None
        }
    }
}

/// One `/`-separated segment of a blocked-path pattern.
#[derive(Debug, Clone)]
enum Segment {
    /// `**`: any number of segments, none included.
    AnyDepth,
    /// `*`: exactly one segment, whatever its name.
    AnyName,
    /// Anything else, matched against one segment.
    Name(GlobMatcher),
}

/// A compiled blocked-path list. A path is refused when
///
/// 1. it matches a pattern (`.gitlab-ci.yml`);
/// 2. one of its ancestors does (`CODEOWNERS/x`, `.gitlab-ci.yml/x`): the
///    forge would have to turn a blocked file into a directory;
/// 3. a pattern can match something below it, so the path may name a
///    directory holding blocked files that deleting, moving or replacing it
///    takes along (`.github` for `.github/**`, `docs` for
///    `docs/CODEOWNERS` and `docs/*/CODEOWNERS`, `docs/a` for
///    `docs/**/CODEOWNERS`).
///
/// Rule 3 counts only a pattern that names one of the path's segments: a
/// pattern that reaches the path through `**` and `*` alone
/// (`**/.gitattributes` for `src`) could hold something below every
/// directory, and would refuse every path. Those files stay protected where
/// the path is checked by name (rules 1 and 2) and by the forge clients,
/// which delete and move only files that exist, never a directory.
#[derive(Debug, Clone)]
struct PathRules {
    patterns: Vec<String>,
    set: GlobSet,
    segments: Vec<Vec<Segment>>,
}

impl PathRules {
    /// `field` is the full name of the list, for error messages.
    fn compile(field: &str, patterns: &[String], errors: &mut Vec<FieldError>) -> Option<Self> {
        // `*` stops at `/`, as in .gitignore; `**` crosses directories.
        let before = errors.len();
        let set = compile_glob_set(field, patterns, true, errors);
        let mut segments = Vec::with_capacity(patterns.len());
        if set.is_some() {
            for (index, pattern) in patterns.iter().enumerate() {
                match split_segments(pattern) {
                    Ok(parts) => segments.push(parts),
                    Err(message) => {
                        errors.push(FieldError::new(format!("{field}[{index}]"), message));
                    }
                }
            }
        }
        let set = set?;
        (errors.len() == before).then(|| Self {
            patterns: patterns.to_vec(),
            set,
            segments,
        })
    }

    /// Why `path` (already syntactically valid) is refused, if it is.
    fn refusal(&self, path: &str) -> Option<String> {
        if let Some(&index) = self.set.matches(path).first() {
            return Some(format!(
                "is a blocked path (matches {:?})",
                self.patterns[index]
            ));
        }
        for (end, _) in path.match_indices('/') {
            let ancestor = &path[..end];
            if let Some(&index) = self.set.matches(ancestor).first() {
                return Some(format!(
                    "is inside {ancestor:?}, a blocked path (matches {:?})",
                    self.patterns[index]
                ));
            }
        }
        let names: Vec<&str> = path.split('/').collect();
        self.segments
            .iter()
            .position(|segments| may_hold(segments, &names))
            .map(|index| {
                format!(
                    "may be a directory holding blocked paths (matches {:?} below it)",
                    self.patterns[index]
                )
            })
    }
}

/// Splits a pattern at the `/` that separate segments. A `/` inside
/// `[...]` or `{...}` is refused: the segment rules could not see it.
fn split_segments(pattern: &str) -> Result<Vec<Segment>, String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut brackets = false;
    let mut braces = 0usize;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                continue;
            }
            '[' if !brackets => brackets = true,
            ']' if brackets => brackets = false,
            '{' if !brackets => braces += 1,
            '}' if !brackets => braces = braces.saturating_sub(1),
            '/' if brackets || braces > 0 => {
                return Err(format!(
                    "a '/' inside [...] or {{...}} is not supported in {pattern:?}; \
                     write the alternatives as separate patterns"
                ));
            }
            '/' => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|part| match part.as_str() {
            "**" => Ok(Segment::AnyDepth),
            "*" => Ok(Segment::AnyName),
            _ => build_glob(&part, true).map(|glob| Segment::Name(glob.compile_matcher())),
        })
        .collect()
}

/// Whether the pattern `segments` matches some path below the directory
/// `names`, having matched at least one of `names` by a [`Segment::Name`].
fn may_hold(segments: &[Segment], names: &[&str]) -> bool {
    // States: (segments consumed, some name matched by a named segment).
    let mut states = closure(segments, vec![(0, false)]);
    for name in names {
        let mut next = Vec::new();
        for &(at, named) in &states {
            match segments.get(at) {
                Some(Segment::AnyDepth) => next.push((at, named)),
                Some(Segment::AnyName) => next.push((at + 1, named)),
                Some(Segment::Name(matcher)) if matcher.is_match(name) => {
                    next.push((at + 1, true));
                }
                _ => {}
            }
        }
        states = closure(segments, next);
        if states.is_empty() {
            return false;
        }
    }
    states
        .iter()
        .any(|&(at, named)| named && at < segments.len())
}

/// Adds the states `**` reaches by matching no segment.
fn closure(segments: &[Segment], mut states: Vec<(usize, bool)>) -> Vec<(usize, bool)> {
    let mut index = 0;
    while index < states.len() {
        let (at, named) = states[index];
        if matches!(segments.get(at), Some(Segment::AnyDepth)) && !states.contains(&(at + 1, named))
        {
            states.push((at + 1, named));
        }
        index += 1;
    }
    states.sort_unstable();
    states.dedup();
    states
}

/// A `mr.submission.projects` entry, compiled.
#[derive(Debug, Clone)]
struct ProjectRules {
    key: String,
    matcher: GlobMatcher,
    paths: PathRules,
}

/// [`SubmissionConfig`] with its patterns compiled: what
/// [`parse_submission`](super::parse_submission) checks against.
#[derive(Debug, Clone)]
pub struct SubmissionRules {
    config: SubmissionConfig,
    blocked_paths: PathRules,
    projects: Vec<ProjectRules>,
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

    /// The `mr.submission.projects` key whose blocklist applies to
    /// `project`, if any: an exact key (ignoring case) first, else the
    /// matching glob with the most characters other than `*` and `?`, the
    /// first in key order among equals.
    pub fn project_entry(&self, project: &str) -> Option<&str> {
        self.project_rules(project).map(|rules| rules.key.as_str())
    }

    fn project_rules(&self, project: &str) -> Option<&ProjectRules> {
        if let Some(exact) = self
            .projects
            .iter()
            .find(|rules| rules.key.eq_ignore_ascii_case(project))
        {
            return Some(exact);
        }
        // `projects` is in key order, and `max_by_key` keeps the last of
        // equal keys: walk it backwards to keep the first.
        self.projects
            .iter()
            .rev()
            .filter(|rules| rules.matcher.is_match(project))
            .max_by_key(|rules| {
                rules
                    .key
                    .chars()
                    .filter(|c| !matches!(c, '*' | '?'))
                    .count()
            })
    }

    /// Why `path` may not be touched in `project` (the section's list when
    /// `project` is unknown), if it may not.
    pub(crate) fn blocked_path(&self, project: Option<&str>, path: &str) -> Option<String> {
        project
            .and_then(|project| self.project_rules(project))
            .map_or(&self.blocked_paths, |rules| &rules.paths)
            .refusal(path)
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
