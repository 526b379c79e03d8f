//! What the forge clients' HTTP layers share: decoding a 2xx body, the
//! message of an error answer without a usable body, and `Retry-After`.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

use crate::error::{ForgeError, ForgeResult};

/// `User-Agent` of every forge request.
pub const USER_AGENT: &str = concat!("workqueue/", env!("CARGO_PKG_VERSION"));

/// How much of an unreadable error body goes into the error message.
const ERROR_BODY_CHARS: usize = 200;

/// Decodes a 2xx JSON body; a body that does not fit is `Rejected`.
pub(crate) fn decode<T: DeserializeOwned>(
    forge: &str,
    body: &[u8],
    status: StatusCode,
    request: &str,
    what: &str,
) -> ForgeResult<T> {
    serde_json::from_slice(body).map_err(|e| {
        ForgeError::rejected(
            Some(status.as_u16()),
            format!("{request}: {forge} answered {status} with a body that is not {what}: {e}"),
        )
    })
}

/// An error answer's message when the forge gave none in its own format:
/// the status's reason, with the start of the body if there is one.
pub(crate) fn fallback_message(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let reason = status.canonical_reason().unwrap_or("error");
    if text.is_empty() {
        reason.to_owned()
    } else {
        let snippet: String = text.chars().take(ERROR_BODY_CHARS).collect();
        format!("{reason}: {snippet}")
    }
}

/// A header's trimmed text.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `Retry-After`: delay seconds or an HTTP date.
pub(crate) fn retry_after_header(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = header(headers, "retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = OffsetDateTime::parse(value, &Rfc2822).ok()?;
    let at = u64::try_from(date.unix_timestamp()).unwrap_or(0);
    Some(Duration::from_secs(at.saturating_sub(unix_seconds(now))))
}
