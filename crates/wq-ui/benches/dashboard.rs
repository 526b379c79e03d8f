//! Dashboard benchmark, on SQLite:
//! - the list page (`GET /ui`, 50 active rows rendered server-side, each
//!   with its type's status summary) over 100,000 items: p50 and p99 over
//!   HTTP on loopback;
//! - 1,000 event streams (`GET /ui/events`) connected at once: the growth
//!   of the process's resident memory (`/proc/self/statm`), clients and
//!   server together, so an upper bound for the server.
//!
//! `cargo bench -p wq-ui --bench dashboard`; `WQ_BENCH_ITEMS` and
//! `WQ_BENCH_STREAMS` lower the sizes. The streams need about two file
//! descriptors each (`ulimit -n 4096`).
//!
//! The item type's summary reads two rows per item (its dimensions and the
//! item), as the `mr` type's reads its detail row and its dimensions.
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark reads the wall clock"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use wq_core::status::{Automation, CiState, QueueStatus};
use wq_core::{
    Action, Clock, EventResult, ExecError, ExecOutcome, ItemType, ItemView, PendingEvent,
    RequestError, StatusSummary, SystemClock, TypeRegistry, WorkItem,
};
use wq_store::Store;

const TYPE: &str = "bench";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A type whose summary costs two reads, like `mr`'s.
struct BenchType {
    store: Arc<dyn Store>,
}

#[async_trait]
impl ItemType for BenchType {
    fn name(&self) -> &'static str {
        TYPE
    }
    fn actions(&self) -> &'static [&'static str] {
        &["noop"]
    }
    fn decide(&self, _view: &ItemView) -> Option<Action> {
        None
    }
    async fn execute(&self, _action: Action, _view: &ItemView) -> Result<ExecOutcome, ExecError> {
        Ok(ExecOutcome::done())
    }
    async fn handle_event(
        &self,
        _view: &ItemView,
        _event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(EventResult::ignored())
    }
    async fn status(&self, item: &WorkItem) -> Result<Option<StatusSummary>, RequestError> {
        let dimensions = self
            .store
            .dimension_list(item.id)
            .await
            .map_err(RequestError::from)?;
        let stored = self
            .store
            .item_get(item.id)
            .await
            .map_err(RequestError::from)?
            .ok_or_else(|| RequestError::NotFound("gone".into()))?;
        let queued = stored.id.0.as_u128() % 3 == 0;
        Ok(Some(
            StatusSummary {
                title: Some(format!("Change {}", stored.id)),
                forge: Some("gitlab".into()),
                project: Some("team/app".into()),
                branch: Some(format!("wq/{}", dimensions.len())),
                ci: CiState::Passed,
                queue: queued.then(|| QueueStatus {
                    state: "queued".into(),
                    position: Some(2),
                    eta_seconds: Some(61),
                }),
                gates_checked: true,
                automation: Automation {
                    ci_retry: true,
                    auto_merge: true,
                },
                ..StatusSummary::default()
            }
            .finish(stored.phase),
        ))
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let items = env_number("WQ_BENCH_ITEMS", 100_000);
    let streams = env_number("WQ_BENCH_STREAMS", 1_000) as usize;
    let url = wq_store::testing::fresh_sqlite_url();
    let store = wq_store::connect(&url, 8).await.expect("open sqlite");
    store.migrate().await.expect("migrate");
    let started = Instant::now();
    wq_store::testing::seed_items(&url, TYPE, items, false, true).await;
    println!("seeded {items} items in {:.1?}", started.elapsed());

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let tokens = wq_testkit::Tokens::new();
    let auth = tokens.authenticator(Default::default(), Arc::clone(&clock));
    let registry = TypeRegistry::builder()
        .register(Arc::new(BenchType {
            store: Arc::clone(&store),
        }))
        .build()
        .expect("registry");
    let state = wq_api::AppState::new(Arc::clone(&store), Arc::clone(&clock), Arc::clone(&auth))
        .with_types(registry);
    let principal = auth.authenticate_token(&tokens.admin).await.expect("admin");
    let session = wq_ui::session::open(&state, &principal)
        .await
        .expect("session");
    let router = wq_ui::router(state).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serve = wq_api::ServeConfig {
        max_connections: streams + 64,
        ..wq_api::ServeConfig::default()
    };
    tokio::spawn(async move {
        wq_api::serve_with(listener, router, &serve, std::future::pending()).await
    });
    let cookie = format!("wq_session={session}");
    let client = reqwest::Client::new();

    // The list page.
    let get = || async {
        let response = client
            .get(format!("{base}/ui"))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("list page");
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap();
        assert_eq!(
            body.matches("<li class=\"row").count(),
            50,
            "a page of 50 rows"
        );
    };
    for _ in 0..20 {
        get().await;
    }
    let mut times = Vec::new();
    for _ in 0..500 {
        let at = Instant::now();
        get().await;
        times.push(at.elapsed());
    }
    times.sort();
    println!(
        "list page, 50 rows of {items} items (sqlite): p50 {:.2?}  p99 {:.2?}  max {:.2?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1]
    );

    // Connected event streams.
    let before = rss_bytes();
    let mut open = Vec::with_capacity(streams);
    for _ in 0..streams {
        let response = reqwest::Client::new()
            .get(format!("{base}/ui/events"))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("event stream");
        assert_eq!(response.status(), 200);
        let mut response = response;
        // The stream's greeting: it is open and subscribed.
        let first = response.chunk().await.unwrap().expect("a first event");
        assert!(std::str::from_utf8(&first).unwrap().contains("ready"));
        open.push(response);
    }
    let after = rss_bytes();
    println!(
        "{streams} event streams connected: resident memory {:.1} MiB → {:.1} MiB (+{:.1} MiB, clients and server in one process)",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / 1048576.0
    );
    drop(open);
}
