//! What the forge clients' HTTP layers share: the configured URL and the
//! reqwest client, one request ([`Call`]) and its URL, transport errors,
//! decoding a 2xx body, the message of an error answer without a usable
//! body, `Retry-After`, the conditional-request cache ([`Etags`]), and
//! `null_default` for wire types.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

use url::Url;

use crate::error::{ForgeError, ForgeResult};

/// `User-Agent` of every forge request.
pub const USER_AGENT: &str = concat!("workqueue/", env!("CARGO_PKG_VERSION"));

/// How much of an unreadable error body goes into the error message.
const ERROR_BODY_CHARS: usize = 200;

/// One REST request (each forge adds its own constructors).
pub struct Call {
    pub method: Method,
    /// Path segments below the API base; each is percent-encoded whole
    /// (a `/` inside a segment becomes `%2F`).
    pub segments: Vec<String>,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Value>,
}

impl Call {
    pub fn new(method: Method, segments: &[&str]) -> Self {
        Self {
            method,
            segments: segments.iter().map(|s| (*s).to_owned()).collect(),
            query: Vec::new(),
            body: None,
        }
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    /// `GET projects/1/...` or `GET repos/o/r/...` for logs and error
    /// messages (no host, no query).
    pub fn describe(&self) -> String {
        format!("{} /{}", self.method, self.segments.join("/"))
    }

    /// The request on `client`, below `base`.
    pub(crate) fn build(&self, client: &reqwest::Client, base: &Url) -> reqwest::RequestBuilder {
        let mut request = client.request(self.method.clone(), join(base, &self.segments));
        if !self.query.is_empty() {
            request = request.query(&self.query);
        }
        if let Some(body) = &self.body {
            request = request.json(body);
        }
        request
    }
}

/// The configured `url`, checked: an http(s) URL with a host and without
/// query or fragment. Errors name the field (`url`).
pub(crate) fn parse_base_url(url: &str) -> ForgeResult<Url> {
    let trimmed = url.trim().trim_end_matches('/');
    let base = Url::parse(trimmed)
        .map_err(|e| ForgeError::invalid(format!("url: {trimmed:?} is not a URL ({e})")))?;
    // Credentials belong in `token_env`: in the URL they would be logged
    // and sent as Basic authentication beside the token.
    if !base.username().is_empty() || base.password().is_some() {
        return Err(ForgeError::invalid(
            "url: must not carry a user name or password (the token comes from token_env)",
        ));
    }
    if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
        return Err(ForgeError::invalid(format!(
            "url: {trimmed:?} must be an http(s) URL with a host"
        )));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(ForgeError::invalid(format!(
            "url: {trimmed:?} must not have a query or fragment"
        )));
    }
    Ok(base)
}

/// Whether `url` may carry the token: `https`, or `http` on a loopback
/// host (`127.0.0.0/8`, `::1`, `localhost`), or anywhere with
/// `insecure_http`. Errors name the field (`url`).
pub(crate) fn check_transport(url: &Url, insecure_http: bool) -> ForgeResult<()> {
    if url.scheme() == "https" || insecure_http || is_loopback(url) {
        return Ok(());
    }
    Err(ForgeError::invalid(format!(
        "url: {:?} must use https (plain http is allowed on loopback only, or with \
         insecure_http: true)",
        url.as_str()
    )))
}

/// `127.0.0.0/8`, `::1` or `localhost`.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// A header value holding a secret (kept out of debug output).
pub(crate) fn secret_header(value: &str) -> ForgeResult<HeaderValue> {
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        ForgeError::invalid("token: contains characters that cannot be sent in a header")
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// The reqwest client of one forge: its default headers, the
/// [`USER_AGENT`], and `timeout` for connecting and for the whole request.
///
/// Redirects are never followed: the token headers would go with the
/// request to wherever the `Location` points (reqwest strips only
/// `Authorization` across origins, not GitLab's `PRIVATE-TOKEN`). A 3xx
/// answer is an error instead ([`redirect_error`]).
pub(crate) fn client(headers: HeaderMap, timeout: Duration) -> ForgeResult<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
        .default_headers(headers)
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| ForgeError::invalid(format!("HTTP client: {e}")))
}

/// The error for a 3xx answer, which the clients never follow:
/// [`ForgeErrorKind::Rejected`] (asking again gets the same redirect; the
/// configured `url` is what needs changing), naming the `Location`.
///
/// [`ForgeErrorKind::Rejected`]: crate::ForgeErrorKind::Rejected
pub(crate) fn redirect_error(
    forge: &str,
    request: &str,
    status: StatusCode,
    headers: &HeaderMap,
) -> ForgeError {
    // Without its query and fragment: a redirect may carry a signed URL.
    let location = header(headers, "location").map_or("(none)", |location| {
        location.split(['?', '#']).next().unwrap_or(location)
    });
    ForgeError::rejected(
        Some(status.as_u16()),
        format!(
            "{request}: {forge} answered {status} redirecting to Location {location:?}; \
             redirects are not followed (the credentials stay with the configured url; \
             check the forge's url)"
        ),
    )
}

/// `base` with `segments` appended, each percent-encoded whole.
pub(crate) fn join(base: &Url, segments: &[String]) -> Url {
    let mut url = base.clone();
    {
        let mut path = url
            .path_segments_mut()
            .expect("the API base is an http(s) URL, which has path segments");
        path.pop_if_empty();
        path.extend(segments);
    }
    url
}

/// A request that got no answer: a timeout, or the transport's error with
/// its causes (reqwest's own message is short; connection refused, reset
/// or DNS is in its sources).
pub(crate) fn transport_error(
    forge: &str,
    request: &str,
    timeout: Duration,
    error: &reqwest::Error,
) -> ForgeError {
    if error.is_timeout() {
        return ForgeError::unavailable(format!(
            "{request}: {forge} did not answer within {} s",
            timeout.as_secs_f64()
        ));
    }
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ForgeError::unavailable(format!("{request}: {message}"))
}

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

/// How many answers a client's [`Etags`] keeps (the oldest go first).
pub const ETAG_CACHE_ENTRIES: usize = 4096;

/// The largest body [`Etags`] keeps; larger answers are read again in full.
pub const ETAG_CACHE_MAX_BODY: usize = 256 * 1024;

/// A successful `GET` answer kept with its validator.
#[derive(Debug)]
pub(crate) struct Cached {
    pub(crate) etag: HeaderValue,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

/// The conditional-request cache of one client (so of one token): the
/// last `200` answer of each `GET` URL that carried an `ETag`. A re-read
/// sends `If-None-Match` with it, and a `304 Not Modified` is answered
/// with the kept status, headers and body: the caller cannot tell the two
/// apart. GitHub does not count a 304 against the rate limit; on either
/// forge it carries no body. Only URLs are keys: the client's token and
/// headers are the same on every request.
#[derive(Debug, Default)]
pub(crate) struct Etags {
    inner: Mutex<EtagsInner>,
}

#[derive(Debug, Default)]
struct EtagsInner {
    entries: HashMap<String, Arc<Cached>>,
    /// Keys oldest first (a key appears once).
    order: VecDeque<String>,
}

impl Etags {
    fn lock(&self) -> std::sync::MutexGuard<'_, EtagsInner> {
        // A cache only: a panic elsewhere cannot leave it invalid.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `request` conditional when its URL's answer is kept; the kept
    /// answer a 304 stands for.
    pub(crate) fn prepare(&self, request: &mut reqwest::Request) -> Option<Arc<Cached>> {
        if request.method() != reqwest::Method::GET {
            return None;
        }
        let cached = self.lock().entries.get(request.url().as_str()).cloned()?;
        request
            .headers_mut()
            .insert(reqwest::header::IF_NONE_MATCH, cached.etag.clone());
        Some(cached)
    }

    /// Keeps a `200` answer to a `GET` of `url` that carries an `ETag`
    /// (and forgets the URL's answer when a new one carries none).
    pub(crate) fn store(&self, url: &str, status: StatusCode, headers: &HeaderMap, body: &[u8]) {
        let mut inner = self.lock();
        let etag = headers.get(reqwest::header::ETAG).cloned();
        let Some(etag) =
            etag.filter(|_| status == StatusCode::OK && body.len() <= ETAG_CACHE_MAX_BODY)
        else {
            if inner.entries.remove(url).is_some() {
                inner.order.retain(|key| key != url);
            }
            return;
        };
        let cached = Arc::new(Cached {
            etag,
            status,
            headers: headers.clone(),
            body: body.to_vec(),
        });
        if inner.entries.insert(url.to_owned(), cached).is_none() {
            inner.order.push_back(url.to_owned());
        }
        while inner.order.len() > ETAG_CACHE_ENTRIES {
            if let Some(oldest) = inner.order.pop_front() {
                inner.entries.remove(&oldest);
            }
        }
    }

    /// How many answers are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// The most of a job log a client keeps: its last 1 MiB. A log is streamed
/// and only this tail is held (the CI-retry matchers search the end of a
/// log: their `tail_lines` window, or the whole text they are given).
pub const TRACE_TAIL_BYTES: usize = 1 << 20;

/// The last `max` bytes of a stream read chunk by chunk, holding at most
/// `2 * max` bytes plus one chunk at any time.
pub(crate) struct Tail {
    buf: Vec<u8>,
    max: usize,
    /// True once bytes before the kept ones were dropped.
    cut: bool,
}

impl Tail {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            max,
            cut: false,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if chunk.len() >= self.max {
            self.cut |= !self.buf.is_empty() || chunk.len() > self.max;
            self.buf.clear();
            self.buf.extend_from_slice(&chunk[chunk.len() - self.max..]);
            return;
        }
        self.buf.extend_from_slice(chunk);
        if self.buf.len() > 2 * self.max {
            let drop = self.buf.len() - self.max;
            self.buf.drain(..drop);
            self.cut = true;
        }
    }

    /// The kept text: the last `max` bytes; when the log was cut, from the
    /// first line start in them (unless the kept bytes hold no line break,
    /// then from the first whole UTF-8 character). Invalid UTF-8 is
    /// replaced (`U+FFFD`).
    pub(crate) fn finish(mut self) -> String {
        if self.buf.len() > self.max {
            let drop = self.buf.len() - self.max;
            self.buf.drain(..drop);
            self.cut = true;
        }
        let mut start = 0;
        if self.cut {
            start = match self.buf.iter().position(|b| *b == b'\n') {
                Some(newline) if newline + 1 < self.buf.len() => newline + 1,
                _ => self
                    .buf
                    .iter()
                    .take(4)
                    .position(|b| (*b & 0xC0) != 0x80)
                    .unwrap_or(0),
            };
        }
        String::from_utf8_lossy(&self.buf[start..]).into_owned()
    }
}

/// `#[serde(deserialize_with = "null_default")]`: `null` as the type's
/// default (both forges send `null` for empty strings and lists in places).
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

/// Header maps and instants for the clients' unit tests.
#[cfg(test)]
mod tests {
    use super::*;

    fn tail(max: usize, chunks: &[&[u8]]) -> String {
        let mut tail = Tail::new(max);
        for chunk in chunks {
            tail.push(chunk);
            assert!(tail.buf.len() <= 2 * max + chunk.len(), "bounded");
        }
        tail.finish()
    }

    fn get(url: &str) -> reqwest::Request {
        reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap())
    }

    #[test]
    fn a_kept_answer_makes_the_next_get_conditional() {
        let etags = Etags::default();
        let url = "http://127.0.0.1/api/v4/projects/1";
        let mut first = get(url);
        assert!(etags.prepare(&mut first).is_none());
        assert!(!first.headers().contains_key("if-none-match"));
        let mut headers = HeaderMap::new();
        headers.insert("etag", HeaderValue::from_static("W/\"abc\""));
        etags.store(url, StatusCode::OK, &headers, b"{}");
        let mut again = get(url);
        let cached = etags.prepare(&mut again).expect("kept");
        assert_eq!(again.headers()["if-none-match"], "W/\"abc\"");
        assert_eq!(cached.body, b"{}");
        let mut post = reqwest::Request::new(reqwest::Method::POST, url.parse().unwrap());
        assert!(
            etags.prepare(&mut post).is_none(),
            "only GETs are conditional"
        );
        // An answer without a validator forgets the kept one.
        etags.store(url, StatusCode::OK, &HeaderMap::new(), b"{}");
        assert!(etags.prepare(&mut get(url)).is_none());
        assert_eq!(etags.len(), 0);
    }

    #[test]
    fn the_cache_is_bounded() {
        let etags = Etags::default();
        let mut headers = HeaderMap::new();
        headers.insert("etag", HeaderValue::from_static("\"t\""));
        for n in 0..ETAG_CACHE_ENTRIES + 10 {
            etags.store(&format!("http://h/{n}"), StatusCode::OK, &headers, b"x");
        }
        assert_eq!(etags.len(), ETAG_CACHE_ENTRIES);
        assert!(
            etags.prepare(&mut get("http://h/0")).is_none(),
            "the oldest went first"
        );
        assert!(
            etags
                .prepare(&mut get(&format!("http://h/{}", ETAG_CACHE_ENTRIES + 9)))
                .is_some()
        );
        let big = vec![b'x'; ETAG_CACHE_MAX_BODY + 1];
        etags.store("http://h/big", StatusCode::OK, &headers, &big);
        assert!(
            etags.prepare(&mut get("http://h/big")).is_none(),
            "too large to keep"
        );
    }

    #[test]
    fn a_short_log_is_kept_whole() {
        assert_eq!(tail(16, &[b"a\nb", b"\nc"]), "a\nb\nc");
        assert_eq!(tail(16, &[]), "");
    }

    #[test]
    fn a_long_log_keeps_its_tail_from_a_line_start() {
        let chunks: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let text = tail(20, &refs);
        assert_eq!(text, "line 98\nline 99\n");
        // One chunk larger than the bound.
        assert_eq!(tail(8, &[b"xxxxxxxxxxxxxxxx\nabc\nde"]), "abc\nde");
    }

    #[test]
    fn a_cut_without_line_breaks_starts_at_a_whole_character() {
        // "é" is two bytes; cutting inside it must not leave half of it.
        let text = tail(5, &["aéééé".as_bytes()]);
        assert_eq!(text, "éé");
        let text = tail(4, &[b"abc\xffdef"]);
        assert_eq!(
            text, "\u{fffd}def",
            "an invalid byte is not skipped, it is replaced"
        );
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(tail(16, &[b"ok \xff\xfe end"]), "ok \u{fffd}\u{fffd} end");
    }

    #[test]
    fn a_base_url_with_credentials_is_refused_without_echoing_them() {
        for url in [
            "https://bot:s3cret@gitlab.example.com",
            "https://bot@gitlab.example.com",
        ] {
            let error = parse_base_url(url).expect_err(url);
            assert!(error.message.starts_with("url: "), "{}", error.message);
            assert!(!error.message.contains("s3cret"), "{}", error.message);
        }
        assert!(parse_base_url("https://gitlab.example.com").is_ok());
    }

    #[test]
    fn transport_needs_https_off_loopback() {
        let url = |u: &str| parse_base_url(u).expect(u);
        for ok in [
            "https://gitlab.example.com",
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:9000",
            "http://localhost:3000",
            "http://LOCALHOST",
        ] {
            check_transport(&url(ok), false).expect(ok);
        }
        for bad in [
            "http://gitlab.example.com",
            "http://10.0.0.1",
            "http://[::2]",
        ] {
            let error = check_transport(&url(bad), false).expect_err(bad);
            assert!(error.message.starts_with("url: "), "{}", error.message);
            assert!(error.message.contains("insecure_http"), "{}", error.message);
            check_transport(&url(bad), true).expect("allowed by insecure_http");
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::time::{Duration, SystemTime};

    use reqwest::header::{HeaderMap, HeaderValue};

    pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).expect("header value"));
        }
        map
    }

    pub(crate) fn at(unix: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix)
    }
}
