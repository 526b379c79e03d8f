//! `GitlabClient` against forge-sim over real HTTP: every `Forge` method,
//! merge and merge-train outcomes, error mapping under injected faults, and
//! webhook deliveries captured from the simulator.

use std::collections::BTreeMap;
use std::time::Duration;

use forge_sim::testing::{Received, Receiver, header_refs, start_sim};
use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec, SimHandle};
use wq_forge::{
    ChangeAction, ChangeState, ChangeUpdate, CiJobs, CiStatus, CommitMode, CommitRequest,
    FileAction, FileOp, Forge, ForgeConfig, ForgeErrorKind, ForgeEvent, ForgeKind, Forges,
    ForgesConfig, GitlabClient, LabelChange, MergeMethod, MergeOutcome, MergeParams, Mergeable,
    NewChange, QueueEntry, QueueObservation, ReviewDecision, WebhookRejection,
};

const SECRET: &str = "hook-secret";
const STALE_SHA: &str = "ffffffffffffffffffffffffffffffffffffffff";

fn config(url: &str) -> ForgeConfig {
    ForgeConfig::literal(ForgeKind::Gitlab, url, forge_sim::DEFAULT_TOKEN, SECRET)
}

fn client(sim: &SimHandle) -> GitlabClient {
    GitlabClient::new(&config(&sim.base_url())).expect("client")
}

/// Lets every due job, pipeline and train step happen (jobs of duration 0
/// end in the tick after they start).
fn settle(sim: &SimHandle) {
    for _ in 0..3 {
        sim.advance(Duration::from_secs(1));
    }
}

fn create(path: &str, content: &[u8]) -> FileAction {
    FileAction {
        op: FileOp::Create,
        path: path.into(),
        previous_path: None,
        content: Some(content.to_vec()),
        execute_filemode: None,
    }
}

async fn commit(
    gitlab: &GitlabClient,
    project: &str,
    branch: &str,
    mode: CommitMode,
    actions: &[FileAction],
) -> String {
    gitlab
        .commit_files(&CommitRequest {
            project,
            branch,
            base_branch: "main",
            mode,
            message: "workqueue change",
            actions,
        })
        .await
        .expect("commit")
        .sha
}

/// A branch with one new file and an MR from it; returns (iid, head sha).
async fn open_change(gitlab: &GitlabClient, project: &str, branch: &str) -> (u64, String) {
    let head = commit(
        gitlab,
        project,
        branch,
        CommitMode::CreateBranch,
        &[create(&format!("{branch}.txt"), b"content\n")],
    )
    .await;
    let change = gitlab
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
    (change.number, head)
}

/// What every forge does with commit modes, branch heads and empty diffs
/// is the conformance suite's; here: GitLab's answer to creating a branch
/// that exists, a 400 the client takes for a conflict (nothing written),
/// and the one request a push is.
#[tokio::test]
async fn creating_an_existing_branch_is_a_conflict() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("team/repo")
        .no_ci()
        .create()
        .expect("project");
    let gitlab = client(&sim);
    assert!(gitlab.creates_branch_atomically());
    let project = "team/repo";
    sim.clear_requests();
    let head = commit(
        &gitlab,
        project,
        "wq/one",
        CommitMode::CreateBranch,
        &[create("notes.txt", b"notes\n")],
    )
    .await;
    let served: Vec<(String, String)> = sim
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect();
    assert_eq!(
        served,
        [(
            "POST".to_owned(),
            "/api/v4/projects/team%2Frepo/repository/commits".to_owned()
        )],
        "a push is one request"
    );
    let again = gitlab
        .commit_files(&CommitRequest {
            project,
            branch: "wq/one",
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message: "again",
            actions: &[create("x.txt", b"x")],
        })
        .await
        .expect_err("the branch exists");
    assert_eq!(again.kind, ForgeErrorKind::Conflict, "{again}");
    assert_eq!(again.status, Some(400), "{again}");
    assert!(again.message.contains("already exists"), "{again}");
    assert_eq!(sim.gitlab_branch_head(pid, "wq/one"), Some(head));
}

#[tokio::test]
async fn change_request_lifecycle_with_ci_reviews_and_threads() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("team/app")
        .job(JobSpec::new("unit", JobOutcome::Success).duration_secs(600))
        .approvals_required(1)
        .create()
        .expect("project");
    sim.add_user("reviewer", "reviewer-token");
    let gitlab = client(&sim);
    let project = "team/app";

    let head = commit(
        &gitlab,
        project,
        "wq/app",
        CommitMode::CreateBranch,
        &[create("app.txt", b"v1\n")],
    )
    .await;
    let labels = ["bot".to_owned(), "deps".to_owned()];
    let created = gitlab
        .create_change(&NewChange {
            project,
            source_branch: "wq/app",
            target_branch: "main",
            title: "Update deps",
            description: "Generated.",
            labels: &labels,
        })
        .await
        .expect("create");
    assert_eq!(created.number, 1);
    assert_eq!(created.state, ChangeState::Open);
    assert_eq!(created.title, "Update deps");
    assert_eq!(created.description, "Generated.");
    assert_eq!(created.labels, labels);
    assert_eq!(created.source_branch, "wq/app");
    assert_eq!(created.target_branch, "main");
    assert_eq!(created.head_sha.as_deref(), Some(head.as_str()));
    assert!(
        created.url.ends_with("/team/app/-/merge_requests/1"),
        "{}",
        created.url
    );
    assert!(!created.draft);
    assert_eq!(created.queue, QueueObservation::Unobserved);

    let found = gitlab
        .find_open_change(project, "wq/app")
        .await
        .expect("find")
        .expect("the MR is found");
    assert_eq!(found.number, 1);
    assert_eq!(found.ci, CiStatus::Running, "found MRs are read in full");
    assert_eq!(
        gitlab
            .find_open_change(project, "wq/none")
            .await
            .expect("find"),
        None
    );

    let running = gitlab.get_change(project, 1).await.expect("get");
    assert_eq!(running.ci, CiStatus::Running);
    // The status word names the pipeline only; the approvals say the rest.
    assert_eq!(running.review, ReviewDecision::ReviewRequired);
    assert_eq!(running.required_approvals, Some(1));
    assert_eq!(running.pending_checks, 1);
    assert!(running.pipeline_id.is_some());
    assert_eq!(running.mergeable, Mergeable::No);
    assert_eq!(running.merge_status, "ci_still_running");
    assert_eq!(
        running.queue,
        QueueObservation::Unobserved,
        "no merge trains"
    );

    sim.advance(Duration::from_secs(600));
    let passed = gitlab.get_change(project, 1).await.expect("get");
    assert_eq!(passed.ci, CiStatus::Success);
    assert_eq!(passed.pending_checks, 0);
    assert_eq!(passed.pipeline_id, running.pipeline_id);
    assert_eq!(passed.merge_status, "not_approved");
    assert_eq!(passed.review, ReviewDecision::ReviewRequired);
    assert_eq!(passed.mergeable, Mergeable::No);

    sim.gitlab_approve(pid, 1, "reviewer").expect("approve");
    let approved = gitlab.get_change(project, 1).await.expect("get");
    assert_eq!(approved.review, ReviewDecision::Approved);
    assert_eq!(approved.mergeable, Mergeable::Yes);
    assert_eq!(approved.merge_status, "mergeable");
    assert_eq!(approved.unresolved_threads, 0);
    assert_eq!(approved.approvals, 1);
    assert_eq!(approved.approved_by, vec!["reviewer".to_owned()]);
    assert_eq!(approved.required_approvals, Some(1));

    sim.gitlab_set_unresolved_discussions(pid, 1, 2)
        .expect("discussions");
    let blocked = gitlab.get_change(project, 1).await.expect("get");
    assert_eq!(blocked.unresolved_threads, 1);
    assert_eq!(blocked.mergeable, Mergeable::No);
    sim.gitlab_set_unresolved_discussions(pid, 1, 0)
        .expect("discussions");

    let draft_labels = ["bot".to_owned()];
    let updated = gitlab
        .update_change(
            project,
            1,
            &ChangeUpdate {
                title: Some("Draft: Update deps"),
                description: Some("Regenerated."),
                labels: Some(LabelChange {
                    add: &[],
                    remove: &["deps".to_owned()],
                }),
                open: None,
                target_branch: None,
            },
        )
        .await
        .expect("update");
    assert!(updated.draft);
    assert_eq!(updated.title, "Draft: Update deps");
    assert_eq!(updated.description, "Regenerated.");
    assert_eq!(updated.labels, draft_labels);

    let cleared = gitlab
        .update_change(
            project,
            1,
            &ChangeUpdate {
                labels: Some(LabelChange {
                    add: &[],
                    remove: &draft_labels,
                }),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("clear labels");
    assert!(cleared.labels.is_empty());

    let closed = gitlab
        .update_change(
            project,
            1,
            &ChangeUpdate {
                open: Some(false),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("close");
    assert_eq!(closed.state, ChangeState::Closed);
    assert_eq!(
        gitlab
            .find_open_change(project, "wq/app")
            .await
            .expect("find"),
        None
    );
    let reopened = gitlab
        .update_change(
            project,
            1,
            &ChangeUpdate {
                open: Some(true),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("reopen");
    assert_eq!(reopened.state, ChangeState::Open);

    let unchanged = gitlab
        .update_change(project, 1, &ChangeUpdate::default())
        .await
        .expect("an empty update reads the MR");
    assert_eq!(unchanged.title, "Draft: Update deps");
}

#[tokio::test]
async fn merge_refuses_a_stale_head_then_merges() {
    let sim = start_sim().await;
    let pid = sim.gitlab_project("team/merge").create().expect("project");
    let gitlab = client(&sim);
    let project = "team/merge";
    let (iid, head) = open_change(&gitlab, project, "wq/merge").await;
    settle(&sim);
    let ready = gitlab.get_change(project, iid).await.expect("get");
    assert_eq!(ready.ci, CiStatus::Success);
    assert_eq!(ready.mergeable, Mergeable::Yes);
    let main_before = sim.gitlab_branch_head(pid, "main");

    let stale = gitlab
        .merge_change(
            project,
            iid,
            &MergeParams {
                expected_head_sha: Some(STALE_SHA),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("stale head");
    assert_eq!(stale.kind, ForgeErrorKind::Conflict);
    assert_eq!(stale.status, Some(409));
    assert_eq!(
        stale.message,
        format!("SHA does not match HEAD of source branch: {head}")
    );
    assert_eq!(sim.gitlab_branch_head(pid, "main"), main_before);
    assert_eq!(
        gitlab.get_change(project, iid).await.expect("get").state,
        ChangeState::Open
    );

    let params = MergeParams {
        expected_head_sha: Some(&head),
        method: Some(MergeMethod::Squash),
        commit_message: Some("Squashed change"),
    };
    let outcome = gitlab
        .merge_change(project, iid, &params)
        .await
        .expect("merge");
    assert!(
        matches!(
            outcome,
            MergeOutcome::Merged {
                commit_sha: Some(_)
            }
        ),
        "{outcome:?}"
    );
    let merged = gitlab.get_change(project, iid).await.expect("get");
    assert_eq!(merged.state, ChangeState::Merged);
    assert_ne!(sim.gitlab_branch_head(pid, "main"), main_before);
    assert_eq!(
        sim.gitlab_file(pid, "main", "wq/merge.txt").as_deref(),
        Some(&b"content\n"[..])
    );
    assert!(
        matches!(
            gitlab
                .merge_change(project, iid, &params)
                .await
                .expect("again"),
            MergeOutcome::Merged {
                commit_sha: Some(_)
            }
        ),
        "a repeated merge of the same head is merged, not an error"
    );

    let rebase = gitlab
        .merge_change(
            project,
            iid,
            &MergeParams {
                method: Some(MergeMethod::Rebase),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("merge-commit project");
    assert_eq!(rebase.kind, ForgeErrorKind::Invalid);
}

fn with_head(head: &str) -> MergeParams<'_> {
    MergeParams {
        expected_head_sha: Some(head),
        ..MergeParams::default()
    }
}

#[tokio::test]
async fn merge_train_queues_and_reports_position() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("team/train")
        .merge_trains(true)
        .job(JobSpec::new("unit", JobOutcome::Success).duration_secs(600))
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/train";
    let (first, first_head) = open_change(&gitlab, project, "wq/first").await;
    let (second, second_head) = open_change(&gitlab, project, "wq/second").await;
    assert_eq!(
        gitlab.get_change(project, first).await.expect("get").queue,
        QueueObservation::Absent,
        "an open MR on a train project that is not on the train"
    );
    sim.advance(Duration::from_secs(600));

    let stale = gitlab
        .merge_change(
            project,
            first,
            &MergeParams {
                expected_head_sha: Some(STALE_SHA),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("stale head");
    assert_eq!(stale.kind, ForgeErrorKind::Conflict);

    let first_params = with_head(&first_head);
    assert_eq!(
        gitlab
            .merge_change(project, first, &first_params)
            .await
            .expect("queue"),
        MergeOutcome::Queued
    );
    assert_eq!(
        gitlab
            .merge_change(project, second, &with_head(&second_head))
            .await
            .expect("queue"),
        MergeOutcome::Queued
    );
    assert_eq!(
        gitlab
            .merge_change(project, first, &first_params)
            .await
            .expect("again"),
        MergeOutcome::Queued,
        "a repeated call finds the MR on the train"
    );

    let queued = gitlab.get_change(project, first).await.expect("get");
    assert_eq!(queued.state, ChangeState::Open);
    assert_eq!(
        queued.queue,
        QueueObservation::Entry(QueueEntry {
            state: "awaiting_checks".into(),
            position: Some(1),
            eta_seconds: None,
        })
    );
    let behind = gitlab.get_change(project, second).await.expect("get");
    let QueueObservation::Entry(entry) = behind.queue else {
        panic!("second MR not on the train: {:?}", behind.queue);
    };
    assert_eq!(entry.position, Some(2));

    // The train's own system note is not a comment.
    let note = gitlab
        .create_note(project, first, "queued by workqueue")
        .await
        .expect("note");
    let notes = gitlab.list_notes(project, first).await.expect("notes");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].id, note.id);
    let raw: Vec<serde_json::Value> = reqwest::Client::new()
        .get(format!(
            "{}/projects/{pid}/merge_requests/{first}/notes",
            sim.gitlab_url()
        ))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .expect("notes request")
        .json()
        .await
        .expect("notes json");
    assert!(raw.iter().any(|n| n["system"] == true), "{raw:?}");

    sim.advance(Duration::from_secs(600));
    let merged = gitlab.get_change(project, first).await.expect("get");
    assert_eq!(merged.state, ChangeState::Merged);
    assert_eq!(merged.queue, QueueObservation::Absent);
}

#[tokio::test]
async fn jobs_traces_and_retries() {
    let sim = start_sim().await;
    sim.gitlab_project("team/ci")
        .job(JobSpec::new("lint", JobOutcome::Success))
        .job(JobSpec::new(
            "unit",
            JobOutcome::flaky(1, "runner_system_failure", "lost the runner"),
        ))
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/ci";
    let (iid, _) = open_change(&gitlab, project, "wq/ci").await;
    settle(&sim);
    let change = gitlab.get_change(project, iid).await.expect("get");
    assert_eq!(change.ci, CiStatus::Failed);
    let pipeline = change.pipeline_id.expect("head pipeline");

    let jobs = gitlab.pipeline_jobs(project, pipeline).await.expect("jobs");
    assert_eq!(jobs.len(), 2);
    let unit = jobs.iter().find(|j| j.name == "unit").expect("unit job");
    assert_eq!(unit.status, "failed");
    assert_eq!(
        unit.failure_reason.as_deref(),
        Some("runner_system_failure")
    );
    assert_eq!(unit.stage.as_deref(), Some("test"));
    assert_eq!(unit.pipeline_id, pipeline);
    assert!(!unit.retried);
    assert!(unit.finished_at.is_some());
    let lint = jobs.iter().find(|j| j.name == "lint").expect("lint job");
    assert_eq!(lint.failure_reason, None);

    let trace = gitlab.job_trace(project, unit.id).await.expect("trace");
    assert!(trace.contains("lost the runner"), "{trace}");

    let retry = gitlab
        .retry_job(project, unit.id)
        .await
        .expect("retry")
        .expect("GitLab answers with the new job");
    assert_ne!(retry.id, unit.id);
    assert_eq!(retry.name, "unit");
    assert_eq!(retry.status, "pending");
    assert_eq!(retry.pipeline_id, pipeline);
    assert!(!retry.retried);
    assert_eq!(retry.finished_at, None);

    settle(&sim);
    let jobs = gitlab.pipeline_jobs(project, pipeline).await.expect("jobs");
    assert_eq!(jobs.len(), 3, "include_retried lists every attempt");
    let old = jobs.iter().find(|j| j.id == unit.id).expect("old attempt");
    assert!(old.retried);
    let new = jobs.iter().find(|j| j.id == retry.id).expect("new attempt");
    assert_eq!(new.status, "success");
    assert!(!new.retried);
    assert_eq!(
        gitlab.get_change(project, iid).await.expect("get").ci,
        CiStatus::Success
    );
}

fn with_header(
    headers: &[(String, String)],
    name: &str,
    value: Option<&str>,
) -> Vec<(String, String)> {
    let mut changed: Vec<(String, String)> =
        headers.iter().filter(|(n, _)| n != name).cloned().collect();
    if let Some(value) = value {
        changed.push((name.to_owned(), value.to_owned()));
    }
    changed
}

#[tokio::test]
async fn webhook_deliveries_parse_into_events() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let pid = sim
        .gitlab_project("team/hooks")
        .webhook(&receiver.url, SECRET)
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/hooks";

    let (iid, _) = open_change(&gitlab, project, "wq/hooks").await;
    let pushed = commit(
        &gitlab,
        project,
        "wq/hooks",
        CommitMode::ForceUpdate,
        &[create("wq/hooks.txt", b"second version\n")],
    )
    .await;
    gitlab
        .update_change(
            project,
            iid,
            &ChangeUpdate {
                title: Some("Renamed"),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("rename");
    sim.add_user("reviewer", "reviewer-token");
    sim.gitlab_approve(pid, iid, "reviewer").expect("approve");
    let note = gitlab
        .create_note(project, iid, "status: waiting")
        .await
        .expect("note");
    for open in [false, true] {
        gitlab
            .update_change(
                project,
                iid,
                &ChangeUpdate {
                    open: Some(open),
                    ..ChangeUpdate::default()
                },
            )
            .await
            .expect("close / reopen");
    }
    settle(&sim);
    let change = gitlab.get_change(project, iid).await.expect("get");
    assert_eq!(change.mergeable, Mergeable::Yes);
    let pipeline = change.pipeline_id.expect("pipeline");
    gitlab
        .merge_change(
            project,
            iid,
            &MergeParams {
                expected_head_sha: Some(&pushed),
                ..MergeParams::default()
            },
        )
        .await
        .expect("merge");
    assert!(sim.flush_webhooks(Duration::from_secs(10)).await);

    let received: Vec<_> = receiver.all().iter().map(Received::parts).collect();
    let mut actions = Vec::new();
    let (mut pipelines, mut jobs, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    for (headers, body) in &received {
        match gitlab
            .parse_webhook(&header_refs(headers), body)
            .expect("authentic")
        {
            ForgeEvent::Change {
                project,
                number,
                action,
                state,
                source_branch,
                head_sha,
                label,
            } => {
                assert_eq!(label, None);
                assert_eq!((project.as_str(), number), ("team/hooks", iid));
                assert_eq!(source_branch.as_deref(), Some("wq/hooks"));
                assert!(head_sha.is_some());
                actions.push((action, state, head_sha));
            }
            ForgeEvent::Pipeline { .. } => pipelines.push(body.clone()),
            ForgeEvent::Job { .. } => jobs.push(body.clone()),
            ForgeEvent::Note { .. } => notes.push(body.clone()),
            ForgeEvent::Ignored { reason } => panic!("ignored a delivery: {reason}"),
            other @ (ForgeEvent::Checks { .. } | ForgeEvent::Queue { .. }) => {
                panic!("GitLab delivery parsed as a GitHub event: {other:?}")
            }
        }
    }
    let kinds: Vec<ChangeAction> = actions.iter().map(|(action, _, _)| *action).collect();
    for expected in [
        ChangeAction::Opened,
        ChangeAction::Pushed,
        ChangeAction::Updated,
        ChangeAction::Approved,
        ChangeAction::Closed,
        ChangeAction::Reopened,
        ChangeAction::Merged,
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected:?} missing in {kinds:?}"
        );
    }
    let push = actions
        .iter()
        .find(|(action, _, _)| *action == ChangeAction::Pushed)
        .expect("push");
    assert_eq!(push.2.as_deref(), Some(pushed.as_str()));
    let closed = actions
        .iter()
        .find(|(action, _, _)| *action == ChangeAction::Closed)
        .expect("close");
    assert_eq!(closed.1, ChangeState::Closed);
    let merged = actions
        .iter()
        .find(|(action, _, _)| *action == ChangeAction::Merged)
        .expect("merge");
    assert_eq!(merged.1, ChangeState::Merged);

    let auth = header_refs;
    let (pipeline_headers, pipeline_body) = received
        .iter()
        .find(|(headers, body)| {
            matches!(
                gitlab.parse_webhook(&auth(headers), body),
                Ok(ForgeEvent::Pipeline { status: CiStatus::Success, pipeline_id, .. }) if pipeline_id == pipeline
            )
        })
        .expect("a successful pipeline hook");
    assert_eq!(
        gitlab.parse_webhook(&auth(pipeline_headers), pipeline_body),
        Ok(ForgeEvent::Pipeline {
            project: project.into(),
            pipeline_id: pipeline,
            status: CiStatus::Success,
            sha: Some(pushed.clone()),
            ref_name: Some("wq/hooks".into()),
            // A branch pipeline: only a merge request pipeline's hook names
            // its merge request.
            number: None,
        })
    );
    assert!(!jobs.is_empty());
    let (job_headers, job_body) = received
        .iter()
        .find(|(headers, body)| {
            matches!(
                gitlab.parse_webhook(&auth(headers), body),
                Ok(ForgeEvent::Job { ref status, pipeline_id, .. }) if status == "success" && pipeline_id == pipeline
            )
        })
        .expect("a finished job hook");
    let ForgeEvent::Job {
        project: job_project,
        name,
        stage,
        failure_reason,
        finished_at,
        ref_name: job_ref,
        number: job_number,
        ..
    } = gitlab
        .parse_webhook(&auth(job_headers), job_body)
        .expect("job")
    else {
        panic!("not a job event");
    };
    assert_eq!(job_project, project);
    assert_eq!(job_ref.as_deref(), Some("wq/hooks"), "the job's branch");
    assert_eq!(job_number, None, "a branch ref names no merge request");
    assert_eq!(name, "test");
    assert_eq!(stage.as_deref(), Some("test"));
    assert_eq!(failure_reason, None);
    assert!(
        finished_at.is_some(),
        "build_finished_at in GitLab's hook format"
    );

    assert_eq!(notes.len(), 1);
    let (note_headers, note_body) = received
        .iter()
        .find(|(_, body)| *body == notes[0])
        .expect("note delivery");
    assert_eq!(
        gitlab.parse_webhook(&auth(note_headers), note_body),
        Ok(ForgeEvent::Note {
            project: project.into(),
            number: iid,
            note_id: note.id,
            author: forge_sim::DEFAULT_USERNAME.into(),
            body: "status: waiting".into(),
        })
    );

    // Authenticity (wrong, missing, or no configured secret) is the
    // conformance suite's `webhooks_are_authenticated_before_they_are_read`.
    let push_hook = with_header(note_headers, "x-gitlab-event", Some("Push Hook"));
    assert!(matches!(
        gitlab.parse_webhook(&auth(&push_hook), b"{\"object_kind\":\"push\"}"),
        Ok(ForgeEvent::Ignored { .. })
    ));
    assert!(matches!(
        gitlab.parse_webhook(&auth(note_headers), b"{\"object_kind\": note"),
        Err(WebhookRejection::Malformed(_))
    ));
    let mut issue_note: serde_json::Value = serde_json::from_slice(note_body).expect("json");
    issue_note["object_attributes"]["noteable_type"] = "Issue".into();
    let issue_note = serde_json::to_vec(&issue_note).expect("json");
    assert!(matches!(
        gitlab.parse_webhook(&auth(note_headers), &issue_note),
        Ok(ForgeEvent::Ignored { .. })
    ));
}

#[tokio::test]
async fn faults_map_to_error_kinds() {
    let sim = start_sim().await;
    sim.gitlab_project("team/faults")
        .no_ci()
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/faults";
    let (iid, _) = open_change(&gitlab, project, "wq/faults").await;
    let mr_path = format!("/api/v4/projects/team%2Ffaults/merge_requests/{iid}");

    sim.add_fault(FaultRule::new(
        "GET",
        &mr_path,
        HttpFault::Status { status: 500 },
    ));
    let error = gitlab.get_change(project, iid).await.expect_err("500");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);
    assert_eq!(error.status, Some(500));
    assert_eq!(error.message, "500 Internal Server Error");
    assert!(error.is_transient());

    sim.add_fault(FaultRule::new(
        "GET",
        &mr_path,
        HttpFault::RateLimit {
            retry_after_secs: 7,
        },
    ));
    let error = gitlab.get_change(project, iid).await.expect_err("429");
    assert_eq!(error.kind, ForgeErrorKind::RateLimited);
    assert_eq!(error.status, Some(429));
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));

    sim.add_fault(FaultRule::new(
        "GET",
        &mr_path,
        HttpFault::Status { status: 503 },
    ));
    let error = gitlab.get_change(project, iid).await.expect_err("503");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);
    assert_eq!(error.status, Some(503));

    assert_eq!(
        gitlab
            .get_change(project, iid)
            .await
            .expect("faults spent")
            .number,
        iid
    );

    let mut short = config(&sim.base_url());
    short.timeout_seconds = 1;
    let impatient = GitlabClient::new(&short).expect("client");
    sim.add_fault(FaultRule::new(
        "GET",
        &mr_path,
        HttpFault::Timeout { hang_secs: 3600 },
    ));
    let error = impatient.get_change(project, iid).await.expect_err("hang");
    sim.cancel_hangs();
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);
    assert_eq!(error.status, None);
    assert!(
        error.message.contains("did not answer within 1 s"),
        "{error}"
    );

    let missing = gitlab.get_change(project, 999).await.expect_err("404");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);

    let mut bad_token = config(&sim.base_url());
    bad_token.token = Some("not-a-token".into());
    let refused = GitlabClient::new(&bad_token)
        .expect("client")
        .get_change(project, iid)
        .await
        .expect_err("401");
    assert_eq!(refused.kind, ForgeErrorKind::Unauthorized);
    assert_eq!(refused.message, "401 Unauthorized");

    let nowhere = GitlabClient::new(&config("http://127.0.0.1:1")).expect("client");
    let error = nowhere
        .branch_head(project, "main")
        .await
        .expect_err("refused");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);
    assert_eq!(error.status, None);
}

#[tokio::test]
async fn config_accepts_the_api_base_and_forges_are_built_from_config() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("team/cfg")
        .no_ci()
        .create()
        .expect("project");
    let main = sim.gitlab_branch_head(pid, "main");

    let api = GitlabClient::new(&config(&sim.gitlab_url())).expect("client");
    assert_eq!(api.api_url(), sim.gitlab_url());
    assert_eq!(
        api.branch_head("team/cfg", "main").await.expect("main"),
        main
    );

    let forges_config = |instances: Vec<(&str, ForgeConfig)>| ForgesConfig {
        instances: instances
            .into_iter()
            .map(|(name, config)| (name.to_owned(), config))
            .collect::<BTreeMap<_, _>>(),
    };
    let forges =
        Forges::from_config(&forges_config(vec![("gl", config(&sim.base_url()))])).expect("forges");
    assert_eq!(forges.names().collect::<Vec<_>>(), ["gl"]);
    let forge = forges.get("gl").expect("gl");
    assert_eq!(forge.kind(), ForgeKind::Gitlab);
    assert_eq!(
        forge.branch_head("team/cfg", "main").await.expect("main"),
        main
    );

    // GitHub instances are built next to GitLab ones; their errors name
    // the field the same way.
    let github = ForgeConfig::literal(ForgeKind::Github, "https://api.github.com", "t", "s");
    let both = Forges::from_config(&forges_config(vec![
        ("gh", github.clone()),
        ("gl", config(&sim.base_url())),
    ]))
    .expect("github and gitlab");
    assert_eq!(
        both.get("gh").map(|forge| forge.kind()),
        Some(ForgeKind::Github)
    );
    let mut bad_github = github;
    bad_github.url = "github.example.com".into();
    let error = Forges::from_config(&forges_config(vec![("gh", bad_github)])).expect_err("url");
    assert_eq!(error.kind, ForgeErrorKind::Invalid);
    assert!(
        error.message.starts_with("forges.gh.url: "),
        "{}",
        error.message
    );

    let mut no_token = config(&sim.base_url());
    no_token.token = None;
    let error =
        Forges::from_config(&forges_config(vec![("gl", no_token.clone())])).expect_err("no token");
    assert_eq!(error.message, "forges.gl.token_env: required");
    no_token.token_env = Some("WQ_FORGE_TEST_TOKEN_THAT_IS_NOT_SET".into());
    let error = Forges::from_config(&forges_config(vec![("gl", no_token)])).expect_err("unset");
    assert!(
        error
            .message
            .starts_with("forges.gl.token_env: environment variable"),
        "{}",
        error.message
    );

    let mut bad_url = config("ftp://gitlab.example.com");
    bad_url.timeout_seconds = 5;
    let error = Forges::from_config(&forges_config(vec![("gl", bad_url)])).expect_err("url");
    assert!(
        error.message.starts_with("forges.gl.url: "),
        "{}",
        error.message
    );
}

/// The spelling itself is the conformance suite's
/// `project_path_is_the_forges_spelling`.
#[tokio::test]
async fn every_route_resolves_the_callers_spelling_of_a_project() {
    let sim = start_sim().await;
    sim.gitlab_project("Team/Service")
        .no_ci()
        .create()
        .expect("project");
    let gitlab = client(&sim);
    assert!(
        gitlab
            .branch_head("team/service", "main")
            .await
            .expect("branch")
            .is_some()
    );
    assert!(
        sim.gitlab_project("team/SERVICE").create().is_err(),
        "one project per path, whatever the case"
    );
}

#[tokio::test]
async fn branch_protection_covers_names_and_wildcards_existing_or_not() {
    let sim = start_sim().await;
    let pid = sim
        .gitlab_project("team/protect")
        .no_ci()
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/protect";
    let protected = |branch: &'static str| {
        let gitlab = &gitlab;
        async move {
            gitlab
                .branch_protected(project, branch)
                .await
                .expect(branch)
        }
    };
    assert!(protected("main").await, "the default branch is protected");
    assert!(!protected("wq/free").await);

    sim.gitlab_protect_branch(pid, "release/*")
        .expect("protect");
    sim.gitlab_protect_branch(pid, "stable").expect("protect");
    assert!(protected("release/1.0").await, "does not exist yet");
    assert!(protected("release/a/b").await, "* matches across /");
    assert!(protected("stable").await);
    assert!(!protected("stable-2").await);
    assert!(!protected("wq/release/1").await);

    // Past the first page of 100 entries.
    for i in 0..120 {
        sim.gitlab_protect_branch(pid, &format!("filler-{i}"))
            .expect("protect");
    }
    sim.gitlab_protect_branch(pid, "late/*").expect("protect");
    assert!(protected("late/x").await, "every page is read");

    sim.gitlab_unprotect_branch(pid, "main").expect("unprotect");
    assert!(!protected("main").await);

    let missing = gitlab
        .branch_protected("team/nothing", "main")
        .await
        .expect_err("no such project");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);
}

#[tokio::test]
async fn job_traces_keep_a_bounded_tail_of_a_large_log() {
    let sim = start_sim().await;
    // A log far larger than the bound: a first line, many filler lines, and
    // the failure at the end.
    let filler = "x".repeat(99);
    let mut log = String::from("FIRST LINE\n");
    while log.len() < 6 * wq_forge::TRACE_TAIL_BYTES {
        log.push_str(&filler);
        log.push('\n');
    }
    log.push_str("fatal: the runner ran out of memory\n");
    sim.gitlab_project("team/big")
        .job(JobSpec::new(
            "unit",
            JobOutcome::fail("script_failure", &log),
        ))
        .create()
        .expect("project");
    let gitlab = client(&sim);
    let project = "team/big";
    let (iid, _) = open_change(&gitlab, project, "wq/big").await;
    settle(&sim);
    let pipeline = gitlab
        .get_change(project, iid)
        .await
        .expect("get")
        .pipeline_id
        .expect("pipeline");
    let jobs = gitlab.pipeline_jobs(project, pipeline).await.expect("jobs");
    let unit = jobs.iter().find(|j| j.name == "unit").expect("unit");

    let trace = gitlab.job_trace(project, unit.id).await.expect("trace");
    assert!(trace.len() <= wq_forge::TRACE_TAIL_BYTES, "{}", trace.len());
    assert!(
        trace.len() > wq_forge::TRACE_TAIL_BYTES - 200,
        "the tail is kept, not less: {}",
        trace.len()
    );
    assert!(!trace.contains("FIRST LINE"));
    assert!(trace.contains("fatal: the runner ran out of memory"));
    assert!(
        trace.starts_with(&filler),
        "the cut falls on a line start: {:?}",
        &trace[..120]
    );
}

/// GET requests whose path ends with `suffix`.
fn reads(sim: &SimHandle, suffix: &str) -> usize {
    sim.requests()
        .iter()
        .filter(|request| request.method == "GET" && request.path.ends_with(suffix))
        .count()
}

/// Every list the client reads goes past its first page of 100 (GitLab's
/// `X-Next-Page`): notes, a pipeline's jobs and merge requests (protected
/// branches: above).
#[tokio::test]
async fn every_list_is_read_past_its_first_page() {
    let sim = start_sim().await;
    let mut project = sim.gitlab_project("team/paged");
    for i in 0..=100 {
        project = project.job(JobSpec::new(&format!("job-{i:03}"), JobOutcome::Success));
    }
    let pid = project.create().expect("project");
    let gitlab = client(&sim);
    let (iid, _) = open_change(&gitlab, "team/paged", "wq/paged").await;

    for i in 0..=100 {
        gitlab
            .create_note("team/paged", iid, &format!("n{i:03}"))
            .await
            .expect("note");
    }
    sim.clear_requests();
    let notes = gitlab.list_notes("team/paged", iid).await.expect("notes");
    let bodies: Vec<&str> = notes.iter().map(|note| note.body.as_str()).collect();
    assert_eq!(bodies.len(), 101, "{bodies:?}");
    assert!(bodies.contains(&"n000") && bodies.contains(&"n100"));
    assert_eq!(reads(&sim, "/notes"), 2, "two pages of 100 and 1");

    let pipeline = sim.gitlab_mr(pid, iid).expect("merge request")["head_pipeline"]["id"]
        .as_u64()
        .expect("a pipeline");
    sim.clear_requests();
    let jobs = gitlab
        .pipeline_jobs("team/paged", pipeline)
        .await
        .expect("jobs");
    assert_eq!(jobs.len(), 101);
    assert_eq!(reads(&sim, "/jobs"), 2);

    // Merge requests from one source branch into 101 targets; the lowest
    // iid is listed last (newest first).
    for i in 0..=100 {
        let target = format!("base-{i:03}");
        sim.gitlab_push(
            pid,
            &target,
            &[(&format!("{target}.txt"), Some("x"))],
            "base",
        )
        .expect("target branch");
        gitlab
            .create_change(&NewChange {
                project: "team/paged",
                source_branch: "wq/paged",
                target_branch: &target,
                title: "more",
                description: "",
                labels: &[],
            })
            .await
            .expect("merge request");
    }
    sim.clear_requests();
    let found = gitlab
        .find_open_change("team/paged", "wq/paged")
        .await
        .expect("find")
        .expect("an open merge request");
    assert_eq!(found.number, iid, "the oldest, on the second page");
    assert_eq!(reads(&sim, "/merge_requests"), 2);
}

/// GitLab's creation takes the labels; `open_note` (the trait's default)
/// still adds any it is given, through the merge request's update, before
/// the note.
#[tokio::test]
async fn the_first_note_with_labels_is_an_update_and_a_note() {
    let sim = start_sim().await;
    sim.gitlab_project("team/noted")
        .no_ci()
        .create()
        .expect("project");
    let gitlab = client(&sim);
    assert!(gitlab.labels_on_creation());
    let (iid, _) = open_change(&gitlab, "team/noted", "wq/noted").await;
    sim.clear_requests();
    let labels = vec!["workqueue".to_owned()];
    let note = gitlab
        .open_note("team/noted", iid, &labels, "status")
        .await
        .expect("noted");
    let methods: Vec<String> = sim.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(
        methods.first().map(String::as_str),
        Some("PUT"),
        "{methods:?}"
    );
    assert_eq!(
        methods.last().map(String::as_str),
        Some("POST"),
        "{methods:?}"
    );
    let change = gitlab.get_change("team/noted", iid).await.expect("read");
    assert_eq!(change.labels, labels);
    let notes = gitlab.list_notes("team/noted", iid).await.expect("notes");
    assert!(
        notes.iter().any(|n| n.id == note.id && n.body == "status"),
        "{notes:?}"
    );
}
