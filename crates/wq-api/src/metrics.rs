//! Prometheus metrics: the process-wide recorder (installed once, shared by
//! every router in the process) and `GET /metrics`, which renders what the
//! crates record (the engine's, the forge clients', the item types', the
//! intake's, the archive's, and [`WEBHOOKS_TOTAL`] here) plus the
//! `workqueue_items` gauge.
//!
//! The gauge needs a scan of the items (a `GROUP BY`): it is read from the
//! store at most once per [`ITEMS_GAUGE_MAX_AGE`] ([`ItemsGauge`]), however
//! often `/metrics` is scraped, and concurrent scrapes share one read. It is
//! rendered from the store of the router that is scraped, not kept in the
//! global recorder, so several apps in one process (tests) and types or
//! phases that dropped to zero are always shown correctly.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use wq_core::Phase;
use wq_engine::metrics::{
    ACTIONS_FAILED_TOTAL, ACTIONS_TOTAL, EVENTS_TOTAL, LEASE_LOSSES_TOTAL, LOOP_DURATION_SECONDS,
    RUN_PANICS_TOTAL, SWEEP_BACKLOG,
};
use wq_store::{PhaseCount, Store, StoreError};

use crate::error::ApiError;
use crate::state::AppState;

/// Work items by `item_type` and `phase`, read from the store at most once
/// per [`ITEMS_GAUGE_MAX_AGE`].
pub const ITEMS_GAUGE: &str = "workqueue_items";
/// Webhook deliveries to `/webhooks/{source}`, by `source` (empty for a
/// source nothing receives) and `outcome`: `stored`, `ignored` (about
/// nothing tracked), `malformed`, `unauthenticated`, `unavailable` (the
/// store failed; the forge delivers again), `unknown_source`.
pub const WEBHOOKS_TOTAL: &str = "workqueue_webhooks_total";

/// How old the [`ITEMS_GAUGE`] counts may be when scraped.
pub const ITEMS_GAUGE_MAX_AGE: Duration = Duration::from_secs(15);

/// Histogram buckets of every other histogram (forge calls), in seconds.
const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

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
        .set_buckets(DEFAULT_BUCKETS)
        .map_err(|error| MetricsInstallError(error.to_string()))?
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
    metrics::describe_counter!(
        LEASE_LOSSES_TOTAL,
        "Item runs that ended because another worker took the lease over."
    );
    metrics::describe_gauge!(SWEEP_BACKLOG, "Items the last sweep found due.");
    metrics::describe_counter!(WEBHOOKS_TOTAL, "Webhook deliveries, by source and outcome.");
    metrics::describe_histogram!(
        LOOP_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Duration of one run of an item's processing loop."
    );
    Ok(handle)
}

/// The [`ITEMS_GAUGE`] counts of one router's store, read at most once per
/// `max_age`.
#[derive(Debug)]
pub struct ItemsGauge {
    max_age: Duration,
    /// The last read and when it was made; the lock makes concurrent
    /// scrapes wait for one read.
    last: tokio::sync::Mutex<Option<(Instant, Vec<PhaseCount>)>>,
}

impl Default for ItemsGauge {
    fn default() -> Self {
        Self::new(ITEMS_GAUGE_MAX_AGE)
    }
}

impl ItemsGauge {
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The counts as of `now`: the last read while it is younger than the
    /// maximum age, else a new one.
    pub async fn counts(
        &self,
        store: &dyn Store,
        now: Instant,
    ) -> Result<Vec<PhaseCount>, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((read_at, counts)) = last.as_ref()
            && now.saturating_duration_since(*read_at) < self.max_age
        {
            return Ok(counts.clone());
        }
        let counts = store.item_count_by_phase().await?;
        *last = Some((now, counts.clone()));
        Ok(counts)
    }
}

/// `GET /metrics`: Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text format.", content_type = "text/plain", body = String)),
)]
pub async fn scrape(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let counts = state
        .items_gauge
        .counts(state.store.as_ref(), Instant::now())
        .await?;
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

    /// At most one read per maximum age: an item added meanwhile shows
    /// once the counts are older than that, not before.
    #[tokio::test]
    async fn the_items_gauge_reads_the_store_at_most_once_per_max_age() {
        let store = wq_testkit::Backend::Sqlite.fresh_store().await;
        let insert = || async {
            store
                .item_insert(wq_store::NewItem {
                    id: wq_core::ItemId::new_v7(),
                    item_type: "alpha".to_owned(),
                    idempotency_key: None,
                    caller_identity: None,
                    place: None,
                    now: time::macros::datetime!(2026-12-01 09:00 UTC),
                    dimensions: Vec::new(),
                })
                .await
                .unwrap();
        };
        let total = |counts: Vec<PhaseCount>| counts.iter().map(|c| c.count).sum::<i64>();
        let gauge = ItemsGauge::new(Duration::from_secs(15));
        let start = Instant::now();
        insert().await;
        assert_eq!(total(gauge.counts(store.as_ref(), start).await.unwrap()), 1);
        insert().await;
        let soon = start + Duration::from_secs(14);
        assert_eq!(
            total(gauge.counts(store.as_ref(), soon).await.unwrap()),
            1,
            "cached"
        );
        let later = start + Duration::from_secs(15);
        assert_eq!(total(gauge.counts(store.as_ref(), later).await.unwrap()), 2);
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
