//! Forge deliveries through a queue (DDR-29, DDR-31, DDR-36): a replica
//! long-polls an SQS queue that an SNS topic (or a relay) fills with the
//! forges' webhook deliveries, and stores each exactly as
//! `POST /webhooks/{source}` does: through the source's
//! [`WebhookReceiver`], which authenticates it, resolves the item and
//! stores a pending event. The item's own loop interprets it.
//!
//! - **Which source.** The receiver that [recognizes](WebhookReceiver::recognizes)
//!   the delivery's headers (its event header) takes it.
//! - **Authentication.** As a webhook's: the token or signature header
//!   travels as a message attribute ([`QueueTrust::Signature`]), or, by
//!   explicit configuration, the queue's access policy is trusted instead
//!   ([`QueueTrust::QueuePolicy`]).
//! - **Delete after store (DDR-31).** A message is deleted only once its
//!   event is committed (or the receiver read it and deliberately ignored
//!   it: no active item, an event it does not track). A crash between the
//!   store and the delete redelivers it; the event is stored again, which
//!   the item's handling takes as the hint it is.
//! - **Refusals go to the dead-letter queue.** A message no receiver
//!   recognizes, that fails authentication or cannot be parsed is never
//!   stored, is counted (`workqueue_queue_messages_total{outcome}`) and is
//!   left in the queue: its redrive policy moves it to the dead-letter
//!   queue after `maxReceiveCount` receives. Nothing is silently deleted.
//! - **Slow batches.** While a batch is being stored its messages'
//!   visibility is extended every half timeout.
//! - **Shutdown (DDR-36).** [`IntakeHandle::shutdown`] stops polling, lets
//!   the message in hand finish, releases the rest of the batch (visibility
//!   0, so another replica takes them at once) and returns; the caller then
//!   stops the engine.

pub mod config;
pub mod envelope;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageSystemAttributeName,
};
use tokio::sync::watch;
use wq_core::{Clock, DeliveryTrust, ItemId, WebhookError, WebhookReceiver};

pub use aws_sdk_sqs::Client as SqsClient;
pub use config::{QueueTrust, SqsConfig};
pub use envelope::{QueuedDelivery, unwrap};

/// Queued messages handled, by `outcome`: `stored`, `ignored` (read and
/// deliberately dropped: deleted), `unrecognized`, `unauthenticated`,
/// `malformed` (left for the dead-letter queue), `unavailable` (the store
/// failed: left to be received again).
pub const QUEUE_MESSAGES_TOTAL: &str = "workqueue_queue_messages_total";
/// Failed receive, delete or visibility calls to the queue, by `call`.
pub const QUEUE_ERRORS_TOTAL: &str = "workqueue_queue_errors_total";

/// Wakes the engine for an item that has a new event.
pub type Wake = Arc<dyn Fn(ItemId) + Send + Sync>;

/// What happened to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its event is stored for these items: deleted.
    Stored(Vec<ItemId>),
    /// Read and deliberately dropped (why): deleted.
    Ignored(String),
    /// Never stored, left for the queue's redrive policy (why).
    Refused(Refusal, String),
    /// The store failed: left to be received again.
    Unavailable(String),
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unrecognized,
    Unauthenticated,
    Malformed,
}

impl Outcome {
    /// The `outcome` label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Stored(_) => "stored",
            Self::Ignored(_) => "ignored",
            Self::Refused(Refusal::Unrecognized, _) => "unrecognized",
            Self::Refused(Refusal::Unauthenticated, _) => "unauthenticated",
            Self::Refused(Refusal::Malformed, _) => "malformed",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// Whether the message is deleted from the queue.
    pub fn deletes(&self) -> bool {
        matches!(self, Self::Stored(_) | Self::Ignored(_))
    }
}

/// Counts of handled messages, for tests and logs.
#[derive(Debug, Default)]
pub struct IntakeStats {
    pub received: AtomicU64,
    pub stored: AtomicU64,
    pub ignored: AtomicU64,
    pub refused: AtomicU64,
    pub unavailable: AtomicU64,
    pub deleted: AtomicU64,
}

impl IntakeStats {
    fn count(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Stored(_) => &self.stored,
            Outcome::Ignored(_) => &self.ignored,
            Outcome::Refused(..) => &self.refused,
            Outcome::Unavailable(_) => &self.unavailable,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a test may do at the consumer's fault points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End the consumer at once, as a killed process would: nothing more is
    /// deleted or released.
    Crash,
}

/// Fault points for tests; the default does nothing.
#[async_trait]
pub trait IntakeHooks: Send + Sync {
    /// Before a message of a batch is handled (`index` in the batch).
    async fn before_message(&self, index: usize) {
        let _ = index;
    }

    /// After a batch is stored, before its messages are deleted.
    async fn before_delete(&self, stored: usize) -> Flow {
        let _ = stored;
        Flow::Continue
    }
}

struct NoHooks;

impl IntakeHooks for NoHooks {}

/// Builds the SQS client for `config`: region and credentials the standard
/// AWS way (environment, profile, web identity, instance role), the
/// configured region and endpoint over them.
pub async fn client(config: &SqsConfig) -> aws_sdk_sqs::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = &config.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(endpoint) = &config.endpoint {
        loader = loader.endpoint_url(endpoint.clone());
    }
    aws_sdk_sqs::Client::new(&loader.load().await)
}

/// The consumer of one queue, not started yet.
pub struct SqsIntake {
    client: aws_sdk_sqs::Client,
    config: SqsConfig,
    receivers: Vec<Arc<dyn WebhookReceiver>>,
    wake: Wake,
    clock: Arc<dyn Clock>,
    hooks: Arc<dyn IntakeHooks>,
    stats: Arc<IntakeStats>,
}

impl SqsIntake {
    /// A consumer of `config`'s queue through `client`, handing deliveries
    /// to `receivers` and waking the engine with `wake`.
    pub fn new(
        client: aws_sdk_sqs::Client,
        config: SqsConfig,
        receivers: Vec<Arc<dyn WebhookReceiver>>,
        wake: Wake,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            client,
            config,
            receivers,
            wake,
            clock,
            hooks: Arc::new(NoHooks),
            stats: Arc::new(IntakeStats::default()),
        }
    }

    /// Fault points for tests.
    pub fn with_hooks(mut self, hooks: Arc<dyn IntakeHooks>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The counts of what it handled (shared with the running consumer).
    pub fn stats(&self) -> Arc<IntakeStats> {
        Arc::clone(&self.stats)
    }

    /// Starts polling on the runtime.
    pub fn start(self) -> IntakeHandle {
        let (stop, stopping) = watch::channel(false);
        let stats = self.stats();
        metrics::describe_counter!(
            QUEUE_MESSAGES_TOTAL,
            "Queued forge deliveries handled, by outcome."
        );
        metrics::describe_counter!(
            QUEUE_ERRORS_TOTAL,
            "Failed calls to the queue, by call (receive, delete, visibility)."
        );
        tracing::info!(queue = %self.config.queue_url, trust = ?self.config.trust, "queue intake started");
        let task = tokio::spawn(self.run(stopping));
        IntakeHandle { stop, task, stats }
    }

    async fn run(self, mut stopping: watch::Receiver<bool>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            if *stopping.borrow() {
                return;
            }
            let received = tokio::select! {
                received = self.receive() => received,
                _ = stopping.changed() => return,
            };
            match received {
                Ok(messages) => {
                    backoff = Duration::from_secs(1);
                    if messages.is_empty() {
                        continue;
                    }
                    if self.handle_batch(messages, &stopping).await == Flow::Crash {
                        return;
                    }
                }
                Err(error) => {
                    metrics::counter!(QUEUE_ERRORS_TOTAL, "call" => "receive").increment(1);
                    tracing::warn!(queue = %self.config.queue_url, %error, "receiving from the queue failed; trying again in {backoff:?}");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = stopping.changed() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    async fn receive(&self) -> Result<Vec<Message>, String> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.config.queue_url)
            .max_number_of_messages(self.config.max_messages)
            .wait_time_seconds(seconds(self.config.wait_seconds))
            .visibility_timeout(seconds(self.config.visibility_timeout_seconds))
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|error| error_text(&error))?;
        Ok(output.messages.unwrap_or_default())
    }

    /// Stores each message of a batch, then deletes those stored or
    /// ignored. Visibility is extended meanwhile; on shutdown the messages
    /// not yet in hand are released.
    async fn handle_batch(&self, messages: Vec<Message>, stopping: &watch::Receiver<bool>) -> Flow {
        self.stats
            .received
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        let pending: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::new(
            std::sync::Mutex::new(messages.iter().filter_map(handle_of).collect()),
        );
        let keeper = tokio::spawn(keep_hidden(
            self.client.clone(),
            self.config.queue_url.clone(),
            self.config.visibility_timeout(),
            Arc::clone(&pending),
        ));
        let mut done = Vec::new();
        let mut released = Vec::new();
        for (index, message) in messages.into_iter().enumerate() {
            let Some(handle) = handle_of(&message) else {
                continue;
            };
            if *stopping.borrow() {
                released.push(handle);
                continue;
            }
            self.hooks.before_message(index).await;
            let outcome = self.handle(&message).await;
            self.stats.count(&outcome);
            metrics::counter!(QUEUE_MESSAGES_TOTAL, "queue" => "sqs", "outcome" => outcome.label())
                .increment(1);
            lock(&pending).retain(|(id, _)| *id != handle.0);
            match &outcome {
                Outcome::Stored(items) => {
                    for id in items {
                        (self.wake)(*id);
                    }
                    done.push(handle);
                }
                Outcome::Ignored(reason) => {
                    tracing::info!(message_id = %message.message_id().unwrap_or_default(), %reason, "queued delivery ignored");
                    done.push(handle);
                }
                Outcome::Refused(_, reason) => {
                    tracing::warn!(
                        message_id = %message.message_id().unwrap_or_default(),
                        receive_count = %receive_count(&message),
                        outcome = outcome.label(),
                        %reason,
                        "queued delivery refused; left for the queue's dead-letter policy"
                    );
                }
                Outcome::Unavailable(reason) => {
                    tracing::error!(message_id = %message.message_id().unwrap_or_default(), %reason, "queued delivery not stored; it will be received again");
                }
            }
        }
        keeper.abort();
        if self.hooks.before_delete(done.len()).await == Flow::Crash {
            return Flow::Crash;
        }
        self.delete(&done).await;
        if !released.is_empty() {
            self.set_visibility(&released, 0).await;
        }
        Flow::Continue
    }

    /// Unwraps one message and hands it to the receiver of its source.
    pub async fn handle(&self, message: &Message) -> Outcome {
        let attributes = message
            .message_attributes()
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                value
                    .string_value()
                    .map(|value| (name.clone(), value.to_owned()))
            });
        let delivery = unwrap(message.body().unwrap_or_default(), attributes);
        self.deliver(&delivery).await
    }

    /// Hands a delivery to the receiver of its source.
    pub async fn deliver(&self, delivery: &QueuedDelivery) -> Outcome {
        let Some(receiver) = self
            .receivers
            .iter()
            .find(|receiver| receiver.recognizes(&delivery.headers))
        else {
            return Outcome::Refused(
                Refusal::Unrecognized,
                "no webhook source recognizes its headers".to_owned(),
            );
        };
        let trust = match self.config.trust {
            QueueTrust::Signature => DeliveryTrust::Verify,
            QueueTrust::QueuePolicy => DeliveryTrust::Channel,
        };
        match receiver
            .receive(&delivery.headers, &delivery.body, trust, self.clock.now())
            .await
        {
            Ok(receipt) if receipt.items.is_empty() => Outcome::Ignored(
                receipt
                    .ignored
                    .unwrap_or_else(|| "nothing to store".to_owned()),
            ),
            Ok(receipt) => Outcome::Stored(receipt.items),
            Err(WebhookError::Unauthenticated(reason)) => {
                Outcome::Refused(Refusal::Unauthenticated, reason)
            }
            Err(WebhookError::Malformed(reason)) => Outcome::Refused(Refusal::Malformed, reason),
            Err(WebhookError::Unavailable(reason)) => Outcome::Unavailable(reason),
        }
    }

    async fn delete(&self, handles: &[(String, String)]) {
        if handles.is_empty() {
            return;
        }
        let entries: Vec<DeleteMessageBatchRequestEntry> = handles
            .iter()
            .filter_map(|(id, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(id)
                    .receipt_handle(receipt)
                    .build()
                    .ok()
            })
            .collect();
        let answer = self
            .client
            .delete_message_batch()
            .queue_url(&self.config.queue_url)
            .set_entries(Some(entries))
            .send()
            .await;
        match answer {
            Ok(output) => {
                self.stats
                    .deleted
                    .fetch_add(output.successful().len() as u64, Ordering::Relaxed);
                for failed in output.failed() {
                    metrics::counter!(QUEUE_ERRORS_TOTAL, "call" => "delete").increment(1);
                    tracing::warn!(
                        id = failed.id(),
                        code = failed.code(),
                        "a stored delivery was not deleted; it will be stored again when received"
                    );
                }
            }
            Err(error) => {
                metrics::counter!(QUEUE_ERRORS_TOTAL, "call" => "delete").increment(1);
                tracing::warn!(error = %error_text(&error), "deleting stored deliveries failed; they will be stored again when received");
            }
        }
    }

    async fn set_visibility(&self, handles: &[(String, String)], seconds: i32) {
        if let Err(error) =
            change_visibility(&self.client, &self.config.queue_url, handles, seconds).await
        {
            metrics::counter!(QUEUE_ERRORS_TOTAL, "call" => "visibility").increment(1);
            tracing::warn!(%error, "releasing queued deliveries failed; they reappear when their visibility ends");
        }
    }
}

/// A running consumer.
pub struct IntakeHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<IntakeStats>,
}

impl IntakeHandle {
    /// Stops polling, finishes the message in hand, releases the rest of
    /// its batch, and waits up to `grace` for that; a consumer still
    /// busy then is abandoned (its messages reappear when their visibility
    /// ends).
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!("the queue intake did not stop within {grace:?}; abandoned");
            task.abort();
        }
    }

    /// Whether the consumer has ended (a crash hook, or shutdown).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    pub fn stats(&self) -> &IntakeStats {
        &self.stats
    }
}

/// Extends the visibility of the batch's messages still in hand every half
/// timeout, until aborted.
async fn keep_hidden(
    client: aws_sdk_sqs::Client,
    queue_url: String,
    timeout: Duration,
    pending: Arc<std::sync::Mutex<Vec<(String, String)>>>,
) {
    let every = (timeout / 2).max(Duration::from_millis(500));
    loop {
        tokio::time::sleep(every).await;
        let handles = lock(&pending).clone();
        if handles.is_empty() {
            continue;
        }
        match change_visibility(&client, &queue_url, &handles, seconds(timeout.as_secs())).await {
            Ok(()) => tracing::debug!(
                messages = handles.len(),
                "visibility of a slow batch extended"
            ),
            Err(error) => {
                metrics::counter!(QUEUE_ERRORS_TOTAL, "call" => "visibility").increment(1);
                tracing::warn!(%error, "extending the visibility of a slow batch failed");
            }
        }
    }
}

async fn change_visibility(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    handles: &[(String, String)],
    seconds: i32,
) -> Result<(), String> {
    let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = handles
        .iter()
        .filter_map(|(id, receipt)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(id)
                .receipt_handle(receipt)
                .visibility_timeout(seconds)
                .build()
                .ok()
        })
        .collect();
    let output = client
        .change_message_visibility_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(|error| error_text(&error))?;
    match output.failed().first() {
        Some(failed) => Err(format!(
            "{} of {} entries failed ({})",
            output.failed().len(),
            handles.len(),
            failed.code()
        )),
        None => Ok(()),
    }
}

/// A batch entry id (unique in the batch) and the receipt handle.
fn handle_of(message: &Message) -> Option<(String, String)> {
    let receipt = message.receipt_handle()?.to_owned();
    let id = message
        .message_id()
        .map(|id| {
            id.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .take(80)
                .collect()
        })
        .unwrap_or_default();
    Some((id, receipt))
}

fn receive_count(message: &Message) -> String {
    message
        .attributes()
        .and_then(|attributes| attributes.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .cloned()
        .unwrap_or_else(|| "?".to_owned())
}

fn seconds(value: u64) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The error and its sources, for a log line.
fn error_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
