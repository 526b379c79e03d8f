//! `cargo bench -p workqueue --bench chaos -- --items 1000 --replicas 3
//! [--seed N]`: the chaos run of issue #16 (see
//! `tests/chaos/harness.rs`), printing its invariants and figures:
//! submission to merged p50 and p99, forge API calls per merged change by
//! forge. Exits non-zero when an invariant fails or the run does not
//! settle. Also `WQ_CHAOS_ITEMS`, `WQ_CHAOS_REPLICAS`, `WQ_CHAOS_SEED`.

#[path = "../tests/chaos/harness.rs"]
mod harness;

fn main() {
    let settings = harness::settings_from_args(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let report = runtime.block_on(harness::run(settings));
    report.print();
    if report.invariants.violations() > 0 || !report.settled || !report.submit_errors.is_empty() {
        std::process::exit(1);
    }
}
