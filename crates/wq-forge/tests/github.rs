//! `GithubClient` against forge-sim's GitHub over real HTTP: every `Forge`
//! method, the merge-async outcomes, queue observation, and webhook
//! deliveries (the simulator's own, signed with the repository secret).
//!
//! The simulator runs with its background ticker effectively off: every
//! API request progresses it by one tick, so each test drives it
//! deterministically. The few answers the simulator cannot produce (a
//! `pending` without uuid, an unknown status, a 409 for a moved head, 405,
//! 422) come from a small scripted server, also over HTTP.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use forge_sim::github::{CheckScript, GithubRepoSpec, MergeAsyncScript, RulesetSpec};
use forge_sim::testing::{Received, Receiver, header_refs, start_stepped_sim};
use forge_sim::{FaultRule, HttpFault, JobOutcome, SimHandle};
use serde_json::{Value, json};
use wq_forge::{
    ChangeAction, ChangeState, ChangeUpdate, CiStatus, CommitMode, CommitRequest, FileAction,
    FileOp, Forge, ForgeConfig, ForgeErrorKind, ForgeEvent, ForgeKind, Forges, ForgesConfig,
    GithubClient, LabelChange, MergeMethod, MergeOutcome, MergeParams, Mergeable, NewChange,
    QueueEntry, QueueObservation, ReviewDecision, WebhookRejection,
};

const REPO: &str = "octo/app";
const SECRET: &str = "hook-secret";
const STALE_SHA: &str = "ffffffffffffffffffffffffffffffffffffffff";

fn config(url: &str) -> ForgeConfig {
    ForgeConfig::literal(ForgeKind::Github, url, forge_sim::DEFAULT_TOKEN, SECRET)
}

fn client(sim: &SimHandle) -> GithubClient {
    GithubClient::new(&config(&sim.github_url())).expect("client")
}

fn create_repo(sim: &SimHandle, spec: GithubRepoSpec) {
    sim.github_create_repo(spec).expect("repo created");
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

async fn commit(
    github: &GithubClient,
    branch: &str,
    mode: CommitMode,
    actions: &[FileAction],
) -> wq_forge::ForgeResult<String> {
    github
        .commit_files(&CommitRequest {
            project: REPO,
            branch,
            base_branch: "main",
            mode,
            message: "workqueue change",
            actions,
        })
        .await
        .map(|pushed| pushed.sha)
}

/// A branch with one new file and a pull request from it; returns (number,
/// head sha).
async fn open_change(github: &GithubClient, branch: &str) -> (u64, String) {
    let head = commit(
        github,
        branch,
        CommitMode::CreateBranch,
        &[action(
            FileOp::Create,
            &format!("{branch}.txt"),
            Some(b"content\n"),
        )],
    )
    .await
    .expect("commit");
    let change = github
        .create_change(&NewChange {
            project: REPO,
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

/// A raw REST call to the simulator as the default user.
async fn rest(sim: &SimHandle, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method, format!("{}{path}", sim.github_url()))
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// File modes of a commit's tree, by path.
async fn modes(sim: &SimHandle, sha: &str) -> BTreeMap<String, String> {
    let (_, commit) = rest(
        sim,
        reqwest::Method::GET,
        &format!("/repos/{REPO}/git/commits/{sha}"),
        Value::Null,
    )
    .await;
    let tree = commit["tree"]["sha"].as_str().expect("tree sha");
    let (_, tree) = rest(
        sim,
        reqwest::Method::GET,
        &format!("/repos/{REPO}/git/trees/{tree}?recursive=1"),
        Value::Null,
    )
    .await;
    tree["tree"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["type"] == "blob")
        .map(|e| {
            (
                e["path"].as_str().unwrap_or_default().to_owned(),
                e["mode"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// (method, path) of the requests the simulator served since the last clear.
fn requests(sim: &SimHandle) -> Vec<(String, String)> {
    sim.requests()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect()
}

/// The paths of the requests the simulator served.
fn paths(sim: &SimHandle) -> Vec<String> {
    sim.requests().into_iter().map(|r| r.path).collect()
}

/// What every forge does with commit modes (create, force update, delete,
/// move, chmod), branch heads and empty diffs is the conformance suite's;
/// here: GitHub's modes and error kinds.
#[tokio::test]
async fn commits_keep_modes_and_name_their_refusals() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    assert!(github.creates_branch_atomically());

    // Files on main to move and chmod later (through the client itself:
    // force-updating main onto main plus a commit).
    let mut tool = action(FileOp::Create, "tool.sh", Some(b"#!/bin/sh\necho hi\n"));
    tool.execute_filemode = Some(true);
    let base = commit(
        &github,
        "main",
        CommitMode::ForceUpdate,
        &[action(FileOp::Create, "a.txt", Some(b"one\n")), tool],
    )
    .await
    .expect("base commit");
    assert_eq!(
        sim.github_branch_head(REPO, "main").as_deref(),
        Some(base.as_str())
    );
    assert_eq!(modes(&sim, &base).await["tool.sh"], "100755");

    let created = commit(
        &github,
        "wq/one",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "x.txt", Some(b"x"))],
    )
    .await
    .expect("create branch");
    // Creating the branch again is a conflict, before anything is written.
    sim.clear_requests();
    let again = commit(
        &github,
        "wq/one",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "x.txt", Some(b"x"))],
    )
    .await
    .expect_err("branch exists");
    assert_eq!(again.kind, ForgeErrorKind::Conflict, "{again}");
    assert_eq!(
        requests(&sim),
        [("POST".to_owned(), "/graphql".to_owned())],
        "one query tells the branch exists"
    );
    assert_eq!(
        sim.github_branch_head(REPO, "wq/one").as_deref(),
        Some(created.as_str())
    );

    // A move keeps the file's mode; chmod sets it.
    let mut moved = action(FileOp::Move, "bin/tool.sh", None);
    moved.previous_path = Some("tool.sh".into());
    let mut chmod = action(FileOp::Chmod, "README.md", None);
    chmod.execute_filemode = Some(true);
    let forced = commit(
        &github,
        "wq/one",
        CommitMode::ForceUpdate,
        &[
            action(FileOp::Update, "a.txt", Some(b"two\n")),
            moved,
            chmod,
        ],
    )
    .await
    .expect("force update");
    let forced_modes = modes(&sim, &forced).await;
    assert_eq!(forced_modes["bin/tool.sh"], "100755");
    assert_eq!(forced_modes["README.md"], "100755");
    assert_eq!(forced_modes["a.txt"], "100644");

    // A move of a file that does not exist is invalid.
    let mut bad_move = action(FileOp::Move, "b.txt", None);
    bad_move.previous_path = Some("nope.txt".into());
    let error = commit(&github, "wq/one", CommitMode::ForceUpdate, &[bad_move])
        .await
        .expect_err("missing source");
    assert_eq!(error.kind, ForgeErrorKind::Invalid, "{error}");
}

#[tokio::test]
async fn deletes_and_moves_take_only_files_and_writes_never_replace_a_directory() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let base = commit(
        &github,
        "main",
        CommitMode::ForceUpdate,
        &[
            action(FileOp::Create, ".github/workflows/ci.yml", Some(b"ci\n")),
            action(
                FileOp::Create,
                ".github/workflows/release.yml",
                Some(b"rel\n"),
            ),
            action(FileOp::Create, "src/lib.rs", Some(b"lib\n")),
            action(FileOp::Create, "notes.txt", Some(b"notes\n")),
        ],
    )
    .await
    .expect("base commit");
    let feature = commit(
        &github,
        "wq/dir",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "x.txt", Some(b"x\n"))],
    )
    .await
    .expect("feature branch");

    let mut move_dir = action(FileOp::Move, "ci", None);
    move_dir.previous_path = Some(".github/workflows".into());
    let mut move_missing = action(FileOp::Move, "b.txt", None);
    move_missing.previous_path = Some("nope.txt".into());
    let mut move_onto_dir = action(FileOp::Move, "src", None);
    move_onto_dir.previous_path = Some("notes.txt".into());
    let refused: Vec<(FileAction, &str)> = vec![
        (
            action(FileOp::Delete, ".github", None),
            ".github is a directory",
        ),
        (
            action(FileOp::Delete, "missing.txt", None),
            "missing.txt does not exist",
        ),
        (move_dir, ".github/workflows is a directory"),
        (move_missing, "nope.txt does not exist"),
        (move_onto_dir, "src is a directory"),
        (action(FileOp::Chmod, "src", None), "src is a directory"),
        (
            action(FileOp::Create, "src", Some(b"x")),
            "src is a directory",
        ),
        (
            action(FileOp::Update, ".github/workflows", Some(b"x")),
            ".github/workflows is a directory",
        ),
        (
            action(FileOp::Create, "notes.txt/x", Some(b"x")),
            "notes.txt is a file",
        ),
    ];
    for (bad, why) in refused {
        sim.clear_requests();
        let error = commit(
            &github,
            "wq/dir",
            CommitMode::ForceUpdate,
            std::slice::from_ref(&bad),
        )
        .await
        .map(|sha| panic!("{bad:?} was committed as {sha}: {:?}", requests(&sim)))
        .unwrap_err();
        assert_eq!(error.kind, ForgeErrorKind::Invalid, "{bad:?}: {error}");
        assert!(error.message.contains(why), "{bad:?}: {}", error.message);
        assert!(
            requests(&sim)
                .iter()
                .all(|(method, path)| method == "GET" || path == "/graphql"),
            "{bad:?}: nothing is written (reads and the base's query only)"
        );
        assert_eq!(
            sim.github_branch_head(REPO, "wq/dir").as_deref(),
            Some(feature.as_str())
        );
    }
    let file = |branch: &str, path: &str| sim.github_file(REPO, branch, path);
    assert_eq!(
        file("wq/dir", ".github/workflows/ci.yml").as_deref(),
        Some(&b"ci\n"[..])
    );
    assert_eq!(
        file("main", ".github/workflows/release.yml").as_deref(),
        Some(&b"rel\n"[..])
    );
    assert_eq!(
        sim.github_branch_head(REPO, "main").as_deref(),
        Some(base.as_str())
    );

    // A directory the request empties may become a file. Only the whole
    // tree tells that nothing else is below it, so this request lists it.
    sim.clear_requests();
    commit(
        &github,
        "wq/dir",
        CommitMode::ForceUpdate,
        &[
            action(FileOp::Delete, "src/lib.rs", None),
            action(FileOp::Create, "src", Some(b"now a file\n")),
        ],
    )
    .await
    .expect("an emptied directory becomes a file");
    assert_eq!(file("wq/dir", "src").as_deref(), Some(&b"now a file\n"[..]));
    assert!(
        requests(&sim)
            .iter()
            .any(|(method, path)| method == "GET" && path.contains("/git/trees/")),
        "the tree is listed: {:?}",
        requests(&sim)
    );

    // A file delete still works, and the workflows stay; actions apply in order, so a deleted
    // file's path may become a directory.
    let head = commit(
        &github,
        "wq/dir",
        CommitMode::ForceUpdate,
        &[
            action(FileOp::Delete, "notes.txt", None),
            action(FileOp::Create, "notes.txt/today.md", Some(b"t\n")),
        ],
    )
    .await
    .expect("file delete");
    assert_eq!(
        sim.github_branch_head(REPO, "wq/dir").as_deref(),
        Some(head.as_str())
    );
    assert_eq!(file("wq/dir", "notes.txt"), None);
    assert_eq!(
        file("wq/dir", "notes.txt/today.md").as_deref(),
        Some(&b"t\n"[..])
    );
    assert_eq!(
        file("wq/dir", ".github/workflows/ci.yml").as_deref(),
        Some(&b"ci\n"[..])
    );
    assert_eq!(
        file("wq/dir", ".github/workflows/release.yml").as_deref(),
        Some(&b"rel\n"[..])
    );
    assert_eq!(file("wq/dir", "src/lib.rs").as_deref(), Some(&b"lib\n"[..]));
}

/// GitHub lists a tree recursively up to 100,000 entries (7 MB) and says
/// `truncated` beyond. The paths a commit touches are looked up one by
/// one instead, so a repository of any size takes commits; many paths
/// take more than one query. Only a request the lookups cannot judge (a
/// directory it may empty) needs the listing, and is refused when that
/// is truncated, with nothing written.
#[tokio::test]
async fn a_tree_too_large_to_list_takes_commits_path_by_path() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").tree_listing_limit(5),
    );
    let github = client(&sim);
    let many: Vec<FileAction> = (0..150)
        .map(|n| {
            action(
                FileOp::Create,
                &format!("many/f{n:03}.txt"),
                Some(format!("{n}\n").as_bytes()),
            )
        })
        .collect();
    sim.clear_requests();
    commit(&github, "main", CommitMode::ForceUpdate, &many)
        .await
        .expect("150 files");
    let graphql = |sim: &SimHandle| {
        requests(sim)
            .iter()
            .filter(|(method, path)| method == "POST" && path == "/graphql")
            .count()
    };
    assert_eq!(graphql(&sim), 2, "151 lookups: {:?}", requests(&sim));
    assert!(
        requests(&sim).iter().all(|(method, _)| method != "GET"),
        "nothing listed: {:?}",
        requests(&sim)
    );

    // On a base of 151 files, more than GitHub lists.
    let mut moved = action(FileOp::Move, "moved/f001.txt", None);
    moved.previous_path = Some("many/f001.txt".into());
    let head = commit(
        &github,
        "wq/big",
        CommitMode::CreateBranch,
        &[
            action(FileOp::Update, "many/f000.txt", Some(b"zero\n")),
            moved,
            action(FileOp::Delete, "many/f002.txt", None),
        ],
    )
    .await
    .expect("a commit on a tree too large to list");
    let file = |path: &str| sim.github_file(REPO, "wq/big", path);
    assert_eq!(file("many/f000.txt").as_deref(), Some(&b"zero\n"[..]));
    assert_eq!(file("moved/f001.txt").as_deref(), Some(&b"1\n"[..]));
    assert_eq!(file("many/f001.txt"), None);
    assert_eq!(file("many/f002.txt"), None);
    assert_eq!(file("many/f149.txt").as_deref(), Some(&b"149\n"[..]));
    // The checks hold without the listing.
    for (bad, why) in [
        (action(FileOp::Delete, "many", None), "many is a directory"),
        (
            action(FileOp::Delete, "many/nope.txt", None),
            "many/nope.txt does not exist",
        ),
        (
            action(FileOp::Create, "many/f003.txt/x", Some(b"x")),
            "many/f003.txt is a file",
        ),
    ] {
        let error = commit(&github, "wq/big", CommitMode::ForceUpdate, &[bad])
            .await
            .expect_err("refused");
        assert_eq!(error.kind, ForgeErrorKind::Invalid, "{error}");
        assert!(error.message.contains(why), "{}", error.message);
    }

    // A directory the request may empty needs the listing, which GitHub
    // truncates: refused, nothing written.
    sim.clear_requests();
    let error = commit(
        &github,
        "wq/big",
        CommitMode::ForceUpdate,
        &[
            action(FileOp::Delete, "many/f003.txt", None),
            action(FileOp::Create, "many", Some(b"x")),
        ],
    )
    .await
    .expect_err("the listing is truncated");
    assert_eq!(error.kind, ForgeErrorKind::Rejected, "{error}");
    assert!(error.message.contains("too large"), "{}", error.message);
    assert!(
        requests(&sim)
            .iter()
            .all(|(method, path)| method == "GET" || path == "/graphql"),
        "nothing written: {:?}",
        requests(&sim)
    );
    assert_eq!(
        sim.github_branch_head(REPO, "wq/big").as_deref(),
        Some(head.as_str())
    );
}

/// A failed lookup of the base (here GraphQL answering 502) costs only the
/// REST reads it saves (the branch to be created, the base branch and its
/// tree): the commit is made on the listed tree.
#[tokio::test]
async fn a_failed_base_lookup_lists_the_tree_instead() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    sim.add_fault(FaultRule::new(
        "POST",
        "/graphql",
        HttpFault::Status { status: 502 },
    ));
    sim.clear_requests();
    commit(
        &github,
        "wq/fallback",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "a.txt", Some(b"a\n"))],
    )
    .await
    .expect("committed on the listed tree");
    let served = requests(&sim);
    let methods: Vec<(&str, &str)> = served
        .iter()
        .map(|(method, path)| (method.as_str(), path.as_str()))
        .collect();
    assert_eq!(methods.len(), 7, "{served:?}");
    assert_eq!(
        methods[..3],
        [
            ("POST", "/graphql"),
            ("GET", "/repos/octo/app/branches/wq/fallback"),
            ("GET", "/repos/octo/app/branches/main"),
        ],
        "the branch to create, then the base"
    );
    assert!(
        methods[3].1.starts_with("/repos/octo/app/git/trees/"),
        "{served:?}"
    );
    assert_eq!(
        sim.github_file(REPO, "wq/fallback", "a.txt").as_deref(),
        Some(&b"a\n"[..])
    );
}

/// Create, find, update, close and reopen are the conformance suite's;
/// here: what GitHub shows of them, and its answer to a second pull
/// request from one branch.
#[tokio::test]
async fn pull_requests_as_github_shows_them() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    commit(
        &github,
        "wq/pr",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "pr.txt", Some(b"x"))],
    )
    .await
    .expect("commit");
    let new_change = |title| NewChange {
        project: REPO,
        source_branch: "wq/pr",
        target_branch: "main",
        title,
        description: "",
        labels: &[],
    };
    let labels = vec!["workqueue".to_owned(), "bot".to_owned()];
    let created = github
        .create_change(&NewChange {
            labels: &labels,
            ..new_change("Add pr.txt")
        })
        .await
        .expect("create");
    assert_eq!(created.labels, labels);
    assert_eq!(created.pipeline_id, None);
    assert!(created.url.ends_with(&format!("/pull/{}", created.number)));
    let on_github = sim.github_pr(REPO, created.number).expect("pr");
    assert_eq!(on_github["labels"].as_array().map(Vec::len), Some(2));

    let duplicate = github
        .create_change(&new_change("Again"))
        .await
        .expect_err("one open pull request per branch");
    assert_eq!(duplicate.kind, ForgeErrorKind::Conflict, "{duplicate}");

    github
        .update_change(
            REPO,
            created.number,
            &ChangeUpdate {
                title: Some("New title"),
                labels: Some(LabelChange {
                    add: &["ready".to_owned()],
                    remove: &["workqueue".to_owned()],
                }),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("update");
    let on_github = sim.github_pr(REPO, created.number).expect("pr");
    assert_eq!(on_github["title"], "New title");
    let mut names: Vec<&str> = on_github["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["bot", "ready"]);

    let closed = github
        .update_change(
            REPO,
            created.number,
            &ChangeUpdate {
                open: Some(false),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("close");
    assert_eq!(closed.queue, QueueObservation::Absent);
}

#[tokio::test]
async fn every_page_of_commit_statuses_is_read() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/statuses").await;
    for i in 0..=100 {
        let state = if i == 100 { "failure" } else { "success" };
        let (status, body) = rest(
            &sim,
            reqwest::Method::POST,
            &format!("/repos/{REPO}/statuses/{head}"),
            json!({ "state": state, "context": format!("ctx-{i:03}") }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    sim.clear_requests();
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!(change.ci, CiStatus::Failed);
    let status_reads = requests(&sim)
        .iter()
        .filter(|(_, path)| path.ends_with("/status"))
        .count();
    assert_eq!(status_reads, 2, "two pages of 100 and 1");
}

/// GET requests whose path ends with `suffix`.
fn reads(sim: &SimHandle, suffix: &str) -> usize {
    requests(sim)
        .iter()
        .filter(|(method, path)| method == "GET" && path.ends_with(suffix))
        .count()
}

/// Every list the client reads goes past its first page of 100 by
/// following GitHub's `Link: rel="next"`: comments, pull requests, check
/// runs and branch rules (commit statuses: the test above).
#[tokio::test]
async fn every_list_follows_githubs_next_links() {
    let sim = start_stepped_sim().await;
    let mut checks: Vec<CheckScript> = (0..100)
        .map(|i| CheckScript::new(&format!("check-{i:03}"), JobOutcome::Success))
        .collect();
    checks.push(CheckScript::new(
        "check-100",
        JobOutcome::fail("script_failure", "the last one fails"),
    ));
    create_repo(&sim, GithubRepoSpec::new("octo", "app").checks(&checks));
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/paged").await;

    // Comments: 101, oldest first.
    for i in 0..=100 {
        let (status, body) = rest(
            &sim,
            reqwest::Method::POST,
            &format!("/repos/{REPO}/issues/{n}/comments"),
            json!({ "body": format!("c{i:03}") }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    sim.clear_requests();
    let notes = github.list_notes(REPO, n).await.expect("notes");
    assert_eq!(notes.len(), 101);
    assert_eq!(notes[100].body, "c100");
    assert_eq!(reads(&sim, "/comments"), 2, "two pages of 100 and 1");

    // Check runs: the failing one is the 101st.
    forge_sim::testing::ApiClient::github(&sim)
        .poll(
            &format!("/repos/{REPO}/commits/{head}/check-runs?per_page=100&page=2"),
            |page| page["check_runs"][0]["status"] == "completed",
        )
        .await;
    sim.clear_requests();
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!(change.ci, CiStatus::Failed, "the second page is read");
    assert_eq!(reads(&sim, "/check-runs"), 2);

    // Pull requests from one head: the lowest number, listed last.
    for i in 0..=100 {
        let base = format!("base-{i:03}");
        sim.github_push_human_commit(REPO, &base, &[(&format!("{base}.txt"), Some("x"))], "base")
            .expect("base branch");
        let (status, body) = rest(
            &sim,
            reqwest::Method::POST,
            &format!("/repos/{REPO}/pulls"),
            json!({ "title": "t", "head": "octo:wq/paged", "base": base }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    sim.clear_requests();
    let found = github
        .find_open_change(REPO, "wq/paged")
        .await
        .expect("find")
        .expect("an open pull request");
    assert_eq!(found.number, n, "the oldest, on the second page");
    assert_eq!(reads(&sim, "/pulls"), 2);

    // Branch rules: only the 101st protects.
    sim.github_add_ruleset(
        REPO,
        &["refs/heads/guarded"],
        &["commit_message_pattern"; 100],
    )
    .expect("ruleset");
    sim.github_add_ruleset(REPO, &["refs/heads/guarded"], &["deletion"])
        .expect("ruleset");
    sim.clear_requests();
    assert!(
        github
            .branch_protected(REPO, "guarded")
            .await
            .expect("rules")
    );
    assert_eq!(reads(&sim, "/rules/branches/guarded"), 2);
}

/// A next page on another server is refused: the token goes to the
/// configured GitHub only.
#[tokio::test]
async fn a_next_link_to_another_server_is_refused() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let log = log.clone();
        async move {
            log.lock().expect("log").push(request.uri().to_string());
            (
                [(
                    "link",
                    "<http://127.0.0.1:9/repos/octo/app/issues/1/comments?page=2>; rel=\"next\"",
                )],
                axum::Json(json!([])),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let github = GithubClient::new(&config(&format!("http://{addr}"))).expect("client");
    let error = github.list_notes(REPO, 1).await.expect_err("refused");
    assert_eq!(error.kind, ForgeErrorKind::Rejected, "{error}");
    assert!(error.message.contains("next page"), "{error}");
    assert_eq!(
        seen.lock().expect("log").clone(),
        vec!["/repos/octo/app/issues/1/comments?per_page=100".to_string()],
        "only the configured server was asked"
    );
}

#[tokio::test]
async fn get_change_reads_checks_statuses_reviews_threads_and_draft_in_one_request() {
    let sim = start_stepped_sim().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").checks(&[
            CheckScript::new("ci", JobOutcome::Success).duration_secs(3600),
            CheckScript::new("lint", JobOutcome::Success)
                .duration_secs(3600)
                .as_status(),
        ]),
    );
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/gates").await;

    // Checks running: one check run in progress, one status pending. The
    // whole state comes from one GraphQL query.
    sim.clear_requests();
    let change = github.get_change(REPO, n).await.expect("get");
    let served = requests(&sim);
    assert_eq!(
        served,
        [("POST".to_owned(), "/graphql".to_owned())],
        "one request"
    );
    assert_eq!(change.state, ChangeState::Open);
    assert_eq!(change.head_sha.as_deref(), Some(head.as_str()));
    assert_eq!(change.ci, CiStatus::Running);
    assert_eq!(change.pending_checks, 2);
    // No review rule on the branch: GitHub's reviewDecision is null.
    assert_eq!(change.review, ReviewDecision::NotRequired);
    assert_eq!(change.approvals, 0);
    assert!(change.approved_by.is_empty());
    assert_eq!(change.required_approvals, None);
    assert_eq!(change.mergeable, Mergeable::Yes);
    assert_eq!(change.merge_status, "unstable");
    assert_eq!(change.unresolved_threads, 0);
    assert_eq!(change.queue, QueueObservation::Absent);
    assert!(!change.draft);

    // Threads, a draft, approvals and a request for changes.
    sim.github_set_draft(REPO, n, true).expect("draft");
    sim.github_set_threads(REPO, n, 2, 1).expect("threads");
    let change = github.get_change(REPO, n).await.expect("get");
    assert!(change.draft);
    assert_eq!(change.merge_status, "draft");
    assert_eq!(change.unresolved_threads, 2);

    sim.github_set_draft(REPO, n, false).expect("ready");
    sim.github_set_unresolved_threads(REPO, n, 0)
        .expect("threads");
    sim.github_approve(REPO, n, "alice").expect("approve");
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!(change.review, ReviewDecision::NotRequired);
    assert_eq!(change.approvals, 1);
    assert_eq!(change.approved_by, vec!["alice".to_owned()]);
    assert_eq!(change.unresolved_threads, 0);
    sim.github_request_changes(REPO, n, "bob", "please fix")
        .expect("request changes");
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!(change.review, ReviewDecision::ChangesRequested);
    assert_eq!(change.approvals, 1, "alice still approves");

    // The checks finish: success and no pending checks.
    sim.advance(Duration::from_secs(3600));
    sim.tick();
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!((change.ci, change.pending_checks), (CiStatus::Success, 0));

    // A failing check run and a failing status each make CI failed.
    sim.github_script_checks(
        REPO,
        vec![CheckScript::new(
            "ci",
            JobOutcome::fail("script_failure", "red"),
        )],
    )
    .expect("checks");
    let (failing, _) = open_change(&github, "wq/red").await;
    sim.tick();
    sim.tick();
    let change = github.get_change(REPO, failing).await.expect("get");
    assert_eq!((change.ci, change.pending_checks), (CiStatus::Failed, 0));
    sim.github_script_checks(
        REPO,
        vec![CheckScript::new("lint", JobOutcome::fail("script_failure", "red")).as_status()],
    )
    .expect("checks");
    let (red_status, _) = open_change(&github, "wq/red-status").await;
    sim.tick();
    sim.tick();
    let change = github.get_change(REPO, red_status).await.expect("get");
    assert_eq!((change.ci, change.pending_checks), (CiStatus::Failed, 0));

    // No checks at all is no CI, not pending.
    sim.github_script_checks(REPO, Vec::new()).expect("checks");
    let (bare, _) = open_change(&github, "wq/bare").await;
    let change = github.get_change(REPO, bare).await.expect("get");
    assert_eq!((change.ci, change.pending_checks), (CiStatus::None, 0));
    assert_eq!(change.merge_status, "clean");

    // Merged: one request, state merged, out of any queue.
    let outcome = github
        .merge_change(REPO, bare, &MergeParams::default())
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
    sim.clear_requests();
    let change = github.get_change(REPO, bare).await.expect("get");
    assert_eq!(requests(&sim).len(), 1);
    assert_eq!(change.state, ChangeState::Merged);
    assert_eq!(change.queue, QueueObservation::Absent);
}

/// Enqueues `n` through the client (merge_action default on a queue repo).
async fn enqueue(github: &GithubClient, n: u64, head: &str) {
    let outcome = github
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(head),
                ..MergeParams::default()
            },
        )
        .await
        .expect("merge");
    assert_eq!(outcome, MergeOutcome::Queued);
}

#[tokio::test]
async fn queue_entries_are_one_graphql_request_and_normalized() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app").merge_queue(true));
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 0,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let github = client(&sim);
    let (one, head_one) = open_change(&github, "wq/q1").await;
    let (two, head_two) = open_change(&github, "wq/q2").await;
    let (three, _) = open_change(&github, "wq/q3").await;
    sim.github_lock_queue(REPO, true).expect("lock");
    enqueue(&github, one, &head_one).await;
    enqueue(&github, two, &head_two).await;

    sim.clear_requests();
    let entries = github
        .queue_entries(REPO, &[one, two, three])
        .await
        .expect("entries");
    assert_eq!(
        requests(&sim),
        [("POST".to_owned(), "/graphql".to_owned())],
        "one GraphQL request for three pull requests"
    );
    assert_eq!(
        entries,
        BTreeMap::from([
            (
                one,
                QueueObservation::Entry(QueueEntry {
                    state: "locked".into(),
                    position: Some(1),
                    eta_seconds: Some(300),
                })
            ),
            (
                two,
                QueueObservation::Entry(QueueEntry {
                    state: "locked".into(),
                    position: Some(2),
                    eta_seconds: Some(600),
                })
            ),
            (three, QueueObservation::Absent),
        ])
    );

    // A number the query errors on (no such pull request) is unobserved;
    // the others are still read; an empty ask costs nothing.
    let entries = github
        .queue_entries(REPO, &[one, 99, one])
        .await
        .expect("entries");
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[&99], QueueObservation::Unobserved);
    assert!(matches!(entries[&one], QueueObservation::Entry(_)));
    sim.clear_requests();
    assert!(
        github
            .queue_entries(REPO, &[])
            .await
            .expect("nothing")
            .is_empty()
    );
    assert!(requests(&sim).is_empty());

    // get_change sees the same entry; an unknown estimate is None.
    sim.github_update_repo(
        REPO,
        GithubRepoSpec {
            queue_eta_seconds_per_entry: Some(None),
            ..GithubRepoSpec::default()
        },
    )
    .expect("no eta");
    let change = github.get_change(REPO, two).await.expect("get");
    assert_eq!(
        change.queue,
        QueueObservation::Entry(QueueEntry {
            state: "locked".into(),
            position: Some(2),
            eta_seconds: None,
        })
    );

    // Unlocked, the queue runs: every state read is a normalized word, and
    // the merged pull request is out of the queue.
    sim.github_lock_queue(REPO, false).expect("unlock");
    let mut seen = Vec::new();
    let merged = loop {
        let change = github.get_change(REPO, one).await.expect("get");
        if change.state == ChangeState::Merged {
            break change;
        }
        match &change.queue {
            QueueObservation::Entry(entry) => seen.push(entry.state.clone()),
            other => panic!("open and queued, got {other:?}"),
        }
        assert!(seen.len() < 50, "{seen:?}");
    };
    assert_eq!(merged.queue, QueueObservation::Absent);
    for state in &seen {
        assert!(
            [
                "queued",
                "awaiting_checks",
                "mergeable",
                "unmergeable",
                "locked"
            ]
            .contains(&state.as_str()),
            "{seen:?}"
        );
    }
    assert!(seen.iter().any(|s| s == "mergeable"), "{seen:?}");
}

#[tokio::test]
async fn a_failed_graphql_read_is_unobserved_never_absent() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app").merge_queue(true));
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 0,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/gql").await;
    sim.github_approve(REPO, n, "alice").expect("approve");
    sim.github_lock_queue(REPO, true).expect("lock");
    enqueue(&github, n, &head).await;
    let seen = github.get_change(REPO, n).await.expect("get");
    assert!(matches!(seen.queue, QueueObservation::Entry(_)));
    assert_eq!(seen.review, ReviewDecision::NotRequired);
    assert_eq!(seen.approved_by, vec!["alice".to_owned()]);

    sim.add_fault(FaultRule::new(
        "POST",
        "/graphql",
        HttpFault::Status { status: 502 },
    ));
    let change = github.get_change(REPO, n).await.expect("REST part read");
    assert_eq!(change.queue, QueueObservation::Unobserved);
    assert_eq!(
        change.review,
        ReviewDecision::ReviewRequired,
        "an approval not seen is not claimed"
    );
    assert_eq!(change.approvals, 0);
    assert!(change.approved_by.is_empty());
    assert_eq!(change.state, ChangeState::Open);

    sim.add_fault(FaultRule::new(
        "POST",
        "/graphql",
        HttpFault::Status { status: 502 },
    ));
    let error = github
        .queue_entries(REPO, &[n])
        .await
        .expect_err("the whole query failed");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable);
    assert_eq!(error.status, Some(502));
}

#[tokio::test]
async fn merge_async_merged_already_merged_and_failures() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 0,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let github = client(&sim);

    // A moved head is the conformance suite's
    // `a_merge_bound_to_a_stale_head_is_a_conflict`.
    let (n, head) = open_change(&github, "wq/direct").await;
    // 200 merged, with method and message.
    let outcome = github
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(&head),
                method: Some(MergeMethod::Squash),
                commit_message: Some("Squashed by workqueue"),
            },
        )
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
    let pr = sim.github_pr(REPO, n).expect("pr");
    assert_eq!(pr["merged"], true);
    let (_, main) = rest(
        &sim,
        reqwest::Method::GET,
        &format!("/repos/{REPO}/commits/main"),
        Value::Null,
    )
    .await;
    let message = main["commit"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Squashed by workqueue"), "{message}");
    assert_eq!(
        main["parents"].as_array().map(Vec::len),
        Some(1),
        "squash: one parent"
    );

    // Already merged: merged again.
    assert!(matches!(
        github
            .merge_change(REPO, n, &MergeParams::default())
            .await
            .expect("again"),
        MergeOutcome::Merged {
            commit_sha: Some(_)
        }
    ));

    // A failed request carries GitHub's message.
    let (failing, _) = open_change(&github, "wq/rules").await;
    sim.github_fail_next_merge_async(REPO, "Repository rule violations found")
        .expect("script");
    let error = github
        .merge_change(REPO, failing, &MergeParams::default())
        .await
        .expect_err("failed");
    assert_eq!(error.kind, ForgeErrorKind::Rejected, "{error}");
    assert!(
        error.message.contains("Repository rule violations found"),
        "{}",
        error.message
    );
    assert_eq!(sim.github_pr(REPO, failing).expect("pr")["merged"], false);

    // A closed pull request is refused with GitHub's message.
    github
        .update_change(
            REPO,
            failing,
            &ChangeUpdate {
                open: Some(false),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("close");
    let error = github
        .merge_change(REPO, failing, &MergeParams::default())
        .await
        .expect_err("closed");
    assert_eq!(error.kind, ForgeErrorKind::Rejected);
    assert!(
        error.message.contains("Pull request is closed."),
        "{}",
        error.message
    );
    let missing = github
        .merge_change(REPO, 77, &MergeParams::default())
        .await
        .expect_err("no such pull request");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);
}

/// (sim time, path) of the merge-async requests served since the last clear.
fn merge_requests(sim: &SimHandle) -> Vec<(String, time::OffsetDateTime, String)> {
    sim.requests()
        .into_iter()
        .filter(|r| r.path.contains("/merge-async"))
        .map(|r| (r.method, r.time, r.path))
        .collect()
}

#[tokio::test]
async fn pending_merges_are_polled_at_least_a_second_apart() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/pending").await;
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 3,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    sim.clear_requests();
    let outcome = github
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(&head),
                ..MergeParams::default()
            },
        )
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
    let served = merge_requests(&sim);
    assert_eq!(served[0].0, "PUT");
    assert!(
        served.len() >= 3,
        "a PUT and at least two reads: {served:?}"
    );
    let uuid = served[1].2.rsplit('/').next().expect("uuid").to_owned();
    for pair in served.windows(2) {
        assert_eq!(pair[1].0, "GET");
        assert!(pair[1].2.ends_with(&uuid), "the same request is followed");
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap >= time::Duration::seconds(1),
            "reads at least 1 s apart, got {gap}"
        );
    }
}

#[tokio::test]
async fn a_conflict_resumes_the_existing_request_without_a_second_put() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app").merge_queue(true));
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/resume").await;
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 3,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    // An earlier attempt (a crash after its PUT) left a pending request.
    let (status, first) = rest(
        &sim,
        reqwest::Method::PUT,
        &format!("/repos/{REPO}/pulls/{n}/merge-async"),
        json!({ "merge_action": "default", "sha": head }),
    )
    .await;
    assert_eq!(status, 202, "{first}");
    let uuid = first["details"]["uuid"].as_str().expect("uuid").to_owned();

    sim.clear_requests();
    let outcome = github
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(&head),
                ..MergeParams::default()
            },
        )
        .await
        .expect("resumed");
    assert_eq!(outcome, MergeOutcome::Queued);
    let served = sim.requests();
    let puts: Vec<_> = served.iter().filter(|r| r.method == "PUT").collect();
    assert_eq!(puts.len(), 1, "no second PUT: {served:?}");
    assert_eq!(puts[0].status, 409);
    let gets: Vec<_> = served
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/merge-async/"))
        .collect();
    assert!(!gets.is_empty());
    assert!(gets.iter().all(|r| r.path.ends_with(&uuid)), "{gets:?}");
}

#[tokio::test]
async fn expired_requests_moved_heads_and_the_budget() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let (n, head) = open_change(&github, "wq/expire").await;

    // The result is kept 0 s: gone at the first read.
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 1000,
            fail_next: None,
            ttl_seconds: 0,
        },
    )
    .expect("script");
    let expired = github
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(&head),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("expired");
    assert_eq!(expired.kind, ForgeErrorKind::NotFound, "{expired}");
    assert!(expired.message.contains("expired"), "{}", expired.message);

    // Still pending after the budget: unavailable, and nothing merged.
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 1000,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let patient = client(&sim).with_merge_polling(Duration::from_secs(1), Duration::from_secs(2));
    let started = std::time::Instant::now();
    let error = patient
        .merge_change(
            REPO,
            n,
            &MergeParams {
                expected_head_sha: Some(&head),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("budget");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("still pending"), "{}", error.message);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(sim.github_pr(REPO, n).expect("pr")["merged"], false);

    // A head that moved while the request was pending: conflict.
    let (m, _) = open_change(&github, "wq/moved").await;
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 1,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let moved = github
        .merge_change(
            REPO,
            m,
            &MergeParams {
                expected_head_sha: Some(STALE_SHA),
                ..MergeParams::default()
            },
        )
        .await
        .expect_err("moved head");
    assert_eq!(moved.kind, ForgeErrorKind::Conflict, "{moved}");
    assert!(
        moved.message.contains("Head branch was modified"),
        "{}",
        moved.message
    );
    assert_eq!(sim.github_pr(REPO, m).expect("pr")["merged"], false);
}

/// Scripted answers: (status, body) in order.
type Script = Vec<(u16, Value)>;

/// A server answering `PUT .../merge-async` and the poll with scripted
/// (status, body) pairs, in order; for answers forge-sim cannot give.
async fn scripted_github(answers: Script) -> (String, Arc<Mutex<Vec<String>>>) {
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let answers = answers.clone();
        let log = log.clone();
        async move {
            log.lock()
                .expect("log")
                .push(format!("{} {}", request.method(), request.uri().path()));
            let (status, body) = answers
                .lock()
                .expect("answers")
                .next()
                .unwrap_or((500, json!({ "message": "script exhausted" })));
            (
                StatusCode::from_u16(status).expect("status"),
                axum::Json(body),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test]
async fn merge_answers_the_simulator_cannot_give_fail_closed() {
    let head = "0123456789abcdef0123456789abcdef01234567";
    let bound = MergeParams {
        expected_head_sha: Some(head),
        ..MergeParams::default()
    };
    let cases: Vec<(Script, ForgeErrorKind, &str)> = vec![
        (
            vec![(
                202,
                json!({ "status": "pending", "details": { "message": "in progress" } }),
            )],
            ForgeErrorKind::Rejected,
            "without details.uuid",
        ),
        (
            vec![(200, json!({ "status": "scheduled", "details": {} }))],
            ForgeErrorKind::Rejected,
            "\"scheduled\"",
        ),
        (
            vec![
                (
                    202,
                    json!({ "status": "pending", "details": { "uuid": "u-1" } }),
                ),
                (200, json!({ "status": "teleported" })),
            ],
            ForgeErrorKind::Rejected,
            "\"teleported\"",
        ),
        (
            vec![(
                409,
                json!({
                    "message": "Head branch was modified. Review and try the merge again.",
                    "details": { "expected_head_sha": head },
                }),
            )],
            ForgeErrorKind::Conflict,
            head,
        ),
        (
            // A pending request that binds no head is not ours to follow.
            vec![(
                409,
                json!({
                    "message": "A merge request is already in progress",
                    "status": "pending",
                    "details": { "uuid": "u-unbound" },
                }),
            )],
            ForgeErrorKind::Conflict,
            "already in progress",
        ),
        (
            vec![(405, json!({ "message": "Pull Request is not mergeable" }))],
            ForgeErrorKind::Rejected,
            "Pull Request is not mergeable",
        ),
        (
            vec![(
                422,
                json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "field": "merge_method", "code": "invalid" }] }),
            )],
            ForgeErrorKind::Invalid,
            "merge_method",
        ),
        (
            vec![
                (
                    202,
                    json!({ "status": "pending", "details": { "uuid": "u-2" } }),
                ),
                (404, json!({ "message": "Not Found" })),
            ],
            ForgeErrorKind::NotFound,
            "expired",
        ),
    ];
    for (answers, kind, needle) in cases {
        let (url, seen) = scripted_github(answers.clone()).await;
        let github = GithubClient::new(&config(&url)).expect("client");
        let error = github
            .merge_change(REPO, 5, &bound)
            .await
            .expect_err("fails closed");
        assert_eq!(error.kind, kind, "{answers:?}: {error}");
        assert!(error.message.contains(needle), "{answers:?}: {error}");
        let seen = seen.lock().expect("log").clone();
        assert_eq!(seen[0], format!("PUT /repos/{REPO}/pulls/5/merge-async"));
        assert_eq!(seen.len(), answers.len(), "{seen:?}");
    }

    // Merged and enqueued after a pending read.
    for (word, outcome) in [
        ("merged", MergeOutcome::Merged { commit_sha: None }),
        ("enqueued", MergeOutcome::Queued),
    ] {
        let (url, seen) = scripted_github(vec![
            (
                202,
                json!({ "status": "pending", "details": { "uuid": "u-3" } }),
            ),
            (200, json!({ "status": word, "details": {} })),
        ])
        .await;
        let github = GithubClient::new(&config(&url)).expect("client");
        assert_eq!(
            github.merge_change(REPO, 5, &bound).await.expect("done"),
            outcome
        );
        assert_eq!(
            seen.lock().expect("log")[1],
            format!("GET /repos/{REPO}/pulls/5/merge-async/u-3")
        );
    }
}

/// A status read that hangs does not stretch the merge past its budget:
/// the call ends at the budget, not at the (longer) request timeout.
#[tokio::test]
async fn the_merge_budget_bounds_a_hanging_read() {
    let app = axum::Router::new().fallback(|request: axum::extract::Request| async move {
        if request.method() == reqwest::Method::PUT {
            (
                StatusCode::ACCEPTED,
                axum::Json(json!({ "status": "pending", "details": { "uuid": "u-slow" } })),
            )
        } else {
            // The read never gets an answer.
            std::future::pending::<()>().await;
            (StatusCode::OK, axum::Json(json!({ "status": "merged" })))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut config = config(&url);
    config.timeout_seconds = 30;
    let github = GithubClient::new(&config)
        .expect("client")
        .with_merge_polling(Duration::from_secs(1), Duration::from_secs(3));
    let error = github
        .merge_change(REPO, 5, &MergeParams::default())
        .await
        .expect_err("no final answer");
    assert_eq!(error.kind, ForgeErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("3 s budget"), "{error}");
}

#[test]
fn githubs_documented_signature_example() {
    let mut config = config("https://api.github.com");
    config.webhook_secret = Some("It's a Secret to Everybody".into());
    let github = GithubClient::new(&config).expect("client");
    let body = b"Hello, World!";
    let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let parse = |event: &str, signature: Option<&str>, body: &[u8]| {
        let mut headers = vec![("x-github-event", event)];
        if let Some(signature) = signature {
            headers.push(("x-hub-signature-256", signature));
        }
        github.parse_webhook(&headers, body)
    };
    assert!(matches!(
        parse("ping", Some(signature), body),
        Ok(ForgeEvent::Ignored { .. })
    ));
    assert!(
        matches!(
            parse("pull_request", Some(signature), body),
            Err(WebhookRejection::Malformed(_))
        ),
        "authentic, but not JSON"
    );
    let flipped_signature = signature.replace("757107", "757106");
    let mut flipped_body = body.to_vec();
    flipped_body[0] ^= 0x01;
    for (signature, body) in [
        (Some(flipped_signature.as_str()), &body[..]),
        (Some(signature), &flipped_body[..]),
        (None, &body[..]),
        (
            Some("sha1=757107ea0eb2509fc211221cce984b8a37570b6d"),
            &body[..],
        ),
        (Some("sha256=not-hex"), &body[..]),
    ] {
        assert!(
            matches!(
                parse("ping", signature, body),
                Err(WebhookRejection::Unauthenticated(_))
            ),
            "{signature:?}"
        );
    }
    config.webhook_secret = None;
    let unconfigured = GithubClient::new(&config).expect("client");
    assert!(matches!(
        unconfigured.parse_webhook(
            &[
                ("x-github-event", "ping"),
                ("x-hub-signature-256", signature)
            ],
            body
        ),
        Err(WebhookRejection::Unauthenticated(_))
    ));
}

#[tokio::test]
async fn the_simulators_webhook_deliveries_parse_into_events() {
    let sim = start_stepped_sim().await;
    let receiver = Receiver::start().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app")
            .merge_queue(true)
            .webhook(&receiver.url, SECRET)
            .checks(&[
                CheckScript::new("ci", JobOutcome::Success),
                CheckScript::new("lint", JobOutcome::Success).as_status(),
            ]),
    );
    sim.github_script_merge_async(
        REPO,
        MergeAsyncScript {
            pending_ticks: 0,
            ..MergeAsyncScript::default()
        },
    )
    .expect("script");
    let github = client(&sim);
    let (n, _) = open_change(&github, "wq/hooks").await;
    sim.github_push_human_commit(REPO, "wq/hooks", &[("more.txt", Some("more"))], "more")
        .expect("push");
    let labels = vec!["workqueue".to_owned()];
    github
        .update_change(
            REPO,
            n,
            &ChangeUpdate {
                title: Some("Renamed"),
                labels: Some(LabelChange {
                    add: &labels,
                    remove: &[],
                }),
                ..ChangeUpdate::default()
            },
        )
        .await
        .expect("update");
    sim.github_set_draft(REPO, n, true).expect("draft");
    sim.github_set_draft(REPO, n, false).expect("ready");
    sim.github_approve(REPO, n, "alice").expect("approve");
    sim.github_request_changes(REPO, n, "bob", "no")
        .expect("changes");
    for _ in 0..3 {
        sim.tick();
    }
    let head = sim.github_branch_head(REPO, "wq/hooks").expect("head");
    assert_eq!(
        github
            .merge_change(
                REPO,
                n,
                &MergeParams {
                    expected_head_sha: Some(&head),
                    ..MergeParams::default()
                },
            )
            .await
            .expect("enqueue"),
        MergeOutcome::Queued
    );
    loop {
        let change = github.get_change(REPO, n).await.expect("get");
        if change.state == ChangeState::Merged {
            break;
        }
    }
    let (closing, _) = open_change(&github, "wq/closing").await;
    for open in [false, true] {
        github
            .update_change(
                REPO,
                closing,
                &ChangeUpdate {
                    open: Some(open),
                    ..ChangeUpdate::default()
                },
            )
            .await
            .expect("close/reopen");
    }
    assert!(sim.flush_webhooks(Duration::from_secs(10)).await);

    let received: Vec<_> = receiver.all().iter().map(Received::parts).collect();
    assert!(!received.is_empty());
    let mut changes: Vec<(u64, ChangeAction, ChangeState)> = Vec::new();
    let mut queue: Vec<(u64, String)> = Vec::new();
    let mut checks: Vec<(Vec<u64>, Option<String>, CiStatus)> = Vec::new();
    for (headers, body) in &received {
        let event = github
            .parse_webhook(&header_refs(headers), body)
            .expect("authentic");
        match event {
            ForgeEvent::Change {
                project,
                number,
                action,
                state,
                source_branch,
                head_sha,
                label,
            } => {
                assert_eq!(project, REPO);
                assert!(source_branch.is_some() && head_sha.is_some());
                assert_eq!(label.is_some(), action == ChangeAction::Labeled);
                changes.push((number, action, state));
            }
            ForgeEvent::Queue {
                project,
                number,
                action,
            } => {
                assert_eq!(project, REPO);
                queue.push((number, action));
            }
            ForgeEvent::Checks {
                project,
                sha,
                ref_name,
                numbers,
                status,
            } => {
                assert_eq!(project, REPO);
                assert!(sha.is_some());
                checks.push((numbers, ref_name, status));
            }
            other => panic!("unexpected event {other:?}"),
        }
        // The same delivery with one body byte changed is refused.
        let mut tampered = body.clone();
        if let Some(last) = tampered.last_mut() {
            *last ^= 0x20;
        }
        assert!(matches!(
            github.parse_webhook(&header_refs(headers), &tampered),
            Err(WebhookRejection::Unauthenticated(_))
        ));
    }
    for expected in [
        (n, ChangeAction::Opened, ChangeState::Open),
        (n, ChangeAction::Pushed, ChangeState::Open),
        (n, ChangeAction::Updated, ChangeState::Open),
        (n, ChangeAction::Approved, ChangeState::Open),
        (n, ChangeAction::Other, ChangeState::Open),
        (n, ChangeAction::Merged, ChangeState::Merged),
        (closing, ChangeAction::Closed, ChangeState::Closed),
        (closing, ChangeAction::Reopened, ChangeState::Open),
    ] {
        assert!(changes.contains(&expected), "{expected:?} in {changes:?}");
    }
    for expected in ["enqueued", "checks_requested", "destroyed"] {
        assert!(
            queue
                .iter()
                .any(|(number, action)| *number == n && action == expected),
            "{expected} in {queue:?}"
        );
    }
    assert!(
        checks
            .iter()
            .any(|(numbers, ref_name, status)| numbers == &[n]
                && ref_name.as_deref() == Some("wq/hooks")
                && *status == CiStatus::Success),
        "a check run of the PR head: {checks:?}"
    );
    assert!(
        checks
            .iter()
            .any(|(numbers, _, status)| numbers.is_empty() && *status == CiStatus::Pending),
        "a pending commit status: {checks:?}"
    );
    assert!(
        checks.iter().any(|(_, ref_name, _)| ref_name
            .as_deref()
            .is_some_and(|r| r.starts_with("gh-readonly-queue/"))),
        "checks of the merge group: {checks:?}"
    );
}

/// A delivery signed like GitHub signs it.
fn signed(event: &str, payload: &Value) -> (Vec<(String, String)>, Vec<u8>) {
    let body = serde_json::to_vec(payload).expect("json");
    let signature = forge_sim::github::sign::signature_256(SECRET.as_bytes(), &body);
    (
        vec![
            ("x-github-event".to_owned(), event.to_owned()),
            ("x-hub-signature-256".to_owned(), signature),
        ],
        body,
    )
}

#[test]
fn deliveries_the_simulator_does_not_send() {
    let github = GithubClient::new(&config("https://api.github.com")).expect("client");
    let parse = |event: &str, payload: Value| {
        let (headers, body) = signed(event, &payload);
        github.parse_webhook(&header_refs(&headers), &body)
    };
    let repository = json!({ "full_name": REPO });
    let pull_request = json!({ "number": 4, "state": "open", "merged": false, "head": { "ref": "wq/x", "sha": STALE_SHA } });

    assert_eq!(
        parse(
            "issue_comment",
            json!({
                "action": "created", "repository": repository,
                "issue": { "number": 4, "pull_request": { "url": "x" } },
                "comment": { "id": 77, "body": "hello", "user": { "login": "carol" } },
            })
        ),
        Ok(ForgeEvent::Note {
            project: REPO.into(),
            number: 4,
            note_id: 77,
            author: "carol".into(),
            body: "hello".into(),
        })
    );
    assert!(matches!(
        parse(
            "issue_comment",
            json!({ "action": "created", "repository": repository, "issue": { "number": 5 }, "comment": { "id": 1, "body": "x" } })
        ),
        Ok(ForgeEvent::Ignored { .. })
    ));
    let change = |action: ChangeAction| {
        Ok(ForgeEvent::Change {
            project: REPO.into(),
            number: 4,
            action,
            state: ChangeState::Open,
            source_branch: Some("wq/x".into()),
            head_sha: Some(STALE_SHA.into()),
            label: None,
        })
    };
    assert_eq!(
        parse(
            "pull_request_review",
            json!({ "action": "dismissed", "repository": repository, "pull_request": pull_request, "review": { "state": "dismissed" } })
        ),
        change(ChangeAction::Unapproved)
    );
    assert_eq!(
        parse(
            "pull_request_review",
            json!({ "action": "submitted", "repository": repository, "pull_request": pull_request, "review": { "state": "commented" } })
        ),
        change(ChangeAction::Other)
    );
    assert_eq!(
        parse(
            "pull_request_review_thread",
            json!({ "action": "resolved", "repository": repository, "pull_request": pull_request, "thread": {} })
        ),
        change(ChangeAction::Other)
    );
    // `labeled` names its label (the handler tells its own labels from a
    // person's); `unlabeled` is an update like any other.
    let labeled = parse(
        "pull_request",
        json!({ "action": "labeled", "repository": repository, "pull_request": pull_request, "label": { "name": "workqueue" } }),
    );
    match labeled {
        Ok(ForgeEvent::Change {
            action: ChangeAction::Labeled,
            label,
            ..
        }) => assert_eq!(label.as_deref(), Some("workqueue")),
        other => panic!("labeled: {other:?}"),
    }
    assert_eq!(
        parse(
            "pull_request",
            json!({ "action": "unlabeled", "repository": repository, "pull_request": pull_request, "label": { "name": "workqueue" } })
        ),
        change(ChangeAction::Updated)
    );
    assert_eq!(
        parse(
            "pull_request",
            json!({ "action": "dequeued", "repository": repository, "pull_request": pull_request, "reason": "MANUAL" })
        ),
        Ok(ForgeEvent::Queue {
            project: REPO.into(),
            number: 4,
            action: "dequeued".into()
        })
    );
    assert!(matches!(
        parse(
            "merge_group",
            json!({ "action": "checks_requested", "repository": repository, "merge_group": { "head_ref": "refs/heads/main" } })
        ),
        Ok(ForgeEvent::Ignored { .. })
    ));
    assert_eq!(
        parse(
            "check_suite",
            json!({ "action": "completed", "repository": repository, "check_suite": {
                "head_sha": STALE_SHA, "head_branch": "wq/x", "status": "completed",
                "conclusion": "failure", "pull_requests": [{ "number": 4 }, { "number": 6 }],
            } })
        ),
        Ok(ForgeEvent::Checks {
            project: REPO.into(),
            sha: Some(STALE_SHA.into()),
            ref_name: Some("wq/x".into()),
            numbers: vec![4, 6],
            status: CiStatus::Failed,
        })
    );
    assert_eq!(
        parse(
            "status",
            json!({ "repository": repository, "sha": STALE_SHA, "state": "error", "branches": [] })
        ),
        Ok(ForgeEvent::Checks {
            project: REPO.into(),
            sha: Some(STALE_SHA.into()),
            ref_name: None,
            numbers: vec![],
            status: CiStatus::Failed,
        })
    );
    assert!(matches!(
        parse("push", json!({ "ref": "refs/heads/main" })),
        Ok(ForgeEvent::Ignored { .. })
    ));
    assert_eq!(
        parse(
            "pull_request",
            json!({ "action": "opened", "repository": repository, "pull_request": { "state": "open" } })
        ),
        Err(WebhookRejection::Malformed(
            "pull_request.number: missing".into()
        ))
    );
    let (headers, _) = signed("pull_request", &json!({}));
    let body = b"{not json";
    let signature = forge_sim::github::sign::signature_256(SECRET.as_bytes(), body);
    let headers = [
        (headers[0].0.as_str(), headers[0].1.as_str()),
        ("x-hub-signature-256", signature.as_str()),
    ];
    assert!(matches!(
        github.parse_webhook(&headers, body),
        Err(WebhookRejection::Malformed(_))
    ));
}

#[tokio::test]
async fn forges_are_built_from_config_with_github() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let forges = Forges::from_config(&ForgesConfig {
        instances: BTreeMap::from([("gh".to_owned(), config(&sim.github_url()))]),
    })
    .expect("github is supported");
    let forge = forges.get("gh").expect("configured");
    assert_eq!(forge.kind(), ForgeKind::Github);
    assert_eq!(
        forge.branch_head(REPO, "main").await.expect("main"),
        sim.github_branch_head(REPO, "main")
    );
    let mut no_token = config(&sim.github_url());
    no_token.token = None;
    no_token.token_env = Some("WQ_TEST_SURELY_UNSET_GITHUB_TOKEN".into());
    let error = Forges::from_config(&ForgesConfig {
        instances: BTreeMap::from([("gh".to_owned(), no_token)]),
    })
    .expect_err("no token");
    assert!(error.message.starts_with("forges.gh."), "{}", error.message);
    let wrong = GithubClient::new(&config(&sim.github_url()))
        .expect("client")
        .get_change("not-a-repo", 1)
        .await
        .expect_err("project must be owner/repo");
    assert_eq!(wrong.kind, ForgeErrorKind::Invalid);
}

/// The spelling itself is the conformance suite's
/// `project_path_is_the_forges_spelling`.
#[tokio::test]
async fn a_project_is_owner_slash_repo() {
    let sim = start_stepped_sim().await;
    let github = client(&sim);
    let invalid = github
        .project_path("octo")
        .await
        .expect_err("not owner/repo");
    assert_eq!(invalid.kind, ForgeErrorKind::Invalid);
}

#[tokio::test]
async fn branch_protection_reads_classic_protection_and_rulesets() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let protected = |branch: &'static str| {
        let github = &github;
        async move { github.branch_protected(REPO, branch).await.expect(branch) }
    };
    assert!(protected("main").await, "the default branch is protected");
    // A repository without rulesets: its list of them tells, and GitHub is
    // not asked for a name's rules; the list is read again conditionally.
    let asked = |sim: &SimHandle| {
        let log = sim.requests();
        sim.clear_requests();
        let rules = log
            .iter()
            .filter(|r| r.path.contains("/rules/branches/"))
            .count();
        let lists: Vec<u16> = log
            .iter()
            .filter(|r| r.path.ends_with("/rulesets"))
            .map(|r| r.status)
            .collect();
        (rules, lists)
    };
    sim.clear_requests();
    assert!(!protected("wq/free").await, "no such branch, no rules");
    assert_eq!(asked(&sim), (0, vec![200]));
    assert!(!protected("wq/other").await);
    assert_eq!(asked(&sim), (0, vec![304]), "the list did not change");
    // A ruleset that enforces nothing is listed, and still asks for none.
    sim.github_add_ruleset_spec(
        REPO,
        &RulesetSpec {
            name: "trial".into(),
            enforcement: Some("evaluate".into()),
            include: vec!["~ALL".into()],
            exclude: Vec::new(),
            rules: vec!["update".into()],
        },
    )
    .expect("ruleset");
    assert!(
        !protected("wq/free").await,
        "an evaluated ruleset protects nothing"
    );
    assert_eq!(asked(&sim), (0, vec![200]), "the list changed");

    sim.github_push_as(REPO, "stable", &[("s.txt", Some("s\n"))], "s", "alice")
        .expect("push");
    assert!(!protected("stable").await);
    sim.github_protect_branch(REPO, "stable").expect("protect");
    assert!(protected("stable").await, "classic protection");

    // Rulesets apply to names whether or not the branch exists.
    sim.github_add_ruleset(
        REPO,
        &["refs/heads/release/**"],
        &["deletion", "non_fast_forward"],
    )
    .expect("ruleset");
    sim.clear_requests();
    assert!(protected("release/1.0").await);
    assert_eq!(
        asked(&sim),
        (1, vec![200]),
        "an active ruleset: GitHub decides"
    );
    assert!(protected("release/1/hotfix").await);
    assert!(!protected("wq/release/1").await);
    // Content-only rules do not protect; an update rule does.
    sim.github_add_ruleset(REPO, &["refs/heads/docs/*"], &["commit_message_pattern"])
        .expect("ruleset");
    assert!(!protected("docs/x").await);
    sim.github_add_ruleset(REPO, &["refs/heads/docs/*"], &["update"])
        .expect("ruleset");
    assert!(protected("docs/x").await);

    // A server without the rules endpoint: 404 there means no rules.
    sim.add_fault(FaultRule::new(
        "GET",
        "/repos/octo/app/rules/branches/release",
        HttpFault::Status { status: 404 },
    ));
    assert!(!protected("release/2.0").await);

    let missing = github
        .branch_protected("octo/other", "main")
        .await
        .expect_err("no such repository");
    assert_eq!(missing.kind, ForgeErrorKind::NotFound);
}

const SHUTDOWN: &str = "##[error]The runner has received a shutdown signal. This can happen when \
                        the runner service is stopped, or a manually started runner is canceled.";

/// Ticks the stepped simulator until every workflow job ended.
fn run_workflow(sim: &SimHandle) {
    for _ in 0..20 {
        let jobs = sim.github_workflow_jobs(REPO).expect("jobs");
        if !jobs.is_empty() && jobs.iter().all(|j| j["status"] == "completed") {
            return;
        }
        sim.tick();
    }
    panic!("the workflow never ended");
}

#[tokio::test]
async fn actions_jobs_logs_behind_a_redirect_without_the_token_and_re_runs() {
    use wq_forge::{CiHeadCheck, CiJobs};
    let sim = start_stepped_sim().await;
    let receiver = Receiver::start().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").webhook(&receiver.url, SECRET),
    );
    sim.github_script_workflow(
        REPO,
        "CI",
        vec![
            forge_sim::JobSpec::new("lint", JobOutcome::Success),
            forge_sim::JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", SHUTDOWN),
            ),
        ],
    )
    .expect("workflow");
    let github = client(&sim);
    let ci: &dyn CiJobs = github.ci_jobs().expect("GitHub offers CI jobs");
    assert_eq!(ci.head_check(), CiHeadCheck::HeadSha);
    let (n, head) = open_change(&github, "wq/actions").await;
    run_workflow(&sim);
    let change = github.get_change(REPO, n).await.expect("get");
    assert_eq!(change.ci, CiStatus::Failed);
    assert_eq!(
        change.pipeline_id, None,
        "a pull request has no head pipeline"
    );

    // The job's webhook becomes a Job event of its workflow run.
    assert!(sim.flush_webhooks(Duration::from_secs(10)).await);
    let events: Vec<ForgeEvent> = receiver
        .all()
        .iter()
        .filter(|r| matches!(r.event(), "workflow_job" | "check_run"))
        .map(|r| {
            let (headers, body) = r.parts();
            github
                .parse_webhook(&header_refs(&headers), &body)
                .expect("parses")
        })
        .collect();
    let failed: Vec<&ForgeEvent> = events
        .iter()
        .filter(|e| matches!(e, ForgeEvent::Job { status, .. } if status == "failed"))
        .collect();
    assert_eq!(
        failed.len(),
        2,
        "the workflow_job and the Actions check run: {events:?}"
    );
    let ForgeEvent::Job {
        project,
        pipeline_id: run_id,
        job_id,
        name,
        failure_reason,
        ref_name,
        sha,
        finished_at,
        ..
    } = failed
        .iter()
        .find(|e| {
            matches!(
                e,
                ForgeEvent::Job {
                    failure_reason: Some(_),
                    ..
                }
            )
        })
        .expect("the workflow_job delivery")
    else {
        unreachable!()
    };
    assert_eq!(project, REPO);
    assert_eq!(name, "unit");
    assert_eq!(
        failure_reason.as_deref(),
        Some("Run unit"),
        "the failed step"
    );
    assert_eq!(ref_name.as_deref(), Some("wq/actions"));
    assert_eq!(sha.as_deref(), Some(head.as_str()));
    assert!(finished_at.is_some());
    let ForgeEvent::Job {
        pipeline_id,
        job_id: check_run_id,
        failure_reason: None,
        ..
    } = failed
        .iter()
        .find(|e| {
            matches!(
                e,
                ForgeEvent::Job {
                    failure_reason: None,
                    ..
                }
            )
        })
        .expect("the check run delivery")
    else {
        unreachable!()
    };
    assert_eq!((pipeline_id, check_run_id), (run_id, job_id));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ForgeEvent::Job { status, .. } if status == "running")),
        "in_progress is a running job: {events:?}"
    );

    let jobs = ci.pipeline_jobs(REPO, *run_id).await.expect("jobs");
    assert_eq!(jobs.len(), 2);
    let unit = jobs.iter().find(|j| j.name == "unit").expect("unit");
    assert_eq!(unit.id, *job_id);
    assert_eq!(unit.status, "failed");
    assert_eq!(unit.failure_reason.as_deref(), Some("Run unit"));
    assert_eq!(unit.head_sha.as_deref(), Some(head.as_str()));
    assert_eq!(unit.stage.as_deref(), Some("CI"), "the workflow's name");
    assert!(!unit.retried);
    let lint = jobs.iter().find(|j| j.name == "lint").expect("lint");
    assert_eq!(
        (lint.status.as_str(), &lint.failure_reason),
        ("success", &None)
    );

    // The log: the API's 302 is followed once, to a URL that refuses the
    // token; the client sends none there.
    let trace = ci.job_trace(REPO, *job_id).await.expect("trace");
    assert!(
        trace.contains("The runner has received a shutdown signal"),
        "{trace}"
    );
    assert!(trace.ends_with("Cleaning up orphan processes\n"), "{trace}");
    let log_reads: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/_logs/"))
        .collect();
    assert_eq!(log_reads.len(), 1);
    assert_eq!(log_reads[0].status, 200, "the token was not sent along");

    let retried = ci
        .retry_job(REPO, *job_id)
        .await
        .expect("retry")
        .expect("the new attempt is listed");
    assert_ne!(retried.id, *job_id);
    assert_eq!(retried.name, "unit");
    assert_eq!(retried.pipeline_id, *run_id);
    assert!(
        matches!(retried.status.as_str(), "pending" | "running"),
        "each request ticks the simulator: {retried:?}"
    );
    run_workflow(&sim);
    let jobs = ci.pipeline_jobs(REPO, *run_id).await.expect("jobs");
    assert_eq!(jobs.len(), 3, "every attempt");
    assert!(jobs.iter().find(|j| j.id == *job_id).unwrap().retried);
    let new = jobs.iter().find(|j| j.id == retried.id).unwrap();
    assert_eq!((new.status.as_str(), new.retried), ("success", false));
    assert_eq!(
        github.get_change(REPO, n).await.expect("get").ci,
        CiStatus::Success
    );
    let error = ci.retry_job(REPO, 424_242).await.expect_err("no such job");
    assert_eq!(error.kind, ForgeErrorKind::NotFound);
}

/// A GitHub whose job logs redirect: job 1 to a log (relative Location),
/// job 2 to a second redirect, job 3 to an `ftp:` URL. Records each
/// request's path and whether it carried `Authorization`.
async fn redirecting_logs(log: String) -> (String, Arc<Mutex<Vec<(String, bool)>>>) {
    use axum::response::IntoResponse;
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let record = record.clone();
        let log = log.clone();
        async move {
            let path = request.uri().path().to_owned();
            let authorized = request.headers().contains_key("authorization");
            record.lock().expect("log").push((path.clone(), authorized));
            let redirect =
                |to: &str| (StatusCode::FOUND, [("location", to.to_owned())], "").into_response();
            match path.as_str() {
                "/repos/octo/app/actions/jobs/1/logs" => redirect("/blob/1?sig=abc"),
                "/repos/octo/app/actions/jobs/2/logs" => redirect("/hop"),
                "/hop" => redirect("/blob/1?sig=abc"),
                "/repos/octo/app/actions/jobs/3/logs" => redirect("ftp://127.0.0.1/log"),
                "/blob/1" if authorized => (StatusCode::FORBIDDEN, "token sent").into_response(),
                "/blob/1" => (StatusCode::OK, log).into_response(),
                _ => (StatusCode::NOT_FOUND, "{}").into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test]
async fn a_job_log_follows_one_redirect_without_the_token_and_keeps_its_tail() {
    use wq_forge::{CiJobs, TRACE_TAIL_BYTES};
    // A log longer than the tail the client keeps, its end marked.
    let line = "x".repeat(99) + "\n";
    let mut log = line.repeat(TRACE_TAIL_BYTES / line.len() + 100);
    log.push_str("##[error]The operation was canceled.\n");
    let (url, seen) = redirecting_logs(log).await;
    let github = GithubClient::new(&config(&url)).expect("client");
    let ci: &dyn CiJobs = &github;

    let tail = ci.job_trace(REPO, 1).await.expect("the log");
    assert!(tail.len() <= TRACE_TAIL_BYTES, "{}", tail.len());
    assert!(tail.starts_with('x'), "from a line start");
    assert!(tail.ends_with("##[error]The operation was canceled.\n"));
    assert_eq!(
        seen.lock().unwrap().clone(),
        [
            ("/repos/octo/app/actions/jobs/1/logs".to_owned(), true),
            ("/blob/1".to_owned(), false),
        ],
        "the token goes to the API only"
    );

    seen.lock().unwrap().clear();
    let error = ci.job_trace(REPO, 2).await.expect_err("a second redirect");
    assert_eq!(error.kind, ForgeErrorKind::Rejected, "{error}");
    assert!(error.message.contains("/blob/1"), "{}", error.message);
    assert_eq!(seen.lock().unwrap().len(), 2, "not followed");

    let error = ci.job_trace(REPO, 3).await.expect_err("not http(s)");
    assert_eq!(error.kind, ForgeErrorKind::Rejected, "{error}");
    assert!(error.message.contains("ftp"), "{}", error.message);

    let error = ci.job_trace(REPO, 4).await.expect_err("no such job");
    assert_eq!(error.kind, ForgeErrorKind::NotFound, "{error}");
}

/// A commit's tree never changes: the empty-diff check reads only the
/// commits this client did not make or read before (the base branch moves,
/// so a branch name is always read).
#[tokio::test]
async fn the_empty_diff_check_reads_no_commit_the_client_made() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let head = commit(
        &github,
        "wq/trees",
        CommitMode::CreateBranch,
        &[action(FileOp::Create, "t.txt", Some(b"t\n"))],
    )
    .await
    .expect("commit");
    sim.clear_requests();
    assert!(
        !github
            .diff_is_empty(REPO, "main", &head)
            .await
            .expect("diff")
    );
    assert_eq!(
        requests(&sim),
        [("GET".to_owned(), format!("/repos/{REPO}/commits/main"))],
        "the new commit's tree is known"
    );
    // A commit made elsewhere is read once.
    let other = sim
        .github_push_human_commit(REPO, "other", &[("t.txt", Some("t\n"))], "same content")
        .expect("push");
    sim.clear_requests();
    assert!(
        github
            .diff_is_empty(REPO, &other, &head)
            .await
            .expect("diff")
    );
    assert!(
        github
            .diff_is_empty(REPO, &other, &head)
            .await
            .expect("diff")
    );
    assert_eq!(
        requests(&sim),
        [("GET".to_owned(), format!("/repos/{REPO}/commits/{other}"))],
        "read once"
    );
}

/// The base is one GraphQL query (its head, tree and the paths written).
/// One tree request carries UTF-8 content inline (GitHub writes it out as a
/// blob); only other bytes take a blob request. A file the request writes
/// inline can be moved or chmodded by a later action of the same request.
/// The push's answer says whether the commit changes anything: its tree is
/// the base's exactly when it does not.
#[tokio::test]
async fn a_push_sends_text_inline_and_tells_an_empty_commit() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    sim.clear_requests();
    let push = |branch: &'static str, actions: Vec<FileAction>| {
        let github = &github;
        async move {
            github
                .commit_files(&CommitRequest {
                    project: REPO,
                    branch,
                    base_branch: "main",
                    mode: CommitMode::CreateBranch,
                    message: "workqueue change",
                    actions: &actions,
                })
                .await
                .expect("commit")
        }
    };
    let mut moved = action(FileOp::Move, "docs/moved.txt", None);
    moved.previous_path = Some("b.txt".into());
    let mut chmod = action(FileOp::Chmod, "run.sh", None);
    chmod.execute_filemode = Some(true);
    let pushed = push(
        "wq/inline",
        vec![
            action(FileOp::Create, "a.txt", Some("é\n".as_bytes())),
            action(FileOp::Create, "b.txt", Some(b"b\n")),
            action(FileOp::Create, "run.sh", Some(b"#!/bin/sh\n")),
            moved,
            chmod,
        ],
    )
    .await;
    assert_eq!(pushed.empty, Some(false));
    let served = requests(&sim);
    let methods: Vec<(&str, &str)> = served
        .iter()
        .map(|(method, path)| (method.as_str(), path.as_str()))
        .collect();
    assert_eq!(
        methods,
        [
            ("POST", "/graphql"),
            ("POST", "/repos/octo/app/git/trees"),
            ("POST", "/repos/octo/app/git/commits"),
            ("POST", "/repos/octo/app/git/refs"),
        ],
        "one query for the base, no blob request for text"
    );
    let file = |path: &str| sim.github_file(REPO, "wq/inline", path);
    assert_eq!(file("a.txt").as_deref(), Some("é\n".as_bytes()));
    assert_eq!(file("b.txt"), None, "moved away");
    assert_eq!(file("docs/moved.txt").as_deref(), Some(&b"b\n"[..]));
    assert_eq!(file("run.sh").as_deref(), Some(&b"#!/bin/sh\n"[..]));
    assert_eq!(modes(&sim, &pushed.sha).await["run.sh"], "100755");

    // Bytes that are not UTF-8 go through a blob of their own (a force
    // update takes the Git data API).
    sim.clear_requests();
    let binary = github
        .commit_files(&CommitRequest {
            project: REPO,
            branch: "wq/binary",
            base_branch: "main",
            mode: CommitMode::ForceUpdate,
            message: "workqueue change",
            actions: &[action(
                FileOp::Create,
                "data.bin",
                Some(&[0xff, 0x00, 0xfe]),
            )],
        })
        .await
        .expect("commit");
    assert_eq!(
        requests(&sim)
            .iter()
            .filter(|(method, path)| method == "POST" && path.ends_with("/git/blobs"))
            .count(),
        1
    );
    assert_eq!(
        sim.github_file(REPO, "wq/binary", "data.bin").as_deref(),
        Some(&[0xff, 0x00, 0xfe][..])
    );
    assert_eq!(binary.empty, Some(false));

    // The same content as the base: the same tree, an empty commit, told
    // by both ways of pushing.
    let readme = sim
        .github_file(REPO, "main", "README.md")
        .expect("main has a README");
    let same = push(
        "wq/same",
        vec![action(FileOp::Update, "README.md", Some(&readme))],
    )
    .await;
    assert_eq!(same.empty, Some(true));
    let mut kept = action(FileOp::Update, "README.md", Some(&readme));
    kept.execute_filemode = Some(false);
    let mut moved_back = action(FileOp::Move, "README.md", None);
    moved_back.previous_path = Some("README.moved".into());
    let same_again = push(
        "wq/same-again",
        vec![
            kept,
            {
                let mut away = action(FileOp::Move, "README.moved", None);
                away.previous_path = Some("README.md".into());
                away
            },
            moved_back,
        ],
    )
    .await;
    assert_eq!(same_again.empty, Some(true));
    assert!(
        github
            .diff_is_empty(REPO, "main", &same.sha)
            .await
            .expect("diff")
    );
}

/// A commit that creates its branch, with regular files only, is one
/// GraphQL request after the base's: `createRef` at the base head and
/// `createCommitOnBranch` on it. Binary content needs no blob request.
#[tokio::test]
async fn a_new_branch_is_one_graphql_request_after_the_base() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let main = sim.github_branch_head(REPO, "main").expect("main");
    sim.clear_requests();
    let message = "Add the data\n\nWhy it is needed.";
    let pushed = github
        .commit_files(&CommitRequest {
            project: REPO,
            branch: "wq/data",
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message,
            actions: &[
                action(FileOp::Create, "data.bin", Some(&[0xff, 0x00, 0xfe])),
                action(FileOp::Delete, "README.md", None),
            ],
        })
        .await
        .expect("commit");
    assert_eq!(
        requests(&sim),
        [
            ("POST".to_owned(), "/graphql".to_owned()),
            ("POST".to_owned(), "/graphql".to_owned())
        ]
    );
    assert_eq!(pushed.empty, Some(false));
    assert_eq!(
        sim.github_branch_head(REPO, "wq/data"),
        Some(pushed.sha.clone())
    );
    let (_, commit) = rest(
        &sim,
        reqwest::Method::GET,
        &format!("/repos/{REPO}/git/commits/{}", pushed.sha),
        Value::Null,
    )
    .await;
    assert_eq!(commit["message"], message, "the message as given");
    assert_eq!(commit["parents"][0]["sha"], main.as_str());
    assert_eq!(
        sim.github_file(REPO, "wq/data", "data.bin").as_deref(),
        Some(&[0xff, 0x00, 0xfe][..])
    );
    assert_eq!(sim.github_file(REPO, "wq/data", "README.md"), None);
    assert!(
        !github
            .diff_is_empty(REPO, "main", &pushed.sha)
            .await
            .expect("diff")
    );

    // A message GitHub would not give back byte for byte, and an
    // executable file, take the Git data API.
    for (branch, message, executable) in [
        ("wq/message", "Add x\nno blank line", None),
        ("wq/mode", "Add x", Some(true)),
    ] {
        sim.clear_requests();
        let mut write = action(FileOp::Create, "x.sh", Some(b"x\n"));
        write.execute_filemode = executable;
        let pushed = github
            .commit_files(&CommitRequest {
                project: REPO,
                branch,
                base_branch: "main",
                mode: CommitMode::CreateBranch,
                message,
                actions: &[write],
            })
            .await
            .expect("commit");
        let served = paths(&sim);
        assert_eq!(
            served,
            [
                "/graphql",
                "/repos/octo/app/git/trees",
                "/repos/octo/app/git/commits",
                "/repos/octo/app/git/refs"
            ],
            "{branch}"
        );
        let (_, commit) = rest(
            &sim,
            reqwest::Method::GET,
            &format!("/repos/{REPO}/git/commits/{}", pushed.sha),
            Value::Null,
        )
        .await;
        assert_eq!(commit["message"], message, "{branch}");
    }
}

/// The mutations of one request run in order and a failed one does not
/// stop the next. Whatever lands, the branch ends as the request found it
/// unless the whole commit landed: a branch that appeared at the base head
/// between the base's read and the commit is set back and the push is a
/// conflict; one that appeared elsewhere is left alone (nothing was
/// written); a commit refused after the branch was created deletes the
/// branch, and the Git data API answers the refusal. Each error says what
/// was written and taken back on the way.
#[tokio::test]
async fn a_partial_graphql_commit_is_undone() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let main = sim.github_branch_head(REPO, "main").expect("main");
    sim.github_move_branch(REPO, "elsewhere", &main)
        .expect("branch");
    let other = sim
        .github_push_human_commit(REPO, "elsewhere", &[("e.txt", Some("e\n"))], "elsewhere")
        .expect("a commit elsewhere");
    let push = |branch: &'static str, path: &'static str| {
        let github = &github;
        async move {
            github
                .commit_files(&CommitRequest {
                    project: REPO,
                    branch,
                    base_branch: "main",
                    mode: CommitMode::CreateBranch,
                    message: "workqueue change",
                    actions: &[action(FileOp::Create, path, Some(b"x\n"))],
                })
                .await
        }
    };
    // The branch appears while the commit's request is on its way.
    for (branch, at) in [("wq/raced-at-base", &main), ("wq/raced-elsewhere", &other)] {
        sim.clear_requests();
        let mut delayed = FaultRule::new("POST", "/graphql", HttpFault::Delay { millis: 60_000 });
        delayed.skip = 1;
        sim.add_fault(delayed);
        let mut hanging = sim.hanging_requests();
        let (pushed, ()) = tokio::join!(push(branch, "x.txt"), async {
            hanging
                .wait_for(|count| *count == 1)
                .await
                .expect("hanging");
            sim.github_move_branch(REPO, branch, at).expect("branch");
            sim.cancel_hangs();
        });
        let error = pushed.expect_err("the branch exists");
        assert_eq!(error.kind, ForgeErrorKind::Conflict, "{branch}: {error}");
        assert_eq!(
            sim.github_branch_head(REPO, branch).as_deref(),
            Some(at.as_str()),
            "{branch}: as it appeared"
        );
        // The error tells what was written and taken back (it is the
        // failed action's audit record), and nothing where nothing was.
        assert_eq!(
            error.message.contains("was taken back"),
            at == &main,
            "{branch}: {error}"
        );
        let served = paths(&sim);
        let expected: &[&str] = if at == &main {
            // The commit landed on it and was taken back.
            &["/graphql", "/graphql", "/graphql"]
        } else {
            &[
                "/graphql",
                "/graphql",
                "/repos/octo/app/git/trees",
                "/repos/octo/app/git/commits",
                "/repos/octo/app/git/refs",
            ]
        };
        assert_eq!(served, expected, "{branch}");
        sim.clear_faults();
    }

    // A path git refuses: the branch created for it is deleted again, and
    // the tree's refusal is the answer.
    sim.clear_requests();
    let error = push("wq/refused", "docs/../x.txt")
        .await
        .expect_err("refused");
    assert_eq!(error.status, Some(422), "{error}");
    assert!(
        error.message.contains("malformed path component"),
        "{error}"
    );
    assert!(
        error
            .message
            .contains("before it, a GraphQL request created branch wq/refused at")
            && error.message.contains("the branch was deleted again"),
        "the branch made and deleted on the way: {error}"
    );
    assert_eq!(sim.github_branch_head(REPO, "wq/refused"), None);
    let served = paths(&sim);
    assert_eq!(
        served,
        [
            "/graphql",
            "/graphql",
            "/graphql",
            "/repos/octo/app/git/trees"
        ]
    );
}

/// A new pull request's labels go with its first note: the first time by
/// name (`POST issues/:n/labels`, whose answer tells their node ids) and a
/// comment of its own; then, for a pull request this client created, in
/// the note's one GraphQL request by id. A pull request it did not create
/// (no node id kept) takes REST again; without labels, the note alone.
#[tokio::test]
async fn a_new_pull_requests_labels_go_with_its_first_note() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    let github = client(&sim);
    let labels = vec!["workqueue".to_owned(), "Bot".to_owned()];
    let mut notes = Vec::new();
    for (branch, expected) in [
        (
            "wq/first",
            &[
                "/repos/octo/app/issues/1/labels",
                "/repos/octo/app/issues/1/comments",
            ][..],
        ),
        ("wq/second", &["/graphql"][..]),
    ] {
        let (number, _) = open_change(&github, branch).await;
        sim.clear_requests();
        let note = github
            .open_note(REPO, number, &labels, "status")
            .await
            .expect("noted");
        let served = paths(&sim);
        let expected: Vec<String> = expected
            .iter()
            .map(|path| path.replace("/1/", &format!("/{number}/")))
            .collect();
        assert_eq!(served, expected, "{branch}");
        let pr = sim.github_pr(REPO, number).expect("pr");
        let names: Vec<&str> = pr["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .filter_map(|label| label["name"].as_str())
            .collect();
        assert_eq!(names, ["workqueue", "Bot"], "{branch}");
        let comments = github.list_notes(REPO, number).await.expect("notes");
        assert_eq!(comments.len(), 1, "{branch}");
        assert_eq!(
            (comments[0].id, comments[0].body.as_str()),
            (note.id, "status")
        );
        notes.push(note.id);
    }
    // Its node id is taken by the first note: another note on the same
    // pull request is not a new one's.
    sim.clear_requests();
    let (number, _) = open_change(&github, "wq/third").await;
    github
        .open_note(REPO, number, &labels, "first")
        .await
        .expect("noted");
    sim.clear_requests();
    github
        .open_note(REPO, number, &labels, "again")
        .await
        .expect("noted");
    let served = paths(&sim);
    assert_eq!(
        served,
        [
            format!("/repos/octo/app/issues/{number}/labels"),
            format!("/repos/octo/app/issues/{number}/comments")
        ]
    );
    sim.clear_requests();
    github
        .open_note(REPO, number, &[], "no labels")
        .await
        .expect("noted");
    let served = paths(&sim);
    assert_eq!(
        served,
        [format!("/repos/octo/app/issues/{number}/comments")]
    );
}

/// An answer forge-sim does not give: the branch and its commit landed,
/// but the answer leaves out the commit's tree. The push is the commit all
/// the same (the branch is this client's now), and whether it changes
/// anything is left to a comparison (`empty: None`), never an error that
/// would disown the branch.
#[tokio::test]
async fn a_landed_commit_without_its_tree_is_still_the_push() {
    let base = "1111111111111111111111111111111111111111";
    let landed = "3333333333333333333333333333333333333333";
    let (url, seen) = scripted_github(vec![
        (
            200,
            json!({ "data": { "repository": {
                "id": "R_1",
                "ref": { "target": { "oid": base, "tree": { "oid": "2222222222222222222222222222222222222222" }, "f0": null } },
                "branch": null,
            } } }),
        ),
        (
            200,
            json!({ "data": {
                "created": { "ref": { "id": "REF_1" } },
                "commit": { "commit": { "oid": landed, "tree": null }, "ref": { "id": "REF_1" } },
            } }),
        ),
    ])
    .await;
    let github = GithubClient::new(&config(&url)).expect("client");
    let pushed = github
        .commit_files(&CommitRequest {
            project: REPO,
            branch: "wq/x",
            base_branch: "main",
            mode: CommitMode::CreateBranch,
            message: "workqueue change",
            actions: &[action(FileOp::Create, "a.txt", Some(b"a\n"))],
        })
        .await
        .expect("pushed");
    assert_eq!(pushed.sha, landed);
    assert_eq!(pushed.empty, None);
    assert_eq!(
        *seen.lock().expect("log"),
        ["POST /graphql", "POST /graphql"]
    );
}
