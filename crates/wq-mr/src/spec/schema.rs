//! The JSON Schema (2020-12) of a submission, for the API's OpenAPI
//! document ([`wq_core::ItemType::submission_schema`]). It says what the
//! wire types ([`super::wire`]) read and the limits the configured
//! [`SubmissionRules`] set; what a schema cannot say (paths against the
//! blocklists, secrets in content, branch name grammar) is left to
//! [`super::parse_submission`], whose answer names the field. The tests
//! hold the schema to the parser: every member it names is read, no other
//! member is, and its example passes.

use serde_json::{Value, json};

use super::{
    MAX_BRANCH_BYTES, MAX_FORGE_BYTES, MAX_LABEL_CHARS, MAX_LABELS, MAX_PATH_BYTES,
    MAX_PROJECT_BYTES, SubmissionRules,
};

/// The schema of an `mr` submission under `rules`, for the forges named
/// `forges` (the configured instances; any name when empty).
pub fn submission_schema(rules: &SubmissionRules, forges: &[&str]) -> Value {
    let config = rules.config();
    let text = |max_bytes: usize, description: &str| {
        // JSON Schema counts characters; a byte limit is at least that many.
        json!({"type": "string", "minLength": 1, "maxLength": max_bytes, "description": description})
    };
    let mut forge = text(MAX_FORGE_BYTES, "A configured forge instance.");
    if !forges.is_empty() {
        forge["enum"] = json!(forges);
    }
    let file_action = json!({
        "type": "object",
        "description": "One change to the source branch, in order.",
        "required": ["action", "file_path"],
        "additionalProperties": false,
        "properties": {
            "action": {"type": "string", "enum": ["create", "update", "delete", "move", "chmod"]},
            "file_path": text(MAX_PATH_BYTES, "A repository path, relative, without `..`."),
            "previous_path": text(MAX_PATH_BYTES, "For `move`: the path the file had."),
            "encoding": {"type": "string", "enum": ["text", "base64"], "default": "text"},
            "content": {
                "type": "string",
                "description": format!(
                    "The whole new content (create, update; optional for move), decoded at most \
                     {} bytes; all files together at most {} bytes.",
                    config.max_file_bytes, config.max_total_bytes
                ),
            },
            "execute_filemode": {"type": "boolean", "description": "For `chmod` (and create, update, move): the executable bit."},
        },
    });
    json!({
        "type": "object",
        "title": "MrSubmission",
        "description": "The desired state of one merge request (GitLab) or pull request (GitHub), \
                        identified by forge, project and source branch. A later submission for \
                        the same branch updates it.",
        "required": ["item_type", "forge", "project", "source_branch", "target_branch", "title", "file_actions"],
        "additionalProperties": false,
        "properties": {
            "item_type": {"type": "string", "const": crate::TYPE_NAME},
            "forge": forge,
            "project": text(MAX_PROJECT_BYTES, "The project path (`group/name`) or GitHub `owner/repo`."),
            "source_branch": text(MAX_BRANCH_BYTES, "The branch workqueue writes; not a protected one."),
            "target_branch": text(MAX_BRANCH_BYTES, "The branch to merge into; differs from source_branch."),
            "title": {
                "type": "string",
                "minLength": 1,
                "maxLength": config.max_title_chars,
                "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*\\S[^\\u0000-\\u001f\\u007f-\\u009f]*$",
                "description": "One line, not blank.",
            },
            "description": {"type": "string", "maxLength": config.max_description_bytes},
            "commit_message": {
                "type": "string",
                "minLength": 1,
                "maxLength": config.max_description_bytes,
                "description": "Left out, the title.",
            },
            "labels": {
                "type": "array",
                "maxItems": MAX_LABELS,
                "uniqueItems": true,
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS, "pattern": "^[^,\\u0000-\\u001f\\u007f-\\u009f]*\\S[^,\\u0000-\\u001f\\u007f-\\u009f]*$"},
            },
            "automation": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "auto_merge": {"type": "boolean", "default": true, "description": "Merge when every gate holds."},
                    "ci_retry": {"type": "boolean", "default": true, "description": "Retry CI jobs that failed for infrastructure reasons."},
                },
            },
            "file_actions": {
                "type": "array",
                "minItems": 1,
                "maxItems": config.max_actions,
                "items": file_action,
            },
        },
        "examples": [example(forges.first().copied().unwrap_or("gitlab"))],
    })
}

/// A submission that passes the default rules.
fn example(forge: &str) -> Value {
    json!({
        "item_type": crate::TYPE_NAME,
        "forge": forge,
        "project": "group/name",
        "source_branch": "bot/bump-foo",
        "target_branch": "main",
        "title": "Bump foo to 1.2",
        "labels": ["bot"],
        "file_actions": [
            {"action": "update", "file_path": "foo.spec", "content": "Version: 1.2\n"}
        ],
        "automation": {"auto_merge": true, "ci_retry": true},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{SubmissionConfig, parse_submission};

    fn rules() -> SubmissionRules {
        SubmissionConfig::default()
            .compile()
            .expect("default rules")
    }

    fn schema() -> Value {
        submission_schema(&rules(), &["gitlab"])
    }

    #[test]
    fn the_example_passes_the_parser() {
        let schema = schema();
        let example = &schema["examples"][0];
        let spec = parse_submission(example, &rules()).expect("the example is valid");
        assert_eq!(spec.title, "Bump foo to 1.2");
        assert_eq!(schema["required"].as_array().unwrap().len(), 7);
    }

    /// A value of the JSON type `schema` asks for.
    fn value_of(schema: &Value) -> Value {
        match schema["type"].as_str() {
            Some("array") => json!([]),
            Some("object") => json!({}),
            Some("boolean") => json!(true),
            _ => json!("x"),
        }
    }

    /// Every member the schema names is one the parser reads (no unknown
    /// member refused), at the top, in a file action and in `automation`.
    #[test]
    fn every_member_the_schema_names_is_read() {
        let schema = schema();
        let mut body = json!({});
        for (name, member) in schema["properties"].as_object().unwrap() {
            body[name] = value_of(member);
        }
        let mut action = json!({});
        for (name, member) in schema["properties"]["file_actions"]["items"]["properties"]
            .as_object()
            .unwrap()
        {
            action[name] = value_of(member);
        }
        body["file_actions"] = json!([action]);
        for (name, member) in schema["properties"]["automation"]["properties"]
            .as_object()
            .unwrap()
        {
            body["automation"][name] = value_of(member);
        }
        let errors = parse_submission(&body, &rules()).expect_err("values the rules refuse");
        assert!(!errors.is_empty());
        // Read: no member is unknown, none of the wrong JSON type.
        let unread: Vec<_> = errors
            .iter()
            .filter(|error| error.message == "unknown field" || error.message.contains(", got a"))
            .collect();
        assert!(unread.is_empty(), "{unread:?}");
    }

    /// The parser refuses what the schema leaves out
    /// (`additionalProperties: false` holds).
    #[test]
    fn a_member_the_schema_does_not_name_is_refused() {
        let schema = schema();
        for (path, patch) in [
            ("reviewers", json!({"reviewers": ["a"]})),
            (
                "file_actions[0].mode",
                json!({"file_actions": [{"action": "update", "file_path": "a", "content": "b", "mode": "x"}]}),
            ),
            ("automation.rebase", json!({"automation": {"rebase": true}})),
        ] {
            assert_eq!(schema_allows_extra(&schema, path), Some(false), "{path}");
            let mut body = schema["examples"][0].clone();
            for (key, value) in patch.as_object().unwrap() {
                body[key] = value.clone();
            }
            let errors = parse_submission(&body, &rules()).expect_err(path);
            assert!(
                errors.iter().any(|error| error.field == path),
                "{path}: {errors:?}"
            );
        }
    }

    /// `additionalProperties` of the object holding the member at `path`.
    fn schema_allows_extra(schema: &Value, path: &str) -> Option<bool> {
        let object = if path.starts_with("file_actions") {
            &schema["properties"]["file_actions"]["items"]
        } else if path.starts_with("automation") {
            &schema["properties"]["automation"]
        } else {
            schema
        };
        object["additionalProperties"].as_bool()
    }

    #[test]
    fn limits_come_from_the_rules() {
        let config = SubmissionConfig {
            max_actions: 7,
            max_title_chars: 40,
            ..SubmissionConfig::default()
        };
        let schema = submission_schema(&config.compile().unwrap(), &["gitlab", "github"]);
        assert_eq!(schema["properties"]["file_actions"]["maxItems"], 7);
        assert_eq!(schema["properties"]["title"]["maxLength"], 40);
        assert_eq!(
            schema["properties"]["forge"]["enum"],
            json!(["gitlab", "github"])
        );
        let any_forge = submission_schema(&rules(), &[]);
        assert!(any_forge["properties"]["forge"].get("enum").is_none());
    }
}
