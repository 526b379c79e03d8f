//! `cargo bench -p workqueue --bench mr`: the `mr` type through the real
//! service, on SQLite and PostgreSQL in one run.
//!
//! - **submit**: `POST /api/v1/work-items` with 16 concurrent clients, each
//!   body three file actions of about 2 KiB: validation, content hash and
//!   the upsert transaction (the engine does not process them). Then the
//!   same bodies again (`unchanged`: validation, hash, one lookup). Each
//!   pass also prints the CPU it used per submission in this process (the
//!   service and its clients) and on the rest of the machine (the
//!   database server, on PostgreSQL), from Linux's `/proc`, and the
//!   summary the audit trail's share of both.
//! - **webhook → merge**: for MRs whose pipeline just passed, the time from
//!   the `Pipeline Hook` (status success) arriving at the service to the
//!   merge call arriving at the sim, both on the wall clock of this one
//!   machine (the sim's clock is wall time when nothing advances it): event
//!   insert, wake-up, event handling, one MR read, the journal reservation
//!   and the merge request.
//!
//! - **webhook → merge, many in flight**: the same latency with about
//!   `WQ_BENCH_IN_FLIGHT` (100) GitLab merge requests open at once: one
//!   change submitted every 50 ms, each with five seconds of CI, so their
//!   pipelines' webhooks arrive one every 50 ms while the others wait;
//!   p50, p90, p99 and max.
//!
//! - **forge calls per merged change**: every request the service sent to
//!   forge-sim while the merges ran (forge-sim's request log), by forge and
//!   endpoint (method and path template), divided by the number of merged
//!   changes; `304 Not Modified` answers (a conditional re-read that found
//!   nothing new, which GitHub does not count against the rate limit) are
//!   counted apart. A typical change on each forge: created, one CI run,
//!   merged. GitLab in the webhook → merge pass; GitHub in a pass of its
//!   own (a repository without a merge queue, one check run of one second).
//!
//! The projects' CI takes one second, so the merge waits for the pipeline's
//! webhook. A negative figure would mean something else triggered it.
//!
//! Env: `WQ_BENCH_SUBMISSIONS` (default 2000), `WQ_BENCH_MERGES` (20, the
//! same number on GitHub), `WQ_BENCH_IN_FLIGHT` (100; 0 skips that pass),
//! `WQ_BENCH_BACKENDS` (`sqlite,postgres`), `WQ_BENCH_ROUNDS` (3: rounds of
//! the submissions, each on a fresh database), `WQ_BENCH_SLICES` (8: each
//! round's passes cut into slices that run with and without the audit
//! trail in turns, with, without, without, with, ..., so that the machine's
//! drift during a round weighs on both alike; the round's cost compares
//! the sums of its slices).
#![allow(
    clippy::disallowed_methods,
    reason = "the benchmark times on the wall clock"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::{ForgeSim, JobOutcome, JobSpec, RequestLogEntry, SimConfig, SimHandle};
use serde_json::{Value, json};
use time::OffsetDateTime;
use workqueue::app;
use workqueue::config::Config;
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_core::{Clock, SystemClock};
use wq_forge::{ForgeConfig, ForgeKind, Forges, ForgesConfig};
use wq_testkit::cpu::cpu_seconds;

/// The binary's allocator (`src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECRET: &str = "bench-secret";
const PROJECT: &str = "bench/app";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// When each successful pipeline's webhook reached the service, by ref.
type Arrivals = Arc<Mutex<BTreeMap<String, OffsetDateTime>>>;

/// The forge a pass drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gitlab,
    Github,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Gitlab => "gitlab",
            Kind::Github => "github",
        }
    }
}

struct Service {
    url: String,
    kind: Kind,
    client: reqwest::Client,
    project_path: String,
    arrivals: Arrivals,
    engine: Arc<wq_engine::ProcessingManager>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Service {
    /// Submits change `n` creating the one file `path`; answers its item id.
    async fn submit_file(&self, n: usize, path: &str, content: &str) -> String {
        let mut submission = body(self.kind, &self.project_path, n);
        submission["file_actions"] =
            json!([{"action": "create", "file_path": path, "content": content}]);
        let reply: Value = self
            .client
            .post(format!("{}/api/v1/work-items", self.url))
            .json(&submission)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        reply["item"]["id"].as_str().unwrap().to_owned()
    }

    /// Waits (reading the item every `poll`, until `deadline`) for item
    /// `id` to complete; answers its merge request's number.
    async fn merged_number(&self, id: &str, deadline: Instant, poll: Duration) -> u64 {
        loop {
            let item: Value = self
                .client
                .get(format!("{}/api/v1/work-items/{id}", self.url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if item["phase"] == "completed" {
                return item["detail"]["mr"]["number"].as_u64().unwrap();
            }
            assert!(Instant::now() < deadline, "not merged: {item}");
            tokio::time::sleep(poll).await;
        }
    }
}

async fn start(database_url: &str, sim: &SimHandle, process: bool, kind: Kind) -> Service {
    start_with_ci(database_url, sim, process, kind, 1).await
}

/// [`start`] with CI that takes `ci_secs` seconds.
async fn start_with_ci(
    database_url: &str,
    sim: &SimHandle,
    process: bool,
    kind: Kind,
    ci_secs: u64,
) -> Service {
    let (token, _) = wq_auth::new_static_token("bench");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let path = format!("{PROJECT}-{}", uuid::Uuid::new_v4().simple());
    let project_path = match kind {
        Kind::Gitlab => {
            let project = sim
                .gitlab_project(&path)
                .require_pipeline_success(true)
                // Seconds of CI, so the first reconcile sees it running and the
                // merge waits for the pipeline's webhook.
                .job(JobSpec::new("unit", JobOutcome::Success).duration_secs(ci_secs))
                .webhook(&format!("{url}/webhooks/gitlab"), SECRET)
                .create()
                .unwrap();
            sim.gitlab_push(project, "main", &[("README.md", Some("# bench\n"))], "init")
                .unwrap();
            gitlab_project_path(sim, project).await
        }
        Kind::Github => {
            let (owner, name) = path.split_once('/').unwrap();
            sim.github_create_repo(
                GithubRepoSpec::new(owner, name)
                    // One check run: the merge waits for its webhook.
                    .checks(&[CheckScript::new("ci", JobOutcome::Success).duration_secs(ci_secs)])
                    .webhook(&format!("{url}/webhooks/github"), SECRET),
            )
            .unwrap();
            sim.github_push_human_commit(
                &path,
                "main",
                &[("README.md", Some("# bench\n"))],
                "init",
            )
            .unwrap();
            path
        }
    };
    let mut config = Config::default();
    config.database.url = database_url.to_owned();
    config.database.max_connections = 20;
    config.engine.handled_types = Some(if process {
        vec!["mr".into()]
    } else {
        Vec::new()
    });
    config.mr.public_url = url.clone();
    // The path measured is webhook → merge call: the forge's own rules
    // decide the review gate, so no person needs to approve each MR.
    config.mr.require_review = false;
    config.auth.static_tokens = vec![StaticTokenConfig::for_token(
        "bench",
        &token,
        vec!["bench".into()],
    )];
    config.auth.rules = vec![RuleConfig {
        name: "bench".into(),
        groups: Some(vec!["bench".into()]),
        issuer: None,
        claims: None,
        allow_any_subject: false,
        claims_case_insensitive: false,
        permissions: vec!["admin".into()],
        item_types: None,
        forges: None,
        projects: None,
    }];
    config.forges = ForgesConfig {
        instances: BTreeMap::from([
            (
                "gitlab".to_owned(),
                ForgeConfig::literal(
                    ForgeKind::Gitlab,
                    &sim.gitlab_url(),
                    forge_sim::DEFAULT_TOKEN,
                    SECRET,
                ),
            ),
            (
                "github".to_owned(),
                ForgeConfig::literal(
                    ForgeKind::Github,
                    &sim.github_url(),
                    forge_sim::DEFAULT_TOKEN,
                    SECRET,
                ),
            ),
        ]),
    };
    let forges = Forges::from_config(&config.forges).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let built = app::assemble(&config, forges, clock, None).await.unwrap();
    built.engine.start();
    let arrivals: Arrivals = Arc::default();
    let seen = arrivals.clone();
    let router = built.router.clone().layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let seen = seen.clone();
            async move { record_pipeline_success(request, next, seen).await }
        },
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(wq_api::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    Service {
        url,
        kind,
        client,
        project_path,
        arrivals,
        engine: built.engine,
        stop,
        server,
    }
}

/// Notes the arrival time of `Pipeline Hook` deliveries with status
/// success, then hands the request on unchanged.
async fn record_pipeline_success(
    request: axum::extract::Request,
    next: axum::middleware::Next,
    arrivals: Arrivals,
) -> axum::response::Response {
    let arrived = OffsetDateTime::now_utc();
    let is_pipeline = request
        .headers()
        .get("x-gitlab-event")
        .is_some_and(|v| v == "Pipeline Hook");
    if !is_pipeline {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let hook: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if hook["object_attributes"]["status"] == "success"
        && let Some(reference) = hook["object_attributes"]["ref"].as_str()
    {
        arrivals
            .lock()
            .unwrap()
            .entry(reference.to_owned())
            .or_insert(arrived);
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

impl Service {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
        self.engine.shutdown().await;
    }
}

fn body(forge: Kind, project: &str, n: usize) -> Value {
    let content = "x".repeat(2000);
    json!({
        "item_type": "mr",
        "forge": forge.name(),
        "project": project,
        "source_branch": format!("bench/{n}"),
        "target_branch": "main",
        "title": format!("Bench change {n}"),
        "description": "A benchmark submission.",
        "labels": ["bench"],
        "file_actions": [
            {"action": "create", "file_path": format!("src/{n}/a.rs"), "content": content},
            {"action": "create", "file_path": format!("src/{n}/b.rs"), "content": content},
            {"action": "create", "file_path": format!("docs/{n}.md"), "content": content},
        ],
    })
}

/// What one pass of submissions measured.
#[derive(Debug, Clone, Copy, Default)]
struct Submitted {
    /// Submissions.
    count: f64,
    /// Wall-clock seconds they took.
    seconds: f64,
    /// CPU seconds in this process (the service and its clients).
    process: f64,
    /// CPU seconds on the rest of the machine (the database server, on
    /// PostgreSQL).
    elsewhere: f64,
}

impl Submitted {
    fn per_second(&self) -> f64 {
        self.count / self.seconds
    }

    /// CPU per submission in this process, µs.
    fn process_us(&self) -> f64 {
        self.process * 1e6 / self.count
    }

    /// CPU per submission on the rest of the machine, µs.
    fn elsewhere_us(&self) -> f64 {
        self.elsewhere * 1e6 / self.count
    }

    /// This and `other` as one pass.
    fn add(&mut self, other: &Submitted) {
        self.count += other.count;
        self.seconds += other.seconds;
        self.process += other.process;
        self.elsewhere += other.elsewhere;
    }
}

/// Submits `bodies` with `clients` concurrent clients.
async fn submit_all(
    service: &Service,
    bodies: &[Value],
    clients: usize,
    expect: &str,
) -> Submitted {
    let client = service.client.clone();
    let url = &service.url;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let bodies = Arc::new(bodies.to_vec());
    let (process_before, machine_before) = cpu_seconds();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let client = client.clone();
            let next = next.clone();
            let bodies = bodies.clone();
            let url = format!("{url}/api/v1/work-items");
            let expect = expect.to_owned();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    let reply: Value = client
                        .post(&url)
                        .json(body)
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    assert_eq!(reply["outcome"], expect.as_str(), "{reply}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    let (process_after, machine_after) = cpu_seconds();
    let process = process_after - process_before;
    Submitted {
        count: bodies.len() as f64,
        seconds,
        process,
        elsewhere: ((machine_after - machine_before) - process).max(0.0),
    }
}

/// One round of submissions on a fresh database: `count` created, then the
/// same again (unchanged), each pass cut into `slices` slices that run with
/// and without the audit trail in turns (with, without, without, with, ...;
/// the other way round when `trail_first` is false), so that the machine's
/// drift during the round weighs on both alike. Answers (created,
/// unchanged) with the trail and without it, each the sum of its slices.
async fn bench_submit(
    database_url: &str,
    sim: &SimHandle,
    count: usize,
    slices: usize,
    trail_first: bool,
) -> [(Submitted, Submitted); 2] {
    let service = start(database_url, sim, false, Kind::Gitlab).await;
    let bodies: Vec<Value> = (0..count)
        .map(|n| body(Kind::Gitlab, &service.project_path, n))
        .collect();
    // Warm up connections and caches, on both paths measured: on
    // PostgreSQL a created submission's first record is a plain insert and
    // an unchanged one's goes through `wq_audit_append_record`, whose first
    // call on each connection (compiling it, planning its statements) would
    // otherwise fall in the unchanged pass's first slice with the trail.
    let warm = 16.min(count);
    submit_all(&service, &bodies[..warm], 16, "created").await;
    submit_all(&service, &bodies[..warm], 16, "unchanged").await;
    let mut passes = [(Submitted::default(), Submitted::default()); 2];
    for (bodies, expect) in [(&bodies[warm..], "created"), (&bodies[..], "unchanged")] {
        let size = bodies.len().div_ceil(slices).max(1);
        for (n, slice) in bodies.chunks(size).enumerate() {
            let trail = (n % 4 == 0 || n % 4 == 3) == trail_first;
            wq_store::testing::set_audit(trail);
            let submitted = submit_all(&service, slice, 16, expect).await;
            let pass = &mut passes[usize::from(!trail)];
            if expect == "created" {
                pass.0.add(&submitted);
            } else {
                pass.1.add(&submitted);
            }
        }
    }
    wq_store::testing::set_audit(true);
    service.stop().await;
    passes
}

async fn gitlab_project_path(sim: &SimHandle, project: u64) -> String {
    let reply: Value = reqwest::Client::new()
        .get(format!("{}/projects/{project}", sim.gitlab_url()))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    reply["path_with_namespace"].as_str().unwrap().to_owned()
}

/// What one merge pass measured.
struct Merges {
    /// Milliseconds from each successful pipeline's webhook delivery to the
    /// merge call of its MR (GitLab only).
    latencies: Vec<f64>,
    /// Every request the service sent to the forge during the pass.
    requests: Vec<RequestLogEntry>,
    /// The sequence number of the last request before the last change was
    /// submitted: its requests come after it.
    last_change_after: u64,
}

/// Submits `count` changes one after the other on `kind` and waits for each
/// to be merged.
async fn bench_merges(database_url: &str, sim: &SimHandle, count: usize, kind: Kind) -> Merges {
    let service = start(database_url, sim, true, kind).await;
    // The pass's requests only: the log starts empty once the project is set up.
    sim.clear_requests();
    let mut latencies = Vec::new();
    let mut last_change_after = 0;
    for n in 0..count {
        if n + 1 == count {
            last_change_after = sim.requests().last().map_or(0, |r| r.seq);
        }
        let id = service.submit_file(n, &format!("m/{n}.txt"), "m\n").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let number = service
            .merged_number(&id, deadline, Duration::from_millis(20))
            .await;
        if service.kind != Kind::Gitlab {
            continue;
        }
        let encoded = service.project_path.replace('/', "%2F");
        let merge_path = format!("/projects/{encoded}/merge_requests/{number}/merge");
        let merge_at = sim
            .requests()
            .into_iter()
            .find(|r| r.method == "PUT" && r.path.ends_with(&merge_path))
            .map(|r| r.time)
            .expect("merge call");
        let hook_at = wait_for_arrival(&service.arrivals, &format!("bench/{n}")).await;
        latencies.push((merge_at - hook_at).as_seconds_f64() * 1000.0);
    }
    // What the last change still does once merged (its status note) counts too.
    let requests = settled_requests(sim).await;
    service.stop().await;
    Merges {
        latencies,
        requests,
        last_change_after,
    }
}

/// Webhook → merge with many merge requests in flight (GitLab): `count`
/// changes submitted one every `interval`, each with CI of `ci_secs`, so
/// that about `count` are open at once while their pipelines' webhooks
/// arrive one every `interval`. Answers each change's webhook → merge
/// latency in ms, and the most changes open at once (submitted, not yet
/// merged).
async fn bench_in_flight(
    database_url: &str,
    sim: &SimHandle,
    count: usize,
    interval: Duration,
    ci_secs: u64,
) -> (Vec<f64>, usize) {
    let service = start_with_ci(database_url, sim, true, Kind::Gitlab, ci_secs).await;
    let mut submitted = Vec::with_capacity(count);
    let mut ticker = tokio::time::interval(interval);
    for n in 0..count {
        ticker.tick().await;
        let at = OffsetDateTime::now_utc();
        let id = service.submit_file(n, &format!("f/{n}.txt"), "f\n").await;
        submitted.push((id, at));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut numbers = Vec::with_capacity(count);
    for (id, _) in &submitted {
        numbers.push(
            service
                .merged_number(id, deadline, Duration::from_millis(50))
                .await,
        );
    }
    let requests = sim.requests();
    let encoded = service.project_path.replace('/', "%2F");
    let mut latencies = Vec::with_capacity(count);
    let mut spans = Vec::with_capacity(count);
    for (n, number) in numbers.into_iter().enumerate() {
        let merge_path = format!("/projects/{encoded}/merge_requests/{number}/merge");
        let merge_at = requests
            .iter()
            .find(|r| r.method == "PUT" && r.path.ends_with(&merge_path))
            .map(|r| r.time)
            .expect("merge call");
        let hook_at = wait_for_arrival(&service.arrivals, &format!("bench/{n}")).await;
        latencies.push((merge_at - hook_at).as_seconds_f64() * 1000.0);
        spans.push((submitted[n].1, merge_at));
    }
    service.stop().await;
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(from, to)| from <= start && start < to)
                .count()
        })
        .max()
        .unwrap_or(0);
    (latencies, most)
}

/// The request log once it stopped growing for a second (at most ten).
async fn settled_requests(sim: &SimHandle) -> Vec<RequestLogEntry> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = sim.requests().len();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = sim.requests();
        if now.len() == seen || Instant::now() > deadline {
            return now;
        }
        seen = now.len();
    }
}

/// A request's path as a template: the values named after the word before
/// them (`GET /api/v4/projects/:id/merge_requests/:iid`); GitHub's branch
/// names and the like (any number of segments) are one `:ref`.
fn template(entry: &RequestLogEntry) -> String {
    let class = wq_forge::metrics::endpoint_class(&format!(
        "{} {}",
        entry.method,
        entry.path.strip_prefix("/api/v4").unwrap_or(&entry.path)
    ));
    let (method, path) = class.split_once(' ').unwrap_or(("", &class));
    let prefix = if entry.path.starts_with("/api/v4") {
        "/api/v4"
    } else {
        ""
    };
    let mut out = format!("{method} {prefix}");
    let mut previous = "";
    for segment in path.split('/') {
        out.push('/');
        if segment == "*" {
            out.push_str(match previous {
                "projects" => ":id",
                "merge_requests" if prefix.is_empty() => ":number",
                "merge_requests" => ":iid",
                "repos" => ":owner/:repo",
                "pulls" | "issues" => ":number",
                "notes" | "comments" => ":note_id",
                "jobs" => ":job_id",
                "pipelines" => ":pipeline_id",
                "commits" => ":sha",
                "trees" | "blobs" => ":sha",
                "merge-async" => ":uuid",
                _ => ":ref",
            });
        } else {
            out.push_str(segment);
        }
        previous = segment;
    }
    out
}

/// The calls of one pass per merged change, by endpoint: a markdown table
/// with the calls answered other than 304, the 304 answers apart, and the
/// totals.
fn calls_table(forge: Kind, merges: &Merges, merged: usize) -> String {
    let requests = &merges.requests;
    let mut by_endpoint: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let is_forge = |entry: &&RequestLogEntry| match forge {
        Kind::Gitlab => entry.path.starts_with("/api/v4"),
        Kind::Github => !entry.path.starts_with("/api/v4"),
    };
    for entry in requests.iter().filter(is_forge) {
        let counts = by_endpoint.entry(template(entry)).or_default();
        if entry.status == 304 {
            counts.1 += 1;
        } else {
            counts.0 += 1;
        }
    }
    if std::env::var_os("WQ_BENCH_CALL_LOG").is_some() {
        // The last change's requests in order, to see where calls go.
        let branch = format!("{}", merged.saturating_sub(1));
        println!(
            "{} requests of the last change (bench/{branch}):",
            forge.name()
        );
        for entry in requests
            .iter()
            .filter(|entry| entry.seq > merges.last_change_after)
            .filter(is_forge)
        {
            println!(
                "  {:>4} {} {} {}",
                entry.seq,
                entry.status,
                template(entry),
                entry.query.as_deref().unwrap_or("")
            );
        }
    }
    let per = |n: usize| n as f64 / merged.max(1) as f64;
    let mut table = format!(
        "{} ({merged} merged changes)\n| endpoint | calls per change | 304 per change |\n|---|---|---|\n",
        forge.name()
    );
    let (mut total, mut total_304) = (0, 0);
    for (endpoint, (calls, not_modified)) in &by_endpoint {
        table.push_str(&format!(
            "| `{endpoint}` | {:.2} | {:.2} |\n",
            per(*calls),
            per(*not_modified)
        ));
        total += calls;
        total_304 += not_modified;
    }
    table.push_str(&format!(
        "| **total** | **{:.2}** | **{:.2}** |\n",
        per(total),
        per(total_304)
    ));
    table
}

/// The arrival of `reference`'s success hook (the delivery may still be on
/// its way when the merge is seen).
async fn wait_for_arrival(arrivals: &Arrivals, reference: &str) -> OffsetDateTime {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = arrivals.lock().unwrap().get(reference) {
            return *at;
        }
        assert!(
            Instant::now() < deadline,
            "no pipeline hook for {reference}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn median(figures: &mut [f64]) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let submissions = env_usize("WQ_BENCH_SUBMISSIONS", 2000);
        let merges = env_usize("WQ_BENCH_MERGES", 20);
        let rounds = env_usize("WQ_BENCH_ROUNDS", 3).max(1);
        let slices = env_usize("WQ_BENCH_SLICES", 8).max(2);
        let backends =
            std::env::var("WQ_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
        let sim = ForgeSim::start(SimConfig::default()).await.unwrap();
        println!("mr benchmark: {submissions} submissions, {merges} merges");
        println!(
            "| | submit created, req/s | submit unchanged, req/s | webhook→merge p50 | p90 | max |"
        );
        println!("|---|---|---|---|---|---|");
        let mut costs = Vec::new();
        let mut calls = Vec::new();
        for backend in backends.split(',') {
            let fresh = || async {
                match backend {
                    "sqlite" => wq_store::testing::fresh_sqlite_url(),
                    _ => wq_store::testing::fresh_postgres_url().await,
                }
            };
            // The audit trail's cost: the same submissions with and without
            // it, over `WQ_BENCH_ROUNDS` rounds, each on a fresh database
            // whose passes run the two in `WQ_BENCH_SLICES` slices in turns;
            // each round's paired cost and their median.
            let mut runs = [Vec::new(), Vec::new()];
            let (mut created_costs, mut unchanged_costs) = (Vec::new(), Vec::new());
            for round in 1..=rounds {
                let pair =
                    bench_submit(&fresh().await, &sim, submissions, slices, round % 2 == 1).await;
                for (audit, (created, unchanged)) in [true, false].into_iter().zip(&pair) {
                    for (what, figures) in [("created", created), ("unchanged", unchanged)] {
                        println!(
                            "({backend}, round {round}, audit {}: {what} {:.0}/s; CPU per submission {:.0} µs in the service's process, {:.0} µs elsewhere)",
                            if audit { "on" } else { "off" },
                            figures.per_second(),
                            figures.process_us(),
                            figures.elsewhere_us(),
                        );
                    }
                }
                created_costs
                    .push((1.0 - pair[0].0.per_second() / pair[1].0.per_second()) * 100.0);
                unchanged_costs
                    .push((1.0 - pair[0].1.per_second() / pair[1].1.per_second()) * 100.0);
                runs[0].push(pair[0]);
                runs[1].push(pair[1]);
            }
            let [(created, unchanged), (created_off, unchanged_off)] =
                runs.each_ref().map(|pairs| {
                    let mut created: Vec<f64> =
                        pairs.iter().map(|pair| pair.0.per_second()).collect();
                    let mut unchanged: Vec<f64> =
                        pairs.iter().map(|pair| pair.1.per_second()).collect();
                    (median(&mut created), median(&mut unchanged))
                });
            // The trail's extra CPU per submission, in the service's process
            // and elsewhere (the database server), medians of the rounds.
            let extra = |pick: fn(&(Submitted, Submitted)) -> Submitted| {
                let [with, without] = &runs;
                let (mut process, mut elsewhere): (Vec<f64>, Vec<f64>) = with
                    .iter()
                    .zip(without)
                    .map(|(with, without)| {
                        let (with, without) = (pick(with), pick(without));
                        (
                            with.process_us() - without.process_us(),
                            with.elsewhere_us() - without.elsewhere_us(),
                        )
                    })
                    .unzip();
                (median(&mut process), median(&mut elsewhere))
            };
            let (created_process, created_elsewhere) = extra(|pair| pair.0);
            let (unchanged_process, unchanged_elsewhere) = extra(|pair| pair.1);
            let gitlab = bench_merges(&fresh().await, &sim, merges, Kind::Gitlab).await;
            let github = bench_merges(&fresh().await, &sim, merges, Kind::Github).await;
            calls.push(format!(
                "{backend}, forge calls per merged change:\n\n{}\n{}",
                calls_table(Kind::Gitlab, &gitlab, merges),
                calls_table(Kind::Github, &github, merges),
            ));
            let mut latencies = gitlab.latencies;
            latencies.sort_by(f64::total_cmp);
            println!(
                "| {backend} | {created:.0} | {unchanged:.0} | {:.1} ms | {:.1} ms | {:.1} ms |",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.9),
                latencies.last().copied().unwrap_or_default(),
            );
            println!("| {backend}, audit off | {created_off:.0} | {unchanged_off:.0} | | | |");
            let by_round = |costs: &[f64]| {
                costs
                    .iter()
                    .map(|cost| format!("{cost:.1}%"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            costs.push(format!(
                "{backend}: audit costs {:.1}% of created submissions (by round {}) and {:.1}% of unchanged ones (by round {}); medians of {rounds} rounds\n{backend}: the trail's extra CPU per submission: created {created_process:.0} µs in the service's process and {created_elsewhere:.0} µs elsewhere, unchanged {unchanged_process:.0} µs and {unchanged_elsewhere:.0} µs (medians of the rounds' differences)",
                median(&mut created_costs.clone()),
                by_round(&created_costs),
                median(&mut unchanged_costs.clone()),
                by_round(&unchanged_costs),
            ));
        }
        for cost in costs {
            println!("{cost}");
        }
        for table in calls {
            println!("\n{table}");
        }
        let in_flight = env_usize("WQ_BENCH_IN_FLIGHT", 100);
        if in_flight > 0 {
            println!(
                "\nwebhook→merge with merge requests in flight (GitLab, one change every 50 ms, CI 5 s):\n"
            );
            println!("| backend | in flight (most) | p50 | p90 | p99 | max |");
            println!("|---|---|---|---|---|---|");
            for backend in backends.split(',') {
                let url = match backend {
                    "sqlite" => wq_store::testing::fresh_sqlite_url(),
                    _ => wq_store::testing::fresh_postgres_url().await,
                };
                let (mut latencies, most) =
                    bench_in_flight(&url, &sim, in_flight, Duration::from_millis(50), 5).await;
                latencies.sort_by(f64::total_cmp);
                println!(
                    "| {backend} | {most} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
                    percentile(&latencies, 0.5),
                    percentile(&latencies, 0.9),
                    percentile(&latencies, 0.99),
                    latencies.last().copied().unwrap_or_default(),
                );
            }
        }
    });
}
