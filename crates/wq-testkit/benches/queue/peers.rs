//! The peers, side by side with workqueue's loop (`WQ_BENCH_PEERS=1`): two
//! public PostgreSQL job queues draining the same number of no-op jobs from
//! a backlog on the same PostgreSQL, with durable commits, in the same run.
//!
//! - graphile-worker 0.17.3 (Node.js), concurrency 24, unbatched and
//!   batched (`localQueue` 500): `gw_drain.js`;
//! - pgqueuer 1.6.0 (Python), 4 workers × batch 100: `pgq_drain.py`.
//!
//! Each is installed once under cargo's target tmp dir (npm, and a
//! virtualenv from PyPI) and runs on a fresh database. A peer that cannot
//! be installed or run fails the benchmark, naming the step.

use std::path::{Path, PathBuf};
use std::process::Command;

use wq_testkit::python;

const GW_DRAIN: &str = include_str!("gw_drain.js");
const PGQ_DRAIN: &str = include_str!("pgq_drain.py");

/// One peer's figure.
pub struct PeerFigure {
    pub name: String,
    pub items_per_second: f64,
}

/// Drains `items` no-op jobs through each peer.
pub async fn run(items: u64) -> Vec<PeerFigure> {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("peers");
    let graphile = graphile_worker(&root);
    let pgqueuer = pgqueuer(&root);
    let mut figures = Vec::new();
    for batched in [false, true] {
        let url = wq_store::testing::fresh_postgres_url().await;
        let output = python::run(
            "graphile-worker's drain",
            Command::new("node")
                .arg(graphile.join("gw_drain.js"))
                .current_dir(&graphile)
                .env("N", items.to_string())
                .env("C", "24")
                .env("P", "1")
                .env("BATCH", if batched { "1" } else { "0" })
                .env("DB", &url),
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        println!("peer: {}", text.trim());
        figures.push(PeerFigure {
            name: format!(
                "graphile-worker 0.17.3, concurrency 24, {}",
                if batched {
                    "batched (localQueue 500)"
                } else {
                    "unbatched"
                }
            ),
            items_per_second: drain_rate(&text),
        });
        wq_store::testing::drop_postgres_database(&url).await;
    }
    let url = wq_store::testing::fresh_postgres_url().await;
    python::run(
        "pgqueuer's schema",
        Command::new(pgqueuer.join("bin/python"))
            .args(["-m", "pgqueuer", "install"])
            .env("PGDSN", &url),
    );
    let script = pgqueuer.join("pgq_drain.py");
    std::fs::write(&script, PGQ_DRAIN).expect("pgqueuer's drain script");
    let output = python::run(
        "pgqueuer's drain",
        Command::new(pgqueuer.join("bin/python"))
            .arg(&script)
            .env("N", items.to_string())
            .env("W", "4")
            .env("B", "100")
            .env("DSN", &url),
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("peer: {}", text.trim());
    figures.push(PeerFigure {
        name: "pgqueuer 1.6.0, 4 workers × batch 100".to_owned(),
        items_per_second: drain_rate(&text),
    });
    wq_store::testing::drop_postgres_database(&url).await;
    figures
}

/// The `drain N jobs/s` figure of a peer's output line.
fn drain_rate(text: &str) -> f64 {
    let after = text
        .split("drain ")
        .nth(1)
        .unwrap_or_else(|| panic!("no drain figure in the peer's output: {text}"));
    let number: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .filter(|c| *c != ',')
        .collect();
    number
        .parse()
        .unwrap_or_else(|_| panic!("no drain figure in the peer's output: {text}"))
}

/// graphile-worker and pg installed with npm (once) beside its script.
fn graphile_worker(root: &Path) -> PathBuf {
    let dir = root.join("graphile-worker-0.17.3");
    std::fs::create_dir_all(&dir).expect("graphile-worker's directory");
    std::fs::write(dir.join("gw_drain.js"), GW_DRAIN).expect("graphile-worker's drain script");
    if !dir.join("node_modules/graphile-worker").exists() {
        python::run(
            "npm init for graphile-worker",
            Command::new("npm").args(["init", "-y"]).current_dir(&dir),
        );
        python::run(
            "installing graphile-worker from npm",
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "graphile-worker@0.17.3",
                    "pg@8",
                ])
                .current_dir(&dir),
        );
    }
    dir
}

/// pgqueuer in a virtualenv of its own.
fn pgqueuer(root: &Path) -> PathBuf {
    python::virtualenv(
        root,
        "pgqueuer",
        "pgqueuer==1.6.0\nasyncpg==0.32.0\nuvloop==0.23.0\n",
    )
}
