//! GitHub REST endpoints (git data, contents, compare, pulls, merges, checks, reviews, comments).

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
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
        Ok(RepoCall {
            ctx,
            segments,
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

/// `page` / `per_page` slicing (GitHub defaults: 30 per page, at most 100).
pub fn paginate<T>(items: Vec<T>, query: &Option<String>) -> Vec<T> {
    let per_page = query_param(query, "per_page")
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page = query_param(query, "page")
        .and_then(|value| value.parse::<usize>().ok())
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
        let query = Some("head=octo%3Afeature&state=all&x".to_string());
        assert_eq!(query_param(&query, "head").as_deref(), Some("octo:feature"));
        assert_eq!(query_param(&query, "state").as_deref(), Some("all"));
        assert_eq!(query_param(&query, "x").as_deref(), Some(""));
        assert_eq!(query_param(&query, "nope"), None);
        assert_eq!(percent_decode("a%2Fb+c%"), "a/b c%");
        let query = Some("per_page=2&page=2".to_string());
        assert_eq!(paginate(vec![1, 2, 3, 4, 5], &query), vec![3, 4]);
    }
}
