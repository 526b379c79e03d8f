//! `cargo bench -p workqueue --bench mr`: the `mr` type through the real
//! service, on SQLite and PostgreSQL in one run.
//!
//! - **submit**: `POST /api/v1/work-items` with 16 concurrent clients, each
//!   body three file actions of about 2 KiB: validation, content hash and
//!   the upsert transaction (the engine does not process them). Then the
//!   same bodies again (`unchanged`: validation, hash, one lookup).
//! - **webhook → merge**: for MRs whose pipeline just passed, the time from
//!   the `Pipeline Hook` (status success) arriving at the service to the
//!   merge call arriving at the sim, both on the wall clock of this one
//!   machine (the sim's clock is wall time when nothing advances it): event
//!   insert, wake-up, event handling, one MR read, the journal reservation
//!   and the merge request.
//!
//! The projects' CI takes one second, so the merge waits for the pipeline's
//! webhook. A negative figure would mean something else triggered it.
//!
//! Env: `WQ_BENCH_SUBMISSIONS` (default 2000), `WQ_BENCH_MERGES` (20),
//! `WQ_BENCH_BACKENDS` (`sqlite,postgres`).
#![allow(
    clippy::disallowed_methods,
    reason = "the benchmark times on the wall clock"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_sim::{ForgeSim, JobOutcome, JobSpec, SimConfig, SimHandle};
use serde_json::{Value, json};
use time::OffsetDateTime;
use workqueue::app;
use workqueue::config::Config;
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_core::{Clock, SystemClock};
use wq_forge::{ForgeConfig, ForgeKind, Forges, ForgesConfig};

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

struct Service {
    url: String,
    client: reqwest::Client,
    project_path: String,
    arrivals: Arrivals,
    engine: Arc<wq_engine::ProcessingManager>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(database_url: &str, sim: &SimHandle, process: bool) -> (Service, u64) {
    let (token, _) = wq_auth::new_static_token("bench");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let project = sim
        .gitlab_project(&format!("{PROJECT}-{}", uuid::Uuid::new_v4().simple()))
        .require_pipeline_success(true)
        // One second of CI, so the first reconcile sees it running and the
        // merge waits for the pipeline's webhook.
        .job(JobSpec::new("unit", JobOutcome::Success).duration_secs(1))
        .webhook(&format!("{url}/webhooks/gitlab"), SECRET)
        .create()
        .unwrap();
    sim.gitlab_push(project, "main", &[("README.md", Some("# bench\n"))], "init")
        .unwrap();
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
        instances: BTreeMap::from([(
            "gitlab".to_owned(),
            ForgeConfig::literal(
                ForgeKind::Gitlab,
                &sim.gitlab_url(),
                forge_sim::DEFAULT_TOKEN,
                SECRET,
            ),
        )]),
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
    let project_path = project_path(sim, project).await;
    (
        Service {
            url,
            client,
            project_path,
            arrivals,
            engine: built.engine,
            stop,
            server,
        },
        project,
    )
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

fn body(project: &str, n: usize) -> Value {
    let content = "x".repeat(2000);
    json!({
        "item_type": "mr",
        "forge": "gitlab",
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

/// Submits `bodies` with `clients` concurrent clients; requests per second.
async fn submit_all(service: &Service, bodies: &[Value], clients: usize, expect: &str) -> f64 {
    let client = service.client.clone();
    let url = &service.url;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let bodies = Arc::new(bodies.to_vec());
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
    bodies.len() as f64 / started.elapsed().as_secs_f64()
}

async fn bench_submit(database_url: &str, sim: &SimHandle, count: usize) -> (f64, f64) {
    let (service, _) = start(database_url, sim, false).await;
    let bodies: Vec<Value> = (0..count).map(|n| body(&service.project_path, n)).collect();
    // Warm up connections and caches.
    submit_all(&service, &bodies[..16.min(count)], 16, "created").await;
    let created = submit_all(&service, &bodies[16.min(count)..], 16, "created").await;
    let unchanged = submit_all(&service, &bodies, 16, "unchanged").await;
    service.stop().await;
    (created, unchanged)
}

async fn project_path(sim: &SimHandle, project: u64) -> String {
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

/// Milliseconds from each successful pipeline's webhook delivery to the
/// merge call of its MR.
async fn bench_merge_latency(database_url: &str, sim: &SimHandle, count: usize) -> Vec<f64> {
    let (service, _) = start(database_url, sim, true).await;
    let client = service.client.clone();
    let encoded = service.project_path.replace('/', "%2F");
    let mut latencies = Vec::new();
    for n in 0..count {
        let mut submission = body(&service.project_path, n);
        submission["file_actions"] =
            json!([{"action": "create", "file_path": format!("m/{n}.txt"), "content": "m\n"}]);
        let reply: Value = client
            .post(format!("{}/api/v1/work-items", service.url))
            .json(&submission)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = reply["item"]["id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        let number = loop {
            let item: Value = client
                .get(format!("{}/api/v1/work-items/{id}", service.url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if item["phase"] == "completed" {
                break item["detail"]["mr"]["number"].as_u64().unwrap();
            }
            assert!(Instant::now() < deadline, "not merged: {item}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
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
    service.stop().await;
    latencies
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
        let backends =
            std::env::var("WQ_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
        let sim = ForgeSim::start(SimConfig::default()).await.unwrap();
        println!("mr benchmark: {submissions} submissions, {merges} merges");
        println!(
            "| | submit created, req/s | submit unchanged, req/s | webhook→merge p50 | p90 | max |"
        );
        println!("|---|---|---|---|---|---|");
        let mut costs = Vec::new();
        for backend in backends.split(',') {
            let fresh = || async {
                match backend {
                    "sqlite" => wq_store::testing::fresh_sqlite_url(),
                    _ => wq_store::testing::fresh_postgres_url().await,
                }
            };
            let (created, unchanged) = bench_submit(&fresh().await, &sim, submissions).await;
            let mut latencies = bench_merge_latency(&fresh().await, &sim, merges).await;
            latencies.sort_by(f64::total_cmp);
            println!(
                "| {backend} | {created:.0} | {unchanged:.0} | {:.1} ms | {:.1} ms | {:.1} ms |",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.9),
                latencies.last().copied().unwrap_or_default(),
            );
            // The audit trail's cost: the same submissions without it.
            wq_store::testing::set_audit(false);
            let (created_off, unchanged_off) =
                bench_submit(&fresh().await, &sim, submissions).await;
            wq_store::testing::set_audit(true);
            println!("| {backend}, audit off | {created_off:.0} | {unchanged_off:.0} | | | |");
            costs.push(format!(
                "{backend}: audit costs {:.1}% of created and {:.1}% of unchanged submissions",
                (1.0 - created / created_off) * 100.0,
                (1.0 - unchanged / unchanged_off) * 100.0,
            ));
        }
        for cost in costs {
            println!("{cost}");
        }
    });
}
