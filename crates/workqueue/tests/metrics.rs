//! The domain metrics on `/metrics` after one change went through CI (a
//! runner failure retried), a rate-limited forge answer and the merge,
//! against forge-sim. A test binary of its own: the Prometheus recorder is
//! the process's, so the values here are this test's alone.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

#[path = "mr/support.rs"]
#[allow(
    dead_code,
    reason = "the mr suite's harness; this test uses part of it"
)]
mod support;

use std::time::Duration;

use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec};
use reqwest::StatusCode;
use wq_testkit::Backend;

use support::{GithubRepo, Harness, Options, PROJECT, change, github_change};

/// Retries runner system failures at once.
const RUNNER_AT_ONCE: &str = r#"
matchers:
  - name: runner-system-failure
    failure_reason: runner_system_failure
    retry_delays: [0]
"#;

const RUNNER_TRACE: &str =
    "Running on runner-7...\nERROR: Job failed (system failure): lost connection to the runner\n";

/// The value of the sample `name{labels}` (exactly these labels, in any
/// order) in Prometheus text.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut wanted: Vec<String> = labels
        .iter()
        .map(|(label, value)| format!("{label}=\"{value}\""))
        .collect();
    wanted.sort();
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, rest) = match series.split_once('{') {
            Some((series_name, rest)) => (series_name, rest.strip_suffix('}')?),
            None => (series, ""),
        };
        if series_name != name {
            return None;
        }
        let mut have = pairs(rest);
        have.sort();
        (have == wanted).then(|| value.parse().ok())?
    })
}

/// `a="x",b=""` as `["a=\"x\"", "b=\"\""]` (the values here hold no
/// quotes).
fn pairs(labels: &str) -> Vec<String> {
    let mut pairs = Vec::new();
    let mut rest = labels;
    while let Some((label, after)) = rest.split_once("=\"") {
        let Some((value, after)) = after.split_once('"') else {
            break;
        };
        pairs.push(format!("{}=\"{value}\"", label.trim_start_matches(',')));
        rest = after;
    }
    pairs
}

#[tokio::test]
async fn an_mr_merged_through_ci_retry_and_a_rate_limit_shows_in_the_metrics() {
    let h = Harness::start_with(
        Backend::Sqlite,
        Options {
            jobs: vec![JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", RUNNER_TRACE),
            )],
            ci_retry: Some(RUNNER_AT_ONCE),
            metrics: true,
            ..Options::default()
        },
    )
    .await;
    // The first creation of the merge request is rate limited.
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests",
            HttpFault::RateLimit {
                retry_after_secs: 120,
            },
        )
        .times(1),
    );
    let id = h
        .submit_ok(
            &change("wq/metrics", &[("src/metrics.rs", "pub fn m() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "the rate limit", |item| item["attempts"] == 1)
        .await;
    // Past Retry-After and its jitter.
    h.advance(Duration::from_secs(121 + 30)).await;
    h.wait_phase(&id, "completed").await;
    // A delivery whose token does not check.
    let refused = h
        .client
        .post(format!("{}/webhooks/gitlab", h.url))
        .header("x-gitlab-token", "not-the-secret")
        .header("x-gitlab-event", "Merge Request Hook")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    let text = h
        .client
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
    };
    assert_eq!(
        value(
            "workqueue_mr_merges_total",
            &[("forge", "gitlab"), ("result", "merged"), ("error", "")]
        ),
        1.0
    );
    for verdict in ["retry", "retried"] {
        assert_eq!(
            value(
                "workqueue_mr_ci_retries_total",
                &[("matcher", "runner-system-failure"), ("verdict", verdict)]
            ),
            1.0,
            "{verdict}"
        );
    }
    assert_eq!(
        value(
            "workqueue_webhooks_total",
            &[("source", "gitlab"), ("outcome", "unauthenticated")]
        ),
        1.0
    );
    assert!(
        value(
            "workqueue_webhooks_total",
            &[("source", "gitlab"), ("outcome", "stored")]
        ) >= 1.0
    );
    // The forge calls, as the sim saw them, by endpoint class.
    let host = h.sim.gitlab_url();
    let host = host
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let forge = |endpoint: &str, status: &str| {
        value(
            "workqueue_forge_requests_total",
            &[
                ("forge", "gitlab"),
                ("host", &host),
                ("endpoint", endpoint),
                ("status", status),
            ],
        )
    };
    let merges = h.count("PUT", "/merge") as f64;
    assert_eq!(merges, 1.0);
    assert_eq!(
        forge("PUT projects/*/merge_requests/*/merge", "2xx"),
        merges
    );
    assert_eq!(
        forge("POST projects/*/jobs/*/retry", "2xx"),
        h.count("POST", "/retry") as f64
    );
    assert_eq!(forge("POST projects/*/merge_requests", "4xx"), 1.0);
    assert_eq!(
        value(
            "workqueue_forge_request_errors_total",
            &[
                ("forge", "gitlab"),
                ("host", &host),
                ("endpoint", "POST projects/*/merge_requests"),
                ("error", "rate_limited"),
            ],
        ),
        1.0
    );
    assert_eq!(
        value(
            "workqueue_forge_request_duration_seconds_count",
            &[
                ("forge", "gitlab"),
                ("host", &host),
                ("endpoint", "PUT projects/*/merge_requests/*/merge"),
            ],
        ),
        merges
    );
    // The 429 said no budget was left.
    assert_eq!(
        value(
            "workqueue_forge_rate_limit_remaining",
            &[("forge", "gitlab"), ("host", &host)]
        ),
        0.0
    );
    assert_eq!(value("workqueue_lease_losses_total", &[]), 0.0);
    assert!(value("workqueue_sweep_backlog", &[]) >= 0.0);
    assert_eq!(
        value(
            "workqueue_items",
            &[("item_type", "mr"), ("phase", "completed")]
        ),
        1.0
    );
    h.finish().await;
}

/// Labels of one forge request series of the GitHub of `h`.
fn github_host(h: &Harness) -> String {
    h.sim
        .github_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_pr_merged_through_the_merge_queue_counts_one_queue_entry() {
    let h = Harness::start_with(
        Backend::Sqlite,
        Options {
            jobs: vec![JobSpec::new("ci", JobOutcome::Success)],
            github: Some(GithubRepo {
                merge_queue: true,
                required_approvals: 0,
                dismiss_stale_reviews: false,
            }),
            metrics: true,
            ..Options::default()
        },
    )
    .await;
    // The queue holds its entries while locked.
    h.sim.github_lock_queue(PROJECT, true).unwrap();
    let id = h
        .submit_ok(
            &github_change("wq/queued", &[("q.txt", "q\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "the queue entry", |item| {
        item["detail"]["merge_queue"]["position"] == 1
    })
    .await;
    h.sim.github_lock_queue(PROJECT, false).unwrap();
    h.advance(Duration::from_secs(61)).await;
    h.wait_phase(&id, "completed").await;

    let text = h
        .client
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
    };
    for result in ["queued", "merged"] {
        assert_eq!(
            value(
                "workqueue_mr_merges_total",
                &[("forge", "github"), ("result", result), ("error", "")]
            ),
            1.0,
            "{result}"
        );
    }
    assert_eq!(
        value(
            "workqueue_mr_merge_queue_entries_total",
            &[("forge", "github")]
        ),
        1.0
    );
    let host = github_host(&h);
    assert_eq!(
        value(
            "workqueue_forge_requests_total",
            &[
                ("forge", "github"),
                ("host", &host),
                ("endpoint", "PUT repos/*/pulls/*/merge-async"),
                ("status", "2xx"),
            ],
        ),
        h.count("PUT", "/merge-async") as f64
    );
    assert!(
        value(
            "workqueue_forge_requests_total",
            &[
                ("forge", "github"),
                ("host", &host),
                ("endpoint", "POST graphql"),
                ("status", "2xx"),
            ],
        ) >= 1.0
    );
    h.finish().await;
}

/// README's table names every metric the crates define, each with an
/// example alert that uses it.
#[test]
fn the_readme_lists_every_metric_with_an_alert() {
    let readme = include_str!("../../../README.md");
    for name in [
        wq_api::metrics::ITEMS_GAUGE,
        wq_api::metrics::WEBHOOKS_TOTAL,
        wq_engine::metrics::ACTIONS_TOTAL,
        wq_engine::metrics::ACTIONS_FAILED_TOTAL,
        wq_engine::metrics::EVENTS_TOTAL,
        wq_engine::metrics::LOOP_DURATION_SECONDS,
        wq_engine::metrics::RUN_PANICS_TOTAL,
        wq_engine::metrics::LEASE_LOSSES_TOTAL,
        wq_engine::metrics::SWEEP_BACKLOG,
        wq_forge::metrics::FORGE_REQUESTS_TOTAL,
        wq_forge::metrics::FORGE_REQUEST_DURATION_SECONDS,
        wq_forge::metrics::FORGE_REQUEST_ERRORS_TOTAL,
        wq_forge::metrics::FORGE_RATE_LIMIT_REMAINING,
        wq_mr::metrics::MERGES_TOTAL,
        wq_mr::metrics::MERGE_QUEUE_ENTRIES_TOTAL,
        wq_mr::metrics::CI_RETRIES_TOTAL,
        wq_intake::QUEUE_MESSAGES_TOTAL,
        wq_intake::QUEUE_ERRORS_TOTAL,
        wq_archive::LAG_SECONDS,
        wq_archive::UNARCHIVED,
        wq_archive::SHIPPED_RECORDS_TOTAL,
        wq_archive::FAILURES_TOTAL,
    ] {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}")))
            .unwrap_or_else(|| panic!("README's metrics table has no row for {name}"));
        // The last cell (a `\|` inside a cell has no spaces around it).
        let alert = row
            .trim_end_matches('|')
            .rsplit(" | ")
            .next()
            .unwrap_or_default();
        assert!(
            alert.contains(name) && alert.contains('`'),
            "the row of {name} has no example alert using it: {row}"
        );
    }
}
