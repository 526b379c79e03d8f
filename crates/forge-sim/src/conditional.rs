//! Conditional requests: an `ETag` on every successful `GET` of either forge, and
//! `304 Not Modified` for a `GET` whose `If-None-Match` names the current one.
//!
//! Both forges do this on their REST APIs:
//!
//! - **GitLab** runs Rack's `ETag` and `ConditionalGet` middleware over the API: a
//!   successful `GET` carries a weak validator of its body (`W/"<digest>"`), and a request
//!   whose `If-None-Match` matches is answered `304 Not Modified` without a body. The
//!   validator depends on the body only.
//! - **GitHub** sends an `ETag` on REST `GET`s (`"<digest>"`) and answers `304 Not
//!   Modified` to a matching `If-None-Match`; the validator differs by token (the answer
//!   varies by `Authorization`), and a 304 to an authorized request does not count against
//!   the primary rate limit. GraphQL (`POST /graphql`) has no
//!   validators.
//!
//! `If-None-Match` is compared weakly (RFC 9110 §13.1.2): `W/` is ignored, `*` matches any
//! current representation, and the header may list several tags.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

/// The largest body given a validator (larger answers are passed on unbuffered).
const MAX_TAGGED_BODY: usize = 8 << 20;

/// Whether `path` is the simulated GitLab's (else GitHub's).
fn is_gitlab(path: &str) -> bool {
    path == "/api/v4" || path.starts_with("/api/v4/")
}

/// The validator of `body` as `path`'s forge spells it; GitHub's depends on the token too.
pub fn etag_for(path: &str, authorization: Option<&[u8]>, body: &[u8]) -> String {
    let mut digest = Sha256::new();
    if !is_gitlab(path) {
        digest.update(authorization.unwrap_or_default());
        digest.update([0]);
    }
    digest.update(body);
    let hex = hex::encode(&digest.finalize()[..16]);
    if is_gitlab(path) {
        format!("W/\"{hex}\"")
    } else {
        format!("\"{hex}\"")
    }
}

/// Whether an `If-None-Match` value matches `etag` (weak comparison).
pub fn none_match(if_none_match: &str, etag: &str) -> bool {
    let opaque = |tag: &str| -> String {
        let tag = tag.trim();
        tag.strip_prefix("W/").unwrap_or(tag).to_string()
    };
    let current = opaque(etag);
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || (!tag.is_empty() && opaque(tag) == current))
}

/// The middleware: tags successful `GET` answers of both forges and answers 304 when the
/// client already has the representation. Control routes are left alone.
pub async fn middleware(request: Request<Body>, next: Next) -> Response {
    let path = request.uri().path().to_string();
    if request.method() != Method::GET || path.starts_with("/_sim") {
        return next.run(request).await;
    }
    let if_none_match = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let authorization = authorization(request.headers());
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_TAGGED_BODY).await else {
        // Too large to buffer: sent untagged (the body is gone; a 500 says so).
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("answer too large to tag"))
            .unwrap_or_default();
    };
    let etag = etag_for(&path, authorization.as_deref(), &bytes);
    let Ok(value) = HeaderValue::from_str(&etag) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(header::ETAG, value);
    if if_none_match.is_some_and(|tag| none_match(&tag, &etag)) {
        // A 304 carries the validator and the headers a 200 would have, but no body.
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::CONTENT_TYPE);
        return Response::from_parts(parts, Body::empty());
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// The credentials a GitHub validator depends on.
fn authorization(headers: &HeaderMap) -> Option<Vec<u8>> {
    headers
        .get(header::AUTHORIZATION)
        .or_else(|| headers.get("private-token"))
        .map(|v| v.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_tags_are_weak_and_depend_on_the_body_only() {
        let a = etag_for("/api/v4/projects/1", Some(b"t1"), b"{}");
        let b = etag_for("/api/v4/projects/1", Some(b"t2"), b"{}");
        assert!(a.starts_with("W/\""), "{a}");
        assert_eq!(a, b);
        assert_ne!(a, etag_for("/api/v4/projects/1", Some(b"t1"), b"{ }"));
    }

    #[test]
    fn github_tags_are_strong_and_differ_by_token() {
        let a = etag_for("/repos/o/r/pulls/1", Some(b"Bearer t1"), b"{}");
        let b = etag_for("/repos/o/r/pulls/1", Some(b"Bearer t2"), b"{}");
        assert!(a.starts_with('"'), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn if_none_match_compares_weakly_and_takes_lists() {
        assert!(none_match("W/\"abc\"", "W/\"abc\""));
        assert!(none_match("\"abc\"", "W/\"abc\""));
        assert!(none_match("\"x\", W/\"abc\"", "W/\"abc\""));
        assert!(none_match("*", "\"abc\""));
        assert!(!none_match("\"abd\"", "\"abc\""));
        assert!(!none_match("", "\"abc\""));
    }
}
