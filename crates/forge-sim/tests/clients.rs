//! forge-sim judged by the forges' own client libraries: `tests/clients/check_clients.py` drives
//! a running simulator with python-gitlab and PyGithub (versions pinned in
//! `tests/clients/requirements.txt`) and must pass every check.
//!
//! The libraries live in a virtualenv under cargo's target tmp dir, keyed by the requirements'
//! hash, so only the first run (or a change of pins) installs them. Without python3, venv, pip
//! or PyPI the test fails and says which step failed; it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use forge_sim::testing::{TOKEN, start_sim};
use sha2::{Digest, Sha256};

/// The directory of the client check and its requirements.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs a command to its end; panics naming `what` when it cannot start or fails.
fn run(what: &str, command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|error| {
        panic!("{what}: could not run {command:?}: {error} (the client check needs python3 3.11+ with venv and pip)")
    });
    assert!(
        output.status.success(),
        "{what} failed ({}): {command:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    output
}

/// A virtualenv with the pinned client libraries, created once per requirements hash.
fn virtualenv() -> PathBuf {
    let requirements = clients_dir().join("requirements.txt");
    let pins = std::fs::read(&requirements).expect("requirements.txt is readable");
    let hash = hex::encode(Sha256::digest(&pins));
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = root.join(format!("forge-sim-clients-{}", &hash[..16]));
    let python = venv.join("bin/python");
    if venv.join("ready").exists() {
        return python;
    }
    // Built beside its final place and renamed into it, so a half-made one is never reused.
    let building = root.join(format!(
        "forge-sim-clients-{}-{}",
        &hash[..16],
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&building);
    let interpreter = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    run(
        "creating the virtualenv",
        Command::new(&interpreter)
            .args(["-m", "venv"])
            .arg(&building),
    );
    run(
        "installing the client libraries from PyPI",
        Command::new(building.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "-r",
            ])
            .arg(&requirements),
    );
    std::fs::write(building.join("ready"), &pins).expect("marker written");
    if std::fs::rename(&building, &venv).is_err() {
        // Another run finished first: use its environment.
        let _ = std::fs::remove_dir_all(&building);
        assert!(
            venv.join("ready").exists(),
            "no usable virtualenv at {venv:?}"
        );
    }
    python
}

#[tokio::test(flavor = "multi_thread")]
async fn python_gitlab_and_pygithub_get_what_they_expect() {
    let python = tokio::task::spawn_blocking(virtualenv)
        .await
        .expect("virtualenv task");
    let sim = start_sim().await;
    let script = clients_dir().join("check_clients.py");
    let checks = std::fs::read_to_string(&script)
        .expect("check_clients.py is readable")
        .matches("@check(")
        .count();
    let base = sim.base_url();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(&script)
            .args(["--base", &base, "--token", TOKEN])
            .output()
            .expect("the client check runs")
    })
    .await
    .expect("client check task");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client check failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let summary = format!("SUMMARY passed={checks} failed=0");
    assert!(
        stdout.lines().any(|line| line == summary),
        "expected `{summary}`:\n{stdout}\n{stderr}"
    );
}
