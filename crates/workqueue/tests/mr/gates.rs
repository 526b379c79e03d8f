//! The review gate as configured (`mr.require_review`,
//! `mr.review_overrides`), GitLab's approvals among the gates, and the
//! status note that follows the item from "Waiting for CI" to "Merged",
//! edited in place; on GitLab and GitHub.

use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use serde_json::Value;
use wq_testkit::{Backend, backend_tests};

use crate::support::{GITHUB, GithubRepo, Harness, Options, PROJECT, dimension, manual};

backend_tests!(
    gitlab_a_persons_approval_is_required_and_the_bots_is_none,
    github_a_repository_without_review_rules_waits_for_a_person,
    github_an_approval_covers_only_the_head_it_was_given_for,
    gitlab_an_approval_covers_only_the_head_it_was_given_for,
    gitlab_approvals_that_survive_pushes_count_for_no_head,
    gitlab_without_require_review_the_forges_rules_decide,
    github_without_require_review_the_forges_rules_decide,
    gitlab_two_required_approvals_merge_on_the_second,
    gitlab_the_note_tells_the_story_edited_in_place,
    github_the_note_tells_the_story_edited_in_place,
    an_automation_change_rewrites_the_note,
);

/// The bot: the forge user of workqueue's token.
const BOT: &str = forge_sim::DEFAULT_USERNAME;
/// How far the service's clock moves to pass the note's edit interval.
const PAST_NOTE_INTERVAL: Duration = Duration::from_secs(31);

/// Moves the service's clock past the note's edit interval once the engine
/// is idle: a run still going when the clock moves could park at its older
/// time with the edit due and nobody to wake it.
async fn past_note_interval(h: &Harness) {
    h.settle().await;
    h.advance(PAST_NOTE_INTERVAL).await;
}

fn options(forge: &str, require_review: bool, jobs: Vec<JobSpec>) -> Options {
    Options {
        jobs,
        require_review,
        github: (forge == GITHUB).then_some(GithubRepo {
            merge_queue: false,
            required_approvals: 0,
            dismiss_stale_reviews: false,
        }),
        ..Options::default()
    }
}

fn quick_ci() -> Vec<JobSpec> {
    vec![JobSpec::new("unit", JobOutcome::Success)]
}

fn unmet(item: &Value) -> Vec<String> {
    dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .map(|g| g.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The gates of a change request's first observation, the answer to its
/// creation while CI runs: the review gates are not read yet (and count as
/// unmet), the forge is still working out its mergeability.
const FIRST_SIGHT: &[&str] = &["ci_passed", "approved", "review_by_person", "mergeable"];

/// Submits `branch` and waits until the last reconcile saw `gates` unmet.
async fn submit_until(h: &Harness, branch: &str, gates: &[&str]) -> (String, u64) {
    let id = h
        .submit_ok(
            &h.change(branch, &[("g.txt", "g\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.wait_for(&id, &format!("unmet gates {gates:?}"), |item| {
        unmet(item) == gates
    })
    .await;
    (id, number)
}

/// The status note: the one comment of the bot with the item's marker.
async fn status_note(h: &Harness, number: u64, id: &str) -> (u64, String) {
    let marker = format!("<!-- workqueue:item:{id} -->");
    let notes: Vec<(u64, String)> = h
        .comments(number)
        .await
        .into_iter()
        .filter(|(_, author, body)| author == BOT && body.contains(&marker))
        .map(|(note, _, body)| (note, body))
        .collect();
    assert_eq!(notes.len(), 1, "one status note: {notes:#?}");
    notes.into_iter().next().unwrap()
}

/// The note's state line.
fn state(body: &str) -> &str {
    body.lines()
        .find_map(|line| line.strip_prefix("**workqueue:** "))
        .unwrap_or_default()
}

fn merged(h: &Harness, number: u64) -> bool {
    h.change_state(number).3
}

async fn gitlab_a_persons_approval_is_required_and_the_bots_is_none(backend: Backend) {
    let h = Harness::start_with(backend, options("gitlab", true, quick_ci())).await;
    let (id, number) = submit_until(&h, "wq/person", &["review_by_person"]).await;
    let item = h.item(&id).await;
    assert_eq!(
        item["detail"]["review_gate"], "review_by_person",
        "{item:#}"
    );

    // The bot approves its own merge request (as in a project that lets
    // authors approve): GitLab counts it, the review gate does not.
    h.approve_as(number, BOT);
    h.settle().await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(unmet(&item), ["review_by_person"]);
    assert!(!merged(&h, number));
    assert!(
        h.count("GET", &format!("/merge_requests/{number}/approvals")) > 0,
        "the approvals are read"
    );

    h.approve_as(number, "alice");
    let item = h.wait_phase(&id, "completed").await;
    assert!(merged(&h, number), "{item:#}");
    let (_, body) = status_note(&h, number, &id).await;
    assert_eq!(state(&body), "Merged", "{body}");
    h.finish().await;
}

async fn github_a_repository_without_review_rules_waits_for_a_person(backend: Backend) {
    let h = Harness::start_with(backend, options(GITHUB, true, quick_ci())).await;
    let (id, number) = submit_until(&h, "wq/person", &["review_by_person"]).await;
    let item = h.item(&id).await;
    assert_eq!(
        item["detail"]["review_gate"], "review_by_person",
        "{item:#}"
    );
    // GitHub requires no review here: only workqueue's rule holds it back.
    h.settle().await;
    assert!(!merged(&h, number));
    assert_eq!(h.count("PUT", "/merge-async"), 0, "no merge call");

    // Anyone may review a public repository's pull request: an account
    // without access to it is nobody's review.
    h.sim
        .github_update_repo(
            PROJECT,
            forge_sim::github::GithubRepoSpec::default().outside_users(&["passerby"]),
        )
        .unwrap();
    h.approve_as(number, "passerby");
    h.settle().await;
    let item = h.item(&id).await;
    assert_eq!(unmet(&item), ["review_by_person"], "{item:#}");
    assert!(!merged(&h, number));

    h.approve_as(number, "alice");
    h.wait_phase(&id, "completed").await;
    assert!(merged(&h, number));
    h.finish().await;
}

/// A caller's push after a person's approval is not what the person looked
/// at: the review gate waits for an approval of the new head (GitHub: the
/// review's commit; GitLab: a push clears the approvals, its default).
async fn an_approval_covers_only_the_head_it_was_given_for(backend: Backend, forge: &str) {
    let slow_ci = vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(600)];
    let h = Harness::start_with(backend, options(forge, true, slow_ci)).await;
    // While CI runs, GitLab also says the merge request is not mergeable.
    let running: &[&str] = if forge == GITHUB {
        &["ci_passed"]
    } else {
        &["ci_passed", "mergeable"]
    };
    // The first observation is the creation's answer: no review in it, and
    // the forge has not told its mergeability yet.
    let (id, number) = submit_until(&h, "wq/stale", FIRST_SIGHT).await;
    h.approve_as(number, "alice");
    h.wait_for(&id, "alice's approval", |item| unmet(item) == running)
        .await;
    let first_head = h.item(&id).await["detail"]["mr"]["head_sha"].clone();

    // The caller pushes other content before CI ends.
    h.submit_ok(
        &h.change("wq/stale", &[("g.txt", "other\n")]),
        StatusCode::OK,
        "updated",
    )
    .await;
    h.wait_for(&id, "the new head, unreviewed", |item| {
        item["detail"]["mr"]["head_sha"] != first_head
            && unmet(item).contains(&"review_by_person".to_owned())
    })
    .await;
    h.sim.advance(Duration::from_secs(600));
    h.wait_for(&id, "CI passed on the new head", |item| {
        unmet(item) == ["review_by_person"]
    })
    .await;
    h.settle().await;
    assert!(!merged(&h, number), "the new head was not reviewed");

    h.approve_as(number, "alice");
    h.wait_phase(&id, "completed").await;
    assert!(merged(&h, number));
    h.finish().await;
}

async fn github_an_approval_covers_only_the_head_it_was_given_for(backend: Backend) {
    an_approval_covers_only_the_head_it_was_given_for(backend, GITHUB).await;
}

async fn gitlab_an_approval_covers_only_the_head_it_was_given_for(backend: Backend) {
    an_approval_covers_only_the_head_it_was_given_for(backend, "gitlab").await;
}

/// GitLab ties no approval to a commit: on a project whose approvals
/// survive pushes, an approval may be of older content, so nobody counts as
/// having reviewed the head and the change waits (a manual merge, or
/// `require_review: false` for the project, decides instead).
async fn gitlab_approvals_that_survive_pushes_count_for_no_head(backend: Backend) {
    let h = Harness::start_with(backend, options("gitlab", true, quick_ci())).await;
    h.sim
        .update_gitlab_project(
            h.project,
            forge_sim::GitlabProjectSpec {
                reset_approvals_on_push: Some(false),
                ..forge_sim::GitlabProjectSpec::default()
            },
        )
        .unwrap();
    let (id, number) = submit_until(&h, "wq/kept", &["review_by_person"]).await;
    h.approve_as(number, "alice");
    h.settle().await;
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_eq!(unmet(&item), ["review_by_person"], "{item:#}");
    assert!(!merged(&h, number));
    assert!(
        h.count("GET", "/approvals") > 0,
        "the project's approval settings are read"
    );
    h.finish().await;
}

/// `require_review: true` for the service, off for the harness's forge
/// and project: the forge's own rules decide, and they require nothing.
async fn without_require_review_the_forges_rules_decide(backend: Backend, forge: &str) {
    let mut options = options(forge, true, quick_ci());
    options.review_overrides = vec![
        wq_mr::ReviewOverride {
            forge: forge.to_owned(),
            project: None,
            require_review: true,
        },
        wq_mr::ReviewOverride {
            forge: forge.to_owned(),
            project: Some(PROJECT.to_uppercase()),
            require_review: false,
        },
    ];
    let h = Harness::start_with(backend, options).await;
    let id = h
        .submit_ok(
            &h.change("wq/forge-rules", &[("f.txt", "f\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["detail"]["review_gate"], "approved", "{item:#}");
    let number = item["detail"]["mr"]["number"].as_u64().unwrap();
    assert!(merged(&h, number), "merged without any review");
    h.finish().await;
}

async fn gitlab_without_require_review_the_forges_rules_decide(backend: Backend) {
    without_require_review_the_forges_rules_decide(backend, "gitlab").await;
}

async fn github_without_require_review_the_forges_rules_decide(backend: Backend) {
    without_require_review_the_forges_rules_decide(backend, GITHUB).await;
}

async fn gitlab_two_required_approvals_merge_on_the_second(backend: Backend) {
    let mut options = options("gitlab", true, quick_ci());
    options.gitlab_approvals_required = 2;
    let h = Harness::start_with(backend, options).await;
    // GitLab's `not_approved` also makes the merge request unmergeable.
    let (id, number) =
        submit_until(&h, "wq/two", &["approved", "review_by_person", "mergeable"]).await;

    // One approval by a person: the person's gate holds, the project's
    // second approval is missing.
    h.approve_as(number, "alice");
    h.wait_for(&id, "the project's gate alone", |item| {
        unmet(item) == ["approved", "mergeable"]
    })
    .await;
    h.settle().await;
    assert!(!merged(&h, number));
    assert_eq!(h.mr(number)["detailed_merge_status"], "not_approved");

    h.approve_as(number, "bob");
    h.wait_phase(&id, "completed").await;
    assert!(merged(&h, number));
    h.finish().await;
}

/// From "Waiting for CI" to "Waiting for review" to "Merged", with every
/// gate, in one note edited in place. The first note is posted from the
/// creation's answer, without listing the notes (no earlier post can
/// exist), and says the review is not checked yet.
async fn the_note_tells_the_story_edited_in_place(backend: Backend, forge: &str) {
    let slow_ci = vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(600)];
    let h = Harness::start_with(backend, options(forge, true, slow_ci)).await;
    let id = h
        .submit_ok(
            &h.change("wq/story", &[("s.txt", "s\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.wait_for(&id, "the first note, CI running", |item| {
        unmet(item) == FIRST_SIGHT
            && dimension(item, "needs_dashboard")["detail"]["note_id"].is_u64()
    })
    .await;
    let (note, waiting_ci) = status_note(&h, number, &id).await;
    assert_eq!(state(&waiting_ci), "Waiting for CI", "{waiting_ci}");
    assert!(
        waiting_ci.contains(&format!("{}/ui/items/{id}", h.url)),
        "{waiting_ci}"
    );
    assert!(waiting_ci.contains("- ⏳ `ci_passed`"), "{waiting_ci}");
    assert!(
        waiting_ci.contains(
            "- ❔ `review_by_person`: approved by a person other than workqueue (not checked yet)"
        ),
        "{waiting_ci}"
    );
    assert!(waiting_ci.contains("- ✅ `open`"), "{waiting_ci}");
    assert!(
        waiting_ci.contains("Last merge attempt: none yet"),
        "{waiting_ci}"
    );

    h.sim.advance(Duration::from_secs(600));
    h.wait_for(&id, "CI passed, review missing", |item| {
        unmet(item) == ["review_by_person"]
    })
    .await;
    // The edit waits for the note's interval.
    past_note_interval(&h).await;
    let (same, waiting_review) = status_note(&h, number, &id).await;
    assert_eq!(same, note, "edited in place");
    assert_eq!(
        state(&waiting_review),
        "Waiting for review",
        "{waiting_review}"
    );
    assert!(
        waiting_review.contains("- ✅ `ci_passed`"),
        "{waiting_review}"
    );
    assert!(
        waiting_review.contains("- ⏳ `review_by_person`"),
        "{waiting_review}"
    );

    // The merge ends the item and writes the final state at once.
    h.approve_as(number, "alice");
    h.wait_phase(&id, "completed").await;
    let (same, done) = status_note(&h, number, &id).await;
    assert_eq!(same, note);
    assert_eq!(state(&done), "Merged", "{done}");
    assert!(done.contains("Last merge attempt at "), "{done}");
    assert!(done.contains(": accepted"), "{done}");
    assert_eq!(h.comment_edits(note), 2, "one edit per state");
    // The service never listed the notes: the first was posted without
    // looking (no earlier post can exist), every edit went by the note's
    // id (the test's own reads send no page size).
    let listed = h
        .sim
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET"
                && (r.path.ends_with("/notes") || r.path.ends_with("/comments"))
                && r.query.as_deref().is_some_and(|q| q.contains("per_page="))
        })
        .count();
    assert_eq!(listed, 0, "notes never listed");
    h.finish().await;
}

async fn gitlab_the_note_tells_the_story_edited_in_place(backend: Backend) {
    the_note_tells_the_story_edited_in_place(backend, "gitlab").await;
}

async fn github_the_note_tells_the_story_edited_in_place(backend: Backend) {
    the_note_tells_the_story_edited_in_place(backend, GITHUB).await;
}

/// Turning automatic merge on in a resubmission rewrites the note, and the
/// item merges.
async fn an_automation_change_rewrites_the_note(backend: Backend) {
    let h = Harness::start_with(backend, options("gitlab", false, quick_ci())).await;
    let body = h.change("wq/later", &[("l.txt", "l\n")]);
    let id = h
        .submit_ok(&manual(body.clone()), StatusCode::CREATED, "created")
        .await;
    let number = h.wait_mr(&id).await;
    h.wait_for(&id, "every gate met", |item| {
        dimension(item, "needs_reconcile")["detail"]["unmet_gates"] == serde_json::json!([])
    })
    .await;
    past_note_interval(&h).await;
    let (note, off) = status_note(&h, number, &id).await;
    assert_eq!(
        state(&off),
        "Ready to merge — automatic merge is off for this item",
        "{off}"
    );
    assert!(off.contains("Automatic merge: off"), "{off}");

    h.submit_ok(&body, StatusCode::OK, "updated").await;
    h.wait_phase(&id, "completed").await;
    let (same, on) = status_note(&h, number, &id).await;
    assert_eq!(same, note);
    assert_eq!(state(&on), "Merged", "{on}");
    assert!(on.contains("Automatic merge: on"), "{on}");
    h.finish().await;
}
