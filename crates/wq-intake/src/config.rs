//! `events.sqs:`: the queue a replica long-polls for forge deliveries.
//!
//! ```yaml
//! events:
//!   sqs:
//!     queue_url: https://sqs.eu-west-1.amazonaws.com/123456789012/forge-events
//!     region: eu-west-1                # else the standard AWS chain (AWS_REGION, profile)
//!     # endpoint: http://127.0.0.1:5000 # an SQS-compatible endpoint instead of AWS's
//!     wait_seconds: 20                 # long poll
//!     max_messages: 10                 # per receive
//!     visibility_timeout_seconds: 60   # extended while a batch is slow
//!     trust: signature                 # or queue_policy
//! ```
//!
//! Credentials come the standard AWS way (environment, profile, web
//! identity, instance role).

use std::time::Duration;

use garde::Validate;
use serde::Deserialize;

/// Default `wait_seconds`: SQS's longest poll.
pub const DEFAULT_WAIT_SECONDS: u64 = 20;
/// Default `max_messages`: SQS's largest batch.
pub const DEFAULT_MAX_MESSAGES: i32 = 10;
/// Default `visibility_timeout_seconds`.
pub const DEFAULT_VISIBILITY_TIMEOUT_SECONDS: u64 = 60;

/// How a queued delivery's origin is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueTrust {
    /// Each message carries the forge's token or signature header (as a
    /// message attribute) and is checked as a webhook is.
    #[default]
    Signature,
    /// The queue's access policy admits only the forge's relay: messages
    /// are taken without a token or signature. An explicit choice.
    QueuePolicy,
}

/// `events.sqs:`
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize, Validate)]
#[serde(deny_unknown_fields)]
pub struct SqsConfig {
    /// The queue's URL.
    #[garde(custom(http_url))]
    pub queue_url: String,
    /// The AWS region; the standard chain's when absent.
    #[serde(default)]
    #[garde(inner(length(min = 1, max = 64)))]
    pub region: Option<String>,
    /// An SQS-compatible endpoint instead of AWS's.
    #[serde(default)]
    #[garde(inner(custom(http_url)))]
    pub endpoint: Option<String>,
    /// Long-poll wait, 0 to 20 seconds (default [`DEFAULT_WAIT_SECONDS`]).
    #[serde(default = "default_wait")]
    #[garde(range(max = 20))]
    pub wait_seconds: u64,
    /// Messages per receive, 1 to 10 (default [`DEFAULT_MAX_MESSAGES`]).
    #[serde(default = "default_max_messages")]
    #[garde(range(min = 1, max = 10))]
    pub max_messages: i32,
    /// How long a received message stays hidden from other consumers,
    /// 1 to 43200 seconds; extended while its batch is still being stored
    /// (default [`DEFAULT_VISIBILITY_TIMEOUT_SECONDS`]).
    #[serde(default = "default_visibility")]
    #[garde(range(min = 1, max = 43_200))]
    pub visibility_timeout_seconds: u64,
    /// How messages are authenticated (default `signature`).
    #[serde(default)]
    #[garde(skip)]
    pub trust: QueueTrust,
}

fn default_wait() -> u64 {
    DEFAULT_WAIT_SECONDS
}

fn default_max_messages() -> i32 {
    DEFAULT_MAX_MESSAGES
}

fn default_visibility() -> u64 {
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS
}

fn http_url(value: &str, _: &()) -> garde::Result {
    if value.starts_with("https://") || value.starts_with("http://") {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "{value:?} is not an http(s) URL"
        )))
    }
}

impl SqsConfig {
    /// A queue at `queue_url` with every other setting at its default.
    pub fn new(queue_url: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            region: None,
            endpoint: None,
            wait_seconds: DEFAULT_WAIT_SECONDS,
            max_messages: DEFAULT_MAX_MESSAGES,
            visibility_timeout_seconds: DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
            trust: QueueTrust::Signature,
        }
    }

    pub fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(self.visibility_timeout_seconds)
    }
}
