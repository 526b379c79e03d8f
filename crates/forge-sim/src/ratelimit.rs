//! Primary rate limits per token, as both forges report and enforce them; off until
//! [`crate::SimHandle::set_rate_limit`] configures a limit.
//!
//! With a limit of `limit` requests per `window` of sim time, each token has a budget per
//! forge, and on GitHub per resource (`core` for REST, `graphql` for `POST /graphql`), that
//! the first counted request opens and that renews `window` later. Every answer reports it:
//!
//! - **GitHub**: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Used`,
//!   `X-RateLimit-Reset` (Unix seconds) and `X-RateLimit-Resource`. A `304 Not Modified`
//!   answer to an authorized request is not counted. Once the budget is spent, `403
//!   Forbidden` with `X-RateLimit-Remaining: 0` and "API rate limit exceeded".
//! - **GitLab**: `RateLimit-Limit`, `RateLimit-Observed`, `RateLimit-Remaining`,
//!   `RateLimit-Reset` (Unix seconds) and `RateLimit-ResetTime` (an HTTP date); every
//!   request counts. Once spent, `429 Too Many Requests` with `Retry-After` and the body
//!   `Retry later`.
//!
//! Requests without a credential are neither counted nor refused here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

use crate::state::{Shared, lock};

/// A budget: (forge, credential, resource).
type Key = (&'static str, String, &'static str);

/// The configured limit and the budgets in use.
#[derive(Default)]
pub struct RateLimits {
    limit: Mutex<Option<(u64, Duration)>>,
    /// Each budget's window start and the requests counted in it.
    used: Mutex<HashMap<Key, (OffsetDateTime, u64)>>,
}

impl RateLimits {
    /// Sets (or with `None` removes) the limit; budgets start afresh.
    pub fn set(&self, limit: Option<(u64, Duration)>) {
        *lock(&self.limit) = limit;
        lock(&self.used).clear();
    }
}

/// Which budget a request draws on: the forge and, on GitHub, the resource.
fn bucket(path: &str) -> (&'static str, &'static str) {
    if path == "/api/v4" || path.starts_with("/api/v4/") {
        ("gitlab", "core")
    } else if path == "/graphql" {
        ("github", "graphql")
    } else {
        ("github", "core")
    }
}

/// The credential of a request (GitLab's `PRIVATE-TOKEN` or any `Authorization`).
fn credential(headers: &HeaderMap) -> Option<String> {
    let value = headers
        .get("private-token")
        .or_else(|| headers.get(header::AUTHORIZATION))?
        .to_str()
        .ok()?;
    let token = value.split_whitespace().last()?;
    Some(token.to_string())
}

/// What one answer reports of its budget.
struct Report {
    forge: &'static str,
    resource: &'static str,
    limit: u64,
    used: u64,
    reset: OffsetDateTime,
}

impl Report {
    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    fn apply(&self, headers: &mut HeaderMap) {
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        let reset = self.reset.unix_timestamp().to_string();
        if self.forge == "github" {
            set("x-ratelimit-limit", self.limit.to_string());
            set("x-ratelimit-remaining", self.remaining().to_string());
            set("x-ratelimit-used", self.used.min(self.limit).to_string());
            set("x-ratelimit-reset", reset);
            set("x-ratelimit-resource", self.resource.to_string());
        } else {
            set("ratelimit-limit", self.limit.to_string());
            set("ratelimit-observed", self.used.to_string());
            set("ratelimit-remaining", self.remaining().to_string());
            set("ratelimit-reset", reset);
            if let Ok(date) = self.reset.format(&Rfc2822) {
                set("ratelimit-resettime", date);
            }
        }
    }
}

/// The middleware: refuses a request once its budget is spent, counts the others (not
/// GitHub's 304s) and reports the budget on every answer. Control routes are left alone.
pub async fn middleware(
    State(state): State<Shared>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    let Some((limit, window)) = *lock(&state.rate_limits.limit) else {
        return next.run(request).await;
    };
    let Some(token) = credential(request.headers()).filter(|_| !path.starts_with("/_sim")) else {
        return next.run(request).await;
    };
    let (forge, resource) = bucket(&path);
    let key = (forge, token, resource);
    let now = state.clock.now();
    // Counted before the handler runs, so concurrent requests cannot overdraw it.
    let (start, used) = {
        let mut budgets = lock(&state.rate_limits.used);
        let entry = budgets.entry(key.clone()).or_insert((now, 0));
        if now >= entry.0 + window {
            *entry = (now, 0);
        }
        if entry.1 < limit {
            entry.1 += 1;
            (entry.0, entry.1)
        } else {
            (entry.0, limit + 1)
        }
    };
    let reset = start + window;
    if used > limit {
        let report = Report {
            forge,
            resource,
            limit,
            used: limit,
            reset,
        };
        let user = state.user_for_token(&key.1).map_or(0, |u| u.id);
        let mut response = if forge == "github" {
            (
                StatusCode::FORBIDDEN,
                axum::Json(serde_json::json!({
                    "message": format!("API rate limit exceeded for user ID {user}."),
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                })),
            )
                .into_response()
        } else {
            let mut response = (StatusCode::TOO_MANY_REQUESTS, "Retry later\n").into_response();
            let wait = (reset - now).whole_seconds().max(1);
            if let Ok(value) = HeaderValue::from_str(&wait.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        };
        report.apply(response.headers_mut());
        return response;
    }
    let mut response = next.run(request).await;
    let mut used = used;
    if forge == "github" && response.status() == StatusCode::NOT_MODIFIED {
        // GitHub does not count an authorized request answered 304.
        let mut budgets = lock(&state.rate_limits.used);
        if let Some(entry) = budgets.get_mut(&key).filter(|entry| entry.0 == start) {
            entry.1 = entry.1.saturating_sub(1);
            used = entry.1;
        }
    }
    Report {
        forge,
        resource,
        limit,
        used,
        reset,
    }
    .apply(response.headers_mut());
    response
}
