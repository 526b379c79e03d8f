//! The whole service (as `workqueue::app::assemble` builds it) on a fresh
//! database of either backend, talking over HTTP to a forge-sim GitLab
//! project whose webhooks point back at it. Time of the service is a
//! `ManualClock` the tests move; the sim runs pipelines in its own time.
//! The app part is wq-testkit's `TestApp`, built with the service's own
//! assembly: it takes the static [`Tokens`] (`api` sends the admin one) and
//! proves quiescence in [`Harness::finish`] (dropped unfinished, it
//! panics).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forge_sim::github::{CheckKind, CheckScript, GithubRepoSpec};
use forge_sim::{ForgeSim, JobOutcome, JobSpec, SimConfig, SimHandle};
use reqwest::StatusCode;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::net::TcpListener;
use workqueue::app;
use workqueue::config::Config;
use wq_core::ManualClock;
use wq_forge::{Forge, ForgeConfig, ForgeKind, Forges, ForgesConfig};
pub use wq_testkit::bearer_client;
use wq_testkit::{Assembled, Backend, TestApp, TestAppBuilder, Tokens};

pub const SECRET: &str = "hook-secret";
pub const PROJECT: &str = "team/app";
pub const FORGE: &str = "gitlab";
pub const GITHUB: &str = "github";
/// The target branch's first commit.
const INITIAL_FILES: &[(&str, Option<&str>)] = &[
    ("README.md", Some("# app\n")),
    ("src/lib.rs", Some("pub fn v() -> u32 { 1 }\n")),
];
/// How long a test waits for a condition before failing.
const WAIT: Duration = Duration::from_secs(30);

/// Replaces the forge client (e.g. with an [`Intercept`]).
pub type WrapForge = Box<dyn FnOnce(Arc<dyn Forge>, &SimHandle, u64) -> Arc<dyn Forge> + Send>;

/// Test settings.
pub struct Options {
    pub jobs: Vec<JobSpec>,
    pub merge_trains: bool,
    /// GitLab's "pipelines must succeed" project setting.
    pub require_pipeline: bool,
    pub max_attempts: i32,
    pub wrap: Option<WrapForge>,
    /// The `ci_retry:` section as YAML; the default matchers without it.
    pub ci_retry: Option<&'static str>,
    /// A GitHub repository (forge `github`, repo [`PROJECT`]) instead of
    /// the GitLab project.
    pub github: Option<GithubRepo>,
    /// `mr.adopt_existing_branches`.
    pub adopt_existing_branches: bool,
    /// `mr.require_review`. The service's default is true; off here, so
    /// that tests of other behaviour merge on the forge's own review rules
    /// (`gates.rs` tests the review gate).
    pub require_review: bool,
    /// `mr.review_overrides`.
    pub review_overrides: Vec<wq_mr::ReviewOverride>,
    /// GitLab approvals the project requires (0: none).
    pub gitlab_approvals_required: u32,
    /// Where the sim sends its webhooks (`{base}/webhooks/{gitlab|github}`):
    /// the service itself when `None`, else a relay (to a queue).
    pub webhook_base: Option<String>,
    /// Serve `/metrics` from the process's Prometheus recorder (a test
    /// binary of its own reads exact values).
    pub metrics: bool,
}

/// The simulated GitHub repository's settings.
#[derive(Debug, Clone, Copy)]
pub struct GithubRepo {
    pub merge_queue: bool,
    /// Approving reviews branch protection requires (0: none).
    pub required_approvals: u32,
    /// A push dismisses earlier approvals.
    pub dismiss_stale_reviews: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            jobs: vec![JobSpec::new("unit", JobOutcome::Success)],
            merge_trains: false,
            require_pipeline: true,
            max_attempts: 5,
            wrap: None,
            ci_retry: None,
            github: None,
            adopt_existing_branches: false,
            require_review: false,
            review_overrides: Vec::new(),
            gitlab_approvals_required: 0,
            webhook_base: None,
            metrics: false,
        }
    }
}

pub struct Harness {
    pub sim: SimHandle,
    /// The GitLab project's id (0 on GitHub).
    pub project: u64,
    pub clock: Arc<ManualClock>,
    pub url: String,
    /// Sends no credentials: for the sim and for webhooks.
    pub client: reqwest::Client,
    /// Sends the admin token: for the service's API.
    pub api: reqwest::Client,
    pub tokens: Tokens,
    /// The forge the harness configured ([`FORGE`] or [`GITHUB`]).
    pub forge: &'static str,
    /// The running service; `None` only inside [`Harness::crash_and_restart`].
    app: Option<TestApp>,
    /// The running service's item types (their webhook receivers).
    types: Arc<std::sync::Mutex<Option<wq_core::TypeRegistry>>>,
    backend: Backend,
    config: Config,
    forges: Forges,
    metrics: bool,
}

impl Harness {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, Options::default()).await
    }

    pub async fn start_with(backend: Backend, options: Options) -> Self {
        let sim = ForgeSim::start(SimConfig::default()).await.expect("sim");
        // Bound first: the sim's webhooks and the service's public URL name
        // the address.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hooks = options.webhook_base.clone().unwrap_or_else(|| url.clone());
        let (project, forge) = match options.github {
            None => {
                let mut builder = sim
                    .gitlab_project(PROJECT)
                    .require_pipeline_success(options.require_pipeline)
                    .merge_trains(options.merge_trains)
                    .approvals_required(options.gitlab_approvals_required)
                    .webhook(&format!("{hooks}/webhooks/gitlab"), SECRET);
                for job in options.jobs {
                    builder = builder.job(job);
                }
                let project = builder.create().expect("project");
                sim.gitlab_push(project, "main", INITIAL_FILES, "Initial commit")
                    .expect("initial push");
                (project, FORGE)
            }
            Some(repo) => {
                let (owner, name) = PROJECT.split_once('/').unwrap();
                let checks: Vec<CheckScript> = options
                    .jobs
                    .into_iter()
                    .map(|job| CheckScript {
                        job,
                        kind: CheckKind::CheckRun,
                    })
                    .collect();
                sim.github_create_repo(
                    GithubRepoSpec::new(owner, name)
                        .merge_queue(repo.merge_queue)
                        .required_approvals(repo.required_approvals)
                        .dismiss_stale_reviews(repo.dismiss_stale_reviews)
                        .checks(&checks)
                        .webhook(&format!("{hooks}/webhooks/github"), SECRET),
                )
                .expect("repository");
                sim.github_push_human_commit(PROJECT, "main", INITIAL_FILES, "Initial commit")
                    .expect("initial push");
                (0, GITHUB)
            }
        };
        let mut config = Config::default();
        config.engine.handled_types = Some(vec!["mr".into()]);
        config.engine.sweep_interval_seconds = 3600;
        // Tests run the merge queue sync themselves (`Engine::run_periodic`).
        config.mr.queue_sync_interval_seconds = 3600;
        config.engine.max_attempts = options.max_attempts;
        config.mr.public_url = url.clone();
        config.mr.adopt_existing_branches = options.adopt_existing_branches;
        config.mr.require_review = options.require_review;
        config.mr.review_overrides = options.review_overrides;
        if let Some(yaml) = options.ci_retry {
            config.ci_retry = wq_herder::HerderConfig::from_yaml(yaml).expect("ci_retry yaml");
        }
        let (kind, forge_url) = if forge == GITHUB {
            (ForgeKind::Github, sim.github_url())
        } else {
            (ForgeKind::Gitlab, sim.gitlab_url())
        };
        let mut forge_config =
            ForgeConfig::literal(kind, &forge_url, forge_sim::DEFAULT_TOKEN, SECRET);
        forge_config.timeout_seconds = 3;
        config.forges = ForgesConfig {
            instances: BTreeMap::from([(forge.to_owned(), forge_config)]),
        };
        let mut forges = Forges::from_config(&config.forges).expect("forges");
        if let Some(wrap) = options.wrap {
            let inner = forges.get(forge).unwrap().clone();
            forges = Forges::new().with(forge, wrap(inner, &sim, project));
        }
        let tokens = Tokens::new();
        let mut harness = Self {
            sim,
            project,
            clock: Arc::new(ManualClock::new(OffsetDateTime::now_utc())),
            url,
            client: reqwest::Client::new(),
            api: bearer_client(&tokens.admin),
            tokens,
            forge,
            app: None,
            types: Arc::default(),
            backend,
            config,
            forges,
            metrics: options.metrics,
        };
        let app = harness
            .boot(TestApp::builder(backend).listener(listener))
            .await;
        harness.app = Some(app);
        harness
    }

    /// Builds and starts the service from `builder` with the harness's
    /// clock, tokens and configuration, as `workqueue::app::assemble` does
    /// (the database, fresh or resumed, is the builder's).
    async fn boot(&self, builder: TestAppBuilder<'_>) -> TestApp {
        let mut config = self.config.clone();
        let forges = self.forges.clone();
        let types = Arc::clone(&self.types);
        let metrics = self
            .metrics
            .then(|| wq_api::metrics::prometheus_handle().expect("the Prometheus recorder"));
        builder
            .clock(self.clock.clone())
            .tokens(self.tokens.clone())
            .assemble(move |assembly| {
                Box::pin(async move {
                    config.database.url = assembly.database_url;
                    config.auth = assembly.auth;
                    let app = app::assemble(&config, forges, assembly.clock, metrics)
                        .await
                        .expect("assemble");
                    *types.lock().unwrap() = Some(app.types.clone());
                    Assembled {
                        store: app.store,
                        engine: app.engine,
                        router: app.router,
                    }
                })
            })
            .start()
            .await
    }

    /// A second replica over the same database: the API and the dashboard
    /// on an address of its own, its engine processing nothing (as a
    /// replica with `engine.handled_types: []`). Stops when dropped.
    #[allow(
        dead_code,
        reason = "used by the dashboard tests, which share this file"
    )]
    pub async fn replica(&self) -> Replica {
        let mut config = self.config.clone();
        config.database.url = self.app().database_url.clone();
        config.engine.handled_types = Some(Vec::new());
        config.auth = wq_auth::AuthConfig::default();
        self.tokens.configure(&mut config.auth);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = app::assemble(&config, self.forges.clone(), self.clock.clone(), None)
            .await
            .expect("the second replica");
        let server = tokio::spawn(async move {
            axum::serve(listener, app.router).await.expect("serve");
        });
        Replica { url, server }
    }

    /// Stops the service abruptly (in-memory state lost) and starts a new
    /// one over the same database and address.
    pub async fn crash_and_restart(&mut self) {
        let halted = self.app.take().expect("running").halt().await;
        let app = self
            .boot(TestApp::builder(self.backend).resume(halted))
            .await;
        self.app = Some(app);
    }

    /// A consumer of the queue `config` names, through `client`, feeding
    /// the running service as `serve` does (not started).
    pub fn intake(
        &self,
        client: wq_intake::SqsClient,
        config: &wq_intake::SqsConfig,
    ) -> wq_intake::SqsIntake {
        let types = self.types.lock().unwrap().clone().expect("assembled");
        let engine = &self.app().engine;
        app::intake(config, client, &types, engine, self.clock.clone())
    }

    /// The running service: store, engine, clients.
    pub fn app(&self) -> &TestApp {
        self.app.as_ref().expect("running")
    }

    pub async fn submit(&self, body: &Value) -> (StatusCode, Value) {
        self.submit_as(&self.api, body).await
    }

    /// Submits with `client` (e.g. [`bearer_client`] of another token).
    pub async fn submit_as(&self, client: &reqwest::Client, body: &Value) -> (StatusCode, Value) {
        let response = client
            .post(format!("{}/api/v1/work-items", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Submits and expects `status`; returns the item id.
    pub async fn submit_ok(&self, body: &Value, status: StatusCode, outcome: &str) -> String {
        let (got, reply) = self.submit(body).await;
        assert_eq!(got, status, "{reply}");
        assert_eq!(reply["outcome"], outcome, "{reply}");
        reply["item"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn post(&self, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
        self.post_as(&self.api, path, body).await
    }

    /// A POST to the service with `client`.
    pub async fn post_as(
        &self,
        client: &reqwest::Client,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut request = client.post(format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn item(&self, id: &str) -> Value {
        self.api
            .get(format!("{}/api/v1/work-items/{id}", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Lets the sim deliver webhooks and the engine finish what it has.
    pub async fn settle(&self) {
        for _ in 0..50 {
            self.sim.flush_webhooks(Duration::from_secs(5)).await;
            let engine = &self.app().engine;
            let found = engine.sweep_now().await.expect("sweep");
            engine.wait_idle().await;
            if found == 0 && self.sim.flush_webhooks(Duration::from_secs(5)).await {
                engine.wait_idle().await;
                return;
            }
        }
    }

    /// Reads the item until `done` holds: again after every run the engine
    /// finishes (webhooks flushed first), failing after [`WAIT`].
    pub async fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut runs = self.app().engine.runs_finished();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            // Seen before the read: a run that ends after it wakes the wait.
            runs.borrow_and_update();
            self.sim.flush_webhooks(Duration::from_secs(5)).await;
            let item = self.item(id).await;
            if done(&item) {
                return item;
            }
            match tokio::time::timeout_at(deadline, runs.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("the engine went away while waiting for {what}: {item:#}"),
                Err(_) => panic!("no run in {WAIT:?} brought {what}: {item:#}"),
            }
        }
    }

    /// The action on the item's trail that started and never finished (no
    /// `action.succeeded` or `action.failed` after it), if any.
    pub fn unfinished(records: &[Value]) -> Option<&Value> {
        let mut open = None;
        for record in records {
            match record["kind"].as_str() {
                Some("action.started") => open = Some(record),
                Some("action.succeeded" | "action.failed") => open = None,
                _ => {}
            }
        }
        open
    }

    /// How many records of `kind` the trail holds.
    pub fn count_kind(records: &[Value], kind: &str) -> usize {
        records.iter().filter(|r| r["kind"] == kind).count()
    }

    /// The item's audit trail, oldest first.
    pub async fn audit(&self, id: &str) -> Vec<Value> {
        let trail: Value = self
            .api
            .get(format!(
                "{}/api/v1/work-items/{id}/audit?limit=1000",
                self.url
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        trail["records"].as_array().expect("records").clone()
    }

    pub async fn wait_phase(&self, id: &str, phase: &str) -> Value {
        self.wait_for(id, phase, |item| item["phase"] == phase)
            .await
    }

    /// Waits until the item's MR is open and recorded.
    pub async fn wait_mr(&self, id: &str) -> u64 {
        let item = self
            .wait_for(id, "the merge request", |item| {
                item["detail"]["mr"]["number"].is_u64()
            })
            .await;
        item["detail"]["mr"]["number"].as_u64().unwrap()
    }

    /// Moves the service's clock and runs what became due. Runs still
    /// going finish first: one that ended after the move would set its
    /// timers from the moved clock and could leave one due with nothing to
    /// wake it.
    pub async fn advance(&self, by: Duration) {
        self.app().engine.wait_idle().await;
        self.clock.advance(time::Duration::try_from(by).unwrap());
        self.settle().await;
    }

    /// Forge requests with `method` whose path ends with `suffix`.
    pub fn count(&self, method: &str, suffix: &str) -> usize {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .count()
    }

    /// The MR as the sim holds it.
    pub fn mr(&self, iid: u64) -> Value {
        self.sim.gitlab_mr(self.project, iid).expect("mr exists")
    }

    /// Every MR of the project, any state.
    pub async fn all_mrs(&self) -> Vec<Value> {
        self.client
            .get(format!(
                "{}/projects/{}/merge_requests?state=all",
                self.sim.gitlab_url(),
                self.project
            ))
            .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// A human acting on the sim's GitLab API.
    pub async fn gitlab_put(&self, path: &str, body: Value) -> StatusCode {
        self.client
            .put(format!(
                "{}/projects/{}{path}",
                self.sim.gitlab_url(),
                self.project
            ))
            .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Settles (webhooks included), then the app proves nothing is left
    /// to do: no item due for the sweep or actionable, no pending event.
    pub async fn finish(mut self) {
        self.settle().await;
        self.app.take().expect("running").finish().await;
    }
}

/// A second replica of the service ([`Harness::replica`]).
#[allow(
    dead_code,
    reason = "used by the dashboard tests, which share this file"
)]
pub struct Replica {
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A person (not workqueue's token user) on the harness's forge.
pub const PERSON: &str = "person";
const PERSON_TOKEN: &str = "person-token";

impl Harness {
    /// The head of `branch` on the harness's forge.
    pub fn branch_head(&self, branch: &str) -> Option<String> {
        if self.forge == GITHUB {
            self.sim.github_branch_head(PROJECT, branch)
        } else {
            self.sim.gitlab_branch_head(self.project, branch)
        }
    }

    /// A person pushes a commit to `branch` (created from `main`).
    pub fn person_push(&self, branch: &str, files: &[(&str, Option<&str>)]) -> String {
        if self.forge == GITHUB {
            self.sim
                .github_push_human_commit(PROJECT, branch, files, "A person's commit")
                .expect("push")
        } else {
            self.sim
                .gitlab_push(self.project, branch, files, "A person's commit")
                .expect("push")
        }
    }

    /// A person opens a merge request / pull request from `branch` with
    /// their own token; returns its number.
    pub async fn person_open_change(&self, branch: &str, title: &str, labels: &[&str]) -> u64 {
        self.sim.add_user(PERSON, PERSON_TOKEN);
        let response = if self.forge == GITHUB {
            self.client
                .post(format!("{}/repos/{PROJECT}/pulls", self.sim.github_url()))
                .header("Authorization", format!("token {PERSON_TOKEN}"))
                .json(&json!({"title": title, "head": branch, "base": "main", "body": "mine"}))
                .send()
                .await
                .unwrap()
        } else {
            self.client
                .post(format!(
                    "{}/projects/{}/merge_requests",
                    self.sim.gitlab_url(),
                    self.project
                ))
                .header("PRIVATE-TOKEN", PERSON_TOKEN)
                .json(&json!({
                    "source_branch": branch,
                    "target_branch": "main",
                    "title": title,
                    "description": "mine",
                    "labels": labels.join(","),
                }))
                .send()
                .await
                .unwrap()
        };
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{status}: {body}");
        body[if self.forge == GITHUB {
            "number"
        } else {
            "iid"
        }]
        .as_u64()
        .unwrap()
    }

    /// The change request as the sim holds it, as (title, labels, state,
    /// merged).
    pub fn change_state(&self, number: u64) -> (String, Vec<String>, String, bool) {
        if self.forge == GITHUB {
            let pr = self.sim.github_pr(PROJECT, number).expect("pull request");
            let labels = pr["labels"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .map(|l| l["name"].as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (
                pr["title"].as_str().unwrap_or_default().to_owned(),
                labels,
                pr["state"].as_str().unwrap_or_default().to_owned(),
                pr["merged"].as_bool().unwrap_or(false),
            )
        } else {
            let mr = self.mr(number);
            let labels = mr["labels"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .map(|l| l.as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let state = mr["state"].as_str().unwrap_or_default().to_owned();
            let merged = state == "merged";
            (
                mr["title"].as_str().unwrap_or_default().to_owned(),
                labels,
                state,
                merged,
            )
        }
    }

    /// Requests to the forge that could change something (anything but a
    /// read; GitHub's GraphQL endpoint only reads for workqueue) and that
    /// the forge took (2xx), as `METHOD path`: one it refused wrote nothing
    /// (GitLab refuses to create a branch that exists before it writes).
    pub fn forge_writes(&self) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.method != "GET" && r.method != "HEAD" && !r.path.ends_with("/graphql"))
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// A person closes change request `number` with their own token.
    pub async fn person_close_change(&self, number: u64) {
        self.sim.add_user(PERSON, PERSON_TOKEN);
        let response = if self.forge == GITHUB {
            self.client
                .patch(format!(
                    "{}/repos/{PROJECT}/pulls/{number}",
                    self.sim.github_url()
                ))
                .header("Authorization", format!("token {PERSON_TOKEN}"))
                .json(&json!({"state": "closed"}))
                .send()
                .await
                .unwrap()
        } else {
            self.client
                .put(format!(
                    "{}/projects/{}/merge_requests/{number}",
                    self.sim.gitlab_url(),
                    self.project
                ))
                .header("PRIVATE-TOKEN", PERSON_TOKEN)
                .json(&json!({"state_event": "close"}))
                .send()
                .await
                .unwrap()
        };
        assert!(response.status().is_success(), "{}", response.status());
    }

    /// A person comments on GitLab merge request `iid`; returns the note id.
    pub async fn person_note(&self, iid: u64, body: &str) -> u64 {
        self.sim.add_user(PERSON, PERSON_TOKEN);
        let reply: Value = self
            .client
            .post(format!(
                "{}/projects/{}/merge_requests/{iid}/notes",
                self.sim.gitlab_url(),
                self.project
            ))
            .header("PRIVATE-TOKEN", PERSON_TOKEN)
            .json(&json!({"body": body}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        reply["id"].as_u64().expect("note id")
    }

    /// The notes of GitLab merge request `iid` as (author, body).
    pub async fn notes(&self, iid: u64) -> Vec<(String, String)> {
        let notes: Vec<Value> = self
            .client
            .get(format!(
                "{}/projects/{}/merge_requests/{iid}/notes",
                self.sim.gitlab_url(),
                self.project
            ))
            .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        notes
            .iter()
            .map(|n| {
                (
                    n["author"]["username"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    n["body"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// `user` approves change request `number` on the harness's forge (its
    /// webhooks follow).
    pub fn approve_as(&self, number: u64, user: &str) {
        if self.forge == GITHUB {
            self.sim
                .github_approve(PROJECT, number, user)
                .expect("approve");
        } else {
            self.sim
                .gitlab_approve(self.project, number, user)
                .expect("approve");
        }
    }

    /// The comments on change request `number` as (id, author, body), on
    /// the harness's forge.
    pub async fn comments(&self, number: u64) -> Vec<(u64, String, String)> {
        let request = if self.forge == GITHUB {
            self.client
                .get(format!(
                    "{}/repos/{PROJECT}/issues/{number}/comments",
                    self.sim.github_url()
                ))
                .header(
                    "Authorization",
                    format!("token {}", forge_sim::DEFAULT_TOKEN),
                )
        } else {
            self.client
                .get(format!(
                    "{}/projects/{}/merge_requests/{number}/notes",
                    self.sim.gitlab_url(),
                    self.project
                ))
                .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        };
        let comments: Vec<Value> = request.send().await.unwrap().json().await.unwrap();
        let author = if self.forge == GITHUB {
            "/user/login"
        } else {
            "/author/username"
        };
        comments
            .iter()
            .filter(|c| c["system"] != true)
            .map(|c| {
                (
                    c["id"].as_u64().unwrap_or_default(),
                    c.pointer(author)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    c["body"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Edits of comment `id` the forge was asked for.
    pub fn comment_edits(&self, id: u64) -> usize {
        if self.forge == GITHUB {
            self.count("PATCH", &format!("/issues/comments/{id}"))
        } else {
            self.count("PUT", &format!("/notes/{id}"))
        }
    }

    /// A submission body for `branch` on the harness's forge.
    pub fn change(&self, branch: &str, files: &[(&str, &str)]) -> Value {
        let mut body = change(branch, files);
        body["forge"] = self.forge.into();
        body
    }
}

/// The item's dimension row `name` (`Null` when absent).
pub fn dimension(item: &Value, name: &str) -> Value {
    item["dimensions"]
        .as_array()
        .and_then(|rows| rows.iter().find(|d| d["dimension"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

/// A submission body for `branch` with `files` as (path, content) creates.
pub fn change(branch: &str, files: &[(&str, &str)]) -> Value {
    let actions: Vec<Value> = files
        .iter()
        .map(|(path, content)| json!({"action": "create", "file_path": path, "content": content}))
        .collect();
    json!({
        "item_type": "mr",
        "forge": FORGE,
        "project": PROJECT,
        "source_branch": branch,
        "target_branch": "main",
        "title": format!("Change on {branch}"),
        "description": "Submitted by a test.",
        "file_actions": actions,
    })
}

/// [`change`] on the GitHub forge.
pub fn github_change(branch: &str, files: &[(&str, &str)]) -> Value {
    let mut body = change(branch, files);
    body["forge"] = GITHUB.into();
    body
}

/// The same with automatic merge off (the item stays active with its MR).
pub fn manual(mut body: Value) -> Value {
    body["automation"] = json!({"auto_merge": false});
    body
}

/// A forge that delegates to the real client, with hooks around the merge
/// call: something to do first (a human push racing the merge) and a gate
/// that holds the call until opened.
/// Where an [`Intercept`] makes an executor die, as a killed process would:
/// nothing after that point is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashAt {
    BeforeMergeCall,
    AfterMergeCall,
    /// After the forge accepted the first push, before its head is recorded.
    AfterPush,
    /// After the forge closed the change request, before anything else is
    /// recorded.
    AfterClose,
    /// After the forge opened the change request, before it is recorded.
    AfterCreate,
    /// After the forge took the status note's post, before its id is
    /// recorded.
    AfterNotePost,
}

/// A [`CrashAt`] that happens once, the first time the process gets there.
pub struct CrashOnce {
    at: CrashAt,
    fired: std::sync::atomic::AtomicBool,
}

impl CrashOnce {
    pub fn new(at: CrashAt) -> Self {
        Self {
            at,
            fired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// True once, the first time the process reaches `at` (when the crash
    /// is at `at`).
    fn fire_at(&self, at: CrashAt) -> bool {
        self.at == at && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

pub struct Intercept {
    pub inner: Arc<dyn Forge>,
    pub before_merge: Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>,
    pub gate: Option<Arc<tokio::sync::Semaphore>>,
    pub crash: Option<CrashOnce>,
    pub torn_read: Option<Arc<TornRead>>,
    /// Runs before each commit of file actions reaches the forge.
    pub before_push: Option<Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>>,
}

/// One read that straddles a merge queue's merge: its first part saw the
/// pull request open (as the last read in the queue did, but with another
/// merge status), its second part saw it out of the queue. Given once, to
/// the first read after the forge merged it.
#[derive(Default)]
pub struct TornRead {
    last_queued: std::sync::Mutex<Option<wq_forge::ChangeRequest>>,
    pub given: std::sync::atomic::AtomicUsize,
}

impl TornRead {
    fn read(&self, read: wq_forge::ChangeRequest) -> wq_forge::ChangeRequest {
        use std::sync::atomic::Ordering;
        let mut last = self.last_queued.lock().expect("torn read");
        match read.state {
            wq_forge::ChangeState::Open
                if matches!(read.queue, wq_forge::QueueObservation::Entry(_)) =>
            {
                *last = Some(read.clone());
                read
            }
            wq_forge::ChangeState::Merged if self.given.load(Ordering::SeqCst) == 0 => {
                match last.clone() {
                    Some(mut torn) => {
                        self.given.fetch_add(1, Ordering::SeqCst);
                        torn.queue = wq_forge::QueueObservation::Absent;
                        torn.merge_status = format!("{}-straddled", torn.merge_status);
                        torn
                    }
                    None => read,
                }
            }
            _ => read,
        }
    }
}

impl Intercept {
    fn crash_after_note(&self, posted: &wq_forge::ForgeResult<wq_forge::NoteRef>) {
        if self
            .crash
            .as_ref()
            .is_some_and(|crash| crash.fire_at(CrashAt::AfterNotePost))
        {
            panic!("the process dies after the forge took the status note: {posted:?}");
        }
    }
}

#[async_trait::async_trait]
impl Forge for Intercept {
    fn kind(&self) -> ForgeKind {
        self.inner.kind()
    }
    async fn current_user(&self) -> wq_forge::ForgeResult<wq_forge::ForgeUser> {
        self.inner.current_user().await
    }
    async fn project_path(&self, project: &str) -> wq_forge::ForgeResult<String> {
        self.inner.project_path(project).await
    }
    async fn branch_protected(&self, project: &str, branch: &str) -> wq_forge::ForgeResult<bool> {
        self.inner.branch_protected(project, branch).await
    }
    async fn branch_head(
        &self,
        project: &str,
        branch: &str,
    ) -> wq_forge::ForgeResult<Option<String>> {
        self.inner.branch_head(project, branch).await
    }
    async fn source_branch(
        &self,
        project: &str,
        branch: &str,
    ) -> wq_forge::ForgeResult<wq_forge::SourceBranch> {
        self.inner.source_branch(project, branch).await
    }
    async fn protects_new_branch(
        &self,
        project: &str,
        branch: &str,
    ) -> wq_forge::ForgeResult<bool> {
        self.inner.protects_new_branch(project, branch).await
    }
    fn creates_branch_atomically(&self) -> bool {
        self.inner.creates_branch_atomically()
    }
    async fn commit_files(
        &self,
        request: &wq_forge::CommitRequest<'_>,
    ) -> wq_forge::ForgeResult<wq_forge::PushedCommit> {
        if let Some(before) = &self.before_push {
            before().await;
        }
        let head = self.inner.commit_files(request).await;
        if self
            .crash
            .as_ref()
            .is_some_and(|crash| crash.fire_at(CrashAt::AfterPush))
        {
            panic!("the process dies after the forge accepted the push: {head:?}");
        }
        head
    }
    async fn diff_is_empty(
        &self,
        project: &str,
        base: &str,
        head: &str,
    ) -> wq_forge::ForgeResult<bool> {
        self.inner.diff_is_empty(project, base, head).await
    }
    async fn find_open_change(
        &self,
        project: &str,
        source_branch: &str,
    ) -> wq_forge::ForgeResult<Option<wq_forge::ChangeRequest>> {
        self.inner.find_open_change(project, source_branch).await
    }
    async fn create_change(
        &self,
        request: &wq_forge::NewChange<'_>,
    ) -> wq_forge::ForgeResult<wq_forge::ChangeRequest> {
        let created = self.inner.create_change(request).await;
        if self
            .crash
            .as_ref()
            .is_some_and(|crash| crash.fire_at(CrashAt::AfterCreate))
        {
            panic!("the process dies after the forge opened the change request: {created:?}");
        }
        created
    }
    async fn update_change(
        &self,
        project: &str,
        number: u64,
        update: &wq_forge::ChangeUpdate<'_>,
    ) -> wq_forge::ForgeResult<wq_forge::ChangeRequest> {
        let updated = self.inner.update_change(project, number, update).await;
        if update.open == Some(false)
            && self
                .crash
                .as_ref()
                .is_some_and(|crash| crash.fire_at(CrashAt::AfterClose))
        {
            panic!("the process dies after the forge closed the change request: {updated:?}");
        }
        updated
    }
    async fn get_change(
        &self,
        project: &str,
        number: u64,
    ) -> wq_forge::ForgeResult<wq_forge::ChangeRequest> {
        let read = self.inner.get_change(project, number).await?;
        Ok(match &self.torn_read {
            Some(torn) => torn.read(read),
            None => read,
        })
    }
    async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &wq_forge::MergeParams<'_>,
    ) -> wq_forge::ForgeResult<wq_forge::MergeOutcome> {
        (self.before_merge)().await;
        if let Some(gate) = &self.gate {
            let _permit = gate.acquire().await.expect("gate open");
        }
        let crash_at = |at| self.crash.as_ref().is_some_and(|crash| crash.fire_at(at));
        if crash_at(CrashAt::BeforeMergeCall) {
            panic!("the process dies before the merge call leaves it");
        }
        let outcome = self.inner.merge_change(project, number, request).await;
        if crash_at(CrashAt::AfterMergeCall) {
            panic!("the process dies after the forge accepted the merge: {outcome:?}");
        }
        outcome
    }
    async fn create_note(
        &self,
        project: &str,
        number: u64,
        body: &str,
    ) -> wq_forge::ForgeResult<wq_forge::NoteRef> {
        let posted = self.inner.create_note(project, number, body).await;
        self.crash_after_note(&posted);
        posted
    }
    fn labels_on_creation(&self) -> bool {
        self.inner.labels_on_creation()
    }
    fn label_case(&self) -> wq_forge::LabelCase {
        self.inner.label_case()
    }
    async fn open_note(
        &self,
        project: &str,
        number: u64,
        labels: &[String],
        body: &str,
    ) -> wq_forge::ForgeResult<wq_forge::NoteRef> {
        let posted = self.inner.open_note(project, number, labels, body).await;
        self.crash_after_note(&posted);
        posted
    }
    async fn list_notes(
        &self,
        project: &str,
        number: u64,
    ) -> wq_forge::ForgeResult<Vec<wq_forge::Note>> {
        self.inner.list_notes(project, number).await
    }
    async fn update_note(
        &self,
        project: &str,
        number: u64,
        note_id: u64,
        body: &str,
    ) -> wq_forge::ForgeResult<()> {
        self.inner.update_note(project, number, note_id, body).await
    }
    fn ci_jobs(&self) -> Option<&dyn wq_forge::CiJobs> {
        self.inner.ci_jobs()
    }
    fn rate_budgets(&self) -> Vec<wq_forge::RateBudget> {
        self.inner.rate_budgets()
    }
    fn parse_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<wq_forge::ForgeEvent, wq_forge::WebhookRejection> {
        self.inner.parse_webhook(headers, body)
    }

    fn parse_trusted_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<wq_forge::ForgeEvent, wq_forge::WebhookRejection> {
        self.inner.parse_trusted_webhook(headers, body)
    }
}
