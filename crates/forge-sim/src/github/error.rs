//! GitHub-style REST error responses (`{"message", "documentation_url", "status"}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The documentation link GitHub attaches to REST errors.
pub const DOCS_URL: &str = "https://docs.github.com/rest";

/// An error answered to a REST client with GitHub's error JSON.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
}

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with a top-level message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self::with_docs(status, message, DOCS_URL)
    }

    /// An error with a specific documentation link.
    pub fn with_docs(status: StatusCode, message: impl Into<String>, docs: &str) -> Self {
        Self {
            status,
            body: json!({
                "message": message.into(),
                "documentation_url": docs,
                "status": status.as_u16().to_string(),
            }),
        }
    }

    /// 401 Bad credentials.
    pub fn bad_credentials() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Bad credentials")
    }

    /// 404 Not Found.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found")
    }

    /// 400 Problems parsing JSON.
    pub fn bad_json() -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Problems parsing JSON")
    }

    /// 422 with a top-level message (e.g. "Reference already exists").
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// 422 "Validation Failed" with one `errors[]` entry, as GitHub reports field problems.
    pub fn validation(
        resource: &str,
        field: Option<&str>,
        code: &str,
        message: Option<&str>,
    ) -> Self {
        let mut entry = json!({ "resource": resource, "code": code });
        if let Some(f) = field {
            entry["field"] = json!(f);
        }
        if let Some(m) = message {
            entry["message"] = json!(m);
        }
        let mut err = Self::unprocessable("Validation Failed");
        err.body["errors"] = json!([entry]);
        err
    }

    /// 422 for a missing required field.
    pub fn missing_field(resource: &str, field: &str) -> Self {
        Self::validation(resource, Some(field), "missing_field", None)
    }

    /// 422 for an invalid field value.
    pub fn invalid_field(resource: &str, field: &str) -> Self {
        Self::validation(resource, Some(field), "invalid", None)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

/// Parses a JSON request body; an empty body reads as `{}`.
pub fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    let trimmed = bytes.iter().all(|b| b.is_ascii_whitespace());
    let res = if trimmed {
        serde_json::from_slice(b"{}")
    } else {
        serde_json::from_slice(bytes)
    };
    res.map_err(|e| {
        if e.is_data() {
            // Well-formed JSON with the wrong shape: GitHub answers 422 with the schema complaint.
            let mut err = ApiError::unprocessable("Invalid request.");
            err.body["message"] = json!(format!("Invalid request.\n\n{e}"));
            err
        } else {
            ApiError::bad_json()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes() {
        let e = ApiError::bad_credentials();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert_eq!(e.body["message"], "Bad credentials");
        assert!(e.body["documentation_url"].is_string());
        let v = ApiError::validation(
            "PullRequest",
            None,
            "custom",
            Some("A pull request already exists for o:b."),
        );
        assert_eq!(v.body["message"], "Validation Failed");
        assert_eq!(
            v.body["errors"][0]["message"],
            "A pull request already exists for o:b."
        );
    }

    #[test]
    fn body_parsing() {
        #[derive(Debug, serde::Deserialize)]
        struct B {
            #[serde(default)]
            a: Option<u32>,
        }
        assert!(parse_body::<B>(b"").unwrap().a.is_none());
        assert_eq!(parse_body::<B>(br#"{"a":3}"#).unwrap().a, Some(3));
        assert_eq!(
            parse_body::<B>(b"{nope").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            parse_body::<B>(br#"{"a":"x"}"#).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
