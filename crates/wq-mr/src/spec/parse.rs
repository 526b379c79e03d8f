//! [`parse_submission`]: a submission's JSON body into an [`MrSpec`], or
//! every refused field. Three steps: read the wire form (serde: JSON types
//! and unknown fields, [`super::wire`]), check its rules (garde,
//! [`super::rules`]), and build the domain values from what passed.

use garde::Validate as _;
use serde_json::Value;
use wq_forge::FileAction;

use super::config::SubmissionRules;
use super::names::{BranchName, ProjectPath, RepoPath};
use super::rules::Scope;
use super::wire::{self, Object, WireFileAction, WireSubmission};
use super::{Automation, FieldError, MrSpec};

/// Most errors one answer lists; one more entry says that some were left
/// out.
pub const MAX_ERRORS: usize = 50;

/// Parses the JSON body of a submission whose `item_type` is already known
/// to be `mr` (the `item_type` key is not checked; any other unknown key is
/// refused). Returns every refused field, up to [`MAX_ERRORS`], each named
/// by its path (`file_actions[3].file_path`); a value of the wrong JSON type
/// stops the reading, so only the first such is named. Does not check that
/// `forge` names a configured forge.
pub fn parse_submission(body: &Value, rules: &SubmissionRules) -> Result<MrSpec, Vec<FieldError>> {
    if !body.is_object() {
        return Err(vec![FieldError::new(
            "body",
            format!("expected a JSON object, got {}", kind(body)),
        )]);
    }
    let mut errors = Vec::new();
    let wire = wire::read(body, &mut errors);
    if let Some(wire) = &wire
        && let Err(report) = wire.validate_with(&Scope::new(rules, wire))
    {
        errors.extend(
            report
                .into_inner()
                .into_iter()
                .map(|(path, error)| FieldError::new(path.to_string(), error.message())),
        );
    }
    match wire {
        Some(wire) if errors.is_empty() => wire.into_spec().map_err(|error| vec![error]),
        _ => Err(capped(errors)),
    }
}

/// The first [`MAX_ERRORS`] errors, and how many more there were.
fn capped(mut errors: Vec<FieldError>) -> Vec<FieldError> {
    if errors.len() > MAX_ERRORS {
        let message = format!("{} more errors not shown", errors.len() - MAX_ERRORS);
        errors.truncate(MAX_ERRORS);
        errors.push(FieldError::new("body", message));
    }
    errors
}

impl WireSubmission<'_> {
    /// The domain values of a submission whose rules passed. The names'
    /// constructors hold the same rules, so no refusal is expected here.
    fn into_spec(self) -> Result<MrSpec, FieldError> {
        let title = required(self.title.as_deref(), "title")?.to_owned();
        let defaults = Automation::default();
        let automation = match self.automation {
            Some(Object(automation)) => Automation {
                auto_merge: automation
                    .auto_merge
                    .map_or(defaults.auto_merge, |flag| flag.0),
                ci_retry: automation.ci_retry.map_or(defaults.ci_retry, |flag| flag.0),
            },
            None => defaults,
        };
        let file_actions = self
            .file_actions
            .map(|actions| actions.0)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(index, Object(action))| file_action(index, action))
            .collect::<Result<_, _>>()?;
        Ok(MrSpec {
            forge: required(self.forge.as_deref(), "forge")?.to_owned(),
            project: named(self.project.as_deref(), "project", ProjectPath::try_from)?,
            source_branch: named(
                self.source_branch.as_deref(),
                "source_branch",
                BranchName::try_from,
            )?,
            target_branch: named(
                self.target_branch.as_deref(),
                "target_branch",
                BranchName::try_from,
            )?,
            description: self.description.as_deref().unwrap_or_default().to_owned(),
            commit_message: self
                .commit_message
                .as_deref()
                .map_or_else(|| title.clone(), str::to_owned),
            title,
            labels: self
                .labels
                .map(|labels| labels.0.into_iter().map(|label| label.0.into_owned()))
                .into_iter()
                .flatten()
                .collect(),
            file_actions,
            automation,
        })
    }
}

fn file_action(index: usize, mut action: WireFileAction<'_>) -> Result<FileAction, FieldError> {
    let field = |key: &str| format!("file_actions[{index}].{key}");
    let path = |value: Option<&str>, key: &str| {
        named(value, &field(key), RepoPath::try_from).map(RepoPath::into_string)
    };
    let op = action
        .op()
        .ok_or_else(|| FieldError::new(field("action"), "required"))?;
    let content = action
        .take_decoded()
        .transpose()
        .map_err(|message| FieldError::new(field("content"), message))?;
    Ok(FileAction {
        op,
        path: path(action.file_path.as_deref(), "file_path")?,
        previous_path: match action.previous_path.as_deref() {
            Some(previous) => Some(path(Some(previous), "previous_path")?),
            None => None,
        },
        content,
        execute_filemode: action.execute_filemode.map(|flag| flag.0),
    })
}

fn required<'v>(value: Option<&'v str>, field: &str) -> Result<&'v str, FieldError> {
    value.ok_or_else(|| FieldError::new(field, "required"))
}

/// A required name built by its fallible constructor.
fn named<'v, T, E: ToString>(
    value: Option<&'v str>,
    field: &str,
    build: impl FnOnce(&'v str) -> Result<T, E>,
) -> Result<T, FieldError> {
    build(required(value, field)?).map_err(|error| FieldError::new(field, error.to_string()))
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
