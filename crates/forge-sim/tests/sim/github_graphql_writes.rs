//! GitHub's GraphQL writes: the git mutations (`createRef`,
//! `createCommitOnBranch`, `updateRef`, `deleteRef`) and a pull request's
//! labels and comments (`addLabelsToLabelable`, `addComment`), as GitHub's
//! GraphQL reference documents them, checked against what the REST API
//! then shows.

use crate::{REPO, create_repo};
use base64::Engine as _;
use forge_sim::github::GithubRepoSpec;
use forge_sim::testing::{ApiClient, start_stepped_sim};
use serde_json::{Value, json};

const MUTATION: &str = "mutation($repository: ID!, $ref: String!, $oid: GitObjectID!, $commit: CreateCommitOnBranchInput!) { \
created: createRef(input: {repositoryId: $repository, name: $ref, oid: $oid}) { ref { id name target { oid } } } \
commit: createCommitOnBranch(input: $commit) { commit { oid message tree { oid } } ref { id name } } }";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn repository_id(gh: &ApiClient) -> String {
    let body = gh
        .graphql(
            "query { repository(owner: \"octo\", name: \"app\") { id } }",
            json!({}),
        )
        .await;
    body["data"]["repository"]["id"]
        .as_str()
        .expect("repository id")
        .to_owned()
}

/// The input of a commit on `branch` expected at `head`.
fn commit_input(branch: &str, head: &str, changes: Value) -> Value {
    json!({
        "branch": { "repositoryNameWithOwner": REPO, "branchName": branch },
        "expectedHeadOid": head,
        "fileChanges": changes,
        "message": { "headline": "Add the docs", "body": "Why they are needed." },
    })
}

fn error_paths(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| e["path"][0].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One request creates a branch at the base and appends a commit to it:
/// mutations run in order, and the REST git data API shows the result.
#[tokio::test]
async fn a_branch_and_its_commit_in_one_request() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let main = sim.github_branch_head(REPO, "main").unwrap();
    let repository = repository_id(&gh).await;
    let variables = json!({
        "repository": repository,
        "ref": "refs/heads/docs",
        "oid": main,
        "commit": commit_input("docs", &main, json!({
            "additions": [{ "path": "docs/a.md", "contents": b64("a\n") }],
            "deletions": [{ "path": "README.md" }],
        })),
    });
    let body = gh.graphql(MUTATION, variables.clone()).await;
    assert!(body.get("errors").is_none(), "{body}");
    let created = &body["data"]["created"]["ref"];
    assert_eq!(created["name"], "docs");
    assert_eq!(
        created["target"]["oid"],
        main.as_str(),
        "created at the base"
    );
    let commit = &body["data"]["commit"]["commit"];
    let sha = commit["oid"].as_str().unwrap().to_owned();
    assert_eq!(commit["message"], "Add the docs\n\nWhy they are needed.");
    assert_eq!(body["data"]["commit"]["ref"]["id"], created["id"]);
    assert_eq!(sim.github_branch_head(REPO, "docs").unwrap(), sha);

    let (_, rest) = gh.get(&format!("/repos/octo/app/git/commits/{sha}")).await;
    assert_eq!(rest["parents"][0]["sha"], main.as_str());
    assert_eq!(rest["tree"]["sha"], commit["tree"]["oid"]);
    let (_, file) = gh.get("/repos/octo/app/contents/docs/a.md?ref=docs").await;
    assert_eq!(
        file["content"].as_str().unwrap().replace('\n', ""),
        b64("a\n")
    );
    let (status, _) = gh.get("/repos/octo/app/contents/README.md?ref=docs").await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);

    // Again: the ref exists, and the commit's expected head is stale. Both
    // fields fail, each with its error, and nothing moves.
    let again = gh.graphql(MUTATION, variables).await;
    assert_eq!(error_paths(&again), ["created", "commit"], "{again}");
    assert!(again["data"]["created"].is_null() && again["data"]["commit"].is_null());
    let messages = again["errors"].to_string();
    assert!(messages.contains("already exists"), "{messages}");
    assert!(
        messages.contains("Expected branch to point to"),
        "{messages}"
    );
    assert_eq!(sim.github_branch_head(REPO, "docs").unwrap(), sha);
}

/// `FileChanges` as documented: unique paths, padded base64, deletions of
/// paths that exist; no changes at all make a commit with the parent's
/// tree. A refused commit writes nothing.
#[tokio::test]
async fn file_changes_are_checked_before_anything_is_written() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let main = sim.github_branch_head(REPO, "main").unwrap();
    let commit = "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) { commit { oid tree { oid } } } }";
    for (changes, expected) in [
        (
            json!({ "additions": [{ "path": "a", "contents": b64("1") }], "deletions": [{ "path": "a" }] }),
            "more than once",
        ),
        (
            json!({ "additions": [{ "path": "a", "contents": "YQ" }] }),
            "base64",
        ),
        (
            json!({ "deletions": [{ "path": "missing.txt" }] }),
            "does not exist",
        ),
        (
            json!({ "additions": [{ "path": "README.md/x", "contents": b64("1") }] }),
            "is a file",
        ),
    ] {
        let body = gh
            .graphql(
                commit,
                json!({ "input": commit_input("main", &main, changes) }),
            )
            .await;
        assert!(body["data"]["createCommitOnBranch"].is_null(), "{body}");
        assert!(
            body["errors"].to_string().contains(expected),
            "{expected}: {body}"
        );
        assert_eq!(sim.github_branch_head(REPO, "main").unwrap(), main);
    }
    let body = gh
        .graphql(
            commit,
            json!({ "input": commit_input("main", &main, json!({})) }),
        )
        .await;
    let empty = &body["data"]["createCommitOnBranch"]["commit"];
    let (_, parent) = gh.get(&format!("/repos/octo/app/git/commits/{main}")).await;
    assert_eq!(empty["tree"]["oid"], parent["tree"]["sha"], "{body}");
    assert_ne!(empty["oid"], main.as_str());
}

/// `updateRef` moves a branch (a non-fast-forward only with `force`) and
/// `deleteRef` removes it, both by the ref's node id.
#[tokio::test]
async fn refs_are_moved_and_deleted_by_node_id() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    let main = sim.github_branch_head(REPO, "main").unwrap();
    let repository = repository_id(&gh).await;
    let body = gh
        .graphql(
            MUTATION,
            json!({
                "repository": repository,
                "ref": "refs/heads/topic",
                "oid": main,
                "commit": commit_input("topic", &main, json!({
                    "additions": [{ "path": "t.txt", "contents": b64("t\n") }],
                })),
            }),
        )
        .await;
    let id = body["data"]["created"]["ref"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let update = "mutation($id: ID!, $oid: GitObjectID!, $force: Boolean) { updateRef(input: {refId: $id, oid: $oid, force: $force}) { ref { name target { oid } } } }";
    let refused = gh
        .graphql(update, json!({ "id": id, "oid": main, "force": false }))
        .await;
    assert!(
        refused["errors"].to_string().contains("fast forward"),
        "{refused}"
    );
    let moved = gh
        .graphql(update, json!({ "id": id, "oid": main, "force": true }))
        .await;
    assert_eq!(
        moved["data"]["updateRef"]["ref"]["target"]["oid"],
        main.as_str(),
        "{moved}"
    );
    let node = gh
        .graphql(
            "query($id: ID!) { node(id: $id) { ... on Ref { name } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(node["data"]["node"]["name"], "topic", "{node}");
    let delete = "mutation($id: ID!) { deleteRef(input: {refId: $id, clientMutationId: \"x\"}) { clientMutationId } }";
    let deleted = gh.graphql(delete, json!({ "id": id })).await;
    assert_eq!(
        deleted["data"]["deleteRef"]["clientMutationId"], "x",
        "{deleted}"
    );
    assert!(sim.github_branch_head(REPO, "topic").is_none());
    let gone = gh.graphql(delete, json!({ "id": id })).await;
    assert!(
        gone["errors"].to_string().contains("Could not resolve"),
        "{gone}"
    );
}

/// A label is the repository's once a pull request had it (REST makes
/// it); `Repository.label(name:)` finds it by name, whatever the case, with
/// the node id REST gives it. One request adds labels by node id and
/// comments: the comment is the one REST lists.
#[tokio::test]
async fn labels_and_a_comment_in_one_request() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let gh = ApiClient::github(&sim);
    gh.commit_files(REPO, "first", &[("a.txt", "a\n")], "first")
        .await;
    let first = gh.open_pr(REPO, "first", "first").await;
    gh.commit_files(REPO, "second", &[("b.txt", "b\n")], "second")
        .await;
    let second = gh.open_pr(REPO, "second", "second").await;
    let lookup = "query { repository(owner: \"octo\", name: \"app\") { \
        known: label(name: \"WORKQUEUE\") { id name } unknown: label(name: \"other\") { id } \
        pullRequest(number: 2) { id } } }";
    let before = gh.graphql(lookup, json!({})).await;
    assert!(before["data"]["repository"]["known"].is_null(), "{before}");
    let (status, labels) = gh
        .post(
            &format!("/repos/octo/app/issues/{first}/labels"),
            json!({ "labels": ["workqueue"] }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{labels}");
    let after = gh.graphql(lookup, json!({})).await;
    let repository = &after["data"]["repository"];
    assert_eq!(repository["known"]["name"], "workqueue", "{after}");
    assert_eq!(
        repository["known"]["id"], labels[0]["node_id"],
        "REST's node id"
    );
    assert!(repository["unknown"].is_null());

    let write = "mutation($pr: ID!, $labels: [ID!]!, $body: String!) { \
        labels: addLabelsToLabelable(input: {labelableId: $pr, labelIds: $labels}) { labelable { ... on PullRequest { number } } } \
        note: addComment(input: {subjectId: $pr, body: $body}) { commentEdge { node { databaseId fullDatabaseId body } } } }";
    let body = gh
        .graphql(
            write,
            json!({
                "pr": repository["pullRequest"]["id"],
                "labels": [repository["known"]["id"]],
                "body": "status",
            }),
        )
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    assert_eq!(body["data"]["labels"]["labelable"]["number"], second);
    let node = &body["data"]["note"]["commentEdge"]["node"];
    let id = node["databaseId"].as_u64().expect("comment id");
    assert_eq!(
        node["fullDatabaseId"],
        id.to_string(),
        "a BigInt, as a string"
    );
    let (_, labels) = gh
        .get(&format!("/repos/octo/app/issues/{second}/labels"))
        .await;
    assert_eq!(labels[0]["name"], "workqueue");
    let (_, comments) = gh
        .get(&format!("/repos/octo/app/issues/{second}/comments"))
        .await;
    assert_eq!(comments[0]["id"], id);
    assert_eq!(comments[0]["body"], "status");

    // An unknown label id adds nothing; the comment of the same request
    // still lands, and each field says how it went.
    let body = gh
        .graphql(
            write,
            json!({ "pr": repository["pullRequest"]["id"], "labels": ["LA_missing"], "body": "again" }),
        )
        .await;
    assert_eq!(error_paths(&body), ["labels"], "{body}");
    assert!(body["data"]["note"]["commentEdge"]["node"]["databaseId"].is_u64());
}
