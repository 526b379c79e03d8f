//! Fault injection (HTTP and webhook faults) and the request-log/fault middleware for the whole router.
//!
//! HTTP faults match on method and raw (still percent-encoded) path, by prefix or by a segment glob
//! (`*` one segment, `**` any rest), and fire a deterministic number of times after skipping a
//! number of matches. Control routes (`/_sim/...`) are never faulted nor logged.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::state::{RequestLogEntry, Shared, lock};

/// How long a `timeout` fault hangs by default: longer than any client timeout in tests.
pub const DEFAULT_HANG_SECS: u64 = 3600;

/// What an HTTP fault does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HttpFault {
    /// Answer with this status (500, 502, 503...) and a GitLab-like JSON message.
    Status { status: u16 },
    /// 429 with `Retry-After` and `RateLimit-*` headers.
    RateLimit {
        #[serde(default = "default_retry_after")]
        retry_after_secs: u64,
    },
    /// Hang (cancellable) until the client gives up; 504 if it ever ends.
    Timeout {
        #[serde(default = "default_hang")]
        hang_secs: u64,
    },
}

fn default_retry_after() -> u64 {
    1
}

fn default_hang() -> u64 {
    DEFAULT_HANG_SECS
}

/// One HTTP fault rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRule {
    /// Assigned when added.
    #[serde(default)]
    pub id: u64,
    /// HTTP method (case-insensitive); any when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// Matches paths starting with this (raw, percent-encoded form).
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Matches whole paths segment by segment: `*` = one segment, `**` = the rest.
    #[serde(default)]
    pub path_pattern: Option<String>,
    #[serde(flatten)]
    pub fault: HttpFault,
    /// How many matching requests get the fault (then the rule is spent).
    #[serde(default = "default_count")]
    pub count: u32,
    /// Matching requests to let through before the fault starts firing.
    #[serde(default)]
    pub skip: u32,
    /// Run the real handler first (the change happens) and then replace the response.
    #[serde(default)]
    pub after_handler: bool,
    /// How many times it fired so far.
    #[serde(default)]
    pub fired: u32,
}

fn default_count() -> u32 {
    1
}

impl FaultRule {
    /// A rule firing `fault` once for `method` requests whose path starts with `path_prefix`.
    pub fn new(method: &str, path_prefix: &str, fault: HttpFault) -> FaultRule {
        FaultRule {
            id: 0,
            method: Some(method.to_string()),
            path_prefix: Some(path_prefix.to_string()),
            path_pattern: None,
            fault,
            count: 1,
            skip: 0,
            after_handler: false,
            fired: 0,
        }
    }

    /// Same as [`FaultRule::new`] with a segment glob instead of a prefix.
    pub fn pattern(method: &str, pattern: &str, fault: HttpFault) -> FaultRule {
        FaultRule {
            path_prefix: None,
            path_pattern: Some(pattern.to_string()),
            ..FaultRule::new(method, "", fault)
        }
    }

    pub fn times(mut self, count: u32) -> FaultRule {
        self.count = count;
        self
    }

    pub fn skip(mut self, skip: u32) -> FaultRule {
        self.skip = skip;
        self
    }

    pub fn after_handler(mut self) -> FaultRule {
        self.after_handler = true;
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        if let Some(m) = &self.method
            && !m.eq_ignore_ascii_case(method)
        {
            return false;
        }
        if let Some(prefix) = &self.path_prefix
            && !path.starts_with(prefix.as_str())
        {
            return false;
        }
        if let Some(pattern) = &self.path_pattern
            && !glob_match(pattern, path)
        {
            return false;
        }
        true
    }
}

/// Segment glob: `*` matches one segment, `**` matches one or more
/// remaining segments (anything after `**` in the pattern is ignored).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let path: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut i = 0;
    for part in &pattern {
        if *part == "**" {
            return i < path.len();
        }
        match path.get(i) {
            Some(segment) if *part == "*" || part == segment => i += 1,
            _ => return false,
        }
    }
    i == path.len()
}

/// What a webhook fault does to matching deliveries.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFaultKind {
    /// Never delivered (recorded as dropped).
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Held back; once `count` deliveries are held (or on release) they go out in reverse order.
    Hold,
}

/// One webhook fault rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookFaultRule {
    #[serde(default)]
    pub id: u64,
    pub kind: WebhookFaultKind,
    /// Only events with this `X-Gitlab-Event` / `X-GitHub-Event` value; any when absent.
    #[serde(default)]
    pub event: Option<String>,
    /// How many matching deliveries are affected.
    #[serde(default = "default_count")]
    pub count: u32,
    #[serde(default)]
    pub fired: u32,
}

impl WebhookFaultRule {
    pub fn new(kind: WebhookFaultKind, event: Option<&str>, count: u32) -> WebhookFaultRule {
        WebhookFaultRule {
            id: 0,
            kind,
            event: event.map(str::to_string),
            count,
            fired: 0,
        }
    }
}

/// All configured faults.
pub struct Faults {
    inner: Mutex<FaultRules>,
    hang_cancel: tokio::sync::watch::Sender<u64>,
    /// How many requests hang in a `timeout` fault right now.
    hanging: tokio::sync::watch::Sender<usize>,
}

#[derive(Default)]
struct FaultRules {
    next_id: u64,
    http: Vec<FaultRule>,
    webhook: Vec<WebhookFaultRule>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            inner: Mutex::new(FaultRules::default()),
            hang_cancel: tokio::sync::watch::Sender::new(0),
            hanging: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Faults {
    /// Adds an HTTP fault rule and returns its id.
    pub fn add_http(&self, mut rule: FaultRule) -> u64 {
        let mut inner = lock(&self.inner);
        inner.next_id += 1;
        rule.id = inner.next_id;
        rule.fired = 0;
        inner.http.push(rule);
        inner.next_id
    }

    /// Adds a webhook fault rule and returns its id.
    pub fn add_webhook(&self, mut rule: WebhookFaultRule) -> u64 {
        let mut inner = lock(&self.inner);
        inner.next_id += 1;
        rule.id = inner.next_id;
        rule.fired = 0;
        inner.webhook.push(rule);
        inner.next_id
    }

    /// Current rules (spent ones included, with their `fired` counts).
    pub fn list(&self) -> (Vec<FaultRule>, Vec<WebhookFaultRule>) {
        let inner = lock(&self.inner);
        (inner.http.clone(), inner.webhook.clone())
    }

    /// Removes every rule and releases every hanging request.
    pub fn clear(&self) {
        let mut inner = lock(&self.inner);
        inner.http.clear();
        inner.webhook.clear();
        drop(inner);
        self.cancel_hangs();
    }

    /// Ends every request currently hanging in a `timeout` fault (they answer 504).
    pub fn cancel_hangs(&self) {
        self.hang_cancel.send_modify(|generation| *generation += 1);
    }

    /// The fault to apply to this request, if any (consumes one use of the rule).
    pub fn take_http(&self, method: &str, path: &str) -> Option<FaultRule> {
        let mut inner = lock(&self.inner);
        for rule in inner.http.iter_mut() {
            if rule.fired >= rule.count || !rule.matches(method, path) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            rule.fired += 1;
            return Some(rule.clone());
        }
        None
    }

    /// The webhook fault to apply to a delivery of `event`, if any (consumes one use).
    pub fn take_webhook(&self, event: &str) -> Option<(u64, WebhookFaultKind, bool)> {
        let mut inner = lock(&self.inner);
        for rule in inner.webhook.iter_mut() {
            if rule.fired >= rule.count {
                continue;
            }
            if let Some(wanted) = &rule.event
                && wanted != event
            {
                continue;
            }
            rule.fired += 1;
            let last = rule.fired >= rule.count;
            return Some((rule.id, rule.kind, last));
        }
        None
    }

    /// A receiver of how many requests hang in a `timeout` fault right now.
    pub fn subscribe_hanging(&self) -> tokio::sync::watch::Receiver<usize> {
        self.hanging.subscribe()
    }

    async fn hang(&self, duration: Duration) {
        let mut cancel = self.hang_cancel.subscribe();
        // Counted once the cancel subscription exists: whoever sees the request hanging and then
        // cancels the hangs is sure to release it.
        let _hanging = HangingRequest::enter(&self.hanging);
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = cancel.changed() => {}
        }
    }
}

/// One request counted as hanging until it is released or its client gives up (the request's
/// future is then dropped, and this with it).
struct HangingRequest<'a> {
    hanging: &'a tokio::sync::watch::Sender<usize>,
}

impl<'a> HangingRequest<'a> {
    fn enter(hanging: &'a tokio::sync::watch::Sender<usize>) -> HangingRequest<'a> {
        hanging.send_modify(|count| *count += 1);
        HangingRequest { hanging }
    }
}

impl Drop for HangingRequest<'_> {
    fn drop(&mut self) {
        self.hanging.send_modify(|count| *count -= 1);
    }
}

fn fault_response(state: &Shared, fault: &HttpFault) -> Response {
    match fault {
        HttpFault::Status { status } => {
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = format!(
                "{} {}",
                code.as_u16(),
                code.canonical_reason().unwrap_or("Error")
            );
            (code, axum::Json(serde_json::json!({ "message": message }))).into_response()
        }
        HttpFault::RateLimit { retry_after_secs } => {
            let reset = state.clock.now().unix_timestamp() + *retry_after_secs as i64;
            let mut response = (StatusCode::TOO_MANY_REQUESTS, "Retry later\n").into_response();
            let headers = response.headers_mut();
            let mut set = |name: &'static str, value: String| {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            };
            set("retry-after", retry_after_secs.to_string());
            set("ratelimit-limit", "600".to_string());
            set("ratelimit-observed", "601".to_string());
            set("ratelimit-remaining", "0".to_string());
            set("ratelimit-reset", reset.to_string());
            set("ratelimit-name", "throttle_authenticated_api".to_string());
            response
        }
        HttpFault::Timeout { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            axum::Json(serde_json::json!({ "message": "504 Gateway Timeout" })),
        )
            .into_response(),
    }
}

fn fault_label(fault: &HttpFault) -> String {
    match fault {
        HttpFault::Status { status } => format!("status {status}"),
        HttpFault::RateLimit { retry_after_secs } => format!("rate_limit {retry_after_secs}s"),
        HttpFault::Timeout { hang_secs } => format!("timeout {hang_secs}s"),
    }
}

/// Middleware for the whole router: progresses sim work, applies faults, records the request log.
pub async fn middleware(
    State(state): State<Shared>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let method = request.method().as_str().to_string();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    // Any method but GET and HEAD may change state; those requests count as a change once
    // handled (see `SimState::changed`).
    let may_change = !matches!(request.method(), &Method::GET | &Method::HEAD);
    if path.starts_with("/_sim") {
        let response = next.run(request).await;
        if may_change {
            state.changed();
        }
        return response;
    }
    let started = Instant::now();
    let time = state.clock.now();
    state.tick();
    let rule = state.faults.take_http(&method, &path);
    let entry = |status: u16| RequestLogEntry {
        seq: 0,
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        status,
        time,
        fault: rule.as_ref().map(|r| fault_label(&r.fault)),
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let Some(rule) = &rule else {
        let response = next.run(request).await;
        state.log.record(entry(response.status().as_u16()));
        if may_change {
            state.changed();
        }
        return response;
    };
    if rule.after_handler {
        let _discarded = next.run(request).await;
        if may_change {
            state.changed();
        }
    }
    let response = fault_response(&state, &rule.fault);
    if let HttpFault::Timeout { hang_secs } = rule.fault {
        // Logged before hanging: the client usually gives up and the future is dropped.
        state.log.record(entry(response.status().as_u16()));
        state.faults.hang(Duration::from_secs(hang_secs)).await;
        return response;
    }
    state.log.record(entry(response.status().as_u16()));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_segments() {
        assert!(glob_match(
            "/api/v4/projects/*/merge_requests/*/merge",
            "/api/v4/projects/1/merge_requests/2/merge"
        ));
        assert!(!glob_match(
            "/api/v4/projects/*/merge_requests/*/merge",
            "/api/v4/projects/1/merge_requests/2"
        ));
        assert!(glob_match(
            "/api/v4/projects/**",
            "/api/v4/projects/1/jobs/3/trace"
        ));
        assert!(!glob_match("/api/v4/projects/**", "/api/v4/projects"));
    }

    #[test]
    fn rules_fire_after_skip_for_count() {
        let faults = Faults::default();
        faults.add_http(
            FaultRule::new("GET", "/api/v4/x", HttpFault::Status { status: 500 })
                .times(2)
                .skip(1),
        );
        assert!(faults.take_http("GET", "/api/v4/x/1").is_none());
        assert!(faults.take_http("POST", "/api/v4/x/1").is_none());
        assert!(faults.take_http("GET", "/api/v4/x/1").is_some());
        assert!(faults.take_http("get", "/api/v4/x/2").is_some());
        assert!(faults.take_http("GET", "/api/v4/x/3").is_none());
    }
}
