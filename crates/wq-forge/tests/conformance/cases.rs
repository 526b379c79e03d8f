//! The cases every forge client passes, written once against `dyn Forge`.

use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec};
use wq_forge::{
    ChangeState, ChangeUpdate, CiStatus, CommitMode, CommitRequest, FileAction, FileOp, Forge,
    ForgeErrorKind, LabelChange, MergeMethod, MergeOutcome, MergeParams, NewChange,
    WebhookRejection, label_diff,
};

use crate::harness::{Harness, SECRET};

const STALE_SHA: &str = "ffffffffffffffffffffffffffffffffffffffff";

/// A new branch off `main` whose commit creates one file.
async fn create_branch(
    forge: &dyn Forge,
    project: &str,
    branch: &str,
    path: &str,
    content: &[u8],
) -> wq_forge::PushedCommit {
    forge
        .commit_files(&CommitRequest {
            project,
            branch,
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message: "workqueue change",
            actions: &[action(FileOp::Create, path, Some(content))],
        })
        .await
        .expect("commit")
}

/// A branch with one new file and a change request from it into `main`;
/// returns (number, head sha).
async fn open_change(forge: &dyn Forge, project: &str, branch: &str) -> (u64, String) {
    let head = create_branch(
        forge,
        project,
        branch,
        &format!("{branch}.txt"),
        b"content\n",
    )
    .await
    .sha;
    let change = forge
        .create_change(&NewChange {
            project,
            source_branch: branch,
            target_branch: "main",
            title: &format!("Change {branch}"),
            description: "",
            labels: &[],
        })
        .await
        .expect("create change");
    assert_eq!(change.head_sha.as_deref(), Some(head.as_str()));
    (change.number, head)
}

pub async fn current_user_is_the_token_user_read_once<H: Harness>() {
    let harness = H::start().await;
    let (sim, forge) = (harness.sim(), harness.forge());
    sim.add_fault(FaultRule::new(
        "GET",
        H::USER_PATH,
        HttpFault::Status { status: 502 },
    ));
    let error = forge.current_user().await.expect_err("502");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);

    let user = forge.current_user().await.expect("an error is not kept");
    assert_eq!(user.username, forge_sim::DEFAULT_USERNAME);
    if let Some(id) = harness.token_user_id() {
        assert_eq!(user.id, id);
    }
    sim.clear_requests();
    for _ in 0..3 {
        assert_eq!(forge.current_user().await.expect("cached"), user);
    }
    assert!(
        sim.requests().iter().all(|r| r.path != H::USER_PATH),
        "read once per client: {:?}",
        sim.requests()
    );
}

pub async fn change_authors_tell_the_token_user_from_a_person<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let (ours, _) = open_change(forge, H::PROJECT, "wq/ours").await;
    let me = forge.current_user().await.expect("user");
    assert_eq!(me.username, forge_sim::DEFAULT_USERNAME);
    assert_eq!(
        forge
            .get_change(H::PROJECT, ours)
            .await
            .expect("get")
            .author,
        Some(me.username)
    );

    harness.push_as("feature/alice", &[("a.txt", Some("a\n"))], "alice");
    let theirs = harness
        .open_as("feature/alice", "Alice's change", "alice")
        .await;
    let found = forge
        .find_open_change(H::PROJECT, "feature/alice")
        .await
        .expect("find")
        .expect("open change");
    assert_eq!(found.number, theirs);
    assert_eq!(found.author.as_deref(), Some("alice"));
    let head = harness.branch_head("feature/alice").expect("branch");
    assert_eq!(harness.commit_author(&head).await, "alice");
}

pub async fn project_path_is_the_forges_spelling<H: Harness>() {
    let harness = H::start().await;
    harness.create_project("Team/Service");
    let forge = harness.forge();
    for asked in ["team/service", "TEAM/SERVICE", "Team/Service"] {
        assert_eq!(
            forge.project_path(asked).await.expect(asked),
            "Team/Service"
        );
    }
    let missing = forge
        .project_path("team/other")
        .await
        .expect_err("no such project");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);
}

/// A re-read sends the kept validator: an unchanged list is answered
/// `304 Not Modified` and reads as before; once it changed, a 200 with the
/// new content. Writes are never conditional.
pub async fn re_reads_are_conditional_and_a_304_reads_as_the_kept_answer<H: Harness>() {
    let harness = H::start().await;
    let (sim, forge) = (harness.sim(), harness.forge());
    let (n, _) = open_change(forge, H::PROJECT, "wq/etag").await;
    forge
        .create_note(H::PROJECT, n, "first")
        .await
        .expect("note");
    let statuses = |sim: &forge_sim::SimHandle| -> Vec<(String, u16)> {
        sim.requests()
            .iter()
            .map(|r| (r.method.clone(), r.status))
            .collect()
    };
    sim.clear_requests();
    let first = forge.list_notes(H::PROJECT, n).await.expect("list");
    let again = forge.list_notes(H::PROJECT, n).await.expect("list again");
    assert_eq!(first, again, "a 304 reads as the kept answer");
    assert_eq!(first.len(), 1);
    assert_eq!(
        statuses(sim),
        [("GET".to_owned(), 200), ("GET".to_owned(), 304)],
        "the second read is conditional"
    );
    sim.clear_requests();
    forge
        .create_note(H::PROJECT, n, "second")
        .await
        .expect("note");
    let changed = forge.list_notes(H::PROJECT, n).await.expect("list");
    let bodies: Vec<&str> = changed.iter().map(|note| note.body.as_str()).collect();
    assert_eq!(bodies, ["first", "second"], "a changed list is read anew");
    let logged = statuses(sim);
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert_eq!(logged[0].0, "POST");
    assert!(logged[0].1 < 300, "{logged:?}");
    assert_eq!(logged[1], ("GET".to_owned(), 200));
}

/// The token's budget as the forge reports it, shared by every caller of
/// the client; a spent budget is a rate-limit error saying when to retry.
pub async fn the_rate_limit_budget_is_read_from_the_answers<H: Harness>() {
    let harness = H::start().await;
    let (sim, forge) = (harness.sim(), harness.forge());
    assert!(forge.rate_budgets().is_empty(), "nothing reported yet");
    sim.set_rate_limit(Some((3, std::time::Duration::from_secs(3600))));
    forge.project_path(H::PROJECT).await.expect("read");
    let budgets = forge.rate_budgets();
    let core = budgets
        .iter()
        .find(|budget| budget.resource == "core")
        .expect("the REST budget");
    assert_eq!((core.limit, core.remaining), (3, 2));
    let now = sim.state().clock.now().unix_timestamp();
    assert!(core.reset_unix.is_some_and(|reset| reset > now));
    assert!(core.below(0.9, now));
    assert!(!core.below(0.5, now));
    // Reads that are never answered 304 (GitHub does not count those).
    for n in 0..2 {
        let branch = format!("missing-{n}");
        assert_eq!(
            forge.branch_head(H::PROJECT, &branch).await.expect("read"),
            None
        );
    }
    let error = forge
        .branch_head(H::PROJECT, "missing-2")
        .await
        .expect_err("the budget is spent");
    assert_eq!(error.kind, ForgeErrorKind::RateLimited, "{error}");
    assert!(error.retry_after.is_some(), "{error}");
    let core = forge
        .rate_budgets()
        .into_iter()
        .find(|budget| budget.resource == "core")
        .expect("the REST budget");
    assert_eq!(core.remaining, 0);
}

pub async fn notes_are_created_updated_and_listed_across_pages<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let (n, _) = open_change(forge, H::PROJECT, "wq/notes").await;

    assert!(
        forge
            .list_notes(H::PROJECT, n)
            .await
            .expect("none")
            .is_empty()
    );
    let first = forge
        .create_note(H::PROJECT, n, "first")
        .await
        .expect("note");
    let second = forge
        .create_note(H::PROJECT, n, "second")
        .await
        .expect("note");
    harness.check_note_url(first.url.as_deref());
    forge
        .update_note(H::PROJECT, n, first.id, "first, edited")
        .await
        .expect("update");
    let notes = forge.list_notes(H::PROJECT, n).await.expect("list");
    let listed: Vec<(u64, &str, &str)> = notes
        .iter()
        .map(|note| (note.id, note.body.as_str(), note.author.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            (first.id, "first, edited", forge_sim::DEFAULT_USERNAME),
            (second.id, "second", forge_sim::DEFAULT_USERNAME),
        ]
    );
    let missing = forge
        .update_note(H::PROJECT, n, 9999, "x")
        .await
        .expect_err("no such note");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);

    // More than one page (100 per page) is read whole, oldest first.
    for i in 0..101 {
        forge
            .create_note(H::PROJECT, n, &format!("bulk {i}"))
            .await
            .expect("note");
    }
    let notes = forge.list_notes(H::PROJECT, n).await.expect("list");
    assert_eq!(notes.len(), 103);
    assert_eq!(notes[102].body, "bulk 100");
}

pub async fn ci_jobs_are_offered_where_the_forge_has_them<H: Harness>() {
    let harness = H::start().await;
    assert_eq!(harness.forge().ci_jobs().is_some(), H::CI_JOBS);
}

/// Both forges' jobs alike: a failed job of the head pipeline (GitHub: workflow
/// run) is listed failed with a reason, its log's tail read, retried; the new
/// attempt passes and the old one counts as retried.
pub async fn a_flaky_ci_job_is_listed_its_log_read_and_retried<H: Harness>() {
    let harness = H::start().await;
    harness.script_ci(vec![
        JobSpec::new("lint", JobOutcome::Success),
        JobSpec::new(
            "unit",
            JobOutcome::flaky(1, "failure", "the runner went away"),
        ),
    ]);
    let forge = harness.forge();
    let ci = forge.ci_jobs().expect("CI jobs");
    let (number, head) = open_change(forge, H::PROJECT, "wq/ci").await;
    harness.finish_ci();
    let change = forge.get_change(H::PROJECT, number).await.expect("get");
    assert_eq!(change.ci, CiStatus::Failed);
    let pipeline = harness.head_pipeline(number).await;

    let jobs = ci.pipeline_jobs(H::PROJECT, pipeline).await.expect("jobs");
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let unit = jobs
        .iter()
        .find(|j| j.name == "unit")
        .expect("unit")
        .clone();
    assert_eq!(unit.status, "failed");
    assert!(unit.failure_reason.is_some(), "{unit:?}");
    assert_eq!(unit.pipeline_id, pipeline);
    assert!(!unit.retried);
    assert!(unit.finished_at.is_some());
    assert!(
        unit.head_sha.as_deref().is_none_or(|sha| sha == head),
        "{unit:?}"
    );
    let lint = jobs.iter().find(|j| j.name == "lint").expect("lint");
    assert_eq!(
        (lint.status.as_str(), &lint.failure_reason),
        ("success", &None)
    );

    let trace = ci.job_trace(H::PROJECT, unit.id).await.expect("trace");
    assert!(trace.contains("the runner went away"), "{trace}");

    let retried = ci.retry_job(H::PROJECT, unit.id).await.expect("retry");
    if let Some(new) = &retried {
        assert_ne!(new.id, unit.id);
        assert_eq!((new.name.as_str(), new.pipeline_id), ("unit", pipeline));
    }
    harness.finish_ci();
    let jobs = ci.pipeline_jobs(H::PROJECT, pipeline).await.expect("jobs");
    assert_eq!(jobs.len(), 3, "every attempt: {jobs:?}");
    assert!(jobs.iter().find(|j| j.id == unit.id).unwrap().retried);
    let new = jobs
        .iter()
        .filter(|j| j.name == "unit")
        .max_by_key(|j| j.id)
        .unwrap();
    assert_eq!((new.status.as_str(), new.retried), ("success", false));
    if let Some(named) = retried {
        assert_eq!(named.id, new.id, "the retry named the new attempt");
    }
    assert_eq!(
        forge.get_change(H::PROJECT, number).await.expect("get").ci,
        CiStatus::Success
    );
}

pub async fn redirects_are_not_followed_and_the_token_stays<H: Harness>() {
    let (forge_url, target, received) = crate::redirect::start_redirecting_forge().await;
    let forge = H::client(&H::config(&forge_url)).expect("client");
    let error = forge
        .branch_head(H::PROJECT, "main")
        .await
        .expect_err("a redirect is an error");
    assert_eq!(error.kind, ForgeErrorKind::Rejected);
    assert_eq!(error.status, Some(307));
    assert!(
        error
            .message
            .contains(&format!("{target}{}", H::REDIRECTED_PATH)),
        "names the Location: {}",
        error.message
    );
    let error = forge.current_user().await.expect_err("redirect");
    assert!(error.message.contains("Location"), "{}", error.message);
    assert!(
        received.lock().expect("lock").is_empty(),
        "nothing reached the redirect target: {:?}",
        received.lock().expect("lock")
    );
}

pub async fn plain_http_off_loopback_is_refused_unless_configured<H: Harness>() {
    let mut config = H::config(H::REMOTE_HTTP_URL);
    let error = H::client(&config).err().expect("plain http");
    assert_eq!(error.kind, ForgeErrorKind::Invalid);
    assert!(error.message.starts_with("url: "), "{}", error.message);
    config.insecure_http = true;
    H::client(&config).expect("insecure_http");
    config.url = H::REMOTE_HTTPS_URL.into();
    config.insecure_http = false;
    H::client(&config).expect("https");
}

pub async fn branch_heads_are_read_and_a_missing_project_is_an_error<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    assert_eq!(
        forge.branch_head(H::PROJECT, "main").await.expect("main"),
        harness.branch_head("main")
    );
    assert_eq!(
        forge.branch_head(H::PROJECT, "wq/none").await.expect("404"),
        None
    );
    let missing = forge
        .branch_head("team/missing", "main")
        .await
        .expect_err("a missing project is not a missing branch");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);
}

pub async fn empty_diffs_compare_trees<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    forge
        .commit_files(&CommitRequest {
            project: H::PROJECT,
            branch: "wq/same",
            base_branch: "main",
            mode: CommitMode::ForceUpdate,
            message: "workqueue change",
            actions: &[FileAction {
                op: FileOp::Create,
                path: "other.txt".into(),
                previous_path: None,
                content: Some(b"same content\n".to_vec()),
                execute_filemode: None,
            }],
        })
        .await
        .expect("commit");
    assert!(
        !forge
            .diff_is_empty(H::PROJECT, "main", "wq/same")
            .await
            .expect("compare")
    );
    harness.push_to_main(&[("other.txt", Some("same content\n"))]);
    assert!(
        forge
            .diff_is_empty(H::PROJECT, "main", "wq/same")
            .await
            .expect("compare"),
        "main holds the same tree through another commit"
    );
    assert!(
        forge
            .diff_is_empty(H::PROJECT, "main", "main")
            .await
            .expect("compare")
    );
}

pub async fn a_merge_bound_to_a_stale_head_is_a_conflict<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let (number, head) = open_change(forge, H::PROJECT, "wq/merge").await;
    harness.settle();
    let main_before = harness.branch_head("main");

    let stale = forge
        .merge_change(
            H::PROJECT,
            number,
            &MergeParams {
                expected_head_sha: Some(STALE_SHA),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("stale head");
    assert_eq!(stale.kind, ForgeErrorKind::Conflict, "{stale}");
    assert_eq!(harness.branch_head("main"), main_before);
    assert_eq!(
        forge
            .get_change(H::PROJECT, number)
            .await
            .expect("get")
            .state,
        ChangeState::Open
    );

    let params = MergeParams {
        expected_head_sha: Some(&head),
        method: Some(MergeMethod::Squash),
        commit_message: Some("Squashed change"),
    };
    assert!(matches!(
        forge
            .merge_change(H::PROJECT, number, &params)
            .await
            .expect("merge"),
        MergeOutcome::Merged {
            commit_sha: Some(_)
        }
    ));
    assert_eq!(
        forge
            .get_change(H::PROJECT, number)
            .await
            .expect("get")
            .state,
        ChangeState::Merged
    );
    assert_ne!(harness.branch_head("main"), main_before);
    assert!(
        matches!(
            forge
                .merge_change(H::PROJECT, number, &params)
                .await
                .expect("again"),
            MergeOutcome::Merged {
                commit_sha: Some(_)
            }
        ),
        "a repeated merge of the same head is merged, not an error"
    );
}

pub async fn webhooks_are_authenticated_before_they_are_read<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let parse = |forge: &dyn Forge, (headers, body): &(Vec<(String, String)>, Vec<u8>)| {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        forge.parse_webhook(&headers, body)
    };
    let authentic = H::delivery(Some(SECRET));
    assert!(
        parse(forge, &authentic).is_ok(),
        "{:?}",
        parse(forge, &authentic)
    );
    for refused in [H::delivery(Some("wrong")), H::delivery(None)] {
        assert!(matches!(
            parse(forge, &refused),
            Err(WebhookRejection::Unauthenticated(_))
        ));
    }
    let (headers, _) = H::delivery(Some("wrong"));
    assert!(
        matches!(
            parse(forge, &(headers, b"{".to_vec())),
            Err(WebhookRejection::Unauthenticated(_))
        ),
        "an unauthenticated body is not even parsed"
    );
    let mut no_secret = H::config("https://forge.example.com");
    no_secret.webhook_secret = None;
    let no_secret = H::client(&no_secret).expect("client");
    assert!(matches!(
        parse(no_secret.as_ref(), &authentic),
        Err(WebhookRejection::Unauthenticated(_))
    ));
}

fn action(op: FileOp, path: &str, content: Option<&[u8]>) -> FileAction {
    FileAction {
        op,
        path: path.into(),
        previous_path: None,
        content: content.map(<[u8]>::to_vec),
        execute_filemode: None,
    }
}

pub async fn commits_create_force_update_delete_move_and_chmod<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    harness.push_to_main(&[
        ("a.txt", Some("one\n")),
        ("gone.txt", Some("bye\n")),
        ("tool.sh", Some("#!/bin/sh\n")),
    ]);
    let commit = |branch: &'static str, mode: CommitMode, actions: Vec<FileAction>| async move {
        forge
            .commit_files(&CommitRequest {
                project: H::PROJECT,
                branch,
                base_branch: "main",
                mode,
                message: "workqueue change",
                actions: &actions,
            })
            .await
    };

    // Create: text, non-UTF-8 bytes and an executable, on a new branch.
    let binary: &[u8] = &[0xff, 0x00, 0xfe, b'\n'];
    let mut run = action(FileOp::Create, "run.sh", Some(b"#!/bin/sh\n"));
    run.execute_filemode = Some(true);
    let created = commit(
        "wq/one",
        CommitMode::CreateBranch,
        vec![
            action(
                FileOp::Create,
                "notes/hello.txt",
                Some("héllo\n".as_bytes()),
            ),
            action(FileOp::Create, "data.bin", Some(binary)),
            run,
        ],
    )
    .await
    .expect("create branch");
    assert_eq!(created.empty, Some(false), "the answer tells a change");
    let created = created.sha;
    assert_eq!(harness.branch_head("wq/one"), Some(created.clone()));
    assert_eq!(
        forge.branch_head(H::PROJECT, "wq/one").await.expect("head"),
        Some(created.clone())
    );
    assert_eq!(
        harness.file("wq/one", "notes/hello.txt").as_deref(),
        Some("héllo\n".as_bytes())
    );
    assert_eq!(harness.file("wq/one", "data.bin").as_deref(), Some(binary));
    assert_eq!(
        harness.file("wq/one", "a.txt").as_deref(),
        Some(&b"one\n"[..]),
        "based on main"
    );
    assert!(harness.executable("wq/one", "run.sh").await);

    // Creating the branch again is refused as a conflict; nothing moves.
    let exists = commit(
        "wq/one",
        CommitMode::CreateBranch,
        vec![action(FileOp::Create, "x.txt", Some(b"x"))],
    )
    .await
    .expect_err("the branch exists");
    assert_eq!(exists.kind, ForgeErrorKind::Conflict, "{exists}");
    assert_eq!(harness.branch_head("wq/one"), Some(created));

    // Force update: main plus update, delete, move and chmod; the earlier
    // branch content is gone.
    let mut moved = action(FileOp::Move, "bin/tool.sh", None);
    moved.previous_path = Some("tool.sh".into());
    let mut chmod = action(FileOp::Chmod, "a.txt", None);
    chmod.execute_filemode = Some(true);
    let forced = commit(
        "wq/one",
        CommitMode::ForceUpdate,
        vec![
            action(FileOp::Update, "README.md", Some(b"# Updated\n")),
            action(FileOp::Delete, "gone.txt", None),
            moved,
            chmod,
        ],
    )
    .await
    .expect("force update")
    .sha;
    assert_eq!(harness.branch_head("wq/one"), Some(forced));
    let file = |path: &str| harness.file("wq/one", path);
    assert_eq!(file("README.md").as_deref(), Some(&b"# Updated\n"[..]));
    assert_eq!(file("gone.txt"), None);
    assert_eq!(file("tool.sh"), None);
    assert_eq!(file("bin/tool.sh").as_deref(), Some(&b"#!/bin/sh\n"[..]));
    assert_eq!(file("notes/hello.txt"), None, "reset to main first");
    assert_eq!(file("a.txt").as_deref(), Some(&b"one\n"[..]));
    assert!(harness.executable("wq/one", "a.txt").await);
    assert!(!harness.executable("wq/one", "README.md").await);

    // A move of a file that does not exist is refused; force-updating a
    // missing branch creates it.
    let mut bad_move = action(FileOp::Move, "b.txt", None);
    bad_move.previous_path = Some("nope.txt".into());
    commit("wq/one", CommitMode::ForceUpdate, vec![bad_move])
        .await
        .expect_err("missing source");
    let fresh = commit(
        "wq/fresh",
        CommitMode::ForceUpdate,
        vec![action(FileOp::Create, "f.txt", Some(b"f"))],
    )
    .await
    .expect("force update creates")
    .sha;
    assert_eq!(harness.branch_head("wq/fresh"), Some(fresh));
}

/// A push tells from its answer whether it changes anything against the
/// base it was built on, where the forge's answer says: never "empty" for
/// a commit that changes a file, never "changes something" for one that
/// does not. What it leaves open, the comparison answers.
pub async fn a_push_says_whether_it_changes_anything<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    harness.push_to_main(&[("same.txt", Some("same\n"))]);
    let push = |branch: &'static str, content: &'static [u8]| async move {
        forge
            .commit_files(&CommitRequest {
                project: H::PROJECT,
                branch,
                base_branch: "main",
                mode: CommitMode::CreateBranch,
                message: "workqueue change",
                actions: &[action(FileOp::Update, "same.txt", Some(content))],
            })
            .await
            .expect("commit")
    };
    let changed = push("wq/changed", b"other\n").await;
    assert_eq!(changed.empty, Some(false));
    let same = push("wq/same", b"same\n").await;
    assert_ne!(same.empty, Some(false), "a commit that changes nothing");
    assert!(
        forge
            .diff_is_empty(H::PROJECT, "main", &same.sha)
            .await
            .expect("compare"),
        "the comparison agrees: {same:?}"
    );
}

pub async fn changes_are_created_found_updated_closed_and_reopened<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let project = H::PROJECT;
    create_branch(forge, project, "wq/pr", "pr.txt", b"x").await;
    assert_eq!(
        forge
            .find_open_change(project, "wq/pr")
            .await
            .expect("find"),
        None
    );
    let labels = vec!["bot".to_owned(), "workqueue".to_owned()];
    let created = forge
        .create_change(&NewChange {
            project,
            source_branch: "wq/pr",
            target_branch: "main",
            title: "Add pr.txt",
            description: "Body",
            labels: &labels,
        })
        .await
        .expect("create");
    assert_eq!(created.state, ChangeState::Open);
    assert_eq!(
        (created.title.as_str(), created.description.as_str()),
        ("Add pr.txt", "Body")
    );
    assert_eq!(
        (
            created.source_branch.as_str(),
            created.target_branch.as_str()
        ),
        ("wq/pr", "main")
    );
    let sorted = |mut labels: Vec<String>| {
        labels.sort();
        labels
    };
    assert_eq!(sorted(created.labels.clone()), labels);
    // The creation's answer: who opened it and at which head, the review
    // left unread.
    let me = forge.current_user().await.expect("user").username;
    assert_eq!(created.author.as_deref(), Some(me.as_str()));
    assert_eq!(
        created.head_sha.as_deref(),
        harness.branch_head("wq/pr").as_deref()
    );
    assert!(!created.review_read, "{created:?}");
    let found = forge
        .find_open_change(project, "wq/pr")
        .await
        .expect("find")
        .expect("open");
    assert_eq!(found.number, created.number);
    assert!(found.review_read, "a read reads the review");

    // Another change request from the same branch is a conflict, and none
    // is opened.
    let again = forge
        .create_change(&NewChange {
            project,
            source_branch: "wq/pr",
            target_branch: "main",
            title: "Add pr.txt again",
            description: "",
            labels: &[],
        })
        .await
        .expect_err("one open change request per branch");
    assert_eq!(again.kind, ForgeErrorKind::Conflict, "{again}");
    assert!(again.message.contains("already exists"), "{again}");
    assert_eq!(
        forge
            .find_open_change(project, "wq/pr")
            .await
            .expect("find")
            .map(|change| change.number),
        Some(created.number)
    );

    let replaced = vec!["bot".to_owned(), "ready".to_owned()];
    let updated = forge
        .update_change(
            project,
            created.number,
            &ChangeUpdate {
                title: Some("New title"),
                description: Some("New body"),
                labels: Some(LabelChange {
                    add: &["ready".to_owned()],
                    remove: &["workqueue".to_owned()],
                }),
                open: None,
                target_branch: None,
            },
        )
        .await
        .expect("update");
    assert_eq!(
        (updated.title.as_str(), updated.description.as_str()),
        ("New title", "New body")
    );
    assert_eq!(sorted(updated.labels), replaced);

    let state = |open: bool| ChangeUpdate {
        open: Some(open),
        ..ChangeUpdate::default()
    };
    let closed = forge
        .update_change(project, created.number, &state(false))
        .await
        .expect("close");
    assert_eq!(closed.state, ChangeState::Closed);
    assert_eq!(
        forge
            .find_open_change(project, "wq/pr")
            .await
            .expect("find"),
        None
    );
    let reopened = forge
        .update_change(project, created.number, &state(true))
        .await
        .expect("reopen");
    assert_eq!(reopened.state, ChangeState::Open);
    assert_eq!(
        forge
            .find_open_change(project, "wq/pr")
            .await
            .expect("find")
            .map(|c| c.number),
        Some(created.number)
    );

    // Another target branch (GitLab `target_branch`, GitHub `base`).
    forge
        .commit_files(&CommitRequest {
            project,
            branch: "release",
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message: "release branch",
            actions: &[action(FileOp::Create, "release.txt", Some(b"r"))],
        })
        .await
        .expect("release branch");
    let retargeted = forge
        .update_change(
            project,
            created.number,
            &ChangeUpdate {
                target_branch: Some("release"),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("retarget");
    assert_eq!(retargeted.target_branch, "release");
    assert_eq!(
        forge
            .get_change(project, created.number)
            .await
            .expect("read")
            .target_branch,
        "release"
    );
}

/// Labels are added and removed by name: a label a person adds after the
/// client read the change request (and so is in neither list) stays when
/// the client's update lands. An update that named the whole set (GitLab's
/// `labels`, or a GitHub client that removed whatever it did not name)
/// would drop it.
pub async fn a_label_a_person_adds_meanwhile_survives_an_update<H: Harness>() {
    let harness = H::start().await;
    let forge = harness.forge();
    let project = H::PROJECT;
    create_branch(forge, project, "wq/labels", "labels.txt", b"x").await;
    let created = forge
        .create_change(&NewChange {
            project,
            source_branch: "wq/labels",
            target_branch: "main",
            title: "Labels",
            description: "",
            labels: &["old".to_owned(), "kept".to_owned()],
        })
        .await
        .expect("create");
    let read = forge
        .get_change(project, created.number)
        .await
        .expect("read");
    // After the read: a person's label.
    harness.label_as(created.number, "person", "dana").await;
    let wanted = ["kept".to_owned(), "new".to_owned()];
    let (add, remove) = label_diff(&read.labels, &wanted, forge.label_case());
    let updated = forge
        .update_change(
            project,
            created.number,
            &ChangeUpdate {
                labels: Some(LabelChange {
                    add: &add,
                    remove: &remove,
                }),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("update");
    let mut labels = updated.labels.clone();
    labels.sort();
    assert_eq!(labels, ["kept", "new", "person"]);
    let mut again = forge
        .get_change(project, created.number)
        .await
        .expect("read")
        .labels;
    again.sort();
    assert_eq!(again, labels, "as the forge holds them");
}
