//! What item types offer the HTTP layer beyond the processing loop:
//! submission, a type-specific detail view, item commands and webhook
//! receivers. The API dispatches to these by `item_type` (or webhook
//! source) and never names a type, like the engine.

use std::fmt;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::item::ItemId;
use crate::permission::Permission;

/// A caller's submission of a new desired state.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The JSON body as sent (the type parses and validates it).
    pub body: serde_json::Value,
    /// The authenticated identity recorded on the item.
    pub caller_identity: String,
    /// True when the caller holds `admin` on the submission's scope: it may
    /// update or retry a live item another caller submitted. Without it, a
    /// type refuses that with [`RequestError::Refused`] and the code
    /// [`OWNED_BY_ANOTHER_CALLER`].
    pub caller_is_admin: bool,
    pub now: OffsetDateTime,
}

/// The error code of a refused update or retry of an item another caller
/// owns (HTTP 409).
pub const OWNED_BY_ANOTHER_CALLER: &str = "owned_by_another_caller";

/// What a submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: ItemId,
    pub outcome: SubmitOutcome,
    /// True when the engine should look at the item now.
    pub wake: bool,
}

/// What a submission did to the item, answered as `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// A new item (HTTP 201).
    Created,
    /// The live item already holds this state.
    Unchanged,
    /// The live item now holds this state.
    Updated,
    /// A failed item runs again.
    Retried,
    /// A type's own word.
    Other(&'static str),
}

impl SubmitOutcome {
    /// The word in the answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Unchanged => "unchanged",
            Self::Updated => "updated",
            Self::Retried => "retried",
            Self::Other(word) => word,
        }
    }
}

impl fmt::Display for SubmitOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One invalid field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// A path into the request body, e.g. `file_actions[2].file_path`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a submission or command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// 422: every invalid field.
    #[error("invalid request: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// 404: the item or command does not exist for this type.
    #[error("{0}")]
    NotFound(String),
    /// 409: the item's state does not allow it now.
    #[error("{0}")]
    Conflict(String),
    /// 409 with a machine-readable code of its own (e.g.
    /// [`OWNED_BY_ANOTHER_CALLER`]).
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    /// 400: the request is understood but cannot be carried out as asked.
    #[error("{0}")]
    BadRequest(String),
    /// 502: the forge refused or failed; nothing stored changed.
    #[error("{0}")]
    Upstream(String),
    /// 503: a dependency is unavailable; the message is for the caller.
    #[error("{0}")]
    Unavailable(String),
    /// 500: the service itself failed (e.g. its database). The detail is
    /// for the log only; the caller gets a generic answer.
    #[error("{0}")]
    Internal(String),
}

/// An item command the type offers at `POST /api/v1/work-items/{id}/{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    pub name: &'static str,
    /// The permission a caller needs on the item's scope.
    pub permission: Permission,
    /// The permission that is enough, on the item's scope, for the item's
    /// submitter (its owner: the caller identity it was submitted with);
    /// `None`: the submitter too needs `permission`.
    pub owner_permission: Option<Permission>,
}

/// A command's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandReply {
    pub status: CommandStatus,
    pub body: serde_json::Value,
    /// True when the engine should look at the item now.
    pub wake: bool,
}

/// How far a command got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
    /// It is carried out (HTTP 200).
    Done,
    /// It is taken on and the engine carries it out (HTTP 202).
    Accepted,
}

impl CommandStatus {
    /// The HTTP status that answers it.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Done => 200,
            Self::Accepted => 202,
        }
    }
}

/// Webhook headers as (lower-case name, value).
pub type Headers = Vec<(String, String)>;

/// The header a delivery channel other than `/webhooks/{source}` sets on
/// what it hands a receiver (`sqs`), for the audit record's actor. Each
/// channel sets it itself and drops a sender's copy.
pub const CHANNEL_HEADER: &str = "x-workqueue-channel";

/// What a webhook delivery led to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WebhookReceipt {
    /// Items an event was stored for (to notify).
    pub items: Vec<ItemId>,
    /// Why nothing was stored, when nothing was.
    pub ignored: Option<String>,
}

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// 401, nothing stored.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// Authentic but unreadable (not the payload the source sends); nothing
    /// stored. Over HTTP it is answered 202 and dropped (the forge would
    /// only send it again); a queue leaves it to its dead-letter policy.
    #[error("malformed: {0}")]
    Malformed(String),
    /// 503: could not store it; the forge should redeliver.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// How a delivery's origin is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryTrust {
    /// By what it carries: the source's token or signature is checked.
    Verify,
    /// By the channel it came through (a queue whose access policy admits
    /// only the forge's relay, by explicit configuration): nothing is
    /// checked.
    Channel,
}

/// Receives the deliveries of one webhook source (`/webhooks/{source}`, or
/// a queue carrying them).
#[async_trait]
pub trait WebhookReceiver: Send + Sync + 'static {
    /// The path segment, e.g. `gitlab`.
    fn source(&self) -> &'static str;

    /// Whether a delivery with these headers is of this source (its event
    /// header), for a channel that carries several sources. None by
    /// default.
    fn recognizes(&self, headers: &Headers) -> bool {
        let _ = headers;
        false
    }

    /// Verifies (as `trust` says), resolves the item(s) and stores pending
    /// events.
    async fn receive(
        &self,
        headers: &Headers,
        body: &[u8],
        trust: DeliveryTrust,
        now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError>;
}
