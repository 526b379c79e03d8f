use std::fmt;
use std::time::Duration;

pub type ForgeResult<T> = Result<T, ForgeError>;

/// What kind of failure a forge call had; decides whether retrying helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgeErrorKind {
    /// Network error, timeout or 5xx: retrying later may help.
    Unavailable,
    /// 429 or a secondary rate limit; see [`ForgeError::retry_after`].
    RateLimited,
    /// 401/403: the configured credentials are refused.
    Unauthorized,
    /// 404.
    NotFound,
    /// 409: the state changed under us (e.g. head SHA moved).
    Conflict,
    /// 400/405/422 or an answer we do not understand: retrying the same
    /// request will not help.
    Rejected,
    /// Our own configuration or request is wrong.
    Invalid,
}

/// A failed forge call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ForgeError {
    pub kind: ForgeErrorKind,
    /// HTTP status, when the forge answered.
    pub status: Option<u16>,
    /// The forge's own message where it gave one.
    pub message: String,
    /// From `Retry-After` (or the rate-limit reset).
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ForgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "forge answered {status}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl ForgeError {
    pub fn new(kind: ForgeErrorKind, status: Option<u16>, message: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ForgeErrorKind::Unavailable, None, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ForgeErrorKind::Invalid, None, message)
    }

    pub fn rejected(status: Option<u16>, message: impl Into<String>) -> Self {
        Self::new(ForgeErrorKind::Rejected, status, message)
    }

    pub fn with_retry_after(mut self, after: Option<Duration>) -> Self {
        self.retry_after = after;
        self
    }

    /// Maps an HTTP status to its kind.
    pub fn from_status(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            401 | 403 => ForgeErrorKind::Unauthorized,
            404 => ForgeErrorKind::NotFound,
            409 => ForgeErrorKind::Conflict,
            429 => ForgeErrorKind::RateLimited,
            500..=599 => ForgeErrorKind::Unavailable,
            _ => ForgeErrorKind::Rejected,
        };
        Self::new(kind, Some(status), message)
    }

    /// True when the same call may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            ForgeErrorKind::Unavailable | ForgeErrorKind::RateLimited
        )
    }
}
