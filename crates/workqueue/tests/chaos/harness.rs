//! The chaos run: several `workqueue serve` processes on one PostgreSQL
//! database against forge-sim with faults on, one of them killed with
//! SIGKILL every few seconds and started again, until every item settles;
//! then the invariants, read from forge-sim's own state and request log and
//! from the database.
//!
//! Shared by the `chaos` test (200 items, asserts the invariants) and the
//! `chaos` bench (`cargo bench -p workqueue --bench chaos -- --items 1000
//! --replicas 3 --seed N`, prints the figures).
//!
//! What runs:
//!
//! - forge-sim in this process, on its wall-clock ticker. Three GitLab
//!   projects (plain CI; a flaky `build` job failing once per head with a
//!   runner system failure, retried by rule; merge trains) and two GitHub
//!   repositories (plain checks; a merge queue with one required review).
//!   Every forge call may answer 5xx, 429 with `Retry-After`, or hang past
//!   the replicas' client timeout ([`Rates`]); webhooks are dropped,
//!   duplicated or delayed (delivered after later ones).
//! - A webhook relay: forge-sim delivers to it, it forwards each delivery
//!   to one live replica. A delivery to a replica that dies on it is lost,
//!   as the forge would lose it.
//! - `workqueue serve` replicas, each with its own config file on a free
//!   port, all on one fresh PostgreSQL database, `require_review: true`.
//! - A reviewer ("alice") who approves each head of every open change
//!   request some time after first seeing it.
//! - Submissions through random live replicas (retried on connection errors
//!   and 5xx: an answered submission is durable); some items are
//!   resubmitted with new content mid-flight; some have `auto_merge: false`.
//! - A killer: every few seconds one replica gets SIGKILL and is started
//!   again a moment later on a new port.
//!
//! Then the kills and faults stop, and the run waits (bounded) until it
//! settles: nothing queued in the sim, no pending event, every item where
//! it should end. See [`Invariants`] for what is checked and how.
#![allow(
    clippy::disallowed_methods,
    reason = "a multi-process run on the wall clock: it polls with bounded deadlines"
)]
#![allow(dead_code, reason = "the test and the bench use different parts")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::{
    FaultRule, ForgeSim, HttpFault, JobOutcome, JobSpec, SimConfig, SimHandle, WebhookFaultKind,
    WebhookFaultRule,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use time::OffsetDateTime;

const SECRET: &str = "chaos-hook-secret";
/// The person whose approvals satisfy the review gate.
pub const REVIEWER: &str = "alice";
/// The replicas' per-request forge timeout; a hang fault lasts longer.
const FORGE_TIMEOUT_SECS: u64 = 2;
const HANG_SECS: u64 = 30;
const GITLAB_PLAIN: &str = "chaos/plain";
const GITLAB_FLAKY: &str = "chaos/flaky";
const GITLAB_TRAIN: &str = "chaos/train";
const GITHUB_PLAIN: &str = "chaos/plain";
const GITHUB_QUEUE: &str = "chaos/queue";

/// Fault rates, each a probability per forge call or per webhook delivery.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub server_error: f64,
    pub rate_limit: f64,
    pub hang: f64,
    pub webhook_drop: f64,
    pub webhook_duplicate: f64,
    /// Deliveries held back [`Rates::webhook_delay`] and sent after later ones.
    pub webhook_reorder: f64,
    pub webhook_delay: Duration,
}

impl Default for Rates {
    /// The rates of issue #16.
    fn default() -> Self {
        Rates {
            server_error: 0.05,
            rate_limit: 0.02,
            hang: 0.01,
            webhook_drop: 0.05,
            webhook_duplicate: 0.05,
            webhook_reorder: 0.05,
            webhook_delay: Duration::from_millis(1500),
        }
    }
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Settings {
    pub items: usize,
    pub replicas: usize,
    pub seed: u64,
    pub rates: Rates,
    /// A replica is killed every this long (uniformly in the range).
    pub kill_every: (Duration, Duration),
    /// Share of items resubmitted with new content mid-flight.
    pub resubmit_share: f64,
    /// Share of items with `auto_merge: false`.
    pub manual_share: f64,
    /// Items submitted per second (about).
    pub submit_rate: f64,
    /// The chaos (faults and kills) lasts at least this long, and at most
    /// [`Settings::chaos_max`].
    pub chaos_min: Duration,
    pub chaos_max: Duration,
    /// How long the run may take to settle once the chaos stops.
    pub settle_max: Duration,
    /// Print progress lines.
    pub verbose: bool,
}

impl Settings {
    pub fn new(items: usize, replicas: usize, seed: u64) -> Settings {
        Settings {
            items,
            replicas,
            seed,
            rates: Rates::default(),
            kill_every: (Duration::from_secs(2), Duration::from_secs(5)),
            resubmit_share: 0.15,
            manual_share: 0.1,
            submit_rate: 25.0,
            chaos_min: Duration::from_secs(20),
            chaos_max: Duration::from_secs(600),
            settle_max: Duration::from_secs(180),
            verbose: true,
        }
    }
}

/// A seed from the clock, for runs that do not name one.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    nanos ^ u64::from(std::process::id())
}

// ---------------------------------------------------------------------------
// Invariants, computed from plain facts so that each can be shown to fail.

/// One change request as forge-sim holds it.
#[derive(Debug, Clone)]
pub struct ChangeFact {
    pub forge: String,
    pub project: String,
    pub number: u64,
    pub branch: String,
    /// `open`, `merged` or `closed`.
    pub state: String,
    pub head_sha: String,
    pub merged_at: Option<OffsetDateTime>,
    /// The item's file at the head: which submission it carries.
    pub content: Option<String>,
    /// When the reviewer approved each head (sim time), by sha.
    pub approvals: BTreeMap<String, OffsetDateTime>,
    /// Whether CI passed on the head (GitLab: a successful pipeline of that
    /// sha; GitHub: every check run of that sha succeeded).
    pub ci_passed_at_head: bool,
}

/// One item as the harness submitted it.
#[derive(Debug, Clone)]
pub struct Expected {
    pub forge: String,
    pub branch: String,
    pub auto_merge: bool,
    /// The contents submitted (and answered), oldest first.
    pub contents: Vec<String>,
    /// When the first submission was answered.
    pub submitted_at: OffsetDateTime,
}

impl Expected {
    /// A submission of `content` was answered. Its outcome does not tell
    /// whether it changed anything: an `updated` or `created` answer lost
    /// with a killed replica is retried and then answers `unchanged`. What
    /// holds either way is that `content` is now the latest state.
    pub fn answered(&mut self, content: String) {
        if self.contents.last() != Some(&content) {
            self.contents.push(content);
        }
    }
}

/// One item's latest generation as the database holds it.
#[derive(Debug, Clone)]
pub struct StoredItem {
    pub forge: String,
    pub branch: String,
    pub generation: i64,
    pub phase: String,
    pub error: Option<String>,
    pub pending_events: i64,
}

/// The invariants of a settled run.
///
/// - `not_where_expected`: items whose end is wrong. An `auto_merge` item
///   must be `completed` in the database (its latest generation), and
///   forge-sim must hold a merged change request for its branch carrying
///   the last content submitted. An `auto_merge: false` item must be
///   `active` with an open change request carrying its last content and
///   nothing merged.
/// - `duplicate_changes`: from forge-sim's change requests per branch. A
///   new generation starts only once the previous change request merged,
///   so every change request but the last of a branch must be merged, and
///   a branch holds at most as many change requests as contents were
///   submitted for it.
/// - `merged_twice`: merged change requests, from forge-sim, carrying the
///   same submission (file content) as another merged one of the branch.
/// - `unchecked_head_merges`: merged change requests whose merged head the
///   reviewer had not approved before the merge, or whose CI had not passed
///   on that head (forge-sim's approvals by sha, pipelines and check runs).
/// - `unapplied_deliveries`: deliveries a replica acknowledged as stored
///   (202 `{"status":"stored"}`: the event row is committed) that were
///   never applied. The engine deletes an event in the transaction that
///   applies it to its item, so these are the rows left in
///   `pending_events` once the run settled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invariants {
    pub not_where_expected: Vec<String>,
    pub duplicate_changes: Vec<String>,
    pub merged_twice: Vec<String>,
    pub unchecked_head_merges: Vec<String>,
    pub unapplied_deliveries: Vec<String>,
}

impl Invariants {
    pub fn violations(&self) -> usize {
        self.not_where_expected.len()
            + self.duplicate_changes.len()
            + self.merged_twice.len()
            + self.unchecked_head_merges.len()
            + self.unapplied_deliveries.len()
    }

    pub fn print(&self) {
        let line = |name: &str, list: &[String]| {
            println!("  {name:<46} {}", list.len());
            for entry in list.iter().take(10) {
                println!("      {entry}");
            }
        };
        line("items not where they should end:", &self.not_where_expected);
        line(
            "duplicate MRs/PRs for one branch and generation:",
            &self.duplicate_changes,
        );
        line("items merged twice:", &self.merged_twice);
        line(
            "merges of a head other than the checked one:",
            &self.unchecked_head_merges,
        );
        line(
            "acknowledged deliveries never applied:",
            &self.unapplied_deliveries,
        );
    }
}

fn key(forge: &str, branch: &str) -> (String, String) {
    (forge.to_owned(), branch.to_owned())
}

/// Checks the invariants over the facts of a settled run.
pub fn check(changes: &[ChangeFact], expected: &[Expected], stored: &[StoredItem]) -> Invariants {
    let mut found = Invariants::default();
    let mut by_branch: BTreeMap<(String, String), Vec<&ChangeFact>> = BTreeMap::new();
    for change in changes {
        by_branch
            .entry(key(&change.forge, &change.branch))
            .or_default()
            .push(change);
    }
    for list in by_branch.values_mut() {
        list.sort_by_key(|c| c.number);
    }
    let latest: BTreeMap<(String, String), &StoredItem> = {
        let mut map: BTreeMap<(String, String), &StoredItem> = BTreeMap::new();
        for item in stored {
            let entry = map.entry(key(&item.forge, &item.branch)).or_insert(item);
            if item.generation > entry.generation {
                *entry = item;
            }
        }
        map
    };
    for item in expected {
        let name = format!("{}:{}", item.forge, item.branch);
        let last = item.contents.last().cloned();
        let list = by_branch
            .get(&key(&item.forge, &item.branch))
            .cloned()
            .unwrap_or_default();
        let phase = latest
            .get(&key(&item.forge, &item.branch))
            .map(|s| (s.phase.clone(), s.error.clone()));
        let describe = || {
            let changes: Vec<String> = list
                .iter()
                .map(|c| format!("#{} {} {:?}", c.number, c.state, c.content))
                .collect();
            format!("{name}: phase {phase:?}, changes {changes:?}, last content {last:?}")
        };
        if item.auto_merge {
            let merged_last = list
                .iter()
                .any(|c| c.state == "merged" && c.content == last);
            let completed = phase.as_ref().is_some_and(|(p, _)| p == "completed");
            if !(merged_last && completed) {
                found.not_where_expected.push(describe());
            }
        } else {
            let open_last = list
                .last()
                .is_some_and(|c| c.state == "open" && c.content == last);
            let active = phase.as_ref().is_some_and(|(p, _)| p == "active");
            let none_merged = list.iter().all(|c| c.state != "merged");
            if !(open_last && active && none_merged) {
                found.not_where_expected.push(describe());
            }
        }
        let allowed = item.contents.len();
        if list.len() > allowed {
            found.duplicate_changes.push(format!(
                "{name}: {} change requests for {allowed} submissions",
                list.len()
            ));
        }
    }
    for ((forge, branch), list) in &by_branch {
        for change in list.iter().take(list.len().saturating_sub(1)) {
            if change.state != "merged" {
                found.duplicate_changes.push(format!(
                    "{forge}:{branch}: #{} is {} and a later one exists",
                    change.number, change.state
                ));
            }
        }
        let mut seen: BTreeMap<&Option<String>, u64> = BTreeMap::new();
        for change in list.iter().filter(|c| c.state == "merged") {
            if let Some(first) = seen.insert(&change.content, change.number) {
                found.merged_twice.push(format!(
                    "{forge}:{branch}: #{first} and #{} both merged {:?}",
                    change.number, change.content
                ));
            }
            let approved_before = change
                .approvals
                .get(&change.head_sha)
                .zip(change.merged_at)
                .is_some_and(|(approved, merged)| *approved <= merged);
            if !approved_before || !change.ci_passed_at_head {
                found.unchecked_head_merges.push(format!(
                    "{forge}:{branch}: #{} merged {} (approved before: {approved_before}, CI passed: {})",
                    change.number, change.head_sha, change.ci_passed_at_head
                ));
            }
        }
    }
    for item in stored.iter().filter(|s| s.pending_events > 0) {
        found.unapplied_deliveries.push(format!(
            "{}:{} generation {} ({}): {} pending events",
            item.forge, item.branch, item.generation, item.phase, item.pending_events
        ));
    }
    found
}

// ---------------------------------------------------------------------------
// The run.

/// What the relay saw.
#[derive(Debug, Default)]
pub struct RelayCounts {
    pub received: AtomicU64,
    pub stored: AtomicU64,
    pub ignored: AtomicU64,
    /// Answered with another status (e.g. 503: could not be stored).
    pub refused: AtomicU64,
    /// No live replica, or the replica died on it.
    pub lost: AtomicU64,
}

/// The reviewer's GitLab approvals: by (forge, project, MR), the sim time
/// of the approval of each head.
type Approvals = BTreeMap<(String, String, u64), BTreeMap<String, OffsetDateTime>>;

/// Live replicas' base URLs, by replica index (`None` while down).
type Live = Arc<Mutex<Vec<Option<String>>>>;

/// Starts the relay on a free port; returns its base URL.
async fn start_relay(live: Live, counts: Arc<RelayCounts>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let live = live.clone();
            let counts = counts.clone();
            let client = client.clone();
            let next = next.clone();
            async move {
                counts.received.fetch_add(1, Ordering::Relaxed);
                let target = {
                    let live = live.lock().unwrap();
                    let up: Vec<&String> = live.iter().flatten().collect();
                    if up.is_empty() {
                        None
                    } else {
                        let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                        Some(up[n % up.len()].clone())
                    }
                };
                let Some(target) = target else {
                    counts.lost.fetch_add(1, Ordering::Relaxed);
                    return axum::http::StatusCode::BAD_GATEWAY;
                };
                let mut request = client.post(format!("{target}{}", uri.path()));
                for (name, value) in &headers {
                    if name == "host" || name == "content-length" {
                        continue;
                    }
                    request = request.header(name, value);
                }
                match request.body(body).send().await {
                    Ok(response) => {
                        let status = response.status();
                        let ack: Value = response.json().await.unwrap_or(Value::Null);
                        if status.as_u16() == 202 && ack["status"] == "stored" {
                            counts.stored.fetch_add(1, Ordering::Relaxed);
                        } else if status.as_u16() == 202 {
                            counts.ignored.fetch_add(1, Ordering::Relaxed);
                        } else {
                            counts.refused.fetch_add(1, Ordering::Relaxed);
                        }
                        axum::http::StatusCode::from_u16(status.as_u16())
                            .unwrap_or(axum::http::StatusCode::BAD_GATEWAY)
                    }
                    Err(_) => {
                        counts.lost.fetch_add(1, Ordering::Relaxed);
                        axum::http::StatusCode::BAD_GATEWAY
                    }
                }
            }
        },
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// A free port on 127.0.0.1 (free when asked; the replica binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Replica {
    index: usize,
    child: Option<Child>,
    url: String,
    starts: u32,
}

struct Fleet {
    dir: PathBuf,
    database_url: String,
    sim_base: String,
    token_sha256: String,
    replicas: Vec<Replica>,
    live: Live,
    client: reqwest::Client,
}

impl Fleet {
    fn config(&self, port: u16) -> String {
        let url = format!("http://127.0.0.1:{port}");
        let forge = |kind: &str, api: &str| {
            json!({
                "kind": kind,
                "url": api,
                "token_env": "WQ_CHAOS_FORGE_TOKEN",
                "webhook_secret_env": "WQ_CHAOS_WEBHOOK_SECRET",
                "timeout_seconds": FORGE_TIMEOUT_SECS,
            })
        };
        // JSON is YAML.
        json!({
            "database": {"url": self.database_url, "max_connections": 8},
            // The replicas archive the audit trail into the run's directory
            // (one of them at a time).
            "audit": {"archive": {
                "url": self.dir.join("audit-archive").display().to_string(),
                "interval_seconds": 2,
            }},
            "server": {"bind": format!("127.0.0.1:{port}"), "shutdown_grace_seconds": 0},
            "engine": {
                "workers": 8,
                "sweep_interval_seconds": 2,
                "lease_seconds": 5,
                "deadline_seconds": 30,
                "max_attempts": 10,
                "outage_budget_seconds": 900,
                "handled_types": ["mr"],
            },
            "forges": {
                "gitlab": forge("gitlab", &format!("{}/api/v4", self.sim_base)),
                "github": forge("github", &self.sim_base),
            },
            "auth": {
                "static_tokens": [{"name": "chaos", "sha256": self.token_sha256, "groups": ["chaos"]}],
                "rules": [{"name": "chaos", "groups": ["chaos"], "permissions": ["admin"]}],
            },
            "mr": {
                "public_url": url,
                "require_review": true,
                "note_min_interval_seconds": 1,
                "reconcile_interval_seconds": 5,
                "reconcile_busy_interval_seconds": 3,
                "merge_attempt_deadline_seconds": 20,
                "queue_sync_interval_seconds": 2,
                "merge_transient_backoff_seconds": 1,
            },
            "ci_retry": {
                "matchers": [{
                    "name": "runner-system-failure",
                    "failure_reason": "runner_system_failure",
                    "retry_delays": [1],
                }],
            },
        })
        .to_string()
    }

    /// Starts replica `index` on a new port and waits until it is ready.
    async fn start(&mut self, index: usize) {
        let port = free_port();
        let config = self.dir.join(format!("replica-{index}.yaml"));
        std::fs::write(&config, self.config(port)).unwrap();
        let log_path = self.dir.join(format!("replica-{index}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_workqueue"))
            .current_dir(&self.dir)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env(
                "RUST_LOG",
                std::env::var("WQ_CHAOS_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("WQ_CHAOS_FORGE_TOKEN", forge_sim::DEFAULT_TOKEN)
            .env("WQ_CHAOS_WEBHOOK_SECRET", SECRET)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn workqueue serve");
        let url = format!("http://127.0.0.1:{port}");
        let replica = &mut self.replicas[index];
        replica.child = Some(child);
        replica.url = url.clone();
        replica.starts += 1;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = replica.child.as_mut().unwrap().try_wait().unwrap() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                panic!("replica {index} exited at start ({status}); its log ends:\n{tail}");
            }
            let ready = self
                .client
                .get(format!("{url}/readyz"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {index} not ready in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.live.lock().unwrap()[index] = Some(url);
    }

    /// SIGKILL, then reaps it.
    fn kill(&mut self, index: usize) {
        self.live.lock().unwrap()[index] = None;
        if let Some(mut child) = self.replicas[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn kill_all(&mut self) {
        for index in 0..self.replicas.len() {
            self.kill(index);
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A live replica's URL, chosen with `rng`; waits (bounded) while none is up.
async fn any_live(live: &Live, rng: &Mutex<StdRng>) -> Option<String> {
    for _ in 0..600 {
        {
            let live = live.lock().unwrap();
            let up: Vec<&String> = live.iter().flatten().collect();
            if !up.is_empty() {
                let n = rng.lock().unwrap().random_range(0..up.len());
                return Some(up[n].clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Submits `body` through random live replicas until one answers it
/// (connection errors and 5xx are tried again: only an answer is durable).
async fn submit(
    client: &reqwest::Client,
    live: &Live,
    rng: &Mutex<StdRng>,
    body: &Value,
) -> Result<OffsetDateTime, String> {
    let mut last = String::new();
    for _ in 0..100 {
        let Some(url) = any_live(live, rng).await else {
            return Err("no live replica".into());
        };
        match client
            .post(format!("{url}/api/v1/work-items"))
            .json(body)
            .timeout(Duration::from_secs(20))
            .send()
            .await
        {
            Ok(response) if response.status().is_server_error() => {
                last = format!("{}", response.status());
            }
            Ok(response) => {
                let status = response.status();
                let reply: Value = response.json().await.unwrap_or(Value::Null);
                if !status.is_success() {
                    return Err(format!("{status}: {reply}"));
                }
                return Ok(OffsetDateTime::now_utc());
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("never answered: {last}"))
}

/// Versions an item may be submitted in.
const VERSIONS: u32 = 2;

/// The file version `version` of `branch` creates. Each version creates
/// its own file (the desired state is the target plus these actions): a
/// later generation starts from a target that holds the earlier files.
fn file_path(branch: &str, version: u32) -> String {
    format!("chaos/{}.v{version}.txt", branch.replace('/', "-"))
}

/// Which submission a head carries: the newest version's file in it.
fn head_content(read: impl Fn(&str) -> Option<Vec<u8>>, branch: &str) -> Option<String> {
    (1..=VERSIONS)
        .rev()
        .find_map(|version| read(&file_path(branch, version)))
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

fn submission(
    forge: &str,
    project: &str,
    branch: &str,
    version: u32,
    auto_merge: bool,
    ci_retry: bool,
) -> (Value, String) {
    let content = format!("{branch} version {version}\n");
    let body = json!({
        "item_type": "mr",
        "forge": forge,
        "project": project,
        "source_branch": branch,
        "target_branch": "main",
        "title": format!("Chaos {branch}"),
        "description": "Submitted by the chaos run.",
        "labels": ["chaos"],
        "file_actions": [{"action": "create", "file_path": file_path(branch, version), "content": content}],
        "automation": {"auto_merge": auto_merge, "ci_retry": ci_retry},
    });
    (body, content)
}

/// Everything the run measured.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub items: usize,
    pub replicas: usize,
    pub invariants: Invariants,
    pub settled: bool,
    pub submissions: usize,
    pub resubmissions: usize,
    pub submit_errors: Vec<String>,
    pub kills: u32,
    /// Items the harness, as an operator, sent retry-merge (see
    /// [`waiting_for_retry_merge`]), with how many times.
    pub operator_retries: BTreeMap<String, u32>,
    pub chaos_secs: f64,
    pub settle_secs: f64,
    /// Submission to merged, seconds, for items that merged.
    pub latency_p50: f64,
    pub latency_p99: f64,
    /// By forge: (merged change requests, API calls, of which faulted).
    pub calls: BTreeMap<String, (usize, usize, usize)>,
    pub webhooks: BTreeMap<String, usize>,
    pub relay: BTreeMap<&'static str, u64>,
    /// Audit records checked, and the first broken link if any.
    pub audit_records: u64,
    pub audit_broken: Option<String>,
    pub log_dir: PathBuf,
    /// For each item an invariant names, its audit trail (every generation
    /// of its branch), so a failed run tells its own story.
    pub trails: BTreeMap<String, Vec<String>>,
}

impl Report {
    pub fn print(&self) {
        println!(
            "chaos: {} items, {} replicas, seed {} (replay: --seed {})",
            self.items, self.replicas, self.seed, self.seed
        );
        println!(
            "  submissions {} (resubmissions {}), submission errors {}, replica kills {}",
            self.submissions,
            self.resubmissions,
            self.submit_errors.len(),
            self.kills
        );
        for error in self.submit_errors.iter().take(5) {
            println!("      {error}");
        }
        println!(
            "  retry-merge by the operator (attempts interrupted by a kill, or transient answers past the budget): {} items",
            self.operator_retries.len()
        );
        println!(
            "  chaos {:.0} s, then settled: {} in {:.0} s",
            self.chaos_secs, self.settled, self.settle_secs
        );
        println!("  webhooks from the sim: {:?}", self.webhooks);
        println!("  relay: {:?}", self.relay);
        self.invariants.print();
        println!(
            "  submission → merged: p50 {:.1} s, p99 {:.1} s",
            self.latency_p50, self.latency_p99
        );
        for (forge, (merged, calls, faulted)) in &self.calls {
            println!(
                "  {forge}: {merged} merged, {calls} API calls ({faulted} faulted), {:.1} calls per merged change",
                *calls as f64 / (*merged).max(1) as f64
            );
        }
        println!(
            "  audit: {} records verified, broken links: {}",
            self.audit_records,
            self.audit_broken.as_deref().unwrap_or("none")
        );
        println!("  replica logs: {}", self.log_dir.display());
        for (name, trail) in &self.trails {
            println!("  the audit trail of {name}:");
            for line in trail {
                println!("      {line}");
            }
        }
    }
}

/// The audit trail of every generation of `forge`'s `branch`, one line per
/// record, oldest first (the database's own record of what happened).
async fn audit_trail(pool: &sqlx::PgPool, forge: &str, branch: &str) -> Vec<String> {
    let rows: Vec<(i64, String, String, String, String)> = sqlx::query_as(
        "SELECT d.generation, a.at::text, a.actor, a.kind, a.metadata::text \
         FROM audit_records a JOIN mr_details d ON d.work_item_id = a.work_item_id \
         WHERE d.forge = $1 AND d.source_branch = $2 ORDER BY a.at, a.seq",
    )
    .bind(forge)
    .bind(branch)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|error| {
        vec![(
            0,
            String::new(),
            String::new(),
            error.to_string(),
            String::new(),
        )]
    });
    rows.into_iter()
        .map(|(generation, at, actor, kind, metadata)| {
            let metadata: String = metadata.chars().take(240).collect();
            format!("g{generation} {at} {actor}: {kind} {metadata}")
        })
        .collect()
}

/// One planned item.
struct Plan {
    forge: &'static str,
    project: &'static str,
    branch: String,
    auto_merge: bool,
    ci_retry: bool,
    resubmit_after: Option<Duration>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Runs the whole thing; the caller asserts or prints.
pub async fn run(settings: Settings) -> Report {
    let started = Instant::now();
    let say = |text: String| {
        if settings.verbose {
            println!("[{:>6.1}s] {text}", started.elapsed().as_secs_f64());
        }
    };
    let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(settings.seed)));
    let sim = Arc::new(ForgeSim::start(SimConfig::default()).await.expect("sim"));
    sim.seed_faults(settings.seed);
    let live: Live = Arc::new(Mutex::new(vec![None; settings.replicas]));
    let relay_counts = Arc::new(RelayCounts::default());
    let relay = start_relay(live.clone(), relay_counts.clone()).await;

    // The forges.
    let gitlab_hook = format!("{relay}/webhooks/gitlab");
    let github_hook = format!("{relay}/webhooks/github");
    let ci = |name: &str| JobSpec::new(name, JobOutcome::Success).duration_secs(1);
    let mut gitlab_ids = BTreeMap::new();
    for (path, flaky, train) in [
        (GITLAB_PLAIN, false, false),
        (GITLAB_FLAKY, true, false),
        (GITLAB_TRAIN, false, true),
    ] {
        let mut builder = sim
            .gitlab_project(path)
            .require_pipeline_success(true)
            .merge_trains(train)
            .webhook(&gitlab_hook, SECRET);
        if flaky {
            builder = builder
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
                .job(ci("test").stage("test"));
        } else {
            builder = builder.job(ci("unit"));
        }
        let id = builder.create().expect("project");
        sim.gitlab_push(id, "main", &[("README.md", Some("# chaos\n"))], "init")
            .expect("init");
        gitlab_ids.insert(path, id);
    }
    for (path, queue) in [(GITHUB_PLAIN, false), (GITHUB_QUEUE, true)] {
        let (owner, name) = path.split_once('/').unwrap();
        sim.github_create_repo(
            GithubRepoSpec::new(owner, name)
                .merge_queue(queue)
                .required_approvals(u32::from(queue))
                .checks(&[CheckScript {
                    job: ci("ci"),
                    kind: forge_sim::github::CheckKind::CheckRun,
                }])
                .webhook(&github_hook, SECRET),
        )
        .expect("repository");
    }

    // The replicas.
    let dir = std::env::temp_dir().join(format!(
        "workqueue-chaos-{}-{}",
        settings.seed,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let database_url = wq_store::testing::fresh_postgres_url().await;
    let token = format!("wq_chaos_{}", uuid::Uuid::new_v4().simple());
    let token_sha256 =
        wq_auth::config::StaticTokenConfig::for_token("chaos", &token, Vec::new()).sha256;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    let api = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let fleet = Arc::new(tokio::sync::Mutex::new(Fleet {
        dir: dir.clone(),
        database_url: database_url.clone(),
        sim_base: sim.base_url(),
        token_sha256,
        replicas: (0..settings.replicas)
            .map(|index| Replica {
                index,
                child: None,
                url: String::new(),
                starts: 0,
            })
            .collect(),
        live: live.clone(),
        client: reqwest::Client::new(),
    }));
    {
        // The first one migrates the database alone.
        let mut fleet = fleet.lock().await;
        for index in 0..settings.replicas {
            fleet.start(index).await;
        }
    }
    say(format!(
        "{} replicas up on {database_url}; logs in {}",
        settings.replicas,
        dir.display()
    ));

    // Faults on.
    let rates = settings.rates;
    for (fault, probability) in [
        (HttpFault::Status { status: 503 }, rates.server_error),
        (
            HttpFault::RateLimit {
                retry_after_secs: 1,
            },
            rates.rate_limit,
        ),
        (
            HttpFault::Timeout {
                hang_secs: HANG_SECS,
            },
            rates.hang,
        ),
    ] {
        let mut rule = FaultRule::new("GET", "/", fault)
            .probability(probability)
            .times(u32::MAX);
        rule.method = None;
        sim.add_fault(rule);
    }
    for (kind, probability) in [
        (WebhookFaultKind::Drop, rates.webhook_drop),
        (WebhookFaultKind::Duplicate, rates.webhook_duplicate),
        (WebhookFaultKind::Delay, rates.webhook_reorder),
    ] {
        sim.add_webhook_fault(
            WebhookFaultRule::new(kind, None, 1)
                .probability(probability)
                .delay(rates.webhook_delay),
        );
    }

    // The reviewer: approves each head some time after first seeing it.
    let stop_reviewer = Arc::new(AtomicBool::new(false));
    let approvals: Arc<Mutex<Approvals>> = Arc::default();
    let reviewer = {
        let sim = sim.clone();
        let stop = stop_reviewer.clone();
        let approvals = approvals.clone();
        let gitlab_ids = gitlab_ids.clone();
        let mut review_rng = StdRng::seed_from_u64(settings.seed ^ 0x5eed);
        tokio::spawn(async move {
            // (forge, project, number, sha) → when to approve.
            let mut due: BTreeMap<(String, String, u64, String), Instant> = BTreeMap::new();
            let mut done: BTreeSet<(String, String, u64, String)> = BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let mut heads = Vec::new();
                {
                    let gitlab = forge_sim::state::lock(&sim.state().gitlab);
                    for (path, id) in &gitlab_ids {
                        if let Some(project) = gitlab.projects.get(id) {
                            for mr in project.merge_requests.values() {
                                let approved =
                                    mr.approved_by.iter().any(|u| u.username == REVIEWER);
                                if mr.state == "opened" && !approved {
                                    heads.push((
                                        "gitlab".to_owned(),
                                        path.to_string(),
                                        mr.iid,
                                        mr.sha.clone(),
                                    ));
                                }
                            }
                        }
                    }
                    drop(gitlab);
                    let github = forge_sim::state::lock(&sim.state().github);
                    for path in [GITHUB_PLAIN, GITHUB_QUEUE] {
                        if let Some(repo) = github.repos.get(&path.to_ascii_lowercase()) {
                            for pr in repo.pulls.values() {
                                let approved = pr.reviews.iter().any(|r| {
                                    r.user == REVIEWER
                                        && r.state == "APPROVED"
                                        && r.commit_id == pr.head_sha
                                });
                                if pr.open && !approved {
                                    heads.push((
                                        "github".to_owned(),
                                        path.to_owned(),
                                        pr.number,
                                        pr.head_sha.clone(),
                                    ));
                                }
                            }
                        }
                    }
                }
                let now = Instant::now();
                for head in heads {
                    if done.contains(&head) && head.0 == "github" {
                        continue;
                    }
                    let delay = Duration::from_millis(review_rng.random_range(0..2000));
                    let at = *due.entry(head.clone()).or_insert(now + delay);
                    if at <= now {
                        let result = if head.0 == "gitlab" {
                            // GitLab keeps no sha with an approval: noted
                            // here, at a sim time no later than the approval,
                            // on the head the MR has once it is approved (a
                            // push in between resets the approval).
                            let project = gitlab_ids[head.1.as_str()];
                            let before = sim.state().clock.now();
                            let approved = sim.gitlab_approve(project, head.2, REVIEWER);
                            if approved.is_ok() {
                                let gitlab = forge_sim::state::lock(&sim.state().gitlab);
                                let mr = gitlab
                                    .projects
                                    .get(&project)
                                    .and_then(|p| p.merge_requests.get(&head.2));
                                if let Some(mr) = mr
                                    && mr.approved_by.iter().any(|u| u.username == REVIEWER)
                                {
                                    let sha = mr.sha.clone();
                                    drop(gitlab);
                                    approvals
                                        .lock()
                                        .unwrap()
                                        .entry(("gitlab".to_owned(), head.1.clone(), head.2))
                                        .or_default()
                                        .entry(sha)
                                        .and_modify(|at| *at = (*at).min(before))
                                        .or_insert(before);
                                }
                            }
                            approved
                        } else {
                            sim.github_approve(&head.1, head.2, REVIEWER).map(|_| ())
                        };
                        if result.is_ok() {
                            done.insert(head.clone());
                            due.remove(&head);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    // Also a watcher: the head each GitLab approval stands on, at the sim
    // time it first sees it (the reviewer's own note is earlier and wins).
    let approval_watch = {
        let sim = sim.clone();
        let stop = stop_reviewer.clone();
        let approvals = approvals.clone();
        let gitlab_ids = gitlab_ids.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                {
                    let now = sim.state().clock.now();
                    let gitlab = forge_sim::state::lock(&sim.state().gitlab);
                    let mut approvals = approvals.lock().unwrap();
                    for (path, id) in &gitlab_ids {
                        if let Some(project) = gitlab.projects.get(id) {
                            for mr in project.merge_requests.values() {
                                if mr.approved_by.iter().any(|u| u.username == REVIEWER) {
                                    approvals
                                        .entry(("gitlab".to_owned(), path.to_string(), mr.iid))
                                        .or_default()
                                        .entry(mr.sha.clone())
                                        .or_insert(now);
                                }
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // The killer.
    let stop_killer = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicU64::new(0));
    let killer = {
        let fleet = fleet.clone();
        let stop = stop_killer.clone();
        let kills = kills.clone();
        let mut kill_rng = StdRng::seed_from_u64(settings.seed ^ 0xdead);
        let (low, high) = settings.kill_every;
        let replicas = settings.replicas;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let wait = kill_rng.random_range(low.as_millis()..=high.as_millis()) as u64;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let index = kill_rng.random_range(0..replicas);
                let down = Duration::from_millis(kill_rng.random_range(200..1500));
                let mut fleet = fleet.lock().await;
                fleet.kill(index);
                kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(down).await;
                fleet.start(index).await;
            }
        })
    };

    // The plan.
    let plans: Vec<Plan> = {
        let mut rng = rng.lock().unwrap();
        (0..settings.items)
            .map(|n| {
                let github = n % 2 == 1;
                let (forge, project) = if github {
                    (
                        "github",
                        if rng.random_bool(0.5) {
                            GITHUB_PLAIN
                        } else {
                            GITHUB_QUEUE
                        },
                    )
                } else {
                    let projects = [GITLAB_PLAIN, GITLAB_FLAKY, GITLAB_TRAIN];
                    ("gitlab", projects[rng.random_range(0..projects.len())])
                };
                let auto_merge = !rng.random_bool(settings.manual_share);
                // ci_retry off only where no job is flaky: the end is the same.
                let ci_retry = project == GITLAB_FLAKY || rng.random_bool(0.5);
                let resubmit_after = rng
                    .random_bool(settings.resubmit_share)
                    .then(|| Duration::from_millis(rng.random_range(500..8000)));
                Plan {
                    forge,
                    project,
                    branch: format!("chaos/item-{n}"),
                    auto_merge,
                    ci_retry,
                    resubmit_after,
                }
            })
            .collect()
    };
    let expected: Arc<Mutex<BTreeMap<(String, String), Expected>>> = Arc::default();
    let submit_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let submissions = Arc::new(AtomicU64::new(0));
    let resubmissions = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let gap = Duration::from_secs_f64(1.0 / settings.submit_rate.max(0.1));
    for plan in plans {
        let api = api.clone();
        let live = live.clone();
        let rng = rng.clone();
        let expected = expected.clone();
        let errors = submit_errors.clone();
        let submissions = submissions.clone();
        let resubmissions = resubmissions.clone();
        tasks.push(tokio::spawn(async move {
            let (body, content) = submission(
                plan.forge,
                plan.project,
                &plan.branch,
                1,
                plan.auto_merge,
                plan.ci_retry,
            );
            match submit(&api, &live, &rng, &body).await {
                Ok(at) => {
                    submissions.fetch_add(1, Ordering::Relaxed);
                    expected.lock().unwrap().insert(
                        key(plan.forge, &plan.branch),
                        Expected {
                            forge: plan.forge.to_owned(),
                            branch: plan.branch.clone(),
                            auto_merge: plan.auto_merge,
                            contents: vec![content],
                            submitted_at: at,
                        },
                    );
                }
                Err(error) => {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("{}: {error}", plan.branch));
                    return;
                }
            }
            let Some(after) = plan.resubmit_after else {
                return;
            };
            tokio::time::sleep(after).await;
            let (body, content) = submission(
                plan.forge,
                plan.project,
                &plan.branch,
                2,
                plan.auto_merge,
                plan.ci_retry,
            );
            match submit(&api, &live, &rng, &body).await {
                Ok(_) => {
                    resubmissions.fetch_add(1, Ordering::Relaxed);
                    let mut expected = expected.lock().unwrap();
                    if let Some(item) = expected.get_mut(&key(plan.forge, &plan.branch)) {
                        item.answered(content);
                    }
                }
                Err(error) => errors
                    .lock()
                    .unwrap()
                    .push(format!("{} (again): {error}", plan.branch)),
            }
        }));
        tokio::time::sleep(gap).await;
    }
    say(format!(
        "{} items submitted",
        submissions.load(Ordering::Relaxed)
    ));
    let submit_deadline = Instant::now() + Duration::from_secs(120);
    for task in tasks {
        let left = submit_deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, task).await;
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&database_url)
        .await
        .expect("database");
    // Chaos until the minimum is over and most items reached their end.
    let chaos_started = started;
    loop {
        let elapsed = chaos_started.elapsed();
        if elapsed >= settings.chaos_max {
            break;
        }
        if elapsed >= settings.chaos_min {
            let active: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM work_items w JOIN mr_details d ON d.work_item_id = w.id \
                 WHERE w.phase = 'active' AND d.auto_merge",
            )
            .fetch_one(&pool)
            .await
            .unwrap_or(i64::MAX);
            if active <= (settings.items as i64) / 20 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let chaos_secs = started.elapsed().as_secs_f64();
    say(format!(
        "chaos over after {chaos_secs:.0} s and {} kills: faults off, every replica up",
        kills.load(Ordering::Relaxed)
    ));
    stop_killer.store(true, Ordering::Relaxed);
    let _ = tokio::time::timeout(Duration::from_secs(90), killer).await;
    sim.clear_faults();
    {
        let mut fleet = fleet.lock().await;
        for index in 0..settings.replicas {
            if fleet.live.lock().unwrap()[index].is_none() {
                fleet.start(index).await;
            }
        }
    }

    // Settle.
    let expected: Vec<Expected> = expected.lock().unwrap().values().cloned().collect();
    let settle_started = Instant::now();
    let mut settled = false;
    let mut last_progress = String::new();
    let mut operator_retries: BTreeMap<String, u32> = BTreeMap::new();
    while settle_started.elapsed() < settings.settle_max {
        // The operator's part: an attempt that cannot be confirmed (a merge
        // call interrupted by a kill, or transient answers beyond the
        // budget) waits for retry-merge, as documented.
        for id in waiting_for_retry_merge(&pool).await {
            let tries = operator_retries.entry(id.clone()).or_insert(0);
            if *tries >= 3 {
                continue;
            }
            *tries += 1;
            if let Some(url) = any_live(&live, &rng).await {
                let _ = api
                    .post(format!("{url}/api/v1/work-items/{id}/retry-merge"))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
            }
        }
        let stored = stored_items(&pool).await;
        let changes = change_facts(&sim, &gitlab_ids, &approvals_now(&approvals));
        let found = check(&changes, &expected, &stored);
        let pending_hooks = sim.state().webhooks.pending();
        let progress = format!(
            "{} not at their end, {} pending events, {} webhooks queued",
            found.not_where_expected.len(),
            found.unapplied_deliveries.len(),
            pending_hooks
        );
        if progress != last_progress {
            say(format!("settling: {progress}"));
            last_progress = progress;
        }
        if found.not_where_expected.is_empty()
            && found.unapplied_deliveries.is_empty()
            && pending_hooks == 0
        {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settle_secs = settle_started.elapsed().as_secs_f64();
    stop_reviewer.store(true, Ordering::Relaxed);
    let _ = reviewer.await;
    let _ = approval_watch.await;
    // The last look, with every replica still up.
    let stored = stored_items(&pool).await;
    let changes = change_facts(&sim, &gitlab_ids, &approvals_now(&approvals));
    let invariants = check(&changes, &expected, &stored);
    fleet.lock().await.kill_all();
    let mut trails = BTreeMap::new();
    for item in &expected {
        let name = format!("{}:{}", item.forge, item.branch);
        let named = [
            &invariants.not_where_expected,
            &invariants.duplicate_changes,
            &invariants.merged_twice,
            &invariants.unchecked_head_merges,
            &invariants.unapplied_deliveries,
        ]
        .iter()
        .flat_map(|list| list.iter())
        .any(|entry| {
            entry.starts_with(&format!("{name}:")) || entry.starts_with(&format!("{name} "))
        });
        if named {
            trails.insert(name, audit_trail(&pool, &item.forge, &item.branch).await);
        }
    }
    // Every item's audit chain, written through kills and concurrent
    // replicas, still links record to record.
    let audit = wq_store::connect(&database_url, 2)
        .await
        .expect("store")
        .audit_verify()
        .await
        .expect("audit verify");

    // Figures.
    let mut latencies: Vec<f64> = expected
        .iter()
        .filter(|e| e.auto_merge)
        .filter_map(|e| {
            let merged = changes
                .iter()
                .filter(|c| c.forge == e.forge && c.branch == e.branch && c.state == "merged")
                .filter(|c| c.content.as_ref() == e.contents.last())
                .filter_map(|c| c.merged_at)
                .min()?;
            Some((merged - e.submitted_at).as_seconds_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let mut calls: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for change in changes.iter().filter(|c| c.state == "merged") {
        calls.entry(change.forge.clone()).or_default().0 += 1;
    }
    let requests = sim.requests();
    if requests.len() >= forge_sim::state::REQUEST_LOG_CAPACITY {
        println!("warning: the sim's request log is full; the call counts are low");
    }
    for request in &requests {
        let forge = if request.path.starts_with("/api/v4") {
            "gitlab"
        } else {
            "github"
        };
        let entry = calls.entry(forge.to_owned()).or_default();
        entry.1 += 1;
        if request.fault.is_some() {
            entry.2 += 1;
        }
    }
    let mut webhooks = BTreeMap::new();
    for delivery in sim.webhook_deliveries() {
        *webhooks.entry(delivery.outcome).or_insert(0) += 1;
    }
    let relay = BTreeMap::from([
        ("received", relay_counts.received.load(Ordering::Relaxed)),
        ("stored", relay_counts.stored.load(Ordering::Relaxed)),
        ("ignored", relay_counts.ignored.load(Ordering::Relaxed)),
        ("refused", relay_counts.refused.load(Ordering::Relaxed)),
        ("lost", relay_counts.lost.load(Ordering::Relaxed)),
    ]);
    let submit_errors = submit_errors.lock().unwrap().clone();
    Report {
        seed: settings.seed,
        items: settings.items,
        replicas: settings.replicas,
        invariants,
        settled,
        submissions: submissions.load(Ordering::Relaxed) as usize,
        resubmissions: resubmissions.load(Ordering::Relaxed) as usize,
        submit_errors,
        kills: kills.load(Ordering::Relaxed) as u32,
        operator_retries,
        chaos_secs,
        settle_secs,
        latency_p50: percentile(&latencies, 0.5),
        latency_p99: percentile(&latencies, 0.99),
        calls,
        webhooks,
        relay,
        audit_records: audit.0,
        audit_broken: audit.1.map(|broken| broken.to_string()),
        log_dir: dir,
        trails,
    }
}

/// Active items whose last merge attempt failed in a way only retry-merge
/// follows up (an interrupted attempt past its deadline, or transient
/// answers beyond `mr.merge_transient_retries`).
async fn waiting_for_retry_merge(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT w.id::text FROM work_items w JOIN mr_details d ON d.work_item_id = w.id \
         WHERE w.phase = 'active' AND d.last_merge_result = 'failed' \
         AND d.last_error LIKE '%retry-merge%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default()
}

/// A copy of the approvals seen so far (never held while the sim is
/// locked: the watcher locks the sim first).
fn approvals_now(approvals: &Mutex<Approvals>) -> Approvals {
    approvals.lock().unwrap().clone()
}

/// Every item's latest generation, with its pending events.
async fn stored_items(pool: &sqlx::PgPool) -> Vec<StoredItem> {
    let rows: Vec<(String, String, i64, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT d.forge, d.source_branch, d.generation, w.phase, w.error, \
         (SELECT count(*) FROM pending_events e WHERE e.work_item_id = w.id) \
         FROM work_items w JOIN mr_details d ON d.work_item_id = w.id",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.into_iter()
        .map(
            |(forge, branch, generation, phase, error, pending_events)| StoredItem {
                forge,
                branch,
                generation,
                phase,
                error,
                pending_events,
            },
        )
        .collect()
}

/// Every change request of the run's projects, as forge-sim holds it.
fn change_facts(
    sim: &SimHandle,
    gitlab_ids: &BTreeMap<&'static str, u64>,
    gitlab_approvals: &Approvals,
) -> Vec<ChangeFact> {
    let mut facts = Vec::new();
    {
        let gitlab = forge_sim::state::lock(&sim.state().gitlab);
        for (path, id) in gitlab_ids {
            let Some(project) = gitlab.projects.get(id) else {
                continue;
            };
            for mr in project.merge_requests.values() {
                let content = head_content(
                    |path| {
                        project
                            .repo
                            .resolve(&mr.sha)
                            .and_then(|commit| commit.tree.get(path))
                            .map(|file| file.content.clone())
                    },
                    &mr.source_branch,
                );
                let ci_passed_at_head = project
                    .pipelines
                    .values()
                    .any(|p| p.sha == mr.sha && p.status == "success");
                let state = match mr.state.as_str() {
                    "opened" => "open",
                    other => other,
                };
                facts.push(ChangeFact {
                    forge: "gitlab".into(),
                    project: path.to_string(),
                    number: mr.iid,
                    branch: mr.source_branch.clone(),
                    state: state.to_owned(),
                    head_sha: mr.sha.clone(),
                    merged_at: mr.merged_at,
                    content,
                    approvals: gitlab_approvals
                        .get(&("gitlab".to_owned(), path.to_string(), mr.iid))
                        .cloned()
                        .unwrap_or_default(),
                    ci_passed_at_head,
                });
            }
        }
    }
    let pulls: Vec<(String, forge_sim::github::model::PullRequest, bool)> = {
        let github = forge_sim::state::lock(&sim.state().github);
        let mut pulls = Vec::new();
        for path in [GITHUB_PLAIN, GITHUB_QUEUE] {
            let Some(repo) = github.repos.get(&path.to_ascii_lowercase()) else {
                continue;
            };
            for pr in repo.pulls.values() {
                // Every check run of the head concluded `success` (and there is one).
                let runs: Vec<_> = repo
                    .check_runs
                    .iter()
                    .filter(|run| run.head_sha == pr.head_sha)
                    .collect();
                let passed =
                    !runs.is_empty() && runs.iter().all(|run| run.conclusion == Some("success"));
                pulls.push((path.to_owned(), pr.clone(), passed));
            }
        }
        pulls
    };
    for (path, pr, ci_passed_at_head) in pulls {
        let content = head_content(
            |file| sim.github_file(&path, &pr.head_sha, file),
            &pr.head_ref,
        );
        let approvals = pr
            .reviews
            .iter()
            .filter(|r| r.user == REVIEWER && r.state == "APPROVED")
            .map(|r| (r.commit_id.clone(), r.submitted_at))
            .collect();
        facts.push(ChangeFact {
            forge: "github".into(),
            project: path.clone(),
            number: pr.number,
            branch: pr.head_ref.clone(),
            state: if pr.merged {
                "merged".into()
            } else if pr.open {
                "open".into()
            } else {
                "closed".into()
            },
            ci_passed_at_head,
            head_sha: pr.head_sha,
            merged_at: pr.merged_at,
            content,
            approvals,
        });
    }
    facts
}

/// For the bench: `--items N --replicas N --seed N` (or `WQ_CHAOS_ITEMS`,
/// `WQ_CHAOS_REPLICAS`, `WQ_CHAOS_SEED`).
pub fn settings_from_args(default_items: usize) -> Settings {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut items = env("WQ_CHAOS_ITEMS")
        .map(|v| v as usize)
        .unwrap_or(default_items);
    let mut replicas = env("WQ_CHAOS_REPLICAS").map(|v| v as usize).unwrap_or(3);
    let mut seed = env("WQ_CHAOS_SEED").unwrap_or_else(random_seed);
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match (args[i].as_str(), value) {
            ("--items", Some(v)) => items = v as usize,
            ("--replicas", Some(v)) => replicas = v as usize,
            ("--seed", Some(v)) => seed = v,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    Settings::new(items, replicas.max(1), seed)
}
