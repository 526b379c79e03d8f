//! `workqueue demo`: the product's main job with nothing to set up. It
//! starts a simulated GitLab and GitHub (forge-sim) and the service on
//! SQLite in this process, submits a few changes through the real API, and
//! prints each one's way to its end state: merged (on GitLab after its flaky
//! CI job was retried by rule; on GitHub through a merge queue after a
//! review), cancelled as already upstream, or refused before any forge
//! write. Its API takes one static token, made at start and granted
//! `admin`, which it uses itself and prints for the user.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::{ForgeSim, JobOutcome, JobSpec, SimConfig};
use serde_json::{Value, json};
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_core::{Clock, SystemClock};
use wq_forge::{ForgeConfig, ForgeKind, Forges, ForgesConfig};

use crate::app;
use crate::cli::DemoArgs;
use crate::config::Config;

/// How long the demo waits for every change to reach its end state.
const DEMO_TIMEOUT: Duration = Duration::from_secs(120);
const PROJECT: &str = "demo/service";
const FORGE: &str = "gitlab";
const GITHUB: &str = "github";
/// The demo's CI retry rule: runner failures are retried after a second.
const CI_RETRY: &str = "matchers:\n  - name: runner-system-failure\n    failure_reason: runner_system_failure\n    retry_delays: [1]\n";
/// Name, identity and group of the demo's token.
const DEMO_CALLER: &str = "demo";

/// One change the demo submits, and the end it should reach.
struct Change {
    label: &'static str,
    body: Value,
    expect: &'static str,
}

fn changes() -> Vec<Change> {
    let submission = |branch: &str, title: &str, files: Value| {
        json!({
            "item_type": "mr",
            "forge": FORGE,
            "project": PROJECT,
            "source_branch": branch,
            "target_branch": "main",
            "title": title,
            "description": format!("{title}.\n\nSubmitted by `workqueue demo`."),
            "labels": ["demo"],
            "file_actions": files,
        })
    };
    vec![
        Change {
            label: "add a greeting module",
            body: submission(
                "demo/greeting",
                "Add a greeting module",
                json!([
                    {"action": "create", "file_path": "src/greeting.rs",
                     "content": "pub fn greet(name: &str) -> String {\n    format!(\"Hello, {name}!\")\n}\n"},
                    {"action": "update", "file_path": "README.md",
                     "content": "# service\n\nGreets people: see src/greeting.rs.\n"},
                ]),
            ),
            expect: "completed",
        },
        Change {
            label: "document the release process",
            body: submission(
                "demo/release-docs",
                "Document the release process",
                json!([{"action": "create", "file_path": "docs/release.md",
                        "content": "# Releasing\n\n1. Tag.\n2. Push the tag.\n"}]),
            ),
            expect: "completed",
        },
        Change {
            label: "a pull request on GitHub",
            body: {
                let mut body = submission(
                    "demo/contributing",
                    "Add contribution notes",
                    json!([{"action": "create", "file_path": "CONTRIBUTING.md",
                            "content": "# Contributing\n\nOpen a pull request.\n"}]),
                );
                body["forge"] = GITHUB.into();
                body
            },
            expect: "completed",
        },
        Change {
            label: "a change main already has",
            body: submission(
                "demo/already-upstream",
                "Restate the usage guide",
                json!([{"action": "update", "file_path": "docs/usage.md",
                        "content": USAGE}]),
            ),
            expect: "cancelled",
        },
        Change {
            label: "a change to CI configuration",
            body: submission(
                "demo/ci-tweak",
                "Skip the tests",
                json!([{"action": "update", "file_path": ".gitlab-ci.yml",
                        "content": "test:\n  script: [\"true\"]\n"}]),
            ),
            expect: "refused",
        },
    ]
}

const USAGE: &str = "# Usage\n\nRun `service --help`.\n";

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let sim = ForgeSim::start(SimConfig::default())
        .await
        .context("starting the simulated GitLab and GitHub")?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on 127.0.0.1:{} (is something else there? try --port 0)",
                args.port
            )
        })?;
    let url = format!("http://{}", listener.local_addr()?);
    let secret = format!("demo-{}", uuid::Uuid::new_v4().simple());
    let project = sim
        .gitlab_project(PROJECT)
        .require_pipeline_success(true)
        // Flaky CI: every head's first `build` fails with a runner system
        // failure, which the demo's CI retry rule retries.
        .job(
            JobSpec::new(
                "build",
                JobOutcome::flaky(
                    1,
                    "runner_system_failure",
                    "ERROR: Job failed (system failure): the runner went away\n",
                ),
            )
            .stage("build"),
        )
        .job(
            JobSpec::new("test", JobOutcome::Success)
                .stage("test")
                .duration_secs(1),
        )
        .webhook(&format!("{url}/webhooks/gitlab"), &secret)
        .create()?;
    let (owner, name) = PROJECT.split_once('/').unwrap_or(("demo", "service"));
    sim.github_create_repo(
        GithubRepoSpec::new(owner, name)
            .merge_queue(true)
            .required_approvals(1)
            .checks(&[CheckScript::new("ci", JobOutcome::Success)])
            .webhook(&format!("{url}/webhooks/github"), &secret),
    )?;
    sim.github_push_human_commit(
        PROJECT,
        "main",
        &[("README.md", Some("# service\n"))],
        "Initial commit",
    )?;
    sim.gitlab_push(
        project,
        "main",
        &[
            ("README.md", Some("# service\n")),
            ("docs/usage.md", Some(USAGE)),
        ],
        "Initial commit",
    )?;

    let database = std::env::temp_dir().join(format!("workqueue-demo-{}.db", std::process::id()));
    let mut config = Config::default();
    config.database.url = format!("sqlite:{}", database.display());
    config.engine.handled_types = Some(vec![wq_mr::TYPE_NAME.to_owned()]);
    config.engine.sweep_interval_seconds = 5;
    config.mr.public_url = url.clone();
    config.mr.queue_sync_interval_seconds = 1;
    config.ci_retry =
        wq_herder::HerderConfig::from_yaml(CI_RETRY).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (token, _) = wq_auth::new_static_token(DEMO_CALLER);
    config.auth.static_tokens = vec![StaticTokenConfig::for_token(
        DEMO_CALLER,
        &token,
        vec![DEMO_CALLER.to_owned()],
    )];
    config.auth.rules = vec![RuleConfig {
        name: "admin".to_owned(),
        groups: Some(vec![DEMO_CALLER.to_owned()]),
        issuer: None,
        claims: None,
        allow_any_subject: false,
        claims_case_insensitive: false,
        permissions: vec!["admin".to_owned()],
        item_types: None,
        forges: None,
        projects: None,
    }];
    config.forges = ForgesConfig {
        instances: BTreeMap::from([
            (
                FORGE.to_owned(),
                ForgeConfig::literal(
                    ForgeKind::Gitlab,
                    &sim.gitlab_url(),
                    forge_sim::DEFAULT_TOKEN,
                    &secret,
                ),
            ),
            (
                GITHUB.to_owned(),
                ForgeConfig::literal(
                    ForgeKind::Github,
                    &sim.github_url(),
                    forge_sim::DEFAULT_TOKEN,
                    &secret,
                ),
            ),
        ]),
    };
    let forges = Forges::from_config(&config.forges).map_err(|e| anyhow::anyhow!("{e}"))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let app = app::assemble(&config, forges, Arc::clone(&clock), None).await?;
    app.engine.start();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(wq_api::serve(listener, app.router.clone(), async move {
        let _ = stopped.await;
    }));

    // A one-time sign-in link to the dashboard for the demo's caller.
    let principal = app.auth.authenticate_token(&token).await?;
    let code = wq_ui::session::create_link(app.store.as_ref(), &principal, clock.now()).await?;
    println!("workqueue demo");
    println!("  service      {url}   (API: {url}/api/v1/work-items)");
    println!("  dashboard    {url}/ui/sign-in/link/{code}   (one-time sign-in link)");
    println!("  simulated    GitLab at {}", sim.gitlab_url());
    println!(
        "               GitHub at {} (merge queue, one review required)",
        sim.github_url()
    );
    println!("  database     {}", database.display());
    println!("  API token    {token}   (admin, for this run only)");
    println!("  try          curl -H \"Authorization: Bearer {token}\" {url}/api/v1/work-items");
    println!();

    let result = follow(&url, &token, &sim, project).await;
    match &result {
        Ok(()) => println!(
            "\nall changes reached their end state in {:.1} s",
            started.elapsed().as_secs_f64()
        ),
        Err(error) => println!("\ndemo failed: {error:#}"),
    }
    if result.is_ok() && !args.exit {
        println!("the service keeps running at {url}; Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
    }
    let _ = stop.send(());
    let _ = server.await;
    app.engine.shutdown().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    result
}

/// Submits every change and prints progress until each reaches its end.
async fn follow(
    url: &str,
    token: &str,
    sim: &forge_sim::SimHandle,
    project: u64,
) -> anyhow::Result<()> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))?,
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()?;
    let mut pending: Vec<(String, &'static str, &'static str)> = Vec::new();
    for change in changes() {
        let response = client
            .post(format!("{url}/api/v1/work-items"))
            .json(&change.body)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if change.expect == "refused" {
            anyhow::ensure!(
                status == reqwest::StatusCode::UNPROCESSABLE_ENTITY,
                "{}: expected 422, got {status}: {body}",
                change.label
            );
            println!(
                "- {:<30} refused before any forge write: {}",
                change.label,
                body["error"]["message"].as_str().unwrap_or_default()
            );
            continue;
        }
        anyhow::ensure!(
            status == reqwest::StatusCode::CREATED,
            "{}: expected 201, got {status}: {body}",
            change.label
        );
        let id = body["item"]["id"].as_str().unwrap_or_default().to_owned();
        println!("- {:<30} submitted as item {id}", change.label);
        pending.push((id, change.label, change.expect));
    }
    let first_merged = pending
        .iter()
        .find(|(_, _, expect)| *expect == "completed")
        .map(|(id, label, _)| (id.clone(), *label));
    let deadline = Instant::now() + DEMO_TIMEOUT;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut approved: Vec<(String, u64)> = Vec::new();
    while !pending.is_empty() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "changes did not finish within {} s",
            DEMO_TIMEOUT.as_secs()
        );
        let mut still = Vec::new();
        for (id, label, expect) in pending {
            let item: Value = client
                .get(format!("{url}/api/v1/work-items/{id}"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let lines = seen.entry(id.clone()).or_default();
            for line in progress(&item) {
                if !lines.contains(&line) {
                    println!("  {label:<30} {line}");
                    lines.push(line);
                }
            }
            // Merges wait for a person's review (`mr.require_review`), and
            // the GitHub repository requires one too: once only the review
            // is missing, the demo approves as a reviewer would.
            let waits_for_review = item["dimensions"].as_array().is_some_and(|rows| {
                rows.iter().any(|d| {
                    d["dimension"] == "needs_reconcile"
                        && d["detail"]["unmet_gates"].as_array().is_some_and(|gates| {
                            !gates.is_empty()
                                && gates
                                    .iter()
                                    .all(|g| g == "approved" || g == "review_by_person")
                        })
                })
            });
            if waits_for_review
                && let Some(number) = item["detail"]["mr"]["number"].as_u64()
                && !approved.contains(&(item["detail"]["forge"].to_string(), number))
            {
                if item["detail"]["forge"] == GITHUB {
                    sim.github_approve(PROJECT, number, "reviewer")?;
                } else {
                    sim.gitlab_approve(project, number, "reviewer")?;
                }
                println!("  {label:<30} approved by a reviewer");
                approved.push((item["detail"]["forge"].to_string(), number));
            }
            let phase = item["phase"].as_str().unwrap_or_default();
            if phase == "active" {
                still.push((id, label, expect));
            } else {
                anyhow::ensure!(
                    phase == expect,
                    "{label}: ended {phase}, expected {expect} ({})",
                    item["error"]
                );
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let head = sim.gitlab_branch_head(project, "main").unwrap_or_default();
    println!(
        "\nmain of {PROJECT} is now at {}",
        &head[..head.len().min(12)]
    );
    if let Some((id, label)) = first_merged {
        print_trail(&client, url, &id, label).await?;
    }
    Ok(())
}

/// The first 12 characters of a SHA or hash in `value`.
fn short(value: &Value) -> &str {
    let text = value.as_str().unwrap_or("?");
    &text[..text.len().min(12)]
}

/// Prints the audit trail of one merged change as a chain: the caller and
/// the content they submitted, the commit pushed, the change request
/// opened, the merge bound to the checked head and the forge's answer;
/// and checks that every record names the hash of the one before.
async fn print_trail(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    label: &str,
) -> anyhow::Result<()> {
    let trail: Value = client
        .get(format!("{url}/api/v1/work-items/{id}/audit"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let records = trail["records"].as_array().cloned().unwrap_or_default();
    let first = |kind: &str| records.iter().find(|r| r["kind"] == kind);
    println!("\nthe audit trail of {label:?} (item {id}):");
    if let Some(r) = first("submission.created") {
        println!(
            "  submitted by {:<22} content {}",
            r["actor"].as_str().unwrap_or("?"),
            short(&r["new_state"]["content_hash"])
        );
    }
    if let Some(r) = first("forge.push") {
        println!("  pushed commit {}", short(&r["metadata"]["commit_sha"]));
    }
    if let Some(r) = first("forge.change_created") {
        println!("  opened merge request !{}", r["metadata"]["number"]);
    }
    if let Some(r) = first("forge.merge_reserved") {
        println!(
            "  merge asked for head {}",
            short(&r["metadata"]["expected_head_sha"])
        );
    }
    if let Some(r) = first("forge.merge_answered") {
        println!(
            "  the forge answered {}",
            r["metadata"]["result"].as_str().unwrap_or("?")
        );
    }
    if let Some(r) = first("forge.merged") {
        println!(
            "  merged as commit {}",
            short(&r["metadata"]["merge_commit_sha"])
        );
    }
    let linked = records
        .windows(2)
        .all(|pair| pair[1]["prev_hash"] == pair[0]["hash"]);
    anyhow::ensure!(linked, "the audit trail of item {id} is not one chain");
    println!(
        "  {} records, each naming the hash of the one before (workqueue audit verify checks them all)",
        records.len()
    );
    Ok(())
}

/// What is worth a progress line about an item now.
fn progress(item: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    let detail = &item["detail"];
    if let (Some(number), Some(url)) = (
        detail["mr"]["number"].as_u64(),
        detail["mr"]["url"].as_str(),
    ) {
        let what = if detail["forge"] == GITHUB {
            format!("pull request #{number}")
        } else {
            format!("merge request !{number}")
        };
        lines.push(format!("{what} open: {url}"));
    }
    if let Some(pipeline) = detail["mr"]["head_pipeline_id"].as_u64() {
        lines.push(format!("pipeline #{pipeline} running"));
    }
    let rows = item["dimensions"].as_array().cloned().unwrap_or_default();
    for row in &rows {
        if row["dimension"] != "needs_ci_retry" {
            continue;
        }
        for job in row["detail"]["jobs"].as_array().into_iter().flatten() {
            let (name, id) = (job["name"].as_str().unwrap_or_default(), &job["id"]);
            let matcher = job["matcher"].as_str().unwrap_or_default();
            match job["state"].as_str() {
                Some("scheduled") => lines.push(format!(
                    "job {name} #{id} failed ({}); retry scheduled by rule {matcher}",
                    job["failure_reason"].as_str().unwrap_or("unknown reason")
                )),
                Some("retried") => {
                    lines.push(format!("job {name} #{id} retried by rule {matcher}"))
                }
                Some("no_match") => lines.push(format!(
                    "job {name} #{id} failed: not retried (no rule matches)"
                )),
                _ => {}
            }
        }
    }
    if let Some(state) = detail["merge_queue"]["state"].as_str() {
        lines.push(format!("in the merge queue ({state})"));
    }
    if let Some(result) = detail["merge"]["last_result"].as_str() {
        lines.push(format!("merge attempt {result}"));
    }
    match item["phase"].as_str() {
        Some("completed") => lines.push("completed: merged".into()),
        Some("cancelled") => lines.push(format!(
            "cancelled: {}",
            item["error"].as_str().unwrap_or_default()
        )),
        Some("failed") => lines.push(format!(
            "failed: {}",
            item["error"].as_str().unwrap_or_default()
        )),
        _ => {}
    }
    lines
}
