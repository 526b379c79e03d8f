//! The crashes between a forge write and its record that fewer forge
//! calls must survive: the first status note, posted without looking for
//! an earlier one.

use std::sync::Arc;
use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    CrashAt, CrashOnce, GITHUB, GithubRepo, Harness, Intercept, Options, dimension, manual,
};

backend_tests!(
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
                })
            })
        }),
        ..Options::default()
    }
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

/// The first status note is posted without listing the notes, so its post
/// is remembered first: the process dies after the forge took the note
/// and before its id was recorded, and the run after the crash looks for
/// it (by its marker and the bot as author) instead of posting another.
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
    assert_eq!(open["trigger"]["action"], "post_dashboard_note", "{open}");

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
    h.finish().await;
}

async fn gitlab_a_crash_after_the_first_note_is_posted_posts_no_second_one(backend: Backend) {
    a_crash_after_the_first_note_is_posted_posts_no_second_one(backend, "gitlab").await;
}

async fn github_a_crash_after_the_first_note_is_posted_posts_no_second_one(backend: Backend) {
    a_crash_after_the_first_note_is_posted_posts_no_second_one(backend, GITHUB).await;
}
