//! Webhook delivery for both forges: a queue drained in order by one background task, honouring
//! webhook faults (drop, duplicate, hold-and-reorder, delay), with a delivery log for the control
//! API. A delayed delivery is queued again once its delay is over, behind what was sent meanwhile.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::{Notify, mpsc};

use crate::faults::WebhookFaultKind;
use crate::state::{Shared, lock};

/// Per-delivery HTTP timeout.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many delivery log entries are kept.
pub const DELIVERY_LOG_CAPACITY: usize = 20_000;

/// One queued webhook.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub id: u64,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
    /// The event header value (`X-Gitlab-Event` or `X-GitHub-Event`), "" when absent.
    pub event: String,
}

/// What happened to a webhook.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    pub id: u64,
    pub url: String,
    pub event: String,
    /// `delivered`, `failed`, `dropped`, `held`, `delayed` (then one of the others).
    pub outcome: String,
    /// The receiver's HTTP status when it answered.
    pub status: Option<u16>,
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

/// Queues webhooks for the background delivery task.
pub struct WebhookDispatcher {
    next_id: AtomicU64,
    sender: mpsc::UnboundedSender<Webhook>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Webhook>>>,
    /// Queued + in flight + held.
    pending: AtomicU64,
    idle: Notify,
    held: Mutex<Vec<Webhook>>,
    log: Mutex<VecDeque<Delivery>>,
}

impl Default for WebhookDispatcher {
    fn default() -> Self {
        WebhookDispatcher::new()
    }
}

impl WebhookDispatcher {
    pub fn new() -> WebhookDispatcher {
        let (sender, receiver) = mpsc::unbounded_channel();
        WebhookDispatcher {
            next_id: AtomicU64::new(1),
            sender,
            receiver: Mutex::new(Some(receiver)),
            pending: AtomicU64::new(0),
            idle: Notify::new(),
            held: Mutex::new(Vec::new()),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// Queues a webhook POST; delivered in order by the background task.
    pub fn send(&self, url: String, headers: Vec<(String, String)>, body: serde_json::Value) {
        let event = headers
            .iter()
            .find(|(name, _)| {
                name.eq_ignore_ascii_case("x-gitlab-event")
                    || name.eq_ignore_ascii_case("x-github-event")
            })
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        let webhook = Webhook {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            url,
            headers,
            body,
            event,
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.sender.send(webhook).is_err() {
            self.finish_one();
        }
    }

    /// Webhooks not yet delivered, dropped or failed (held ones included).
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::SeqCst)
    }

    /// Waits until nothing is queued or in flight (held webhooks excepted), at most `timeout`.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.idle.notified();
            let held = lock(&self.held).len() as u64;
            if self.pending() <= held {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.pending() <= lock(&self.held).len() as u64;
            }
        }
    }

    /// The delivery log, oldest first.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.log).iter().cloned().collect()
    }

    pub fn clear_log(&self) {
        lock(&self.log).clear();
    }

    /// Sends every held webhook now, newest first (i.e. reordered).
    pub fn release_held(&self) -> usize {
        let mut held = std::mem::take(&mut *lock(&self.held));
        held.reverse();
        let count = held.len();
        for webhook in held {
            // Pending was counted when first sent; re-queue without counting again.
            if self.sender.send(webhook).is_err() {
                self.finish_one();
            }
        }
        count
    }

    fn finish_one(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.idle.notify_waiters();
    }

    fn record(
        &self,
        webhook: &Webhook,
        outcome: &str,
        status: Option<u16>,
        error: Option<String>,
        at: OffsetDateTime,
    ) {
        let mut log = lock(&self.log);
        if log.len() >= DELIVERY_LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(Delivery {
            id: webhook.id,
            url: webhook.url.clone(),
            event: webhook.event.clone(),
            outcome: outcome.to_string(),
            status,
            error,
            at,
            headers: webhook.headers.clone(),
            body: webhook.body.clone(),
        });
    }

    /// Starts the background delivery task (once; later calls do nothing).
    pub fn start(state: Shared) {
        let Some(mut receiver) = lock(&state.webhooks.receiver).take() else {
            return;
        };
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(DELIVERY_TIMEOUT)
                .build()
                .unwrap_or_default();
            let mut released: std::collections::HashSet<u64> = std::collections::HashSet::new();
            while let Some(webhook) = receiver.recv().await {
                let dispatcher = &state.webhooks;
                let now = state.clock.now();
                let fault = if released.remove(&webhook.id) {
                    None
                } else {
                    state.faults.take_webhook(&webhook.event)
                };
                match fault.map(|hit| (hit.kind, hit)) {
                    Some((WebhookFaultKind::Drop, _)) => {
                        dispatcher.record(&webhook, "dropped", None, None, now);
                        dispatcher.finish_one();
                    }
                    Some((WebhookFaultKind::Hold, hit)) => {
                        dispatcher.record(&webhook, "held", None, None, now);
                        released.insert(webhook.id);
                        lock(&dispatcher.held).push(webhook);
                        if hit.last {
                            dispatcher.release_held();
                        }
                    }
                    Some((WebhookFaultKind::Delay, hit)) => {
                        dispatcher.record(&webhook, "delayed", None, None, now);
                        released.insert(webhook.id);
                        // Still pending: a flush waits for it.
                        let later = state.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(hit.delay).await;
                            if later.webhooks.sender.send(webhook).is_err() {
                                later.webhooks.finish_one();
                            }
                        });
                    }
                    Some((WebhookFaultKind::Duplicate, _)) => {
                        deliver(&client, &state, &webhook).await;
                        deliver(&client, &state, &webhook).await;
                        dispatcher.finish_one();
                    }
                    None => {
                        deliver(&client, &state, &webhook).await;
                        dispatcher.finish_one();
                    }
                }
            }
        });
    }
}

async fn deliver(client: &reqwest::Client, state: &Shared, webhook: &Webhook) {
    let mut request = client.post(&webhook.url).json(&webhook.body);
    for (name, value) in &webhook.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let result = request.send().await;
    let now = state.clock.now();
    match result {
        Ok(response) => {
            let status = response.status().as_u16();
            let outcome = if response.status().is_success() {
                "delivered"
            } else {
                "failed"
            };
            state
                .webhooks
                .record(webhook, outcome, Some(status), None, now);
        }
        Err(error) => {
            tracing::debug!(webhook_id = webhook.id, url = %webhook.url, %error, "webhook delivery failed");
            state
                .webhooks
                .record(webhook, "failed", None, Some(error.to_string()), now);
        }
    }
}
