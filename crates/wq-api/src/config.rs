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
