//! Python tools the tests run (moto, schemathesis), each installed from
//! PyPI into a virtualenv under the given directory (cargo's target tmp
//! dir), keyed by its pins' hash, so only the first run (or a change of
//! pins) installs it. Without python3, venv, pip or PyPI the tests fail
//! and say which step failed; they never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs a command to its end; panics naming `what` when it cannot start or
/// fails.
pub fn run(what: &str, command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|error| {
        panic!("{what}: could not run {command:?}: {error} (the tests need python3 3.11+ with venv and pip)")
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

/// A virtualenv named `name-<hash>` under `root` with `requirements` (a
/// pip requirements file's text) installed, created once per hash.
/// Returns its directory; run its tools as `bin/python -m <module>` (the
/// virtualenv was renamed into place, and its scripts name the old path).
pub fn virtualenv(root: &Path, name: &str, requirements: &str) -> PathBuf {
    use sha2::Digest as _;
    let hash = hex::encode(sha2::Sha256::digest(requirements.as_bytes()));
    let venv = root.join(format!("{name}-{}", &hash[..16]));
    if venv.join("ready").exists() {
        return venv;
    }
    std::fs::create_dir_all(root).expect("the virtualenv's directory");
    // Built beside its final place and renamed into it, so a half-made one
    // is never used.
    let building = root.join(format!("{name}-{}-{}", &hash[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let interpreter = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    run(
        &format!("creating {name}'s virtualenv"),
        Command::new(&interpreter)
            .args(["-m", "venv"])
            .arg(&building),
    );
    let pins = building.join("requirements.txt");
    std::fs::write(&pins, requirements).expect("requirements written");
    run(
        &format!("installing {name} from PyPI"),
        Command::new(building.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "-r",
            ])
            .arg(&pins),
    );
    std::fs::write(building.join("ready"), requirements).expect("marker written");
    if std::fs::rename(&building, &venv).is_err() {
        // Another process finished first: use its environment.
        let _ = std::fs::remove_dir_all(&building);
        assert!(
            venv.join("ready").exists(),
            "no usable virtualenv at {venv:?}"
        );
    }
    venv
}
