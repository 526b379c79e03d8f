//! Settings of the HTTP layer ([`ApiConfig`]); every default is a named
//! constant.

use std::time::Duration;

/// Largest accepted request body: 8 MiB.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 8 * 1024 * 1024;
/// How long one request may take before it is answered with a timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of [`crate::router`].
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Requests with a larger body are refused with 413.
    pub body_limit_bytes: usize,
    /// Requests running longer are answered with 503 `timeout`.
    pub request_timeout: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// How long a connection may take to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How long open requests may run on after shutdown begins.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Settings of [`crate::serve_with`]: the connection level.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// A connection that has not sent a request's complete headers this
    /// long after it opened (or after its previous response) is closed.
    pub header_read_timeout: Duration,
    /// Connections served at once; further ones wait, unaccepted, in the
    /// listen backlog until one closes.
    pub max_connections: usize,
    /// After shutdown begins, open requests may finish for this long; then
    /// every connection is dropped.
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}
