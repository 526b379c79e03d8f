//! Conditional requests on both forges: an `ETag` on every successful `GET` (GitLab's weak
//! and over the body only, GitHub's strong and per token), `304 Not Modified` without a body
//! for a matching `If-None-Match`, a new validator once the resource changed, none on
//! writes or GraphQL, and the 304 in the request log.

use forge_sim::github::GithubRepoSpec;
use forge_sim::testing::{ApiClient, start_sim};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::json;

use super::{REPO, create_repo};

fn etag(headers: &HeaderMap) -> String {
    headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .expect("an ETag")
        .to_string()
}

/// `GET url` with `If-None-Match: tag`: the status, the headers and the raw body.
async fn conditional_get(
    api: &ApiClient,
    auth: (&str, &str),
    url: &str,
    tag: &str,
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let response = api
        .client
        .get(format!("{}{url}", api.base))
        .header(auth.0, auth.1)
        .header("If-None-Match", tag)
        .send()
        .await
        .expect("answered");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("body").to_vec();
    (status, headers, body)
}

#[tokio::test]
async fn gitlab_answers_304_to_a_matching_if_none_match_until_the_resource_changes() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    sim.gitlab_push(project, "main", &[("a.txt", Some("a\n"))], "first")
        .expect("pushed");
    let api = ApiClient::gitlab(&sim);
    let auth = ("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN);
    let path = format!("/projects/{project}/repository/branches/main");
    let (status, headers, body) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tag = etag(&headers);
    assert!(
        tag.starts_with("W/\""),
        "GitLab's validators are weak: {tag}"
    );

    sim.clear_requests();
    let (status, headers, body) = conditional_get(&api, auth, &path, &tag).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty(), "a 304 has no body");
    assert_eq!(etag(&headers), tag);
    // Several tags, the strong spelling of a weak one among them, match too.
    let strong = tag.trim_start_matches("W/");
    let (status, _, _) = conditional_get(&api, auth, &path, &format!("\"x\", {strong}")).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    let logged: Vec<u16> = sim.requests().iter().map(|r| r.status).collect();
    assert_eq!(logged, [304, 304], "the log shows the 304s");

    // The body alone decides: another user's token gets the same validator.
    sim.add_user("other", "other-token");
    let (status, _, _) = conditional_get(&api, ("PRIVATE-TOKEN", "other-token"), &path, &tag).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);

    // A change makes a new representation: 200, a new validator.
    sim.gitlab_push(project, "main", &[("a.txt", Some("b\n"))], "second")
        .expect("pushed");
    let (status, headers, body) = conditional_get(&api, auth, &path, &tag).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    assert_ne!(etag(&headers), tag);
}

#[tokio::test]
async fn github_answers_304_per_token_and_graphql_has_no_validator() {
    let sim = start_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let api = ApiClient::github(&sim);
    let bearer = format!("Bearer {}", forge_sim::DEFAULT_TOKEN);
    let auth = ("Authorization", bearer.as_str());
    let path = format!("/repos/{REPO}");
    let (status, headers, body) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tag = etag(&headers);
    assert!(tag.starts_with('"'), "a strong validator: {tag}");
    let (status, headers, body) = conditional_get(&api, auth, &path, &tag).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(etag(&headers), tag);

    // Another token sees another validator: the one it was not given does not match.
    sim.add_user("other", "other-token");
    let (status, headers, _) =
        conditional_get(&api, ("Authorization", "Bearer other-token"), &path, &tag).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(etag(&headers), tag);

    // No validators on GraphQL (a POST).
    let response = api
        .client
        .post(format!("{}/graphql", api.base))
        .header(auth.0, auth.1)
        .json(&json!({ "query": "{ viewer { login } }" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("etag").is_none());

    // An error answer has no validator either.
    let (status, headers, _) = api.get_with_headers("/repos/octo/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(headers.get("etag").is_none());
}
