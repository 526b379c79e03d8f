//! schemathesis (pinned in `schemathesis/requirements.txt`, installed from
//! PyPI by [`crate::python::virtualenv`]) against a running service: it
//! reads the service's OpenAPI document, generates requests from it and
//! checks every answer against it.

use std::path::Path;
use std::process::Command;

const REQUIREMENTS: &str = include_str!("../schemathesis/requirements.txt");

/// The checks a run makes: no 5xx, and every answer's status, content
/// type and body as the document says.
pub const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance";

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    /// The document's URL (`http://127.0.0.1:PORT/api/openapi.json`).
    pub schema_url: &'a str,
    /// Sent with every request (`Authorization: Bearer ...`).
    pub headers: Vec<(&'a str, String)>,
    /// Test cases per operation and phase.
    pub max_examples: u32,
    /// Fixed, so that a failure repeats.
    pub seed: u64,
    /// Values some parameters always take (`("path.id", "<a real id>")`),
    /// so that the operations reach what lies behind an existing
    /// resource rather than its 404.
    pub parameters: Vec<(&'a str, String)>,
    /// Only the operations whose path matches this regular expression
    /// (all when `None`).
    pub paths: Option<&'a str>,
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// What a run printed.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    pub output: String,
    /// Its JUnit report: one `<testcase name="GET /path">` per operation
    /// tested.
    pub junit: String,
}

/// Runs schemathesis once (the virtualenv under `root`) and returns its
/// exit status and output; the caller asserts.
pub fn run(root: &Path, settings: &Run<'_>) -> Outcome {
    let venv = crate::python::virtualenv(root, "schemathesis", REQUIREMENTS);
    let report = root.join(format!(
        "schemathesis-{}-{}.xml",
        std::process::id(),
        settings.seed
    ));
    let _ = std::fs::remove_file(&report);
    let config = root.join(format!(
        "schemathesis-{}-{}.toml",
        std::process::id(),
        settings.seed
    ));
    let mut toml = String::from("[parameters]\n");
    for (name, value) in &settings.parameters {
        toml.push_str(&format!("{} = {}\n", quoted(name), quoted(value)));
    }
    std::fs::write(&config, toml).expect("the schemathesis config written");
    let mut command = Command::new(venv.join("bin/python"));
    command
        .args(["-m", "schemathesis.cli", "--no-color", "--config-file"])
        .arg(&config)
        .args(["run", settings.schema_url])
        .args(
            settings
                .paths
                .map(|regex| ["--include-path-regex", regex])
                .into_iter()
                .flatten(),
        )
        .args(["--checks", CHECKS])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", &settings.max_examples.to_string()])
        .args(["--seed", &settings.seed.to_string()])
        .args(["--workers", "1"])
        .args(["--request-timeout", "20"])
        .args(["--report", "junit", "--report-junit-path"])
        .arg(&report)
        .current_dir(root);
    for (name, value) in &settings.headers {
        command.args(["--header", &format!("{name}: {value}")]);
    }
    let output = command.output().unwrap_or_else(|error| {
        panic!("could not run schemathesis: {error} (needs python3 3.11+ with venv and pip)")
    });
    let junit = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(&config);
    Outcome {
        junit,
        success: output.status.success(),
        output: format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}
