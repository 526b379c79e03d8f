//! The HTTP side of the GitHub client: URLs (REST and GraphQL),
//! authentication, one request with its timeout, and GitHub's answers turned
//! into values or [`ForgeError`]s.

use std::time::{Duration, SystemTime};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use url::Url;

use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};

/// `User-Agent` of every request (GitHub refuses requests without one).
pub use crate::http_util::USER_AGENT;

/// The REST API version every request asks for.
pub const API_VERSION: &str = "2022-11-28";

/// Page size of list requests (GitHub's maximum).
pub const PER_PAGE: usize = 100;

/// Pages a list request follows at most (`PER_PAGE` items each).
pub const MAX_PAGES: u32 = 50;

pub use crate::http_util::Call;

/// How much of a log host's error answer is read for its message.
const ERROR_BODY_BYTES: usize = 4096;
impl Call {
    /// `repos/{owner}/{repo}/...rest` for a project `owner/repo`.
    pub fn repo(method: Method, repo: &Repo<'_>, rest: &[&str]) -> Self {
        let mut segments = vec!["repos", repo.owner, repo.name];
        segments.extend_from_slice(rest);
        Self::new(method, &segments)
    }

    /// Appends a branch name as path segments, one per `/`-separated part
    /// (GitHub's `git/ref/heads/{ref}` and `branches/{branch}` take the
    /// branch with its slashes).
    pub fn branch_path(mut self, branch: &str) -> Self {
        self.segments.extend(branch.split('/').map(str::to_owned));
        self
    }
}

/// A project `owner/repo`, split.
#[derive(Debug, Clone, Copy)]
pub struct Repo<'a> {
    pub owner: &'a str,
    pub name: &'a str,
}

impl<'a> Repo<'a> {
    /// Errors when `project` is not `owner/repo`.
    pub fn parse(project: &'a str) -> ForgeResult<Self> {
        match project.split_once('/') {
            Some((owner, name)) if !owner.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self { owner, name })
            }
            _ => Err(ForgeError::invalid(format!(
                "project: {project:?} is not a GitHub repository (owner/repo)"
            ))),
        }
    }
}

/// An answer of any status kept whole, for callers that read error bodies
/// (`merge-async` answers 409 with the request it conflicts with).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The error the answer stands for.
    #[allow(
        clippy::disallowed_methods,
        reason = "Retry-After HTTP dates count from wall time"
    )]
    pub fn error(&self) -> ForgeError {
        error_from_answer(self.status, &self.headers, &self.body, SystemTime::now())
    }
}

/// The configured connection to one GitHub (or GitHub Enterprise) API.
pub struct Http {
    client: reqwest::Client,
    /// Sends no credentials and no GitHub headers: for the short-lived
    /// URLs GitHub redirects to (job logs), on another host.
    bare: reqwest::Client,
    /// `https://api.github.com` or `https://host/api/v3`.
    base: Url,
    /// `https://api.github.com/graphql` or `https://host/api/graphql`.
    graphql: Url,
    timeout: Duration,
    /// The `GET` answers re-read with `If-None-Match`.
    etags: crate::http_util::Etags,
    /// The token's rate-limit budgets, as GitHub's answers report them.
    pub(crate) budgets: crate::budget::Budgets,
}

impl Http {
    /// `url` is the REST base (`https://api.github.com`, GHE
    /// `https://host/api/v3`). Errors name the field.
    pub fn new(url: &str, token: &str, timeout: Duration) -> ForgeResult<Self> {
        let (base, graphql) = api_urls(url)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            crate::http_util::secret_header(&format!("Bearer {token}"))?,
        );
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        headers.insert(
            "x-github-api-version",
            HeaderValue::from_static(API_VERSION),
        );
        let client = crate::http_util::client(headers, timeout)?;
        let bare = crate::http_util::client(HeaderMap::new(), timeout)?;
        Ok(Self {
            client,
            bare,
            base,
            graphql,
            timeout,
            etags: crate::http_util::Etags::default(),
            budgets: crate::budget::Budgets::default(),
        })
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn graphql_url(&self) -> &Url {
        &self.graphql
    }

    /// Sends the call and returns whatever GitHub answered (any status).
    pub async fn answer(&self, call: &Call) -> ForgeResult<Answer> {
        self.read(call.build(&self.client, &self.base), &call.describe())
            .await
    }

    /// Sends `request` and reads the whole answer, any status but a
    /// redirect (an error naming the `Location`). A `GET` whose answer is
    /// kept (see [`crate::http_util::Etags`]) is sent with `If-None-Match`,
    /// and a `304 Not Modified` (which GitHub does not count against the
    /// rate limit) reads as the kept answer.
    async fn read(&self, request: RequestBuilder, describe: &str) -> ForgeResult<Answer> {
        let mut request = request
            .build()
            .map_err(|e| self.transport_error(describe, &e))?;
        let url = request.url().to_string();
        let is_get = request.method() == Method::GET;
        let kept = self.etags.prepare(&mut request);
        let response = crate::metrics::observe(
            "github",
            &crate::metrics::host_label(&self.base),
            describe,
            self.client.execute(request),
        )
        .await
        .map_err(|e| self.transport_error(describe, &e))?;
        self.budgets.update(response.headers());
        let status = response.status();
        let headers = response.headers().clone();
        if status == StatusCode::NOT_MODIFIED
            && let Some(kept) = kept
        {
            return Ok(Answer {
                status: kept.status,
                headers: kept.headers.clone(),
                body: kept.body.clone(),
            });
        }
        if status.is_redirection() {
            // Never followed (see `http_util::client`), never read as an answer.
            return Err(crate::http_util::redirect_error(
                "GitHub", describe, status, &headers,
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(describe, &e))?;
        if is_get {
            self.etags.store(&url, status, &headers, &body);
        }
        Ok(Answer {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    /// The last `max` bytes of a text GitHub serves behind a redirect (a
    /// job's log): the call (with the token) answers a redirect, whose
    /// `Location` is fetched once without the token or any GitHub header,
    /// and streamed into the tail ([`crate::http_util::Tail`]). A direct
    /// 2xx answer is read the same way. A second redirect is not followed,
    /// and a `Location` leaving https (unless the API itself is plain http)
    /// is refused.
    pub async fn tail_behind_redirect(&self, call: &Call, max: usize) -> ForgeResult<String> {
        let describe = call.describe();
        let response = crate::metrics::observe(
            "github",
            &crate::metrics::host_label(&self.base),
            &describe,
            call.build(&self.client, &self.base).send(),
        )
        .await
        .map_err(|e| self.transport_error(&describe, &e))?;
        self.budgets.update(response.headers());
        let status = response.status();
        let response = if status.is_redirection() {
            let headers = response.headers().clone();
            let location = crate::http_util::header(&headers, "location")
                .ok_or_else(|| {
                    ForgeError::rejected(
                        Some(status.as_u16()),
                        format!("{describe}: GitHub answered {status} without a Location"),
                    )
                })?
                .to_owned();
            let target = response.url().join(&location).map_err(|e| {
                ForgeError::rejected(
                    Some(status.as_u16()),
                    format!("{describe}: Location {location:?} is not a URL: {e}"),
                )
            })?;
            let secure_enough = target.scheme() == "https"
                || (target.scheme() == "http" && self.base.scheme() == "http");
            if !secure_enough {
                return Err(ForgeError::rejected(
                    Some(status.as_u16()),
                    format!(
                        "{describe}: GitHub redirected to {:?}, which is not https",
                        target.scheme()
                    ),
                ));
            }
            // The log host: no token, no query or path in the messages
            // (the query is the URL's signature).
            let host = target.host_str().unwrap_or_default().to_owned();
            let what = format!("GET {host} (the log GitHub redirected to)");
            // reqwest's error names the URL, signature and all: drop it.
            let followed = self
                .bare
                .get(target)
                .send()
                .await
                .map_err(|e| self.transport_error(&what, &e.without_url()))?;
            let answered = followed.status();
            if answered.is_redirection() {
                return Err(crate::http_util::redirect_error(
                    "the log host",
                    &what,
                    answered,
                    followed.headers(),
                ));
            }
            if !answered.is_success() {
                // The start of the error body is enough to say why.
                let mut body = Vec::new();
                let mut followed = followed;
                while body.len() < ERROR_BODY_BYTES {
                    match followed.chunk().await {
                        Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                        Ok(None) | Err(_) => break,
                    }
                }
                body.truncate(ERROR_BODY_BYTES);
                return Err(ForgeError::from_status(
                    answered.as_u16(),
                    format!(
                        "{what}: {}",
                        crate::http_util::fallback_message(answered, &body)
                    ),
                ));
            }
            followed
        } else if status.is_success() {
            response
        } else {
            let headers = response.headers().clone();
            let body = response
                .bytes()
                .await
                .map_err(|e| self.transport_error(&describe, &e))?;
            let answer = Answer {
                status,
                headers,
                body: body.to_vec(),
            };
            let error = answer.error();
            return Err(ForgeError {
                message: format!("{describe}: {}", error.message),
                ..error
            });
        };
        let mut response = response;
        let mut tail = crate::http_util::Tail::new(max);
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(&describe, &e.without_url()))?
        {
            tail.push(&chunk);
        }
        Ok(tail.finish())
    }

    /// Sends the call; a 2xx body is returned, anything else is an error.
    pub async fn send(&self, call: &Call) -> ForgeResult<(StatusCode, Vec<u8>)> {
        let answer = self.answer(call).await?;
        if answer.status.is_success() {
            Ok((answer.status, answer.body))
        } else {
            Err(answer.error())
        }
    }

    /// Sends the call and decodes the 2xx JSON body as `T`.
    pub async fn json<T: DeserializeOwned>(&self, call: &Call, what: &str) -> ForgeResult<T> {
        let (status, body) = self.send(call).await?;
        decode(&body, status, &call.describe(), what)
    }

    /// Every page of a list endpoint answering a JSON array (see
    /// [`Http::pages`]).
    pub async fn list<T: DeserializeOwned>(&self, call: Call, what: &str) -> ForgeResult<Vec<T>> {
        let pages: Vec<Vec<T>> = self.pages(call, what).await?;
        Ok(pages.into_iter().flatten().collect())
    }

    /// Every page of a list endpoint, each decoded as `W` (an array, or
    /// an object wrapping one such as check runs'): the first with
    /// `per_page` = [`PER_PAGE`], then each `Link: rel="next"` GitHub
    /// sends until there is none, at most [`MAX_PAGES`] pages. A next
    /// link to another server than the configured one is refused (the
    /// token is never sent elsewhere).
    pub async fn pages<W: DeserializeOwned>(&self, call: Call, what: &str) -> ForgeResult<Vec<W>> {
        let first = Call {
            method: call.method.clone(),
            segments: call.segments.clone(),
            query: call
                .query
                .iter()
                .cloned()
                .chain([("per_page", PER_PAGE.to_string())])
                .collect(),
            body: None,
        };
        let mut describe = first.describe();
        let mut request = first.build(&self.client, &self.base);
        let mut pages = Vec::new();
        for _ in 0..MAX_PAGES {
            let answer = self.read(request, &describe).await?;
            if !answer.status.is_success() {
                return Err(answer.error());
            }
            pages.push(decode(&answer.body, answer.status, &describe, what)?);
            let Some(next) = next_link(&answer.headers) else {
                return Ok(pages);
            };
            let next = Url::parse(&next)
                .ok()
                .filter(|next| next.origin() == self.base.origin())
                .ok_or_else(|| {
                    ForgeError::rejected(
                        Some(answer.status.as_u16()),
                        format!(
                            "{describe}: GitHub's next page {next:?} is not on {}",
                            self.base
                        ),
                    )
                })?;
            describe = format!("GET {}", next.path());
            request = self.client.get(next);
        }
        tracing::warn!(
            request = %call.describe(),
            max_pages = MAX_PAGES,
            "GitHub list longer than {MAX_PAGES} pages; reading the first {MAX_PAGES}"
        );
        Ok(pages)
    }

    /// One GraphQL request. The answer is GitHub's whole body
    /// (`data` and/or `errors`); a non-2xx status or a body that is not a
    /// JSON object is an error. Whether `errors` matter is the caller's call.
    pub async fn graphql(&self, query: &str, variables: Value) -> ForgeResult<Value> {
        let describe = "POST /graphql";
        let request = self
            .client
            .post(self.graphql.clone())
            .json(&json!({ "query": query, "variables": variables }));
        let answer = self.read(request, describe).await?;
        if !answer.status.is_success() {
            let error = answer.error();
            return Err(ForgeError {
                message: format!("{describe}: {}", error.message),
                ..error
            });
        }
        let (status, body) = (answer.status, answer.body);
        let value: Value = decode(&body, status, describe, "a GraphQL response")?;
        if !value.is_object() {
            return Err(ForgeError::rejected(
                Some(status.as_u16()),
                format!("{describe}: GitHub answered {status} with a body that is not an object"),
            ));
        }
        Ok(value)
    }

    fn transport_error(&self, request: &str, error: &reqwest::Error) -> ForgeError {
        crate::http_util::transport_error("GitHub", request, self.timeout, error)
    }
}

/// The URL of `rel="next"` in a `Link` header
/// (`<url>; rel="next", <url>; rel="last"`), if any. URLs are read whole
/// between `<` and `>`, so commas inside them do not split entries.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    let mut rest = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>')?;
        let url = &rest[open + 1..close];
        rest = &rest[close + 1..];
        let params = rest.split('<').next().unwrap_or("");
        let is_next = params.split(';').any(|param| {
            let Some((key, value)) = param.split_once('=') else {
                return false;
            };
            key.trim().eq_ignore_ascii_case("rel")
                && value
                    .trim()
                    .trim_end_matches(',')
                    .trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|rel| rel.eq_ignore_ascii_case("next"))
        });
        if is_next {
            return Some(url.to_owned());
        }
    }
    None
}

/// The REST base and the GraphQL endpoint from the configured URL.
///
/// `https://api.github.com` → `…/graphql`; a GitHub Enterprise REST base
/// `https://host/api/v3` → `https://host/api/graphql`; anything else
/// (the simulator) → `{url}/graphql`. `https://github.com` is read as
/// `https://api.github.com`.
pub fn api_urls(url: &str) -> ForgeResult<(Url, Url)> {
    let mut base = crate::http_util::parse_base_url(url)?;
    if base.host_str() == Some("github.com") && base.path().trim_matches('/').is_empty() {
        base = Url::parse("https://api.github.com").expect("a valid URL");
    }
    let path = base.path().trim_end_matches('/').to_owned();
    let graphql_path = match path.strip_suffix("/api/v3") {
        Some(prefix) => format!("{prefix}/api/graphql"),
        None => format!("{path}/graphql"),
    };
    let mut graphql = base.clone();
    graphql.set_path(&graphql_path);
    base.set_path(if path.is_empty() { "/" } else { &path });
    Ok((base, graphql))
}

/// Decodes a 2xx JSON body; a body that does not fit is `Rejected`.
pub fn decode<T: DeserializeOwned>(
    body: &[u8],
    status: StatusCode,
    request: &str,
    what: &str,
) -> ForgeResult<T> {
    crate::http_util::decode("GitHub", body, status, request, what)
}

/// The error for a non-2xx answer: the kind from the status, GitHub's own
/// message, and for rate limits (429, or 403 with no requests left or a
/// secondary-limit message) and 503 when to retry.
pub fn error_from_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> ForgeError {
    let message =
        github_message(body).unwrap_or_else(|| crate::http_util::fallback_message(status, body));
    let remaining = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN
            && (remaining == Some("0")
                || headers.contains_key("retry-after")
                || message.to_ascii_lowercase().contains("rate limit")));
    if rate_limited {
        return ForgeError::new(ForgeErrorKind::RateLimited, Some(status.as_u16()), message)
            .with_retry_after(retry_after(headers, now));
    }
    let error = ForgeError::from_status(status.as_u16(), message);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        error.with_retry_after(retry_after(headers, now))
    } else {
        error
    }
}

/// GitHub's error text: `message`, followed by the `errors[]` details
/// (objects with `message` or `field`/`code`, or plain strings).
pub fn github_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    let mut parts: Vec<String> = Vec::new();
    if let Some(Value::String(message)) = object.get("message")
        && !message.trim().is_empty()
    {
        parts.push(message.trim().to_owned());
    }
    if let Some(Value::Array(errors)) = object.get("errors") {
        for error in errors {
            let text = match error {
                Value::String(text) => text.clone(),
                Value::Object(fields) => match fields.get("message").and_then(Value::as_str) {
                    Some(message) => message.to_owned(),
                    None => [
                        fields.get("resource").and_then(Value::as_str),
                        fields.get("field").and_then(Value::as_str),
                        fields.get("code").and_then(Value::as_str),
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" "),
                },
                other => other.to_string(),
            };
            if !text.is_empty() {
                parts.push(text);
            }
        }
    }
    if parts.is_empty() {
        // `{"status": "failed", "details": {"message": ...}}` (merge-async).
        let details = object
            .get("details")
            .and_then(|d| d.get("message"))
            .and_then(Value::as_str)?;
        parts.push(details.to_owned());
    }
    Some(parts.join(": "))
}

/// `Retry-After` (delay seconds or an HTTP date), else `X-RateLimit-Reset`
/// (a Unix time).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    use crate::http_util::{header, retry_after_header, unix_seconds};
    if let Some(delay) = retry_after_header(headers, now) {
        return Some(delay);
    }
    let reset = header(headers, "x-ratelimit-reset")?.parse::<u64>().ok()?;
    Some(Duration::from_secs(reset.saturating_sub(unix_seconds(now))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_util::test_support::{at, headers};

    #[test]
    fn the_next_link_is_read_whole_whatever_the_order() {
        let link = |value: &str| headers(&[("link", value)]);
        let github = "<https://api.github.com/repositories/1/issues?page=2>; rel=\"prev\", \
                      <https://api.github.com/repositories/1/issues?labels=a,b&page=4>; rel=\"next\", \
                      <https://api.github.com/repositories/1/issues?page=9>; rel=\"last\"";
        assert_eq!(
            next_link(&link(github)).as_deref(),
            Some("https://api.github.com/repositories/1/issues?labels=a,b&page=4")
        );
        let last_page = "<https://x/p?page=1>; rel=\"prev\", <https://x/p?page=1>; rel=\"first\"";
        assert_eq!(next_link(&link(last_page)), None);
        assert_eq!(
            next_link(&link("<https://x/p?page=2>;rel=next")).as_deref(),
            Some("https://x/p?page=2")
        );
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    #[test]
    fn rest_and_graphql_urls() {
        let cases = [
            (
                "https://api.github.com",
                "https://api.github.com/",
                "https://api.github.com/graphql",
            ),
            (
                "https://api.github.com/",
                "https://api.github.com/",
                "https://api.github.com/graphql",
            ),
            (
                "https://github.com",
                "https://api.github.com/",
                "https://api.github.com/graphql",
            ),
            (
                "https://ghe.example.com/api/v3",
                "https://ghe.example.com/api/v3",
                "https://ghe.example.com/api/graphql",
            ),
            (
                "https://ghe.example.com/api/v3/",
                "https://ghe.example.com/api/v3",
                "https://ghe.example.com/api/graphql",
            ),
            (
                "http://127.0.0.1:8080",
                "http://127.0.0.1:8080/",
                "http://127.0.0.1:8080/graphql",
            ),
        ];
        for (input, rest, graphql) in cases {
            let (base, gql) = api_urls(input).expect(input);
            assert_eq!(base.as_str(), rest, "{input}");
            assert_eq!(gql.as_str(), graphql, "{input}");
        }
        for bad in ["", "api.github.com", "ftp://host", "https://host/?a=b"] {
            let error = api_urls(bad).expect_err(bad);
            assert_eq!(error.kind, ForgeErrorKind::Invalid);
            assert!(error.message.starts_with("url: "), "{}", error.message);
        }
    }

    #[test]
    fn segments_are_encoded_and_branches_keep_their_slashes() {
        let http = Http::new(
            "https://ghe.example.com/api/v3",
            "t",
            Duration::from_secs(1),
        )
        .expect("client");
        let repo = Repo::parse("octo/app").expect("repo");
        let call = Call::repo(Method::GET, &repo, &["git", "ref", "heads"]).branch_path("wq/x y");
        assert_eq!(
            crate::http_util::join(http.base(), &call.segments).as_str(),
            "https://ghe.example.com/api/v3/repos/octo/app/git/ref/heads/wq/x%20y"
        );
        let call = Call::repo(Method::GET, &repo, &["commits", "wq/x"]);
        assert_eq!(
            crate::http_util::join(http.base(), &call.segments).as_str(),
            "https://ghe.example.com/api/v3/repos/octo/app/commits/wq%2Fx"
        );
        for bad in ["octo", "octo/", "/app", "a/b/c"] {
            assert_eq!(
                Repo::parse(bad).expect_err(bad).kind,
                ForgeErrorKind::Invalid
            );
        }
    }

    #[test]
    fn messages_include_validation_errors() {
        assert_eq!(
            github_message(br#"{"message":"Reference already exists","documentation_url":"x"}"#),
            Some("Reference already exists".into())
        );
        assert_eq!(
            github_message(
                br#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."}]}"#
            ),
            Some("Validation Failed: A pull request already exists for o:b.".into())
        );
        assert_eq!(
            github_message(
                br#"{"message":"Validation Failed","errors":[{"resource":"Label","field":"name","code":"invalid"}]}"#
            ),
            Some("Validation Failed: Label name invalid".into())
        );
        assert_eq!(
            github_message(
                br#"{"status":"failed","details":{"message":"Pull request is closed."}}"#
            ),
            Some("Pull request is closed.".into())
        );
        assert_eq!(github_message(b"<html>"), None);
    }

    #[test]
    fn rate_limits_primary_and_secondary() {
        let now = at(1_700_000_000);
        let primary = error_from_answer(
            StatusCode::FORBIDDEN,
            &headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1700000042"),
            ]),
            br#"{"message":"API rate limit exceeded for user ID 1."}"#,
            now,
        );
        assert_eq!(primary.kind, ForgeErrorKind::RateLimited);
        assert_eq!(primary.retry_after, Some(Duration::from_secs(42)));
        let secondary = error_from_answer(
            StatusCode::FORBIDDEN,
            &headers(&[("retry-after", "60")]),
            br#"{"message":"You have exceeded a secondary rate limit."}"#,
            now,
        );
        assert_eq!(secondary.kind, ForgeErrorKind::RateLimited);
        assert_eq!(secondary.retry_after, Some(Duration::from_secs(60)));
        let forbidden = error_from_answer(
            StatusCode::FORBIDDEN,
            &headers(&[("x-ratelimit-remaining", "4999")]),
            br#"{"message":"Resource not accessible by integration"}"#,
            now,
        );
        assert_eq!(forbidden.kind, ForgeErrorKind::Unauthorized);
        assert_eq!(forbidden.retry_after, None);
        let limited = error_from_answer(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "3")]),
            b"",
            now,
        );
        assert_eq!(limited.kind, ForgeErrorKind::RateLimited);
        assert_eq!(limited.retry_after, Some(Duration::from_secs(3)));
        let unavailable = error_from_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &headers(&[("retry-after", "Tue, 14 Nov 2023 22:13:50 GMT")]),
            b"",
            now,
        );
        assert_eq!(unavailable.kind, ForgeErrorKind::Unavailable);
        assert_eq!(unavailable.retry_after, Some(Duration::from_secs(30)));
    }
}
