//! GitLab endpoints of forge-sim over real HTTP: auth, projects, files, branches, commits, compare,
//! merge requests, notes, approvals, merge rules, pipelines, jobs, retry, trains, webhooks.

use std::time::Duration;

use forge_sim::testing::{ApiClient, Receiver, TOKEN, commit_body, start_sim};
use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Grape checks the parameters (body first) before a numeric path segment, and both before the
/// project is looked up; a segment that is not a number is named by its parameter.
#[tokio::test]
async fn numeric_path_segments_are_checked_after_the_parameters_and_before_the_project() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    for (path, message) in [
        (
            format!("/projects/{project}/merge_requests/x"),
            "merge_request_iid is invalid",
        ),
        (
            "/projects/group%2Fmissing/merge_requests/x".to_string(),
            "merge_request_iid is invalid",
        ),
        (
            format!("/projects/{project}/merge_requests/x/pipelines"),
            "merge_request_iid is invalid",
        ),
        (
            format!("/projects/{project}/merge_requests/x/notes"),
            "noteable_id is invalid",
        ),
        (
            format!("/projects/{project}/merge_requests/1/notes/x"),
            "note_id is invalid",
        ),
        (
            format!("/projects/{project}/pipelines/x"),
            "pipeline_id is invalid",
        ),
        (format!("/projects/{project}/jobs/x"), "job_id is invalid"),
        (
            format!("/projects/{project}/merge_trains/merge_requests/x"),
            "merge_request_iid is invalid",
        ),
    ] {
        let (status, body) = api.get(&path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(body, json!({ "error": message }), "{path}");
    }
    let response = api
        .client
        .put(format!("{}/projects/{project}/merge_requests/x", api.base))
        .header("PRIVATE-TOKEN", TOKEN)
        .header("Content-Type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        json!({ "error": "There was a problem with the JSON in your request" }),
        "the body before the path"
    );
    let (status, body) = api.get("/projects/group%2Fmissing/merge_requests/1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({ "message": "404 Project Not Found" }));
}

#[tokio::test]
async fn auth_is_required_and_accepts_private_token_or_bearer() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let client = reqwest::Client::new();
    let url = format!("{}/projects/{project}", sim.gitlab_url());

    let response = client.get(&url).send().await.expect("answered");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body, json!({"message": "401 Unauthorized"}));

    let response = client
        .get(&url)
        .header("PRIVATE-TOKEN", "wrong")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    let response = client
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);

    sim.add_user("alice", "alice-token");
    let api = ApiClient::gitlab(&sim).with_auth(Some("alice-token"));
    let (status, user) = api.get("/user").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user["username"], "alice");

    // Project by URL-encoded path.
    let (status, body) = api.get("/projects/group%2Fapp").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["id"], project);
    assert_eq!(body["path_with_namespace"], "group/app");
    assert_eq!(body["default_branch"], "main");
    let (status, body) = api.get("/projects/group%2Fnope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "404 Project Not Found");
}

#[tokio::test]
async fn files_and_branches() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");

    let (status, file) = api
        .get(&format!("{p}/repository/files/README.md?ref=main"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(file["encoding"], "base64");
    assert_eq!(file["file_path"], "README.md");
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(file["content"].as_str().expect("content"))
        .expect("base64");
    assert_eq!(decoded, b"# Project\n");
    assert_eq!(file["commit_id"].as_str().map(str::len), Some(40));

    let (status, raw) = api
        .get_text(&format!("{p}/repository/files/README.md/raw?ref=main"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(raw, "# Project\n");

    let (status, body) = api.get(&format!("{p}/repository/files/README.md")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "ref is missing");
    let (status, body) = api
        .get(&format!("{p}/repository/files/nope.txt?ref=main"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "404 File Not Found");

    // Nested path, URL-encoded.
    let (status, _) = api
        .post(
            &format!("{p}/repository/commits"),
            commit_body("main", None, &[("create", "src/lib.rs", "fn x() {}\n")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, raw) = api
        .get_text(&format!("{p}/repository/files/src%2Flib.rs/raw?ref=main"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(raw, "fn x() {}\n");

    // Branches.
    let (status, branch) = api
        .post(
            &format!("{p}/repository/branches"),
            json!({"branch": "feature/x", "ref": "main"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(branch["name"], "feature/x");
    assert_eq!(
        branch["commit"]["id"].as_str(),
        sim.gitlab_branch_head(project, "main").as_deref()
    );
    let (status, body) = api
        .post(
            &format!("{p}/repository/branches"),
            json!({"branch": "feature/x", "ref": "main"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "Branch already exists");
    let (status, body) = api
        .post(
            &format!("{p}/repository/branches"),
            json!({"branch": "y", "ref": "nope"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "Invalid reference name: nope");
    let (status, body) = api
        .post(&format!("{p}/repository/branches"), json!({"ref": "main"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "branch is missing");

    let (status, list) = api.get(&format!("{p}/repository/branches")).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, vec!["feature/x", "main"]);

    let (status, branch) = api
        .get(&format!("{p}/repository/branches/feature%2Fx"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(branch["default"], false);
    let (status, _) = api
        .delete(&format!("{p}/repository/branches/feature%2Fx"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api
        .get(&format!("{p}/repository/branches/feature%2Fx"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "404 Branch Not Found");
    let (status, _) = api
        .delete(&format!("{p}/repository/branches/feature%2Fx"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn commits_with_actions_and_gitlab_errors() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let commits = format!("/projects/{project}/repository/commits");

    // Missing params: Grape-style error naming each.
    let (status, body) = api.post(&commits, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "branch is missing, commit_message is missing, actions is missing"
    );

    // New branch without start_branch.
    let (status, body) = api
        .post(
            &commits,
            commit_body("feature", None, &[("create", "a.txt", "a")]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["message"],
        "You can only create or edit files when you are on a branch"
    );

    // New branch from main with every action kind.
    let main_head = sim.gitlab_branch_head(project, "main").expect("main");
    let (status, commit) = api
        .post(
            &commits,
            json!({
                "branch": "feature",
                "start_branch": "main",
                "commit_message": "Add files\n\nbody",
                "actions": [
                    {"action": "create", "file_path": "a.txt", "content": "a\n"},
                    {"action": "create", "file_path": "bin/run", "content": "IyEvYmluL3NoCg==", "encoding": "base64", "execute_filemode": true},
                    {"action": "update", "file_path": "README.md", "content": "# New\n"},
                    {"action": "create", "file_path": "old.txt", "content": "moving"},
                ],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{commit}");
    assert_eq!(commit["title"], "Add files");
    assert_eq!(commit["parent_ids"], json!([main_head]));
    assert_eq!(commit["author_name"], forge_sim::DEFAULT_USERNAME);
    assert!(commit["stats"]["additions"].as_u64().expect("stats") >= 3);
    assert_eq!(
        sim.gitlab_file(project, "feature", "bin/run").as_deref(),
        Some(&b"#!/bin/sh\n"[..])
    );

    let (status, _) = api
        .post(
            &commits,
            json!({
                "branch": "feature",
                "commit_message": "Move, chmod, delete",
                "actions": [
                    {"action": "move", "file_path": "new.txt", "previous_path": "old.txt"},
                    {"action": "chmod", "file_path": "a.txt", "execute_filemode": true},
                    {"action": "delete", "file_path": "README.md"},
                ],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, file) = api
        .get(&format!(
            "/projects/{project}/repository/files/a.txt?ref=feature"
        ))
        .await;
    assert_eq!(file["execute_filemode"], true);
    assert_eq!(
        sim.gitlab_file(project, "feature", "new.txt").as_deref(),
        Some(&b"moving"[..])
    );
    assert!(sim.gitlab_file(project, "feature", "old.txt").is_none());
    assert!(sim.gitlab_file(project, "feature", "README.md").is_none());

    // GitLab's action errors.
    let cases = [
        (
            json!({"action": "create", "file_path": "a.txt", "content": "x"}),
            "A file with this name already exists",
        ),
        (
            json!({"action": "update", "file_path": "zzz.txt", "content": "x"}),
            "A file with this name doesn't exist",
        ),
        (
            json!({"action": "delete", "file_path": "zzz.txt"}),
            "A file with this name doesn't exist",
        ),
        (
            json!({"action": "move", "file_path": "b.txt", "previous_path": "zzz.txt"}),
            "A file with this name doesn't exist",
        ),
    ];
    for (action, message) in cases {
        let (status, body) = api
            .post(
                &commits,
                json!({"branch": "feature", "commit_message": "x", "actions": [action]}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["message"], message);
    }
    let (status, body) = api
        .post(&commits, json!({"branch": "feature", "commit_message": "x", "actions": [{"action": "explode", "file_path": "a"}]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "actions[0][action] does not have a valid value"
    );

    // Existing branch from another start branch without force.
    let (status, body) = api
        .post(
            &commits,
            commit_body("feature", Some("main"), &[("create", "z.txt", "z")]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["message"],
        "A branch called 'feature' already exists. Switch to that branch in order to make changes"
    );

    // force + start_branch rewrites the branch to main + actions (a force push).
    let old_head = sim.gitlab_branch_head(project, "feature").expect("feature");
    let mut body = commit_body("feature", Some("main"), &[("create", "only.txt", "only")]);
    body["force"] = json!(true);
    let (status, commit) = api.post(&commits, body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(commit["parent_ids"], json!([main_head]));
    assert_ne!(commit["id"].as_str(), Some(old_head.as_str()));
    assert!(sim.gitlab_file(project, "feature", "a.txt").is_none());
    assert_eq!(
        sim.gitlab_file(project, "feature", "README.md").as_deref(),
        Some(&b"# Project\n"[..])
    );

    // start_sha.
    let (status, commit) = api
        .post(&commits, json!({"branch": "from-sha", "start_sha": main_head, "commit_message": "s", "actions": [{"action": "create", "file_path": "s", "content": "s"}]}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(commit["parent_ids"], json!([main_head]));
    let (status, body) = api
        .post(&commits, json!({"branch": "b", "start_sha": main_head, "start_branch": "main", "commit_message": "s", "actions": [{"action": "create", "file_path": "s", "content": "s"}]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "start_branch, start_sha are mutually exclusive"
    );

    let (status, single) = api
        .get(&format!("{commits}/{}", commit["id"].as_str().expect("id")))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(single["id"], commit["id"]);
}

#[tokio::test]
async fn compare_reports_commits_and_diffs() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("group/app").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "f.txt", "hello\n")]),
    )
    .await;

    let (status, body) = api
        .get(&format!("{p}/repository/compare?from=main&to=feature"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["compare_same_ref"], false);
    assert_eq!(body["commits"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        body["commit"]["id"].as_str(),
        sim.gitlab_branch_head(project, "feature").as_deref()
    );
    let diffs = body["diffs"].as_array().expect("diffs");
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0]["new_path"], "f.txt");
    assert_eq!(diffs[0]["new_file"], true);
    assert!(diffs[0]["diff"].as_str().expect("diff").contains("+hello"));

    let (_, same) = api
        .get(&format!("{p}/repository/compare?from=main&to=main"))
        .await;
    assert_eq!(same["compare_same_ref"], true);
    assert_eq!(same["diffs"], json!([]));

    // A force push back to main's tree: a new commit, identical trees, empty diffs.
    let mut body = commit_body("feature", Some("main"), &[("create", "tmp", "x")]);
    body["force"] = json!(true);
    api.post(&format!("{p}/repository/commits"), body).await;
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", None, &[("delete", "tmp", "")]),
    )
    .await;
    let (_, identical) = api
        .get(&format!("{p}/repository/compare?from=main&to=feature"))
        .await;
    assert_eq!(identical["diffs"], json!([]));
    assert_eq!(identical["commits"].as_array().map(Vec::len), Some(2));
    assert_eq!(identical["compare_same_ref"], false);

    let (status, body) = api.get(&format!("{p}/repository/compare?from=main")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "to is missing");
    let (status, _) = api
        .get(&format!("{p}/repository/compare?from=main&to=nope"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn merge_request_lifecycle_notes_and_approvals() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("group/app")
        .approvals_required(1)
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "f.txt", "f")]),
    )
    .await;

    let (status, body) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "target_branch is missing, title is missing");

    let (status, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "Draft: Add f", "description": "d", "labels": "bot,ci", "remove_source_branch": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{mr}");
    assert_eq!(mr["iid"], 1);
    assert_eq!(mr["project_id"], project);
    assert_eq!(mr["state"], "opened");
    assert_eq!(mr["draft"], true);
    assert_eq!(mr["labels"], json!(["bot", "ci"]));
    // The answer is the merge request before GitLab's preparation, which
    // runs after it (`NewMergeRequestWorker`): `preparing`, no head
    // pipeline yet; a read shows it prepared.
    assert_eq!(mr["detailed_merge_status"], "preparing");
    assert_eq!(mr["merge_status"], "preparing");
    assert_eq!(mr["head_pipeline"], Value::Null);
    let (status, read) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["detailed_merge_status"], "draft_status");
    assert_eq!(read["head_pipeline"]["sha"], mr["sha"]);
    assert_eq!(
        mr["sha"].as_str(),
        sim.gitlab_branch_head(project, "feature").as_deref()
    );
    assert_eq!(mr["force_remove_source_branch"], true);
    assert!(
        mr["web_url"]
            .as_str()
            .expect("url")
            .ends_with("/group/app/-/merge_requests/1")
    );
    assert_eq!(mr["has_conflicts"], false);
    assert_eq!(mr["blocking_discussions_resolved"], true);

    let (status, body) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "dup"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["message"],
        json!(["Another open merge request already exists for this source branch: !1"])
    );
    let (status, body) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "nope", "target_branch": "main", "title": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        body["message"],
        json!(["Source branch \"nope\" does not exist"])
    );

    // Update: title (un-draft), labels, description.
    let (status, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"title": "Add f", "labels": "bot", "description": "new"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mr["draft"], false);
    assert_eq!(mr["labels"], json!(["bot"]));
    assert_eq!(mr["description"], "new");
    let (status, body) = api.put(&format!("{p}/merge_requests/1"), json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("at least one parameter must be provided")
    );

    // The pipeline passes; approvals are still missing.
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "success"
        })
        .await;
    assert_eq!(mr["detailed_merge_status"], "not_approved");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["approved"], false);
    assert_eq!(approvals["approvals_required"], 1);
    assert_eq!(approvals["approvals_left"], 1);
    let (status, body) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["message"], "405 Method Not Allowed");

    sim.gitlab_approve(project, 1, "reviewer").expect("approve");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["approved"], true);
    assert_eq!(approvals["approvals_left"], 0);
    assert_eq!(approvals["approved_by"][0]["user"]["username"], "reviewer");

    // Blocking discussions.
    sim.gitlab_set_unresolved_discussions(project, 1, 1)
        .expect("discussions");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["detailed_merge_status"], "discussions_not_resolved");
    assert_eq!(mr["blocking_discussions_resolved"], false);
    let (status, _) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    sim.gitlab_set_unresolved_discussions(project, 1, 0)
        .expect("discussions");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["detailed_merge_status"], "mergeable");

    // Notes.
    let (status, note) = api
        .post(
            &format!("{p}/merge_requests/1/notes"),
            json!({"body": "status: ok"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(note["body"], "status: ok");
    assert_eq!(note["system"], false);
    assert_eq!(note["author"]["username"], forge_sim::DEFAULT_USERNAME);
    let note_id = note["id"].as_u64().expect("note id");
    let (status, note) = api
        .put(
            &format!("{p}/merge_requests/1/notes/{note_id}"),
            json!({"body": "status: better"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(note["body"], "status: better");
    let (_, notes) = api.get(&format!("{p}/merge_requests/1/notes")).await;
    assert_eq!(notes.as_array().map(Vec::len), Some(1));
    assert_eq!(notes[0]["id"], note_id);
    let (status, body) = api
        .post(&format!("{p}/merge_requests/1/notes"), json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "body is missing");

    // Close, list filters, reopen.
    let (_, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"state_event": "close"}),
        )
        .await;
    assert_eq!(mr["state"], "closed");
    assert_eq!(mr["detailed_merge_status"], "not_open");
    let (status, _) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (_, opened) = api
        .get(&format!(
            "{p}/merge_requests?state=opened&source_branch=feature"
        ))
        .await;
    assert_eq!(opened, json!([]));
    let (_, closed) = api
        .get(&format!(
            "{p}/merge_requests?state=closed&source_branch=feature"
        ))
        .await;
    assert_eq!(closed.as_array().map(Vec::len), Some(1));
    let (_, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"state_event": "reopen"}),
        )
        .await;
    assert_eq!(mr["state"], "opened");
    let (status, body) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"state_event": "explode"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "state_event does not have a valid value");

    // Merge with the right sha; source branch removed as requested.
    let sha = mr["sha"].as_str().expect("sha").to_string();
    let (status, merged) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({"sha": sha}))
        .await;
    assert_eq!(status, StatusCode::OK, "{merged}");
    assert_eq!(merged["state"], "merged");
    let merge_sha = merged["merge_commit_sha"].as_str().expect("merge sha");
    assert_eq!(
        sim.gitlab_branch_head(project, "main").as_deref(),
        Some(merge_sha)
    );
    assert_eq!(
        sim.gitlab_file(project, "main", "f.txt").as_deref(),
        Some(&b"f"[..])
    );
    assert!(sim.gitlab_branch_head(project, "feature").is_none());
    let (status, _) = api.get(&format!("{p}/merge_requests/99")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn merge_refuses_running_pipeline_conflicts_and_stale_sha() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("group/app")
        .job(JobSpec::new("test", JobOutcome::Success).duration_secs(30))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("update", "README.md", "mine")]),
    )
    .await;
    let (_, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
        )
        .await;
    let sha = mr["sha"].as_str().expect("sha").to_string();

    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "running"
        })
        .await;
    assert_eq!(mr["detailed_merge_status"], "ci_still_running");
    let (status, _) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({"sha": sha}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    sim.advance(Duration::from_secs(31));
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "success"
        })
        .await;
    assert_eq!(mr["detailed_merge_status"], "mergeable");

    // Stale sha.
    let (status, body) = api
        .put(
            &format!("{p}/merge_requests/1/merge"),
            json!({"sha": "0123456789012345678901234567890123456789"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["message"],
        format!("SHA does not match HEAD of source branch: {sha}")
    );

    // Someone changes README.md on main: conflict.
    sim.gitlab_push(
        project,
        "main",
        &[("README.md", Some("theirs"))],
        "human edit",
    )
    .expect("push");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["has_conflicts"], true);
    assert_eq!(mr["detailed_merge_status"], "conflict");
    let (status, body) = api
        .put(&format!("{p}/merge_requests/1/merge"), json!({"sha": sha}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["message"], "Branch cannot be merged");
}

#[tokio::test]
async fn merge_when_pipeline_succeeds() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("group/app")
        .job(JobSpec::new("test", JobOutcome::Success).duration_secs(60))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "x", "x")]),
    )
    .await;
    let (_, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
        )
        .await;
    let (status, mr) = api
        .put(
            &format!("{p}/merge_requests/1/merge"),
            json!({"sha": mr["sha"], "merge_when_pipeline_succeeds": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mr["state"], "opened");
    assert_eq!(mr["merge_when_pipeline_succeeds"], true);
    sim.advance(Duration::from_secs(61));
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["state"] == "merged"
        })
        .await;
    assert!(mr["merge_commit_sha"].is_string());
}

/// A project running merge request pipelines: the MR's pipelines run on
/// `refs/merge-requests/<iid>/head` with source `merge_request_event`, the
/// Pipeline Hook carries the merge request and the Job Hook the ref; a
/// branch pipeline's hook carries no merge request.
#[tokio::test]
async fn merge_request_pipelines_run_on_the_merge_request_ref() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let project = sim
        .gitlab_project("g/mrp")
        .merge_request_pipelines(true)
        .webhook(&receiver.url, "s")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "x", "1")]),
    )
    .await;
    let (_, created) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
        )
        .await;
    // The creation's answer comes before GitLab prepares the merge request
    // (its pipeline among it); a read shows the head pipeline.
    assert_eq!(created["head_pipeline"], Value::Null);
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    let first = mr["head_pipeline"]["id"].as_u64().expect("head pipeline");
    assert_eq!(mr["head_pipeline"]["ref"], "refs/merge-requests/1/head");
    let (_, pipeline) = api.get(&format!("{p}/pipelines/{first}")).await;
    assert_eq!(pipeline["ref"], "refs/merge-requests/1/head");
    assert_eq!(pipeline["source"], "merge_request_event");
    // A push to the branch starts another merge request pipeline.
    let new_sha = sim
        .gitlab_push(project, "feature", &[("x", Some("2"))], "fix")
        .expect("push");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["head_pipeline"]["sha"], new_sha.as_str());
    assert_eq!(mr["head_pipeline"]["ref"], "refs/merge-requests/1/head");
    assert_ne!(mr["head_pipeline"]["id"], first);
    let (_, pipelines) = api.get(&format!("{p}/merge_requests/1/pipelines")).await;
    assert_eq!(pipelines.as_array().map(Vec::len), Some(2), "{pipelines}");
    let hook = receiver
        .wait_for("a Pipeline Hook", |r| r.body["object_kind"] == "pipeline")
        .await;
    assert_eq!(
        hook.body["object_attributes"]["ref"],
        "refs/merge-requests/1/head"
    );
    assert_eq!(hook.body["merge_request"]["iid"], 1);
    let job = receiver
        .wait_for("a Job Hook", |r| r.body["object_kind"] == "build")
        .await;
    assert_eq!(job.body["ref"], "refs/merge-requests/1/head");

    // Without merge request pipelines the MR's pipeline is a branch pipeline,
    // and its hook names no merge request.
    let branch_project = sim
        .gitlab_project("g/branch")
        .webhook(&receiver.url, "s")
        .create()
        .expect("project");
    let p = format!("/projects/{branch_project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "x", "1")]),
    )
    .await;
    api.post(
        &format!("{p}/merge_requests"),
        json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
    )
    .await;
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["head_pipeline"]["ref"], "feature");
    let hook = receiver
        .wait_for("the branch pipeline's hook", |r| {
            r.body["object_kind"] == "pipeline"
                && r.body["project"]["path_with_namespace"] == "g/branch"
        })
        .await;
    assert_eq!(hook.body["object_attributes"]["ref"], "feature");
    assert!(hook.body["merge_request"].is_null(), "{}", hook.body);
}

#[tokio::test]
async fn pipelines_jobs_traces_and_retry() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("group/app")
        .job(JobSpec::new("build", JobOutcome::Success).stage("build"))
        .job(
            JobSpec::new(
                "unit",
                JobOutcome::fail("runner_system_failure", "runner lost"),
            )
            .stage("test"),
        )
        .job(JobSpec::new("deploy", JobOutcome::Success).stage("deploy"))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "x", "x")]),
    )
    .await;
    let (_, created) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
        )
        .await;
    let (_, mr) = api
        .get(&format!("{p}/merge_requests/{}", created["iid"]))
        .await;
    let pipeline_id = mr["head_pipeline"]["id"].as_u64().expect("pipeline");
    assert_eq!(mr["head_pipeline"]["sha"], mr["sha"]);

    let pipeline = api
        .poll(&format!("{p}/pipelines/{pipeline_id}"), |p| {
            p["status"] == "failed"
        })
        .await;
    assert_eq!(pipeline["sha"], mr["sha"]);
    assert_eq!(pipeline["ref"], "feature");
    let (_, jobs) = api.get(&format!("{p}/pipelines/{pipeline_id}/jobs")).await;
    let by_name = |jobs: &Value, name: &str| -> Value {
        jobs.as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(by_name(&jobs, "build")["status"], "success");
    let unit = by_name(&jobs, "unit");
    assert_eq!(unit["status"], "failed");
    assert_eq!(unit["failure_reason"], "runner_system_failure");
    assert_eq!(unit["pipeline"]["id"], pipeline_id);
    assert_eq!(by_name(&jobs, "deploy")["status"], "skipped");
    let unit_id = unit["id"].as_u64().expect("job id");

    let (_, failed_only) = api
        .get(&format!("{p}/pipelines/{pipeline_id}/jobs?scope[]=failed"))
        .await;
    assert_eq!(failed_only.as_array().map(Vec::len), Some(1));

    let (status, trace) = api.get_text(&format!("{p}/jobs/{unit_id}/trace")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(trace.contains("runner lost"), "{trace}");

    // Retry: a new job; the old one is marked retried; the pipeline runs again (the retried
    // job takes 60 sim seconds, so `running` is observable however slow this machine is).
    sim.set_gitlab_job(
        project,
        JobSpec::new(
            "unit",
            JobOutcome::fail("runner_system_failure", "runner lost"),
        )
        .stage("test")
        .duration_secs(60),
    )
    .expect("rescript");
    let (status, retried) = api
        .post(&format!("{p}/jobs/{unit_id}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let new_id = retried["id"].as_u64().expect("new id");
    assert_ne!(new_id, unit_id);
    assert_eq!(retried["retries_count"], 1);
    let (_, pipeline) = api.get(&format!("{p}/pipelines/{pipeline_id}")).await;
    assert_eq!(pipeline["status"], "running");
    let (_, old) = api.get(&format!("{p}/jobs/{unit_id}")).await;
    assert_eq!(old["retried"], true);
    let (status, body) = api
        .post(&format!("{p}/jobs/{unit_id}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["message"], "403 Forbidden - Job is not retryable");

    // Rescript the job to pass, retry again: deploy runs, pipeline succeeds.
    sim.advance(Duration::from_secs(61));
    api.poll(&format!("{p}/jobs/{new_id}"), |j| j["status"] == "failed")
        .await;
    sim.set_gitlab_job(
        project,
        JobSpec::new("unit", JobOutcome::Success).stage("test"),
    )
    .expect("rescript");
    let (_, again) = api
        .post(&format!("{p}/jobs/{new_id}/retry"), json!({}))
        .await;
    assert_eq!(again["retries_count"], 2);
    api.poll(&format!("{p}/pipelines/{pipeline_id}"), |p| {
        p["status"] == "success"
    })
    .await;
    let (_, jobs) = api.get(&format!("{p}/pipelines/{pipeline_id}/jobs")).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(3));
    assert_eq!(by_name(&jobs, "deploy")["status"], "success");
    let (_, all) = api
        .get(&format!(
            "{p}/pipelines/{pipeline_id}/jobs?include_retried=true"
        ))
        .await;
    assert_eq!(all.as_array().map(Vec::len), Some(5));

    let (_, list) = api.get(&format!("{p}/pipelines?ref=feature")).await;
    assert_eq!(list[0]["id"], pipeline_id);
    let (status, body) = api.get(&format!("{p}/pipelines/999")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "404 Not found");
}

/// The scenario of the issue: commit, MR, flaky job fails once and is retried, merge with a
/// stale sha fails 409 and with the right sha succeeds; webhooks parse as GitLab documents them.
#[tokio::test]
async fn scenario_flaky_retry_merge_with_webhooks() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let project = sim
        .gitlab_project("team/service")
        .job(JobSpec::new("lint", JobOutcome::Success))
        .job(JobSpec::new(
            "unit",
            JobOutcome::flaky(1, "stuck_or_timeout_failure", "timed out waiting"),
        ))
        .webhook(&receiver.url, "hook-secret")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");

    let (status, commit) = api
        .post(
            &format!("{p}/repository/commits"),
            commit_body("wq/change", Some("main"), &[("create", "app.txt", "v1")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let head = commit["id"].as_str().expect("sha").to_string();
    let (status, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "wq/change", "target_branch": "main", "title": "Change"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let iid = mr["iid"].as_u64().expect("iid");
    let (_, mr) = api.get(&format!("{p}/merge_requests/{iid}")).await;
    let pipeline_id = mr["head_pipeline"]["id"].as_u64().expect("pipeline");

    let failed = receiver
        .wait_for("failed unit job", |r| {
            r.event() == "Job Hook" && r.body["build_status"] == "failed"
        })
        .await;
    assert_eq!(failed.headers["x-gitlab-token"], "hook-secret");
    assert_eq!(failed.body["object_kind"], "build");
    assert_eq!(failed.body["build_name"], "unit");
    assert_eq!(
        failed.body["build_failure_reason"],
        "stuck_or_timeout_failure"
    );
    assert_eq!(failed.body["pipeline_id"], pipeline_id);
    assert_eq!(failed.body["project_id"], project);
    assert_eq!(failed.body["sha"], head.as_str());
    assert_eq!(failed.body["retries_count"], 0);
    let job_id = failed.body["build_id"].as_u64().expect("build id");

    let pipeline_failed = receiver
        .wait_for("failed pipeline", |r| {
            r.event() == "Pipeline Hook" && r.body["object_attributes"]["status"] == "failed"
        })
        .await;
    assert_eq!(pipeline_failed.body["object_kind"], "pipeline");
    assert_eq!(pipeline_failed.body["object_attributes"]["id"], pipeline_id);
    // A branch pipeline: GitLab names a merge request only in the hooks of
    // merge request pipelines.
    assert!(
        pipeline_failed.body["merge_request"].is_null(),
        "{}",
        pipeline_failed.body
    );
    assert_eq!(
        pipeline_failed.body["project"]["path_with_namespace"],
        "team/service"
    );
    let builds = pipeline_failed.body["builds"].as_array().expect("builds");
    assert!(builds.iter().any(|b| b["name"] == "unit"
        && b["status"] == "failed"
        && b["failure_reason"] == "stuck_or_timeout_failure"));
    let (_, trace) = api.get_text(&format!("{p}/jobs/{job_id}/trace")).await;
    assert!(trace.contains("timed out waiting"));

    let (status, _) = api
        .put(
            &format!("{p}/merge_requests/{iid}/merge"),
            json!({"sha": head}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::METHOD_NOT_ALLOWED,
        "a failed pipeline blocks the merge"
    );

    let (status, retried) = api
        .post(&format!("{p}/jobs/{job_id}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(retried["status"], "pending");
    let passed = receiver
        .wait_for("retried unit job passes", |r| {
            r.event() == "Job Hook"
                && r.body["build_status"] == "success"
                && r.body["build_name"] == "unit"
        })
        .await;
    assert_eq!(passed.body["retries_count"], 1);
    receiver
        .wait_for("pipeline success", |r| {
            r.event() == "Pipeline Hook" && r.body["object_attributes"]["status"] == "success"
        })
        .await;
    let mr = api
        .poll(&format!("{p}/merge_requests/{iid}"), |mr| {
            mr["detailed_merge_status"] == "mergeable"
        })
        .await;
    assert_eq!(mr["head_pipeline"]["status"], "success");
    assert_eq!(mr["head_pipeline"]["id"], pipeline_id);

    let (status, body) = api
        .put(
            &format!("{p}/merge_requests/{iid}/merge"),
            json!({"sha": "ffffffffffffffffffffffffffffffffffffffff"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["message"],
        format!("SHA does not match HEAD of source branch: {head}")
    );
    let (status, merged) = api
        .put(
            &format!("{p}/merge_requests/{iid}/merge"),
            json!({"sha": head}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(merged["state"], "merged");

    let (_, note) = api
        .post(
            &format!("{p}/merge_requests/{iid}/notes"),
            json!({"body": "merged by bot"}),
        )
        .await;
    let note_hook = receiver
        .wait_for("note hook", |r| r.event() == "Note Hook")
        .await;
    assert_eq!(note_hook.body["object_kind"], "note");
    assert_eq!(note_hook.body["object_attributes"]["note"], "merged by bot");
    assert_eq!(note_hook.body["object_attributes"]["id"], note["id"]);
    assert_eq!(
        note_hook.body["object_attributes"]["noteable_type"],
        "MergeRequest"
    );
    assert_eq!(note_hook.body["merge_request"]["iid"], iid);

    let mr_hooks = receiver.of("Merge Request Hook");
    let open = mr_hooks
        .iter()
        .find(|r| r.body["object_attributes"]["action"] == "open")
        .expect("open hook");
    assert_eq!(open.body["object_kind"], "merge_request");
    assert_eq!(open.body["object_attributes"]["iid"], iid);
    assert_eq!(open.body["object_attributes"]["state"], "opened");
    assert_eq!(open.body["object_attributes"]["source_branch"], "wq/change");
    assert_eq!(
        open.body["object_attributes"]["last_commit"]["id"],
        head.as_str()
    );
    assert_eq!(open.body["project"]["id"], project);
    assert_eq!(open.body["project"]["path_with_namespace"], "team/service");
    assert_eq!(open.body["user"]["username"], forge_sim::DEFAULT_USERNAME);
    let merge = receiver
        .wait_for("merge hook", |r| {
            r.event() == "Merge Request Hook" && r.body["object_attributes"]["action"] == "merge"
        })
        .await;
    assert_eq!(merge.body["object_attributes"]["state"], "merged");
}

#[tokio::test]
async fn push_to_mr_branch_updates_mr_and_starts_pipeline() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let project = sim
        .gitlab_project("g/p")
        .webhook(&receiver.url, "s")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "x", "1")]),
    )
    .await;
    let (_, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
        )
        .await;
    let first_sha = mr["sha"].as_str().expect("sha").to_string();
    let new_sha = sim
        .gitlab_push(project, "feature", &[("x", Some("2"))], "human fix")
        .expect("push");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["sha"], new_sha.as_str());
    assert_eq!(mr["head_pipeline"]["sha"], new_sha.as_str());
    let update = receiver
        .wait_for("update hook with oldrev", |r| {
            r.body["object_attributes"]["action"] == "update"
        })
        .await;
    assert_eq!(
        update.body["object_attributes"]["oldrev"],
        first_sha.as_str()
    );
    let (_, pipelines) = api.get(&format!("{p}/merge_requests/1/pipelines")).await;
    assert_eq!(pipelines.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn merge_train_merges_in_order_and_drops_failures() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("g/train")
        .merge_trains(true)
        .job(JobSpec::new("test", JobOutcome::Success).duration_secs(10))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    for (n, branch) in ["a", "b"].iter().enumerate() {
        api.post(
            &format!("{p}/repository/commits"),
            commit_body(branch, Some("main"), &[("create", branch, branch)]),
        )
        .await;
        let (status, _) = api
            .post(&format!("{p}/merge_requests"), json!({"source_branch": branch, "target_branch": "main", "title": format!("MR {n}")}))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    sim.advance(Duration::from_secs(11));
    api.poll(&format!("{p}/merge_requests/2"), |mr| {
        mr["detailed_merge_status"] == "mergeable"
    })
    .await;

    for iid in [1, 2] {
        let (_, mr) = api.get(&format!("{p}/merge_requests/{iid}")).await;
        let (status, body) = api
            .put(
                &format!("{p}/merge_requests/{iid}/merge"),
                json!({"sha": mr["sha"], "auto_merge": true}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "opened");
        assert_eq!(body["merge_when_pipeline_succeeds"], true);
        assert_eq!(body["auto_merge_strategy"], "merge_train");
    }
    let (status, car) = api.get(&format!("{p}/merge_trains/merge_requests/2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(car["status"], "fresh");
    assert_eq!(car["target_branch"], "main");
    assert_eq!(car["pipeline"]["ref"], "refs/merge-requests/2/train");
    let (_, cars) = api.get(&format!("{p}/merge_trains?scope=active")).await;
    assert_eq!(cars.as_array().map(Vec::len), Some(2));

    sim.advance(Duration::from_secs(11));
    api.poll(&format!("{p}/merge_requests/2"), |mr| {
        mr["state"] == "merged"
    })
    .await;
    let (_, first) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(first["state"], "merged");
    let (_, car) = api.get(&format!("{p}/merge_trains/merge_requests/1")).await;
    assert_eq!(car["status"], "merged");
    assert_eq!(
        sim.gitlab_file(project, "main", "a").as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(
        sim.gitlab_file(project, "main", "b").as_deref(),
        Some(&b"b"[..])
    );
    let (_, mr2) = api.get(&format!("{p}/merge_requests/2")).await;
    assert_eq!(
        mr2["merge_commit_sha"].as_str(),
        sim.gitlab_branch_head(project, "main").as_deref()
    );

    // A car whose train pipeline fails leaves the train.
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("c", Some("main"), &[("create", "c", "c")]),
    )
    .await;
    api.post(
        &format!("{p}/merge_requests"),
        json!({"source_branch": "c", "target_branch": "main", "title": "c"}),
    )
    .await;
    sim.advance(Duration::from_secs(11));
    api.poll(&format!("{p}/merge_requests/3"), |mr| {
        mr["detailed_merge_status"] == "mergeable"
    })
    .await;
    sim.set_gitlab_job(
        project,
        JobSpec::new("test", JobOutcome::fail("script_failure", "boom")).duration_secs(10),
    )
    .expect("rescript");
    let (status, _) = api
        .post(&format!("{p}/merge_trains/merge_requests/3"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    sim.advance(Duration::from_secs(11));
    let mr = api
        .poll(&format!("{p}/merge_requests/3"), |mr| {
            mr["merge_when_pipeline_succeeds"] == false
        })
        .await;
    assert_eq!(mr["state"], "opened");
    let (status, _) = api.get(&format!("{p}/merge_trains/merge_requests/3")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, notes) = api.get(&format!("{p}/merge_requests/3/notes")).await;
    assert!(notes.as_array().expect("notes").iter().any(|n| {
        n["system"] == true
            && n["body"]
                .as_str()
                .is_some_and(|b| b.contains("removed this merge request from the merge train"))
    }));
}

#[tokio::test]
async fn fast_forward_projects_need_rebase_and_rebase_endpoint() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("g/ff")
        .merge_method("ff")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(&sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "f", "f")]),
    )
    .await;
    api.post(
        &format!("{p}/merge_requests"),
        json!({"source_branch": "feature", "target_branch": "main", "title": "t"}),
    )
    .await;
    sim.gitlab_push(project, "main", &[("other", Some("o"))], "moves main")
        .expect("push");
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["detailed_merge_status"] == "need_rebase"
        })
        .await;
    let (status, _) = api
        .put(
            &format!("{p}/merge_requests/1/merge"),
            json!({"sha": mr["sha"]}),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    let (status, _) = api
        .put(&format!("{p}/merge_requests/1/rebase"), json!({}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["detailed_merge_status"] == "mergeable"
        })
        .await;
    let main_head = sim.gitlab_branch_head(project, "main").expect("main");
    let (_, compare) = api
        .get(&format!("{p}/repository/compare?from=main&to=feature"))
        .await;
    assert_eq!(compare["commits"][0]["parent_ids"], json!([main_head]));
    let (status, merged) = api
        .put(
            &format!("{p}/merge_requests/1/merge"),
            json!({"sha": mr["sha"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        merged["merge_commit_sha"], mr["sha"],
        "fast-forward: main is the MR head"
    );
    assert_eq!(
        sim.gitlab_branch_head(project, "main").as_deref(),
        mr["sha"].as_str()
    );

    let (status, body) = api.delete(&format!("{p}/repository/branches/main")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["message"],
        "The default branch of a project cannot be deleted."
    );
}

/// Sets up `group/app` with a `feature` branch (one new file) and a `develop` branch.
async fn project_with_feature(
    sim: &forge_sim::SimHandle,
    job_secs: u64,
) -> (u64, ApiClient, String) {
    let project = sim
        .gitlab_project("group/app")
        .job(JobSpec::new("test", JobOutcome::Success).duration_secs(job_secs))
        .create()
        .expect("project");
    let api = ApiClient::gitlab(sim);
    let p = format!("/projects/{project}");
    api.post(
        &format!("{p}/repository/commits"),
        commit_body("feature", Some("main"), &[("create", "f.txt", "f")]),
    )
    .await;
    let (status, _) = api
        .post(
            &format!("{p}/repository/branches"),
            json!({"branch": "develop", "ref": "main"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    (project, api, p)
}

#[tokio::test]
async fn quick_actions_in_a_new_description_apply_those_gitlab_allows_on_create() {
    let sim = start_sim().await;
    sim.add_user("bob", "bob-token");
    let (project, api, p) = project_with_feature(&sim, 1).await;
    let description = "Intro\n/label ~qa ~\"needs review\"\n/target_branch develop\n/draft\n\
                       /assign_reviewer @bob\n/merge\n/approve\n/close\n/title Other\n \
                       /label ~indented\n```\n/label ~in-code\n```\nOutro\n";
    let (status, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "Add f",
                   "description": description, "labels": "bot"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{mr}");
    assert_eq!(
        mr["description"],
        "Intro\n /label ~indented\n```\n/label ~in-code\n```\nOutro"
    );
    assert_eq!(mr["labels"], json!(["bot", "qa", "needs review"]));
    assert_eq!(mr["target_branch"], "develop");
    assert_eq!(mr["title"], "Draft: Add f");
    assert_eq!(mr["draft"], true);
    assert_eq!(mr["reviewers"][0]["username"], "bob");
    // `/merge`, `/approve`, `/close` and `/title` need an existing merge request.
    assert_eq!(mr["state"], "opened");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["approved_by"], json!([]));
    sim.advance(Duration::from_secs(2));
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "success"
        })
        .await;
    assert_eq!(mr["state"], "opened");
    assert_eq!(sim.gitlab_file(project, "develop", "f.txt"), None);
}

#[tokio::test]
async fn quick_actions_in_an_updated_description_run_as_the_api_user() {
    let sim = start_sim().await;
    let (project, api, p) = project_with_feature(&sim, 1).await;
    let (_, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main",
                   "title": "Draft: Add f", "labels": "qa,keep"}),
        )
        .await;
    assert_eq!(mr["draft"], true);

    let (status, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"description": "Text\n/ready\n/title Renamed\n/unlabel ~qa\n/label ~new\n/approve\n/target_branch develop"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{mr}");
    assert_eq!(mr["description"], "Text");
    assert_eq!(mr["title"], "Renamed");
    assert_eq!(mr["draft"], false);
    assert_eq!(mr["labels"], json!(["keep", "new"]));
    assert_eq!(mr["target_branch"], "develop");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(
        approvals["approved_by"][0]["user"]["username"],
        forge_sim::DEFAULT_USERNAME
    );

    let (_, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"description": "/unapprove\n/draft\n/close"}),
        )
        .await;
    assert_eq!(mr["description"], "");
    assert_eq!(mr["draft"], true);
    assert_eq!(mr["title"], "Draft: Renamed");
    assert_eq!(mr["state"], "closed");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["approved_by"], json!([]));

    let (_, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"description": "/reopen\n/ready"}),
        )
        .await;
    assert_eq!(mr["state"], "opened");
    sim.advance(Duration::from_secs(2));
    api.poll(&format!("{p}/merge_requests/1"), |mr| {
        mr["detailed_merge_status"] == "mergeable"
    })
    .await;
    let (_, mr) = api
        .put(
            &format!("{p}/merge_requests/1"),
            json!({"description": "Ship it\n/merge"}),
        )
        .await;
    assert_eq!(mr["state"], "merged", "{mr}");
    assert_eq!(mr["description"], "Ship it");
    assert_eq!(
        sim.gitlab_file(project, "develop", "f.txt").as_deref(),
        Some(&b"f"[..])
    );
}

#[tokio::test]
async fn quick_actions_in_notes_take_effect_and_command_only_notes_are_not_kept() {
    let sim = start_sim().await;
    sim.add_user("bob", "bob-token");
    let (project, api, p) = project_with_feature(&sim, 30).await;
    api.post(
        &format!("{p}/merge_requests"),
        json!({"source_branch": "feature", "target_branch": "main", "title": "Add f"}),
    )
    .await;
    let notes = format!("{p}/merge_requests/1/notes");

    // Text plus commands: the note keeps the text; the commands run.
    let (status, note) = api
        .post(
            &notes,
            json!({"body": "Looks good\n/approve\n/label ~qa\n/assign_reviewer @bob\n/draft"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{note}");
    assert_eq!(note["body"], "Looks good");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["labels"], json!(["qa"]));
    assert_eq!(mr["reviewers"][0]["username"], "bob");
    assert_eq!(mr["draft"], true);
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["user_has_approved"], true);

    // Only commands: 202 with what they did, and no note.
    let (status, body) = api
        .post(
            &notes,
            json!({"body": "/unapprove\n/ready\n/unlabel ~qa\n/title New title\n/target_branch develop"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["commands_changes"]["target_branch"], "develop");
    assert_eq!(body["commands_changes"]["title"], "New title");
    assert!(body["summary"].as_array().is_some_and(|s| !s.is_empty()));
    let (_, listed) = api.get(&notes).await;
    let bodies: Vec<&str> = listed
        .as_array()
        .expect("notes")
        .iter()
        .filter(|n| n["system"] == false)
        .filter_map(|n| n["body"].as_str())
        .collect();
    assert_eq!(bodies, ["Looks good"]);
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["title"], "New title");
    assert_eq!(mr["draft"], false);
    assert_eq!(mr["labels"], json!([]));
    assert_eq!(mr["target_branch"], "develop");
    let (_, approvals) = api.get(&format!("{p}/merge_requests/1/approvals")).await;
    assert_eq!(approvals["user_has_approved"], false);

    // Not at the start of a line, or inside code: plain text.
    let (status, note) = api
        .post(
            &notes,
            json!({"body": " /close\nsay `/close`\n```\n/close\n```"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(note["body"], " /close\nsay `/close`\n```\n/close\n```");
    let (status, _) = api.post(&notes, json!({"body": "/close"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["state"], "closed");
    api.post(&notes, json!({"body": "/reopen"})).await;
    let mr = api
        .poll(&format!("{p}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "running"
        })
        .await;
    assert_eq!(mr["state"], "opened");

    // `/merge` while the pipeline runs: merge when it succeeds.
    let (status, body) = api.post(&notes, json!({"body": "/merge"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, mr) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(mr["merge_when_pipeline_succeeds"], true);
    assert_eq!(mr["state"], "opened");
    sim.advance(Duration::from_secs(31));
    api.poll(&format!("{p}/merge_requests/1"), |mr| {
        mr["state"] == "merged"
    })
    .await;
    assert_eq!(
        sim.gitlab_file(project, "develop", "f.txt").as_deref(),
        Some(&b"f"[..])
    );
}

#[tokio::test]
async fn quick_merge_in_a_note_merges_a_mergeable_merge_request_at_once() {
    let sim = start_sim().await;
    let (project, api, p) = project_with_feature(&sim, 1).await;
    let (_, mr) = api
        .post(
            &format!("{p}/merge_requests"),
            json!({"source_branch": "feature", "target_branch": "main", "title": "Add f"}),
        )
        .await;
    sim.advance(Duration::from_secs(2));
    api.poll(&format!("{p}/merge_requests/1"), |mr| {
        mr["detailed_merge_status"] == "mergeable"
    })
    .await;
    let notes = format!("{p}/merge_requests/1/notes");
    // A stale head sha keeps `/merge` from merging.
    let (status, _) = api
        .post(
            &notes,
            json!({"body": "/merge", "merge_request_diff_head_sha": "0".repeat(40)}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, current) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(current["state"], "opened");
    let (status, _) = api
        .post(
            &notes,
            json!({"body": "/merge", "merge_request_diff_head_sha": mr["sha"]}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, merged) = api.get(&format!("{p}/merge_requests/1")).await;
    assert_eq!(merged["state"], "merged");
    assert_eq!(
        sim.gitlab_file(project, "main", "f.txt").as_deref(),
        Some(&b"f"[..])
    );
}
