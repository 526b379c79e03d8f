//! GitHub webhooks over HTTP: headers, HMAC signatures and documented payload fields.

use crate::{REPO, create_repo};
use forge_sim::JobOutcome;
use forge_sim::github::{CheckScript, GithubRepoSpec};
use forge_sim::testing::{ApiClient, Received, Receiver, start_stepped_sim};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

const SECRET: &str = "It's a Secret to Everybody";

/// Verifies `X-Hub-Signature-256` over the exact received bytes, independently of the sim's code.
fn assert_signed(r: &Received) {
    let header = r.header("x-hub-signature-256");
    let hex_sig = header.strip_prefix("sha256=").expect("sha256= prefix");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("hmac key");
    mac.update(&r.raw);
    mac.verify_slice(&hex::decode(hex_sig).expect("hex signature"))
        .expect("signature verifies");
    uuid::Uuid::parse_str(r.header("x-github-delivery")).expect("delivery id is a uuid");
    assert_eq!(r.header("content-type"), "application/json");
}

#[test]
fn signature_matches_githubs_documented_example() {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("hmac key");
    mac.update(b"Hello, World!");
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(
        expected,
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    assert_eq!(
        forge_sim::github::sign::signature_256(SECRET.as_bytes(), b"Hello, World!"),
        expected
    );
}

#[tokio::test]
async fn pull_request_check_review_and_queue_events_are_signed_and_shaped() {
    let sim = start_stepped_sim().await;
    let hook = Receiver::start().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app")
            .merge_queue(true)
            .webhook(&hook.url, SECRET)
            .checks(&[
                CheckScript::new("ci", JobOutcome::Success),
                CheckScript::new("legacy", JobOutcome::Success).as_status(),
            ]),
    );
    let gh = ApiClient::github(&sim);
    let head = gh
        .commit_files(REPO, "feature", &[("a.txt", "a\n")], "a")
        .await;
    let n = gh.open_pr(REPO, "feature", "Add a").await;

    // pull_request opened.
    let opened = hook
        .wait_for("pull_request opened", |r| {
            r.event() == "pull_request" && r.body["action"] == "opened"
        })
        .await;
    assert_signed(&opened);
    assert_eq!(opened.body["number"], n);
    assert_eq!(opened.body["pull_request"]["number"], n);
    assert_eq!(opened.body["pull_request"]["head"]["sha"], head.as_str());
    assert_eq!(opened.body["pull_request"]["head"]["ref"], "feature");
    assert_eq!(opened.body["pull_request"]["base"]["ref"], "main");
    assert_eq!(opened.body["pull_request"]["state"], "open");
    assert_eq!(opened.body["repository"]["full_name"], "octo/app");
    assert_eq!(opened.body["repository"]["name"], "app");
    assert_eq!(opened.body["repository"]["owner"]["login"], "octo");
    assert_eq!(opened.body["sender"]["login"], forge_sim::DEFAULT_USERNAME);

    // check_run / check_suite completed and the status event.
    gh.poll(&format!("/repos/octo/app/commits/{head}/check-runs"), |b| {
        b["check_runs"][0]["status"] == "completed"
    })
    .await;
    let run = hook
        .wait_for("check_run completed", |r| {
            r.event() == "check_run" && r.body["action"] == "completed"
        })
        .await;
    assert_signed(&run);
    assert_eq!(run.body["check_run"]["head_sha"], head.as_str());
    assert_eq!(run.body["check_run"]["name"], "ci");
    assert_eq!(run.body["check_run"]["status"], "completed");
    assert_eq!(run.body["check_run"]["conclusion"], "success");
    assert_eq!(run.body["check_run"]["pull_requests"][0]["number"], n);
    assert_eq!(
        run.body["check_run"]["check_suite"]["head_sha"],
        head.as_str()
    );
    let suite = hook
        .wait_for("check_suite completed", |r| {
            r.event() == "check_suite" && r.body["action"] == "completed"
        })
        .await;
    assert_eq!(suite.body["check_suite"]["conclusion"], "success");
    assert_eq!(suite.body["check_suite"]["head_branch"], "feature");
    let status = hook
        .wait_for("status success", |r| {
            r.event() == "status" && r.body["state"] == "success"
        })
        .await;
    assert_signed(&status);
    assert_eq!(status.body["sha"], head.as_str());
    assert_eq!(status.body["context"], "legacy");
    assert_eq!(status.body["branches"][0]["name"], "feature");

    // pull_request_review submitted (state lower-case in webhooks).
    sim.github_approve(REPO, n, "alice").unwrap();
    let review = hook
        .wait_for("review", |r| {
            r.event() == "pull_request_review" && r.body["action"] == "submitted"
        })
        .await;
    assert_signed(&review);
    assert_eq!(review.body["review"]["state"], "approved");
    assert_eq!(review.body["review"]["user"]["login"], "alice");
    assert_eq!(review.body["review"]["commit_id"], head.as_str());
    assert_eq!(review.body["pull_request"]["number"], n);
    assert_eq!(review.body["sender"]["login"], "alice");

    // synchronize on a human push, edited on a title change.
    let new_head = sim
        .github_push_human_commit(REPO, "feature", &[("b.txt", Some("b"))], "more")
        .unwrap();
    let sync = hook
        .wait_for("synchronize", |r| {
            r.event() == "pull_request" && r.body["action"] == "synchronize"
        })
        .await;
    assert_eq!(sync.body["before"], head.as_str());
    assert_eq!(sync.body["after"], new_head.as_str());
    assert_eq!(sync.body["pull_request"]["head"]["sha"], new_head.as_str());
    gh.patch(
        &format!("/repos/octo/app/pulls/{n}"),
        json!({ "title": "Renamed" }),
    )
    .await;
    let edited = hook
        .wait_for("edited", |r| {
            r.event() == "pull_request" && r.body["action"] == "edited"
        })
        .await;
    assert_eq!(edited.body["changes"]["title"]["from"], "Add a");

    // Through the queue: enqueued, merge_group checks_requested / destroyed(merged), closed merged.
    gh.poll(
        &format!("/repos/octo/app/commits/{new_head}/check-runs"),
        |b| b["check_runs"][0]["status"] == "completed",
    )
    .await;
    let (status, body) = gh
        .put(
            &format!("/repos/octo/app/pulls/{n}/merge-async"),
            json!({ "sha": new_head }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    gh.poll(&format!("/repos/octo/app/pulls/{n}"), |p| {
        p["merged"] == true
    })
    .await;
    let enqueued = hook
        .wait_for("enqueued", |r| {
            r.event() == "pull_request" && r.body["action"] == "enqueued"
        })
        .await;
    assert_eq!(enqueued.body["pull_request"]["number"], n);
    let requested = hook
        .wait_for("merge_group checks_requested", |r| {
            r.event() == "merge_group" && r.body["action"] == "checks_requested"
        })
        .await;
    assert_signed(&requested);
    let group = &requested.body["merge_group"];
    assert!(
        group["head_ref"]
            .as_str()
            .unwrap()
            .starts_with("refs/heads/gh-readonly-queue/main/pr-")
    );
    assert_eq!(group["base_ref"], "refs/heads/main");
    assert_eq!(group["head_commit"]["id"], group["head_sha"]);
    let destroyed = hook
        .wait_for("merge_group destroyed", |r| {
            r.event() == "merge_group" && r.body["action"] == "destroyed"
        })
        .await;
    assert_eq!(destroyed.body["reason"], "merged");
    assert_eq!(destroyed.body["merge_group"]["head_sha"], group["head_sha"]);
    let closed = hook
        .wait_for("closed", |r| {
            r.event() == "pull_request" && r.body["action"] == "closed"
        })
        .await;
    assert_signed(&closed);
    assert_eq!(closed.body["pull_request"]["merged"], true);
    assert_eq!(
        closed.body["pull_request"]["merge_commit_sha"],
        group["head_sha"]
    );

    // A PR closed without merging reports merged: false; reopening sends reopened.
    gh.commit_files(REPO, "other", &[("o.txt", "o\n")], "o")
        .await;
    let n2 = gh.open_pr(REPO, "other", "Other").await;
    gh.patch(
        &format!("/repos/octo/app/pulls/{n2}"),
        json!({ "state": "closed" }),
    )
    .await;
    let closed2 = hook
        .wait_for("closed unmerged", |r| {
            r.event() == "pull_request" && r.body["action"] == "closed" && r.body["number"] == n2
        })
        .await;
    assert_eq!(closed2.body["pull_request"]["merged"], false);
    gh.patch(
        &format!("/repos/octo/app/pulls/{n2}"),
        json!({ "state": "open" }),
    )
    .await;
    hook.wait_for("reopened", |r| {
        r.event() == "pull_request" && r.body["action"] == "reopened"
    })
    .await;

    // Every delivery carried a valid signature.
    for r in hook.all() {
        assert_signed(&r);
    }
}
