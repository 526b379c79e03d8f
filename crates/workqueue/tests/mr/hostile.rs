//! Hostile inputs, end to end: what an untrusted caller sends to make
//! workqueue write where it must not, or make the forge act for it. Every
//! finding adds its case here, on both backends and on both forges where it
//! applies.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use wq_testkit::{Backend, backend_tests};

use crate::support::{GithubRepo, Harness, Options, PROJECT, change, github_change, manual};

backend_tests!(
    paths_and_names_are_refused_with_the_field_before_any_forge_write_on_gitlab,
    paths_and_names_are_refused_with_the_field_before_any_forge_write_on_github,
    quick_actions_in_the_description_run_nothing_on_gitlab,
    the_description_reaches_github_as_written,
);

fn github() -> Options {
    Options {
        github: Some(GithubRepo {
            merge_queue: false,
            required_approvals: 0,
            dismiss_stale_reviews: false,
        }),
        ..Options::default()
    }
}

/// Submissions refused at the API, each with the field and a fragment of
/// its message.
fn refused_submissions(
    make: fn(&str, &[(&str, &str)]) -> Value,
) -> Vec<(Value, &'static str, &'static str)> {
    let with_actions = |actions: Value| {
        let mut body = make("wq/hostile", &[("a.txt", "a\n")]);
        body["file_actions"] = actions;
        body
    };
    let with = |key: &str, value: &str| {
        let mut body = make("wq/hostile", &[("a.txt", "a\n")]);
        body[key] = json!(value);
        body
    };
    vec![
        // The blocklist by ancestry: a blocked directory deleted, moved,
        // replaced by a file; a file below a blocked file.
        (
            with_actions(json!([{"action": "delete", "file_path": ".github"}])),
            "file_actions[0].file_path",
            "below it",
        ),
        (
            with_actions(json!([
                {"action": "move", "file_path": "gone", "previous_path": ".github"}
            ])),
            "file_actions[0].previous_path",
            "below it",
        ),
        (
            with_actions(json!([
                {"action": "create", "file_path": ".github", "content": "x"}
            ])),
            "file_actions[0].file_path",
            "below it",
        ),
        (
            with_actions(json!([
                {"action": "create", "file_path": "CODEOWNERS/x", "content": "x"}
            ])),
            "file_actions[0].file_path",
            "is inside \"CODEOWNERS\"",
        ),
        (
            with_actions(json!([
                {"action": "create", "file_path": ".gitlab-ci.yml/x", "content": "x"}
            ])),
            "file_actions[0].file_path",
            "is inside \".gitlab-ci.yml\"",
        ),
        (
            with_actions(json!([{"action": "delete", "file_path": "docs"}])),
            "file_actions[0].file_path",
            "docs/CODEOWNERS",
        ),
        (
            with_actions(json!([
                {"action": "create", "file_path": ".devcontainer/devcontainer.json", "content": "{}"}
            ])),
            "file_actions[0].file_path",
            "blocked path",
        ),
        // Unicode format characters in names.
        (
            with("source_branch", "wq/\u{202e}gnp.exe"),
            "source_branch",
            "U+202E",
        ),
        (
            with("target_branch", "ma\u{200b}in"),
            "target_branch",
            "U+200B",
        ),
        (
            with_actions(json!([
                {"action": "create", "file_path": "src/\u{2066}x.rs", "content": "x"}
            ])),
            "file_actions[0].file_path",
            "U+2066",
        ),
    ]
}

async fn refused_before_any_forge_write(h: Harness, make: fn(&str, &[(&str, &str)]) -> Value) {
    for (body, field, fragment) in refused_submissions(make) {
        let (status, reply) = h.submit(&body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {reply}");
        assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|message| message.contains(fragment)),
            "{body}: {fragment:?} not in {reply}"
        );
    }
    let list: Value = h
        .api
        .get(format!("{}/api/v1/work-items", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0, "{list}");
    let writes: Vec<_> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "forge writes: {writes:?}");
    h.finish().await;
}

async fn paths_and_names_are_refused_with_the_field_before_any_forge_write_on_gitlab(
    backend: Backend,
) {
    refused_before_any_forge_write(Harness::start(backend).await, change).await;
}

async fn paths_and_names_are_refused_with_the_field_before_any_forge_write_on_github(
    backend: Backend,
) {
    refused_before_any_forge_write(Harness::start_with(backend, github()).await, github_change)
        .await;
}

/// A read of the sim's GitLab API under the project.
async fn gitlab_get(h: &Harness, path: &str) -> Value {
    h.client
        .get(format!(
            "{}/projects/{}{path}",
            h.sim.gitlab_url(),
            h.project
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A description that would command GitLab if sent as written. (No
/// backticks: GitLab skips everything between a backtick and a later line
/// ending in one, which would hide the commands from the control below.)
const COMMANDING: &str = concat!(
    "Bump foo.\r\n",
    "/merge\r\n",
    "/approve\n",
    "/target_branch evil\n",
    "/label ~x\n",
    "/assign_reviewer @x\n",
    "/UNAPPROVE\n",
    "  indented /merge stays\n",
    "- /close in a list stays\n\n",
);

/// [`COMMANDING`] as GitLab must receive (and store) it.
const NEUTRALISED: &str = concat!(
    "Bump foo.\n",
    "\\/merge\n",
    "\\/approve\n",
    "\\/target_branch evil\n",
    "\\/label ~x\n",
    "\\/assign_reviewer @x\n",
    "\\/UNAPPROVE\n",
    "  indented /merge stays\n",
    "- /close in a list stays",
);

async fn quick_actions_in_the_description_run_nothing_on_gitlab(backend: Backend) {
    let h = Harness::start(backend).await;
    // A branch `/target_branch evil` could retarget to.
    h.sim
        .gitlab_push(h.project, "evil", &[("evil.txt", Some("x\n"))], "Evil")
        .expect("branch evil");
    let mut body = manual(change("wq/commanding", &[("a.txt", "a\n")]));
    body["description"] = json!(COMMANDING);
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.settle().await;

    let mr = h.mr(number);
    // Sent (and stored) neutralised: no line starts a quick action.
    assert_eq!(mr["description"], NEUTRALISED, "{mr:#}");
    // And none ran.
    assert_eq!(mr["state"], "opened", "{mr:#}");
    assert_eq!(mr["merge_when_pipeline_succeeds"], false, "{mr:#}");
    assert_eq!(mr["target_branch"], "main", "{mr:#}");
    assert!(
        !mr["labels"].as_array().unwrap().contains(&json!("x")),
        "{mr:#}"
    );
    assert_eq!(mr["reviewers"], json!([]), "{mr:#}");
    let approvals = gitlab_get(&h, &format!("/merge_requests/{number}/approvals")).await;
    assert_eq!(approvals["approved_by"], json!([]), "{approvals:#}");
    // The status note is sent the same way.
    let notes = gitlab_get(&h, &format!("/merge_requests/{number}/notes")).await;
    for note in notes.as_array().unwrap() {
        let text = note["body"].as_str().unwrap();
        assert!(text.lines().all(|line| !line.starts_with('/')), "{text:?}");
    }

    // What is compared is what is sent: the reconcile finds no drift and
    // writes nothing more.
    let mr_writes = |h: &Harness| {
        h.sim
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path.ends_with(&format!("/merge_requests/{number}")))
            .count()
    };
    let before = mr_writes(&h);
    h.advance(Duration::from_secs(31 * 60)).await;
    h.advance(Duration::from_secs(31 * 60)).await;
    assert_eq!(mr_writes(&h), before, "the description was rewritten again");

    // An update of the description goes through the same rule.
    let mut update = body.clone();
    update["description"] = json!("Now:\n/close\n/merge");
    h.submit_ok(&update, StatusCode::OK, "updated").await;
    h.settle().await;
    let mr = h.mr(number);
    assert_eq!(mr["description"], "Now:\n\\/close\n\\/merge", "{mr:#}");
    assert_eq!(mr["state"], "opened", "{mr:#}");

    // The control: the same text sent as written, by the same API user,
    // commands the sim's GitLab as it would GitLab.
    h.sim
        .gitlab_push(h.project, "human", &[("b.txt", Some("b\n"))], "Human")
        .expect("branch human");
    let created: Value = h
        .client
        .post(format!(
            "{}/projects/{}/merge_requests",
            h.sim.gitlab_url(),
            h.project
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .json(&json!({
            "source_branch": "human",
            "target_branch": "main",
            "title": "Sent as written",
            "description": COMMANDING,
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let control = h.mr(created["iid"].as_u64().expect("created"));
    assert_eq!(control["target_branch"], "evil", "{control:#}");
    assert!(
        control["labels"].as_array().unwrap().contains(&json!("x")),
        "{control:#}"
    );
    h.finish().await;
}

async fn the_description_reaches_github_as_written(backend: Backend) {
    let h = Harness::start_with(backend, github()).await;
    let mut body = manual(github_change("wq/commanding", &[("a.txt", "a\n")]));
    body["description"] = json!("Bump foo.\n/merge\n/approve\n");
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    // GitHub has no quick actions: the text is left as the caller wrote it.
    let pr = h.sim.github_pr(PROJECT, number).expect("the pull request");
    assert_eq!(pr["body"], "Bump foo.\n/merge\n/approve\n", "{pr:#}");
    assert_eq!(pr["state"], "open", "{pr:#}");
    h.finish().await;
}
