//! GitHub REST endpoints (git data, contents, compare, pulls, merges, checks, reviews, comments).

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::model::GhRepo;
use super::{Ctx, Env, authenticate, with_github};
use crate::state::{Shared, SimState};

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
}

/// Authenticates the request and builds its context.
pub fn auth(state: &SimState, headers: &HeaderMap) -> ApiResult<Ctx> {
    let login = authenticate(state, headers)?;
    Ok(Ctx::new(state, &login))
}

/// Runs `f` on a repository (404 when it does not exist), sending queued webhooks afterwards.
pub fn with_repo<R>(
    state: &SimState,
    owner: &str,
    name: &str,
    f: impl FnOnce(&mut GhRepo, &mut Env) -> ApiResult<R>,
) -> ApiResult<R> {
    with_github(state, |gh| {
        let (r, env) = gh.repo_env(owner, name).ok_or_else(ApiError::not_found)?;
        f(r, env)
    })
}

/// A JSON response with a status.
pub fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// A pull-request or issue number from the path (404 when not a number).
pub fn number(s: &str) -> ApiResult<u64> {
    s.parse().map_err(|_| ApiError::not_found())
}

/// A query parameter.
pub fn query_param(query: &Option<String>, key: &str) -> Option<String> {
    let q = query.as_deref()?;
    q.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

/// Decodes `%XX` escapes and `+` in a query value.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `page` / `per_page` slicing (GitHub defaults: 30 per page, at most 100).
pub fn paginate<T>(items: Vec<T>, query: &Option<String>) -> Vec<T> {
    let per_page = query_param(query, "per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page = query_param(query, "page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_helpers() {
        let q = Some("head=octo%3Afeature&state=all&x".to_string());
        assert_eq!(query_param(&q, "head").as_deref(), Some("octo:feature"));
        assert_eq!(query_param(&q, "state").as_deref(), Some("all"));
        assert_eq!(query_param(&q, "x").as_deref(), Some(""));
        assert_eq!(query_param(&q, "nope"), None);
        assert_eq!(percent_decode("a%2Fb+c%"), "a/b c%");
        let q = Some("per_page=2&page=2".to_string());
        assert_eq!(paginate(vec![1, 2, 3, 4, 5], &q), vec![3, 4]);
    }
}
