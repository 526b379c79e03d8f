//! The metrics of the forge clients' HTTP calls, recorded around every
//! request both clients send (`observe`). Labels: `forge` (`gitlab`,
//! `github`), `host` (the API's host and port: one per configured
//! instance) and `endpoint`, a low-cardinality class of the request
//! (`PUT projects/*/merge_requests/*/merge`): the method and the path's
//! fixed words, every other segment (ids, project paths, branches, label
//! names) one `*`, never the raw path.

use std::future::Future;
use std::time::Instant;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// Requests sent, by `forge`, `host`, `endpoint` and `status` (`2xx`,
/// `4xx`, `5xx`, ..., `none` when no answer came).
pub const FORGE_REQUESTS_TOTAL: &str = "workqueue_forge_requests_total";
/// Time from sending a request to its answer's headers, in seconds, by
/// `forge`, `host` and `endpoint`.
pub const FORGE_REQUEST_DURATION_SECONDS: &str = "workqueue_forge_request_duration_seconds";
/// Requests that failed, by `forge`, `host`, `endpoint` and `error`:
/// `rate_limited` (429, or 403 with no budget left), `not_found` (404,
/// often an expected answer to a lookup), `client` (another 4xx),
/// `server` (5xx), `timeout`, `transport` (no answer).
pub const FORGE_REQUEST_ERRORS_TOTAL: &str = "workqueue_forge_request_errors_total";
/// The rate-limit budget the forge reported left in its last answer
/// (`X-RateLimit-Remaining` on GitHub, `RateLimit-Remaining` on GitLab),
/// by `forge` and `host`.
pub const FORGE_RATE_LIMIT_REMAINING: &str = "workqueue_forge_rate_limit_remaining";

/// Histogram buckets of [`FORGE_REQUEST_DURATION_SECONDS`], in seconds.
pub const FORGE_REQUEST_DURATION_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The fixed words of the forges' REST paths; any other segment is a
/// value.
const PATH_WORDS: &[&str] = &[
    "actions",
    "approvals",
    "approve",
    "blobs",
    "branches",
    "check-runs",
    "comments",
    "commits",
    "compare",
    "git",
    "graphql",
    "heads",
    "issues",
    "jobs",
    "labels",
    "logs",
    "merge",
    "merge-async",
    "merge_requests",
    "merge_trains",
    "notes",
    "pipelines",
    "projects",
    "protected_branches",
    "pulls",
    "rebase",
    "ref",
    "refs",
    "repos",
    "repository",
    "retry",
    "reviews",
    "rules",
    "rulesets",
    "runs",
    "status",
    "statuses",
    "trace",
    "trees",
    "user",
];

/// Describes the metrics to the installed recorder (a no-op before one is
/// installed); [`crate::Forges::from_config`] calls it.
pub fn describe() {
    metrics::describe_counter!(
        FORGE_REQUESTS_TOTAL,
        "Forge API requests, by forge, host, endpoint class and status class."
    );
    metrics::describe_histogram!(
        FORGE_REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Forge API request latency, by forge, host and endpoint class."
    );
    metrics::describe_counter!(
        FORGE_REQUEST_ERRORS_TOTAL,
        "Failed forge API requests, by forge, host, endpoint class and error."
    );
    metrics::describe_gauge!(
        FORGE_RATE_LIMIT_REMAINING,
        "The rate-limit budget the forge last reported left, by forge and host."
    );
}

/// `describe` (`GET /projects/g%2Fn/merge_requests/7`) as an endpoint
/// class (`GET projects/*/merge_requests/*`): the method and the path's
/// fixed words, each run of other segments one `*`; a query is dropped.
pub fn endpoint_class(describe: &str) -> String {
    let (method, path) = describe.split_once(' ').unwrap_or(("", describe));
    let path = path.split(['?', ' ']).next().unwrap_or_default();
    let mut class = String::with_capacity(path.len().min(64) + method.len() + 1);
    class.push_str(method);
    class.push(' ');
    let mut first = true;
    let mut after_value = false;
    for segment in path.split('/').filter(|segment| !segment.is_empty()) {
        let word = PATH_WORDS.contains(&segment);
        if !word && after_value {
            continue;
        }
        if !first {
            class.push('/');
        }
        first = false;
        class.push_str(if word { segment } else { "*" });
        after_value = !word;
    }
    class
}

/// The status's class: `2xx`, `4xx`, ...
fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// The remaining budget an answer reports, if it reports one.
pub fn rate_limit_remaining(headers: &HeaderMap) -> Option<f64> {
    ["x-ratelimit-remaining", "ratelimit-remaining"]
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<f64>().ok())
}

/// Sends a request (`send`) and records it: the count, the time to the
/// answer's headers, an error by class, and the rate-limit budget left.
pub(crate) async fn observe(
    forge: &'static str,
    host: &str,
    describe: &str,
    send: impl Future<Output = Result<reqwest::Response, reqwest::Error>>,
) -> Result<reqwest::Response, reqwest::Error> {
    let endpoint = endpoint_class(describe);
    let started = Instant::now();
    let result = send.await;
    let labels = [
        ("forge", forge.to_owned()),
        ("host", host.to_owned()),
        ("endpoint", endpoint),
    ];
    metrics::histogram!(FORGE_REQUEST_DURATION_SECONDS, &labels)
        .record(started.elapsed().as_secs_f64());
    let (status, error) = match &result {
        Ok(response) => {
            let status = response.status();
            let remaining = rate_limit_remaining(response.headers());
            if let Some(remaining) = remaining {
                metrics::gauge!(FORGE_RATE_LIMIT_REMAINING, "forge" => forge, "host" => host.to_owned())
                    .set(remaining);
            }
            let error = match status.as_u16() {
                429 => Some("rate_limited"),
                403 if remaining == Some(0.0) => Some("rate_limited"),
                404 => Some("not_found"),
                400..=499 => Some("client"),
                500.. => Some("server"),
                _ => None,
            };
            (status_class(status), error)
        }
        Err(error) if error.is_timeout() => ("none", Some("timeout")),
        Err(_) => ("none", Some("transport")),
    };
    metrics::counter!(FORGE_REQUESTS_TOTAL, &with(&labels, "status", status)).increment(1);
    if let Some(error) = error {
        metrics::counter!(FORGE_REQUEST_ERRORS_TOTAL, &with(&labels, "error", error)).increment(1);
    }
    result
}

fn with(
    labels: &[(&'static str, String); 3],
    name: &'static str,
    value: &str,
) -> Vec<(&'static str, String)> {
    let mut all = labels.to_vec();
    all.push((name, value.to_owned()));
    all
}

/// The `host:port` label of a base URL.
pub(crate) fn host_label(url: &url::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_classes_keep_the_fixed_words_only() {
        for (describe, class) in [
            (
                "PUT /projects/team%2Fapp/merge_requests/7/merge",
                "PUT projects/*/merge_requests/*/merge",
            ),
            (
                "GET /repos/octo/app/git/ref/heads/wq/feature/x",
                "GET repos/*/git/ref/heads/*",
            ),
            (
                "DELETE /repos/o/r/issues/3/labels/needs%20review",
                "DELETE repos/*/issues/*/labels/*",
            ),
            ("POST /graphql", "POST graphql"),
            (
                "GET /repos/o/r/commits/0123abc/status",
                "GET repos/*/commits/*/status",
            ),
            ("GET /user", "GET user"),
            (
                "GET /projects/1/repository/compare?from=a&to=b",
                "GET projects/*/repository/compare",
            ),
        ] {
            assert_eq!(endpoint_class(describe), class, "{describe}");
        }
    }

    #[test]
    fn the_budget_comes_from_either_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(rate_limit_remaining(&headers), None);
        headers.insert("ratelimit-remaining", "1999".parse().unwrap());
        assert_eq!(rate_limit_remaining(&headers), Some(1999.0));
        headers.insert("x-ratelimit-remaining", "42".parse().unwrap());
        assert_eq!(rate_limit_remaining(&headers), Some(42.0));
    }
}
