//! Queue benchmark, on SQLite and PostgreSQL in one run:
//! - items per second through the full claim → event check → decide →
//!   execute → park loop with a no-op executor, from a backlog;
//! - API reads per second (item detail, list page and an item's audit
//!   trail);
//! - sweep query time with 10,000 to 1,000,000 idle items.
//!
//! `cargo bench -p wq-testkit --bench queue`; sizes can be lowered with
//! `WQ_BENCH_ITEMS` (backlog) and `WQ_BENCH_IDLE` (comma-separated idle
//! counts), and one backend picked with `WQ_BENCH_BACKENDS=sqlite|postgres`.
//! PostgreSQL comes from `WQ_TEST_PG_URL` like the tests.
//!
//! The loop also runs with the audit trail off and, on PostgreSQL, with
//! batching off (every claim and park alone), and with `WQ_BENCH_PEERS=1`
//! the peer queues drain the same backlog on the same server ([`peers`]).
//! The backlog's items carry the `item.created` record real items are
//! created with (`WQ_BENCH_HISTORY=0`: none). Workers: `WQ_BENCH_WORKERS`,
//! runs at once: `WQ_BENCH_MAX_RUNS` (the engine's defaults otherwise);
//! rounds of the with/without comparisons: `WQ_BENCH_ROUNDS` (1), each
//! running both variants, in turns first, after a drain that is not
//! counted (`WQ_BENCH_WARMUP` items, 10,000 by default; 0: none). Each
//! drain also prints the CPU the engine's process and the whole machine
//! used per item (Linux's `/proc`), and the trail's cost in the machine's
//! CPU per item; on
//! PostgreSQL also the WAL the server wrote per item (the insert position
//! before and after the drain), which the machine's noise does not move; on
//! SQLite also the time park jobs held the single writer's transaction per
//! item, the part of the loop no other write can share.
//! `WQ_BENCH_LOG=<file>` logs as the service does (JSON lines at INFO,
//! each audit record one line) to that file; without it nothing is logged.
//! `WQ_BENCH_LOOP_IDLE` adds that many parked items, each with a timer 30
//! minutes out, beside the loop's backlog (none by default).
//! `WQ_BENCH_ARCHIVE=1` also ships each drain's records to the archive (a
//! local directory, as the embedded default does) once the drain is over,
//! and prints the machine's CPU that cost per record: the part of the
//! trail's cost a deployment pays later, off the loop's path.

/// The `workqueue` binary's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "queue/peers.rs"]
mod peers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wq_core::{Clock, SystemClock, TypeRegistry};
use wq_engine::{EngineConfig, ProcessingManager};
use wq_store::{ItemListParams, SweepParams};
use wq_testkit::cpu::cpu_seconds;
use wq_testkit::types::{NOOP, NoopType};
use wq_testkit::{Backend, open_store};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn idle_sizes() -> Vec<u64> {
    std::env::var("WQ_BENCH_IDLE")
        .ok()
        .map(|value| {
            value
                .split(',')
                .filter_map(|part| part.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000])
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    if let Ok(path) = std::env::var("WQ_BENCH_LOG") {
        // As the service logs (`workqueue::logging`, `--log-format json`):
        // JSON lines at INFO, each audit record one of them, each line
        // written as it comes; here to a file instead of stderr.
        let file = std::fs::File::create(&path).expect("WQ_BENCH_LOG: a file to create");
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
        println!("logging: JSON lines at INFO to {path}");
    }
    let backlog = env_number("WQ_BENCH_ITEMS", 100_000);
    let sizes = idle_sizes();
    println!("# workqueue queue benchmark");
    println!(
        "machine: {} cores; backlog {backlog} items; idle sizes {sizes:?}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let backends: Vec<Backend> = match std::env::var("WQ_BENCH_BACKENDS").as_deref() {
        Ok("sqlite") => vec![Backend::Sqlite],
        Ok("postgres") => vec![Backend::Postgres],
        _ => vec![Backend::Sqlite, Backend::Postgres],
    };
    for backend in backends {
        println!("\n## {backend:?}");
        // The audit trail's cost, and on PostgreSQL what batching gains:
        // the same loop with and without each, alternating over
        // `WQ_BENCH_ROUNDS` rounds (medians), so a change in the machine's
        // load during the run shifts every variant alike.
        let rounds = env_number("WQ_BENCH_ROUNDS", 1).max(1);
        // A drain before the rounds, not counted: the process's first drain
        // pays for what every later one finds ready (its threads, the
        // allocator's pages, the server's first reads of its catalogs), and
        // the first round's first variant would carry it alone.
        let warm_up = env_number("WQ_BENCH_WARMUP", backlog.min(10_000));
        if warm_up > 0 {
            println!("(warm-up: {warm_up} items, not counted)");
            loop_throughput(backend, warm_up).await;
        }
        // Each round runs both orders' halves alternately (on then off, off
        // then on), so that neither variant always runs first; its own
        // cost is the paired ratio of that round.
        let (mut with, mut without, mut alone) = (Vec::new(), Vec::new(), Vec::new());
        let mut costs = Vec::new();
        // The machine's CPU per item with and without the trail: on a
        // machine whose speed drifts between runs, steadier than items
        // per second.
        let mut cpu_costs = Vec::new();
        // With `WQ_BENCH_ARCHIVE=1`: shipping's CPU per item, and the
        // trail's cost in CPU per item with it.
        let (mut shipping, mut shipped_costs) = (Vec::new(), Vec::new());
        // PostgreSQL: the WAL per item with and without the trail, a figure
        // the machine's noise does not move.
        let (mut wal_with, mut wal_without) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let mut pair = [0.0; 2];
            let mut cpu_pair = [0.0; 2];
            let mut archive = 0.0;
            let order = if round % 2 == 1 {
                [true, false]
            } else {
                [false, true]
            };
            for audit in order {
                wq_store::testing::set_audit(audit);
                println!(
                    "(round {round} of {rounds}: audit {})",
                    if audit { "on" } else { "trail off" }
                );
                let drained = loop_throughput(backend, backlog).await;
                pair[usize::from(!audit)] = drained.items_per_second;
                cpu_pair[usize::from(!audit)] = drained.machine_us_per_item;
                if let Some(bytes) = drained.wal_bytes_per_item {
                    if audit {
                        &mut wal_with
                    } else {
                        &mut wal_without
                    }
                    .push(bytes);
                }
                if audit {
                    archive = drained.archive_us_per_item;
                }
            }
            wq_store::testing::set_audit(true);
            with.push(pair[0]);
            without.push(pair[1]);
            costs.push((1.0 - pair[0] / pair[1]) * 100.0);
            cpu_costs.push((cpu_pair[0] / cpu_pair[1] - 1.0) * 100.0);
            if archive > 0.0 {
                shipped_costs.push(((cpu_pair[0] + archive) / cpu_pair[1] - 1.0) * 100.0);
                shipping.push(archive);
            }
            if backend == Backend::Postgres {
                wq_store::testing::set_batching(false);
                println!("(round {round} of {rounds}: claims and parks one by one)");
                alone.push(loop_throughput(backend, backlog).await.items_per_second);
                wq_store::testing::set_batching(true);
            }
        }
        let (with, without) = (median(&mut with), median(&mut without));
        let by_round: Vec<String> = costs.iter().map(|cost| format!("{cost:.1}%")).collect();
        println!(
            "audit cost: {:.1}% of loop throughput ({with:.0} items/s with, {without:.0} without; medians of {rounds}); by round {}, median {:.1}%",
            (1.0 - with / without) * 100.0,
            by_round.join(", "),
            median(&mut costs)
        );
        let cpu_by_round: Vec<String> =
            cpu_costs.iter().map(|cost| format!("{cost:.1}%")).collect();
        println!(
            "audit cost in the machine's CPU per item: {:.1}% more with the trail (median); by round {}",
            median(&mut cpu_costs),
            cpu_by_round.join(", ")
        );
        if !wal_with.is_empty() && !wal_without.is_empty() {
            let (with, without) = (median(&mut wal_with), median(&mut wal_without));
            println!(
                "audit cost in WAL per item: {with:.0} bytes with the trail, {without:.0} without (+{:.1}%; medians)",
                (with / without - 1.0) * 100.0
            );
        }
        if !shipping.is_empty() {
            println!(
                "archive shipping: {:.1} µs of the machine's CPU per item (median); the trail's cost in the machine's CPU per item, shipping included: {:.1}% (median)",
                median(&mut shipping),
                median(&mut shipped_costs)
            );
        }
        if backend == Backend::Postgres {
            let alone = median(&mut alone);
            println!(
                "batching: {:.2}x the loop with every claim and park alone ({with:.0} items/s batched, {alone:.0} alone)",
                with / alone
            );
            if std::env::var("WQ_BENCH_PEERS").as_deref() == Ok("1") {
                let figures = peers::run(backlog).await;
                println!("\n| system ({backlog} items) | items/s | workqueue ÷ it |");
                println!("|---|---|---|");
                println!("| workqueue loop, PostgreSQL, audit on | {with:.0} | 1.00 |");
                for figure in figures {
                    println!(
                        "| {} | {:.0} | {:.2} |",
                        figure.name,
                        figure.items_per_second,
                        with / figure.items_per_second
                    );
                }
            }
        }
        api_reads(backend).await;
        sweep_scaling(backend, &sizes).await;
    }
}

fn median(figures: &mut [f64]) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

/// What one drain of the backlog measured.
struct Drained {
    items_per_second: f64,
    /// CPU the whole machine used while the loop drained (the engine, the
    /// database server, the rest), per item.
    machine_us_per_item: f64,
    /// With `WQ_BENCH_ARCHIVE=1` and the trail on: the machine's CPU that
    /// shipping the drain's records to the archive took, per item.
    archive_us_per_item: f64,
    /// PostgreSQL: the WAL the server wrote while the loop drained, per
    /// item (`None` on SQLite).
    wal_bytes_per_item: Option<f64>,
}

/// Drains a fresh backlog of `backlog` items through one engine.
async fn loop_throughput(backend: Backend, backlog: u64) -> Drained {
    let url = backend.fresh_url().await;
    let store = open_store(&url).await;
    println!("durability: {}", wq_store::testing::durability(&url).await);
    // Each item also carries a deferred timer row, as parked merge requests
    // do, so the dimension table has its steady-state size (and statistics)
    // from the start.
    let seeding = Instant::now();
    // `WQ_BENCH_LOOP_IDLE`: parked items besides the backlog (none by
    // default), each with its timer 30 minutes out, as a deployment's
    // merge requests waiting on reviews have; what the claims must not walk.
    let idle = env_number("WQ_BENCH_LOOP_IDLE", 0);
    if idle > 0 {
        wq_store::testing::seed_items(&url, NOOP, idle, false, true).await;
    }
    wq_store::testing::seed_items(&url, NOOP, backlog, true, true).await;
    // Real items are created with their first audit record; so are these,
    // so that a park's record moves a chain head that exists
    // (`WQ_BENCH_HISTORY=0` leaves them without, as before 2026-12-03).
    if env_number("WQ_BENCH_HISTORY", 1) != 0 {
        wq_store::testing::seed_created_records(&url, NOOP).await;
    }
    println!(
        "seeded: {backlog} items and {idle} idle ones in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let registry = Arc::new(
        TypeRegistry::builder()
            .register(Arc::new(NoopType))
            .build()
            .expect("registry"),
    );
    let engine = ProcessingManager::new(
        store.clone(),
        registry,
        Arc::new(SystemClock),
        EngineConfig {
            handled_types: vec![NOOP.to_owned()],
            sweep_interval: Duration::from_secs(3600),
            workers: env_number("WQ_BENCH_WORKERS", EngineConfig::default().workers as u64)
                as usize,
            max_runs: env_number("WQ_BENCH_MAX_RUNS", EngineConfig::default().max_runs as u64)
                as usize,
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let wal_before = wq_store::testing::wal_position(&url).await;
    let (process_before, machine_before) = cpu_seconds();
    let started = Instant::now();
    engine.start();
    loop {
        engine.wait_idle().await;
        if engine.sweep_now().await.expect("sweep") == 0 {
            engine.wait_idle().await;
            break;
        }
    }
    let elapsed = started.elapsed();
    let (process_after, machine_after) = cpu_seconds();
    let wal_after = wq_store::testing::wal_position(&url).await;
    engine.shutdown().await;
    match store.handle() {
        wq_store::Backend::Postgres(pg) => {
            let ((claims, claim_batches), (parks, park_batches), fallbacks) = pg.batch_counts();
            println!(
                "statements: {claims} claims by id in {claim_batches}, {parks} parks in {park_batches} ({fallbacks} batches of parks failed and ran one by one)"
            );
        }
        wq_store::Backend::Sqlite(sqlite) => {
            let (parks, jobs) = sqlite.park_counts();
            println!(
                "jobs: {parks} parks in {jobs} ({} batches of parks failed and ran one by one); the writer's time in park jobs: {:.1} µs per item",
                sqlite.park_fallbacks(),
                sqlite.park_writer_time().as_secs_f64() * 1e6 / backlog as f64
            );
        }
    }
    let left = store
        .sweep_candidates(SweepParams {
            handled_types: vec![NOOP.to_owned()],
            now: SystemClock.now(),
            limit: 10,
        })
        .await
        .expect("sweep");
    assert!(left.is_empty(), "items left after the run");
    println!(
        "loop: {backlog} items in {:.2} s = {:.0} items/s (workers {}, max runs {})",
        elapsed.as_secs_f64(),
        backlog as f64 / elapsed.as_secs_f64(),
        env_number("WQ_BENCH_WORKERS", EngineConfig::default().workers as u64),
        env_number("WQ_BENCH_MAX_RUNS", EngineConfig::default().max_runs as u64)
    );
    let per_item = |seconds: f64| seconds * 1e6 / backlog as f64;
    let machine_us_per_item = per_item(machine_after - machine_before);
    println!(
        "cpu: {:.0} µs of the engine's and {machine_us_per_item:.0} µs of the machine's per item",
        per_item(process_after - process_before)
    );
    let wal_bytes_per_item = wal_before
        .zip(wal_after)
        .map(|(before, after)| (after - before) as f64 / backlog as f64);
    if let Some(bytes) = wal_bytes_per_item {
        println!("wal: {bytes:.0} bytes per item (the server's, while the loop drained)");
    }
    let archive_us_per_item = if wq_store::testing::audit_enabled()
        && std::env::var("WQ_BENCH_ARCHIVE").as_deref() == Ok("1")
    {
        per_item(ship(store.clone()).await)
    } else {
        0.0
    };
    Drained {
        items_per_second: backlog as f64 / elapsed.as_secs_f64(),
        machine_us_per_item,
        archive_us_per_item,
        wal_bytes_per_item,
    }
}

/// Ships every record not archived yet to a fresh local directory, as the
/// archiver's passes do (batches of its default size, each a gzip JSON
/// Lines object, then marked archived); answers the machine's CPU seconds
/// that took.
async fn ship(store: Arc<dyn wq_store::Store>) -> f64 {
    let dir = std::env::temp_dir().join(format!(
        "wq-bench-archive-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ));
    std::fs::create_dir_all(&dir).expect("archive directory");
    let objects = object_store::local::LocalFileSystem::new_with_prefix(&dir).expect("archive");
    let archiver = wq_archive::Archiver::new(store, Arc::new(objects), "", Arc::new(SystemClock))
        .attributes(false);
    let (_, machine_before) = cpu_seconds();
    let started = Instant::now();
    let mut records = 0;
    let mut objects = 0;
    loop {
        let pass = archiver.pass().await.expect("archive pass");
        if pass.records == 0 {
            break;
        }
        records += pass.records;
        objects += pass.objects.len();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (_, machine_after) = cpu_seconds();
    let _ = std::fs::remove_dir_all(&dir);
    let machine = machine_after - machine_before;
    println!(
        "archive: {records} records in {objects} objects, {elapsed:.2} s = {:.0} records/s, {:.1} µs of the machine's CPU per record",
        records as f64 / elapsed,
        machine * 1e6 / records.max(1) as f64
    );
    machine
}

/// What [`api_reads`] reads.
#[derive(Clone, Copy)]
enum Read {
    Detail,
    List,
    Trail,
}

async fn api_reads(backend: Backend) {
    let url = backend.fresh_url().await;
    let store = open_store(&url).await;
    wq_store::testing::seed_items(&url, NOOP, 10_000, false, true).await;
    wq_store::testing::seed_created_records(&url, NOOP).await;
    let ids: Vec<_> = store
        .item_list(ItemListParams {
            limit: 500,
            ..ItemListParams::default()
        })
        .await
        .expect("list")
        .into_iter()
        .map(|item| item.id)
        .collect();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let tokens = wq_testkit::Tokens::new();
    let authenticator = tokens.authenticator(wq_auth::AuthConfig::default(), clock.clone());
    let state = wq_api::AppState::new(store, clock, authenticator);
    let router = wq_api::router(state, &wq_api::ApiConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(wq_api::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let base = format!("http://{address}");
    // An item's audit trail is read from a trail of every seeded item's
    // record (`item.created`), as the item's page and `workqueue items
    // audit` read it.
    for (name, read) in [
        ("item detail", Read::Detail),
        ("list page of 50", Read::List),
        ("item audit trail", Read::Trail),
    ] {
        let client = wq_testkit::bearer_client(&tokens.admin);
        let done = Arc::new(AtomicU64::new(0));
        let until = Instant::now() + Duration::from_secs(5);
        let mut tasks = Vec::new();
        for worker in 0..32usize {
            let client = client.clone();
            let done = done.clone();
            let ids = ids.clone();
            let base = base.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = worker;
                while Instant::now() < until {
                    let url = match read {
                        Read::Detail => format!("{base}/api/v1/work-items/{}", ids[n % ids.len()]),
                        Read::List => format!("{base}/api/v1/work-items?limit=50"),
                        Read::Trail => {
                            format!("{base}/api/v1/work-items/{}/audit", ids[n % ids.len()])
                        }
                    };
                    let response = client.get(url).send().await.expect("request");
                    assert!(response.status().is_success());
                    response.bytes().await.expect("body");
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 32;
                }
            }));
        }
        for task in tasks {
            task.await.expect("reader");
        }
        println!(
            "api: {name}: {:.0} requests/s (32 concurrent clients, 5 s)",
            done.load(Ordering::Relaxed) as f64 / 5.0
        );
    }
    let _ = stop.send(());
    let _ = server.await;
}

async fn sweep_scaling(backend: Backend, sizes: &[u64]) {
    let mut first = None;
    for &idle in sizes {
        let url = backend.fresh_url().await;
        let store = open_store(&url).await;
        // Idle items: parked, each with a timer 30 minutes out, as parked
        // merge requests have; plus 100 actionable ones to find.
        wq_store::testing::seed_items(&url, NOOP, idle, false, true).await;
        wq_store::testing::seed_items(&url, NOOP, 100, true, false).await;
        let params = SweepParams {
            handled_types: vec![NOOP.to_owned()],
            now: SystemClock.now(),
            limit: 1_000,
        };
        let mut timings = Vec::new();
        for _ in 0..30 {
            let started = Instant::now();
            let found = store.sweep_candidates(params.clone()).await.expect("sweep");
            timings.push(started.elapsed());
            assert_eq!(found.len(), 100);
        }
        timings.sort();
        let median = timings[timings.len() / 2];
        let base = *first.get_or_insert(median);
        println!(
            "sweep: {idle:>9} idle items: median {:>8.3} ms ({:.2}x the smallest)",
            median.as_secs_f64() * 1000.0,
            median.as_secs_f64() / base.as_secs_f64()
        );
    }
}
