//! What the trust boundary reads from the forges, on both simulated forges: the token's user,
//! change authors (and changes opened by a person through the control API), project paths
//! resolved case-insensitively with their own spelling, protected branches (GitLab names and
//! wildcards, paged) and GitHub classic protection and branch rules.

use crate::{REPO, create_repo};
use forge_sim::github::GithubRepoSpec;
use forge_sim::testing::{ApiClient, start_sim, start_stepped_sim};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn gitlab_users_authors_and_case_insensitive_paths() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("Team/Service")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let (status, me) = api.get("/user").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["username"], forge_sim::DEFAULT_USERNAME);
    assert!(me["id"].as_u64().is_some());

    for spelling in ["Team%2FService", "team%2Fservice", "TEAM%2FSERVICE"] {
        let (status, project) = api.get(&format!("/projects/{spelling}")).await;
        assert_eq!(status, StatusCode::OK, "{spelling}");
        assert_eq!(project["path_with_namespace"], "Team/Service");
        let (status, _) = api
            .get(&format!("/projects/{spelling}/repository/branches/main"))
            .await;
        assert_eq!(status, StatusCode::OK, "other routes too: {spelling}");
    }

    // A person's branch and MR through the control API.
    let control = reqwest::Client::new();
    let pushed = control
        .post(format!("{}/gitlab/projects/{pid}/push", sim.control_url()))
        .json(&json!({"branch": "feature/alice", "files": {"a.txt": "a\n"}, "author": "alice"}))
        .send()
        .await
        .expect("push");
    assert_eq!(pushed.status(), StatusCode::CREATED);
    let opened = control
        .post(format!(
            "{}/gitlab/projects/team%2Fservice/merge_requests",
            sim.control_url()
        ))
        .json(
            &json!({"source_branch": "feature/alice", "target_branch": "main",
                      "title": "Alice", "author": "alice"}),
        )
        .send()
        .await
        .expect("open");
    assert_eq!(opened.status(), StatusCode::CREATED);
    let mr: serde_json::Value = opened.json().await.expect("json");
    assert_eq!(mr["author"]["username"], "alice");
    let iid = mr["iid"].as_u64().expect("iid");
    let (_, read) = api
        .get(&format!("/projects/{pid}/merge_requests/{iid}"))
        .await;
    assert_eq!(read["author"]["username"], "alice");

    // An MR created through the API is the token user's.
    let (_, ours) = api
        .post(
            &format!("/projects/{pid}/repository/branches"),
            json!({"branch": "wq/x", "ref": "main"}),
        )
        .await;
    assert_eq!(ours["name"], "wq/x");
    let (status, ours) = api
        .post(
            &format!("/projects/{pid}/merge_requests"),
            json!({"source_branch": "wq/x", "target_branch": "main", "title": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(ours["author"]["username"], forge_sim::DEFAULT_USERNAME);
    assert_eq!(ours["author"]["id"], me["id"]);
}

#[tokio::test]
async fn gitlab_protected_branches_list_paged_with_wildcards() {
    let sim = start_sim().await;
    let pid = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);

    let (status, list) = api
        .get(&format!("/projects/{pid}/protected_branches"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["name"], "main");
    assert_eq!(list[0]["push_access_levels"][0]["access_level"], 40);
    assert_eq!(list[0]["allow_force_push"], false);

    let control = reqwest::Client::new();
    let response = control
        .post(format!(
            "{}/gitlab/projects/{pid}/protected_branches",
            sim.control_url()
        ))
        .json(&json!({"name": "release/*"}))
        .send()
        .await
        .expect("protect");
    assert_eq!(response.status(), StatusCode::CREATED);
    let (status, entry) = api
        .get(&format!("/projects/{pid}/protected_branches/release%2F*"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(entry["name"], "release/*");
    let (status, _) = api
        .get(&format!("/projects/{pid}/protected_branches/release%2F1"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "by exact name only");

    // Branch objects say whether a name or wildcard covers them.
    sim.gitlab_push(pid, "release/1.0", &[("r.txt", Some("r\n"))], "r")
        .expect("push");
    sim.gitlab_push(pid, "feature", &[("f.txt", Some("f\n"))], "f")
        .expect("push");
    let (_, release) = api
        .get(&format!(
            "/projects/{pid}/repository/branches/release%2F1.0"
        ))
        .await;
    assert_eq!(release["protected"], true);
    assert_eq!(release["developers_can_push"], false);
    let (_, feature) = api
        .get(&format!("/projects/{pid}/repository/branches/feature"))
        .await;
    assert_eq!(feature["protected"], false);

    // Pages: GitLab's headers, 20 per page by default.
    for i in 0..30 {
        sim.gitlab_protect_branch(pid, &format!("b{i}"))
            .expect("protect");
    }
    let response = reqwest::Client::new()
        .get(format!(
            "{}/projects/{pid}/protected_branches?per_page=25&page=1",
            sim.gitlab_url()
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .expect("list");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?")
            .to_string()
    };
    assert_eq!(header("x-next-page"), "2");
    assert_eq!(header("x-total"), "32");
    assert_eq!(header("x-total-pages"), "2");
    let page: serde_json::Value = response.json().await.expect("json");
    assert_eq!(page.as_array().map(Vec::len), Some(25));
    let (_, last) = api
        .get(&format!(
            "/projects/{pid}/protected_branches?per_page=25&page=2"
        ))
        .await;
    assert_eq!(last.as_array().map(Vec::len), Some(7));
    let (_, default_page) = api
        .get(&format!("/projects/{pid}/protected_branches"))
        .await;
    assert_eq!(default_page.as_array().map(Vec::len), Some(20));
}

#[tokio::test]
async fn github_users_authors_protection_and_rules() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("Octo", "App"));
    let gh = ApiClient::github(&sim);
    let (status, me) = gh.get("/user").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["login"], forge_sim::DEFAULT_USERNAME);
    let (status, repo) = gh.get("/repos/OCTO/app").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(repo["full_name"], "Octo/App");

    // A person's branch and pull request through the control API.
    let control = reqwest::Client::new();
    let pushed = control
        .post(format!("{}/_sim/github/repos/{REPO}/push", sim.base_url()))
        .json(&json!({"branch": "feature/alice", "files": {"a.txt": "a\n"}, "author": "alice"}))
        .send()
        .await
        .expect("push");
    assert_eq!(pushed.status(), StatusCode::CREATED);
    let opened = control
        .post(format!("{}/_sim/github/repos/{REPO}/pulls", sim.base_url()))
        .json(
            &json!({"head": "feature/alice", "base": "main", "title": "Alice", "author": "alice"}),
        )
        .send()
        .await
        .expect("open");
    assert_eq!(opened.status(), StatusCode::CREATED);
    let pr: serde_json::Value = opened.json().await.expect("json");
    assert_eq!(pr["user"]["login"], "alice");
    let (_, read) = gh
        .get(&format!("/repos/{REPO}/pulls/{}", pr["number"]))
        .await;
    assert_eq!(read["user"]["login"], "alice");

    // Classic protection on branch objects.
    let (_, main) = gh.get(&format!("/repos/{REPO}/branches/main")).await;
    assert_eq!(main["protected"], true);
    let (_, feature) = gh
        .get(&format!("/repos/{REPO}/branches/feature/alice"))
        .await;
    assert_eq!(feature["protected"], false);
    let response = control
        .post(format!(
            "{}/_sim/github/repos/{REPO}/protected_branches",
            sim.base_url()
        ))
        .json(&json!({"branch": "feature/*"}))
        .send()
        .await
        .expect("protect");
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, feature) = gh
        .get(&format!("/repos/{REPO}/branches/feature/alice"))
        .await;
    assert_eq!(feature["protected"], true);

    // Rules for a branch name, existing or not.
    let (status, rules) = gh
        .get(&format!("/repos/{REPO}/rules/branches/release/1.0"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rules, json!([]));
    let response = control
        .post(format!(
            "{}/_sim/github/repos/{REPO}/rulesets",
            sim.base_url()
        ))
        .json(
            &json!({"name": "releases", "include": ["refs/heads/release/*"],
                      "rules": ["deletion", "non_fast_forward"]}),
        )
        .send()
        .await
        .expect("ruleset");
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<serde_json::Value>().await.expect("json")["id"].clone();
    control
        .post(format!(
            "{}/_sim/github/repos/{REPO}/rulesets",
            sim.base_url()
        ))
        .json(&json!({"name": "trial", "enforcement": "evaluate",
                      "include": ["~ALL"], "rules": ["update"]}))
        .send()
        .await
        .expect("ruleset");
    let (_, rules) = gh
        .get(&format!("/repos/{REPO}/rules/branches/release/1.0"))
        .await;
    assert_eq!(
        rules,
        json!([
            {"type": "deletion", "ruleset_source_type": "Repository",
             "ruleset_source": "Octo/App", "ruleset_id": id},
            {"type": "non_fast_forward", "ruleset_source_type": "Repository",
             "ruleset_source": "Octo/App", "ruleset_id": id},
        ]),
        "active rulesets only"
    );
    let (_, rules) = gh
        .get(&format!("/repos/{REPO}/rules/branches/release/1/x"))
        .await;
    assert_eq!(rules, json!([]), "* stays within one segment");
    let (status, _) = gh.get("/repos/octo/none/rules/branches/main").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The rulesets themselves, summarised as "Get all repository rulesets"
    // lists them: every enforcement, no conditions and no rules.
    let (status, listed) = gh
        .get(&format!(
            "/repos/{REPO}/rulesets?targets=branch&per_page=100"
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    let listed = listed.as_array().expect("an array").clone();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["id"], id);
    assert_eq!(listed[0]["name"], "releases");
    assert_eq!(listed[0]["target"], "branch");
    assert_eq!(listed[0]["source_type"], "Repository");
    assert_eq!(listed[0]["source"], "Octo/App");
    assert_eq!(listed[0]["enforcement"], "active");
    assert!(listed[0]["node_id"].is_string());
    assert!(
        listed[0]["_links"]["self"]["href"]
            .as_str()
            .is_some_and(|href| href.ends_with(&format!("/repos/Octo/App/rulesets/{id}"))),
        "{listed:?}"
    );
    assert!(listed[0]["created_at"].is_string());
    assert!(listed[0].get("conditions").is_none() && listed[0].get("rules").is_none());
    assert_eq!(listed[1]["name"], "trial");
    assert_eq!(listed[1]["enforcement"], "evaluate");
    let (_, tags) = gh.get(&format!("/repos/{REPO}/rulesets?targets=tag")).await;
    assert_eq!(tags, json!([]), "branch rulesets only");
    let (_, paged) = gh
        .get(&format!("/repos/{REPO}/rulesets?per_page=1&page=2"))
        .await;
    assert_eq!(paged.as_array().map(Vec::len), Some(1));
    assert_eq!(paged[0]["name"], "trial");
    let (status, _) = gh.get("/repos/octo/none/rulesets").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
