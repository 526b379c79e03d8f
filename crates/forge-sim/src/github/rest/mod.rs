//! GitHub REST endpoints (git data, contents, compare, pulls, merges, checks, reviews, comments).

use axum::Router;
use axum::extract::{FromRequestParts, OriginalUri, Path};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::model::GhRepo;
use super::{Ctx, Env, GithubState, authenticate, repo_key, with_github};
use crate::state::Shared;

pub mod actions;
pub mod checks;
pub mod git;
pub mod pulls;
pub mod rules;

/// All REST routes.
pub fn router() -> Router<Shared> {
    git::router()
        .merge(pulls::router())
        .merge(checks::router())
        .merge(rules::router())
        .merge(actions::router())
}

/// The authenticated caller of a REST route: its context (sim time, base URL, login).
/// Rejects with 401 "Bad credentials" as GitHub does.
pub struct Caller(pub Ctx);

impl FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> ApiResult<Caller> {
        let login = authenticate(state, &parts.headers)?;
        Ok(Caller(Ctx::new(state, &login)))
    }
}

/// The `{owner}/{repo}` every repository route starts with.
#[derive(Deserialize)]
struct RepoSegments {
    owner: String,
    repo: String,
}

/// An authenticated call on one repository (`/repos/{owner}/{repo}/...`), with the route's
/// further path segments deserialized into `Segments` (a struct naming them, `()` for none).
///
/// Extraction checks in the order GitHub answers: a malformed path first (axum's 400), then the
/// credentials (401), then the further segments; one that does not parse (a pull-request number
/// that is not a number) names nothing, so it is a 404. Whether the repository exists is only
/// known under the state lock, in [`RepoTarget::with_repo`].
pub struct RepoCall<Segments = ()> {
    pub ctx: Ctx,
    pub segments: Segments,
    pub target: RepoTarget,
    /// The request's URI (path and query), for paging and `Link` headers.
    pub uri: Uri,
}

impl<Segments: DeserializeOwned + Send> FromRequestParts<Shared> for RepoCall<Segments> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Response> {
        let Path(repository) = Path::<RepoSegments>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Caller(ctx) = Caller::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(segments) = Path::<Segments>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::not_found().into_response())?;
        let OriginalUri(uri) = OriginalUri::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(RepoCall {
            ctx,
            segments,
            uri,
            target: RepoTarget {
                state: state.clone(),
                owner: repository.owner,
                name: repository.repo,
            },
        })
    }
}

/// `{number}`: a pull request (the issue routes take the same number).
#[derive(Deserialize)]
pub struct NumberSegment {
    pub number: u64,
}

/// `{id}`: a comment or a check run.
#[derive(Deserialize)]
pub struct IdSegment {
    pub id: u64,
}

/// `{reference}`: a branch, a ref or a commit sha.
#[derive(Deserialize)]
pub struct ReferenceSegment {
    pub reference: String,
}

/// `{sha}`: a git object.
#[derive(Deserialize)]
pub struct ShaSegment {
    pub sha: String,
}

/// `{branch}`: a branch name (slashes included).
#[derive(Deserialize)]
pub struct BranchSegment {
    pub branch: String,
}

/// The repository a call names, not yet looked up.
pub struct RepoTarget {
    state: Shared,
    owner: String,
    name: String,
}

impl RepoTarget {
    /// Runs `f` on the repository (404 when it does not exist), sending queued webhooks
    /// afterwards.
    pub fn with_repo<R>(
        &self,
        f: impl FnOnce(&mut GhRepo, &mut Env) -> ApiResult<R>,
    ) -> ApiResult<R> {
        with_github(&self.state, |github| {
            let (repo, env) = github
                .repo_env(&self.owner, &self.name)
                .ok_or_else(ApiError::not_found)?;
            f(repo, env)
        })
    }

    /// Runs `f` on the whole GitHub state with the repository's map key, for the routes that
    /// also reach state kept beside the repository (asynchronous merges).
    pub fn with_github<R>(&self, f: impl FnOnce(&mut GithubState, &str) -> R) -> R {
        let key = repo_key(&self.owner, &self.name);
        with_github(&self.state, |github| f(github, &key))
    }
}

/// A JSON response with a status.
pub fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// A query parameter.
pub fn query_param(query: &Option<String>, key: &str) -> Option<String> {
    let query = query.as_deref()?;
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (name == key).then(|| percent_decode(value))
    })
}

/// Decodes `%XX` escapes and `+` in a query value.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                let hex = |digit: u8| (digit as char).to_digit(16);
                match (hex(bytes[index + 1]), hex(bytes[index + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        index += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// GitHub's default `per_page`.
pub const DEFAULT_PER_PAGE: usize = 30;
/// GitHub's largest `per_page` (larger values are lowered to it).
pub const MAX_PER_PAGE: usize = 100;

/// One page of a list and the `Link` header that goes with it (none when everything fits on one
/// page).
pub struct Paged<T> {
    pub items: Vec<T>,
    pub link: Option<String>,
}

/// The page of `items` a request asks for with `page` (default 1) and `per_page` (default 30, at
/// most 100), and GitHub's `Link` header: `prev`, `next`, `last`, `first` in that order, each an
/// absolute URL of the request with its other query parameters and `page` set; `prev` and
/// `first` only after the first page, `next` and `last` only before the last.
pub fn paginate<T>(items: Vec<T>, base: &str, uri: &Uri) -> Paged<T> {
    let query = uri.query().map(str::to_string);
    let per_page =
        match query_param(&query, "per_page").and_then(|value| value.parse::<usize>().ok()) {
            None | Some(0) => DEFAULT_PER_PAGE,
            Some(n) => n.min(MAX_PER_PAGE),
        };
    let page = query_param(&query, "page")
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let mut links = Vec::new();
    let mut link = |page: usize, rel: &str| {
        links.push(format!("<{}>; rel=\"{rel}\"", page_url(base, uri, page)));
    };
    if page > 1 {
        link((page - 1).min(last), "prev");
    }
    if page < last {
        link(page + 1, "next");
        link(last, "last");
    }
    if page > 1 {
        link(1, "first");
    }
    let items = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    Paged {
        items,
        link: (!links.is_empty()).then(|| links.join(", ")),
    }
}

/// The absolute URL of `page`: the request's path and query with `page` set.
fn page_url(base: &str, uri: &Uri, page: usize) -> String {
    let Ok(mut url) = url::Url::parse(&format!("{base}{}", uri.path())) else {
        return format!("{base}{}?page={page}", uri.path());
    };
    let kept: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .filter(|(key, _)| key != "page")
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect();
    url.query_pairs_mut()
        .extend_pairs(kept)
        .append_pair("page", &page.to_string());
    url.to_string()
}

/// A JSON response with a status and, for a page of a longer list, its `Link` header.
pub fn reply_paged(status: StatusCode, body: Value, link: Option<String>) -> Response {
    let mut response = reply(status, body);
    if let Some(value) = link.and_then(|link| HeaderValue::from_str(&link).ok()) {
        response.headers_mut().insert(header::LINK, value);
    }
    response
}

impl<Segments> RepoCall<Segments> {
    /// The page of `items` this request asks for (see [`paginate`]).
    pub fn paginate<T>(&self, items: Vec<T>) -> Paged<T> {
        paginate(items, &self.ctx.base_url, &self.uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_helpers() {
        let query = Some("head=octo%3Afeature&state=all&x".to_string());
        assert_eq!(query_param(&query, "head").as_deref(), Some("octo:feature"));
        assert_eq!(query_param(&query, "state").as_deref(), Some("all"));
        assert_eq!(query_param(&query, "x").as_deref(), Some(""));
        assert_eq!(query_param(&query, "nope"), None);
        assert_eq!(percent_decode("a%2Fb+c%"), "a/b c%");
        let uri: Uri = "/repos/o/r/pulls?state=all&per_page=2&page=2"
            .parse()
            .expect("uri");
        let page = paginate(vec![1, 2, 3, 4, 5], "http://sim", &uri);
        assert_eq!(page.items, vec![3, 4]);
        let url =
            |page: u32| format!("http://sim/repos/o/r/pulls?state=all&per_page=2&page={page}");
        assert_eq!(
            page.link.as_deref(),
            Some(
                format!(
                    "<{}>; rel=\"prev\", <{}>; rel=\"next\", <{}>; rel=\"last\", <{}>; rel=\"first\"",
                    url(1),
                    url(3),
                    url(3),
                    url(1)
                )
                .as_str()
            )
        );
        let single: Uri = "/repos/o/r/pulls".parse().expect("uri");
        assert!(paginate(vec![1], "http://sim", &single).link.is_none());
    }
}
