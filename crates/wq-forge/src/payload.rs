//! Reading webhook deliveries: headers by name, JSON fields by dotted path,
//! each missing or ill-typed required field a `Malformed` naming it.

use serde_json::Value;

use crate::events::WebhookRejection;

/// A header's value by (case-insensitive) name.
pub(crate) fn header<'a>(headers: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| *value)
}

pub(crate) fn malformed(message: impl Into<String>) -> WebhookRejection {
    WebhookRejection::Malformed(message.into())
}

/// The value at a dotted path; `null` counts as absent.
pub(crate) fn at<'a>(payload: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(payload, |value, key| value.get(key))
        .filter(|value| !value.is_null())
}

pub(crate) fn opt_str(payload: &Value, path: &str) -> Option<String> {
    at(payload, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

pub(crate) fn req_str(payload: &Value, path: &str) -> Result<String, WebhookRejection> {
    match at(payload, path) {
        None => Err(malformed(format!("{path}: missing"))),
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(_) => Err(malformed(format!("{path}: not a non-empty string"))),
    }
}

pub(crate) fn req_u64(payload: &Value, path: &str) -> Result<u64, WebhookRejection> {
    match at(payload, path) {
        None => Err(malformed(format!("{path}: missing"))),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| malformed(format!("{path}: not a non-negative integer"))),
    }
}

pub(crate) fn opt_u64(payload: &Value, path: &str) -> Result<Option<u64>, WebhookRejection> {
    match at(payload, path) {
        None => Ok(None),
        Some(_) => req_u64(payload, path).map(Some),
    }
}
