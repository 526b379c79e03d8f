//! Pagination of every list route as the forges page them: GitLab's `X-*` headers and `Link`
//! (`page`, `per_page`), GitHub's `Link` (`page`, `per_page`) and GraphQL cursors. Each list
//! here holds more than one page and is read by following `rel="next"` as clients do.

use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::testing::{ApiClient, start_sim, start_stepped_sim};
use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{REPO, create_repo};

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// The `Link` header's (rel, url) pairs, in order.
fn links(headers: &HeaderMap) -> Vec<(String, String)> {
    let link = header(headers, "link");
    if link.is_empty() {
        return Vec::new();
    }
    link.split(", ")
        .map(|part| {
            let (url, rel) = part.split_once(">; rel=\"").expect("<url>; rel=\"..\"");
            (
                rel.trim_end_matches('"').to_string(),
                url.trim_start_matches('<').to_string(),
            )
        })
        .collect()
}

fn link<'a>(links: &'a [(String, String)], rel: &str) -> Option<&'a str> {
    links
        .iter()
        .find(|(name, _)| name == rel)
        .map(|(_, url)| url.as_str())
}

/// Reads a GitLab list from `path` two items a page, following `rel="next"`, checking every
/// page's headers (`X-Page`, `X-Per-Page`, `X-Total`, `X-Total-Pages`, `X-Next-Page`,
/// `X-Prev-Page`, `Link` with the request's other parameters); every item.
async fn gitlab_walk(api: &ApiClient, path: &str, total: usize) -> Vec<Value> {
    assert!(total > 2, "{path}: more than one page");
    let separator = if path.contains('?') { '&' } else { '?' };
    let first = format!("{path}{separator}per_page=2");
    let pages = total.div_ceil(2);
    let mut url = first.clone();
    let mut items = Vec::new();
    for page in 1..=pages {
        let (status, headers, body) = api.get_with_headers(&url).await;
        assert_eq!(status, StatusCode::OK, "{url}: {body}");
        let chunk = body.as_array().expect("a JSON array").clone();
        assert_eq!(chunk.len(), 2.min(total - items.len()), "{url}");
        items.extend(chunk);
        let expected = |n: usize| {
            if n >= 1 && n <= pages {
                n.to_string()
            } else {
                String::new()
            }
        };
        assert_eq!(header(&headers, "x-page"), page.to_string(), "{url}");
        assert_eq!(header(&headers, "x-per-page"), "2", "{url}");
        assert_eq!(header(&headers, "x-total"), total.to_string(), "{url}");
        assert_eq!(
            header(&headers, "x-total-pages"),
            pages.to_string(),
            "{url}"
        );
        assert_eq!(header(&headers, "x-next-page"), expected(page + 1), "{url}");
        assert_eq!(header(&headers, "x-prev-page"), expected(page - 1), "{url}");
        let links = links(&headers);
        let rels: Vec<&str> = links.iter().map(|(rel, _)| rel.as_str()).collect();
        let mut wanted = Vec::new();
        if page > 1 {
            wanted.push("prev");
        }
        if page < pages {
            wanted.push("next");
        }
        wanted.extend(["first", "last"]);
        assert_eq!(rels, wanted, "{url}");
        for (rel, target) in &links {
            assert!(target.starts_with("http://"), "{rel} is absolute: {target}");
            assert!(
                target.contains("per_page=2"),
                "{rel} keeps per_page: {target}"
            );
            for kept in path
                .split_once('?')
                .map_or("", |(_, query)| query)
                .split('&')
            {
                assert!(target.contains(kept), "{rel} keeps {kept}: {target}");
            }
        }
        assert!(link(&links, "last").is_some_and(|last| last.contains(&format!("page={pages}"))));
        match link(&links, "next") {
            Some(next) => url = next.to_string(),
            None => assert_eq!(page, pages, "{path}: no next link before the last page"),
        }
    }
    assert_eq!(items.len(), total, "{path}");
    items
}

/// Reads a GitHub list from `path` two items a page, following `rel="next"`, checking the
/// `Link` relations GitHub sends on each page; every item (`key`: the array's field when the
/// answer is an object, like check runs').
async fn github_walk(api: &ApiClient, path: &str, key: Option<&str>, total: usize) -> Vec<Value> {
    assert!(total > 2, "{path}: more than one page");
    let separator = if path.contains('?') { '&' } else { '?' };
    let pages = total.div_ceil(2);
    let mut url = format!("{path}{separator}per_page=2");
    let mut items = Vec::new();
    for page in 1..=pages {
        let (status, headers, body) = api.get_with_headers(&url).await;
        assert_eq!(status, StatusCode::OK, "{url}: {body}");
        let list = match key {
            Some(key) => body[key].clone(),
            None => body.clone(),
        };
        let chunk = list.as_array().expect("a JSON array").clone();
        assert_eq!(chunk.len(), 2.min(total - items.len()), "{url}: {body}");
        items.extend(chunk);
        let links = links(&headers);
        let rels: Vec<&str> = links.iter().map(|(rel, _)| rel.as_str()).collect();
        let mut wanted = Vec::new();
        if page > 1 {
            wanted.push("prev");
        }
        if page < pages {
            wanted.extend(["next", "last"]);
        }
        if page > 1 {
            wanted.push("first");
        }
        assert_eq!(rels, wanted, "{url}");
        for (rel, target) in &links {
            assert!(target.starts_with("http://"), "{rel} is absolute: {target}");
            assert!(
                target.contains("per_page=2"),
                "{rel} keeps per_page: {target}"
            );
        }
        match link(&links, "next") {
            Some(next) => url = next.to_string(),
            None => assert_eq!(page, pages, "{path}: no next link before the last page"),
        }
    }
    assert_eq!(items.len(), total, "{path}");
    items
}

#[tokio::test]
async fn gitlab_pages_every_list() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("paged/app")
        .job(JobSpec::new("build", JobOutcome::Success))
        .job(JobSpec::new("unit", JobOutcome::Success))
        .job(JobSpec::new("lint", JobOutcome::Success))
        .create()
        .expect("project");
    sim.gitlab_project("paged/two").create().expect("project");
    sim.gitlab_project("paged/three").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    for n in 0..3 {
        sim.gitlab_push(
            project,
            &format!("feature-{n}"),
            &[(&format!("src/deep/f{n}.txt"), Some("x\n"))],
            &format!("change {n}"),
        )
        .expect("pushed");
        let (status, body) = api
            .post(
                &format!("/projects/{project}/merge_requests"),
                json!({ "source_branch": format!("feature-{n}"), "target_branch": "main", "title": format!("Change {n}") }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for n in 0..3 {
        let (status, body) = api
            .post(
                &format!("/projects/{project}/merge_requests/1/notes"),
                json!({ "body": format!("note {n}") }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    sim.gitlab_protect_branch(project, "release/*")
        .expect("protected");
    sim.gitlab_protect_branch(project, "stable")
        .expect("protected");

    for name in ["ann", "ben"] {
        sim.add_user(name, &format!("{name}-token"));
    }
    // The token's user, the person who pushed, and these two.
    let users = gitlab_walk(&api, "/users", 4).await;
    assert_eq!(users[0]["username"], "ben", "newest first");
    let (_, found) = api.get("/users?username=ANN").await;
    assert_eq!(found[0]["username"], "ann");
    let projects = gitlab_walk(&api, "/projects", 3).await;
    assert_eq!(
        projects[0]["path_with_namespace"], "paged/three",
        "newest first"
    );
    gitlab_walk(&api, "/projects?search=paged", 3).await;
    let mrs = gitlab_walk(
        &api,
        &format!("/projects/{project}/merge_requests?state=opened"),
        3,
    )
    .await;
    assert_eq!(mrs[0]["iid"], 3, "newest first");
    gitlab_walk(
        &api,
        &format!("/projects/{project}/merge_requests/1/notes?sort=asc"),
        3,
    )
    .await;
    let pipelines = gitlab_walk(&api, &format!("/projects/{project}/pipelines"), 3).await;
    let pipeline = pipelines[0]["id"].as_u64().expect("pipeline id");
    gitlab_walk(
        &api,
        &format!("/projects/{project}/pipelines/{pipeline}/jobs"),
        3,
    )
    .await;
    gitlab_walk(&api, &format!("/projects/{project}/jobs"), 9).await;
    gitlab_walk(&api, &format!("/projects/{project}/repository/branches"), 4).await;
    gitlab_walk(&api, &format!("/projects/{project}/protected_branches"), 3).await;
    let tree = gitlab_walk(
        &api,
        &format!("/projects/{project}/repository/tree?ref=feature-0&recursive=true"),
        4,
    )
    .await;
    let entries: Vec<(&str, &str)> = tree
        .iter()
        .map(|entry| {
            (
                entry["path"].as_str().unwrap_or(""),
                entry["type"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            ("src", "tree"),
            ("src/deep", "tree"),
            ("README.md", "blob"),
            ("src/deep/f0.txt", "blob"),
        ]
    );

    // One MR's pipelines: each push to its source branch starts one.
    for n in 0..2 {
        sim.gitlab_push(
            project,
            "feature-0",
            &[("more.txt", Some(&n.to_string()))],
            "more",
        )
        .expect("pushed");
    }
    gitlab_walk(
        &api,
        &format!("/projects/{project}/merge_requests/1/pipelines"),
        3,
    )
    .await;
    let commits = gitlab_walk(
        &api,
        &format!("/projects/{project}/repository/commits?ref_name=feature-0"),
        4,
    )
    .await;
    assert_eq!(commits[0]["title"], "more", "newest first");
}

#[tokio::test]
async fn gitlab_pages_merge_trains() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("paged/train")
        .merge_trains(true)
        .job(JobSpec::new("unit", JobOutcome::Success))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    for n in 1..=3 {
        sim.gitlab_push(
            project,
            &format!("f{n}"),
            &[(&format!("f{n}.txt"), Some("x"))],
            "f",
        )
        .expect("pushed");
        api.post(
            &format!("/projects/{project}/merge_requests"),
            json!({ "source_branch": format!("f{n}"), "target_branch": "main", "title": "t" }),
        )
        .await;
        api.poll(&format!("/projects/{project}/merge_requests/{n}"), |mr| {
            mr["head_pipeline"]["status"] == "success"
        })
        .await;
        let (status, body) = api
            .post(
                &format!("/projects/{project}/merge_trains/merge_requests/{n}"),
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    gitlab_walk(&api, &format!("/projects/{project}/merge_trains"), 3).await;
}

#[tokio::test]
async fn gitlab_page_parameters_are_bounded() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("paged/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let path = format!("/projects/{project}/repository/branches");
    let (_, headers, body) = api
        .get_with_headers(&format!("{path}?per_page=500&page=0"))
        .await;
    assert_eq!(
        header(&headers, "x-per-page"),
        "100",
        "per_page is at most 100"
    );
    assert_eq!(header(&headers, "x-page"), "1");
    assert_eq!(body.as_array().map(Vec::len), Some(1));
    let (_, headers, _) = api.get_with_headers(&path).await;
    assert_eq!(header(&headers, "x-per-page"), "20", "GitLab's default");
    assert_eq!(header(&headers, "x-next-page"), "");
    let rels: Vec<String> = links(&headers).into_iter().map(|(rel, _)| rel).collect();
    assert_eq!(rels, vec!["first", "last"], "one page: first and last only");
    let (_, headers, body) = api.get_with_headers(&format!("{path}?page=5")).await;
    assert_eq!(body, json!([]), "past the end: empty");
    assert_eq!(
        header(&headers, "x-prev-page"),
        "",
        "past the end: no neighbours"
    );
    let (status, _, body) = api.get_with_headers(&format!("{path}?per_page=x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({ "error": "per_page is invalid" }));
}

#[tokio::test]
async fn github_pages_every_list() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").checks(&[
            CheckScript::new("a", JobOutcome::Success),
            CheckScript::new("b", JobOutcome::Success),
            CheckScript::new("c", JobOutcome::Success),
        ]),
    );
    let gh = ApiClient::github(&sim);
    let mut head = String::new();
    for n in 0..3 {
        let sha = gh
            .commit_files(
                REPO,
                &format!("f{n}"),
                &[(&format!("f{n}.txt"), "x\n")],
                "f",
            )
            .await;
        if n == 0 {
            head = sha;
        }
        gh.open_pr(REPO, &format!("f{n}"), &format!("F{n}")).await;
    }
    for n in 0..3 {
        gh.post(
            "/repos/octo/app/issues/1/comments",
            json!({ "body": format!("c{n}") }),
        )
        .await;
        gh.post(
            &format!("/repos/octo/app/statuses/{head}"),
            json!({ "state": "success", "context": format!("ctx{n}") }),
        )
        .await;
        sim.github_approve(REPO, 1, &format!("reviewer{n}"))
            .expect("approved");
    }
    gh.post(
        "/repos/octo/app/issues/1/labels",
        json!({ "labels": ["x", "y", "z"] }),
    )
    .await;
    // Three rulesets, two of them for `main`: four rules.
    for pattern in ["refs/heads/main", "~DEFAULT_BRANCH", "refs/heads/release/*"] {
        sim.github_add_ruleset(REPO, &[pattern], &["deletion", "update"])
            .expect("ruleset");
    }

    let pulls = github_walk(&gh, "/repos/octo/app/pulls?state=open", None, 3).await;
    assert_eq!(pulls[0]["number"], 3, "newest first");
    github_walk(&gh, "/repos/octo/app/issues/1/comments", None, 3).await;
    github_walk(&gh, "/repos/octo/app/pulls/1/reviews", None, 3).await;
    github_walk(&gh, "/repos/octo/app/issues/1/labels", None, 3).await;
    github_walk(
        &gh,
        &format!("/repos/octo/app/commits/{head}/check-runs"),
        Some("check_runs"),
        3,
    )
    .await;
    github_walk(
        &gh,
        &format!("/repos/octo/app/commits/{head}/statuses"),
        None,
        3,
    )
    .await;
    github_walk(&gh, &format!("/repos/octo/app/statuses/{head}"), None, 3).await;
    github_walk(
        &gh,
        &format!("/repos/octo/app/commits/{head}/status"),
        Some("statuses"),
        3,
    )
    .await;
    github_walk(&gh, "/repos/octo/app/branches", None, 4).await;
    github_walk(&gh, "/repos/octo/app/rules/branches/main", None, 4).await;
    github_walk(&gh, "/repos/octo/app/rulesets", None, 3).await;

    // Defaults and bounds: 30 a page, at most 100; one page sends no Link.
    let (_, headers, body) = gh.get_with_headers("/repos/octo/app/pulls").await;
    assert_eq!(body.as_array().map(Vec::len), Some(3));
    assert_eq!(header(&headers, "link"), "", "one page: no Link");
    let (_, headers, body) = gh
        .get_with_headers("/repos/octo/app/pulls?per_page=1&page=3")
        .await;
    assert_eq!(body[0]["number"], 1);
    let links = links(&headers);
    assert!(link(&links, "next").is_none() && link(&links, "last").is_none());
    assert!(link(&links, "prev").is_some_and(|prev| prev.contains("page=2")));
}

/// A cursor loop over GraphQL connections ends, sees every node once, and `last`/`before` page
/// backwards.
#[tokio::test]
async fn graphql_connections_page_with_cursors() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    for n in 0..5 {
        gh.commit_files(
            REPO,
            &format!("f{n}"),
            &[(&format!("f{n}.txt"), "x\n")],
            "f",
        )
        .await;
        gh.open_pr(REPO, &format!("f{n}"), &format!("F{n}")).await;
    }
    for n in 0..3 {
        sim.github_approve(REPO, 1, &format!("reviewer{n}"))
            .expect("approved");
    }
    let query = r#"query($after: String, $before: String, $first: Int, $last: Int) {
      repository(owner: "octo", name: "app") {
        pullRequests(first: $first, last: $last, after: $after, before: $before) {
          totalCount
          pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
          edges { cursor node { number } }
        }
        pullRequest(number: 1) {
          reviews(first: 2, after: $after) { totalCount pageInfo { hasNextPage endCursor } nodes { state } }
        }
      }
    }"#;
    let page = |body: &Value| body["data"]["repository"]["pullRequests"].clone();
    let mut after = Value::Null;
    let mut numbers = Vec::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 5, "the cursor loop ends");
        let body = gh
            .graphql(query, json!({ "first": 2, "after": after }))
            .await;
        assert!(body.get("errors").is_none(), "{body}");
        let connection = page(&body);
        assert_eq!(connection["totalCount"], 5);
        assert_eq!(connection["pageInfo"]["hasPreviousPage"], rounds > 1);
        for edge in connection["edges"].as_array().expect("edges") {
            numbers.push(edge["node"]["number"].as_u64().expect("number"));
        }
        if connection["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = connection["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(numbers, vec![1, 2, 3, 4, 5]);
    assert_eq!(rounds, 3);

    // Backwards from the end with `last` and `before`.
    let body = gh.graphql(query, json!({ "last": 2 })).await;
    let tail = page(&body);
    let tail_numbers: Vec<u64> = tail["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["number"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(tail_numbers, vec![4, 5]);
    assert_eq!(tail["pageInfo"]["hasPreviousPage"], true);
    assert_eq!(tail["pageInfo"]["hasNextPage"], false);
    let body = gh
        .graphql(
            query,
            json!({ "last": 2, "before": tail["pageInfo"]["startCursor"] }),
        )
        .await;
    let middle: Vec<u64> = page(&body)["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["number"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(middle, vec![2, 3]);
    assert_eq!(
        page(&body)["pageInfo"]["hasNextPage"],
        true,
        "a `before` cursor: more follow"
    );

    // Reviews page the same way.
    let body = gh.graphql(query, json!({ "first": 1 })).await;
    let reviews = &body["data"]["repository"]["pullRequest"]["reviews"];
    assert_eq!(reviews["totalCount"], 3);
    assert_eq!(reviews["pageInfo"]["hasNextPage"], true);

    // A cursor that is none of ours is an error, as on GitHub.
    let body = gh
        .graphql(query, json!({ "first": 2, "after": "nonsense" }))
        .await;
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("does not appear to be a valid cursor")),
        "{body}"
    );
}
