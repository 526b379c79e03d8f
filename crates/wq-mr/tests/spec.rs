//! The submission schema: every refusal, what is accepted, the hashes, and
//! the configuration's compile errors.

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use wq_forge::{FileAction, FileOp};
use wq_mr::spec::{
    Automation, FieldError, MAX_ERRORS, MrSpec, SubmissionConfig, SubmissionRules, parse_submission,
};

/// A valid submission using every action.
fn base() -> Value {
    json!({
        "item_type": "mr",
        "forge": "gitlab",
        "project": "group/sub/name",
        "source_branch": "bot/bump-foo",
        "target_branch": "main",
        "title": "Bump foo to 1.2",
        "description": "Automated update.",
        "commit_message": "Bump foo to 1.2\n\nAutomated.",
        "labels": ["bot", "deps"],
        "file_actions": [
            {"action": "update", "file_path": "foo.spec", "content": "Version: 1.2\n"},
            {"action": "create", "file_path": "docs/hello.txt", "content": "aGVsbG8K", "encoding": "base64"},
            {"action": "delete", "file_path": "old.txt"},
            {"action": "move", "file_path": "new/name.txt", "previous_path": "old/name.txt"},
            {"action": "chmod", "file_path": "run.sh", "execute_filemode": true}
        ],
        "automation": {"auto_merge": false}
    })
}

fn set(body: &mut Value, pointer: &str, value: Value) {
    *body
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the base submission")) = value;
}

fn insert(body: &mut Value, pointer: &str, key: &str, value: Value) {
    body.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {pointer:?}"))
        .insert(key.to_owned(), value);
}

fn remove(body: &mut Value, pointer: &str, key: &str) {
    body.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {pointer:?}"))
        .remove(key)
        .unwrap_or_else(|| panic!("no {key} at {pointer:?}"));
}

fn push_action(body: &mut Value, action: Value) {
    body["file_actions"].as_array_mut().unwrap().push(action);
}

#[derive(Debug, Clone, Copy)]
enum Rules {
    Default,
    /// 10-byte files, 15 bytes in all, 6 actions.
    Small,
    Binary,
}

static DEFAULT_RULES: LazyLock<SubmissionRules> = LazyLock::new(|| Rules::Default.compile());
static SMALL_RULES: LazyLock<SubmissionRules> = LazyLock::new(|| Rules::Small.compile());
static BINARY_RULES: LazyLock<SubmissionRules> = LazyLock::new(|| Rules::Binary.compile());

impl Rules {
    fn get(self) -> &'static SubmissionRules {
        match self {
            Rules::Default => &DEFAULT_RULES,
            Rules::Small => &SMALL_RULES,
            Rules::Binary => &BINARY_RULES,
        }
    }

    fn compile(self) -> SubmissionRules {
        let config = match self {
            Rules::Default => SubmissionConfig::default(),
            Rules::Small => SubmissionConfig {
                max_file_bytes: 10,
                max_total_bytes: 15,
                max_actions: 6,
                ..SubmissionConfig::default()
            },
            Rules::Binary => SubmissionConfig {
                allow_binary: true,
                ..SubmissionConfig::default()
            },
        };
        config.compile().expect("test rules compile")
    }
}

fn parse(body: &Value, rules: Rules) -> Result<MrSpec, Vec<FieldError>> {
    parse_submission(body, rules.get())
}

/// A change to [`base`].
type Edit = fn(&mut Value);

struct Refusal {
    name: &'static str,
    edit: Edit,
    rules: Rules,
    field: &'static str,
    fragment: &'static str,
}

const fn refusal(
    name: &'static str,
    edit: Edit,
    field: &'static str,
    fragment: &'static str,
) -> Refusal {
    Refusal {
        name,
        edit,
        rules: Rules::Default,
        field,
        fragment,
    }
}

const fn refusal_with(
    name: &'static str,
    rules: Rules,
    edit: Edit,
    field: &'static str,
    fragment: &'static str,
) -> Refusal {
    Refusal {
        name,
        edit,
        rules,
        field,
        fragment,
    }
}

#[rustfmt::skip]
fn refusals() -> Vec<Refusal> {
    vec![
        // The body and its keys.
        refusal("body not an object", |b| *b = json!([1]), "body", "expected a JSON object"),
        refusal("unknown top-level field", |b| insert(b, "", "idempotency_key", json!("k")), "idempotency_key", "unknown field"),
        refusal("unknown action field", |b| insert(b, "/file_actions/0", "last_commit_id", json!("abc")), "file_actions[0].last_commit_id", "unknown field"),
        refusal("unknown automation field", |b| insert(b, "/automation", "merge_now", json!(true)), "automation.merge_now", "unknown field"),
        // Required fields and types.
        refusal("forge missing", |b| remove(b, "", "forge"), "forge", "required"),
        refusal("forge empty", |b| set(b, "/forge", json!("")), "forge", "empty"),
        refusal("project missing", |b| remove(b, "", "project"), "project", "required"),
        refusal("source_branch missing", |b| remove(b, "", "source_branch"), "source_branch", "required"),
        refusal("target_branch missing", |b| remove(b, "", "target_branch"), "target_branch", "required"),
        refusal("title missing", |b| remove(b, "", "title"), "title", "required"),
        refusal("title null", |b| set(b, "/title", Value::Null), "title", "required"),
        refusal("file_actions missing", |b| remove(b, "", "file_actions"), "file_actions", "required"),
        refusal("file_actions empty", |b| set(b, "/file_actions", json!([])), "file_actions", "at least one"),
        refusal("title not a string", |b| set(b, "/title", json!(7)), "title", "expected a string, got a number"),
        refusal("project not a string", |b| set(b, "/project", json!(["g", "n"])), "project", "expected a string, got an array"),
        refusal("labels not an array", |b| set(b, "/labels", json!("bot")), "labels", "expected an array of strings, got a string"),
        refusal("label not a string", |b| set(b, "/labels/1", json!(1)), "labels[1]", "expected a string"),
        refusal("label null", |b| set(b, "/labels/0", Value::Null), "labels[0]", "expected a string, got null"),
        refusal("content not a string", |b| set(b, "/file_actions/1/content", json!({"text": "x"})), "file_actions[1].content", "expected a string, got an object"),
        refusal("automation not an object", |b| set(b, "/automation", json!(true)), "automation", "expected an object"),
        refusal("auto_merge not a boolean", |b| set(b, "/automation/auto_merge", json!("yes")), "automation.auto_merge", "expected a boolean"),
        refusal("file_actions not an array", |b| set(b, "/file_actions", json!({})), "file_actions", "expected an array, got an object"),
        refusal("file action not an object", |b| set(b, "/file_actions/2", json!("delete")), "file_actions[2]", "expected an object"),
        refusal("execute_filemode not a boolean", |b| set(b, "/file_actions/4/execute_filemode", json!("755")), "file_actions[4].execute_filemode", "expected a boolean"),
        // Project.
        refusal("project one segment", |b| set(b, "/project", json!("name")), "project", "path like"),
        refusal("project dot-dot", |b| set(b, "/project", json!("group/../name")), "project", "'..'"),
        refusal("project empty segment", |b| set(b, "/project", json!("group//name")), "project", "empty segments"),
        refusal("project leading slash", |b| set(b, "/project", json!("/group/name")), "project", "'/'"),
        refusal("project odd characters", |b| set(b, "/project", json!("group/na me")), "project", "may only contain"),
        // Title, description, commit message.
        refusal("title blank", |b| set(b, "/title", json!("  ")), "title", "blank"),
        refusal("title control character", |b| set(b, "/title", json!("Bump\nfoo")), "title", "control characters"),
        refusal("title too long", |b| set(b, "/title", json!("t".repeat(256))), "title", "at most 255 characters"),
        refusal("description too long", |b| set(b, "/description", json!("d".repeat(64 * 1024 + 1))), "description", "at most 65536 bytes"),
        refusal("description NUL", |b| set(b, "/description", json!("a\u{0}b")), "description", "NUL"),
        refusal("commit message blank", |b| set(b, "/commit_message", json!("\n")), "commit_message", "blank"),
        // Labels.
        refusal("label empty", |b| set(b, "/labels/0", json!("")), "labels[0]", "blank"),
        refusal("label comma", |b| set(b, "/labels/0", json!("a,b")), "labels[0]", "comma"),
        refusal("label control character", |b| set(b, "/labels/1", json!("a\tb")), "labels[1]", "control characters"),
        refusal("label duplicate", |b| set(b, "/labels/1", json!("bot")), "labels[1]", "duplicate of labels[0]"),
        refusal(
            "too many labels",
            |b| {
                set(
                    b,
                    "/labels",
                    json!((0..51).map(|i| format!("l{i}")).collect::<Vec<_>>()),
                )
            },
            "labels",
            "at most 50 labels",
        ),
        // Branches: git's check-ref-format --branch rules.
        refusal("branch dot-dot", |b| set(b, "/source_branch", json!("bot/a..b")), "source_branch", "'..'"),
        refusal("branch space", |b| set(b, "/source_branch", json!("bot/a b")), "source_branch", "space"),
        refusal("branch control character", |b| set(b, "/source_branch", json!("bot/a\u{1}b")), "source_branch", "control characters"),
        refusal("branch tilde", |b| set(b, "/source_branch", json!("bot~1")), "source_branch", "'~'"),
        refusal("branch caret", |b| set(b, "/source_branch", json!("bot^")), "source_branch", "'^'"),
        refusal("branch colon", |b| set(b, "/source_branch", json!("bot:x")), "source_branch", "':'"),
        refusal("branch question mark", |b| set(b, "/source_branch", json!("bot?")), "source_branch", "'?'"),
        refusal("branch star", |b| set(b, "/source_branch", json!("bot*")), "source_branch", "'*'"),
        refusal("branch bracket", |b| set(b, "/source_branch", json!("bot[1]")), "source_branch", "'['"),
        refusal("branch backslash", |b| set(b, "/source_branch", json!("bot\\x")), "source_branch", "'\\'"),
        refusal("branch leading dash", |b| set(b, "/source_branch", json!("-bot")), "source_branch", "'-'"),
        refusal("branch leading slash", |b| set(b, "/source_branch", json!("/bot")), "source_branch", "'/'"),
        refusal("branch trailing slash", |b| set(b, "/source_branch", json!("bot/")), "source_branch", "'/'"),
        refusal("branch double slash", |b| set(b, "/source_branch", json!("bot//x")), "source_branch", "'//'"),
        refusal("branch component dot", |b| set(b, "/source_branch", json!("bot/.x")), "source_branch", "start with '.'"),
        refusal("branch component .lock", |b| set(b, "/source_branch", json!("bot.lock/x")), "source_branch", ".lock"),
        refusal("branch trailing dot", |b| set(b, "/source_branch", json!("bot.")), "source_branch", "end with '.'"),
        refusal("branch at-brace", |b| set(b, "/source_branch", json!("bot@{1}")), "source_branch", "'@{'"),
        refusal("branch at", |b| set(b, "/source_branch", json!("@")), "source_branch", "'@'"),
        refusal("branch too long", |b| set(b, "/source_branch", json!("b".repeat(256))), "source_branch", "at most 255 bytes"),
        refusal("target branch refused by git", |b| set(b, "/target_branch", json!("main.lock")), "target_branch", ".lock"),
        refusal("source equals target", |b| set(b, "/target_branch", json!("bot/bump-foo")), "source_branch", "must differ from target_branch"),
        refusal("source protected", |b| set(b, "/source_branch", json!("release/1.2")), "source_branch", "protected branch (matches \"release/*\")"),
        refusal("source protected, nested", |b| set(b, "/source_branch", json!("release/1.2/fix")), "source_branch", "protected branch"),
        refusal("source protected, other case", |b| set(b, "/source_branch", json!("Master")), "source_branch", "protected branch (matches \"master\")"),
        // File actions: vocabulary.
        refusal("unknown action", |b| set(b, "/file_actions/0/action", json!("rename")), "file_actions[0].action", "unknown action \"rename\""),
        refusal("action missing", |b| remove(b, "/file_actions/0", "action"), "file_actions[0].action", "required"),
        refusal("file_path missing", |b| remove(b, "/file_actions/2", "file_path"), "file_actions[2].file_path", "required"),
        refusal("create without content", |b| remove(b, "/file_actions/1", "content"), "file_actions[1].content", "required for create"),
        refusal("update without content", |b| remove(b, "/file_actions/0", "content"), "file_actions[0].content", "required for update"),
        refusal("move without previous_path", |b| remove(b, "/file_actions/3", "previous_path"), "file_actions[3].previous_path", "required for move"),
        refusal("move onto itself", |b| set(b, "/file_actions/3/previous_path", json!("new/name.txt")), "file_actions[3].previous_path", "must differ from file_path"),
        refusal("previous_path on update", |b| insert(b, "/file_actions/0", "previous_path", json!("x.spec")), "file_actions[0].previous_path", "only allowed on move"),
        refusal("content on delete", |b| insert(b, "/file_actions/2", "content", json!("x")), "file_actions[2].content", "not allowed on delete"),
        refusal("content on chmod", |b| insert(b, "/file_actions/4", "content", json!("x")), "file_actions[4].content", "not allowed on chmod"),
        refusal("chmod without execute_filemode", |b| remove(b, "/file_actions/4", "execute_filemode"), "file_actions[4].execute_filemode", "required for chmod"),
        refusal("chmod with null execute_filemode", |b| set(b, "/file_actions/4/execute_filemode", Value::Null), "file_actions[4].execute_filemode", "required for chmod"),
        refusal("execute_filemode on delete", |b| insert(b, "/file_actions/2", "execute_filemode", json!(false)), "file_actions[2].execute_filemode", "not allowed on delete"),
        refusal("unknown encoding", |b| set(b, "/file_actions/1/encoding", json!("hex")), "file_actions[1].encoding", "unknown encoding \"hex\""),
        refusal("invalid base64", |b| set(b, "/file_actions/1/content", json!("not base64!")), "file_actions[1].content", "invalid base64"),
        refusal("base64 without padding", |b| set(b, "/file_actions/1/content", json!("aGVsbG8")), "file_actions[1].content", "invalid base64"),
        // File actions: paths.
        refusal("absolute path", |b| set(b, "/file_actions/0/file_path", json!("/etc/passwd")), "file_actions[0].file_path", "relative"),
        refusal("dot-dot segment", |b| set(b, "/file_actions/0/file_path", json!("a/../../etc/passwd")), "file_actions[0].file_path", "'..'"),
        refusal("dot segment", |b| set(b, "/file_actions/0/file_path", json!("./foo.spec")), "file_actions[0].file_path", "'.'"),
        refusal("empty segment", |b| set(b, "/file_actions/0/file_path", json!("a//foo.spec")), "file_actions[0].file_path", "empty segments"),
        refusal("trailing slash", |b| set(b, "/file_actions/0/file_path", json!("a/")), "file_actions[0].file_path", "empty segments"),
        refusal("backslash", |b| set(b, "/file_actions/0/file_path", json!("a\\foo.spec")), "file_actions[0].file_path", "'\\'"),
        refusal(".git component", |b| set(b, "/file_actions/0/file_path", json!(".git/config")), "file_actions[0].file_path", ".git component"),
        refusal(
            ".git component, other case",
            |b| {
                set(
                    b,
                    "/file_actions/0/file_path",
                    json!("sub/.GIT/hooks/pre-commit"),
                )
            },
            "file_actions[0].file_path",
            ".git component",
        ),
        refusal(".git component in previous_path", |b| set(b, "/file_actions/3/previous_path", json!(".Git/HEAD")), "file_actions[3].previous_path", ".git component"),
        refusal("NUL in path", |b| set(b, "/file_actions/0/file_path", json!("foo\u{0}.spec")), "file_actions[0].file_path", "NUL"),
        refusal("control character in path", |b| set(b, "/file_actions/0/file_path", json!("foo\n.spec")), "file_actions[0].file_path", "control characters"),
        refusal("path too long", |b| set(b, "/file_actions/0/file_path", json!("p".repeat(4097))), "file_actions[0].file_path", "at most 4096 bytes"),
        refusal("duplicate path", |b| set(b, "/file_actions/2/file_path", json!("foo.spec")), "file_actions[2].file_path", "duplicate path: also named by file_actions[0].file_path"),
        refusal("duplicate path via previous_path", |b| set(b, "/file_actions/3/previous_path", json!("old.txt")), "file_actions[3].previous_path", "duplicate path: also named by file_actions[2].file_path"),
        // File actions: the blocklist.
        refusal("blocked .gitlab-ci.yml", |b| set(b, "/file_actions/0/file_path", json!(".gitlab-ci.yml")), "file_actions[0].file_path", "blocked path (matches \".gitlab-ci.yml\")"),
        refusal("blocked, other case", |b| set(b, "/file_actions/0/file_path", json!(".GitLab-CI.YML")), "file_actions[0].file_path", "blocked path"),
        refusal(
            "blocked workflow",
            |b| {
                set(
                    b,
                    "/file_actions/1/file_path",
                    json!(".github/workflows/ci.yml"),
                )
            },
            "file_actions[1].file_path",
            "blocked path (matches \".github/**\")",
        ),
        refusal(
            "blocked GitLab CI include",
            |b| {
                set(
                    b,
                    "/file_actions/1/file_path",
                    json!(".gitlab/ci/build.yml"),
                )
            },
            "file_actions[1].file_path",
            "blocked path",
        ),
        refusal("blocked CODEOWNERS", |b| set(b, "/file_actions/0/file_path", json!("CODEOWNERS")), "file_actions[0].file_path", "blocked path"),
        refusal(
            "blocked nested .gitattributes",
            |b| {
                set(
                    b,
                    "/file_actions/0/file_path",
                    json!("sub/dir/.gitattributes"),
                )
            },
            "file_actions[0].file_path",
            "blocked path (matches \"**/.gitattributes\")",
        ),
        refusal("blocked delete", |b| set(b, "/file_actions/2/file_path", json!(".gitlab-ci.yml")), "file_actions[2].file_path", "blocked path"),
        refusal("blocked move source", |b| set(b, "/file_actions/3/previous_path", json!("Jenkinsfile")), "file_actions[3].previous_path", "blocked path (matches \"Jenkinsfile\")"),
        refusal("blocked .gitmodules", |b| set(b, "/file_actions/4/file_path", json!(".gitmodules")), "file_actions[4].file_path", "blocked path"),
        // The blocklist holds for ancestors and descendants: a path inside a
        // blocked file, or a directory that may hold blocked files, of every
        // action kind, in file_path and previous_path.
        refusal("delete a blocked directory", |b| set(b, "/file_actions/2/file_path", json!(".github")), "file_actions[2].file_path", "may be a directory holding blocked paths (matches \".github/**\" below it)"),
        refusal("delete a blocked directory, other case", |b| set(b, "/file_actions/2/file_path", json!(".GitHub")), "file_actions[2].file_path", "may be a directory holding blocked paths"),
        refusal("move from a blocked directory", |b| set(b, "/file_actions/3/previous_path", json!(".github")), "file_actions[3].previous_path", "matches \".github/**\" below it"),
        refusal("move onto a blocked directory", |b| set(b, "/file_actions/3/file_path", json!(".gitlab")), "file_actions[3].file_path", "matches \".gitlab/**\" below it"),
        refusal("create a file named like a blocked directory", |b| set(b, "/file_actions/1/file_path", json!(".github")), "file_actions[1].file_path", "may be a directory holding blocked paths"),
        refusal("update a blocked directory", |b| set(b, "/file_actions/0/file_path", json!(".tekton")), "file_actions[0].file_path", "matches \".tekton/**\" below it"),
        refusal("chmod a blocked directory", |b| set(b, "/file_actions/4/file_path", json!(".circleci")), "file_actions[4].file_path", "matches \".circleci/**\" below it"),
        refusal("create below CODEOWNERS", |b| set(b, "/file_actions/1/file_path", json!("CODEOWNERS/x")), "file_actions[1].file_path", "is inside \"CODEOWNERS\", a blocked path (matches \"CODEOWNERS\")"),
        refusal("create below .gitlab-ci.yml", |b| set(b, "/file_actions/1/file_path", json!(".gitlab-ci.yml/x")), "file_actions[1].file_path", "is inside \".gitlab-ci.yml\", a blocked path"),
        refusal("move from below a blocked file", |b| set(b, "/file_actions/3/previous_path", json!("Jenkinsfile/a/b")), "file_actions[3].previous_path", "is inside \"Jenkinsfile\""),
        refusal("create below a nested .gitattributes", |b| set(b, "/file_actions/1/file_path", json!("src/.gitattributes/x")), "file_actions[1].file_path", "is inside \"src/.gitattributes\", a blocked path (matches \"**/.gitattributes\")"),
        refusal("delete a directory that may hold a blocked file", |b| set(b, "/file_actions/2/file_path", json!("docs")), "file_actions[2].file_path", "matches \"docs/CODEOWNERS\" below it"),
        refusal("move a directory that may hold a blocked file", |b| set(b, "/file_actions/3/previous_path", json!("Docs")), "file_actions[3].previous_path", "matches \"docs/CODEOWNERS\" below it"),
        refusal("delete a blocked directory's parent", |b| set(b, "/file_actions/2/file_path", json!(".devcontainer")), "file_actions[2].file_path", "matches \".devcontainer/**\" below it"),
        // The default blocklist's later additions.
        refusal("blocked .lfsconfig", |b| set(b, "/file_actions/0/file_path", json!(".lfsconfig")), "file_actions[0].file_path", "blocked path (matches \".lfsconfig\")"),
        refusal("blocked renovate.json", |b| set(b, "/file_actions/0/file_path", json!("renovate.json")), "file_actions[0].file_path", "blocked path (matches \"renovate.json\")"),
        refusal("blocked renovate.json5", |b| set(b, "/file_actions/0/file_path", json!("renovate.json5")), "file_actions[0].file_path", "blocked path (matches \"renovate.json5\")"),
        refusal("blocked .renovaterc", |b| set(b, "/file_actions/0/file_path", json!(".renovaterc")), "file_actions[0].file_path", "blocked path (matches \".renovaterc*\")"),
        refusal("blocked .renovaterc.json5", |b| set(b, "/file_actions/1/file_path", json!(".renovaterc.json5")), "file_actions[1].file_path", "blocked path (matches \".renovaterc*\")"),
        refusal("blocked .mergify.yml", |b| set(b, "/file_actions/2/file_path", json!(".mergify.yml")), "file_actions[2].file_path", "blocked path (matches \".mergify.yml\")"),
        refusal("blocked .mergify/config.yml", |b| set(b, "/file_actions/1/file_path", json!(".mergify/config.yml")), "file_actions[1].file_path", "blocked path (matches \".mergify/**\")"),
        refusal("blocked .kodiak.toml", |b| set(b, "/file_actions/0/file_path", json!(".kodiak.toml")), "file_actions[0].file_path", "blocked path (matches \".kodiak.toml\")"),
        refusal("blocked devcontainer", |b| set(b, "/file_actions/1/file_path", json!(".devcontainer/devcontainer.json")), "file_actions[1].file_path", "blocked path (matches \".devcontainer/**\")"),
        refusal("blocked .devcontainer.json", |b| set(b, "/file_actions/1/file_path", json!(".devcontainer.json")), "file_actions[1].file_path", "blocked path (matches \".devcontainer.json\")"),
        refusal("blocked azure-pipelines.yml", |b| set(b, "/file_actions/0/file_path", json!("azure-pipelines.yml")), "file_actions[0].file_path", "blocked path (matches \"azure-pipelines.y*ml\")"),
        refusal("blocked azure-pipelines.yaml", |b| set(b, "/file_actions/0/file_path", json!("Azure-Pipelines.yaml")), "file_actions[0].file_path", "blocked path (matches \"azure-pipelines.y*ml\")"),
        // Unicode format characters (category Cf) in names.
        refusal("source branch with U+202E", |b| set(b, "/source_branch", json!("bot/\u{202e}lmth.exe")), "source_branch", "Unicode format characters (found U+202E)"),
        refusal("source branch with U+200B", |b| set(b, "/source_branch", json!("bot/bump\u{200b}")), "source_branch", "U+200B"),
        refusal("target branch with U+FEFF", |b| set(b, "/target_branch", json!("\u{feff}main")), "target_branch", "Unicode format characters (found U+FEFF)"),
        refusal("target branch with U+2066", |b| set(b, "/target_branch", json!("ma\u{2066}in")), "target_branch", "U+2066"),
        refusal("file_path with U+202E", |b| set(b, "/file_actions/0/file_path", json!("src/\u{202e}sr.bil")), "file_actions[0].file_path", "Unicode format characters (found U+202E)"),
        refusal("file_path with a soft hyphen", |b| set(b, "/file_actions/1/file_path", json!("docs/he\u{ad}llo.txt")), "file_actions[1].file_path", "U+00AD"),
        refusal("previous_path with U+200F", |b| set(b, "/file_actions/3/previous_path", json!("old/\u{200f}name.txt")), "file_actions[3].previous_path", "U+200F"),
        refusal("previous_path with U+2060", |b| set(b, "/file_actions/3/previous_path", json!("old/na\u{2060}me.txt")), "file_actions[3].previous_path", "U+2060"),
        // File actions: content.
        refusal("binary content (NUL)", |b| set(b, "/file_actions/0/content", json!("a\u{0}b")), "file_actions[0].content", "binary content (a NUL byte)"),
        refusal("binary content (not UTF-8)", |b| set(b, "/file_actions/1/content", json!("/w==")), "file_actions[1].content", "binary content (not valid UTF-8)"),
        refusal(
            "private key",
            |b| {
                set(
                    b,
                    "/file_actions/0/content",
                    json!("x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n"),
                )
            },
            "file_actions[0].content",
            "blocked content pattern mr.submission.blocked_content[0]",
        ),
        refusal(
            "private key in base64",
            |b| {
                set(
                    b,
                    "/file_actions/1/content",
                    json!(STANDARD.encode("-----BEGIN OPENSSH PRIVATE KEY-----\n")),
                )
            },
            "file_actions[1].content",
            "mr.submission.blocked_content[0]",
        ),
        refusal_with(
            "file over the size limit",
            Rules::Small,
            |b| {
                set(b, "/file_actions/0/content", json!("12345678901"));
                set(b, "/file_actions/1/content", json!(""));
            },
            "file_actions[0].content",
            "11 bytes exceeds the limit of 10 bytes per file",
        ),
        refusal_with("total over the size limit", Rules::Small, |b| set(b, "/file_actions/0/content", json!("1234567890")), "file_actions", "total content of 16 bytes exceeds the limit of 15 bytes"),
        refusal_with(
            "too many actions",
            Rules::Small,
            |b| {
                push_action(b, json!({"action": "delete", "file_path": "x1"}));
                push_action(b, json!({"action": "delete", "file_path": "x2"}));
            },
            "file_actions",
            "at most 6 actions are allowed, got 7",
        ),
    ]
}

#[test]
fn every_refusal_names_its_field() {
    let mut failures = Vec::new();
    for case in refusals() {
        let mut body = base();
        (case.edit)(&mut body);
        match parse(&body, case.rules) {
            Ok(_) => failures.push(format!("{}: accepted", case.name)),
            Err(errors) => {
                let found = errors
                    .iter()
                    .any(|e| e.field == case.field && e.message.contains(case.fragment));
                if !found {
                    failures.push(format!(
                        "{}: expected `{}: ...{}...`, got {:?}",
                        case.name,
                        case.field,
                        case.fragment,
                        errors.iter().map(ToString::to_string).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn each_refusal_is_reported_alone() {
    // One bad field gives one error: no knock-on noise from the others.
    for case in refusals() {
        let mut body = base();
        (case.edit)(&mut body);
        if let Err(errors) = parse(&body, case.rules) {
            assert_eq!(errors.len(), 1, "{}: {errors:?}", case.name);
        }
    }
}

/// A private key never comes back in an error message.
#[test]
fn blocked_content_is_not_echoed() {
    let mut body = base();
    set(
        &mut body,
        "/file_actions/0/content",
        json!("-----BEGIN EC PRIVATE KEY-----\nsecretbits\n"),
    );
    let errors = parse(&body, Rules::Default).unwrap_err();
    let text = errors[0].to_string();
    assert!(text.contains("blocked_content[0]"), "{text}");
    assert!(
        !text.contains("secretbits") && !text.contains("BEGIN"),
        "{text}"
    );
}

#[test]
fn the_base_submission_is_accepted_as_domain_values() {
    let spec = parse(&base(), Rules::Default).expect("valid");
    assert_eq!(spec.forge, "gitlab");
    assert_eq!(spec.project, "group/sub/name");
    assert_eq!(spec.source_branch, "bot/bump-foo");
    assert_eq!(spec.target_branch, "main");
    assert_eq!(spec.title, "Bump foo to 1.2");
    assert_eq!(spec.description, "Automated update.");
    assert_eq!(spec.commit_message, "Bump foo to 1.2\n\nAutomated.");
    assert_eq!(spec.labels, ["bot", "deps"]);
    assert_eq!(
        spec.automation,
        Automation {
            auto_merge: false,
            ci_retry: true
        }
    );
    assert_eq!(
        spec.file_actions,
        vec![
            FileAction {
                op: FileOp::Update,
                path: "foo.spec".into(),
                previous_path: None,
                content: Some(b"Version: 1.2\n".to_vec()),
                execute_filemode: None,
            },
            FileAction {
                op: FileOp::Create,
                path: "docs/hello.txt".into(),
                previous_path: None,
                content: Some(b"hello\n".to_vec()),
                execute_filemode: None,
            },
            FileAction {
                op: FileOp::Delete,
                path: "old.txt".into(),
                previous_path: None,
                content: None,
                execute_filemode: None,
            },
            FileAction {
                op: FileOp::Move,
                path: "new/name.txt".into(),
                previous_path: Some("old/name.txt".into()),
                content: None,
                execute_filemode: None,
            },
            FileAction {
                op: FileOp::Chmod,
                path: "run.sh".into(),
                previous_path: None,
                content: None,
                execute_filemode: Some(true),
            },
        ]
    );
}

#[test]
fn optional_fields_take_their_defaults() {
    let mut body = base();
    for key in [
        "description",
        "commit_message",
        "labels",
        "automation",
        "item_type",
    ] {
        remove(&mut body, "", key);
    }
    let spec = parse(&body, Rules::Default).expect("valid");
    assert_eq!(spec.description, "");
    assert_eq!(spec.commit_message, spec.title);
    assert!(spec.labels.is_empty());
    assert_eq!(spec.automation, Automation::default());
    assert!(spec.automation.auto_merge && spec.automation.ci_retry);

    let mut body = base();
    set(&mut body, "/description", Value::Null);
    set(&mut body, "/labels", Value::Null);
    let spec = parse(&body, Rules::Default).expect("null counts as absent");
    assert_eq!(spec.description, "");
    assert!(spec.labels.is_empty());
}

#[test]
fn acceptance_cases() {
    let accepted: Vec<(&str, Edit, Rules)> = vec![
        (
            "a move that also updates",
            |b| insert(b, "/file_actions/3", "content", json!("moved\n")),
            Rules::Default,
        ),
        (
            "an empty file",
            |b| set(b, "/file_actions/1/content", json!("")),
            Rules::Default,
        ),
        (
            "base64 wrapped over lines",
            |b| set(b, "/file_actions/1/content", json!("aGVs\r\nbG8K\n")),
            Rules::Default,
        ),
        (
            "an executable new file",
            |b| insert(b, "/file_actions/1", "execute_filemode", json!(true)),
            Rules::Default,
        ),
        (
            "binary content when allowed",
            |b| {
                set(
                    b,
                    "/file_actions/1/content",
                    json!(STANDARD.encode([0u8, 159, 146, 150])),
                )
            },
            Rules::Binary,
        ),
        (
            "names that only look like blocked ones",
            |b| {
                set(
                    b,
                    "/file_actions/0/file_path",
                    json!("docs/gitlab-ci.yml.md"),
                );
                set(b, "/file_actions/1/file_path", json!("src/.github.rs"));
                set(b, "/file_actions/2/file_path", json!(".gitignore"));
                set(b, "/file_actions/3/file_path", json!("sub/CODEOWNERS"));
            },
            Rules::Default,
        ),
        (
            "directories that hold no blocked path, and names near blocked ones",
            |b| {
                // `**/.gitattributes` could match below any directory: it
                // refuses only by name (see SubmissionRules).
                set(b, "/file_actions/2/file_path", json!("src"));
                set(b, "/file_actions/0/file_path", json!("docs/guide.md"));
                set(b, "/file_actions/1/file_path", json!(".githubx/a"));
                set(
                    b,
                    "/file_actions/3/previous_path",
                    json!("renovate.json.md"),
                );
                set(b, "/file_actions/4/file_path", json!("azure-pipelines.txt"));
            },
            Rules::Default,
        ),
        (
            "a unicode path and branch without format characters",
            |b| {
                set(
                    b,
                    "/file_actions/0/file_path",
                    json!("docs/ünïcode/日本.txt"),
                );
                set(b, "/source_branch", json!("bot/ünïcode"));
            },
            Rules::Default,
        ),
        (
            "a protected name as a prefix only",
            |b| set(b, "/source_branch", json!("main-bump")),
            Rules::Default,
        ),
        (
            "the protected target branch",
            |b| set(b, "/target_branch", json!("release/2.0")),
            Rules::Default,
        ),
        (
            "a unicode title and label",
            |b| {
                set(b, "/title", json!("Mise à jour ✓"));
                set(b, "/labels/0", json!("priority::high"));
            },
            Rules::Default,
        ),
        (
            "fifty labels",
            |b| {
                set(
                    b,
                    "/labels",
                    json!((0..50).map(|i| format!("l{i}")).collect::<Vec<_>>()),
                )
            },
            Rules::Default,
        ),
        (
            "a GitHub project",
            |b| {
                set(b, "/forge", json!("github.com"));
                set(b, "/project", json!("owner/repo.rs"));
            },
            Rules::Default,
        ),
        (
            "the title at its limit",
            |b| set(b, "/title", json!("é".repeat(255))),
            Rules::Default,
        ),
        (
            "files at the size limit",
            |b| {
                set(b, "/file_actions/0/content", json!("123456789"));
                set(
                    b,
                    "/file_actions/1/content",
                    json!(STANDARD.encode("123456")),
                );
            },
            Rules::Small,
        ),
    ];
    for (name, edit, rules) in accepted {
        let mut body = base();
        edit(&mut body);
        if let Err(errors) = parse(&body, rules) {
            panic!("{name}: refused: {errors:?}");
        }
    }
}

#[test]
fn binary_content_is_kept_as_bytes_when_allowed() {
    let mut body = base();
    set(
        &mut body,
        "/file_actions/1/content",
        json!(STANDARD.encode([0u8, 255, 1])),
    );
    let spec = parse(&body, Rules::Binary).expect("valid");
    assert_eq!(
        spec.file_actions[1].content.as_deref(),
        Some(&[0u8, 255, 1][..])
    );
}

#[test]
fn every_error_is_reported_not_only_the_first() {
    let mut body = base();
    set(&mut body, "/title", json!(""));
    set(&mut body, "/project", json!("x"));
    set(&mut body, "/source_branch", json!("main"));
    set(&mut body, "/file_actions/0/file_path", json!("../x"));
    set(
        &mut body,
        "/file_actions/2/file_path",
        json!(".gitlab-ci.yml"),
    );
    insert(&mut body, "", "extra", json!(1));
    let errors = parse(&body, Rules::Default).unwrap_err();
    let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "extra",
            "file_actions[0].file_path",
            "file_actions[2].file_path",
            "project",
            "source_branch",
            "source_branch",
            "title",
        ],
        "{errors:?}"
    );
}

/// Unknown fields do not stop the reading: each is named by its path,
/// beside every rule the known fields break.
#[test]
fn every_unknown_field_is_named_by_its_path() {
    let mut body = base();
    insert(&mut body, "", "idempotency_key", json!({"nested": [1]}));
    insert(&mut body, "/automation", "merge_now", json!(true));
    insert(&mut body, "/file_actions/1", "mode", json!("100755"));
    insert(&mut body, "/file_actions/3", "last_commit_id", Value::Null);
    set(&mut body, "/title", json!(" "));
    let errors = parse(&body, Rules::Default).unwrap_err();
    let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "automation.merge_now",
            "file_actions[1].mode",
            "file_actions[3].last_commit_id",
            "idempotency_key",
            "title",
        ],
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .filter(|e| e.field != "title")
            .all(|e| e.message == "unknown field"),
        "{errors:?}"
    );
}

#[test]
fn errors_are_capped() {
    let mut body = base();
    let actions: Vec<Value> = (0..80)
        .map(|i| json!({"action": "create", "file_path": format!("/abs/{i}"), "content": ""}))
        .collect();
    set(&mut body, "/file_actions", Value::Array(actions));
    let errors = parse(&body, Rules::Default).unwrap_err();
    assert_eq!(errors.len(), MAX_ERRORS + 1);
    assert_eq!(errors[MAX_ERRORS].field, "body");
    assert_eq!(errors[MAX_ERRORS].message, "30 more errors not shown");
    assert_eq!(
        errors[0].to_string(),
        "file_actions[0].file_path: must be relative (no leading '/')"
    );
}

fn spec_of(body: &Value) -> MrSpec {
    parse(body, Rules::Binary).expect("valid")
}

#[test]
fn content_hash_is_the_same_for_text_and_base64() {
    let text = spec_of(&base());
    let mut body = base();
    set(
        &mut body,
        "/file_actions/0/content",
        json!(STANDARD.encode("Version: 1.2\n")),
    );
    insert(&mut body, "/file_actions/0", "encoding", json!("base64"));
    set(&mut body, "/file_actions/1/content", json!("hello\n"));
    remove(&mut body, "/file_actions/1", "encoding");
    let base64 = spec_of(&body);
    assert_ne!(text.file_actions, Vec::new());
    assert_eq!(text.content_hash(), base64.content_hash());
    assert_eq!(text.content_hash().len(), 64);
    assert!(text.content_hash().bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn content_hash_ignores_action_order() {
    let original = spec_of(&base());
    let mut body = base();
    body["file_actions"].as_array_mut().unwrap().reverse();
    let reversed = spec_of(&body);
    assert_ne!(original.file_actions, reversed.file_actions);
    assert_eq!(original.content_hash(), reversed.content_hash());
}

#[test]
fn content_hash_changes_with_the_content() {
    let original = spec_of(&base()).content_hash();
    let edits: Vec<(&str, Edit)> = vec![
        ("content", |b| {
            set(b, "/file_actions/0/content", json!("Version: 1.3\n"))
        }),
        ("empty content", |b| {
            set(b, "/file_actions/0/content", json!(""))
        }),
        ("path", |b| {
            set(b, "/file_actions/0/file_path", json!("bar.spec"))
        }),
        ("action", |b| {
            set(b, "/file_actions/0/action", json!("create"))
        }),
        ("previous path", |b| {
            set(b, "/file_actions/3/previous_path", json!("old/other.txt"))
        }),
        ("mode", |b| {
            set(b, "/file_actions/4/execute_filemode", json!(false))
        }),
        ("move content", |b| {
            insert(b, "/file_actions/3", "content", json!(""))
        }),
        ("one more action", |b| {
            push_action(b, json!({"action": "delete", "file_path": "z"}))
        }),
    ];
    for (name, edit) in edits {
        let mut body = base();
        edit(&mut body);
        assert_ne!(spec_of(&body).content_hash(), original, "{name}");
    }
}

#[test]
fn metadata_hash_follows_what_the_merge_request_shows() {
    let original = spec_of(&base());
    let changes: Vec<(&str, Edit)> = vec![
        ("target branch", |b| {
            set(b, "/target_branch", json!("develop"))
        }),
        ("title", |b| set(b, "/title", json!("Bump foo to 1.3"))),
        ("description", |b| set(b, "/description", json!("Other."))),
        ("commit message", |b| {
            set(b, "/commit_message", json!("Other"))
        }),
        ("labels", |b| set(b, "/labels", json!(["bot"]))),
        ("auto_merge", |b| {
            set(b, "/automation/auto_merge", json!(true))
        }),
        ("ci_retry", |b| {
            insert(b, "/automation", "ci_retry", json!(false))
        }),
    ];
    for (name, edit) in changes {
        let mut body = base();
        edit(&mut body);
        let changed = spec_of(&body);
        assert_ne!(changed.metadata_hash(), original.metadata_hash(), "{name}");
        assert_eq!(changed.content_hash(), original.content_hash(), "{name}");
    }

    let mut body = base();
    set(&mut body, "/labels", json!(["deps", "bot"]));
    set(&mut body, "/file_actions/0/content", json!("Version: 9\n"));
    set(&mut body, "/source_branch", json!("bot/other"));
    let reordered = spec_of(&body);
    assert_eq!(reordered.metadata_hash(), original.metadata_hash());
    assert_ne!(reordered.content_hash(), original.content_hash());
}

/// The names serialize as the plain strings they were before they had
/// types, and the file actions (kept as JSON by the store) round-trip.
#[test]
fn spec_serializes_as_plain_json_and_its_file_actions_round_trip() {
    let mut body = base();
    set(
        &mut body,
        "/file_actions/1/content",
        json!(STANDARD.encode([0u8, 255])),
    );
    let spec = spec_of(&body);
    let stored = serde_json::to_value(&spec).unwrap();
    for key in [
        "forge",
        "project",
        "source_branch",
        "target_branch",
        "title",
    ] {
        assert_eq!(stored[key], body[key], "{key}");
    }
    assert_eq!(stored["labels"], body["labels"]);
    let actions: Vec<FileAction> = serde_json::from_value(stored["file_actions"].clone()).unwrap();
    assert_eq!(actions, spec.file_actions);
    let loaded = MrSpec {
        file_actions: actions,
        ..spec.clone()
    };
    assert_eq!(loaded.content_hash(), spec.content_hash());
}

#[test]
fn config_compile_errors_name_the_field() {
    let config = SubmissionConfig {
        blocked_paths: vec!["a".into(), "b/**".into(), "c[".into()],
        protected_branches: vec!["release/{a,b".into()],
        blocked_content: vec!["ok".into(), "(unclosed".into()],
        max_actions: 0,
        max_file_bytes: 0,
        ..SubmissionConfig::default()
    };
    let errors = config.compile().unwrap_err().lines();
    let expected_prefixes = [
        "mr.submission.max_file_bytes: must be at least 1",
        "mr.submission.max_actions: must be at least 1",
        "mr.submission.blocked_paths[2]: invalid glob \"c[\"",
        "mr.submission.protected_branches[0]: invalid glob",
        "mr.submission.blocked_content[1]: invalid regular expression",
    ];
    assert_eq!(errors.len(), expected_prefixes.len(), "{errors:?}");
    for (error, prefix) in errors.iter().zip(expected_prefixes) {
        assert!(
            error.starts_with(prefix),
            "{error:?} should start with {prefix:?}"
        );
    }

    let empty = SubmissionConfig {
        blocked_paths: vec![" ".into()],
        blocked_content: vec![String::new()],
        ..SubmissionConfig::default()
    };
    assert_eq!(
        empty.compile().unwrap_err().lines(),
        [
            "mr.submission.blocked_paths[0]: must not be empty",
            "mr.submission.blocked_content[0]: must not be empty",
        ]
    );
}

#[test]
fn config_reads_partial_sections_and_refuses_unknown_keys() {
    let config: SubmissionConfig =
        serde_json::from_value(json!({"max_actions": 10, "protected_branches": ["prod"]})).unwrap();
    assert_eq!(config.max_actions, 10);
    assert_eq!(config.protected_branches, ["prod"]);
    assert_eq!(
        config.blocked_paths,
        SubmissionConfig::default().blocked_paths
    );

    let error = serde_json::from_value::<SubmissionConfig>(json!({"max_action": 3})).unwrap_err();
    assert!(
        error.to_string().contains("unknown field `max_action`"),
        "{error}"
    );

    // A configured list replaces the default one.
    let rules = config.compile().unwrap();
    let mut body = base();
    set(&mut body, "/source_branch", json!("master"));
    assert!(parse_submission(&body, &rules).is_ok());
    set(&mut body, "/source_branch", json!("prod"));
    let errors = parse_submission(&body, &rules).unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "source_branch: is a protected branch (matches \"prod\")"
    );
}

#[test]
fn default_rules_are_the_default_config() {
    let rules = SubmissionRules::default();
    assert_eq!(rules.config(), &SubmissionConfig::default());
    assert!(
        rules
            .config()
            .blocked_paths
            .iter()
            .any(|p| p == ".gitlab-ci.yml")
    );
}

/// A submission touching one path with `action` in `project`.
fn touching(project: &str, action: &str, path: &str) -> Value {
    let mut body = base();
    set(&mut body, "/project", json!(project));
    let item = match action {
        "create" | "update" => json!({"action": action, "file_path": path, "content": "x\n"}),
        "move_from" => json!({"action": "move", "file_path": "elsewhere/x", "previous_path": path}),
        "delete" => json!({"action": "delete", "file_path": path}),
        other => panic!("no such case {other}"),
    };
    set(&mut body, "/file_actions", json!([item]));
    body
}

/// The message refusing `path`, or `None` when every action kind accepts it.
fn path_refusal(rules: &SubmissionRules, project: &str, path: &str) -> Option<String> {
    let mut refused = Vec::new();
    for action in ["create", "update", "delete", "move_from"] {
        if let Err(errors) = parse_submission(&touching(project, action, path), rules) {
            assert_eq!(errors.len(), 1, "{action} {path}: {errors:?}");
            refused.push(errors[0].message.clone());
        }
    }
    match refused.len() {
        0 => None,
        4 => Some(refused.swap_remove(0)),
        _ => panic!("{path}: refused by some action kinds only: {refused:?}"),
    }
}

fn rules_with(blocked_paths: &[&str]) -> SubmissionRules {
    SubmissionConfig {
        blocked_paths: blocked_paths.iter().map(|p| (*p).to_owned()).collect(),
        ..SubmissionConfig::default()
    }
    .compile()
    .expect("rules compile")
}

#[test]
fn blocked_patterns_hold_for_ancestors_and_descendants() {
    // (pattern, path, refused with a message containing, or accepted).
    let cases: &[(&str, &str, Option<&str>)] = &[
        (".github/**", ".github", Some("below it")),
        (
            ".github/**",
            ".github/workflows",
            Some("blocked path (matches"),
        ),
        (".github/**", "x/.github", None),
        (".github/workflows/*", ".github", Some("below it")),
        (".github/workflows/*", ".github/workflows", Some("below it")),
        (".github/workflows/*", ".github/other", None),
        (
            ".github/workflows/*",
            ".github/workflows/ci.yml/x",
            Some("is inside"),
        ),
        (
            "CODEOWNERS",
            "CODEOWNERS/x/y",
            Some("is inside \"CODEOWNERS\""),
        ),
        ("CODEOWNERS", "docs", None),
        ("docs/CODEOWNERS", "docs", Some("below it")),
        ("docs/CODEOWNERS", "DOCS", Some("below it")),
        ("docs/CODEOWNERS", "docs/CODEOWNERS/x", Some("is inside")),
        ("docs/CODEOWNERS", "docs/x", None),
        ("docs/*/CODEOWNERS", "docs", Some("below it")),
        ("docs/*/CODEOWNERS", "docs/team", Some("below it")),
        ("docs/*/CODEOWNERS", "docs/team/readme.md", None),
        (
            "docs/*/CODEOWNERS",
            "docs/team/CODEOWNERS",
            Some("blocked path"),
        ),
        ("docs/*/CODEOWNERS", "src", None),
        ("docs/**/CODEOWNERS", "docs/a/b", Some("below it")),
        (
            "docs/**/CODEOWNERS",
            "docs/a/b/CODEOWNERS",
            Some("blocked path"),
        ),
        ("docs/**/CODEOWNERS", "src/a", None),
        ("*.d/CODEOWNERS", "conf.d", Some("below it")),
        ("*.d/CODEOWNERS", "conf", None),
        // Patterns that reach every directory through `**` or `*` alone
        // would refuse every path: they refuse by name only.
        ("**/CODEOWNERS", "docs", None),
        ("**/CODEOWNERS", "docs/CODEOWNERS", Some("blocked path")),
        ("**/CODEOWNERS", "docs/CODEOWNERS/x", Some("is inside")),
        ("*/CODEOWNERS", "README.md", None),
        ("**/.github/**", "a/b/.github", Some("below it")),
        ("**/.github/**", "a/b/.github/x", Some("blocked path")),
        ("**/.github/**", "a/b", None),
        ("{.tekton,.buildkite}/**", ".buildkite", Some("below it")),
    ];
    let mut failures = Vec::new();
    for (pattern, path, expected) in cases {
        let rules = rules_with(&[pattern]);
        let got = path_refusal(&rules, "group/name", path);
        let ok = match (expected, &got) {
            (None, None) => true,
            (Some(fragment), Some(message)) => {
                message.contains(fragment) && message.contains(&format!("{pattern:?}"))
            }
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{pattern} / {path}: expected {expected:?}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_slash_inside_brackets_or_braces_is_refused_in_blocked_paths() {
    let errors = SubmissionConfig {
        blocked_paths: vec!["ok".into(), "{a,b/c}".into()],
        ..SubmissionConfig::default()
    }
    .compile()
    .unwrap_err()
    .lines();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("mr.submission.blocked_paths[1]: a '/' inside"),
        "{errors:?}"
    );
}

fn project_config() -> SubmissionConfig {
    serde_json::from_value(json!({
        "projects": {
            "team/infra": {"blocked_paths": ["CODEOWNERS"]},
            "team/*": {"extra_blocked_paths": ["deploy/**"]},
            "team/infra-*": {"blocked_paths": [], "extra_blocked_paths": ["secrets/**"]},
            "team/**": {"blocked_paths": ["nothing-here"]},
        }
    }))
    .expect("config reads")
}

#[test]
fn per_project_blocklists_replace_or_extend_and_the_most_specific_wins() {
    let rules = project_config().compile().expect("compiles");
    // (project, entry that applies, path, refused).
    let cases: &[(&str, Option<&str>, &str, bool)] = &[
        // Exact entry: its list replaces the section's (and "team/*" does
        // not add to it).
        ("team/infra", Some("team/infra"), ".gitlab-ci.yml", false),
        ("team/infra", Some("team/infra"), "CODEOWNERS", true),
        ("team/infra", Some("team/infra"), "deploy/x", false),
        // Matched ignoring case.
        (
            "Team/Infra",
            Some("team/infra"),
            ".github/workflows/ci.yml",
            false,
        ),
        ("Team/Infra", Some("team/infra"), "codeowners", true),
        // A glob entry extends the section's list.
        ("team/app", Some("team/*"), "deploy/prod.yml", true),
        ("team/app", Some("team/*"), "deploy", true),
        ("team/app", Some("team/*"), ".gitlab-ci.yml", true),
        ("team/app", Some("team/*"), "src/main.rs", false),
        // The longest matching glob wins over a shorter one.
        ("team/infra-db", Some("team/infra-*"), "secrets/key", true),
        (
            "team/infra-db",
            Some("team/infra-*"),
            ".gitlab-ci.yml",
            false,
        ),
        ("team/infra-db", Some("team/infra-*"), "deploy/x", false),
        // `*` stays within a segment; `**` crosses.
        ("team/sub/app", Some("team/**"), ".gitlab-ci.yml", false),
        ("team/sub/app", Some("team/**"), "nothing-here", true),
        // No entry: the section's list.
        ("other/app", None, ".gitlab-ci.yml", true),
        ("other/app", None, "deploy/x", false),
    ];
    for (project, entry, path, refused) in cases {
        assert_eq!(rules.project_entry(project), *entry, "{project}");
        let got = path_refusal(&rules, project, path);
        assert_eq!(got.is_some(), *refused, "{project} {path}: {got:?}");
    }
}

#[test]
fn per_project_entries_refuse_typos_and_name_the_key() {
    let error = serde_json::from_value::<SubmissionConfig>(json!({
        "projects": {"team/infra": {"blocked_path": ["x"]}}
    }))
    .unwrap_err()
    .to_string();
    assert!(error.contains("unknown field `blocked_path`"), "{error}");

    let error = serde_json::from_value::<SubmissionConfig>(json!({
        "projects": {"team/infra": ["x"]}
    }))
    .unwrap_err()
    .to_string();
    assert!(error.contains("invalid type"), "{error}");

    let config: SubmissionConfig = serde_json::from_value(json!({
        "projects": {
            "team/empty": {},
            "team/[": {"extra_blocked_paths": ["x"]},
            "team/bad": {"blocked_paths": ["ok", "c["], "extra_blocked_paths": ["", "{a/b,c}"]},
        }
    }))
    .unwrap();
    assert_eq!(
        config.compile().unwrap_err().lines(),
        [
            "mr.submission.projects[\"team/[\"]: invalid glob \"team/[\": unclosed character class; missing ']'",
            "mr.submission.projects[\"team/bad\"].blocked_paths[1]: invalid glob \"c[\": unclosed character class; missing ']'",
            "mr.submission.projects[\"team/bad\"].extra_blocked_paths[0]: must not be empty",
            "mr.submission.projects[\"team/empty\"]: sets neither blocked_paths nor extra_blocked_paths",
        ]
    );
}
