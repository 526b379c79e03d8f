//! What differs between the forges for the suite's cases: starting the
//! simulator, creating a project, acting as a person, and the paths and
//! URLs each forge's API uses.

use std::time::Duration;

use forge_sim::github::{GithubRepoSpec, MergeAsyncScript};
use forge_sim::{JobSpec, SimHandle};
use wq_forge::{Forge, ForgeConfig, ForgeKind, ForgeResult, GithubClient, GitlabClient};

pub const SECRET: &str = "hook-secret";

/// One forge of the simulator with a client for it.
pub trait Harness: Sized {
    /// The project every case works in (created by [`Harness::start`]).
    const PROJECT: &'static str;
    /// The API path of `GET /user` on the simulator.
    const USER_PATH: &'static str;
    /// A plain-HTTP API URL off loopback (refused unless configured).
    const REMOTE_HTTP_URL: &'static str;
    /// The same server over HTTPS.
    const REMOTE_HTTPS_URL: &'static str;
    /// The start of the `Location` a redirect of a request on
    /// [`Harness::PROJECT`] names, below the target's URL.
    const REDIRECTED_PATH: &'static str;
    /// Whether the client offers CI jobs ([`Forge::ci_jobs`]).
    const CI_JOBS: bool;

    /// A simulator with [`Harness::PROJECT`] and a client for it (GitLab's
    /// project runs the simulator's default CI, which passes).
    async fn start() -> Self;
    fn sim(&self) -> &SimHandle;
    fn forge(&self) -> &dyn Forge;
    /// A client of this forge's kind for `config`.
    fn client(config: &ForgeConfig) -> ForgeResult<Box<dyn Forge>>;
    /// This forge's config for `url`.
    fn config(url: &str) -> ForgeConfig;
    /// The id of the token's user, when the simulator tells it.
    fn token_user_id(&self) -> Option<u64>;
    /// Creates another project (no CI).
    fn create_project(&self, path: &str);
    /// `author` pushes `files` to a new `branch` of [`Harness::PROJECT`].
    fn push_as(&self, branch: &str, files: &[(&str, Option<&str>)], author: &str);
    /// `author` opens a change request from `branch` into `main`.
    async fn open_as(&self, branch: &str, title: &str, author: &str) -> u64;
    /// A person adds `label` to change request `number` through the
    /// forge's API, with their own token.
    async fn label_as(&self, number: u64, label: &str, author: &str);
    fn branch_head(&self, branch: &str) -> Option<String>;
    /// Lets the simulator's due steps happen (GitLab checks mergeability
    /// in a later tick; GitHub steps on every request).
    fn settle(&self);
    /// A file's content on `reference`.
    fn file(&self, reference: &str, path: &str) -> Option<Vec<u8>>;
    /// Whether a file on `branch` is executable (mode `100755`).
    async fn executable(&self, branch: &str, path: &str) -> bool;
    /// A person commits `files` to `main` directly.
    fn push_to_main(&self, files: &[(&str, Option<&str>)]);
    /// The author name of a commit, as the forge's REST API shows it.
    async fn commit_author(&self, sha: &str) -> serde_json::Value;
    /// A webhook delivery of an event no item acts on (GitLab `Push Hook`,
    /// GitHub `ping`): its headers, authenticated with `secret` when
    /// given, and its body.
    fn delivery(secret: Option<&str>) -> (Vec<(String, String)>, Vec<u8>);
    /// Checks a new note's URL as this forge gives it.
    fn check_note_url(&self, url: Option<&str>);
    /// Replaces [`Harness::PROJECT`]'s CI with `jobs` (GitLab jobs, a
    /// GitHub Actions workflow), run for every new head from now on.
    fn script_ci(&self, jobs: Vec<JobSpec>);
    /// Lets every started CI job finish.
    fn finish_ci(&self);
    /// The pipeline (GitHub: workflow run) of the change request's head.
    async fn head_pipeline(&self, number: u64) -> u64;
}

pub struct Gitlab {
    sim: SimHandle,
    client: GitlabClient,
    project_id: u64,
}

impl Harness for Gitlab {
    const PROJECT: &'static str = "team/app";
    const USER_PATH: &'static str = "/api/v4/user";
    const REMOTE_HTTP_URL: &'static str = "http://gitlab.example.com";
    const REMOTE_HTTPS_URL: &'static str = "https://gitlab.example.com";
    const REDIRECTED_PATH: &'static str = "/api/v4/projects";
    const CI_JOBS: bool = true;

    async fn start() -> Self {
        let sim = forge_sim::testing::start_sim().await;
        let project_id = sim.gitlab_project(Self::PROJECT).create().expect("project");
        let client = GitlabClient::new(&Self::config(&sim.base_url())).expect("client");
        Self {
            sim,
            client,
            project_id,
        }
    }

    fn sim(&self) -> &SimHandle {
        &self.sim
    }

    fn forge(&self) -> &dyn Forge {
        &self.client
    }

    fn client(config: &ForgeConfig) -> ForgeResult<Box<dyn Forge>> {
        Ok(Box::new(GitlabClient::new(config)?))
    }

    fn config(url: &str) -> ForgeConfig {
        ForgeConfig::literal(ForgeKind::Gitlab, url, forge_sim::DEFAULT_TOKEN, SECRET)
    }

    fn token_user_id(&self) -> Option<u64> {
        Some(
            self.sim
                .add_user(forge_sim::DEFAULT_USERNAME, forge_sim::DEFAULT_TOKEN)
                .id,
        )
    }

    fn create_project(&self, path: &str) {
        self.sim
            .gitlab_project(path)
            .no_ci()
            .create()
            .expect("project");
    }

    fn push_as(&self, branch: &str, files: &[(&str, Option<&str>)], author: &str) {
        self.sim
            .gitlab_push_as(self.project_id, branch, files, "work", author)
            .expect("push");
    }

    async fn open_as(&self, branch: &str, title: &str, author: &str) -> u64 {
        self.sim
            .gitlab_open_mr_as(self.project_id, branch, "main", title, author)
            .await
            .expect("MR")
    }

    async fn label_as(&self, number: u64, label: &str, author: &str) {
        let token = format!("{author}-token");
        self.sim.add_user(author, &token);
        let response = reqwest::Client::new()
            .put(format!(
                "{}/projects/{}/merge_requests/{number}",
                self.sim.gitlab_url(),
                self.project_id
            ))
            .header("PRIVATE-TOKEN", token)
            .json(&serde_json::json!({ "add_labels": label }))
            .send()
            .await
            .expect("label");
        assert!(response.status().is_success(), "{}", response.status());
    }

    fn branch_head(&self, branch: &str) -> Option<String> {
        self.sim.gitlab_branch_head(self.project_id, branch)
    }

    fn file(&self, reference: &str, path: &str) -> Option<Vec<u8>> {
        self.sim.gitlab_file(self.project_id, reference, path)
    }

    async fn executable(&self, branch: &str, path: &str) -> bool {
        let file: serde_json::Value = reqwest::Client::new()
            .get(format!(
                "{}/projects/{}/repository/files/{}?ref={branch}",
                self.sim.gitlab_url(),
                self.project_id,
                path.replace('/', "%2F")
            ))
            .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
            .send()
            .await
            .expect("file request")
            .json()
            .await
            .expect("file json");
        file["execute_filemode"] == true
    }

    fn settle(&self) {
        for _ in 0..3 {
            self.sim.advance(Duration::from_secs(1));
        }
    }

    fn push_to_main(&self, files: &[(&str, Option<&str>)]) {
        self.sim
            .gitlab_push(
                self.project_id,
                "main",
                files,
                "the same change lands another way",
            )
            .expect("push");
    }

    async fn commit_author(&self, sha: &str) -> serde_json::Value {
        let commit = reqwest::Client::new()
            .get(format!(
                "{}/projects/{}/repository/commits/{sha}",
                self.sim.gitlab_url(),
                self.project_id
            ))
            .header("private-token", forge_sim::DEFAULT_TOKEN)
            .send()
            .await
            .expect("commit")
            .json::<serde_json::Value>()
            .await
            .expect("json");
        commit["author_name"].clone()
    }

    fn delivery(secret: Option<&str>) -> (Vec<(String, String)>, Vec<u8>) {
        let mut headers = vec![("x-gitlab-event".to_owned(), "Push Hook".to_owned())];
        if let Some(secret) = secret {
            headers.push(("x-gitlab-token".to_owned(), secret.to_owned()));
        }
        (headers, b"{\"object_kind\":\"push\"}".to_vec())
    }

    fn check_note_url(&self, url: Option<&str>) {
        assert_eq!(url, None, "GitLab's note answer has no URL");
    }

    fn script_ci(&self, jobs: Vec<JobSpec>) {
        self.sim
            .set_gitlab_jobs(self.project_id, jobs)
            .expect("jobs");
    }

    fn finish_ci(&self) {
        self.settle();
    }

    async fn head_pipeline(&self, number: u64) -> u64 {
        self.client
            .get_change(Self::PROJECT, number)
            .await
            .expect("change")
            .pipeline_id
            .expect("a head pipeline")
    }
}

pub struct Github {
    sim: SimHandle,
    client: GithubClient,
}

impl Harness for Github {
    const PROJECT: &'static str = "octo/app";
    const USER_PATH: &'static str = "/user";
    const REMOTE_HTTP_URL: &'static str = "http://github.example.com/api/v3";
    const REMOTE_HTTPS_URL: &'static str = "https://github.example.com/api/v3";
    const REDIRECTED_PATH: &'static str = "/repos/octo/app";
    const CI_JOBS: bool = true;

    /// The background ticker is effectively off: every API request
    /// progresses the simulated GitHub by one tick; `merge-async` answers
    /// at once (no pending phase).
    async fn start() -> Self {
        let sim = forge_sim::testing::start_stepped_sim().await;
        sim.github_create_repo(GithubRepoSpec::new("octo", "app"))
            .expect("repo created");
        sim.github_script_merge_async(
            Self::PROJECT,
            MergeAsyncScript {
                pending_ticks: 0,
                ..MergeAsyncScript::default()
            },
        )
        .expect("script");
        let client = GithubClient::new(&Self::config(&sim.github_url())).expect("client");
        Self { sim, client }
    }

    fn sim(&self) -> &SimHandle {
        &self.sim
    }

    fn forge(&self) -> &dyn Forge {
        &self.client
    }

    fn client(config: &ForgeConfig) -> ForgeResult<Box<dyn Forge>> {
        Ok(Box::new(GithubClient::new(config)?))
    }

    fn config(url: &str) -> ForgeConfig {
        ForgeConfig::literal(ForgeKind::Github, url, forge_sim::DEFAULT_TOKEN, SECRET)
    }

    fn token_user_id(&self) -> Option<u64> {
        None
    }

    fn create_project(&self, path: &str) {
        let (owner, name) = path.split_once('/').expect("owner/repo");
        self.sim
            .github_create_repo(GithubRepoSpec::new(owner, name))
            .expect("repo created");
    }

    fn push_as(&self, branch: &str, files: &[(&str, Option<&str>)], author: &str) {
        self.sim
            .github_push_as(Self::PROJECT, branch, files, "work", author)
            .expect("push");
    }

    async fn open_as(&self, branch: &str, title: &str, author: &str) -> u64 {
        self.sim
            .github_open_pr_as(Self::PROJECT, branch, "main", title, author)
            .expect("PR")
    }

    async fn label_as(&self, number: u64, label: &str, author: &str) {
        let token = format!("{author}-token");
        self.sim.add_user(author, &token);
        let response = reqwest::Client::new()
            .post(format!(
                "{}/repos/{}/issues/{number}/labels",
                self.sim.github_url(),
                Self::PROJECT
            ))
            .header("Authorization", format!("token {token}"))
            .header("User-Agent", "conformance")
            .json(&serde_json::json!({ "labels": [label] }))
            .send()
            .await
            .expect("label");
        assert!(response.status().is_success(), "{}", response.status());
    }

    fn branch_head(&self, branch: &str) -> Option<String> {
        self.sim.github_branch_head(Self::PROJECT, branch)
    }

    fn file(&self, reference: &str, path: &str) -> Option<Vec<u8>> {
        self.sim.github_file(Self::PROJECT, reference, path)
    }

    async fn executable(&self, branch: &str, path: &str) -> bool {
        let get = |path: String| async move {
            reqwest::Client::new()
                .get(format!("{}{path}", self.sim.github_url()))
                .bearer_auth(forge_sim::DEFAULT_TOKEN)
                .send()
                .await
                .expect("answered")
                .json::<serde_json::Value>()
                .await
                .expect("json")
        };
        let project = Self::PROJECT;
        let head = self.branch_head(branch).expect("branch");
        let commit = get(format!("/repos/{project}/git/commits/{head}")).await;
        let tree = commit["tree"]["sha"].as_str().expect("tree sha");
        let tree = get(format!("/repos/{project}/git/trees/{tree}?recursive=1")).await;
        let entry = tree["tree"]
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["path"] == path)
            .cloned()
            .expect("file in tree");
        entry["mode"] == "100755"
    }

    fn settle(&self) {}

    fn push_to_main(&self, files: &[(&str, Option<&str>)]) {
        self.sim
            .github_push_human_commit(Self::PROJECT, "main", files, "same content")
            .expect("push");
    }

    async fn commit_author(&self, sha: &str) -> serde_json::Value {
        let response = reqwest::Client::new()
            .get(format!(
                "{}/repos/{}/git/commits/{sha}",
                self.sim.github_url(),
                Self::PROJECT
            ))
            .bearer_auth(forge_sim::DEFAULT_TOKEN)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status().as_u16(), 200);
        let commit: serde_json::Value = response.json().await.expect("json");
        commit["author"]["name"].clone()
    }

    fn delivery(secret: Option<&str>) -> (Vec<(String, String)>, Vec<u8>) {
        let body = b"{\"zen\":\"Keep it logically awesome.\"}".to_vec();
        let mut headers = vec![("x-github-event".to_owned(), "ping".to_owned())];
        if let Some(secret) = secret {
            let signature = forge_sim::github::sign::signature_256(secret.as_bytes(), &body);
            headers.push(("x-hub-signature-256".to_owned(), signature));
        }
        (headers, body)
    }

    fn check_note_url(&self, url: Option<&str>) {
        assert!(url.is_some_and(|u| u.contains("#issuecomment-")), "{url:?}");
    }

    fn script_ci(&self, jobs: Vec<JobSpec>) {
        self.sim
            .github_script_workflow(Self::PROJECT, "CI", jobs)
            .expect("workflow");
    }

    /// Ticks the stepped simulator until every workflow job completed.
    fn finish_ci(&self) {
        for _ in 0..20 {
            let jobs = self.sim.github_workflow_jobs(Self::PROJECT).expect("jobs");
            if jobs.iter().all(|job| job["status"] == "completed") {
                return;
            }
            self.sim.tick();
        }
        panic!("the workflow jobs never completed");
    }

    /// The workflow run of the pull request's head commit.
    async fn head_pipeline(&self, number: u64) -> u64 {
        let head = self
            .client
            .get_change(Self::PROJECT, number)
            .await
            .expect("change")
            .head_sha
            .expect("a head");
        let jobs = self.sim.github_workflow_jobs(Self::PROJECT).expect("jobs");
        jobs.iter()
            .find(|job| job["head_sha"] == head.as_str())
            .and_then(|job| job["run_id"].as_u64())
            .expect("a workflow run of the head")
    }
}
