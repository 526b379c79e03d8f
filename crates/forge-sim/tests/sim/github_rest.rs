//! GitHub REST over HTTP: auth, git data, contents, compare, pulls, merges, checks, reviews, comments.

use crate::{REPO, create_repo};
use forge_sim::JobOutcome;
use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::testing::{ApiClient, start_stepped_sim};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn requests_without_valid_credentials_get_401() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);

    let (status, body) = gh.with_auth(None).get("/repos/octo/app").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["message"], "Bad credentials");
    assert!(
        body["documentation_url"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://docs.github.com"))
    );
    let (status, _) = gh
        .with_auth(Some("Bearer wrong"))
        .get("/repos/octo/app")
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = gh.with_auth(Some("Basic abc")).get("/user").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = gh
        .with_auth(None)
        .post("/graphql", json!({ "query": "{ viewer { login } }" }))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["message"], "Bad credentials");

    // Both `Bearer` and `token` schemes work.
    let (status, user) = gh.get("/user").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user["login"], forge_sim::DEFAULT_USERNAME);
    let (status, _) = gh
        .with_auth(Some(&format!("token {}", forge_sim::testing::TOKEN)))
        .get("/repos/octo/app")
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = gh.get("/repos/octo/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "Not Found");
}

/// A request is checked in the order GitHub answers it: credentials, then the path's numbers,
/// then the body, and only then whether the repository exists.
#[tokio::test]
async fn requests_are_checked_credentials_first_then_path_then_body_then_repository() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let anonymous = gh.with_auth(None);

    let (status, _) = anonymous.get("/repos/octo/missing/pulls/x").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for path in [
        "/repos/octo/app/pulls/x",
        "/repos/octo/missing/pulls/x",
        "/repos/octo/app/issues/comments/x",
        "/repos/octo/app/check-runs/x",
    ] {
        let (status, body) = gh.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["message"], "Not Found", "{path}");
    }
    let malformed = |request: reqwest::RequestBuilder| {
        request
            .header("Content-Type", "application/json")
            .body("{not json")
    };
    let (status, _) = gh
        .send(malformed(
            gh.client
                .patch(format!("{}/repos/octo/app/pulls/x", gh.base)),
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the number before the body");
    let (status, body) = gh
        .send(malformed(
            gh.client
                .patch(format!("{}/repos/octo/missing/pulls/1", gh.base)),
        ))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the body before the repository"
    );
    assert_eq!(body["message"], "Problems parsing JSON");
}

#[tokio::test]
async fn git_data_api_builds_branches_and_guards_refs() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);

    // Blobs in both encodings, a tree on the main tree with one deletion, a commit, a ref.
    let (_, main_ref) = gh.get("/repos/octo/app/git/ref/heads/main").await;
    let main_sha = main_ref["object"]["sha"].as_str().unwrap().to_string();
    assert_eq!(main_ref["ref"], "refs/heads/main");
    let (status, b64) = gh
        .post(
            "/repos/octo/app/git/blobs",
            json!({ "content": "aGVsbG8K", "encoding": "base64" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, main_commit) = gh
        .get(&format!("/repos/octo/app/git/commits/{main_sha}"))
        .await;
    let (status, tree) = gh
        .post(
            "/repos/octo/app/git/trees",
            json!({
                "base_tree": main_commit["tree"]["sha"],
                "tree": [
                    { "path": "hello.txt", "mode": "100644", "type": "blob", "sha": b64["sha"] },
                    { "path": "bin/run.sh", "mode": "100755", "type": "blob", "content": "#!/bin/sh\n" },
                    { "path": "README.md", "mode": "100644", "type": "blob", "sha": null },
                ],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{tree}");
    let paths: Vec<&str> = tree["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    // The answer lists the new tree's own entries (a directory as `type: tree`).
    assert_eq!(paths, vec!["bin", "hello.txt"]);
    let (status, commit) = gh
        .post(
            "/repos/octo/app/git/commits",
            json!({ "message": "Add hello", "tree": tree["sha"], "parents": [main_sha] }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(commit["parents"][0]["sha"], main_sha.as_str());
    let sha = commit["sha"].as_str().unwrap().to_string();
    let (status, created) = gh
        .post(
            "/repos/octo/app/git/refs",
            json!({ "ref": "refs/heads/feature", "sha": sha }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["object"]["sha"], sha.as_str());

    // Errors: existing ref, unknown object, bad ref name, bad tree, missing content.
    let (status, body) = gh
        .post(
            "/repos/octo/app/git/refs",
            json!({ "ref": "refs/heads/feature", "sha": sha }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["message"], "Reference already exists");
    let (status, body) = gh
        .post(
            "/repos/octo/app/git/refs",
            json!({ "ref": "refs/heads/x", "sha": "0".repeat(40) }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["message"], "Object does not exist");
    let (status, _) = gh
        .post(
            "/repos/octo/app/git/refs",
            json!({ "ref": "heads/x", "sha": sha }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = gh
        .post(
            "/repos/octo/app/git/commits",
            json!({ "message": "m", "tree": "f".repeat(40) }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = gh.post("/repos/octo/app/git/blobs", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["errors"][0]["code"], "missing_field");
    let (status, body) = gh
        .post(
            "/repos/octo/app/git/blobs",
            json!({ "content": "x", "encoding": "latin1" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = gh
        .send(
            gh.client
                .post(format!("{}/repos/octo/app/git/blobs", gh.base))
                .body("{not json"),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "Problems parsing JSON");

    // Fast-forward rules: moving `feature` back to main is not a fast forward unless forced.
    let (status, body) = gh
        .patch(
            "/repos/octo/app/git/refs/heads/feature",
            json!({ "sha": main_sha }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["message"], "Update is not a fast forward");
    let (status, body) = gh
        .patch(
            "/repos/octo/app/git/refs/heads/feature",
            json!({ "sha": main_sha, "force": true }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["object"]["sha"], main_sha.as_str());
    let (status, _) = gh
        .patch(
            "/repos/octo/app/git/refs/heads/feature",
            json!({ "sha": sha }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "forward again is a fast forward");
    let (status, _) = gh
        .patch("/repos/octo/app/git/refs/heads/nope", json!({ "sha": sha }))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Reading back: commit, contents (file and directory), matching refs, compare.
    let (status, c) = gh.get(&format!("/repos/octo/app/commits/{sha}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c["commit"]["message"], "Add hello");
    let statuses: Vec<&str> = c["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert!(
        statuses.contains(&"added") && statuses.contains(&"removed"),
        "{statuses:?}"
    );
    let (status, _) = gh
        .get(&format!("/repos/octo/app/commits/{}", "a".repeat(40)))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, file) = gh
        .get("/repos/octo/app/contents/hello.txt?ref=feature")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(file["encoding"], "base64");
    let decoded = file["content"].as_str().unwrap().replace('\n', "");
    assert_eq!(decoded, "aGVsbG8K");
    let (status, dir) = gh.get("/repos/octo/app/contents/bin?ref=feature").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(dir[0]["path"], "bin/run.sh");
    let (status, _) = gh.get("/repos/octo/app/contents/hello.txt").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not on main");
    let (_, refs) = gh.get("/repos/octo/app/git/matching-refs/heads/feat").await;
    assert_eq!(refs.as_array().unwrap().len(), 1);

    let (status, cmp) = gh.get("/repos/octo/app/compare/main...feature").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cmp["status"], "ahead");
    assert_eq!(cmp["ahead_by"], 1);
    assert_eq!(cmp["behind_by"], 0);
    assert_eq!(cmp["files"].as_array().unwrap().len(), 3);
    let (_, cmp) = gh.get("/repos/octo/app/compare/feature...main").await;
    assert_eq!(cmp["status"], "behind");
    let (_, cmp) = gh.get("/repos/octo/app/compare/main...main").await;
    assert_eq!(cmp["status"], "identical");
    sim.github_push_human_commit(REPO, "main", &[("other.txt", Some("x"))], "main moves")
        .unwrap();
    let (_, cmp) = gh.get("/repos/octo/app/compare/main...feature").await;
    assert_eq!(cmp["status"], "diverged");
    assert_eq!(cmp["behind_by"], 1);

    // Deleting a ref.
    let (status, _) = gh.delete("/repos/octo/app/git/refs/heads/feature").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = gh.get("/repos/octo/app/git/ref/heads/feature").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// GitHub keeps one label per name whatever its case: a new label that
/// differs from one of the repository's only in case is refused, and a
/// name given in another case names the repository's label (added,
/// read, removed and looked up by GraphQL as that label).
#[tokio::test]
async fn a_label_name_in_another_case_names_the_repositorys_label() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    gh.commit_files(REPO, "feature", &[("a.txt", "a\n")], "Add a")
        .await;
    let (status, _) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "title": "Add a", "head": "feature", "base": "main" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let (status, label) = gh
        .post(
            "/repos/octo/app/labels",
            json!({ "name": "Bug", "color": "d73a4a", "description": "Something is wrong" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{label}");
    assert_eq!(label["name"], "Bug");
    assert_eq!(label["color"], "d73a4a");
    assert_eq!(label["description"], "Something is wrong");
    let (status, refused) = gh
        .post("/repos/octo/app/labels", json!({ "name": "BUG" }))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["errors"][0]["code"], "already_exists", "{refused}");
    assert_eq!(refused["errors"][0]["field"], "name");
    let (status, refused) = gh
        .post(
            "/repos/octo/app/labels",
            json!({ "name": "x", "color": "red" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["errors"][0]["field"], "color", "{refused}");

    let (status, found) = gh.get("/repos/octo/app/labels/bUg").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(found["name"], "Bug");

    // Added as `bug` and `Bug` again: the pull request has `Bug`, once.
    let (status, labels) = gh
        .post(
            "/repos/octo/app/issues/1/labels",
            json!({ "labels": ["bug", "new one"] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let names = |labels: &serde_json::Value| -> Vec<String> {
        labels
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&labels), ["Bug", "new one"]);
    assert_eq!(labels[0]["color"], "d73a4a");
    let (_, labels) = gh
        .post(
            "/repos/octo/app/issues/1/labels",
            json!({ "labels": ["BUG"] }),
        )
        .await;
    assert_eq!(names(&labels), ["Bug", "new one"]);
    let (_, all) = gh.get("/repos/octo/app/labels").await;
    assert_eq!(
        names(&all),
        ["Bug", "new one"],
        "no label was made for `bug`"
    );

    // GraphQL finds it by any case, with the node id REST gave.
    let (status, answer) = gh
        .post(
            "/graphql",
            json!({ "query": "query { repository(owner: \"octo\", name: \"app\") { label(name: \"BUG\") { id name } } }" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer["data"]["repository"]["label"]["name"], "Bug",
        "{answer}"
    );
    assert_eq!(
        answer["data"]["repository"]["label"]["id"],
        labels[0]["node_id"]
    );

    // Removed by a name in another case.
    let (status, labels) = gh.delete("/repos/octo/app/issues/1/labels/bUG").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&labels), ["new one"]);
}

#[tokio::test]
async fn pull_requests_open_update_list_label_and_comment() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let head = gh
        .commit_files(REPO, "feature", &[("a.txt", "a\n")], "Add a")
        .await;

    let (status, pr) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "title": "Add a", "head": "octo:feature", "base": "main", "body": "hi", "draft": true }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(pr["number"], 1);
    assert_eq!(pr["state"], "open");
    assert_eq!(pr["draft"], true);
    assert_eq!(pr["merged"], false);
    assert_eq!(pr["head"]["ref"], "feature");
    assert_eq!(pr["head"]["sha"], head.as_str());
    assert_eq!(pr["base"]["ref"], "main");
    assert!(
        pr["mergeable"].is_null(),
        "mergeability is computed after the push"
    );
    assert!(
        pr["html_url"]
            .as_str()
            .unwrap()
            .ends_with("/octo/app/pull/1")
    );
    assert!(pr["node_id"].as_str().unwrap().starts_with("PR_kwDO"));

    // Duplicate, missing branch, missing title, no commits.
    let (status, body) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "title": "again", "head": "feature", "base": "main" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["message"], "Validation Failed");
    assert_eq!(
        body["errors"][0]["message"],
        "A pull request already exists for octo:feature."
    );
    let (status, body) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "title": "x", "head": "nope", "base": "main" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["errors"][0]["field"], "head");
    let (status, _) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "head": "feature", "base": "main" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = gh
        .post(
            "/repos/octo/app/pulls",
            json!({ "title": "x", "head": "main", "base": "main" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // Mergeability becomes known after a tick (every request ticks).
    let pr = gh.mergeable(REPO, 1).await;
    assert_eq!(pr["mergeable"], true);
    assert_eq!(pr["mergeable_state"], "draft");

    // Update title/body/state; list with filters.
    let (status, pr) = gh
        .patch(
            "/repos/octo/app/pulls/1",
            json!({ "title": "Add a (v2)", "body": "new" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pr["title"], "Add a (v2)");
    assert_eq!(pr["body"], "new");
    let (_, list) = gh
        .get("/repos/octo/app/pulls?head=octo:feature&state=open")
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (_, list) = gh.get("/repos/octo/app/pulls?head=octo:other").await;
    assert_eq!(list.as_array().unwrap().len(), 0);
    let (status, pr) = gh
        .patch("/repos/octo/app/pulls/1", json!({ "state": "closed" }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pr["state"], "closed");
    assert_eq!(pr["merged"], false);
    let (_, list) = gh.get("/repos/octo/app/pulls").await;
    assert_eq!(list.as_array().unwrap().len(), 0);
    let (_, list) = gh.get("/repos/octo/app/pulls?state=closed").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, pr) = gh
        .patch("/repos/octo/app/pulls/1", json!({ "state": "open" }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pr["state"], "open");
    let (status, _) = gh
        .patch("/repos/octo/app/pulls/1", json!({ "state": "weird" }))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = gh.get("/repos/octo/app/pulls/99").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Labels.
    let (status, labels) = gh
        .post(
            "/repos/octo/app/issues/1/labels",
            json!({ "labels": ["workqueue", "auto"] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(labels.as_array().unwrap().len(), 2);
    let (_, pr) = gh.get("/repos/octo/app/pulls/1").await;
    assert_eq!(pr["labels"][0]["name"], "workqueue");

    // Issue comments: create, update, list.
    let (status, c) = gh
        .post(
            "/repos/octo/app/issues/1/comments",
            json!({ "body": "status: queued" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let id = c["id"].as_u64().unwrap();
    let (status, c) = gh
        .patch(
            &format!("/repos/octo/app/issues/comments/{id}"),
            json!({ "body": "status: merged" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c["body"], "status: merged");
    let (_, list) = gh.get("/repos/octo/app/issues/1/comments").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["body"], "status: merged");
    assert_eq!(list[0]["user"]["login"], forge_sim::DEFAULT_USERNAME);
    let (status, _) = gh
        .post("/repos/octo/app/issues/1/comments", json!({}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = gh
        .patch(
            "/repos/octo/app/issues/comments/12345",
            json!({ "body": "x" }),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A human push synchronizes the PR head; mergeability is recomputed.
    let new_head = sim
        .github_push_human_commit(REPO, "feature", &[("b.txt", Some("b"))], "human")
        .unwrap();
    let (_, pr) = gh.get("/repos/octo/app/pulls/1").await;
    assert_eq!(pr["head"]["sha"], new_head.as_str());
}

#[tokio::test]
async fn synchronous_merge_and_its_errors() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let head1 = gh
        .commit_files(REPO, "one", &[("same.txt", "one\n")], "one")
        .await;
    gh.commit_files(REPO, "two", &[("same.txt", "two\n")], "two")
        .await;
    let n1 = gh.open_pr(REPO, "one", "One").await;
    let n2 = gh.open_pr(REPO, "two", "Two").await;
    gh.mergeable(REPO, n1).await;

    // 422 bad merge_method / malformed sha; 409 head mismatch.
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n1}/merge"),
            json!({ "merge_method": "octopus" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["errors"][0]["field"], "merge_method");
    let (status, _) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n1}/merge"),
            json!({ "sha": "abc" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n1}/merge"),
            json!({ "sha": "b".repeat(40) }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["message"],
        "Head branch was modified. Review and try the merge again."
    );

    // 200 with the expected head.
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n1}/merge"),
            json!({ "sha": head1, "merge_method": "squash", "commit_title": "One (#1)" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["merged"], true);
    assert_eq!(body["message"], "Pull Request successfully merged");
    let merged_sha = body["sha"].as_str().unwrap().to_string();
    assert_eq!(
        sim.github_branch_head(REPO, "main").as_deref(),
        Some(merged_sha.as_str())
    );
    let (_, pr) = gh.get(&format!("/repos/octo/app/pulls/{n1}")).await;
    assert_eq!(pr["merged"], true);
    assert_eq!(pr["state"], "closed");
    assert_eq!(pr["merge_commit_sha"], merged_sha.as_str());
    let (status, _) = gh.get(&format!("/repos/octo/app/pulls/{n1}/merge")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, c) = gh
        .get(&format!("/repos/octo/app/commits/{merged_sha}"))
        .await;
    assert_eq!(c["commit"]["message"], "One (#1)");
    assert_eq!(
        c["parents"].as_array().unwrap().len(),
        1,
        "squash has one parent"
    );

    // 405: the second PR now conflicts; merging a closed PR is also 405.
    let pr2 = gh
        .poll(&format!("/repos/octo/app/pulls/{n2}"), |p| {
            p["mergeable"] == false
        })
        .await;
    assert_eq!(pr2["mergeable_state"], "dirty");
    let (status, body) = gh
        .put(&format!("/repos/octo/app/pulls/{n2}/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["message"], "Pull Request is not mergeable");
    let (status, _) = gh
        .put(&format!("/repos/octo/app/pulls/{n1}/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    // Branch protection: required approvals block with 405 until approved.
    sim.github_update_repo(REPO, GithubRepoSpec::default().required_approvals(1))
        .unwrap();
    gh.commit_files(REPO, "three", &[("three.txt", "3\n")], "three")
        .await;
    let n3 = gh.open_pr(REPO, "three", "Three").await;
    let pr3 = gh.mergeable(REPO, n3).await;
    assert_eq!(pr3["mergeable_state"], "blocked");
    let (status, body) = gh
        .put(&format!("/repos/octo/app/pulls/{n3}/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("approving review"),
        "{body}"
    );
    sim.github_approve(REPO, n3, "alice").unwrap();
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n3}/merge"),
            json!({ "merge_method": "merge" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, c) = gh
        .get(&format!(
            "/repos/octo/app/commits/{}",
            body["sha"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        c["parents"].as_array().unwrap().len(),
        2,
        "merge commit has two parents"
    );
}

#[tokio::test]
async fn checks_statuses_reruns_and_reviews() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").checks(&[
            CheckScript::new("ci", JobOutcome::Success),
            CheckScript::new(
                "lint",
                JobOutcome::flaky(1, "script_failure", "lint exploded"),
            ),
            CheckScript::new("legacy", JobOutcome::Success).as_status(),
        ]),
    );
    let gh = ApiClient::github(&sim);
    let head = gh
        .commit_files(REPO, "feature", &[("a.txt", "a\n")], "a")
        .await;
    let n = gh.open_pr(REPO, "feature", "A").await;

    let runs_path = format!("/repos/octo/app/commits/{head}/check-runs");
    let (status, runs) = gh.get(&runs_path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs["total_count"], 2);
    let done = gh
        .poll(&runs_path, |b| {
            b["check_runs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["status"] == "completed")
        })
        .await;
    let by_name = |body: &serde_json::Value, name: &str| {
        body["check_runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name(&done, "ci")["conclusion"], "success");
    let lint = by_name(&done, "lint");
    assert_eq!(lint["conclusion"], "failure");
    assert_eq!(lint["head_sha"], head.as_str());
    assert_eq!(lint["pull_requests"][0]["number"], n);
    assert!(
        lint["output"]["summary"]
            .as_str()
            .unwrap()
            .contains("lint exploded")
    );

    // The commit-status check shows in the combined status.
    let status_path = format!("/repos/octo/app/commits/{head}/status");
    let combined = gh.poll(&status_path, |b| b["state"] != "pending").await;
    assert_eq!(combined["state"], "success");
    assert_eq!(combined["statuses"][0]["context"], "legacy");
    let (_, pr) = gh.get(&format!("/repos/octo/app/pulls/{n}")).await;
    assert_eq!(pr["mergeable_state"], "unstable");

    // A manual status can fail the combined state; the branch name resolves too.
    let (status, _) = gh
        .post(
            &format!("/repos/octo/app/statuses/{head}"),
            json!({ "state": "failure", "context": "manual" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, combined) = gh.get("/repos/octo/app/commits/feature/status").await;
    assert_eq!(combined["state"], "failure");
    let (status, _) = gh
        .post(
            &format!("/repos/octo/app/statuses/{head}"),
            json!({ "state": "bogus" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Re-running the flaky check makes it pass (the latest run per name is what counts).
    let lint_id = lint["id"].as_u64().unwrap();
    let (status, _) = gh
        .post(
            &format!("/repos/octo/app/check-runs/{lint_id}/rerequest"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let rerun = gh
        .poll(&runs_path, |b| {
            let l = b["check_runs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == "lint")
                .cloned();
            l.is_some_and(|l| l["id"] != lint_id && l["status"] == "completed")
        })
        .await;
    assert_eq!(by_name(&rerun, "lint")["conclusion"], "success");
    let (_, all) = gh.get(&format!("{runs_path}?filter=all")).await;
    assert_eq!(all["total_count"], 3);
    let (status, _) = gh
        .post("/repos/octo/app/check-runs/42/rerequest", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Reviews: the bot cannot approve its own PR; humans can; GraphQL shows the decision.
    let (status, body) = gh
        .post(
            &format!("/repos/octo/app/pulls/{n}/reviews"),
            json!({ "event": "APPROVE" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, rv) = gh
        .post(
            &format!("/repos/octo/app/pulls/{n}/reviews"),
            json!({ "event": "COMMENT", "body": "nice" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rv["state"], "COMMENTED");
    assert_eq!(rv["commit_id"], head.as_str());
    let (status, _) = gh
        .post(
            &format!("/repos/octo/app/pulls/{n}/reviews"),
            json!({ "event": "NOPE" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // No review required by branch protection: GitHub's decision is null, whatever the reviews.
    assert!(decision(&gh, n).await.is_null());
    sim.github_request_changes(REPO, n, "carol", "hmm").unwrap();
    assert!(decision(&gh, n).await.is_null());
    sim.github_approve(REPO, n, "carol").unwrap();
    assert!(decision(&gh, n).await.is_null());
    sim.github_update_repo(REPO, GithubRepoSpec::default().required_approvals(2))
        .unwrap();
    assert_eq!(decision(&gh, n).await, "REVIEW_REQUIRED");
    sim.github_request_changes(REPO, n, "bob", "please fix")
        .unwrap();
    assert_eq!(decision(&gh, n).await, "CHANGES_REQUESTED");
    sim.github_approve(REPO, n, "bob").unwrap();
    assert_eq!(decision(&gh, n).await, "APPROVED");
    let (_, reviews) = gh.get(&format!("/repos/octo/app/pulls/{n}/reviews")).await;
    let states: Vec<&str> = reviews
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        vec![
            "COMMENTED",
            "CHANGES_REQUESTED",
            "APPROVED",
            "CHANGES_REQUESTED",
            "APPROVED"
        ]
    );

    // With stale-review dismissal, a new push makes the approval stale.
    sim.github_update_repo(REPO, GithubRepoSpec::default().dismiss_stale_reviews(true))
        .unwrap();
    assert_eq!(decision(&gh, n).await, "APPROVED");
    sim.github_push_human_commit(REPO, "feature", &[("b.txt", Some("b"))], "more")
        .unwrap();
    assert_eq!(decision(&gh, n).await, "REVIEW_REQUIRED");
}

async fn decision(gh: &ApiClient, n: u64) -> serde_json::Value {
    let q = format!(
        "query {{ repository(owner: \"octo\", name: \"app\") {{ pullRequest(number: {n}) {{ reviewDecision }} }} }}"
    );
    gh.graphql(&q, json!({})).await["data"]["repository"]["pullRequest"]["reviewDecision"].clone()
}

/// Paths (with their type) of `GET git/trees/{sha}`, recursive or not.
async fn listing(gh: &ApiClient, sha: &str, recursive: bool) -> Vec<(String, String)> {
    let query = if recursive { "?recursive=1" } else { "" };
    let (status, tree) = gh
        .get(&format!("/repos/octo/app/git/trees/{sha}{query}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{tree}");
    assert_eq!(tree["truncated"], false);
    tree["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn new_tree(gh: &ApiClient, base: Option<&str>, entries: serde_json::Value) -> String {
    let mut body = json!({ "tree": entries });
    if let Some(base) = base {
        body["base_tree"] = json!(base);
    }
    let (status, tree) = gh.post("/repos/octo/app/git/trees", body).await;
    assert_eq!(status, StatusCode::CREATED, "{tree}");
    tree["sha"].as_str().unwrap().to_string()
}

fn owned(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[tokio::test]
async fn trees_list_directories_and_follow_githubs_base_tree_rules() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let blob =
        |path: &str| json!({ "path": path, "mode": "100644", "type": "blob", "content": path });
    let base = new_tree(
        &gh,
        None,
        json!([
            blob(".github/workflows/ci.yml"),
            blob(".github/CODEOWNERS"),
            blob("docs/a.md"),
            blob("tool"),
        ]),
    )
    .await;

    // Recursive listings name every subtree; plain ones only the top level, and a subtree
    // can be read on its own by its sha.
    assert_eq!(
        listing(&gh, &base, true).await,
        owned(&[
            (".github", "tree"),
            (".github/CODEOWNERS", "blob"),
            (".github/workflows", "tree"),
            (".github/workflows/ci.yml", "blob"),
            ("docs", "tree"),
            ("docs/a.md", "blob"),
            ("tool", "blob"),
        ])
    );
    let (_, top) = gh.get(&format!("/repos/octo/app/git/trees/{base}")).await;
    assert_eq!(
        listing(&gh, &base, false).await,
        owned(&[(".github", "tree"), ("docs", "tree"), ("tool", "blob")])
    );
    let github_sha = top["tree"][0]["sha"].as_str().unwrap().to_string();
    assert_eq!(
        listing(&gh, &github_sha, false).await,
        owned(&[("CODEOWNERS", "blob"), ("workflows", "tree")])
    );

    // `sha: null` on a directory removes everything under it.
    let gone = new_tree(
        &gh,
        Some(&base),
        json!([{ "path": ".github", "mode": "100644", "type": "blob", "sha": null }]),
    )
    .await;
    assert_eq!(
        listing(&gh, &gone, true).await,
        owned(&[("docs", "tree"), ("docs/a.md", "blob"), ("tool", "blob")])
    );

    // A blob where a directory was replaces the directory; a path under a blob turns the blob
    // into a directory.
    let replaced = new_tree(&gh, Some(&base), json!([blob("docs"), blob("tool/x")])).await;
    assert_eq!(
        listing(&gh, &replaced, true).await,
        owned(&[
            (".github", "tree"),
            (".github/CODEOWNERS", "blob"),
            (".github/workflows", "tree"),
            (".github/workflows/ci.yml", "blob"),
            ("docs", "blob"),
            ("tool", "tree"),
            ("tool/x", "blob"),
        ])
    );
}

/// The paths of `GET git/trees/{sha}`, recursive or not, and its `truncated`.
async fn listing_truncated(gh: &ApiClient, sha: &str, recursive: bool) -> (Vec<String>, bool) {
    let query = if recursive { "?recursive=1" } else { "" };
    let (status, tree) = gh
        .get(&format!("/repos/octo/app/git/trees/{sha}{query}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{tree}");
    let paths = tree["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    (paths, tree["truncated"].as_bool().unwrap())
}

#[tokio::test]
async fn recursive_tree_listings_truncate_beyond_the_repository_limit() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").tree_listing_limit(3),
    );
    let gh = ApiClient::github(&sim);
    let blob =
        |path: &str| json!({ "path": path, "mode": "100644", "type": "blob", "content": path });
    let tree = new_tree(
        &gh,
        None,
        json!([blob("README.md"), blob("dir/a"), blob("dir/b")]),
    )
    .await;
    let strings = |paths: &[&str]| paths.iter().map(|p| p.to_string()).collect::<Vec<_>>();

    // Four entries over a limit of three: the first three, in the listing's order.
    assert_eq!(
        listing_truncated(&gh, &tree, true).await,
        (strings(&["README.md", "dir", "dir/a"]), true)
    );
    // A plain listing is not cut.
    assert_eq!(
        listing_truncated(&gh, &tree, false).await,
        (strings(&["README.md", "dir"]), false)
    );

    // At the limit nothing is left out.
    sim.github_update_repo(REPO, GithubRepoSpec::default().tree_listing_limit(4))
        .unwrap();
    let all = strings(&["README.md", "dir", "dir/a", "dir/b"]);
    assert_eq!(
        listing_truncated(&gh, &tree, true).await,
        (all.clone(), false)
    );

    // The control route sets it too; `null` restores GitHub's 100,000.
    let ctl = gh.with_auth(None);
    let (status, summary) = ctl
        .patch(
            "/_sim/github/repos/octo/app",
            json!({ "tree_listing_limit": 1 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(summary["settings"]["tree_listing_limit"], 1);
    assert_eq!(
        listing_truncated(&gh, &tree, true).await,
        (strings(&["README.md"]), true)
    );
    let (status, summary) = ctl
        .patch(
            "/_sim/github/repos/octo/app",
            json!({ "tree_listing_limit": null }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert!(summary["settings"]["tree_listing_limit"].is_null());
    assert_eq!(listing_truncated(&gh, &tree, true).await, (all, false));
}

/// GraphQL's `ref` / `Commit.tree` / `Commit.file` answer the same object ids as the REST git
/// data API.
#[tokio::test]
async fn graphql_ref_tree_and_file_agree_with_rest_git_data() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let head = sim.github_branch_head(REPO, "main").unwrap();
    let file = |path: &str, mode: &str| json!({ "path": path, "mode": mode, "type": "blob", "content": format!("{path}\n") });
    let tree = new_tree(
        &gh,
        Some(&head),
        json!([
            file("src/lib.rs", "100644"),
            file("dir/a.txt", "100644"),
            file("dir/sub/b.txt", "100644"),
            file("bin/run.sh", "100755"),
        ]),
    )
    .await;
    let (status, commit) = gh
        .post(
            "/repos/octo/app/git/commits",
            json!({ "message": "files", "tree": tree, "parents": [head] }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{commit}");
    let sha = commit["sha"].as_str().unwrap().to_string();
    let (status, _) = gh
        .patch("/repos/octo/app/git/refs/heads/main", json!({ "sha": sha }))
        .await;
    assert_eq!(status, StatusCode::OK);

    let q = r#"query($owner: String!, $name: String!, $p: String!, $oid: GitObjectID!) {
      repository(owner: $owner, name: $name) {
        ref(qualifiedName: "refs/heads/main") {
          name prefix
          target {
            oid
            ... on Commit {
              tree { oid }
              a: file(path: $p) { name path mode type oid size }
              d: file(path: "dir") { type mode oid }
              x: file(path: "bin/run.sh") { mode oid }
              m: file(path: "missing") { oid }
            }
          }
        }
        short: ref(qualifiedName: "main") { target { oid } }
        gone: ref(qualifiedName: "refs/heads/gone") { name }
        object(oid: $oid) { ... on Commit { oid file(path: "dir/sub") { type oid } } }
      } }"#;
    let body = gh
        .graphql(
            q,
            json!({ "owner": "octo", "name": "app", "p": "src/lib.rs", "oid": sha }),
        )
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    let repo = &body["data"]["repository"];
    let reference = &repo["ref"];
    assert_eq!(reference["name"], "main");
    assert_eq!(reference["prefix"], "refs/heads/");
    let target = &reference["target"];
    assert_eq!(target["oid"], sha.as_str());
    assert_eq!(repo["short"]["target"]["oid"], sha.as_str());
    assert!(repo["gone"].is_null());
    assert!(target["m"].is_null());

    // The commit's tree is the REST commit's; `dir` and `dir/sub` are the subtrees the REST
    // listings name, `src/lib.rs` the blob REST serves.
    let (_, rest_commit) = gh.get(&format!("/repos/octo/app/commits/{sha}")).await;
    assert_eq!(target["tree"]["oid"], rest_commit["commit"]["tree"]["sha"]);
    assert_eq!(target["tree"]["oid"], tree.as_str());
    let (_, top) = gh.get(&format!("/repos/octo/app/git/trees/{tree}")).await;
    let entry = |listing: &serde_json::Value, path: &str| {
        listing["tree"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path)
            .cloned()
            .unwrap_or_else(|| panic!("{path} in {listing}"))
    };
    assert_eq!(
        target["d"],
        json!({ "type": "tree", "mode": 16384, "oid": entry(&top, "dir")["sha"] })
    );
    let (_, deep) = gh
        .get(&format!("/repos/octo/app/git/trees/{tree}?recursive=1"))
        .await;
    assert_eq!(repo["object"]["oid"], sha.as_str());
    assert_eq!(
        repo["object"]["file"],
        json!({ "type": "tree", "oid": entry(&deep, "dir/sub")["sha"] })
    );
    let lib = entry(&deep, "src/lib.rs");
    assert_eq!(
        target["a"],
        json!({
            "name": "lib.rs", "path": "src/lib.rs", "mode": 33188, "type": "blob",
            "oid": lib["sha"], "size": lib["size"],
        })
    );
    let run = entry(&deep, "bin/run.sh");
    assert_eq!(run["mode"], "100755");
    assert_eq!(target["x"], json!({ "mode": 33261, "oid": run["sha"] }));
    let (status, blob) = gh
        .get(&format!(
            "/repos/octo/app/git/blobs/{}",
            target["a"]["oid"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{blob}");
    assert_eq!(blob["content"], "c3JjL2xpYi5ycwo=");
}
