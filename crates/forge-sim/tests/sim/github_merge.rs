//! GitHub merge-async, the merge queue and GraphQL over HTTP.

use std::time::Duration;

use crate::{REPO, create_repo};
use forge_sim::JobOutcome;
use forge_sim::github::{CheckScript, GithubRepoSpec, MergeAsyncScript};
use forge_sim::testing::{ApiClient, start_stepped_sim};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PR_QUERY: &str = r#"
query($owner: String!, $name: String!, $n: Int!) {
  repository(owner: $owner, name: $name) {
    pr1: pullRequest(number: $n) {
      id number state merged headRefOid mergeable reviewDecision
      mergeQueueEntry { state position estimatedTimeToMerge }
      reviewThreads(first: 100) { nodes { isResolved } }
    }
  }
}"#;

async fn pr_gql(gh: &ApiClient, n: u64) -> Value {
    let body = gh
        .graphql(PR_QUERY, json!({ "owner": "octo", "name": "app", "n": n }))
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    body["data"]["repository"]["pr1"].clone()
}

/// Polls `GET .../merge-async/{uuid}` until the request leaves `pending`.
async fn poll_async(gh: &ApiClient, n: u64, uuid: &str) -> Value {
    gh.poll(
        &format!("/repos/octo/app/pulls/{n}/merge-async/{uuid}"),
        |b| b["status"] != "pending",
    )
    .await
}

/// A repo with one passing check, a branch with a change and an open PR (mergeability known).
async fn setup(
    gh: &ApiClient,
    sim: &forge_sim::SimHandle,
    queue: bool,
    branch: &str,
) -> (u64, String) {
    if sim.github_summary(REPO).is_err() {
        create_repo(
            sim,
            GithubRepoSpec::new("octo", "app")
                .merge_queue(queue)
                .checks(&[CheckScript::new("ci", JobOutcome::Success)]),
        );
    }
    let head = gh
        .commit_files(
            REPO,
            branch,
            &[(&format!("{branch}.txt"), "content\n")],
            &format!("Add {branch}"),
        )
        .await;
    let n = gh.open_pr(REPO, branch, &format!("Add {branch}")).await;
    gh.mergeable(REPO, n).await;
    (n, head)
}

#[tokio::test]
async fn full_scenario_through_the_merge_queue() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    let (n, head) = setup(&gh, &sim, true, "feature").await;

    // Checks pass on the PR head; a human approves.
    let runs = gh
        .poll(&format!("/repos/octo/app/commits/{head}/check-runs"), |b| {
            b["check_runs"][0]["status"] == "completed"
        })
        .await;
    assert_eq!(runs["check_runs"][0]["conclusion"], "success");
    assert!(
        pr_gql(&gh, n).await["reviewDecision"].is_null(),
        "no review required yet"
    );
    sim.github_update_repo(REPO, GithubRepoSpec::default().required_approvals(1))
        .unwrap();
    sim.github_approve(REPO, n, "alice").unwrap();
    sim.github_set_unresolved_threads(REPO, n, 1).unwrap();
    let pr = pr_gql(&gh, n).await;
    assert_eq!(pr["state"], "OPEN");
    assert_eq!(pr["headRefOid"], head.as_str());
    assert_eq!(pr["mergeable"], "MERGEABLE");
    assert_eq!(pr["reviewDecision"], "APPROVED");
    assert!(pr["mergeQueueEntry"].is_null());
    assert_eq!(
        pr["reviewThreads"]["nodes"],
        json!([{ "isResolved": false }])
    );
    sim.github_set_unresolved_threads(REPO, n, 0).unwrap();

    // The synchronous merge endpoint refuses: the branch requires the queue.
    let (status, _) = gh
        .put(&format!("/repos/octo/app/pulls/{n}/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    // merge-async with merge_action=default picks the queue: pending, then enqueued.
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "merge_method": "squash", "merge_action": "default", "sha": head }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "pending");
    assert_eq!(body["details"]["expected_head_sha"], head.as_str());
    assert_eq!(body["details"]["merge_method"], "squash");
    let uuid = body["details"]["uuid"]
        .as_str()
        .expect("pending carries a uuid")
        .to_string();
    uuid::Uuid::parse_str(&uuid).expect("uuid");
    let done = poll_async(&gh, n, &uuid).await;
    assert_eq!(done["status"], "enqueued", "{done}");
    assert!(done["details"]["message"].is_string());

    // Once enqueued, a second request answers 200 enqueued without a new uuid.
    let (status, again) = gh
        .put(&format!("/repos/octo/app/pulls/{n}/merge-async"), json!({}))
        .await;
    if status == StatusCode::OK && again["status"] == "enqueued" {
        assert!(again["details"]["uuid"].is_null());
    } else {
        // The queue may already have merged it (every request ticks).
        assert_eq!(again["status"], "merged", "{status} {again}");
    }

    // GraphQL shows the entry while queued, then null once merged.
    let mut seen = Vec::new();
    let merged = loop {
        let pr = pr_gql(&gh, n).await;
        if pr["merged"] == true {
            break pr;
        }
        let entry = &pr["mergeQueueEntry"];
        assert!(entry.is_object(), "open and not merged means queued: {pr}");
        assert_eq!(entry["position"], 1);
        assert_eq!(entry["estimatedTimeToMerge"], 300);
        seen.push(entry["state"].as_str().unwrap().to_string());
        assert!(seen.len() < 50, "queue never merged: {seen:?}");
    };
    assert!(seen.contains(&"AWAITING_CHECKS".to_string()), "{seen:?}");
    assert!(seen.contains(&"MERGEABLE".to_string()), "{seen:?}");
    assert_eq!(merged["state"], "MERGED");
    assert!(merged["mergeQueueEntry"].is_null());

    let (_, rest) = gh.get(&format!("/repos/octo/app/pulls/{n}")).await;
    assert_eq!(rest["merged"], true);
    assert_eq!(rest["state"], "closed");
    let main = sim.github_branch_head(REPO, "main").unwrap();
    assert_eq!(rest["merge_commit_sha"], main.as_str());
    assert_eq!(
        sim.github_file(REPO, "main", "feature.txt").as_deref(),
        Some(&b"content\n"[..])
    );
    // The temporary merge-group branch is gone.
    let summary = sim.github_summary(REPO).unwrap();
    assert!(
        summary["branches"]
            .as_object()
            .unwrap()
            .keys()
            .all(|b| !b.starts_with("gh-readonly-queue/"))
    );
    assert_eq!(summary["queue"], json!([]));
}

#[tokio::test]
async fn without_a_queue_merge_async_merges_directly() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    let (n, head) = setup(&gh, &sim, false, "feature").await;
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "merge_action": "default", "sha": head, "merge_method": "merge" }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let uuid = body["details"]["uuid"].as_str().unwrap().to_string();
    let done = poll_async(&gh, n, &uuid).await;
    assert_eq!(done["status"], "merged", "{done}");
    let sha = done["details"]["sha"].as_str().unwrap();
    assert_eq!(sim.github_branch_head(REPO, "main").as_deref(), Some(sha));
    let pr = pr_gql(&gh, n).await;
    assert_eq!(pr["state"], "MERGED");
    assert!(pr["mergeQueueEntry"].is_null());

    // Already merged: 200 merged at once.
    let (status, body) = gh
        .put(&format!("/repos/octo/app/pulls/{n}/merge-async"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "merged");
    assert_eq!(body["details"]["sha"], sha);

    // merge_queue on a repo without a queue fails when it runs.
    let (n2, _) = setup(&gh, &sim, false, "second").await;
    let (_, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n2}/merge-async"),
            json!({ "merge_action": "merge_queue" }),
        )
        .await;
    let done = poll_async(&gh, n2, body["details"]["uuid"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed");
    assert!(
        done["details"]["message"]
            .as_str()
            .unwrap()
            .contains("queue")
    );
}

#[tokio::test]
async fn merge_async_errors_and_scripting() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    let (n, head) = setup(&gh, &sim, false, "feature").await;

    // Validation.
    let (status, _) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "merge_action": "yolo" }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = gh
        .put("/repos/octo/app/pulls/77/merge-async", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A request that stays pending: a second submit is 409 with the existing uuid.
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 1000,
            ..MergeAsyncScript::default()
        },
    )
    .unwrap();
    let (status, first) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "sha": head }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let uuid = first["details"]["uuid"].as_str().unwrap().to_string();
    let (status, second) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "merge_method": "squash" }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(second["status"], "pending");
    assert_eq!(second["details"]["uuid"], uuid.as_str());
    let (_, polled) = gh
        .get(&format!("/repos/octo/app/pulls/{n}/merge-async/{uuid}"))
        .await;
    assert_eq!(polled["status"], "pending");
    assert_eq!(polled["details"]["uuid"], uuid.as_str());

    // Unknown uuid, wrong PR, and expiry after the retention window.
    let (status, _) = gh
        .get(&format!(
            "/repos/octo/app/pulls/{n}/merge-async/{}",
            uuid::Uuid::new_v4()
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = gh
        .get(&format!(
            "/repos/octo/app/pulls/{}/merge-async/{uuid}",
            n + 1
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    sim.advance(Duration::from_secs(25 * 3600));
    let (status, body) = gh
        .get(&format!("/repos/octo/app/pulls/{n}/merge-async/{uuid}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // A head that moved before the request ran: failed with the head-modified message.
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 2,
            ..MergeAsyncScript::default()
        },
    )
    .unwrap();
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "sha": head }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let uuid = body["details"]["uuid"].as_str().unwrap().to_string();
    sim.github_push_human_commit(REPO, "feature", &[("x.txt", Some("x"))], "moved")
        .unwrap();
    let done = poll_async(&gh, n, &uuid).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(
        done["details"]["message"],
        "Head branch was modified. Review and try the merge again."
    );

    // A scripted failure.
    sim.github_fail_next_merge_async(REPO, "Repository rule violations found")
        .unwrap();
    let (_, body) = gh
        .put(&format!("/repos/octo/app/pulls/{n}/merge-async"), json!({}))
        .await;
    let done = poll_async(&gh, n, body["details"]["uuid"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(
        done["details"]["message"],
        "Repository rule violations found"
    );

    // Zero pending ticks: the submit answers with the terminal result (200 merged).
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 0,
            ..MergeAsyncScript::default()
        },
    )
    .unwrap();
    let (status, body) = gh
        .put(&format!("/repos/octo/app/pulls/{n}/merge-async"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "merged");

    // 400 for closed and draft pull requests.
    let (n2, _) = setup(&gh, &sim, false, "closed").await;
    gh.patch(
        &format!("/repos/octo/app/pulls/{n2}"),
        json!({ "state": "closed" }),
    )
    .await;
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n2}/merge-async"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["status"], "failed");
    assert_eq!(body["details"]["message"], "Pull request is closed.");
    let (n3, _) = setup(&gh, &sim, false, "draft").await;
    sim.github_set_draft(REPO, n3, true).unwrap();
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n3}/merge-async"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["status"], "failed");
}

#[tokio::test]
async fn queue_failures_positions_and_graphql_mutations() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    let (n1, head1) = setup(&gh, &sim, true, "one").await;
    let (n2, head2) = setup(&gh, &sim, true, "two").await;
    sim.github_lock_queue(REPO, true).unwrap();

    // Enqueue both through GraphQL; the PR node ids come from GraphQL too.
    let ids = gh
        .graphql(
            r#"{ repository(owner: "octo", name: "app") { a: pullRequest(number: 1) { id } b: pullRequest(number: 2) { id } } }"#,
            json!({}),
        )
        .await;
    let id1 = ids["data"]["repository"]["a"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let id2 = ids["data"]["repository"]["b"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let enqueue = "mutation($id: ID!, $oid: GitObjectID) { enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $oid, clientMutationId: \"c1\"}) { clientMutationId mergeQueueEntry { id state position pullRequest { number } } } }";
    let wrong = gh
        .graphql(enqueue, json!({ "id": id1, "oid": "0".repeat(40) }))
        .await;
    assert!(
        wrong["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("expected head"),
        "{wrong}"
    );
    assert!(wrong["data"]["enqueuePullRequest"].is_null());
    let r1 = gh
        .graphql(enqueue, json!({ "id": id1, "oid": head1 }))
        .await;
    assert_eq!(r1["data"]["enqueuePullRequest"]["clientMutationId"], "c1");
    assert_eq!(
        r1["data"]["enqueuePullRequest"]["mergeQueueEntry"]["position"],
        1
    );
    assert_eq!(
        r1["data"]["enqueuePullRequest"]["mergeQueueEntry"]["pullRequest"]["number"],
        n1
    );
    let r2 = gh
        .graphql(enqueue, json!({ "id": id2, "oid": head2 }))
        .await;
    assert_eq!(
        r2["data"]["enqueuePullRequest"]["mergeQueueEntry"]["position"],
        2
    );

    // Batched by alias; the locked queue reports LOCKED.
    let batch = gh
        .graphql(
            r#"{ repository(owner: "octo", name: "app") {
                 pr1: pullRequest(number: 1) { number mergeQueueEntry { state position estimatedTimeToMerge } }
                 pr2: pullRequest(number: 2) { number mergeQueueEntry { state position estimatedTimeToMerge } }
                 mergeQueue { entries(first: 10) { totalCount nodes { pullRequest { number } } } } } }"#,
            json!({}),
        )
        .await;
    let repo = &batch["data"]["repository"];
    assert_eq!(repo["pr1"]["mergeQueueEntry"]["state"], "LOCKED");
    assert_eq!(repo["pr2"]["mergeQueueEntry"]["position"], 2);
    assert_eq!(repo["pr2"]["mergeQueueEntry"]["estimatedTimeToMerge"], 600);
    assert_eq!(repo["mergeQueue"]["entries"]["totalCount"], 2);

    // Dequeue the second through GraphQL (by PR id); the first is scripted to fail.
    let dq = gh
        .graphql(
            "mutation($id: ID!) { dequeuePullRequest(input: {id: $id}) { mergeQueueEntry { state position } } }",
            json!({ "id": id2 }),
        )
        .await;
    assert!(dq.get("errors").is_none(), "{dq}");
    assert_eq!(
        dq["data"]["dequeuePullRequest"]["mergeQueueEntry"]["position"],
        2
    );
    assert!(pr_gql(&gh, n2).await["mergeQueueEntry"].is_null());
    sim.github_script_queue_failure(REPO, n1, "Required status check \"ci\" failed")
        .unwrap();
    sim.github_lock_queue(REPO, false).unwrap();
    let mut states = Vec::new();
    loop {
        let pr = pr_gql(&gh, n1).await;
        if pr["mergeQueueEntry"].is_null() {
            assert_eq!(pr["state"], "OPEN", "a failed entry leaves the PR open");
            break;
        }
        states.push(pr["mergeQueueEntry"]["state"].as_str().unwrap().to_string());
        assert!(states.len() < 50, "{states:?}");
    }
    assert!(states.contains(&"UNMERGEABLE".to_string()), "{states:?}");

    // Failing checks on the merge group also make the entry unmergeable.
    sim.github_script_checks(
        REPO,
        vec![CheckScript::new(
            "ci",
            JobOutcome::fail("script_failure", "red"),
        )],
    )
    .unwrap();
    let r = gh
        .graphql(enqueue, json!({ "id": id2, "oid": head2 }))
        .await;
    assert!(r.get("errors").is_none(), "{r}");
    let mut states = Vec::new();
    loop {
        let pr = pr_gql(&gh, n2).await;
        if pr["mergeQueueEntry"].is_null() {
            assert_eq!(pr["merged"], false);
            break;
        }
        states.push(pr["mergeQueueEntry"]["state"].as_str().unwrap().to_string());
        assert!(states.len() < 50, "{states:?}");
    }
    assert!(states.contains(&"UNMERGEABLE".to_string()), "{states:?}");
}

#[tokio::test]
async fn graphql_reports_unknown_fields_and_missing_objects() {
    let sim = start_stepped_sim().await;
    let gh = ApiClient::github(&sim);
    setup(&gh, &sim, false, "feature").await;

    let body = gh
        .graphql(r#"{ repository(owner: "octo", name: "app") { pullRequest(number: 1) { number bogusField } } }"#, json!({}))
        .await;
    assert!(
        body.get("data").is_none(),
        "validation errors carry no data: {body}"
    );
    assert_eq!(
        body["errors"][0]["message"],
        "Field 'bogusField' doesn't exist on type 'PullRequest'"
    );
    assert_eq!(body["errors"][0]["extensions"]["code"], "undefinedField");

    let body = gh
        .graphql(
            r#"{ repository(owner: "octo", name: "app") { a: pullRequest(number: 1) { number } b: pullRequest(number: 99) { number } } }"#,
            json!({}),
        )
        .await;
    assert_eq!(body["data"]["repository"]["a"]["number"], 1);
    assert!(body["data"]["repository"]["b"].is_null());
    assert_eq!(body["errors"][0]["type"], "NOT_FOUND");
    assert_eq!(body["errors"][0]["path"], json!(["repository", "b"]));

    let body = gh
        .graphql(
            r#"{ repository(owner: "octo", name: "nope") { id } }"#,
            json!({}),
        )
        .await;
    assert!(body["data"]["repository"].is_null());
    assert_eq!(body["errors"][0]["type"], "NOT_FOUND");

    let body = gh.graphql("{ repository(owner: ", json!({})).await;
    assert!(body["errors"][0]["message"].is_string());
    assert!(body.get("data").is_none());

    let body = gh
        .graphql(
            r#"query { repository(owner: "octo", name: "app") { pullRequest(number: 1) { reviewThreads { totalCount } } } }"#,
            json!({}),
        )
        .await;
    assert_eq!(body["errors"][0]["type"], "MISSING_PAGINATION_BOUNDARIES");

    // Fragments and __typename.
    let body = gh
        .graphql(
            r#"query Q { viewer { login } repository(owner: "octo", name: "app") { nameWithOwner pullRequest(number: 1) { ...F ... on PullRequest { isDraft } } } }
               fragment F on PullRequest { __typename title headRefName }"#,
            json!({}),
        )
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    assert_eq!(body["data"]["viewer"]["login"], forge_sim::DEFAULT_USERNAME);
    assert_eq!(body["data"]["repository"]["nameWithOwner"], "octo/app");
    let pr = &body["data"]["repository"]["pullRequest"];
    assert_eq!(pr["__typename"], "PullRequest");
    assert_eq!(pr["headRefName"], "feature");
    assert_eq!(pr["isDraft"], false);
}

/// `PullRequest.statusCheckRollup.contexts`: the head's latest check run per name
/// (`CheckRun`) and latest status per context (`StatusContext`), upper-case as GitHub's
/// GraphQL spells them, agreeing with REST; `null` on a head without any.
#[tokio::test]
async fn graphql_status_check_rollup_lists_the_heads_checks_and_statuses() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").checks(&[
            CheckScript::new("ci", JobOutcome::Success).duration_secs(60),
            CheckScript::new("lint", JobOutcome::Success)
                .duration_secs(60)
                .as_status(),
        ]),
    );
    let gh = ApiClient::github(&sim);
    sim.github_push_human_commit(REPO, "main", &[("README.md", Some("r\n"))], "init")
        .expect("main");
    sim.github_push_human_commit(REPO, "feature", &[("f.txt", Some("f\n"))], "feature")
        .expect("branch");
    let n = gh.open_pr(REPO, "feature", "Feature").await;
    let query = r#"query($n: Int!) { repository(owner: "octo", name: "app") { pullRequest(number: $n) {
        headRefOid
        statusCheckRollup { state contexts(first: 10) { totalCount nodes { __typename
          ... on CheckRun { name status conclusion } ... on StatusContext { context state } } } } } } }"#;
    let rollup =
        |body: &Value| body["data"]["repository"]["pullRequest"]["statusCheckRollup"].clone();
    sim.tick();
    let body = gh.graphql(query, json!({ "n": n })).await;
    assert!(body.get("errors").is_none(), "{body}");
    let head = body["data"]["repository"]["pullRequest"]["headRefOid"]
        .as_str()
        .expect("head")
        .to_string();
    let running = rollup(&body);
    assert_eq!(running["state"], "PENDING", "{running}");
    assert_eq!(running["contexts"]["totalCount"], 2);
    assert_eq!(
        running["contexts"]["nodes"],
        json!([
            { "__typename": "CheckRun", "name": "ci", "status": "IN_PROGRESS", "conclusion": null },
            { "__typename": "StatusContext", "context": "lint", "state": "PENDING" },
        ])
    );
    let (_, runs) = gh
        .get(&format!("/repos/{REPO}/commits/{head}/check-runs"))
        .await;
    assert_eq!(runs["check_runs"][0]["status"], "in_progress", "{runs}");

    sim.advance(Duration::from_secs(60));
    sim.tick();
    let body = gh.graphql(query, json!({ "n": n })).await;
    let done = rollup(&body);
    assert_eq!(done["state"], "SUCCESS", "{done}");
    assert_eq!(
        done["contexts"]["nodes"],
        json!([
            { "__typename": "CheckRun", "name": "ci", "status": "COMPLETED", "conclusion": "SUCCESS" },
            { "__typename": "StatusContext", "context": "lint", "state": "SUCCESS" },
        ])
    );

    // A head without checks or statuses has no rollup.
    sim.github_script_checks(REPO, Vec::new())
        .expect("no checks");
    sim.github_push_human_commit(REPO, "bare", &[("b.txt", Some("b\n"))], "bare")
        .expect("branch");
    let bare = gh.open_pr(REPO, "bare", "Bare").await;
    let body = gh.graphql(query, json!({ "n": bare })).await;
    assert!(rollup(&body).is_null(), "{body}");
}
