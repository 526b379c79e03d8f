//! The HTTP side of the GitLab client: URLs, authentication, one request
//! with its timeout, and GitLab's answers turned into values or
//! [`ForgeError`]s.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use url::Url;

use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};

/// `User-Agent` of every request.
pub use crate::http_util::USER_AGENT;

/// Page size of list requests (GitLab's maximum).
pub const PER_PAGE: u32 = 100;

/// Pages a list request follows at most (`PER_PAGE` items each).
pub const MAX_PAGES: u32 = 50;

pub use crate::http_util::Call;

impl Call {
    pub fn get(segments: &[&str]) -> Self {
        Self::new(Method::GET, segments)
    }
}

/// The configured connection to one GitLab API.
pub struct Http {
    client: reqwest::Client,
    /// `https://gitlab.example.com/api/v4`.
    base: Url,
    timeout: Duration,
    /// The `GET` answers re-read with `If-None-Match`.
    etags: crate::http_util::Etags,
    /// The token's rate-limit budget, as GitLab's answers report it.
    pub(crate) budgets: crate::budget::Budgets,
}

impl Http {
    /// `url` is the server (`https://gitlab.example.com`) or its API base
    /// (`.../api/v4`). Errors name the field.
    pub fn new(url: &str, token: &str, timeout: Duration) -> ForgeResult<Self> {
        let base = api_base(url)?;
        let mut headers = HeaderMap::new();
        headers.insert("private-token", crate::http_util::secret_header(token)?);
        let client = crate::http_util::client(headers, timeout)?;
        Ok(Self {
            client,
            base,
            timeout,
            etags: crate::http_util::Etags::default(),
            budgets: crate::budget::Budgets::default(),
        })
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    fn request(&self, call: &Call) -> RequestBuilder {
        call.build(&self.client, &self.base)
    }

    /// Sends the call; a 2xx answer is returned, anything else is an error.
    /// Not conditional: for answers read as a stream (job logs).
    pub async fn send(&self, call: &Call) -> ForgeResult<reqwest::Response> {
        let request = self
            .request(call)
            .build()
            .map_err(|e| self.transport_error(call, &e))?;
        let response = self.execute(call, request).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.error(call, response).await)
    }

    /// Sends `request` and records it.
    async fn execute(
        &self,
        call: &Call,
        request: reqwest::Request,
    ) -> ForgeResult<reqwest::Response> {
        let response = crate::metrics::observe(
            "gitlab",
            &crate::metrics::host_label(&self.base),
            &call.describe(),
            self.client.execute(request),
        )
        .await
        .map_err(|e| self.transport_error(call, &e))?;
        self.budgets.update(response.headers());
        Ok(response)
    }

    /// The error a non-2xx answer stands for.
    #[allow(
        clippy::disallowed_methods,
        reason = "Retry-After HTTP dates count from wall time"
    )]
    async fn error(&self, call: &Call, response: reqwest::Response) -> ForgeError {
        let status = response.status();
        let headers = response.headers().clone();
        if status.is_redirection() {
            return crate::http_util::redirect_error("GitLab", &call.describe(), status, &headers);
        }
        // An unreadable error body still leaves the status to go by.
        let body = response.bytes().await.unwrap_or_default();
        error_from_answer(status, &headers, &body, SystemTime::now())
    }

    /// Sends the call and reads its whole 2xx answer. A `GET` whose answer
    /// is kept (see [`crate::http_util::Etags`]) is sent with
    /// `If-None-Match`, and a `304 Not Modified` reads as the kept answer.
    pub async fn read(&self, call: &Call) -> ForgeResult<(StatusCode, HeaderMap, Vec<u8>)> {
        let mut request = self
            .request(call)
            .build()
            .map_err(|e| self.transport_error(call, &e))?;
        let url = request.url().to_string();
        let is_get = request.method() == Method::GET;
        let kept = self.etags.prepare(&mut request);
        let response = self.execute(call, request).await?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED
            && let Some(kept) = kept
        {
            return Ok((kept.status, kept.headers.clone(), kept.body.clone()));
        }
        if !status.is_success() {
            return Err(self.error(call, response).await);
        }
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(call, &e))?;
        if is_get {
            self.etags.store(&url, status, &headers, &body);
        }
        Ok((status, headers, body.to_vec()))
    }

    /// Sends the call and decodes the 2xx JSON body as `T`.
    pub async fn json<T: DeserializeOwned>(&self, call: &Call, what: &str) -> ForgeResult<T> {
        let (status, _, body) = self.read(call).await?;
        decode(&body, status, &call.describe(), what)
    }

    /// Like [`Http::json`], with 404 as `None`.
    pub async fn json_opt<T: DeserializeOwned>(
        &self,
        call: &Call,
        what: &str,
    ) -> ForgeResult<Option<T>> {
        match self.json(call, what).await {
            Ok(value) => Ok(Some(value)),
            Err(error) if error.kind == ForgeErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Sends the call and returns the last `max` bytes of the 2xx body as
    /// text, streamed: the whole body is never held (see
    /// [`crate::http_util::Tail`]). Job logs may hold arbitrary bytes; what
    /// is not UTF-8 is replaced.
    pub async fn tail_text(&self, call: &Call, max: usize) -> ForgeResult<String> {
        let mut response = self.send(call).await?;
        let mut tail = crate::http_util::Tail::new(max);
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(call, &e))?
        {
            tail.push(&chunk);
        }
        Ok(tail.finish())
    }

    /// All pages of a list (`per_page` = [`PER_PAGE`], following
    /// `X-Next-Page`, at most [`MAX_PAGES`] pages).
    pub async fn list<T: DeserializeOwned>(&self, call: Call, what: &str) -> ForgeResult<Vec<T>> {
        let mut items = Vec::new();
        let mut page: u32 = 1;
        loop {
            let mut paged = Call {
                method: call.method.clone(),
                segments: call.segments.clone(),
                query: call.query.clone(),
                body: None,
            };
            paged.query.push(("per_page", PER_PAGE.to_string()));
            paged.query.push(("page", page.to_string()));
            let (status, headers, body) = self.read(&paged).await?;
            let next = headers
                .get("x-next-page")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u32>().ok());
            let mut chunk: Vec<T> = decode(&body, status, &paged.describe(), what)?;
            items.append(&mut chunk);
            match next {
                Some(next) if next > page && next <= MAX_PAGES => page = next,
                Some(next) if next > MAX_PAGES => {
                    tracing::warn!(
                        request = %paged.describe(),
                        max_pages = MAX_PAGES,
                        "GitLab list longer than {MAX_PAGES} pages; reading the first {MAX_PAGES}"
                    );
                    return Ok(items);
                }
                _ => return Ok(items),
            }
        }
    }

    fn transport_error(&self, call: &Call, error: &reqwest::Error) -> ForgeError {
        crate::http_util::transport_error("GitLab", &call.describe(), self.timeout, error)
    }
}

/// `{url}/api/v4` from the configured server URL.
fn api_base(url: &str) -> ForgeResult<Url> {
    let mut base = crate::http_util::parse_base_url(url)?;
    if !base.path().trim_end_matches('/').ends_with("/api/v4") {
        base.path_segments_mut()
            .map_err(|()| ForgeError::invalid(format!("url: {url:?} cannot take a path")))?
            .pop_if_empty()
            .extend(["api", "v4"]);
    }
    Ok(base)
}

/// Decodes a 2xx JSON body; a body that does not fit is `Rejected`.
fn decode<T: DeserializeOwned>(
    body: &[u8],
    status: StatusCode,
    request: &str,
    what: &str,
) -> ForgeResult<T> {
    crate::http_util::decode("GitLab", body, status, request, what)
}

/// The error for a non-2xx answer: the kind from the status, GitLab's own
/// message, and for 429/503 when to retry.
pub fn error_from_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> ForgeError {
    let message =
        gitlab_message(body).unwrap_or_else(|| crate::http_util::fallback_message(status, body));
    let error = ForgeError::from_status(status.as_u16(), message);
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        error.with_retry_after(retry_after(headers, now))
    } else {
        error
    }
}

/// GitLab's error text: `{"message": ...}` (a string, a list, or field →
/// messages) or Grape's `{"error": "..."}`.
pub fn gitlab_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    ["message", "error", "error_description"]
        .iter()
        .filter_map(|key| object.get(*key))
        .map(flatten_message)
        .find(|text| !text.is_empty())
}

fn flatten_message(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(flatten_message)
            .collect::<Vec<_>>()
            .join("; "),
        Value::Object(fields) => fields
            .iter()
            .map(|(field, messages)| format!("{field}: {}", flatten_message(messages)))
            .collect::<Vec<_>>()
            .join("; "),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `Retry-After` (delay seconds or an HTTP date), else `RateLimit-Reset`
/// (GitLab sends a Unix time; small values are read as delay seconds).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    use crate::http_util::{header, retry_after_header, unix_seconds};
    /// Values above this are a Unix time (2001-09-09), below a delay.
    const UNIX_TIME_FLOOR: u64 = 1_000_000_000;
    if let Some(delay) = retry_after_header(headers, now) {
        return Some(delay);
    }
    let reset = header(headers, "ratelimit-reset")?.parse::<u64>().ok()?;
    if reset >= UNIX_TIME_FLOOR {
        Some(Duration::from_secs(reset.saturating_sub(unix_seconds(now))))
    } else {
        Some(Duration::from_secs(reset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_util::test_support::{at, headers};

    #[test]
    fn api_base_appends_api_v4_once() {
        let cases = [
            (
                "https://gitlab.example.com",
                "https://gitlab.example.com/api/v4",
            ),
            (
                "https://gitlab.example.com/",
                "https://gitlab.example.com/api/v4",
            ),
            (
                "https://gitlab.example.com/api/v4",
                "https://gitlab.example.com/api/v4",
            ),
            (
                "https://gitlab.example.com/api/v4/",
                "https://gitlab.example.com/api/v4",
            ),
            ("http://host:8080/gitlab", "http://host:8080/gitlab/api/v4"),
        ];
        for (input, expected) in cases {
            assert_eq!(api_base(input).expect(input).as_str(), expected, "{input}");
        }
        for bad in ["", "gitlab.example.com", "ftp://host", "https://host/?a=b"] {
            let error = api_base(bad).expect_err(bad);
            assert_eq!(error.kind, ForgeErrorKind::Invalid);
            assert!(error.message.starts_with("url: "), "{}", error.message);
        }
    }

    #[test]
    fn project_paths_are_one_encoded_segment() {
        let http =
            Http::new("https://gitlab.example.com", "t", Duration::from_secs(1)).expect("client");
        let segments = [
            "projects",
            "group/sub/name",
            "repository",
            "branches",
            "wq/x y",
        ];
        let url = crate::http_util::join(http.base(), &segments.map(String::from));
        assert_eq!(
            url.as_str(),
            "https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fname/repository/branches/wq%2Fx%20y"
        );
    }

    #[test]
    fn messages_are_flattened() {
        assert_eq!(
            gitlab_message(br#"{"message":"SHA does not match HEAD of source branch: abc"}"#),
            Some("SHA does not match HEAD of source branch: abc".into())
        );
        assert_eq!(
            gitlab_message(br#"{"message":["Another open merge request already exists"]}"#),
            Some("Another open merge request already exists".into())
        );
        assert_eq!(
            gitlab_message(br#"{"message":{"title":["is too long"],"base":["x"]}}"#),
            Some("base: x; title: is too long".into())
        );
        assert_eq!(
            gitlab_message(br#"{"error":"branch is missing"}"#),
            Some("branch is missing".into())
        );
        assert_eq!(gitlab_message(b"Retry later\n"), None);
    }

    #[test]
    fn error_bodies_without_json_keep_the_reason_and_text() {
        let error = error_from_answer(
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            b"<html>bad gateway</html>",
            at(0),
        );
        assert_eq!(error.kind, ForgeErrorKind::Unavailable);
        assert_eq!(error.status, Some(502));
        assert_eq!(error.message, "Bad Gateway: <html>bad gateway</html>");
        assert_eq!(error.retry_after, None);
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_reset() {
        let now = at(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        // 1_700_000_000 is Tue, 14 Nov 2023 22:13:20 GMT.
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Tue, 14 Nov 2023 22:13:50 GMT")]),
                now
            ),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Tue, 14 Nov 2023 22:13:00 GMT")]),
                now
            ),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(
            retry_after(&headers(&[("ratelimit-reset", "1700000042")]), now),
            Some(Duration::from_secs(42))
        );
        assert_eq!(
            retry_after(&headers(&[("ratelimit-reset", "12")]), now),
            Some(Duration::from_secs(12))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "soon"), ("ratelimit-reset", "1700000005")]),
                now
            ),
            Some(Duration::from_secs(5)),
            "an unreadable Retry-After falls back to the reset"
        );
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn rate_limits_and_unavailability_carry_retry_after_other_errors_not() {
        let h = headers(&[("retry-after", "3")]);
        let limited = error_from_answer(StatusCode::TOO_MANY_REQUESTS, &h, b"", at(0));
        assert_eq!(limited.kind, ForgeErrorKind::RateLimited);
        assert_eq!(limited.retry_after, Some(Duration::from_secs(3)));
        let unavailable = error_from_answer(StatusCode::SERVICE_UNAVAILABLE, &h, b"", at(0));
        assert_eq!(unavailable.kind, ForgeErrorKind::Unavailable);
        assert_eq!(unavailable.retry_after, Some(Duration::from_secs(3)));
        let server = error_from_answer(StatusCode::INTERNAL_SERVER_ERROR, &h, b"", at(0));
        assert_eq!(server.retry_after, None);
    }

    #[test]
    fn bodies_that_do_not_fit_are_rejected_with_what_was_expected() {
        let error = decode::<Vec<u64>>(b"{\"a\":1}", StatusCode::OK, "GET /x", "a list of ids")
            .expect_err("an object is not a list");
        assert_eq!(error.kind, ForgeErrorKind::Rejected);
        assert_eq!(error.status, Some(200));
        assert!(
            error.message.starts_with(
                "GET /x: GitLab answered 200 OK with a body that is not a list of ids"
            ),
            "{}",
            error.message
        );
    }
}
