//! Primary rate limits: off by default (no headers); once configured, each answer reports
//! the token's budget as its forge spells it, GitHub does not count 304s and keeps GraphQL
//! apart, and a spent budget is refused (GitHub 403, GitLab 429 with `Retry-After`) until
//! the window renews.

use std::time::Duration;

use forge_sim::github::GithubRepoSpec;
use forge_sim::testing::{ApiClient, start_stepped_sim};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::json;

use super::{REPO, create_repo};

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

#[tokio::test]
async fn github_reports_its_budget_counts_no_304_and_refuses_when_spent() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let api = ApiClient::github(&sim);
    let path = format!("/repos/{REPO}");
    let (_, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(
        header(&headers, "x-ratelimit-remaining"),
        None,
        "off by default"
    );

    sim.set_rate_limit(Some((3, Duration::from_secs(3600))));
    let (status, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-ratelimit-limit").as_deref(), Some("3"));
    assert_eq!(
        header(&headers, "x-ratelimit-remaining").as_deref(),
        Some("2")
    );
    assert_eq!(header(&headers, "x-ratelimit-used").as_deref(), Some("1"));
    assert_eq!(
        header(&headers, "x-ratelimit-resource").as_deref(),
        Some("core")
    );
    let reset: i64 = header(&headers, "x-ratelimit-reset")
        .expect("reset")
        .parse()
        .expect("unix seconds");
    assert!(reset > time::OffsetDateTime::now_utc().unix_timestamp());

    // A 304 is not counted.
    let etag = header(&headers, "etag").expect("etag");
    let response = api
        .client
        .get(format!("{}{path}", api.base))
        .header(
            "Authorization",
            format!("Bearer {}", forge_sim::DEFAULT_TOKEN),
        )
        .header("If-None-Match", etag)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        header(response.headers(), "x-ratelimit-remaining").as_deref(),
        Some("2")
    );

    // GraphQL has its own budget.
    let response = api
        .client
        .post(format!("{}/graphql", api.base))
        .header(
            "Authorization",
            format!("Bearer {}", forge_sim::DEFAULT_TOKEN),
        )
        .json(&json!({ "query": "{ viewer { login } }" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(
        header(response.headers(), "x-ratelimit-resource").as_deref(),
        Some("graphql")
    );
    assert_eq!(
        header(response.headers(), "x-ratelimit-remaining").as_deref(),
        Some("2")
    );

    for remaining in ["1", "0"] {
        let (status, headers, _) = api.get_with_headers(&path).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            header(&headers, "x-ratelimit-remaining").as_deref(),
            Some(remaining)
        );
    }
    let (status, headers, body) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        header(&headers, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("API rate limit exceeded")),
        "{body}"
    );
    let logged = sim.requests().last().map(|r| r.status);
    assert_eq!(logged, Some(403), "the refusal is logged");

    // Another token has its own budget; the window renews.
    sim.add_user("other", "other-token");
    let (status, _, _) = api
        .with_auth(Some("Bearer other-token"))
        .get_with_headers(&path)
        .await;
    assert_eq!(status, StatusCode::OK);
    sim.advance(Duration::from_secs(3600));
    let (status, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "x-ratelimit-remaining").as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn gitlab_counts_every_request_and_answers_429_with_retry_after_when_spent() {
    let sim = start_stepped_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let path = format!("/projects/{project}");
    sim.set_rate_limit(Some((2, Duration::from_secs(60))));
    let (status, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "ratelimit-limit").as_deref(), Some("2"));
    assert_eq!(header(&headers, "ratelimit-observed").as_deref(), Some("1"));
    assert_eq!(
        header(&headers, "ratelimit-remaining").as_deref(),
        Some("1")
    );
    assert!(header(&headers, "ratelimit-reset").is_some());
    assert!(header(&headers, "ratelimit-resettime").is_some());
    let etag = header(&headers, "etag").expect("etag");
    // GitLab counts a 304 like any request.
    let response = api
        .client
        .get(format!("{}{path}", api.base))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .header("If-None-Match", etag)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        header(response.headers(), "ratelimit-remaining").as_deref(),
        Some("0")
    );
    let (status, headers, body) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let wait: i64 = header(&headers, "retry-after")
        .expect("retry-after")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&wait), "{wait}");
    sim.advance(Duration::from_secs(60));
    let (status, _, _) = api.get_with_headers(&path).await;
    assert_eq!(status, StatusCode::OK);
    sim.set_rate_limit(None);
    let (_, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(header(&headers, "ratelimit-remaining"), None);
}
