//! GitLab's offset pagination, shared by every list route: `page` (default 1) and `per_page`
//! (default 20, at most 100), answered with `X-Page`, `X-Per-Page`, `X-Next-Page`,
//! `X-Prev-Page`, `X-Total`, `X-Total-Pages` and a `Link` header (`prev`, `next`, `first`,
//! `last`: absolute URLs keeping the request's other query parameters).
//!
//! As GitLab does for performance, a list of more than 10,000 items answers without `X-Total`,
//! `X-Total-Pages` and the `last` link.

use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::gitlab::{ApiError, ApiResult, Params};

/// GitLab's default `per_page`.
pub const DEFAULT_PER_PAGE: u64 = 20;
/// GitLab's largest `per_page` (larger values are lowered to it).
pub const MAX_PER_PAGE: u64 = 100;
/// Above this many items GitLab leaves out the totals and the `last` link.
const COUNT_LIMIT: u64 = 10_000;

/// The page a list request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub page: u64,
    pub per_page: u64,
}

impl PageRequest {
    /// `page` and `per_page` from the parameters; 400 `"<key> is invalid"` when not numbers.
    /// A `page` below 1 is page 1; a `per_page` below 1 is the default, above 100 is 100.
    pub fn from_params(params: &Params) -> Result<PageRequest, ApiError> {
        let per_page = match params.u64("per_page")? {
            None | Some(0) => DEFAULT_PER_PAGE,
            Some(n) => n.min(MAX_PER_PAGE),
        };
        let page = params.u64("page")?.unwrap_or(1).max(1);
        Ok(PageRequest { page, per_page })
    }
}

/// One page of `items` as GitLab answers a list: the JSON array and the pagination headers.
/// `base` is the server's URL (`http://host:port`), `uri` the request's own.
pub fn paged(base: &str, uri: &Uri, request: PageRequest, items: Vec<Value>) -> Response {
    let PageRequest { page, per_page } = request;
    let total = items.len() as u64;
    let total_pages = total.div_ceil(per_page).max(1);
    let start = usize::try_from((page - 1).saturating_mul(per_page)).unwrap_or(usize::MAX);
    let body: Vec<Value> = items
        .into_iter()
        .skip(start)
        .take(usize::try_from(per_page).unwrap_or(usize::MAX))
        .collect();
    let counted = total <= COUNT_LIMIT;
    let next = (page < total_pages).then_some(page + 1);
    // As Kaminari (GitLab's paginator): no neighbours for a page past the end.
    let prev = (page > 1 && page <= total_pages).then(|| page - 1);
    let number = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    let mut response = (StatusCode::OK, axum::Json(Value::Array(body))).into_response();
    let mut headers = vec![
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-next-page", number(next)),
        ("x-prev-page", number(prev)),
    ];
    if counted {
        headers.push(("x-total", total.to_string()));
        headers.push(("x-total-pages", total_pages.to_string()));
    }
    let mut links = Vec::new();
    let mut link = |page: u64, rel: &str| {
        links.push(format!(
            "<{}>; rel=\"{rel}\"",
            page_url(base, uri, page, per_page)
        ));
    };
    if let Some(prev) = prev {
        link(prev, "prev");
    }
    if let Some(next) = next {
        link(next, "next");
    }
    link(1, "first");
    if counted {
        link(total_pages, "last");
    }
    headers.push(("link", links.join(", ")));
    let map = response.headers_mut();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            map.insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// 200 with one page of `items` (see [`paged`]).
pub fn ok_paged(base: &str, uri: &Uri, params: &Params, items: Vec<Value>) -> ApiResult {
    Ok(paged(base, uri, PageRequest::from_params(params)?, items))
}

/// The absolute URL of `page`: the request's path and query with `page` and `per_page` set,
/// parameters sorted by name as GitLab (Rails' `to_query`) writes them.
pub fn page_url(base: &str, uri: &Uri, page: u64, per_page: u64) -> String {
    let Ok(mut url) = url::Url::parse(&format!("{base}{}", uri.path())) else {
        return format!("{base}{}?page={page}&per_page={per_page}", uri.path());
    };
    let mut pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .filter(|(key, _)| key != "page" && key != "per_page")
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .chain([
                ("page".to_string(), page.to_string()),
                ("per_page".to_string(), per_page.to_string()),
            ])
            .collect();
    pairs.sort_by(|left, right| left.0.cmp(&right.0));
    url.query_pairs_mut().extend_pairs(pairs);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_keep_other_parameters_and_name_neighbouring_pages() {
        let uri: Uri = "/api/v4/projects/1/merge_requests?state=opened&page=2&per_page=2&labels=a"
            .parse()
            .expect("uri");
        let items: Vec<Value> = (0..5).map(Value::from).collect();
        let request = PageRequest {
            page: 2,
            per_page: 2,
        };
        let response = paged("http://sim", &uri, request, items);
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(header("x-next-page"), "3");
        assert_eq!(header("x-prev-page"), "1");
        assert_eq!(header("x-total"), "5");
        assert_eq!(header("x-total-pages"), "3");
        let base = "http://sim/api/v4/projects/1/merge_requests?labels=a";
        assert_eq!(
            header("link"),
            format!(
                "<{base}&page=1&per_page=2&state=opened>; rel=\"prev\", \
                 <{base}&page=3&per_page=2&state=opened>; rel=\"next\", \
                 <{base}&page=1&per_page=2&state=opened>; rel=\"first\", \
                 <{base}&page=3&per_page=2&state=opened>; rel=\"last\""
            )
        );
    }
}
