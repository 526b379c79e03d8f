//! Prometheus metrics: the process-wide recorder (installed once, shared by
//! every router in the process) and `GET /metrics`, which renders the
//! engine's counters and histogram plus the `workqueue_items` gauge, read
//! from the store at scrape time.
//!
//! The gauge is rendered from the store of the router that is scraped, not
//! kept in the global recorder, so several apps in one process (tests) and
//! types or phases that dropped to zero are always shown correctly.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use wq_core::Phase;
use wq_engine::metrics::{
    ACTIONS_FAILED_TOTAL, ACTIONS_TOTAL, EVENTS_TOTAL, LOOP_DURATION_SECONDS, RUN_PANICS_TOTAL,
};

use crate::error::ApiError;
use crate::state::AppState;

/// Work items by `item_type` and `phase`, read from the store at scrape time.
pub const ITEMS_GAUGE: &str = "workqueue_items";

/// Histogram buckets of [`LOOP_DURATION_SECONDS`], in seconds.
const LOOP_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Content type of the Prometheus text format.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Installing the global recorder failed (another recorder was installed
/// first by something else).
#[derive(Debug, Clone, thiserror::Error)]
#[error("installing the Prometheus recorder failed: {0}")]
pub struct MetricsInstallError(String);

/// The process's Prometheus handle; installs the global `metrics` recorder
/// on the first call and returns the same handle afterwards.
pub fn prometheus_handle() -> Result<PrometheusHandle, MetricsInstallError> {
    static HANDLE: OnceLock<Result<PrometheusHandle, MetricsInstallError>> = OnceLock::new();
    HANDLE.get_or_init(install).clone()
}

fn install() -> Result<PrometheusHandle, MetricsInstallError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(LOOP_DURATION_SECONDS.to_owned()),
            LOOP_DURATION_BUCKETS,
        )
        .map_err(|error| MetricsInstallError(error.to_string()))?
        .install_recorder()
        .map_err(|error| MetricsInstallError(error.to_string()))?;
    metrics::describe_counter!(ACTIONS_TOTAL, "Actions the engine executed.");
    metrics::describe_counter!(ACTIONS_FAILED_TOTAL, "Actions whose executor failed.");
    metrics::describe_counter!(EVENTS_TOTAL, "Events the engine applied.");
    metrics::describe_counter!(RUN_PANICS_TOTAL, "Item runs that panicked.");
    metrics::describe_histogram!(
        LOOP_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Duration of one run of an item's processing loop."
    );
    Ok(handle)
}

/// `GET /metrics`: Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text format.", content_type = "text/plain", body = String)),
)]
pub async fn scrape(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let counts = state.store.item_count_by_phase().await?;
    let mut text = match &state.metrics {
        Some(handle) => {
            handle.run_upkeep();
            handle.render()
        }
        None => String::new(),
    };
    let mut by_type: BTreeMap<String, BTreeMap<&'static str, i64>> = BTreeMap::new();
    for count in counts {
        *by_type
            .entry(count.item_type)
            .or_default()
            .entry(count.phase.as_str())
            .or_default() += count.count;
    }
    render_items_gauge(&mut text, &by_type);
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], text))
}

/// Appends the gauge: every phase of every type that has items, zeros
/// included, so a phase that empties shows 0 instead of vanishing.
fn render_items_gauge(text: &mut String, by_type: &BTreeMap<String, BTreeMap<&'static str, i64>>) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let _ = writeln!(
        text,
        "# HELP {ITEMS_GAUGE} Work items by item type and phase."
    );
    let _ = writeln!(text, "# TYPE {ITEMS_GAUGE} gauge");
    for (item_type, phases) in by_type {
        for phase in Phase::ALL {
            let count = phases.get(phase.as_str()).copied().unwrap_or(0);
            let _ = writeln!(
                text,
                "{ITEMS_GAUGE}{{item_type=\"{}\",phase=\"{}\"}} {count}",
                escape_label(item_type),
                phase.as_str()
            );
        }
    }
}

/// Escapes a label value for the text format (backslash, quote, newline).
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for character in value.chars() {
        match character {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_lists_every_phase_and_escapes_labels() {
        let mut by_type = BTreeMap::new();
        by_type.insert("a\"b".to_owned(), BTreeMap::from([("active", 2)]));
        let mut text = String::from("# existing");
        render_items_gauge(&mut text, &by_type);
        assert_eq!(
            text,
            "# existing\n\
             # HELP workqueue_items Work items by item type and phase.\n\
             # TYPE workqueue_items gauge\n\
             workqueue_items{item_type=\"a\\\"b\",phase=\"active\"} 2\n\
             workqueue_items{item_type=\"a\\\"b\",phase=\"completed\"} 0\n\
             workqueue_items{item_type=\"a\\\"b\",phase=\"failed\"} 0\n\
             workqueue_items{item_type=\"a\\\"b\",phase=\"cancelled\"} 0\n"
        );
    }

    #[test]
    fn the_recorder_is_installed_once() {
        let first = prometheus_handle().unwrap();
        let second = prometheus_handle().unwrap();
        metrics::counter!(ACTIONS_TOTAL, "item_type" => "t", "action" => "a").increment(1);
        assert!(first.render().contains(ACTIONS_TOTAL));
        assert!(second.render().contains(ACTIONS_TOTAL));
    }
}
