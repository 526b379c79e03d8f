//! The rules a submission's values follow, as garde validators over the
//! wire types ([`super::wire`]). Each reports at the path of the value it
//! refuses (`file_actions[3].file_path`), and every refusal is reported, not
//! only the first. A value refused by one rule is left alone by the rules
//! that build on it (a malformed path is not also checked against the
//! blocklist), so one mistake gives one refusal. Settings known only at run
//! time (limits, blocklists, protected branches) come from the
//! [`SubmissionRules`] in the [`Scope`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use garde::Validate;
use wq_forge::FileOp;

use super::config::SubmissionRules;
use super::names::{BranchName, NameError, ProjectPath, RepoPath, check_forge};
use super::wire::{self, FileActions, Flag, Labels, Object, Text, WireFileAction, WireSubmission};

/// Most labels on one submission.
pub const MAX_LABELS: usize = 50;
/// Longest label in characters (GitLab's limit).
pub const MAX_LABEL_CHARS: usize = 255;
/// Bytes git looks at to decide whether content is binary.
const BINARY_SNIFF_BYTES: usize = 8000;

/// What the rules check a submission against.
pub(super) struct Scope<'a> {
    pub rules: &'a SubmissionRules,
    /// The submission's project when it is valid: its blocklist applies
    /// (the section's when the project itself is refused).
    pub project: Option<&'a str>,
}

impl<'a> Scope<'a> {
    pub fn new(rules: &'a SubmissionRules, submission: &'a WireSubmission<'_>) -> Self {
        let project = submission
            .project
            .as_deref()
            .filter(|project| ProjectPath::check(project).is_ok());
        Self { rules, project }
    }
}

/// A member that may be missing or `null`.
type Member<'a> = Option<Text<'a>>;

fn refuse(message: impl Into<String>) -> garde::Error {
    garde::Error::new(message.into())
}

/// A member given, or `required`.
fn given<'v>(value: &'v Member<'_>) -> Result<&'v str, garde::Error> {
    value.as_deref().ok_or_else(|| refuse("required"))
}

/// A member that is required and passes `check`.
fn required_and(
    value: &Member<'_>,
    check: impl FnOnce(&str) -> Result<(), String>,
) -> garde::Result {
    check(given(value)?).map_err(refuse)
}

/// A member that may be left out, and passes `check` when given.
fn optional_and(
    value: &Member<'_>,
    check: impl FnOnce(&str) -> Result<(), String>,
) -> garde::Result {
    value.as_deref().map_or(Ok(()), check).map_err(refuse)
}

/// A name type's check, its refusal as the message.
fn name_check(check: fn(&str) -> Result<(), NameError>) -> impl Fn(&str) -> Result<(), String> {
    move |value| check(value).map_err(|error| error.to_string())
}

/// A member that is not a string (an array, an object) and is required.
pub(super) fn required<T>(value: &Option<T>, _scope: &Scope<'_>) -> garde::Result {
    value.as_ref().map(drop).ok_or_else(|| refuse("required"))
}

pub(super) fn forge(value: &Member<'_>, _scope: &Scope<'_>) -> garde::Result {
    required_and(value, check_forge)
}

pub(super) fn project(value: &Member<'_>, _scope: &Scope<'_>) -> garde::Result {
    required_and(value, name_check(ProjectPath::check))
}

pub(super) fn branch(value: &Member<'_>, _scope: &Scope<'_>) -> garde::Result {
    required_and(value, name_check(BranchName::check))
}

/// A branch member that passes [`branch`].
fn valid_branch<'v>(value: &'v Member<'_>) -> Option<&'v str> {
    value
        .as_deref()
        .filter(|name| BranchName::check(name).is_ok())
}

/// `source_branch` names another branch than `target`, whatever the ASCII
/// case (refs that differ only in case collide on case-insensitive file
/// systems).
pub(super) fn differs_from<'t>(
    target: &'t Member<'_>,
) -> impl FnOnce(&Member<'_>, &Scope<'_>) -> garde::Result + 't {
    move |source, _scope| match (valid_branch(source), valid_branch(target)) {
        (Some(source), Some(target)) if source.eq_ignore_ascii_case(target) => {
            Err(refuse("must differ from target_branch"))
        }
        _ => Ok(()),
    }
}

/// `source_branch` is none of `mr.submission.protected_branches`.
pub(super) fn unprotected(value: &Member<'_>, scope: &Scope<'_>) -> garde::Result {
    match valid_branch(value).and_then(|source| scope.rules.protected_branch(source)) {
        Some(pattern) => Err(refuse(format!(
            "is a protected branch (matches {pattern:?})"
        ))),
        None => Ok(()),
    }
}

pub(super) fn title(value: &Member<'_>, scope: &Scope<'_>) -> garde::Result {
    let max_chars = scope.rules.config().max_title_chars;
    required_and(value, |title| {
        if title.trim().is_empty() {
            return Err("must not be blank".to_owned());
        }
        if title.chars().any(char::is_control) {
            return Err("must not contain control characters (it is one line)".to_owned());
        }
        let chars = title.chars().count();
        if chars > max_chars {
            return Err(format!(
                "must be at most {max_chars} characters, got {chars}"
            ));
        }
        Ok(())
    })
}

pub(super) fn description(value: &Member<'_>, scope: &Scope<'_>) -> garde::Result {
    let max_bytes = scope.rules.config().max_description_bytes;
    optional_and(value, |text| long_text(text, max_bytes))
}

/// Left out, the commit message is the title.
pub(super) fn commit_message(value: &Member<'_>, scope: &Scope<'_>) -> garde::Result {
    let max_bytes = scope.rules.config().max_description_bytes;
    optional_and(value, |text| {
        if text.trim().is_empty() {
            return Err("must not be blank (leave it out to use the title)".to_owned());
        }
        long_text(text, max_bytes)
    })
}

fn long_text(text: &str, max_bytes: usize) -> Result<(), String> {
    if text.contains('\0') {
        return Err("must not contain NUL bytes".to_owned());
    }
    if text.len() > max_bytes {
        return Err(format!(
            "must be at most {max_bytes} bytes, got {}",
            text.len()
        ));
    }
    Ok(())
}

/// At most [`MAX_LABELS`]; each one line without a comma, none twice.
impl<'a> Validate for Labels<'a> {
    type Context = Scope<'a>;

    fn validate_into(
        &self,
        _scope: &Scope<'a>,
        mut parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        let labels = &self.0;
        if labels.len() > MAX_LABELS {
            let message = format!(
                "at most {MAX_LABELS} labels are allowed, got {}",
                labels.len()
            );
            report.append(parent(), refuse(message));
            return;
        }
        let mut first_index: HashMap<&str, usize> = HashMap::new();
        for (index, label) in labels.iter().enumerate() {
            let mut path = garde::util::nested_path!(parent, index);
            let refusal = match label_rules(label) {
                Err(message) => Some(message),
                Ok(()) => match first_index.entry(label) {
                    Entry::Occupied(first) => Some(format!("duplicate of labels[{}]", first.get())),
                    Entry::Vacant(slot) => {
                        slot.insert(index);
                        None
                    }
                },
            };
            if let Some(message) = refusal {
                report.append(path(), refuse(message));
            }
        }
    }
}

fn label_rules(label: &str) -> Result<(), String> {
    if label.trim().is_empty() {
        return Err("must not be blank".to_owned());
    }
    if label.contains(',') {
        return Err("must not contain a comma (forges separate labels with commas)".to_owned());
    }
    if label.chars().any(char::is_control) {
        return Err("must not contain control characters".to_owned());
    }
    let chars = label.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(format!(
            "must be at most {MAX_LABEL_CHARS} characters, got {chars}"
        ));
    }
    Ok(())
}

/// One to `max_actions` actions, each valid ([`WireFileAction`]), no path
/// touched by two of them, at most `max_total_bytes` of content in all.
impl<'a> Validate for FileActions<'a> {
    type Context = Scope<'a>;

    fn validate_into(
        &self,
        scope: &Scope<'a>,
        mut parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        let actions = &self.0;
        let limits = scope.rules.config();
        if actions.is_empty() {
            report.append(parent(), refuse("must contain at least one action"));
            return;
        }
        if actions.len() > limits.max_actions {
            let message = format!(
                "at most {} actions are allowed, got {}",
                limits.max_actions,
                actions.len()
            );
            report.append(parent(), refuse(message));
            return;
        }
        // Every path an action touches, with the field that named it first.
        let mut first_named: HashMap<&str, String> = HashMap::new();
        let mut total_bytes = 0u64;
        for (index, Object(action)) in actions.iter().enumerate() {
            let mut path = garde::util::nested_path!(parent, index);
            action.validate_into(scope, &mut path, report);
            for (key, touched) in touched_paths(action, scope) {
                let field = path().join(key);
                match first_named.entry(touched) {
                    Entry::Occupied(first) => {
                        let message = format!("duplicate path: also named by {}", first.get());
                        report.append(field, refuse(message));
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(field.to_string());
                    }
                }
            }
            if let Some(Ok(bytes)) = action.decoded() {
                total_bytes = total_bytes.saturating_add(bytes.len() as u64);
            }
        }
        if total_bytes > limits.max_total_bytes {
            let message = format!(
                "total content of {total_bytes} bytes exceeds the limit of {} bytes",
                limits.max_total_bytes
            );
            report.append(parent(), refuse(message));
        }
    }
}

pub(super) fn action(value: &Member<'_>, _scope: &Scope<'_>) -> garde::Result {
    required_and(value, |action| match wire::file_op(action) {
        Some(_) => Ok(()),
        None => Err(format!(
            "unknown action {}; expected one of create, update, delete, move, chmod",
            quote(action)
        )),
    })
}

pub(super) fn file_path(value: &Member<'_>, scope: &Scope<'_>) -> garde::Result {
    touchable(given(value)?, scope).map(drop).map_err(refuse)
}

pub(super) fn previous_path<'v>(
    action: &'v WireFileAction<'_>,
) -> impl FnOnce(&Member<'_>, &Scope<'_>) -> garde::Result + 'v {
    move |_value, scope| previous_path_rules(action, scope).map(drop).map_err(refuse)
}

/// `previous_path`: only on a move, where it is required; another path
/// than `file_path`, and touchable. `None` when left out.
fn previous_path_rules<'v>(
    action: &'v WireFileAction<'_>,
    scope: &Scope<'_>,
) -> Result<Option<&'v str>, String> {
    let op = action.op();
    match action.previous_path.as_deref() {
        Some(_) if op.is_some_and(|op| op != FileOp::Move) => {
            Err("only allowed on move".to_owned())
        }
        Some(previous) if valid_file_path(action, scope) == Some(previous) => {
            Err("must differ from file_path".to_owned())
        }
        Some(previous) => touchable(previous, scope).map(Some),
        None if op == Some(FileOp::Move) => Err("required for move".to_owned()),
        None => Ok(None),
    }
}

fn valid_file_path<'v>(action: &'v WireFileAction<'_>, scope: &Scope<'_>) -> Option<&'v str> {
    action
        .file_path
        .as_deref()
        .and_then(|path| touchable(path, scope).ok())
}

/// The paths an action touches that pass their own rules, by member name,
/// for the rule that no two actions touch one path.
fn touched_paths<'v>(
    action: &'v WireFileAction<'_>,
    scope: &Scope<'_>,
) -> impl Iterator<Item = (&'static str, &'v str)> {
    let file_path = valid_file_path(action, scope).map(|path| ("file_path", path));
    let previous_path = previous_path_rules(action, scope)
        .ok()
        .flatten()
        .map(|path| ("previous_path", path));
    file_path.into_iter().chain(previous_path)
}

/// A path an action may touch: valid, and not blocked for the project
/// (the path itself, its ancestors, what it may hold).
fn touchable<'v>(path: &'v str, scope: &Scope<'_>) -> Result<&'v str, String> {
    RepoPath::check(path).map_err(|error| error.to_string())?;
    match scope.rules.blocked_path(scope.project, path) {
        Some(reason) => Err(reason),
        None => Ok(path),
    }
}

pub(super) fn encoding(value: &Member<'_>, _scope: &Scope<'_>) -> garde::Result {
    optional_and(value, |name| match wire::encoding(name) {
        Some(_) => Ok(()),
        None => Err(format!(
            "unknown encoding {}; expected \"text\" or \"base64\"",
            quote(name)
        )),
    })
}

/// `content`: required to create or update, refused on a delete or chmod;
/// when given, it decodes, fits `max_file_bytes`, is text unless binary
/// content is allowed, and matches no blocked content pattern.
pub(super) fn content<'v>(
    action: &'v WireFileAction<'_>,
) -> impl FnOnce(&Member<'_>, &Scope<'_>) -> garde::Result + 'v {
    move |value, scope| match (action.op(), value) {
        (Some(op @ (FileOp::Create | FileOp::Update)), None) => {
            Err(refuse(format!("required for {}", op.as_str())))
        }
        (Some(op @ (FileOp::Delete | FileOp::Chmod)), Some(_)) => {
            Err(refuse(format!("not allowed on {}", op.as_str())))
        }
        _ => match action.decoded() {
            Some(Ok(bytes)) => content_rules(bytes, scope.rules).map_err(refuse),
            Some(Err(message)) => Err(refuse(message.clone())),
            None => Ok(()),
        },
    }
}

/// Size, binary and blocked-content rules over decoded content.
fn content_rules(bytes: &[u8], rules: &SubmissionRules) -> Result<(), String> {
    let limits = rules.config();
    let size = bytes.len() as u64;
    if size > limits.max_file_bytes {
        return Err(format!(
            "{size} bytes exceeds the limit of {} bytes per file",
            limits.max_file_bytes
        ));
    }
    if !limits.allow_binary {
        let sniffed = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
        if sniffed.contains(&0) {
            return Err("binary content (a NUL byte) is not allowed".to_owned());
        }
        if std::str::from_utf8(bytes).is_err() {
            return Err("binary content (not valid UTF-8) is not allowed".to_owned());
        }
    }
    let matched = rules.blocked_content(bytes);
    if !matched.is_empty() {
        // Name the pattern, never echo the content: it may be a secret.
        let indexes: Vec<String> = matched.iter().map(usize::to_string).collect();
        return Err(format!(
            "matches blocked content pattern mr.submission.blocked_content[{}]",
            indexes.join(", ")
        ));
    }
    Ok(())
}

/// `execute_filemode`: required for chmod, refused on a delete.
pub(super) fn execute_filemode<'v>(
    action: &'v WireFileAction<'_>,
) -> impl FnOnce(&Option<Flag>, &Scope<'_>) -> garde::Result + 'v {
    move |value, _scope| match (action.op(), value) {
        (Some(FileOp::Chmod), None) => Err(refuse("required for chmod")),
        (Some(FileOp::Delete), Some(_)) => Err(refuse("not allowed on delete")),
        _ => Ok(()),
    }
}

/// A caller's value quoted for a message, cut to a sane length.
fn quote(value: &str) -> String {
    const MAX_CHARS: usize = 64;
    if value.chars().count() <= MAX_CHARS {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(MAX_CHARS).collect();
        format!("{cut:?}...")
    }
}
