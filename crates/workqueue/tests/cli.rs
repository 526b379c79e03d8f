//! End-to-end tests of the built binary: `config check`, `migrate`,
//! `token new`, and `serve` on a free port over a temp SQLite file, driven
//! with `items list|show|retry` and the token, then stopped with SIGTERM.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use time::OffsetDateTime;
use wq_core::{DimensionUpdate, ItemId, Phase, WorkItem};
use wq_store::{ApplyOutcome, ClaimParams, NewItem, Store};

const BINARY: &str = env!("CARGO_BIN_EXE_workqueue");

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wq-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn workqueue(args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .env_remove("WORKQUEUE_URL")
        .env_remove("WORKQUEUE_TOKEN")
        .env("RUST_LOG", "info")
        .output()
        .expect("run the workqueue binary")
}

/// `workqueue token new --name NAME`: the token and its config entry.
fn new_token(name: &str) -> (String, String) {
    let output = workqueue(&["token", "new", "--name", name]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    let token = text
        .lines()
        .find_map(|line| line.strip_prefix("token: "))
        .expect("a token line")
        .to_owned();
    let entry_start = text.find("- name: ").expect("an entry");
    (token, text[entry_start..].to_owned())
}

/// An `auth:` section with `entry` (from `token new`) in group `admins`,
/// which a rule grants `admin`.
fn auth_section(entry: &str) -> String {
    let entry: String = entry
        .replace("groups: []", "groups: [admins]")
        .lines()
        .map(|line| format!("    {line}\n"))
        .collect();
    format!(
        "auth:\n  static_tokens:\n{entry}  rules:\n    - name: admins\n      groups: [admins]\n      permissions: [admin]\n"
    )
}

fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path.display().to_string()
}

#[test]
fn config_check_accepts_a_good_file_and_names_bad_fields() {
    let dir = temp_dir();
    let good = write(
        &dir,
        "good.yaml",
        "database:\n  url: \"sqlite:./x.db\"\nserver:\n  bind: \"127.0.0.1:9000\"\nengine:\n  workers: 4\n",
    );
    let output = workqueue(&["config", "check", &good]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        stderr_of(&output),
        format!("ok: config file {good} is valid (printed with defaults, secrets redacted)\n")
    );
    // The effective configuration: the file's values and every default.
    let effective = workqueue::config::Config::parse(&stdout_of(&output)).expect("a config");
    assert_eq!(effective.engine.workers, 4);
    assert_eq!(effective.server.bind, "127.0.0.1:9000");
    assert_eq!(effective.engine.lease_seconds, 60);
    assert!(stdout_of(&output).contains("lease_seconds: 60\n"));

    let bad = write(
        &dir,
        "bad.yaml",
        "engine:\n  workers: 0\n  lease_seconds: 0\n",
    );
    let output = workqueue(&["config", "check", &bad]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout_of(&output), "");
    assert_eq!(
        stderr_of(&output),
        format!(
            "error: invalid config file {bad}:\n  \
             engine.workers: must be between 1 and 1000, got 0 (line 2, column 12)\n  \
             engine.lease_seconds: must be between 1 and 3600, got 0 (line 3, column 18)\n"
        )
    );

    let unknown = write(&dir, "unknown.yaml", "server:\n  port: 80\n");
    let output = workqueue(&["config", "check", &unknown]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("server.port: unknown field `port`, expected one of bind,"),
        "{stderr}"
    );
    assert!(stderr.contains("(line 2, column 3)"), "{stderr}");

    let unregistered = write(&dir, "types.yaml", "engine:\n  handled_types: [mr, cve]\n");
    let output = workqueue(&["config", "check", &unregistered]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains(
            "engine.handled_types[1]: \"cve\" is not a registered item type (registered: mr)"
        ),
        "{}",
        stderr_of(&output)
    );

    let forge = write(
        &dir,
        "forge.yaml",
        "forges:\n  gitlab:\n    kind: gitlab\n    url: https://gitlab.example.com\n",
    );
    let output = workqueue(&["config", "check", &forge]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("forges.gitlab.token_env: required"),
        "{}",
        stderr_of(&output)
    );

    let blocked = write(
        &dir,
        "mr.yaml",
        "mr:\n  submission:\n    blocked_paths: [\"a/[\"]\n",
    );
    let output = workqueue(&["config", "check", &blocked]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("mr.submission.blocked_paths[0]"),
        "{}",
        stderr_of(&output)
    );

    let auth = write(
        &dir,
        "auth.yaml",
        "auth:\n  rules:\n    - name: ci\n      issuer: https://gitlab.example.com\n      permissions: [submit]\n",
    );
    let output = workqueue(&["config", "check", &auth]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        format!(
            "error: invalid config file {auth}:\n  auth.rules[0] (name \"ci\"): claims: an issuer rule \
             must require `aud`, so tokens minted for other services are not accepted\n  \
             auth.rules[0] (name \"ci\"): claims: an issuer rule must require a claim naming whose \
             tokens it accepts, one of {subjects} (e.g. `project_path: team/app`, `repository: \
             team/app`, `sub: system:serviceaccount:ci:runner`), or say `allow_any_subject: true`; \
             whoever requests a token chooses its `aud`, so without one the rule trusts every \
             project of this issuer\n",
            subjects = wq_auth::config::SUBJECT_CLAIMS.join(", ")
        )
    );

    // CI retry matchers are compiled before anything starts: `serve`
    // refuses them as `config check` does, naming the matcher.
    for (file, matchers, expected) in [
        (
            "regex.yaml",
            "    - name: oom\n      messages: [\"/Killed (/\"]\n",
            "ci_retry.matchers[0] (name \"oom\").messages[0]",
        ),
        (
            "action.yaml",
            "    - name: flaky\n      action: restart\n",
            "ci_retry.matchers[0] (name \"flaky\").action",
        ),
        (
            "delay.yaml",
            "    - name: runner\n      retry_delays: [30, -5]\n",
            "ci_retry.matchers[0] (name \"runner\").retry_delays[1]",
        ),
    ] {
        let path = write(&dir, file, &format!("ci_retry:\n  matchers:\n{matchers}"));
        for command in [
            &["config", "check", &path][..],
            &["serve", "--config", &path][..],
        ] {
            let output = workqueue(command);
            assert_eq!(output.status.code(), Some(1), "{command:?}");
            assert!(
                stderr_of(&output).contains(expected),
                "{command:?}: {}",
                stderr_of(&output)
            );
        }
    }

    let (_, entry) = new_token("nightly");
    let tokens = write(&dir, "tokens.yaml", &auth_section(&entry));
    let output = workqueue(&["config", "check", &tokens]);
    assert!(output.status.success(), "{}", stderr_of(&output));

    // Environment overrides win over the file, and their errors name them;
    // secrets are redacted from what is printed.
    let secret = write(
        &dir,
        "secret.yaml",
        "database:\n  url: \"postgres://wq:filepass@db/wq\"\nengine:\n  workers: 4\n",
    );
    let output = Command::new(BINARY)
        .args(["config", "check", &secret])
        .env("WORKQUEUE__ENGINE__WORKERS", "9")
        .env(
            "WORKQUEUE__AUDIT__ARCHIVE__ENDPOINT",
            "http://minio:envpass@127.0.0.1:9000",
        )
        .output()
        .expect("run the workqueue binary");
    assert!(output.status.success(), "{}", stderr_of(&output));
    let printed = stdout_of(&output);
    assert!(printed.contains("workers: 9\n"), "{printed}");
    assert!(printed.contains("postgres://wq:***@db/wq"), "{printed}");
    assert!(
        printed.contains("http://minio:***@127.0.0.1:9000"),
        "{printed}"
    );
    assert!(
        !printed.contains("filepass") && !printed.contains("envpass"),
        "{printed}"
    );
    assert!(
        stderr_of(&output).contains(
            "with WORKQUEUE__AUDIT__ARCHIVE__ENDPOINT, WORKQUEUE__ENGINE__WORKERS is valid"
        ),
        "{}",
        stderr_of(&output)
    );
    let output = Command::new(BINARY)
        .args(["config", "check", &secret])
        .env("WORKQUEUE__ENGINE__WORKERS", "0")
        .output()
        .expect("run the workqueue binary");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        format!(
            "error: invalid environment overrides of the config file {secret}: \
             WORKQUEUE__ENGINE__WORKERS: engine.workers: must be between 1 and 1000, got 0\n"
        )
    );
    // serve reads them too.
    let output = Command::new(BINARY)
        .args(["serve", "--config", &secret])
        .env("WORKQUEUE__SERVER__BIND", "nowhere")
        .output()
        .expect("run the workqueue binary");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("WORKQUEUE__SERVER__BIND: server.bind: must be an IP address"),
        "{}",
        stderr_of(&output)
    );

    let output = workqueue(&[
        "config",
        "check",
        &dir.join("missing.yaml").display().to_string(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr_of(&output).contains("cannot read config file"));
    std::fs::remove_dir_all(&dir).ok();
}

/// A running `workqueue serve`; killed if still running when dropped.
struct Server {
    child: Child,
    url: String,
    logs: Option<JoinHandle<Vec<String>>>,
    /// Every JSON log line, as it is written.
    events: mpsc::Receiver<serde_json::Value>,
    /// The working directory made for a run without `--config`, removed
    /// with the server.
    own_dir: Option<PathBuf>,
}

impl Server {
    fn start(config: &str) -> Server {
        Self::start_with_env(config, &[])
    }

    /// [`Server::start`] with more environment variables.
    fn start_with_env(config: &str, env: &[(&str, &str)]) -> Server {
        Self::start_with(&["--config", config], env)
    }

    /// `workqueue serve ARGS...` with more environment variables, in the
    /// config's directory (or a new one without `--config`).
    fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        // Beside its config: the default audit archive is a directory of
        // the working directory.
        let (dir, own_dir) = match args.iter().position(|arg| *arg == "--config") {
            Some(index) => (
                Path::new(args[index + 1])
                    .parent()
                    .expect("the config's directory")
                    .to_owned(),
                None,
            ),
            None => {
                let dir = temp_dir();
                (dir.clone(), Some(dir))
            }
        };
        let mut child = Command::new(BINARY)
            .arg("serve")
            .args(args)
            .args(["--log-format", "json"])
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn workqueue serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (address_tx, address_rx) = mpsc::channel::<String>();
        let (events_tx, events) = mpsc::channel::<serde_json::Value>();
        let logs = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                    if let Some(address) = event["address"].as_str() {
                        let _ = address_tx.send(address.to_owned());
                    }
                    let _ = events_tx.send(event);
                }
                lines.push(line);
            }
            lines
        });
        let address = match address_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(address) => address,
            Err(_) => {
                let _ = child.kill();
                let logs = logs.join().unwrap_or_default();
                panic!(
                    "serve did not report its address; logs:\n{}",
                    logs.join("\n")
                );
            }
        };
        Server {
            child,
            url: format!("http://{address}"),
            logs: Some(logs),
            events,
            own_dir,
        }
    }

    /// Waits for the first log event (from now on) that `wanted` accepts:
    /// the service's own signal that something happened.
    fn wait_log(
        &self,
        what: &str,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) if wanted(&event) => return event,
                Ok(event) => seen.push(event.to_string()),
                Err(_) => panic!("serve never logged {what}; it logged:\n{}", seen.join("\n")),
            }
        }
    }

    /// `workqueue items --url URL ARGS...`.
    fn items(&self, args: &[&str]) -> Output {
        let mut all = vec!["items", "--url", &self.url];
        all.extend_from_slice(args);
        workqueue(&all)
    }

    /// `workqueue items --url URL --token TOKEN ARGS...` with `input` on
    /// stdin.
    fn items_stdin(&self, token: &str, args: &[&str], input: &str) -> Output {
        use std::io::Write as _;
        let mut child = Command::new(BINARY)
            .args(["items", "--url", &self.url, "--token", token])
            .args(args)
            .env_remove("WORKQUEUE_URL")
            .env_remove("WORKQUEUE_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the workqueue binary");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait for the client")
    }

    /// The same with `--token TOKEN`.
    fn items_as(&self, token: &str, args: &[&str]) -> Output {
        let mut all = vec!["--token", token];
        all.extend_from_slice(args);
        self.items(&all)
    }

    /// SIGTERM, then the exit status and the log lines.
    fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(killed.success());
        let status = self.child.wait().expect("wait for serve");
        let logs = self
            .logs
            .take()
            .map(|logs| logs.join().unwrap_or_default())
            .unwrap_or_default();
        (status, logs)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.logs.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(dir) = &self.own_dir {
            std::fs::remove_dir_all(dir).ok();
        }
    }
}

async fn insert(store: &dyn Store, item_type: &str, dimensions: Vec<DimensionUpdate>) -> WorkItem {
    store
        .item_insert(NewItem {
            id: ItemId::new_v7(),
            item_type: item_type.to_owned(),
            idempotency_key: None,
            caller_identity: None,
            place: None,
            now: OffsetDateTime::now_utc(),
            dimensions,
        })
        .await
        .expect("insert")
}

/// Fails an item as an executor would: claim, outcome, park.
async fn fail(store: &dyn Store, item: &WorkItem) {
    let now = OffsetDateTime::now_utc();
    let (_, lease) = store
        .item_claim(ClaimParams {
            id: item.id,
            now,
            lease_until: now + time::Duration::minutes(1),
            handled_types: vec![item.item_type.clone()],
        })
        .await
        .expect("claim")
        .expect("claimable");
    store
        .item_apply_outcome(ApplyOutcome {
            lease,
            now,
            phase: Some(Phase::Failed),
            error: Some("forge said no".to_owned()),
            dimensions: Vec::new(),
            action: None,
            records: Vec::new(),
        })
        .await
        .expect("outcome");
    store.item_park(lease, now).await.expect("park");
}

#[test]
fn serve_answers_the_items_commands_and_stops_on_sigterm() {
    let dir = temp_dir();
    let database = dir.join("wq.db");
    let database_url = format!("sqlite:{}", database.display());
    let (token, entry) = new_token("cli-admin");
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n{}",
            auth_section(&entry)
        ),
    );

    let output = workqueue(&["migrate", "--config", &config]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(stdout_of(&output), "migrations applied\n");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (active, failed) = runtime.block_on(async {
        let store = wq_store::connect(&database_url, 1).await.expect("connect");
        let active = insert(
            store.as_ref(),
            "alpha",
            vec![DimensionUpdate::new("needs_ci", true).detail(serde_json::json!({"pipeline": 7}))],
        )
        .await;
        let failed = insert(store.as_ref(), "beta", Vec::new()).await;
        fail(store.as_ref(), &failed).await;
        (active, failed)
    });

    let server = Server::start(&config);

    // list: a table, newest first.
    let output = server.items_as(&token, &["list"]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let table = stdout_of(&output);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("ID "), "{table}");
    assert!(lines[0].contains("PHASE"), "{table}");
    assert!(lines[1].starts_with(&failed.id.to_string()), "{table}");
    assert!(
        lines[1].contains("failed") && lines[1].contains("forge said no"),
        "{table}"
    );
    assert!(lines[2].starts_with(&active.id.to_string()), "{table}");

    // list: filters, paging hint and JSON.
    let output = server.items_as(&token, &["list", "--phase", "active", "--json"]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    assert_eq!(json["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["items"][0]["id"], active.id.to_string());
    assert_eq!(json["next_before"], serde_json::Value::Null);
    let output = server.items_as(&token, &["list", "--limit", "1"]);
    assert!(
        stdout_of(&output).ends_with(&format!("more: --before {}\n", failed.id)),
        "{}",
        stdout_of(&output)
    );
    let output = server.items_as(
        &token,
        &["list", "--limit", "1", "--before", &failed.id.to_string()],
    );
    assert!(stdout_of(&output).contains(&active.id.to_string()));

    // show: fields and dimensions.
    let output = server.items_as(&token, &["show", &active.id.to_string()]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    assert!(
        text.starts_with(&format!("id:              {}\n", active.id)),
        "{text}"
    );
    assert!(text.contains("phase:           active\n"), "{text}");
    assert!(text.contains("needs_ci"), "{text}");
    assert!(text.contains(r#"{"pipeline":7}"#), "{text}");

    // retry: 200 for the failed item, the API's message for the active one.
    let output = server.items_as(&token, &["retry", &failed.id.to_string()]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        stdout_of(&output),
        format!("retried {}: phase active, attempts 0\n", failed.id)
    );
    let output = server.items_as(&token, &["retry", &active.id.to_string()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        format!(
            "error: API error 409 (conflict): work item {} is active: only failed or cancelled items can be retried\n",
            active.id
        )
    );

    // audit: the retried item's trail, its creation, the outcome that
    // failed it and the retry by the caller, one line each.
    let output = server.items_as(&token, &["audit", &failed.id.to_string()]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("item.created"), "{text}");
    assert!(lines[1].contains("action.succeeded"), "{text}");
    assert!(lines[1].contains(r#""phase":"failed""#), "{text}");
    assert!(lines[2].contains("cli-admin"), "{text}");
    assert!(lines[2].contains("item.retried"), "{text}");
    assert!(
        lines[2].contains(r#"old_state={"phase":"failed"}"#),
        "{text}"
    );

    // audit verify: every chain holds; a rewritten record is named.
    let output = workqueue(&["audit", "verify", "--config", &config]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        stdout_of(&output),
        "ok: 4 audit records, every chain intact\n"
    );
    runtime.block_on(async {
        let pool = sqlx::SqlitePool::connect(&database_url)
            .await
            .expect("connect");
        sqlx::query("UPDATE audit_records SET actor = 'intruder' WHERE kind = 'item.retried'")
            .execute(&pool)
            .await
            .expect("tamper");
        pool.close().await;
    });
    let output = workqueue(&["audit", "verify", "--config", &config]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout_of(&output));
    assert!(
        stdout_of(&output).starts_with(&format!("broken: item {} record ", failed.id)),
        "{}",
        stdout_of(&output)
    );

    // Errors from the API are shown with their field.
    let unknown = ItemId::new_v7();
    let output = server.items_as(&token, &["show", &unknown.to_string()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        format!("error: API error 404 (not_found): work item {unknown} not found\n")
    );
    let output = server.items_as(&token, &["list", "--limit", "0"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("[field: limit]"),
        "{}",
        stderr_of(&output)
    );

    // Without a token, or with a wrong one, the API refuses.
    let output = server.items(&["list"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        "error: API error 401 (unauthenticated): missing or invalid credentials: send \
         Authorization: Bearer <token> (no token given: pass --token or set WORKQUEUE_TOKEN)\n"
    );
    let (stranger, _) = new_token("cli-admin");
    let output = server.items_as(&stranger, &["list"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).starts_with("error: API error 401 (unauthenticated)"),
        "{}",
        stderr_of(&output)
    );
    assert!(!stderr_of(&output).contains("no token given"));
    // WORKQUEUE_TOKEN works like --token.
    let output = Command::new(BINARY)
        .args(["items", "--url", &server.url, "list", "--json"])
        .env_remove("WORKQUEUE_URL")
        .env("WORKQUEUE_TOKEN", &token)
        .output()
        .expect("run the workqueue binary");
    assert!(output.status.success(), "{}", stderr_of(&output));

    let (status, logs) = server.terminate();
    assert!(
        status.success(),
        "serve exited with {status}; logs:\n{}",
        logs.join("\n")
    );
    let messages: Vec<String> = logs
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|event| event["message"].as_str().map(str::to_owned))
        .collect();
    let position = |wanted: &str| messages.iter().position(|message| message == wanted);
    let signal = position("SIGTERM received; shutting down").expect("signal logged");
    let stopping =
        position("shutting down: no new connections or item runs").expect("shutdown logged");
    let stopped = position("HTTP server and engine stopped; bye").expect("stop logged");
    assert!(signal < stopping && stopping < stopped, "{messages:?}");

    // Nothing answers any more.
    let output = workqueue(&["items", "--url", "http://127.0.0.1:9", "list"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr_of(&output).contains("cannot reach the workqueue API at http://127.0.0.1:9"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn serve_without_rules_warns_refuses_the_api_and_answers_health() {
    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!("database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n"),
    );
    let server = Server::start(&config);
    let (token, _) = new_token("nobody");
    let output = server.items_as(&token, &["list"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).starts_with("error: API error 401 (unauthenticated)"),
        "{}",
        stderr_of(&output)
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let health = runtime.block_on(async {
        reqwest::get(format!("{}/healthz", server.url))
            .await
            .expect("healthz")
            .status()
    });
    assert_eq!(health.as_u16(), 200);
    // The container's health check.
    let output = workqueue(&["health", "--url", &format!("{}/healthz", server.url)]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(stdout_of(&output).starts_with("ok: "));
    let output = workqueue(&["health", "--url", &format!("{}/nothing", server.url)]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr_of(&output).contains("404"), "{}", stderr_of(&output));

    let (status, logs) = server.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    // No rule: said at start. Every type is handled: no API-only warning.
    assert!(
        !logs.iter().any(|line| line.contains("API-only replica")),
        "{}",
        logs.join("\n")
    );
    let start = "auth.rules grants nothing";
    let warning = logs
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| {
            event["message"]
                .as_str()
                .is_some_and(|message| message.starts_with(start))
        })
        .unwrap_or_else(|| panic!("no warning {start:?} in:\n{}", logs.join("\n")));
    assert_eq!(warning["level"], "WARN");
    std::fs::remove_dir_all(&dir).ok();
}

/// `events.sqs`: serve polls the queue with credentials found the
/// standard AWS way (here the environment), counts what it takes, and
/// stops cleanly on SIGTERM.
#[test]
fn serve_polls_the_configured_queue_with_standard_aws_credentials() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let queues = runtime.block_on(wq_testkit::moto::Queues::new(root, true, 30));
    let moto = wq_testkit::moto::moto(root);
    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n\
             events:\n  sqs:\n    queue_url: \"{}\"\n    region: {}\n    \
             endpoint: \"{}\"\n    wait_seconds: 1\n",
            queues.queue,
            wq_testkit::moto::REGION,
            moto.url
        ),
    );
    let (key, secret) = wq_testkit::moto::Moto::credentials();
    let server = Server::start_with_env(
        &config,
        &[
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", secret),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    // No forge is configured, so no source recognizes a GitLab delivery:
    // it is counted and left for the dead-letter queue.
    runtime.block_on(queues.publish("{}", &[("X-Gitlab-Event", "Push Hook")]));
    let counted = "workqueue_queue_messages_total{queue=\"sqs\",outcome=\"unrecognized\"} 1";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = runtime.block_on(async {
            reqwest::get(format!("{}/metrics", server.url))
                .await
                .expect("metrics")
                .text()
                .await
                .expect("metrics text")
        });
        if metrics.lines().any(|line| line.starts_with(counted)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{counted} never appeared:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, logs) = server.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    assert!(
        logs.iter()
            .any(|line| line.contains("queue intake started")),
        "{}",
        logs.join("\n")
    );
    assert!(
        runtime.block_on(queues.left(&queues.queue)) >= 1,
        "not deleted"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// README's first command: the demo follows every change to its end and
/// exits 0 with `--exit`.
#[cfg(feature = "demo")]
#[test]
fn the_demo_follows_every_change_to_its_end() {
    let output = workqueue(&["demo", "--exit", "--port", "0"]);
    let stdout = stdout_of(&output);
    assert!(output.status.success(), "{stdout}\n{}", stderr_of(&output));
    for expected in [
        // (Whether the demo's poll sees the retry while it is scheduled is
        // timing; the outcome is always there.)
        "retried by rule runner-system-failure",
        "pull request #1 open",
        "approved by a reviewer",
        "cancelled: empty diff",
        "refused before any forge write",
        "all changes reached their end state",
        "the audit trail of",
        "pushed commit",
        "opened merge request !",
        "merge asked for head",
        "the forge answered accepted",
        "merged as commit",
        "each naming the hash of the one before",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert_eq!(
        stdout.matches("completed: merged").count(),
        3,
        "two merge requests and one pull request merged:\n{stdout}"
    );
}

/// A database URL's password, in its user part or as a `password=` query
/// parameter, never reaches the output of a failing `migrate`.
#[test]
fn migrate_against_an_unreachable_database_does_not_print_its_password() {
    let dir = temp_dir();
    for url in [
        "postgres://wq:hunter2userpart@127.0.0.1:1/wq?password=hunter2query",
        "postgres://127.0.0.1:1/wq?user=wq&password=hunter2query",
    ] {
        let config = write(
            &dir,
            "workqueue.yaml",
            // Refused at once; retried for a second, not sqlx's default 30.
            &format!("database:\n  url: \"{url}\"\n  connect_timeout_seconds: 1\n"),
        );
        let output = workqueue(&["migrate", "--config", &config]);
        assert!(!output.status.success(), "migrate against {url} failed");
        let printed = format!("{}{}", stdout_of(&output), stderr_of(&output));
        assert!(!printed.is_empty());
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(
            printed.contains("127.0.0.1:1"),
            "names the database: {printed}"
        );
    }
}

/// SIGTERM with a client connected that never finishes its headers: `serve`
/// still exits, cleanly, once the shutdown grace has passed.
#[test]
fn serve_exits_on_sigterm_within_the_grace_despite_a_stuck_client() {
    use std::io::Write as _;

    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n  \
             header_read_timeout_seconds: 3600\n  shutdown_grace_seconds: 1\n"
        ),
    );
    let output = workqueue(&["migrate", "--config", &config]);
    assert!(output.status.success(), "{}", stderr_of(&output));

    let mut server = Server::start(&config);
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stuck = std::net::TcpStream::connect(&address).expect("connect");
    stuck
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .expect("write a partial request");
    // Served before the signal: the stuck connection is accepted by then.
    let output = workqueue(&["items", "--url", &server.url, "list"]);
    assert!(
        !stderr_of(&output).contains("connect"),
        "{}",
        stderr_of(&output)
    );

    let pid = server.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(killed.success());
    // Without the grace the stuck client would hold it forever. Serve's
    // stderr closes when it exits: the log reader ending is the signal,
    // and the deadline only keeps a hung serve from hanging the test.
    let reader = server.logs.take().expect("the log reader");
    let (ended, logs_read) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = ended.send(reader.join().unwrap_or_default());
    });
    let logs = match logs_read.recv_timeout(Duration::from_secs(30)) {
        Ok(logs) => logs,
        Err(_) => {
            let _ = server.child.kill();
            let logs = logs_read.recv().unwrap_or_default();
            panic!(
                "serve still running 30 s after SIGTERM; logs:\n{}",
                logs.join("\n")
            );
        }
    };
    let status = server.child.wait().expect("wait for serve");
    assert!(
        status.success(),
        "serve exited with {status}; logs:\n{}",
        logs.join("\n")
    );
    assert!(
        logs.iter().any(|line| line.contains("SIGTERM received")),
        "{}",
        logs.join("\n")
    );
    drop(stuck);
    std::fs::remove_dir_all(&dir).ok();
}

/// `mr` migration 1001 fills the place (forge, project) of items stored
/// before wq-store migration 0003 added it, from their `mr_details`. The
/// state such a release left is made by hand: the migrated database gets an
/// `mr` item with no place and its details row, 1001 is marked as not yet
/// applied, and `workqueue migrate` runs it again.
#[test]
fn migrate_backfills_the_place_of_older_merge_requests() {
    for postgres in [false, true] {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let database_url = if postgres {
            runtime.block_on(wq_store::testing::fresh_postgres_url())
        } else {
            wq_store::testing::fresh_sqlite_url()
        };
        let dir = temp_dir();
        let config = write(
            &dir,
            "workqueue.yaml",
            &format!("database:\n  url: \"{database_url}\"\n"),
        );
        let output = workqueue(&["migrate", "--config", &config]);
        assert!(output.status.success(), "{}", stderr_of(&output));

        // Three items without a place: an `mr` one with details, an `mr`
        // one already placed (kept), and one of another type (no details).
        let (old, placed, other) = runtime.block_on(async {
            let store = wq_store::connect(&database_url, 1).await.expect("connect");
            let insert = |item_type: &'static str, place: Option<(&str, &str)>| {
                let store = std::sync::Arc::clone(&store);
                let place = place.map(|(f, p)| (f.to_owned(), p.to_owned()));
                async move {
                    store
                        .item_insert(NewItem {
                            id: ItemId::new_v7(),
                            item_type: item_type.to_owned(),
                            idempotency_key: None,
                            caller_identity: Some("test".to_owned()),
                            place,
                            now: OffsetDateTime::now_utc(),
                            dimensions: Vec::new(),
                        })
                        .await
                        .expect("insert")
                        .id
                }
            };
            let old = insert("mr", None).await;
            let placed = insert("mr", Some(("github", "kept/place"))).await;
            let other = insert("alpha", None).await;
            (old, placed, other)
        });
        let details = |id: ItemId, project: &str| {
            let (falsy, time) = if postgres {
                ("false", "now()")
            } else {
                ("0", "0")
            };
            format!(
                "INSERT INTO mr_details (work_item_id, forge, project, source_branch, \
                 target_branch, generation, title, description, commit_message, labels, \
                 file_actions, auto_merge, ci_retry, content_hash, metadata_hash, created_at, \
                 updated_at) VALUES ('{id}', 'gitlab', '{project}', 'feature', 'main', 1, 't', \
                 'd', 'c', '[]', '[]', {falsy}, {falsy}, 'h', 'm', {time}, {time})"
            )
        };
        let statements = [
            details(old, "group/app"),
            details(placed, "group/other"),
            "DELETE FROM _sqlx_migrations WHERE version = 1001".to_owned(),
        ];
        let place_of =
            |id: ItemId| format!("SELECT forge, project FROM work_items WHERE id = '{id}'");
        let run = |sql: Vec<String>| -> Vec<(Option<String>, Option<String>)> {
            runtime.block_on(async {
                use sqlx::Connection as _;
                let mut rows = Vec::new();
                if postgres {
                    let mut connection = sqlx::PgConnection::connect(&database_url).await.unwrap();
                    for statement in sql {
                        if statement.starts_with("SELECT") {
                            rows.push(
                                sqlx::query_as(sqlx::AssertSqlSafe(statement))
                                    .fetch_one(&mut connection)
                                    .await
                                    .unwrap(),
                            );
                        } else {
                            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                                .execute(&mut connection)
                                .await
                                .unwrap();
                        }
                    }
                } else {
                    let mut connection = sqlx::SqliteConnection::connect(&database_url)
                        .await
                        .unwrap();
                    for statement in sql {
                        if statement.starts_with("SELECT") {
                            rows.push(
                                sqlx::query_as(sqlx::AssertSqlSafe(statement))
                                    .fetch_one(&mut connection)
                                    .await
                                    .unwrap(),
                            );
                        } else {
                            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                                .execute(&mut connection)
                                .await
                                .unwrap();
                        }
                    }
                }
                rows
            })
        };
        run(statements.to_vec());
        assert_eq!(run(vec![place_of(old)]), vec![(None, None)], "no place yet");

        let output = workqueue(&["migrate", "--config", &config]);
        assert!(output.status.success(), "{}", stderr_of(&output));
        let places = run(vec![place_of(old), place_of(placed), place_of(other)]);
        let some = |forge: &str, project: &str| (Some(forge.to_owned()), Some(project.to_owned()));
        assert_eq!(
            places,
            vec![
                some("gitlab", "group/app"),
                some("github", "kept/place"),
                (None, None),
            ],
            "postgres: {postgres}"
        );
        if postgres {
            runtime.block_on(wq_store::testing::drop_postgres_database(&database_url));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A forge-sim GitLab project `team/app` whose one CI job passes, with a
/// first commit on `main`; its id.
fn sim_project(sim: &forge_sim::SimHandle) -> u64 {
    let project = sim
        .gitlab_project("team/app")
        .job(forge_sim::JobSpec::new(
            "unit",
            forge_sim::JobOutcome::Success,
        ))
        .create()
        .expect("project");
    sim.gitlab_push(project, "main", &[("README.md", Some("# app\n"))], "init")
        .expect("initial push");
    project
}

const SIM_SECRET: &str = "hook-secret";

/// The environment `serve` reads the sim's secrets from.
const SIM_ENV: &[(&str, &str)] = &[
    ("WQ_TEST_FORGE_TOKEN", forge_sim::DEFAULT_TOKEN),
    ("WQ_TEST_WEBHOOK_SECRET", SIM_SECRET),
];

/// The `forges:` and `mr:` sections for the sim (merges need no person's
/// review, so a passing pipeline is enough).
fn sim_sections(sim: &forge_sim::SimHandle) -> String {
    format!(
        "forges:\n  gitlab:\n    kind: gitlab\n    url: \"{}\"\n    token_env: WQ_TEST_FORGE_TOKEN\n    \
         webhook_secret_env: WQ_TEST_WEBHOOK_SECRET\n    timeout_seconds: 5\n\
         mr:\n  require_review: false\n  note_min_interval_seconds: 1\n  reconcile_busy_interval_seconds: 2\n",
        sim.gitlab_url()
    )
}

/// A submission body for the sim's project: a new file named after the
/// branch.
fn sim_change(branch: &str) -> serde_json::Value {
    serde_json::json!({
        "item_type": "mr", "forge": "gitlab", "project": "team/app",
        "source_branch": branch, "target_branch": "main",
        "title": format!("Change on {branch}"), "description": "From the cli test.",
        "file_actions": [{
            "action": "create",
            "file_path": format!("src/{}.rs", branch.replace('/', "_")),
            "content": "pub fn f() {}\n",
        }],
    })
}

/// `items show ID --json` as the admin.
fn show_json(server: &Server, token: &str, id: &str) -> serde_json::Value {
    let output = server.items_as(token, &["show", id, "--json"]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// The audit line that records `id` reaching `phase`.
fn reached(event: &serde_json::Value, id: &str, phase: &str) -> bool {
    event["target"] == "audit"
        && event["item_id"] == id
        && event["new_state"]
            .as_str()
            .is_some_and(|state| state.contains(&format!("\"phase\":\"{phase}\"")))
}

/// Issue 18, first point: `serve` without a config file (its settings from
/// `WORKQUEUE__...` variables) processes every registered type, so a
/// submission is taken to its end; `serve --api-only` takes it but
/// processes nothing: it waits, as stored, until a replica that processes
/// its type runs.
#[test]
fn serve_processes_every_type_unless_api_only() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sim = runtime
        .block_on(forge_sim::ForgeSim::start(forge_sim::SimConfig::default()))
        .expect("forge-sim");
    let project = sim_project(&sim);
    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let (token, entry) = new_token("cli-admin");
    // No `engine:` section at all.
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n{}{}",
            auth_section(&entry),
            sim_sections(&sim)
        ),
    );
    // API only: the submission is stored and the engine declines it.
    let mut env = SIM_ENV.to_vec();
    env.push(("RUST_LOG", "info,wq_engine=debug"));
    let api_only = Server::start_with(&["--config", &config, "--api-only"], &env);
    let file = write(&dir, "change.json", &sim_change("wq/waits").to_string());
    let output = api_only.items_as(&token, &["submit", &file]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let said = stdout_of(&output);
    let id = said
        .strip_prefix("created ")
        .and_then(|rest| rest.split_once(':'))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(said, format!("created {id}: mr item, phase active\n"));
    api_only.wait_log("the declined claim", |event| {
        event["id"] == id.as_str()
            && event["message"] == "not claimed: this replica handles no item type"
    });
    let item = show_json(&api_only, &token, &id);
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(item["actionable"], true, "{item:#}");
    assert_eq!(item["attempts"], 0, "{item:#}");
    assert_eq!(item["leased_until"], serde_json::Value::Null, "{item:#}");
    assert_eq!(item["detail"]["mr"]["number"], serde_json::Value::Null);
    assert!(sim.gitlab_mr(project, 1).is_none(), "nothing on the forge");
    assert!(sim.gitlab_branch_head(project, "wq/waits").is_none());
    let (status, logs) = api_only.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    assert!(
        logs.iter().any(|line| line.contains("API-only replica")),
        "{}",
        logs.join("\n")
    );

    // No config file at all, the same settings from the environment: it
    // processes `mr`, the waiting item (found by the sweep at start) and a
    // new one are merged.
    let sha256 = entry
        .lines()
        .find_map(|line| line.trim().strip_prefix("sha256: "))
        .expect("the token's hash");
    let auth = serde_json::json!({
        "static_tokens": [{"name": "cli-admin", "sha256": sha256, "groups": ["admins"]}],
        "rules": [{"name": "admins", "groups": ["admins"], "permissions": ["admin"]}],
    });
    let forges = serde_json::json!({"gitlab": {
        "kind": "gitlab", "url": sim.gitlab_url(), "token_env": "WQ_TEST_FORGE_TOKEN",
        "webhook_secret_env": "WQ_TEST_WEBHOOK_SECRET", "timeout_seconds": 5,
    }});
    let (auth, forges) = (auth.to_string(), forges.to_string());
    let mut env = SIM_ENV.to_vec();
    env.extend([
        ("WORKQUEUE__DATABASE__URL", database_url.as_str()),
        ("WORKQUEUE__SERVER__BIND", "127.0.0.1:0"),
        ("WORKQUEUE__AUTH", auth.as_str()),
        ("WORKQUEUE__FORGES", forges.as_str()),
        ("WORKQUEUE__MR__REQUIRE_REVIEW", "false"),
        ("WORKQUEUE__MR__NOTE_MIN_INTERVAL_SECONDS", "1"),
        ("WORKQUEUE__MR__RECONCILE_BUSY_INTERVAL_SECONDS", "2"),
    ]);
    let server = Server::start_with(&[], &env);
    sim.set_gitlab_webhook(
        project,
        &format!("{}/webhooks/gitlab", server.url),
        SIM_SECRET,
    )
    .expect("webhook");
    server.wait_log("the waiting item completed", |event| {
        reached(event, &id, "completed")
    });
    // From stdin, as YAML, followed to its end: the client exits once the
    // item completed, and off a terminal it draws no progress.
    let yaml = "item_type: mr\nforge: gitlab\nproject: team/app\nsource_branch: wq/second\n\
                target_branch: main\ntitle: Second\nfile_actions:\n  - action: create\n    \
                file_path: src/second.rs\n    content: \"pub fn g() {}\\n\"\n";
    let output = server.items_stdin(&token, &["submit", "-", "--wait"], yaml);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let shown = stdout_of(&output);
    assert!(shown.contains("phase:           completed\n"), "{shown}");
    let second = shown
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("id:"))
        .map(|id| id.trim().to_owned())
        .expect("the item's id");
    assert_eq!(
        stderr_of(&output),
        format!("created {second}: mr item, phase active\n")
    );
    for id in [&id, &second] {
        let item = show_json(&server, &token, id);
        assert_eq!(item["phase"], "completed", "{item:#}");
        assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
        let number = item["detail"]["mr"]["number"].as_u64().expect("an MR");
        assert_eq!(
            sim.gitlab_mr(project, number).expect("the MR")["state"],
            "merged"
        );
    }
    let (status, logs) = server.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    assert!(
        !logs.iter().any(|line| line.contains("API-only replica")),
        "{}",
        logs.join("\n")
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A manual change (no automatic merge) on the sim's `team/tools`.
fn manual_change(branch: &str) -> String {
    serde_json::json!({
        "item_type": "mr", "forge": "gitlab", "project": "team/tools",
        "source_branch": branch, "target_branch": "main",
        "title": format!("Manual {branch}"), "description": "From the cli test.",
        "file_actions": [{
            "action": "create",
            "file_path": format!("{}.txt", branch.replace('/', "_")),
            "content": "x\n",
        }],
        "automation": {"auto_merge": false},
    })
    .to_string()
}

/// Issue 18, the CLI: `items submit`, `show` in text (the merge request,
/// the gates, the queue entry, the journal), `merge` (a refused head,
/// then a squash), `retry-merge` and `cancel --wait`, against `serve` and
/// forge-sim.
#[test]
fn the_items_commands_merge_cancel_and_show_a_change() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sim = runtime
        .block_on(forge_sim::ForgeSim::start(forge_sim::SimConfig::default()))
        .expect("forge-sim");
    let project = sim
        .gitlab_project("team/tools")
        .require_pipeline_success(false)
        .no_ci()
        .create()
        .expect("project");
    sim.gitlab_push(project, "main", &[("README.md", Some("# tools\n"))], "init")
        .expect("initial push");
    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let (token, entry) = new_token("cli-admin");
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n{}{}",
            auth_section(&entry),
            sim_sections(&sim)
        ),
    );
    let server = Server::start_with_env(&config, SIM_ENV);
    let submit = |branch: &str| -> String {
        let file = write(
            &dir,
            &format!("{}.json", branch.replace('/', "_")),
            &manual_change(branch),
        );
        let output = server.items_as(&token, &["submit", &file]);
        assert!(output.status.success(), "{}", stderr_of(&output));
        let said = stdout_of(&output);
        let id = said
            .strip_prefix("created ")
            .and_then(|rest| rest.split_once(':'))
            .map(|(id, _)| id.to_owned())
            .unwrap_or_else(|| panic!("{said}"));
        server.wait_log("the merge request created", |event| {
            event["target"] == "audit"
                && event["item_id"] == id.as_str()
                && event["kind"] == "forge.change_created"
        });
        id
    };

    let merged = submit("wq/merged");
    // No attempt yet: nothing to retry; a head that is not the MR's is
    // refused by the forge, and nothing changes.
    let output = server.items_as(&token, &["retry-merge", &merged]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr_of(&output),
        "error: API error 409 (conflict): no merge attempt has been made; nothing to retry\n"
    );
    let output = server.items_as(
        &token,
        &["merge", &merged, "--expected-head", &"0".repeat(40)],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("the forge did not merge"),
        "{}",
        stderr_of(&output)
    );
    let output = server.items_as(&token, &["merge", &merged, "--method", "bogus"]);
    assert_eq!(output.status.code(), Some(2), "clap refuses the value");
    assert!(stderr_of(&output).contains("possible values: merge, squash, rebase"));

    // show, in text: the MR, the gates, no queue entry, no attempt yet.
    let output = server.items_as(&token, &["show", &merged]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = stdout_of(&output);
    for expected in [
        "change:          gitlab team/tools wq/merged Manual wq/merged -> main\n",
        "merge request:   1 http://",
        "automation:      auto_merge false, ci_retry true, generation 1\n",
        "gates:           ",
        "merge queue:     not queued\n",
        "merge journal:   no merge attempt yet\n",
        "DIMENSION",
        "needs_mr",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }

    // merge: squashed by the forge; the item completes.
    let output = server.items_as(&token, &["merge", &merged, "--method", "squash"]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(stdout_of(&output), format!("{merged}: merged\n"));
    server.wait_log("the merged item completed", |event| {
        reached(event, &merged, "completed")
    });
    assert_eq!(
        sim.gitlab_mr(project, 1).expect("the MR")["state"],
        "merged"
    );
    let output = server.items_as(&token, &["show", &merged]);
    let text = stdout_of(&output);
    assert!(text.contains("phase:           completed\n"), "{text}");

    // cancel --wait: the second change's MR is closed with a note.
    let cancelled = submit("wq/cancelled");
    let output = server.items_as(
        &token,
        &["cancel", &cancelled, "--reason", "not needed", "--wait"],
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        stdout_of(&output),
        format!(
            "{cancelled}: cancelled: cancelled by cli-admin (token cli-admin, rule admins): not needed\n"
        )
    );
    assert_eq!(
        stderr_of(&output),
        format!(
            "{cancelled}: the item is being cancelled: its merge request is closed with a note\n"
        )
    );
    assert_eq!(
        sim.gitlab_mr(project, 2).expect("the MR")["state"],
        "closed"
    );
    let output = server.items_as(&token, &["cancel", &cancelled]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        stdout_of(&output),
        format!("{cancelled}: the item is already cancelled; nothing changed\n")
    );

    let (status, logs) = server.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    std::fs::remove_dir_all(&dir).ok();
}

/// `workqueue completions SHELL` prints a script naming the subcommands.
#[test]
fn completions_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let output = workqueue(&["completions", shell]);
        assert!(output.status.success(), "{}", stderr_of(&output));
        let script = stdout_of(&output);
        for name in [
            "serve",
            "migrate",
            "items",
            "submit",
            "retry-merge",
            "cancel",
            "completions",
            "api-only",
        ] {
            assert!(script.contains(name), "{shell}: {name} missing");
        }
    }
    let output = workqueue(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
}

/// `--wait` draws its spinner on a terminal (here the pseudo-terminal of
/// util-linux `script`): an item submitted to an API-only replica waits,
/// and the spinner says so until the client is stopped. (Off a terminal it
/// draws nothing: `serve_processes_every_type_unless_api_only`.)
#[test]
fn progress_is_drawn_on_a_terminal_only() {
    use std::io::Read as _;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sim = runtime
        .block_on(forge_sim::ForgeSim::start(forge_sim::SimConfig::default()))
        .expect("forge-sim");
    sim_project(&sim);
    let dir = temp_dir();
    let database_url = format!("sqlite:{}", dir.join("wq.db").display());
    let (token, entry) = new_token("cli-admin");
    let config = write(
        &dir,
        "workqueue.yaml",
        &format!(
            "database:\n  url: \"{database_url}\"\nserver:\n  bind: \"127.0.0.1:0\"\n\
             engine:\n  handled_types: []\n{}{}",
            auth_section(&entry),
            sim_sections(&sim)
        ),
    );
    let server = Server::start_with_env(&config, SIM_ENV);
    let file = write(&dir, "change.json", &sim_change("wq/spinner").to_string());
    let command = format!(
        "{BINARY} items --url {} --token {token} submit {file} --wait",
        server.url
    );
    let mut terminal = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env_remove("WORKQUEUE_URL")
        .env_remove("WORKQUEUE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux script");
    let mut screen = terminal.stdout.take().expect("piped stdout");
    let (seen_tx, seen) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut shown = String::new();
        let mut buffer = [0_u8; 4096];
        while let Ok(read) = screen.read(&mut buffer) {
            if read == 0 {
                break;
            }
            shown.push_str(&String::from_utf8_lossy(&buffer[..read]));
            let _ = seen_tx.send(shown.clone());
        }
    });
    // The spinner's line: the elapsed time and what the item waits for.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let shown = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match seen.recv_timeout(left) {
            Ok(shown) if shown.contains(" [0s] ") && shown.contains(": no merge request yet") => {
                break shown;
            }
            Ok(shown) => last = shown,
            Err(_) => {
                let _ = terminal.kill();
                let tail: String = last
                    .chars()
                    .skip(last.chars().count().saturating_sub(500))
                    .collect();
                panic!("no spinner on the terminal; it showed, last: {tail:?}");
            }
        }
    };
    assert!(shown.contains("created "), "{shown}");
    let _ = terminal.kill();
    let _ = terminal.wait();
    let (status, logs) = server.terminate();
    assert!(status.success(), "{}", logs.join("\n"));
    std::fs::remove_dir_all(&dir).ok();
}
