//! The GitHub control API (`/_sim/github/...`) over HTTP.

use forge_sim::testing::{ApiClient, start_stepped_sim};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn control_routes_script_a_repository() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    let ctl = gh.with_auth(None);
    let c = "/_sim/github/repos";

    // Create with a queue, checks and a webhook; duplicates and bad specs are 400.
    let (status, repo) = ctl
        .post(
            c,
            json!({
                "owner": "octo", "name": "app", "merge_queue": true, "required_approvals": 1,
                "queue_eta_seconds_per_entry": null,
                "checks": [{ "name": "ci", "outcome": "success" }, { "name": "old", "outcome": "fail", "kind": "status" }],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{repo}");
    assert_eq!(repo["full_name"], "octo/app");
    assert_eq!(repo["settings"]["merge_queue"], true);
    assert_eq!(repo["checks"][1]["kind"], "status");
    let (status, body) = ctl.post(c, json!({ "owner": "octo", "name": "app" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].is_string());
    let (status, _) = ctl
        .post(
            c,
            json!({ "owner": "octo", "name": "x", "checks": [{ "name": "c", "outcome": "meh" }] }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = ctl.get("/_sim/github/repos/octo/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A human push creates a branch; a PR on it; review, threads, draft through control.
    let (status, pushed) = ctl
        .post(
            &format!("{c}/octo/app/push"),
            json!({ "branch": "feature", "files": { "a.txt": "a", "README.md": null }, "message": "human" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");
    let sha = pushed["sha"].as_str().unwrap().to_string();
    let n = gh.open_pr("octo/app", "feature", "A").await;
    let (_, file) = gh.get("/repos/octo/app/contents/a.txt?ref=feature").await;
    assert_eq!(file["sha"].as_str().map(str::len), Some(40));
    let (status, _) = ctl
        .post(
            &format!("{c}/octo/app/pulls/{n}/reviews"),
            json!({ "user": "alice" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/pulls/{n}/threads"),
            json!({ "unresolved": 2, "resolved": 1 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/pulls/{n}/draft"),
            json!({ "draft": true }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let q = r#"{ repository(owner: "octo", name: "app") { pullRequest(number: 1) {
        isDraft reviewDecision reviewThreads(first: 10) { totalCount nodes { isResolved } } } } }"#;
    let body = gh.graphql(q, json!({})).await;
    let pr = &body["data"]["repository"]["pullRequest"];
    assert_eq!(pr["isDraft"], true);
    assert_eq!(pr["reviewDecision"], "APPROVED");
    assert_eq!(pr["reviewThreads"]["totalCount"], 3);
    let unresolved = pr["reviewThreads"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["isResolved"] == false)
        .count();
    assert_eq!(unresolved, 2);

    // Settings update, checks replacement, merge-async script, queue lock, queue failure, branch move.
    let (status, repo) = ctl
        .patch(
            &format!("{c}/octo/app"),
            json!({ "merge_queue": false, "required_checks": ["ci"] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(repo["settings"]["merge_queue"], false);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/checks"),
            json!([{ "name": "only", "outcome": "flaky", "fail_times": 2 }]),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/merge_async"),
            json!({ "pending_ticks": 3, "fail_next": "nope" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = ctl
        .put(&format!("{c}/octo/app/queue"), json!({ "locked": true }))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = ctl
        .post(
            &format!("{c}/octo/app/pulls/{n}/queue_failure"),
            json!({ "message": "boom" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let main = sim.github_branch_head("octo/app", "main").unwrap();
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/branches/feature"),
            json!({ "sha": main }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/branches/feature"),
            json!({ "sha": "0".repeat(40) }),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = ctl
        .put(
            &format!("{c}/octo/app/pulls/x/draft"),
            json!({ "draft": true }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (_, summary) = ctl.get(&format!("{c}/octo/app")).await;
    assert_eq!(summary["branches"]["feature"], main.as_str());
    assert_ne!(summary["branches"]["feature"], sha.as_str());
    assert_eq!(summary["checks"][0]["name"], "only");
    assert_eq!(summary["merge_async"]["pending_ticks"], 3);
    assert_eq!(summary["queue_locked"], true);
    assert_eq!(summary["settings"]["required_checks"], json!(["ci"]));
    assert!(summary["settings"]["queue_eta_seconds_per_entry"].is_null());
    assert_eq!(
        summary["pulls"][0]["head"]["sha"],
        main.as_str(),
        "the PR followed its branch"
    );
}
