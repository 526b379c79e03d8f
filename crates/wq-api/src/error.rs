//! The API's one error type, [`ApiError`], and the JSON envelope every error
//! response carries:
//!
//! ```json
//! {"error": {"code": "invalid_parameter", "message": "...", "field": "limit"}}
//! ```
//!
//! Handlers return `Result<_, ApiError>` and build errors with the helper
//! constructors below; nothing else writes an error body. Store errors and
//! axum extractor rejections convert into it. Internal errors are logged once,
//! when the response is built, and answered with a generic message.

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use wq_store::StoreError;

/// Machine-readable error codes (`error.code`).
pub mod code {
    pub const NOT_FOUND: &str = "not_found";
    pub const INVALID_PARAMETER: &str = "invalid_parameter";
    pub const INVALID_BODY: &str = "invalid_body";
    pub const INVALID_FIELD: &str = "invalid_field";
    pub const BAD_REQUEST: &str = "bad_request";
    pub const UPSTREAM: &str = "upstream";
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    pub const FORBIDDEN: &str = "forbidden";
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported_media_type";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    pub const CONFLICT: &str = "conflict";
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    pub const TIMEOUT: &str = "timeout";
    pub const UNAVAILABLE: &str = "unavailable";
    pub const INTERNAL: &str = "internal";
}

/// The message an internal error answers with; the detail goes to the log.
pub const INTERNAL_MESSAGE: &str = "internal error; see the server log";
/// The message of every 401 of `/api/v1`, whatever the reason (which goes to
/// the log only).
pub const UNAUTHENTICATED_MESSAGE: &str =
    "missing or invalid credentials: send Authorization: Bearer <token>";

/// The longest caller-supplied name or value an error repeats: a field
/// name, or a quoted (`"..."` or `` `...` ``) part of a message. Longer ones
/// are cut to this many characters followed by [`ELLIPSIS`].
pub const MAX_QUOTED_CHARS: usize = 64;
/// The most invalid fields a 422 lists (in `errors` and its message); the
/// message says how many more there were.
pub const MAX_FIELD_ERRORS: usize = 50;
/// Marks a name or value cut to [`MAX_QUOTED_CHARS`].
pub const ELLIPSIS: &str = "…";

/// `text` cut to [`MAX_QUOTED_CHARS`] characters plus [`ELLIPSIS`] when
/// longer.
pub fn clip(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None => std::borrow::Cow::Borrowed(text),
        Some((end, _)) => std::borrow::Cow::Owned(format!("{}{ELLIPSIS}", &text[..end])),
    }
}

/// `message` with every quoted part (between `"` (backslash escapes
/// skipped) or between backticks) longer than [`MAX_QUOTED_CHARS`] cut
/// by [`clip`]. An unclosed quote runs to the end.
pub fn clip_quoted(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_QUOTED_CHARS {
        return std::borrow::Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len().min(4 * 1024));
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[open];
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        let mut close = None;
        let mut escaped = false;
        for (index, byte) in inner.bytes().enumerate() {
            if escaped {
                escaped = false;
            } else if byte == b'\\' && quote == b'"' {
                escaped = true;
            } else if byte == quote {
                close = Some(index);
                break;
            }
        }
        let end = close.unwrap_or(inner.len());
        out.push_str(&clip(&inner[..end]));
        match close {
            Some(close) => {
                out.push(quote as char);
                rest = &inner[close + 1..];
            }
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// What went wrong: a stable `code`, a human `message` and, when one input
/// was at fault, the `field` (query parameter, path parameter or body field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
    pub field: Option<String>,
    /// Every invalid field, when a body had several (`field` is the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldErrorBody>,
}

/// One invalid field of a request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldErrorBody {
    pub field: String,
    pub message: String,
}

/// An error answered as the JSON envelope with its HTTP status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    errors: Vec<FieldErrorBody>,
    aside: Option<Aside>,
}

/// What an error carries beside its envelope (one field, to keep
/// `Result<_, ApiError>` small).
#[derive(Debug)]
enum Aside {
    /// An internal error's cause: logged, never sent.
    Detail(Box<str>),
    /// A 401's `WWW-Authenticate` challenge.
    Challenge(Box<str>),
}

impl ApiError {
    /// Every constructor ends here: quoted names and values in `message`
    /// are cut ([`clip_quoted`]).
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        let message = match clip_quoted(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(clipped) => clipped,
        };
        Self {
            status,
            code,
            message,
            field: None,
            errors: Vec::new(),
            aside: None,
        }
    }

    /// 422: fields of a valid JSON body are invalid; names the first
    /// [`MAX_FIELD_ERRORS`] and says how many more were left out.
    pub fn invalid_fields(errors: Vec<wq_core::FieldError>) -> Self {
        let total = errors.len();
        let errors: Vec<wq_core::FieldError> = errors
            .into_iter()
            .take(MAX_FIELD_ERRORS)
            .map(|error| wq_core::FieldError {
                field: clip(&error.field).into_owned(),
                message: clip_quoted(&error.message).into_owned(),
            })
            .collect();
        let mut message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let left_out = total - errors.len();
        if left_out > 0 {
            message.push_str(&format!(
                "; and {left_out} more invalid field(s) not listed ({total} in all)"
            ));
        }
        let mut error = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_FIELD,
            message,
        );
        error.field = errors.first().map(|e| e.field.clone());
        error.errors = errors
            .into_iter()
            .map(|e| FieldErrorBody {
                field: e.field,
                message: e.message,
            })
            .collect();
        error
    }

    /// 400: understood, but cannot be carried out as asked.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code::BAD_REQUEST, message)
    }

    /// 502: the forge refused or failed.
    pub fn upstream(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, code::UPSTREAM, message)
    }

    /// 401: no valid credentials (a webhook's own signature check).
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code::UNAUTHENTICATED, message)
    }

    /// 401 with `WWW-Authenticate: {challenge}`: no valid bearer token. The
    /// message is always [`UNAUTHENTICATED_MESSAGE`]; why is for the log.
    pub fn bearer_challenge(challenge: impl Into<String>) -> Self {
        let mut error = Self::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHENTICATED,
            UNAUTHENTICATED_MESSAGE,
        );
        error.aside = Some(Aside::Challenge(challenge.into().into_boxed_str()));
        error
    }

    /// 403: the caller is authenticated, but no rule of theirs grants
    /// `permission` for what the request touches.
    pub fn forbidden(permission: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            code::FORBIDDEN,
            format!("forbidden: no rule of the caller grants {permission} for this request"),
        )
    }

    /// 404: the named resource does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code::NOT_FOUND, message)
    }

    /// 400: a query or path parameter is malformed; names it.
    pub fn invalid_parameter(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code::INVALID_PARAMETER, message).with_field(field)
    }

    /// 400 (syntax) or 422 (valid JSON of the wrong shape): the request body.
    pub fn invalid_body(status: StatusCode, message: impl Into<String>) -> Self {
        debug_assert!(
            status == StatusCode::BAD_REQUEST || status == StatusCode::UNPROCESSABLE_ENTITY
        );
        Self::new(status, code::INVALID_BODY, message)
    }

    /// 415: the body is not `application/json`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code::UNSUPPORTED_MEDIA_TYPE,
            message,
        )
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            code::METHOD_NOT_ALLOWED,
            "method not allowed on this route",
        )
    }

    /// 409: the resource is not in a state that allows the operation.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code::CONFLICT, message)
    }

    /// 409 with a code of its own (e.g. `owned_by_another_caller`).
    pub fn conflict_with(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 413: the request body is larger than the configured limit.
    pub fn payload_too_large(limit_bytes: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!("request body is larger than the limit of {limit_bytes} bytes"),
        )
    }

    /// 503: the request took longer than the configured timeout.
    pub fn timeout(after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::TIMEOUT,
            format!("request did not complete within {} ms", after.as_millis()),
        )
    }

    /// 503: a dependency (the database) is not available.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code::UNAVAILABLE, message)
    }

    /// 500: logged with `detail` when answered; the client sees a generic
    /// message.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        let mut error = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            code::INTERNAL,
            INTERNAL_MESSAGE,
        );
        error.aside = Some(Aside::Detail(detail.to_string().into_boxed_str()));
        error
    }

    /// Names the input at fault.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(clip(&field.into()).into_owned());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The `WWW-Authenticate` challenge of a 401, if any.
    pub fn www_authenticate(&self) -> Option<&str> {
        match &self.aside {
            Some(Aside::Challenge(challenge)) => Some(challenge),
            _ => None,
        }
    }

    /// The envelope this error answers with.
    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: ErrorBody {
                code: self.code.to_owned(),
                message: self.message.clone(),
                field: self.field.clone(),
                errors: self.errors.clone(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(Aside::Detail(detail)) = &self.aside {
            tracing::error!(error.code = self.code, error.detail = %detail, "internal error: {detail}");
        }
        let mut response = (self.status, Json(self.envelope())).into_response();
        if let Some(challenge) = self
            .www_authenticate()
            .and_then(|challenge| HeaderValue::from_str(challenge).ok())
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    /// Through the one mapping item types use too
    /// (`From<StoreError> for RequestError`).
    fn from(error: StoreError) -> Self {
        ApiError::from(wq_core::RequestError::from(error))
    }
}

impl From<wq_core::RequestError> for ApiError {
    fn from(error: wq_core::RequestError) -> Self {
        use wq_core::RequestError;
        match error {
            RequestError::Invalid(errors) => ApiError::invalid_fields(errors),
            RequestError::NotFound(message) => ApiError::not_found(message),
            RequestError::Conflict(message) => ApiError::conflict(message),
            RequestError::Refused { code, message } => ApiError::conflict_with(code, message),
            RequestError::BadRequest(message) => ApiError::bad_request(message),
            RequestError::Upstream(message) => ApiError::upstream(message),
            RequestError::Unavailable(message) => ApiError::unavailable(message),
            RequestError::Internal(detail) => ApiError::internal(detail),
        }
    }
}

/// Maps an extractor rejection's status to an envelope, keeping its text.
fn from_rejection(status: StatusCode, text: String, parameter_error: bool) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(status, code::PAYLOAD_TOO_LARGE, text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::unsupported_media_type(text),
        status if status.is_server_error() => ApiError::internal(text),
        status if parameter_error => ApiError::new(status, code::INVALID_PARAMETER, text),
        StatusCode::UNPROCESSABLE_ENTITY => {
            ApiError::invalid_body(StatusCode::UNPROCESSABLE_ENTITY, text)
        }
        _ => ApiError::invalid_body(StatusCode::BAD_REQUEST, text),
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        from_rejection(rejection.status(), rejection.body_text(), false)
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        from_rejection(rejection.status(), rejection.body_text(), false)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        from_rejection(rejection.status(), rejection.body_text(), true)
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        let field = match &rejection {
            PathRejection::FailedToDeserializePathParams(inner) => path_key(inner.kind()),
            _ => None,
        };
        let error = from_rejection(rejection.status(), rejection.body_text(), true);
        match field {
            Some(field) => error.with_field(field),
            None => error,
        }
    }
}

fn path_key(kind: &axum::extract::path::ErrorKind) -> Option<String> {
    use axum::extract::path::ErrorKind;
    match kind {
        ErrorKind::ParseErrorAtKey { key, .. } | ErrorKind::InvalidUtf8InPathParam { key } => {
            Some(key.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod snapshots {
    //! The error envelope as callers read it, one snapshot per kind of
    //! answer: a change to a code, a message or the shape shows in review.

    use super::*;

    fn answer(error: &ApiError) -> serde_json::Value {
        serde_json::json!({
            "status": error.status().as_u16(),
            "www_authenticate": error.www_authenticate(),
            "body": error.envelope(),
        })
    }

    #[test]
    fn every_kind_of_error_answers_one_envelope() {
        let item = "0192f0c4-6a1e-7c3e-9f00-000000000001";
        let answers: Vec<(&str, serde_json::Value)> = vec![
            (
                "invalid fields",
                answer(&ApiError::invalid_fields(vec![
                    wq_core::FieldError::new("branch", "must not be empty"),
                    wq_core::FieldError::new(
                        "actions[1].file_path",
                        "is blocked by rule \"*.pem\"",
                    ),
                ])),
            ),
            (
                "invalid parameter",
                answer(&ApiError::invalid_parameter(
                    "limit",
                    "must be between 1 and 500",
                )),
            ),
            (
                "invalid body",
                answer(&ApiError::invalid_body(
                    StatusCode::BAD_REQUEST,
                    "the body is not valid JSON: expected value at line 1 column 1",
                )),
            ),
            (
                "unauthenticated",
                answer(&ApiError::bearer_challenge("Bearer realm=\"workqueue\"")),
            ),
            ("forbidden", answer(&ApiError::forbidden("retry"))),
            (
                "not found",
                answer(&ApiError::not_found(format!("work item {item} not found"))),
            ),
            (
                "owned by another caller",
                answer(&ApiError::conflict_with(
                    wq_core::OWNED_BY_ANOTHER_CALLER,
                    "the item belongs to another caller",
                )),
            ),
            (
                "payload too large",
                answer(&ApiError::payload_too_large(1024 * 1024)),
            ),
            (
                "timeout",
                answer(&ApiError::timeout(std::time::Duration::from_secs(30))),
            ),
            (
                "unavailable",
                answer(&ApiError::unavailable(
                    "the forge is not answering; try again",
                )),
            ),
            (
                "internal (detail only logged)",
                answer(&ApiError::internal(
                    "relation \"work_items\" does not exist",
                )),
            ),
            (
                "a quoted name cut to 64 characters",
                answer(&ApiError::not_found(format!(
                    "no command \"{}\"",
                    "x".repeat(100)
                ))),
            ),
        ];
        insta::assert_json_snapshot!(serde_json::Map::from_iter(
            answers
                .into_iter()
                .map(|(name, body)| (name.to_owned(), body))
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_names_code_message_and_field() {
        let error = ApiError::invalid_parameter("limit", "must be between 1 and 500");
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let json = serde_json::to_value(error.envelope()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {
                "code": "invalid_parameter",
                "message": "must be between 1 and 500",
                "field": "limit",
            }})
        );
    }

    #[test]
    fn a_bearer_challenge_is_a_401_with_the_header_and_no_reason() {
        let error = ApiError::bearer_challenge("Bearer realm=\"workqueue\"");
        assert_eq!(error.www_authenticate(), Some("Bearer realm=\"workqueue\""));
        assert_eq!(error.message(), UNAUTHENTICATED_MESSAGE);
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"workqueue\""
        );
        assert!(ApiError::internal("x").www_authenticate().is_none());
        let forbidden = ApiError::forbidden("retry");
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        assert_eq!(forbidden.code(), code::FORBIDDEN);
    }

    #[test]
    fn internal_errors_hide_their_detail() {
        let error = ApiError::internal("connection refused to 10.0.0.1");
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(error.message(), INTERNAL_MESSAGE);
        assert!(
            !serde_json::to_string(&error.envelope())
                .unwrap()
                .contains("10.0.0.1")
        );
    }

    #[test]
    fn an_internal_request_error_is_a_generic_500() {
        let error = ApiError::from(wq_core::RequestError::Internal(
            "store: database error: relation \"mr_details\" does not exist".into(),
        ));
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(error.code(), code::INTERNAL);
        assert_eq!(error.message(), INTERNAL_MESSAGE);
        let body = serde_json::to_string(&error.envelope()).unwrap();
        assert!(!body.contains("mr_details"), "{body}");
        assert!(!body.contains("database"), "{body}");
        assert_eq!(
            error.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn long_names_and_quoted_values_are_cut() {
        let long = "x".repeat(200_000);
        let error = ApiError::invalid_fields(vec![wq_core::FieldError::new(
            long.clone(),
            format!("unknown field `{long}`"),
        )]);
        let body = serde_json::to_string(&error.envelope()).unwrap();
        assert!(body.len() < 1_000, "{} bytes", body.len());
        let cut = format!("{}{ELLIPSIS}", "x".repeat(MAX_QUOTED_CHARS));
        assert_eq!(error.field(), Some(cut.as_str()));
        assert_eq!(error.message(), format!("{cut}: unknown field `{cut}`"));

        let error =
            ApiError::invalid_parameter(long.clone(), format!("unknown query parameter {long:?}"));
        assert_eq!(error.field(), Some(cut.as_str()));
        assert_eq!(
            error.message(),
            format!("unknown query parameter \"{cut}\"")
        );

        // Short quotes, escaped quotes and unquoted text stay as they are.
        let message = format!("got \"a\\\"b\" and {}", "y".repeat(100));
        assert_eq!(ApiError::bad_request(message.clone()).message(), message);
        // Characters, not bytes, are counted.
        let wide = "é".repeat(100);
        assert_eq!(
            clip(&wide),
            format!("{}{ELLIPSIS}", "é".repeat(MAX_QUOTED_CHARS))
        );
    }

    #[test]
    fn invalid_fields_are_listed_up_to_the_cap() {
        let errors: Vec<wq_core::FieldError> = (0..MAX_FIELD_ERRORS + 7)
            .map(|index| wq_core::FieldError::new(format!("f{index}"), "unknown field"))
            .collect();
        let error = ApiError::invalid_fields(errors);
        let envelope = error.envelope();
        assert_eq!(envelope.error.errors.len(), MAX_FIELD_ERRORS);
        assert_eq!(envelope.error.field.as_deref(), Some("f0"));
        assert!(
            error
                .message()
                .ends_with("; and 7 more invalid field(s) not listed (57 in all)"),
            "{}",
            error.message()
        );
        assert!(!error.message().contains("f50:"), "{}", error.message());

        // At the cap nothing is left out.
        let errors: Vec<wq_core::FieldError> = (0..MAX_FIELD_ERRORS)
            .map(|index| wq_core::FieldError::new(format!("f{index}"), "unknown field"))
            .collect();
        let error = ApiError::invalid_fields(errors);
        assert_eq!(error.envelope().error.errors.len(), MAX_FIELD_ERRORS);
        assert!(!error.message().contains("more"), "{}", error.message());
    }

    #[test]
    fn store_errors_map_to_statuses() {
        let id = wq_core::ItemId::new_v7();
        assert_eq!(
            ApiError::from(StoreError::NotFound(id)).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            ApiError::from(StoreError::Conflict("x".into())).status(),
            StatusCode::CONFLICT
        );
        assert_eq!(
            ApiError::from(StoreError::Corrupt("x".into())).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
