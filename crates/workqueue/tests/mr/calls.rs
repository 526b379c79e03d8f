//! What a typical change costs on each forge, request by request (the mr
//! benchmark counts the same over many changes), and the crashes between a
//! forge write and its record that the fewer requests must survive: the
//! change request's creation, and the first status note, which is posted
//! without looking for an earlier one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    CrashAt, CrashOnce, GITHUB, GithubRepo, Harness, Intercept, Options, PROJECT, dimension, manual,
};

backend_tests!(
    gitlab_a_typical_change_is_seven_calls_and_three_first_reads,
    github_a_typical_change_is_nine_calls_then_eight,
    github_a_second_change_lists_the_rulesets_conditionally,
    a_reconcile_asked_for_before_the_creation_is_not_deferred,
    gitlab_a_crash_after_the_merge_request_is_opened_makes_no_second_one,
    github_a_crash_after_the_pull_request_is_opened_makes_no_second_one,
    gitlab_a_crash_after_the_first_note_is_posted_posts_no_second_one,
    github_a_crash_after_the_first_note_is_posted_posts_no_second_one,
);

/// How long the change's CI runs: it still runs while the item's first
/// steps do, and its end is a webhook.
const CI: Duration = Duration::from_secs(60);

fn options(forge: &str, crash: Option<CrashAt>) -> Options {
    Options {
        jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(CI.as_secs())],
        github: (forge == GITHUB).then_some(GithubRepo {
            merge_queue: false,
            required_approvals: 0,
            dismiss_stale_reviews: false,
        }),
        wrap: crash.map(|at| -> crate::support::WrapForge {
            Box::new(move |inner, _, _| {
                Arc::new(Intercept {
                    inner,
                    before_merge: Box::new(|| Box::pin(async {})),
                    gate: None,
                    crash: Some(CrashOnce::new(at)),
                    torn_read: None,
                    before_push: None,
                })
            })
        }),
        ..Options::default()
    }
}

/// The requests the sim served since the log was cleared, by endpoint
/// class (`POST projects/*/merge_requests`): every one the service sent,
/// as the test reads nothing through the forge's API meanwhile.
fn calls(h: &Harness) -> BTreeMap<String, usize> {
    let mut calls = BTreeMap::new();
    for request in h.sim.requests() {
        let path = request
            .path
            .strip_prefix("/api/v4")
            .unwrap_or(&request.path);
        let class = wq_forge::metrics::endpoint_class(&format!("{} {path}", request.method));
        *calls.entry(class).or_default() += 1;
    }
    calls
}

fn expected(calls: &[(&str, usize)]) -> BTreeMap<String, usize> {
    calls
        .iter()
        .map(|(class, count)| ((*class).to_owned(), *count))
        .collect()
}

/// Submits a change, waits for its status note while CI runs, lets CI
/// pass and waits for the merge; the requests of it all.
async fn typical_change(h: &Harness) -> BTreeMap<String, usize> {
    typical_change_on(h, "wq/typical", "t\n").await
}

/// [`typical_change`] on `branch`, writing `content`.
async fn typical_change_on(h: &Harness, branch: &str, content: &str) -> BTreeMap<String, usize> {
    h.sim.clear_requests();
    let id = h
        .submit_ok(
            &h.change(branch, &[("t.txt", content)]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "the status note while CI runs", |item| {
        dimension(item, "needs_dashboard")["detail"]["note_id"].is_u64()
    })
    .await;
    h.settle().await;
    h.sim.advance(CI);
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(
        item["detail"]["merge"]["last_result"], "accepted",
        "{item:#}"
    );
    h.settle().await;
    calls(h)
}

/// GitLab: the push creates the branch (no read of it first, and its
/// `stats` tell the commit changes something, so no compare), the merge
/// request is created without a lookup and its answer is the first
/// observation, the first note is posted without listing the notes; the
/// pipeline's webhook brings the one read (the merge request and its
/// approvals), the merge and the note's final edit. The project, its
/// protected branches and its approval settings are read once for many
/// changes.
async fn gitlab_a_typical_change_is_seven_calls_and_three_first_reads(backend: Backend) {
    let h = Harness::start_with(backend, options("gitlab", None)).await;
    let calls = typical_change(&h).await;
    assert_eq!(
        calls,
        expected(&[
            ("GET projects/*", 1),
            ("GET projects/*/approvals", 1),
            ("GET projects/*/protected_branches", 1),
            ("POST projects/*/repository/commits", 1),
            ("POST projects/*/merge_requests", 1),
            ("POST projects/*/merge_requests/*/notes", 1),
            ("GET projects/*/merge_requests/*", 1),
            ("GET projects/*/merge_requests/*/approvals", 1),
            ("PUT projects/*/merge_requests/*/merge", 1),
            ("PUT projects/*/merge_requests/*/notes/*", 1),
        ]),
    );
    h.finish().await;
}

/// GitHub: a first push lists the repository's rulesets (none: no read of
/// the rules of the branch it creates; a later change's list is answered
/// `304`); one GraphQL query reads the base branch's head, its tree, the
/// paths the commit writes (no tree listing) and that the branch does not
/// exist yet; one GraphQL request creates the branch and commits on it
/// (no tree, commit or ref requests), and the commit's tree says it
/// changes something (no comparison); the pull request is created without
/// a lookup (the branch was new) and its answer is the first observation;
/// the label's own webhook asks for no read; the first note is posted
/// without listing the comments, with the labels. The checks' webhook
/// brings the one GraphQL read of the pull request, the merge (and its one
/// poll) and the note's final edit. The repository is read once for many
/// changes.
///
/// The first change adds its labels by name (`POST issues/:n/labels`,
/// whose answer tells their node ids) and posts its note apart; every
/// later one adds them by id in the note's GraphQL request: eight calls,
/// and the rulesets' list answered `304`.
async fn github_a_typical_change_is_nine_calls_then_eight(backend: Backend) {
    let h = Harness::start_with(backend, options(GITHUB, None)).await;
    let first = typical_change_on(&h, "wq/first", "first\n").await;
    assert_eq!(
        first,
        expected(&[
            ("GET repos/*", 1),
            ("GET repos/*/rulesets", 1),
            ("POST repos/*/pulls", 1),
            ("POST repos/*/issues/*/labels", 1),
            ("POST repos/*/issues/*/comments", 1),
            ("POST graphql", 3),
            ("PUT repos/*/pulls/*/merge-async", 1),
            ("GET repos/*/pulls/*/merge-async/*", 1),
            ("PATCH repos/*/issues/comments/*", 1),
        ]),
    );
    let second = typical_change_on(&h, "wq/second", "second\n").await;
    assert_eq!(
        second,
        expected(&[
            ("GET repos/*/rulesets", 1),
            ("POST repos/*/pulls", 1),
            ("POST graphql", 4),
            ("PUT repos/*/pulls/*/merge-async", 1),
            ("GET repos/*/pulls/*/merge-async/*", 1),
            ("PATCH repos/*/issues/comments/*", 1),
        ]),
    );
    let not_modified = h
        .sim
        .requests()
        .iter()
        .filter(|request| request.status == 304)
        .count();
    assert_eq!(not_modified, 1, "the rulesets' list");
    // The second pull request has its labels, as the first.
    let labels = |number: u64| {
        let pr = h.sim.github_pr(PROJECT, number).expect("pull request");
        pr["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .map(|label| label["name"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(labels(2), labels(1));
    assert!(!labels(2).is_empty());
    h.finish().await;
}

/// The repository's rulesets are listed for each new branch, and the list
/// the first change read is answered `304 Not Modified` to the second
/// (which GitHub does not count against the rate limit); with no ruleset
/// that may apply to branches, neither change asks for a name's rules.
async fn github_a_second_change_lists_the_rulesets_conditionally(backend: Backend) {
    let h = Harness::start_with(backend, options(GITHUB, None)).await;
    typical_change_on(&h, "wq/first", "first\n").await;
    typical_change_on(&h, "wq/second", "second\n").await;
    let listed: Vec<u16> = h
        .sim
        .requests()
        .iter()
        .filter(|request| request.path.ends_with("/rulesets"))
        .map(|request| request.status)
        .collect();
    assert_eq!(listed, [304], "the second change's list");
    let rules = h
        .sim
        .requests()
        .iter()
        .filter(|request| request.path.contains("/rules/branches/"))
        .count();
    assert_eq!(rules, 0);
    h.finish().await;
}

/// The first try of `ensure_mr` pushes, then the creation of the merge
/// request fails; a caller's `refresh` asks for a reconcile before the
/// second try opens the merge request. The creation's answer does not
/// defer that reconcile (it may have been CI's end, which on a real forge
/// can come before the merge request exists): it reads at once, without
/// waiting for the busy interval.
async fn a_reconcile_asked_for_before_the_creation_is_not_deferred(backend: Backend) {
    let h = Harness::start_with(backend, options("gitlab", None)).await;
    h.sim.add_fault(
        forge_sim::FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests",
            forge_sim::HttpFault::Status { status: 500 },
        )
        .times(1),
    );
    let id = h
        .submit_ok(
            &h.change("wq/asked", &[("a.txt", "a\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "the failed creation", |item| item["attempts"] == 1)
        .await;
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/refresh"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    // Past the engine's first backoff (two seconds and its jitter), well
    // short of the busy interval (60 s) a deferred reconcile would wait.
    h.advance(Duration::from_secs(10)).await;
    let item = h
        .wait_for(&id, "the reconcile's own read", |item| {
            let seen = &dimension(item, "needs_reconcile")["detail"];
            seen["unmet_gates"].is_array() && seen["unread_gates"].is_null()
        })
        .await;
    assert!(item["detail"]["mr"]["number"].is_u64(), "{item:#}");
    assert_eq!(h.count("GET", "/merge_requests/1"), 1, "one read");
    h.finish().await;
}

/// The process dies after the forge opened the change request and before
/// it was recorded. The push was recorded, so the run after the crash
/// looks the change request up before creating one, and takes up its own:
/// one change request, recorded as workqueue's.
async fn a_crash_after_the_change_request_is_opened_makes_no_second_one(
    backend: Backend,
    forge: &str,
) {
    let mut h = Harness::start_with(backend, options(forge, Some(CrashAt::AfterCreate))).await;
    let id = h
        .submit_ok(
            &manual(h.change("wq/opened", &[("o.txt", "o\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.settle().await;
    let item = h.item(&id).await;
    assert!(item["detail"]["mr"]["number"].is_null(), "{item:#}");
    let created = if forge == GITHUB {
        ("POST", "/pulls")
    } else {
        ("POST", "/merge_requests")
    };
    assert_eq!(h.count(created.0, created.1), 1, "the forge opened it");
    let before = h.audit(&id).await;
    let open = Harness::unfinished(&before).expect("an unfinished action");
    assert_eq!(open["trigger"]["action"], "ensure_mr", "{open}");

    h.crash_and_restart().await;
    // The crashed run's lease expires; the item runs again.
    h.advance(Duration::from_secs(600)).await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    assert_eq!(h.count(created.0, created.1), 1, "never opened twice");
    assert_eq!(number, 1, "the one change request of the project");
    let after = h.audit(&id).await;
    assert_eq!(Harness::count_kind(&after, "forge.change_created"), 1);
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    h.finish().await;
}

async fn gitlab_a_crash_after_the_merge_request_is_opened_makes_no_second_one(backend: Backend) {
    a_crash_after_the_change_request_is_opened_makes_no_second_one(backend, "gitlab").await;
}

async fn github_a_crash_after_the_pull_request_is_opened_makes_no_second_one(backend: Backend) {
    a_crash_after_the_change_request_is_opened_makes_no_second_one(backend, GITHUB).await;
}

/// The bot's status notes on change request `number` for item `id`.
async fn status_notes(h: &Harness, number: u64, id: &str) -> Vec<u64> {
    let marker = format!("<!-- workqueue:item:{id} -->");
    h.comments(number)
        .await
        .into_iter()
        .filter(|(_, author, body)| author == forge_sim::DEFAULT_USERNAME && body.contains(&marker))
        .map(|(note, _, _)| note)
        .collect()
}

/// The first status note is posted without listing the notes (by
/// `ensure_mr`, right after the change request is created and recorded),
/// so its post is remembered first: the process dies after the forge took
/// the note and before its id was recorded, and the runs after the crash
/// look for it (by its marker and the bot as author) instead of posting
/// another. The labels went with the note: they are there, and not added
/// again.
async fn a_crash_after_the_first_note_is_posted_posts_no_second_one(backend: Backend, forge: &str) {
    let mut h = Harness::start_with(backend, options(forge, Some(CrashAt::AfterNotePost))).await;
    let id = h
        .submit_ok(
            &manual(h.change("wq/noted", &[("n.txt", "n\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let posted = status_notes(&h, number, &id).await;
    assert_eq!(posted.len(), 1, "the forge took the note: {posted:?}");
    let item = h.item(&id).await;
    assert!(
        dimension(&item, "needs_dashboard")["detail"]["note_id"].is_null(),
        "its id was never recorded: {item:#}"
    );
    let before = h.audit(&id).await;
    let open = Harness::unfinished(&before).expect("an unfinished action");
    assert_eq!(open["trigger"]["action"], "ensure_mr", "{open}");
    let labelled = if forge == GITHUB {
        ("POST", "/labels")
    } else {
        ("PUT", "/merge_requests/1")
    };
    let labels_before = h.count(labelled.0, labelled.1);

    h.crash_and_restart().await;
    h.advance(Duration::from_secs(600)).await;
    let item = h
        .wait_for(&id, "the note found again", |item| {
            dimension(item, "needs_dashboard")["detail"]["note_id"].is_u64()
        })
        .await;
    h.settle().await;
    assert_eq!(
        dimension(&item, "needs_dashboard")["detail"]["note_id"],
        posted[0],
        "{item:#}"
    );
    assert_eq!(
        status_notes(&h, number, &id).await,
        posted,
        "one status note"
    );
    let after = h.audit(&id).await;
    assert_eq!(
        Harness::count_kind(&after, "forge.note_posted"),
        0,
        "the note was found, not posted again: {after:#?}"
    );
    assert_eq!(
        h.count(labelled.0, labelled.1),
        labels_before,
        "the labels are there"
    );
    h.finish().await;
}

async fn gitlab_a_crash_after_the_first_note_is_posted_posts_no_second_one(backend: Backend) {
    a_crash_after_the_first_note_is_posted_posts_no_second_one(backend, "gitlab").await;
}

async fn github_a_crash_after_the_first_note_is_posted_posts_no_second_one(backend: Backend) {
    a_crash_after_the_first_note_is_posted_posts_no_second_one(backend, GITHUB).await;
}
