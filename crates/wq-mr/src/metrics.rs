//! The names of the metrics the `mr` type records (the API describes them
//! when it installs the Prometheus recorder). Labels are bounded:
//! `forge` is a configured instance name, `error` a
//! [`wq_forge::ForgeErrorKind`], `matcher` a configured CI-retry matcher.

/// Merges, by `forge`, `result` and `error`: `merged` (the change request
/// was seen merged and the item completed), `queued` (the forge put it in
/// its merge queue or train), `transient` (a 5xx, 429 or timeout answered
/// the merge call; it is read again) and `failed` (refused), with the
/// forge error's kind (`conflict`, `rejected`, ...; empty otherwise).
pub const MERGES_TOTAL: &str = "workqueue_mr_merges_total";
/// Change requests put in a merge queue (GitHub) or merge train (GitLab)
/// by a merge call, by `forge`.
pub const MERGE_QUEUE_ENTRIES_TOTAL: &str = "workqueue_mr_merge_queue_entries_total";
/// CI-retry decisions on failed jobs, by `matcher` (the configured matcher
/// that decided, empty when none matched) and `verdict`: `retry` (a retry
/// is scheduled), `retried` (the forge retried the job), `report` (a known
/// problem, reported, not retried), `limit_reached` and `no_match` (a
/// genuine failure).
pub const CI_RETRIES_TOTAL: &str = "workqueue_mr_ci_retries_total";

/// Describes the metrics to the installed recorder (a no-op before one is
/// installed); [`crate::MrType::new`] calls it.
pub fn describe() {
    metrics::describe_counter!(
        MERGES_TOTAL,
        "Merges, by forge, result (merged, queued, transient, failed) and error kind."
    );
    metrics::describe_counter!(
        MERGE_QUEUE_ENTRIES_TOTAL,
        "Change requests a merge call put in a merge queue or train, by forge."
    );
    metrics::describe_counter!(
        CI_RETRIES_TOTAL,
        "CI-retry decisions on failed jobs, by matcher and verdict."
    );
}

/// The label of a forge error's kind.
pub fn error_kind(kind: wq_forge::ForgeErrorKind) -> &'static str {
    use wq_forge::ForgeErrorKind;
    match kind {
        ForgeErrorKind::Unavailable => "unavailable",
        ForgeErrorKind::RateLimited => "rate_limited",
        ForgeErrorKind::Unauthorized => "unauthorized",
        ForgeErrorKind::NotFound => "not_found",
        ForgeErrorKind::Conflict => "conflict",
        ForgeErrorKind::Rejected => "rejected",
        ForgeErrorKind::Invalid => "invalid",
    }
}

/// Counts one CI-retry decision.
pub(crate) fn ci_retry(matcher: Option<&str>, verdict: &'static str) {
    metrics::counter!(
        CI_RETRIES_TOTAL,
        "matcher" => matcher.unwrap_or_default().to_owned(),
        "verdict" => verdict,
    )
    .increment(1);
}

/// Counts one merge outcome.
pub(crate) fn merge(forge: &str, result: &'static str, error: Option<wq_forge::ForgeErrorKind>) {
    metrics::counter!(
        MERGES_TOTAL,
        "forge" => forge.to_owned(),
        "result" => result,
        "error" => error.map_or("", error_kind),
    )
    .increment(1);
    if result == "queued" {
        metrics::counter!(MERGE_QUEUE_ENTRIES_TOTAL, "forge" => forge.to_owned()).increment(1);
    }
}
