//! workqueue writes only over what it owns. A person's branch or
//! change request is never pushed to, edited or merged; a protected branch
//! is refused before any push; one caller owns a live item; the project is
//! the forge's spelling; the status note is the bot's own.

use std::sync::Arc;
use std::time::Duration;

use forge_sim::{FaultRule, HttpFault};
use reqwest::StatusCode;
use wq_testkit::{Backend, backend_tests};

use crate::support::{
    CrashAt, CrashOnce, GITHUB, GithubRepo, Harness, Intercept, Options, PERSON, PROJECT,
    bearer_client, dimension, manual,
};

backend_tests!(
    gitlab_a_persons_branch_is_never_written,
    github_a_persons_branch_is_never_written,
    gitlab_a_persons_open_mr_is_not_adopted,
    github_a_persons_open_pr_is_not_adopted,
    gitlab_a_persons_open_mr_of_a_deleted_branch_is_not_adopted,
    gitlab_a_later_generation_reuses_the_branch_workqueue_pushed,
    github_a_later_generation_reuses_the_branch_workqueue_pushed,
    gitlab_a_protected_branch_is_refused_before_any_push,
    github_a_protected_branch_is_refused_before_any_push,
    adopt_existing_branches_restores_adoption,
    a_push_whose_record_was_lost_stays_workqueues,
    another_callers_update_is_refused_and_the_history_names_both,
    the_project_is_the_forges_spelling,
    a_persons_note_with_the_marker_is_left_alone,
    reopening_after_a_persons_close_needs_admin,
    gitlab_a_persons_commit_on_workqueues_branch_is_not_overwritten,
    github_a_persons_commit_on_workqueues_branch_is_not_overwritten,
    a_refused_push_leaves_no_claim_on_the_branch,
    github_a_pr_whose_label_call_failed_is_still_workqueues,
);

fn github() -> Options {
    Options {
        github: Some(GithubRepo {
            merge_queue: false,
            required_approvals: 0,
            dismiss_stale_reviews: false,
        }),
        // The pull requests wait for a person's approval, which `approve`
        // gives.
        require_review: true,
        ..Options::default()
    }
}

async fn start(backend: Backend, forge: &str) -> Harness {
    if forge == GITHUB {
        Harness::start_with(backend, github()).await
    } else {
        Harness::start(backend).await
    }
}

/// The item failed with `branch_not_managed` naming `branch`, and the API
/// shows the kind in the `needs_mr` detail.
fn assert_not_managed(item: &serde_json::Value, branch: &str) {
    assert_eq!(item["phase"], "failed", "{item:#}");
    let error = item["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("branch_not_managed:"), "{item:#}");
    assert!(error.contains(branch), "{item:#}");
    let needs_mr = dimension(item, "needs_mr");
    assert_eq!(
        needs_mr["detail"]["error_kind"], "branch_not_managed",
        "{item:#}"
    );
    assert_eq!(needs_mr["detail"]["branch"], branch, "{item:#}");
}

/// The forge refuses the first push outright (nothing written); a person then
/// creates the branch. The intent stored before the refused push must not
/// make the person's branch pass for workqueue's on the retry.
async fn a_refused_push_leaves_no_claim_on_the_branch(backend: Backend) {
    let h = Harness::start(backend).await;
    let branch = "wq/refused";
    h.sim.add_fault(FaultRule::pattern(
        "POST",
        "/api/v4/projects/*/repository/commits",
        HttpFault::Status { status: 400 },
    ));
    let id = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "x\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_phase(&id, "failed").await;
    h.sim.clear_faults();
    let head = h.person_push(branch, &[("person.txt", Some("mine\n"))]);
    h.sim.clear_requests();
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let item = h.wait_phase(&id, "failed").await;
    assert_not_managed(&item, branch);
    assert_eq!(
        h.branch_head(branch),
        Some(head),
        "the person's branch stays"
    );
    assert_eq!(h.forge_writes(), Vec::<String>::new(), "no forge write");
    h.finish().await;
}

async fn a_persons_branch_is_never_written(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "feature/persons";
    let head = h.person_push(branch, &[("person.txt", Some("mine\n"))]);
    h.sim.clear_requests();
    let id = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "x\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&id, "failed").await;
    assert_not_managed(&item, branch);
    assert_eq!(h.branch_head(branch), Some(head), "the branch is unchanged");
    assert_eq!(h.forge_writes(), Vec::<String>::new(), "no forge write");
    h.finish().await;
}

async fn gitlab_a_persons_branch_is_never_written(backend: Backend) {
    a_persons_branch_is_never_written(backend, "gitlab").await;
}

async fn github_a_persons_branch_is_never_written(backend: Backend) {
    a_persons_branch_is_never_written(backend, GITHUB).await;
}

/// A person adds a commit to the branch workqueue pushed: the reconcile
/// sees the new head, but a later update must not force-push over it (a
/// head is workqueue's only when workqueue pushed it).
async fn a_persons_commit_on_workqueues_branch_is_not_overwritten(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "wq/collab";
    let id = h
        .submit_ok(
            &manual(h.change(branch, &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    h.settle().await;
    let head = h.person_push(branch, &[("fix.txt", Some("a person's fix\n"))]);
    h.settle().await;
    h.sim.clear_requests();
    let (status, reply) = h
        .submit(&manual(h.change(branch, &[("x.txt", "x2\n")])))
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["outcome"], "updated", "{reply}");
    let item = h.wait_phase(&id, "failed").await;
    assert_not_managed(&item, branch);
    assert_eq!(
        h.branch_head(branch),
        Some(head),
        "the person's commit stays"
    );
    assert_eq!(h.forge_writes(), Vec::<String>::new(), "no forge write");
    h.finish().await;
}

async fn gitlab_a_persons_commit_on_workqueues_branch_is_not_overwritten(backend: Backend) {
    a_persons_commit_on_workqueues_branch_is_not_overwritten(backend, "gitlab").await;
}

async fn github_a_persons_commit_on_workqueues_branch_is_not_overwritten(backend: Backend) {
    a_persons_commit_on_workqueues_branch_is_not_overwritten(backend, GITHUB).await;
}

/// The branch is workqueue's (an earlier generation pushed it), but the
/// change request open on it is a person's.
async fn a_persons_open_change_is_not_adopted(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "wq/shared";
    let first = h
        .submit_ok(
            &manual(h.change(branch, &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let ours = h.wait_mr(&first).await;
    h.settle().await;
    h.person_close_change(ours).await;
    h.wait_phase(&first, "cancelled").await;
    let labels: &[&str] = if forge == GITHUB { &[] } else { &["mine"] };
    let theirs = h
        .person_open_change(branch, "A person's work", labels)
        .await;
    h.settle().await;
    let before = h.change_state(theirs);
    let head = h.branch_head(branch);
    h.sim.clear_requests();
    // Automatic merge on: adopting it would also merge it.
    let second = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "y\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&second, "failed").await;
    assert_not_managed(&item, branch);
    assert!(
        item["error"]
            .as_str()
            .unwrap()
            .contains(&format!("#{theirs}")),
        "{item:#}"
    );
    let after = h.change_state(theirs);
    assert_eq!(after, before, "title, labels and state unchanged");
    assert!(!after.3, "not merged");
    assert_eq!(h.branch_head(branch), head, "the branch is unchanged");
    assert_eq!(h.forge_writes(), Vec::<String>::new(), "no forge write");
    h.finish().await;
}

async fn gitlab_a_persons_open_mr_is_not_adopted(backend: Backend) {
    a_persons_open_change_is_not_adopted(backend, "gitlab").await;
}

async fn github_a_persons_open_pr_is_not_adopted(backend: Backend) {
    a_persons_open_change_is_not_adopted(backend, GITHUB).await;
}

/// GitLab keeps a merge request open when its source branch is deleted.
/// A first push reads neither the branch nor the open merge requests: it
/// creates the branch (it did not exist, so nothing is written over), and
/// the creation's conflict answer (409, another open merge request from
/// the branch) tells of the person's, which is looked up and not adopted:
/// its title, labels and state stay, nothing is merged, and workqueue opens
/// none.
async fn gitlab_a_persons_open_mr_of_a_deleted_branch_is_not_adopted(backend: Backend) {
    let h = Harness::start(backend).await;
    let branch = "feature/gone";
    h.person_push(branch, &[("person.txt", Some("mine\n"))]);
    let theirs = h
        .person_open_change(branch, "A person's work", &["mine"])
        .await;
    let deleted = h
        .client
        .delete(format!(
            "{}/projects/{}/repository/branches/feature%2Fgone",
            h.sim.gitlab_url(),
            h.project
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    assert_eq!(h.branch_head(branch), None);
    h.settle().await;
    let before = h.change_state(theirs);
    h.sim.clear_requests();
    let id = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "x\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&id, "failed").await;
    assert_not_managed(&item, branch);
    assert!(
        item["error"]
            .as_str()
            .unwrap()
            .contains(&format!("#{theirs}")),
        "{item:#}"
    );
    let after = h.change_state(theirs);
    assert_eq!(
        (&after.0, &after.1, &after.2),
        (&before.0, &before.1, &before.2),
        "title, labels and state unchanged"
    );
    assert!(!after.3, "not merged");
    assert_eq!(
        h.count("POST", "/merge_requests"),
        1,
        "the refused creation"
    );
    assert_eq!(
        h.forge_writes(),
        vec!["POST /api/v4/projects/team%2Fapp/repository/commits".to_owned()],
        "the branch the push created is the only write"
    );
    h.finish().await;
}

/// Waits for the item's change request and, on GitHub, approves it (the
/// review gate).
async fn approve(h: &Harness, id: &str) {
    let number = h.wait_mr(id).await;
    if h.forge == GITHUB {
        h.sim.github_approve(PROJECT, number, "reviewer").unwrap();
    }
}

async fn a_later_generation_reuses_the_branch(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "wq/again";
    let first = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "x\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    approve(&h, &first).await;
    let done = h.wait_phase(&first, "completed").await;
    let first_mr = done["detail"]["mr"]["number"].as_u64().unwrap();
    assert!(h.branch_head(branch).is_some(), "the merged branch stays");
    let second = h
        .submit_ok(
            &h.change(branch, &[("y.txt", "y\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    assert_ne!(first, second);
    approve(&h, &second).await;
    let item = h.wait_phase(&second, "completed").await;
    assert_eq!(item["detail"]["generation"], 2, "{item:#}");
    let second_mr = item["detail"]["mr"]["number"].as_u64().unwrap();
    assert_ne!(first_mr, second_mr, "a new change request");
    h.finish().await;
}

async fn gitlab_a_later_generation_reuses_the_branch_workqueue_pushed(backend: Backend) {
    a_later_generation_reuses_the_branch(backend, "gitlab").await;
}

async fn github_a_later_generation_reuses_the_branch_workqueue_pushed(backend: Backend) {
    a_later_generation_reuses_the_branch(backend, GITHUB).await;
}

/// A branch the forge protects (not one of the static patterns) is never
/// pushed to.
async fn a_protected_branch_is_refused_before_any_push(backend: Backend, forge: &str) {
    let h = start(backend, forge).await;
    let branch = "deploy/prod";
    if forge == GITHUB {
        // A branch that does not exist yet: GitHub shows its protection
        // through the rulesets that apply to the name.
        h.sim
            .github_add_ruleset(PROJECT, &["refs/heads/deploy/*"], &["non_fast_forward"])
            .unwrap();
    } else {
        h.sim.gitlab_protect_branch(h.project, "deploy/*").unwrap();
    }
    h.sim.clear_requests();
    let id = h
        .submit_ok(
            &h.change(branch, &[("x.txt", "x\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h.wait_phase(&id, "failed").await;
    let error = item["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("branch_protected:"), "{item:#}");
    assert_eq!(
        dimension(&item, "needs_mr")["detail"]["error_kind"],
        "branch_protected",
        "{item:#}"
    );
    assert_eq!(h.branch_head(branch), None, "no branch was created");
    assert_eq!(h.forge_writes(), Vec::<String>::new(), "no forge write");
    h.finish().await;
}

async fn gitlab_a_protected_branch_is_refused_before_any_push(backend: Backend) {
    a_protected_branch_is_refused_before_any_push(backend, "gitlab").await;
}

async fn github_a_protected_branch_is_refused_before_any_push(backend: Backend) {
    a_protected_branch_is_refused_before_any_push(backend, GITHUB).await;
}

async fn adopt_existing_branches_restores_adoption(backend: Backend) {
    let h = Harness::start_with(
        backend,
        Options {
            adopt_existing_branches: true,
            ..Options::default()
        },
    )
    .await;
    let branch = "feature/adopted";
    let head = h.person_push(branch, &[("person.txt", Some("mine\n"))]);
    let theirs = h.person_open_change(branch, "A person's work", &[]).await;
    let id = h
        .submit_ok(
            &manual(h.change(branch, &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    assert_eq!(h.wait_mr(&id).await, theirs, "the open MR is adopted");
    assert_ne!(
        h.branch_head(branch),
        Some(head),
        "the branch is pushed over"
    );
    let (title, labels, _, _) = h.change_state(theirs);
    assert_eq!(title, "Change on feature/adopted");
    assert!(
        labels.contains(&"managed-by::workqueue".to_owned()),
        "{labels:?}"
    );
    h.finish().await;
}

async fn reopening_after_a_persons_close_needs_admin(backend: Backend) {
    let h = Harness::start(backend).await;
    let alice = bearer_client(&h.tokens.alice);
    let (status, reply) = h
        .submit_as(&alice, &manual(h.change("wq/closed", &[("x.txt", "x\n")])))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let id = reply["item"]["id"].as_str().unwrap().to_owned();
    let number = h.wait_mr(&id).await;
    h.settle().await;
    h.person_close_change(number).await;
    h.wait_phase(&id, "cancelled").await;
    let path = format!("/api/v1/work-items/{id}/retry");
    // Its submitter holds `retry`, not `admin`.
    let (status, reply) = h.post_as(&alice, &path, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{reply}");
    assert_eq!(h.item(&id).await["phase"], "cancelled");
    let (status, reply) = h.post(&path, None).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["phase"], "active", "{reply}");
    // The retry reopens the merge request and goes on managing it, rather
    // than seeing it closed and cancelling the item again.
    h.settle().await;
    assert_eq!(h.item(&id).await["phase"], "active");
    assert_eq!(h.change_state(number).2, "opened");
    let trail = h.audit(&id).await;
    assert_eq!(Harness::count_kind(&trail, "forge.change_reopened"), 1);
    h.finish().await;
}

async fn a_push_whose_record_was_lost_stays_workqueues(backend: Backend) {
    let mut h = Harness::start_with(
        backend,
        Options {
            // The first push is accepted, then the process dies before the
            // head is recorded.
            wrap: Some(Box::new(|inner, _, _| {
                Arc::new(Intercept {
                    inner,
                    before_merge: Box::new(|| Box::pin(async {})),
                    gate: None,
                    crash: Some(CrashOnce::new(CrashAt::AfterPush)),
                    torn_read: None,
                    before_push: None,
                })
            })),
            ..Options::default()
        },
    )
    .await;
    let branch = "wq/crashed";
    let id = h
        .submit_ok(
            &manual(h.change(branch, &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.settle().await;
    let pushed = h.branch_head(branch).expect("the push reached the forge");
    let item = h.item(&id).await;
    assert_eq!(
        item["detail"]["mr"]["head_sha"],
        serde_json::Value::Null,
        "{item:#}"
    );
    // The kill between the push and its record: an `ensure_mr` that
    // started and never finished, and no push on the trail.
    let before = h.audit(&id).await;
    let open = Harness::unfinished(&before).expect("an unfinished action");
    assert_eq!(open["trigger"]["action"], "ensure_mr", "{open}");
    assert_eq!(Harness::count_kind(&before, "forge.push"), 0);
    h.crash_and_restart().await;
    // The crashed run's lease expires; the item runs again.
    h.advance(Duration::from_secs(600)).await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let after = h.audit(&id).await;
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(Harness::count_kind(&after, "forge.push"), 1, "{after:#?}");
    assert_eq!(Harness::count_kind(&after, "forge.change_created"), 1);
    let item = h.item(&id).await;
    assert_eq!(item["phase"], "active", "{item:#}");
    assert_ne!(
        item["detail"]["mr"]["head_sha"], pushed,
        "pushed again, as its own"
    );
    assert_eq!(h.change_state(number).2, "opened");
    h.finish().await;
}

async fn another_callers_update_is_refused_and_the_history_names_both(backend: Backend) {
    let h = Harness::start(backend).await;
    let alice = bearer_client(&h.tokens.alice);
    let bob = bearer_client(&h.tokens.bob);
    let body = manual(h.change("wq/alices", &[("x.txt", "x\n")]));
    let (status, reply) = h.submit_as(&alice, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
    let id = reply["item"]["id"].as_str().unwrap().to_owned();
    h.wait_mr(&id).await;
    let update = manual(h.change("wq/alices", &[("x.txt", "bob's\n")]));
    let (status, reply) = h.submit_as(&bob, &update).await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");
    assert_eq!(reply["error"]["code"], "owned_by_another_caller", "{reply}");
    let item = h.item(&id).await;
    assert_eq!(item["caller_identity"], "alice (token alice, rule alice)");
    // The same content again is answered, and changes nothing.
    let (status, reply) = h.submit_as(&bob, &body).await;
    assert_eq!(
        (status, reply["outcome"].as_str()),
        (StatusCode::OK, Some("unchanged"))
    );
    // An admin may update it; the item keeps its submitter.
    let (status, reply) = h.submit(&update).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["outcome"], "updated", "{reply}");
    let item = h.item(&id).await;
    assert_eq!(item["caller_identity"], "alice (token alice, rule alice)");
    let history: Vec<(String, String)> = item["detail"]["submissions"]
        .as_array()
        .expect("history")
        .iter()
        .map(|s| {
            (
                s["outcome"].as_str().unwrap().to_owned(),
                s["caller_identity"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        history,
        vec![
            (
                "created".to_owned(),
                "alice (token alice, rule alice)".to_owned()
            ),
            (
                "unchanged".to_owned(),
                "bob (token bob, rule bob)".to_owned()
            ),
            (
                "updated".to_owned(),
                "admin (token admin, rule admins)".to_owned()
            ),
        ]
    );
    h.finish().await;
}

async fn the_project_is_the_forges_spelling(backend: Backend) {
    let h = Harness::start(backend).await;
    let mut body = manual(h.change("wq/cased", &[("x.txt", "x\n")]));
    body["project"] = "Team/APP".into();
    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    let number = h.wait_mr(&id).await;
    let item = h.item(&id).await;
    assert_eq!(item["detail"]["project"], "team/app", "{item:#}");
    // The same branch in another spelling is the same live item.
    body["project"] = "team/app".into();
    body["title"] = "Retitled".into();
    let again = h.submit_ok(&body, StatusCode::OK, "updated").await;
    assert_eq!(again, id);
    // Webhooks find it: a person's close cancels it.
    h.settle().await;
    h.person_close_change(number).await;
    h.wait_phase(&id, "cancelled").await;
    // An unknown project is the caller's mistake, named.
    body["project"] = "team/nothing-here".into();
    let (status, reply) = h.submit(&body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
    assert_eq!(reply["error"]["field"], "project", "{reply}");
    // A forge that does not answer: try again later.
    h.sim.add_fault(FaultRule::new(
        "GET",
        "/api/v4/",
        HttpFault::Status { status: 503 },
    ));
    body["project"] = "team/other".into();
    let (status, reply) = h.submit(&body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{reply}");
    h.sim.clear_faults();
    h.finish().await;
}

async fn a_persons_note_with_the_marker_is_left_alone(backend: Backend) {
    let h = Harness::start(backend).await;
    // The status note cannot be posted yet.
    h.sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/merge_requests/*/notes",
            HttpFault::Status { status: 503 },
        )
        .times(1000),
    );
    let id = h
        .submit_ok(
            &manual(h.change("wq/noted", &[("x.txt", "x\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    // The post failed; the item waits for its backoff.
    h.wait_for(&id, "the failed post", |item| item["attempts"] == 1)
        .await;
    h.sim.clear_faults();
    let marker = format!("<!-- workqueue:item:{id} -->");
    let theirs = format!("{marker}\nA person quoting the status note.");
    h.person_note(number, &theirs).await;
    h.advance(Duration::from_secs(120)).await;
    h.wait_for(&id, "the status note", |item| {
        dimension(item, "needs_dashboard")["detail"]["note_id"].is_u64()
    })
    .await;
    let notes = h.notes(number).await;
    assert!(
        notes.contains(&(PERSON.to_owned(), theirs.clone())),
        "the person's note is unchanged: {notes:#?}"
    );
    let ours: Vec<_> = notes
        .iter()
        .filter(|(author, body)| author != PERSON && body.contains(&marker))
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "one status note of the bot's own: {notes:#?}"
    );
    h.finish().await;
}

/// GitHub labels a pull request in a call after the create (with its
/// first note, or by name): when that call fails (or the process dies
/// between the two), the pull request the bot opened on the head workqueue
/// pushed is still workqueue's, recorded at once; the run after the failed
/// one adds the labels and the note, and the change merges. The item does
/// not fail with `branch_not_managed`.
async fn github_a_pr_whose_label_call_failed_is_still_workqueues(backend: Backend) {
    let h = Harness::start_with(backend, github()).await;
    h.sim.add_fault(FaultRule::pattern(
        "POST",
        "/repos/*/*/issues/*/labels",
        HttpFault::Status { status: 503 },
    ));
    let id = h
        .submit_ok(
            &h.change("wq/unlabelled", &[("u.txt", "u\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let item = h
        .wait_for(
            &id,
            "the pull request recorded, or the item failed",
            |item| item["detail"]["mr"]["number"].is_u64() || item["phase"] == "failed",
        )
        .await;
    assert_eq!(item["phase"], "active", "{item:#}");
    let number = item["detail"]["mr"]["number"].as_u64().unwrap();
    assert_eq!(h.count("POST", "/pulls"), 1, "one pull request");
    // Past the failed run's backoff.
    h.advance(Duration::from_secs(60)).await;
    h.approve_as(number, "alice");
    h.wait_phase(&id, "completed").await;
    assert!(h.change_state(number).3, "merged");
    assert_eq!(h.count("POST", "/pulls"), 1, "still one pull request");
    let pr = h.sim.github_pr(PROJECT, number).expect("pull request");
    assert!(
        pr["labels"]
            .as_array()
            .is_some_and(|labels| !labels.is_empty()),
        "labelled after all: {pr}"
    );
    h.finish().await;
}
