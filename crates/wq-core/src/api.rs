//! What item types offer the HTTP layer beyond the processing loop:
//! submission, a type-specific detail view, item commands and webhook
//! receivers. The API dispatches to these by `item_type` (or webhook
//! source) and never names a type, like the engine.

use std::fmt;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::item::ItemId;

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
    /// `created`, `unchanged`, `updated`, `retried` or a type's own word.
    pub outcome: &'static str,
    /// True when a new item was created (HTTP 201).
    pub created: bool,
    /// True when the engine should look at the item now.
    pub wake: bool,
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
    /// The permission a caller needs (`retry`, `merge`, ...).
    pub permission: &'static str,
}

/// A command's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandReply {
    /// HTTP status (200 or 202).
    pub status: u16,
    pub body: serde_json::Value,
    /// True when the engine should look at the item now.
    pub wake: bool,
}

/// Webhook headers as (lower-case name, value).
pub type Headers = Vec<(String, String)>;

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
    /// 503: could not store it; the forge should redeliver.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// Receives the deliveries of one webhook source (`/webhooks/{source}`).
#[async_trait]
pub trait WebhookReceiver: Send + Sync + 'static {
    /// The path segment, e.g. `gitlab`.
    fn source(&self) -> &'static str;

    /// Verifies, resolves the item(s) and stores pending events.
    async fn receive(
        &self,
        headers: &Headers,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError>;
}
