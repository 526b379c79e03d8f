//! Fault injection (HTTP and webhook faults) and the request-log/fault middleware for the whole router.
//!
//! HTTP faults match on method and raw (still percent-encoded) path, by prefix or by a segment glob
//! (`*` one segment, `**` any rest), and fire a deterministic number of times after skipping a
//! number of matches. A rule with a `probability` fires on each match with that chance instead
//! (still at most `count` times), drawn from one seeded generator ([`Faults::seed`]): the same
//! seed and the same order of requests fire the same faults. Control routes (`/_sim/...`) are
//! never faulted nor logged.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
    /// A slow forge: wait this long (or until the hangs are cancelled),
    /// then run the real handler and answer as it does: what happens
    /// meanwhile is what the request sees.
    Delay { millis: u64 },
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
    /// Fire on each matching request (once `skip` is used up) with this chance, 0.0 to 1.0,
    /// instead of on every one; `count` still caps the fires. Always when absent.
    #[serde(default)]
    pub probability: Option<f64>,
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
            probability: None,
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

    /// Fires on each match with chance `probability` (see [`FaultRule::probability`]); combine
    /// with [`FaultRule::times`]`(u32::MAX)` for a rate that lasts.
    pub fn probability(mut self, probability: f64) -> FaultRule {
        self.probability = Some(probability);
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
    /// Sent `delay_ms` later while later deliveries go on: delivered out of order.
    Delay,
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
    /// Affect each matching delivery with this chance, 0.0 to 1.0 (still at most `count`);
    /// every one when absent.
    #[serde(default)]
    pub probability: Option<f64>,
    /// How long a `delay` holds a delivery back.
    #[serde(default = "default_delay_ms")]
    pub delay_ms: u64,
    #[serde(default)]
    pub fired: u32,
}

fn default_delay_ms() -> u64 {
    1000
}

impl WebhookFaultRule {
    pub fn new(kind: WebhookFaultKind, event: Option<&str>, count: u32) -> WebhookFaultRule {
        WebhookFaultRule {
            id: 0,
            kind,
            event: event.map(str::to_string),
            count,
            probability: None,
            delay_ms: default_delay_ms(),
            fired: 0,
        }
    }

    /// Affects each matching delivery with chance `probability`, without a count limit.
    pub fn probability(mut self, probability: f64) -> WebhookFaultRule {
        self.probability = Some(probability);
        self.count = u32::MAX;
        self
    }

    /// How long a [`WebhookFaultKind::Delay`] holds a delivery back.
    pub fn delay(mut self, delay: Duration) -> WebhookFaultRule {
        self.delay_ms = delay.as_millis() as u64;
        self
    }
}

/// A webhook fault that applies to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookFaultHit {
    pub rule: u64,
    pub kind: WebhookFaultKind,
    /// The rule is spent with this delivery.
    pub last: bool,
    /// For [`WebhookFaultKind::Delay`].
    pub delay: Duration,
}

/// Whether a rule with `probability` fires this time (always without one).
fn draw(rng: &mut StdRng, probability: Option<f64>) -> bool {
    match probability {
        None => true,
        Some(p) => rng.random_bool(p.clamp(0.0, 1.0)),
    }
}

/// All configured faults.
pub struct Faults {
    inner: Mutex<FaultRules>,
    /// Draws for rules with a `probability`.
    rng: Mutex<StdRng>,
    hang_cancel: tokio::sync::watch::Sender<u64>,
    /// How many requests hang in a `timeout` or `delay` fault right now.
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
            rng: Mutex::new(StdRng::seed_from_u64(0)),
            hang_cancel: tokio::sync::watch::Sender::new(0),
            hanging: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Faults {
    /// Restarts the generator that decides probabilistic rules (seed 0 at start).
    pub fn seed(&self, seed: u64) {
        *lock(&self.rng) = StdRng::seed_from_u64(seed);
    }

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

    /// Ends every request currently hanging in a `timeout` fault (they answer 504) or a `delay`
    /// fault (they are handled now).
    pub fn cancel_hangs(&self) {
        self.hang_cancel.send_modify(|generation| *generation += 1);
    }

    /// The fault to apply to this request, if any (consumes one use of the rule).
    pub fn take_http(&self, method: &str, path: &str) -> Option<FaultRule> {
        let mut inner = lock(&self.inner);
        let mut rng = lock(&self.rng);
        for rule in inner.http.iter_mut() {
            if rule.fired >= rule.count || !rule.matches(method, path) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if !draw(&mut rng, rule.probability) {
                continue;
            }
            rule.fired += 1;
            return Some(rule.clone());
        }
        None
    }

    /// The webhook fault to apply to a delivery of `event`, if any (consumes one use).
    pub fn take_webhook(&self, event: &str) -> Option<WebhookFaultHit> {
        let mut inner = lock(&self.inner);
        let mut rng = lock(&self.rng);
        for rule in inner.webhook.iter_mut() {
            if rule.fired >= rule.count {
                continue;
            }
            if let Some(wanted) = &rule.event
                && wanted != event
            {
                continue;
            }
            if !draw(&mut rng, rule.probability) {
                continue;
            }
            rule.fired += 1;
            return Some(WebhookFaultHit {
                rule: rule.id,
                kind: rule.kind,
                last: rule.fired >= rule.count,
                delay: Duration::from_millis(rule.delay_ms),
            });
        }
        None
    }

    /// A receiver of how many requests hang in a `timeout` or `delay` fault right now.
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
        HttpFault::Timeout { .. } | HttpFault::Delay { .. } => (
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
        HttpFault::Delay { millis } => format!("delay {millis}ms"),
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
    if let Some(FaultRule {
        fault: HttpFault::Delay { millis },
        ..
    }) = &rule
    {
        state.faults.hang(Duration::from_millis(*millis)).await;
    }
    let Some(rule) = rule
        .as_ref()
        .filter(|r| !matches!(r.fault, HttpFault::Delay { .. }))
    else {
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

    /// Which of 10,000 matching requests a rule of `probability` fires on, with `seed`.
    fn fires(seed: u64, probability: f64) -> Vec<usize> {
        let faults = Faults::default();
        faults.seed(seed);
        faults.add_http(
            FaultRule::new("GET", "/x", HttpFault::Status { status: 503 })
                .probability(probability)
                .times(u32::MAX),
        );
        (0..10_000)
            .filter(|_| faults.take_http("GET", "/x").is_some())
            .collect()
    }

    #[test]
    fn probabilistic_rules_fire_at_their_rate_and_replay_with_their_seed() {
        let faults = Faults::default();
        faults.seed(7);
        faults.add_http(
            FaultRule::new("GET", "/x", HttpFault::Status { status: 503 })
                .probability(0.05)
                .times(u32::MAX),
        );
        let fired: Vec<bool> = (0..10_000)
            .map(|_| faults.take_http("GET", "/x").is_some())
            .collect();
        let count = fired.iter().filter(|f| **f).count();
        assert!((350..650).contains(&count), "{count} of 10000 at 5%");
        // Another path never draws.
        assert!(faults.take_http("GET", "/y").is_none());

        let again = Faults::default();
        again.seed(7);
        again.add_http(
            FaultRule::new("GET", "/x", HttpFault::Status { status: 503 })
                .probability(0.05)
                .times(u32::MAX),
        );
        let replay: Vec<bool> = (0..10_000)
            .map(|_| again.take_http("GET", "/x").is_some())
            .collect();
        assert_eq!(fired, replay, "the same seed fires the same requests");
        assert_ne!(fires(1, 0.5), fires(2, 0.5), "another seed, other requests");
        assert!(fires(3, 0.0).is_empty());
        assert_eq!(fires(3, 1.0).len(), 10_000);
    }

    #[test]
    fn a_probabilistic_rule_keeps_its_count() {
        let faults = Faults::default();
        faults.add_http(
            FaultRule::new(
                "GET",
                "/x",
                HttpFault::RateLimit {
                    retry_after_secs: 2,
                },
            )
            .probability(0.5)
            .times(3),
        );
        let fired = (0..1_000)
            .filter(|_| faults.take_http("GET", "/x").is_some())
            .count();
        assert_eq!(fired, 3);
    }

    #[test]
    fn probabilistic_webhook_rules_pass_the_others_on() {
        let faults = Faults::default();
        faults.seed(11);
        faults
            .add_webhook(WebhookFaultRule::new(WebhookFaultKind::Drop, None, 1).probability(0.05));
        faults.add_webhook(
            WebhookFaultRule::new(WebhookFaultKind::Delay, None, 1)
                .probability(0.5)
                .delay(Duration::from_millis(250)),
        );
        let hits: Vec<Option<WebhookFaultHit>> = (0..10_000)
            .map(|_| faults.take_webhook("Merge Request Hook"))
            .collect();
        let dropped = hits
            .iter()
            .filter(|h| h.is_some_and(|h| h.kind == WebhookFaultKind::Drop))
            .count();
        let delayed: Vec<_> = hits
            .iter()
            .flatten()
            .filter(|h| h.kind == WebhookFaultKind::Delay)
            .collect();
        assert!((350..650).contains(&dropped), "{dropped} dropped at 5%");
        // Half of what was not dropped.
        assert!((4_400..5_100).contains(&delayed.len()), "{}", delayed.len());
        assert!(
            delayed
                .iter()
                .all(|h| h.delay == Duration::from_millis(250) && !h.last)
        );
    }
}
