//! [`parse_submission`]: a submission's JSON body into an [`MrSpec`], or
//! every refused field.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};
use wq_forge::{FileAction, FileOp};

use super::config::SubmissionRules;
use super::names::{check_branch, check_file_path, check_forge, check_project};
use super::{Automation, FieldError, MrSpec};

/// Most errors one answer lists; one more entry says that some were left
/// out.
pub const MAX_ERRORS: usize = 50;
/// Most labels on one submission.
pub const MAX_LABELS: usize = 50;
/// Longest label in characters (GitLab's limit).
pub const MAX_LABEL_CHARS: usize = 255;
/// Bytes git looks at to decide whether content is binary.
const BINARY_SNIFF_BYTES: usize = 8000;

const TOP_LEVEL_KEYS: &[&str] = &[
    "item_type",
    "forge",
    "project",
    "source_branch",
    "target_branch",
    "title",
    "description",
    "commit_message",
    "labels",
    "file_actions",
    "automation",
];
const ACTION_KEYS: &[&str] = &[
    "action",
    "file_path",
    "previous_path",
    "content",
    "encoding",
    "execute_filemode",
];
const AUTOMATION_KEYS: &[&str] = &["auto_merge", "ci_retry"];

/// Parses the JSON body of a submission whose `item_type` is already known
/// to be `mr` (the `item_type` key is ignored; any other unknown key is
/// refused). Returns every refused field, up to [`MAX_ERRORS`], each named
/// by its path (`file_actions[3].file_path`). Does not check that `forge`
/// names a configured forge.
pub fn parse_submission(body: &Value, rules: &SubmissionRules) -> Result<MrSpec, Vec<FieldError>> {
    let Some(object) = body.as_object() else {
        return Err(vec![FieldError::new(
            "body",
            format!("expected a JSON object, got {}", kind(body)),
        )]);
    };
    let mut errors = Errors::default();
    refuse_unknown_keys(object, TOP_LEVEL_KEYS, "", &mut errors);

    let limits = rules.config();
    let forge = field(
        object,
        "forge",
        Presence::Required,
        &mut errors,
        check_forge,
    );
    let project = field(
        object,
        "project",
        Presence::Required,
        &mut errors,
        check_project,
    );
    let source_branch = field(
        object,
        "source_branch",
        Presence::Required,
        &mut errors,
        check_branch,
    );
    let target_branch = field(
        object,
        "target_branch",
        Presence::Required,
        &mut errors,
        check_branch,
    );
    if let (Some(source), Some(target)) = (source_branch, target_branch)
        && source.eq_ignore_ascii_case(target)
    {
        errors.push("source_branch", "must differ from target_branch");
    }
    if let Some(source) = source_branch
        && let Some(pattern) = rules.protected_branch(source)
    {
        errors.push(
            "source_branch",
            format!("is a protected branch (matches {pattern:?})"),
        );
    }
    let title = field(object, "title", Presence::Required, &mut errors, |title| {
        check_title(title, limits.max_title_chars)
    });
    // An optional field that is refused leaves its default in place; the
    // error already makes the whole submission refused.
    let description = field(
        object,
        "description",
        Presence::Optional,
        &mut errors,
        |text| check_long_text(text, limits.max_description_bytes),
    )
    .unwrap_or("");
    let commit_message = field(
        object,
        "commit_message",
        Presence::Optional,
        &mut errors,
        |text| check_commit_message(text, limits.max_description_bytes),
    )
    .or(title);
    let labels = labels(object, &mut errors);
    let automation = automation(object, &mut errors);
    // The blocklist that applies is the project's (the section's when the
    // project itself is refused).
    let file_actions = file_actions(object, rules, project, &mut errors);

    match (
        forge,
        project,
        source_branch,
        target_branch,
        title,
        commit_message,
        labels,
        automation,
        file_actions,
    ) {
        (
            Some(forge),
            Some(project),
            Some(source_branch),
            Some(target_branch),
            Some(title),
            Some(commit_message),
            Some(labels),
            Some(automation),
            Some(file_actions),
        ) if errors.is_empty() => Ok(MrSpec {
            forge: forge.to_owned(),
            project: project.to_owned(),
            source_branch: source_branch.to_owned(),
            target_branch: target_branch.to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
            commit_message: commit_message.to_owned(),
            labels,
            file_actions,
            automation,
        }),
        _ => {
            debug_assert!(!errors.is_empty(), "a missing value was not reported");
            Err(errors.finish())
        }
    }
}

/// The refusals found so far, capped at [`MAX_ERRORS`].
#[derive(Default)]
struct Errors {
    list: Vec<FieldError>,
    left_out: usize,
}

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        if self.list.len() < MAX_ERRORS {
            self.list.push(FieldError::new(field, message));
        } else {
            self.left_out += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every refusal so far, shown or not.
    fn count(&self) -> usize {
        self.list.len() + self.left_out
    }

    fn finish(mut self) -> Vec<FieldError> {
        if self.left_out > 0 {
            let message = format!("{} more errors not shown", self.left_out);
            self.list.push(FieldError::new("body", message));
        }
        self.list
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Presence {
    Required,
    Optional,
}

/// `prefix` is the path of `object` followed by `.`, or empty at the top.
fn refuse_unknown_keys(
    object: &Map<String, Value>,
    known: &[&str],
    prefix: &str,
    errors: &mut Errors,
) {
    for key in object.keys() {
        if !known.contains(&key.as_str()) {
            errors.push(format!("{prefix}{key}"), "unknown field");
        }
    }
}

/// A string member; `null` counts as absent.
fn string<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    field: &str,
    presence: Presence,
    errors: &mut Errors,
) -> Option<&'a str> {
    match object.get(key) {
        None | Some(Value::Null) => {
            if presence == Presence::Required {
                errors.push(field, "required");
            }
            None
        }
        Some(Value::String(text)) => Some(text),
        Some(other) => {
            errors.push(field, format!("expected a string, got {}", kind(other)));
            None
        }
    }
}

/// A boolean member; `null` counts as absent.
fn boolean(
    object: &Map<String, Value>,
    key: &str,
    field: &str,
    errors: &mut Errors,
) -> Option<bool> {
    match object.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Bool(value)) => Some(*value),
        Some(other) => {
            errors.push(field, format!("expected a boolean, got {}", kind(other)));
            None
        }
    }
}

/// A string member that passes `check`; `None` when absent or refused.
fn field<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    presence: Presence,
    errors: &mut Errors,
    check: impl FnOnce(&str) -> Result<(), String>,
) -> Option<&'a str> {
    string(object, key, key, presence, errors)
        .and_then(|value| checked(key, value, check(value), errors))
}

fn checked<'a>(
    field: &str,
    value: &'a str,
    check: Result<(), String>,
    errors: &mut Errors,
) -> Option<&'a str> {
    match check {
        Ok(()) => Some(value),
        Err(message) => {
            errors.push(field, message);
            None
        }
    }
}

fn check_title(title: &str, max_chars: usize) -> Result<(), String> {
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
}

fn check_long_text(text: &str, max_bytes: usize) -> Result<(), String> {
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

fn check_commit_message(text: &str, max_bytes: usize) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("must not be blank (leave it out to use the title)".to_owned());
    }
    check_long_text(text, max_bytes)
}

fn labels(object: &Map<String, Value>, errors: &mut Errors) -> Option<Vec<String>> {
    let items = match object.get("labels") {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            errors.push(
                "labels",
                format!("expected an array of strings, got {}", kind(other)),
            );
            return None;
        }
    };
    if items.len() > MAX_LABELS {
        errors.push(
            "labels",
            format!(
                "at most {MAX_LABELS} labels are allowed, got {}",
                items.len()
            ),
        );
        return None;
    }
    let mut labels = Vec::with_capacity(items.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let field = format!("labels[{index}]");
        let Value::String(label) = item else {
            errors.push(field, format!("expected a string, got {}", kind(item)));
            ok = false;
            continue;
        };
        if let Err(message) = check_label(label) {
            errors.push(field, message);
            ok = false;
            continue;
        }
        if let Some(first) = seen.insert(label, index) {
            errors.push(field, format!("duplicate of labels[{first}]"));
            ok = false;
            continue;
        }
        labels.push(label.clone());
    }
    ok.then_some(labels)
}

fn check_label(label: &str) -> Result<(), String> {
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

fn automation(object: &Map<String, Value>, errors: &mut Errors) -> Option<Automation> {
    let members = match object.get("automation") {
        None | Some(Value::Null) => return Some(Automation::default()),
        Some(Value::Object(members)) => members,
        Some(other) => {
            errors.push(
                "automation",
                format!("expected an object, got {}", kind(other)),
            );
            return None;
        }
    };
    let before = errors.count();
    refuse_unknown_keys(members, AUTOMATION_KEYS, "automation.", errors);
    let defaults = Automation::default();
    let auto_merge = boolean(members, "auto_merge", "automation.auto_merge", errors);
    let ci_retry = boolean(members, "ci_retry", "automation.ci_retry", errors);
    (errors.count() == before).then(|| Automation {
        auto_merge: auto_merge.unwrap_or(defaults.auto_merge),
        ci_retry: ci_retry.unwrap_or(defaults.ci_retry),
    })
}

/// Running state over all file actions of one submission.
struct ActionsSeen<'a> {
    /// Every path an action touches, with the field that named it first.
    paths: HashMap<&'a str, String>,
    total_bytes: u64,
}

fn file_actions(
    object: &Map<String, Value>,
    rules: &SubmissionRules,
    project: Option<&str>,
    errors: &mut Errors,
) -> Option<Vec<FileAction>> {
    let items = match object.get("file_actions") {
        None | Some(Value::Null) => {
            errors.push("file_actions", "required");
            return None;
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            errors.push(
                "file_actions",
                format!("expected an array, got {}", kind(other)),
            );
            return None;
        }
    };
    let limits = rules.config();
    if items.is_empty() {
        errors.push("file_actions", "must contain at least one action");
        return None;
    }
    if items.len() > limits.max_actions {
        errors.push(
            "file_actions",
            format!(
                "at most {} actions are allowed, got {}",
                limits.max_actions,
                items.len()
            ),
        );
        return None;
    }

    let mut seen = ActionsSeen {
        paths: HashMap::new(),
        total_bytes: 0,
    };
    let mut actions = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if let Some(action) = file_action(index, item, rules, project, &mut seen, errors) {
            actions.push(action);
        }
    }
    if seen.total_bytes > limits.max_total_bytes {
        errors.push(
            "file_actions",
            format!(
                "total content of {} bytes exceeds the limit of {} bytes",
                seen.total_bytes, limits.max_total_bytes
            ),
        );
        return None;
    }
    (actions.len() == items.len()).then_some(actions)
}

fn file_action<'a>(
    index: usize,
    item: &'a Value,
    rules: &SubmissionRules,
    project: Option<&str>,
    seen: &mut ActionsSeen<'a>,
    errors: &mut Errors,
) -> Option<FileAction> {
    let prefix = format!("file_actions[{index}]");
    let field = |key: &str| format!("{prefix}.{key}");
    let Value::Object(members) = item else {
        errors.push(prefix, format!("expected an object, got {}", kind(item)));
        return None;
    };
    let errors_before = errors.count();
    refuse_unknown_keys(members, ACTION_KEYS, &format!("{prefix}."), errors);

    let op = string(
        members,
        "action",
        &field("action"),
        Presence::Required,
        errors,
    )
    .and_then(|action| {
        let op = parse_op(action);
        if op.is_none() {
            errors.push(
                field("action"),
                format!(
                    "unknown action {}; expected one of create, update, delete, move, chmod",
                    quote(action)
                ),
            );
        }
        op
    });

    let path = string(
        members,
        "file_path",
        &field("file_path"),
        Presence::Required,
        errors,
    )
    .and_then(|path| touched_path(path, field("file_path"), rules, project, seen, errors));

    let previous_path = match string(
        members,
        "previous_path",
        &field("previous_path"),
        Presence::Optional,
        errors,
    ) {
        Some(_) if op.is_some_and(|op| op != FileOp::Move) => {
            errors.push(field("previous_path"), "only allowed on move");
            None
        }
        Some(previous) if Some(previous) == path => {
            errors.push(field("previous_path"), "must differ from file_path");
            None
        }
        Some(previous) => touched_path(
            previous,
            field("previous_path"),
            rules,
            project,
            seen,
            errors,
        ),
        None => {
            if op == Some(FileOp::Move) {
                errors.push(field("previous_path"), "required for move");
            }
            None
        }
    };

    let encoding = match string(
        members,
        "encoding",
        &field("encoding"),
        Presence::Optional,
        errors,
    ) {
        None | Some("text") => Some(Encoding::Text),
        Some("base64") => Some(Encoding::Base64),
        Some(other) => {
            errors.push(
                field("encoding"),
                format!(
                    "unknown encoding {}; expected \"text\" or \"base64\"",
                    quote(other)
                ),
            );
            None
        }
    };

    let content_text = string(
        members,
        "content",
        &field("content"),
        Presence::Optional,
        errors,
    );
    let content = match (op, content_text) {
        (Some(op @ (FileOp::Create | FileOp::Update)), None) => {
            errors.push(field("content"), format!("required for {}", op.as_str()));
            None
        }
        (Some(op @ (FileOp::Delete | FileOp::Chmod)), Some(_)) => {
            errors.push(field("content"), format!("not allowed on {}", op.as_str()));
            None
        }
        (_, Some(text)) => encoding
            .and_then(|encoding| decode(text, encoding, &field("content"), errors))
            .and_then(|bytes| checked_content(bytes, &field("content"), rules, seen, errors)),
        (_, None) => None,
    };

    let execute_filemode = boolean(
        members,
        "execute_filemode",
        &field("execute_filemode"),
        errors,
    );
    let filemode_given = members
        .get("execute_filemode")
        .is_some_and(|value| !value.is_null());
    match op {
        // A value of the wrong type is already reported.
        Some(FileOp::Chmod) if !filemode_given => {
            errors.push(field("execute_filemode"), "required for chmod");
        }
        Some(FileOp::Delete) if filemode_given => {
            errors.push(field("execute_filemode"), "not allowed on delete");
        }
        _ => {}
    }

    if errors.count() != errors_before {
        return None;
    }
    Some(FileAction {
        op: op?,
        path: path?.to_owned(),
        previous_path: previous_path.map(str::to_owned),
        content,
        execute_filemode,
    })
}

fn parse_op(action: &str) -> Option<FileOp> {
    Some(match action {
        "create" => FileOp::Create,
        "update" => FileOp::Update,
        "delete" => FileOp::Delete,
        "move" => FileOp::Move,
        "chmod" => FileOp::Chmod,
        _ => return None,
    })
}

/// Checks a path an action touches: syntax, the project's blocklist (the
/// path, its ancestors, what it may hold), and that no other action touches
/// it.
fn touched_path<'a>(
    path: &'a str,
    field: String,
    rules: &SubmissionRules,
    project: Option<&str>,
    seen: &mut ActionsSeen<'a>,
    errors: &mut Errors,
) -> Option<&'a str> {
    if let Err(message) = check_file_path(path) {
        errors.push(field, message);
        return None;
    }
    if let Some(reason) = rules.blocked_path(project, path) {
        errors.push(field, reason);
        return None;
    }
    if let Some(first) = seen.paths.get(path) {
        errors.push(field, format!("duplicate path: also named by {first}"));
        return None;
    }
    seen.paths.insert(path, field);
    Some(path)
}

#[derive(Clone, Copy)]
enum Encoding {
    Text,
    Base64,
}

fn decode(text: &str, encoding: Encoding, field: &str, errors: &mut Errors) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Text => Some(text.as_bytes().to_vec()),
        Encoding::Base64 => {
            // Line breaks are tolerated: many encoders wrap at 76 columns.
            let compact: Vec<u8> = text
                .bytes()
                .filter(|b| !matches!(b, b'\r' | b'\n'))
                .collect();
            match STANDARD.decode(&compact) {
                Ok(bytes) => Some(bytes),
                Err(error) => {
                    errors.push(field, format!("invalid base64: {error}"));
                    None
                }
            }
        }
    }
}

/// Size, binary and blocked-content checks on decoded content.
fn checked_content(
    bytes: Vec<u8>,
    field: &str,
    rules: &SubmissionRules,
    seen: &mut ActionsSeen<'_>,
    errors: &mut Errors,
) -> Option<Vec<u8>> {
    let limits = rules.config();
    let size = bytes.len() as u64;
    seen.total_bytes = seen.total_bytes.saturating_add(size);
    if size > limits.max_file_bytes {
        errors.push(
            field,
            format!(
                "{size} bytes exceeds the limit of {} bytes per file",
                limits.max_file_bytes
            ),
        );
        return None;
    }
    if !limits.allow_binary {
        let sniffed = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
        if sniffed.contains(&0) {
            errors.push(field, "binary content (a NUL byte) is not allowed");
            return None;
        }
        if std::str::from_utf8(&bytes).is_err() {
            errors.push(field, "binary content (not valid UTF-8) is not allowed");
            return None;
        }
    }
    let matched = rules.blocked_content(&bytes);
    if !matched.is_empty() {
        // Name the pattern, never echo the content: it may be a secret.
        let indexes: Vec<String> = matched.iter().map(usize::to_string).collect();
        errors.push(
            field,
            format!(
                "matches blocked content pattern mr.submission.blocked_content[{}]",
                indexes.join(", ")
            ),
        );
        return None;
    }
    Some(bytes)
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

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
