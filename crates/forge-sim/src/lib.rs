//! forge-sim: a stateful simulated GitLab and GitHub over real HTTP, for tests, benchmarks and demos.
//!
//! One server serves GitLab REST v4 under `/api/v4`, GitHub (REST + GraphQL) at the root, and the
//! control API under `/_sim`. [`ForgeSim::start`] binds (127.0.0.1:0 by default) and returns a
//! [`SimHandle`] with builder methods for tests. Sim time is real time plus an offset that
//! [`SimHandle::advance`] increases; pipelines progress on every request and on a background
//! ticker, so both real-time demos and `advance()`-driven tests work. Successful `GET`s of
//! both forges carry an `ETag` and a matching `If-None-Match` is answered `304 Not Modified`
//! ([`conditional`]).

#![recursion_limit = "256"]
#![allow(
    clippy::disallowed_methods,
    reason = "the sim clock is wall time plus an offset"
)]

pub mod ci;
pub mod conditional;
pub mod control;
pub mod faults;
pub mod github;
pub mod gitlab;
pub mod ratelimit;
pub mod repo;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhooks;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde_json::Value;

pub use ci::{JobOutcome, JobSpec};
pub use control::{GitlabProjectSpec, OpenMrSpec, PushSpec};
pub use faults::{FaultRule, HttpFault, WebhookFaultKind, WebhookFaultRule};
pub use state::{RequestLogEntry, Shared, SimState, User};
pub use webhooks::Delivery;

/// Default interval of the background ticker.
pub const DEFAULT_TICK_INTERVAL: Duration = Duration::from_millis(50);
/// The token of the user created at start unless configured otherwise.
pub const DEFAULT_TOKEN: &str = "sim-token";
/// The username owning [`DEFAULT_TOKEN`].
pub const DEFAULT_USERNAME: &str = "workqueue-bot";

/// How to start the simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address to bind (default 127.0.0.1).
    pub host: IpAddr,
    /// Port to bind (default 0: any free port).
    pub port: u16,
    /// Users created at start, as (username, token).
    pub users: Vec<(String, String)>,
    /// How often the background ticker progresses pipelines, trains and queues.
    pub tick_interval: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            users: vec![(DEFAULT_USERNAME.to_string(), DEFAULT_TOKEN.to_string())],
            tick_interval: DEFAULT_TICK_INTERVAL,
        }
    }
}

/// Entry point.
pub struct ForgeSim;

impl ForgeSim {
    /// Binds, starts serving, the ticker and webhook delivery; returns a handle.
    pub async fn start(config: SimConfig) -> anyhow::Result<SimHandle> {
        let state: Shared = Arc::new(SimState::new(&config.users));
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(config.host, config.port)).await?;
        let addr = listener.local_addr()?;
        state.set_base_url(&format!("http://{addr}"));
        webhooks::WebhookDispatcher::start(state.clone());
        let app = app(state.clone());
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = shutdown_rx.await;
                })
                .await;
            if let Err(error) = result {
                tracing::error!(%error, "forge-sim server stopped");
            }
        });
        let ticker_state = state.clone();
        let interval = config.tick_interval;
        let ticker = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                ticker_state.tick();
            }
        });
        Ok(SimHandle {
            state,
            addr,
            shutdown: Some(shutdown_tx),
            server,
            ticker,
        })
    }
}

/// The whole router: GitLab under `/api/v4`, control under `/_sim`, GitHub at the root, with the
/// request-log/fault middleware around everything.
pub fn app(state: Shared) -> Router {
    Router::new()
        .nest("/api/v4", gitlab::router(state.clone()))
        .nest("/_sim", control::router())
        .merge(github::router())
        // Inside the request log: a 304 is logged as one, and counted as the forge counts it.
        .layer(axum::middleware::from_fn(conditional::middleware))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ratelimit::middleware,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            faults::middleware,
        ))
        .with_state(state)
}

/// A running simulator. Dropping it stops the server and background tasks.
pub struct SimHandle {
    state: Shared,
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.state.faults.cancel_hangs();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.ticker.abort();
        self.server.abort();
    }
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        self.state.base_url()
    }

    /// GitLab API base: `http://127.0.0.1:PORT/api/v4`.
    pub fn gitlab_url(&self) -> String {
        format!("{}/api/v4", self.base_url())
    }

    /// GitHub API base (REST at the root, GraphQL at `/graphql`).
    pub fn github_url(&self) -> String {
        self.base_url()
    }

    /// Control API base: `http://127.0.0.1:PORT/_sim`.
    pub fn control_url(&self) -> String {
        format!("{}/_sim", self.base_url())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (for forge modules' own handle extensions).
    pub fn state(&self) -> &Shared {
        &self.state
    }

    /// Registers a user and an API token (valid for both forges).
    pub fn add_user(&self, username: &str, token: &str) -> User {
        state::lock(&self.state.users).add(username, token)
    }

    /// Starts building a GitLab project (`group/name`); finish with [`GitlabProjectBuilder::create`].
    pub fn gitlab_project(&self, path: &str) -> GitlabProjectBuilder<'_> {
        GitlabProjectBuilder {
            handle: self,
            spec: GitlabProjectSpec {
                path: path.to_string(),
                ..GitlabProjectSpec::default()
            },
        }
    }

    /// Replaces a project's scripted jobs.
    pub fn set_gitlab_jobs(&self, project: u64, jobs: Vec<JobSpec>) -> anyhow::Result<()> {
        let spec = GitlabProjectSpec {
            jobs: Some(jobs),
            ..GitlabProjectSpec::default()
        };
        Ok(control::update_gitlab_project(
            &self.state,
            &project.to_string(),
            &spec,
        )?)
    }

    /// Replaces (or adds) one scripted job by name.
    pub fn set_gitlab_job(&self, project: u64, job: JobSpec) -> anyhow::Result<()> {
        Ok(control::set_gitlab_job(
            &self.state,
            &project.to_string(),
            job,
        )?)
    }

    /// Updates project settings (only the `Some` fields of `spec`).
    pub fn update_gitlab_project(
        &self,
        project: u64,
        spec: GitlabProjectSpec,
    ) -> anyhow::Result<()> {
        Ok(control::update_gitlab_project(
            &self.state,
            &project.to_string(),
            &spec,
        )?)
    }

    /// Points a project's webhooks at `url` with `X-Gitlab-Token: secret`.
    pub fn set_gitlab_webhook(&self, project: u64, url: &str, secret: &str) -> anyhow::Result<()> {
        let spec = GitlabProjectSpec {
            webhook_url: Some(url.to_string()),
            webhook_secret: Some(secret.to_string()),
            ..GitlabProjectSpec::default()
        };
        Ok(control::update_gitlab_project(
            &self.state,
            &project.to_string(),
            &spec,
        )?)
    }

    /// Approves an MR as `username`.
    pub fn gitlab_approve(&self, project: u64, iid: u64, username: &str) -> anyhow::Result<()> {
        Ok(control::approve_gitlab_mr(
            &self.state,
            &project.to_string(),
            iid,
            username,
        )?)
    }

    /// Sets the number of unresolved blocking discussions on an MR.
    pub fn gitlab_set_unresolved_discussions(
        &self,
        project: u64,
        iid: u64,
        unresolved: u32,
    ) -> anyhow::Result<()> {
        Ok(control::set_gitlab_unresolved(
            &self.state,
            &project.to_string(),
            iid,
            unresolved,
        )?)
    }

    /// Pushes a human commit (`None` content deletes a file); a new branch starts from the
    /// default branch. Pushing to the target branch is how a test "moves the target".
    pub fn gitlab_push(
        &self,
        project: u64,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
    ) -> anyhow::Result<String> {
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: files
                .iter()
                .map(|(path, content)| (path.to_string(), content.map(str::to_string)))
                .collect(),
            message: Some(message.to_string()),
            author: None,
        };
        Ok(control::push_gitlab(
            &self.state,
            &project.to_string(),
            &spec,
        )?)
    }

    /// Like [`SimHandle::gitlab_push`], pushed by `author` (a person, not the token's user).
    pub fn gitlab_push_as(
        &self,
        project: u64,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
        author: &str,
    ) -> anyhow::Result<String> {
        let spec = PushSpec {
            branch: branch.to_string(),
            start_branch: None,
            files: files
                .iter()
                .map(|(path, content)| (path.to_string(), content.map(str::to_string)))
                .collect(),
            message: Some(message.to_string()),
            author: Some(author.to_string()),
        };
        Ok(control::push_gitlab(
            &self.state,
            &project.to_string(),
            &spec,
        )?)
    }

    /// Opens a merge request as `author` (a person, not the token's user); returns its iid.
    pub async fn gitlab_open_mr_as(
        &self,
        project: u64,
        source_branch: &str,
        target_branch: &str,
        title: &str,
        author: &str,
    ) -> anyhow::Result<u64> {
        let spec = OpenMrSpec {
            source_branch: source_branch.to_string(),
            target_branch: target_branch.to_string(),
            title: title.to_string(),
            description: None,
            labels: Vec::new(),
            author: Some(author.to_string()),
        };
        let mr = control::open_gitlab_mr(&self.state, &project.to_string(), &spec).await?;
        mr["iid"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("merge request without iid: {mr}"))
    }

    /// Protects a branch name or wildcard (`release/*`: `*` matches anything, `/` included).
    pub fn gitlab_protect_branch(&self, project: u64, name: &str) -> anyhow::Result<()> {
        Ok(control::protect_gitlab_branch(
            &self.state,
            &project.to_string(),
            name,
        )?)
    }

    /// Removes a protected branch entry (e.g. the default branch's).
    pub fn gitlab_unprotect_branch(&self, project: u64, name: &str) -> anyhow::Result<()> {
        Ok(control::unprotect_gitlab_branch(
            &self.state,
            &project.to_string(),
            name,
        )?)
    }

    /// The head sha of a branch.
    pub fn gitlab_branch_head(&self, project: u64, branch: &str) -> Option<String> {
        let gitlab = state::lock(&self.state.gitlab);
        gitlab
            .projects
            .get(&project)
            .and_then(|p| p.repo.branch_head(branch).map(str::to_string))
    }

    /// A file's content on a branch.
    pub fn gitlab_file(&self, project: u64, reference: &str, path: &str) -> Option<Vec<u8>> {
        let gitlab = state::lock(&self.state.gitlab);
        let project = gitlab.projects.get(&project)?;
        Some(
            project
                .repo
                .resolve(reference)?
                .tree
                .get(path)?
                .content
                .clone(),
        )
    }

    /// The MR as the API would return it.
    pub fn gitlab_mr(&self, project: u64, iid: u64) -> Option<Value> {
        let base = self.base_url();
        let gitlab = state::lock(&self.state.gitlab);
        let project = gitlab.projects.get(&project)?;
        let mr = project.merge_requests.get(&iid)?;
        Some(gitlab::json::mr_json(project, mr, &base, true))
    }

    /// Advances sim time and progresses everything that became due.
    pub fn advance(&self, by: Duration) {
        control::advance(&self.state, by);
    }

    /// Progresses pipelines, trains and queues now.
    pub fn tick(&self) {
        self.state.tick();
    }

    /// Requests served so far (control routes excluded).
    pub fn requests(&self) -> Vec<RequestLogEntry> {
        self.state.log.entries()
    }

    pub fn clear_requests(&self) {
        self.state.log.clear();
    }

    /// Enforces a primary rate limit of `limit` requests per `window` of sim time for each
    /// token (per forge, and on GitHub per resource), reported on every answer
    /// ([`ratelimit`]); `None` turns it off again (the default: no rate-limit headers).
    pub fn set_rate_limit(&self, limit: Option<(u64, Duration)>) {
        self.state.rate_limits.set(limit);
    }

    /// Adds an HTTP fault; returns its id.
    pub fn add_fault(&self, rule: FaultRule) -> u64 {
        self.state.faults.add_http(rule)
    }

    /// Restarts the generator deciding probabilistic faults (HTTP and webhook) from `seed`.
    pub fn seed_faults(&self, seed: u64) {
        self.state.faults.seed(seed);
    }

    /// Adds a webhook fault; returns its id.
    pub fn add_webhook_fault(&self, rule: WebhookFaultRule) -> u64 {
        self.state.faults.add_webhook(rule)
    }

    /// Removes all faults and releases hanging requests.
    pub fn clear_faults(&self) {
        self.state.faults.clear();
    }

    /// Releases requests hanging in `timeout` faults (they answer 504) and
    /// `delay` faults (they are handled now).
    pub fn cancel_hangs(&self) {
        self.state.faults.cancel_hangs();
    }

    /// A receiver of how many requests hang in `timeout` or `delay` faults right now (e.g.
    /// `wait_for(|count| *count == 1)`): a counted request is held, [`SimHandle::cancel_hangs`]
    /// releases it, and it stops counting once answered or once its client has gone.
    pub fn hanging_requests(&self) -> tokio::sync::watch::Receiver<usize> {
        self.state.faults.subscribe_hanging()
    }

    /// A receiver of the simulator's change counter ([`SimState::changed`]): its `changed()`
    /// returns after the next tick that moved something or the next request that may have
    /// changed state.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.state.subscribe_changes()
    }

    /// The webhook delivery log.
    pub fn webhook_deliveries(&self) -> Vec<Delivery> {
        self.state.webhooks.deliveries()
    }

    /// Sends held webhooks now, newest first.
    pub fn release_held_webhooks(&self) -> usize {
        self.state.webhooks.release_held()
    }

    /// Waits until queued webhooks are delivered (held ones excepted); false on timeout.
    pub async fn flush_webhooks(&self, timeout: Duration) -> bool {
        self.state.webhooks.flush(timeout).await
    }
}

/// Builder for a GitLab project (see [`SimHandle::gitlab_project`]).
pub struct GitlabProjectBuilder<'a> {
    handle: &'a SimHandle,
    spec: GitlabProjectSpec,
}

impl GitlabProjectBuilder<'_> {
    pub fn default_branch(mut self, branch: &str) -> Self {
        self.spec.default_branch = Some(branch.to_string());
        self
    }

    pub fn merge_trains(mut self, enabled: bool) -> Self {
        self.spec.merge_trains_enabled = Some(enabled);
        self
    }

    /// `merge` or `ff`.
    pub fn merge_method(mut self, method: &str) -> Self {
        self.spec.merge_method = Some(method.to_string());
        self
    }

    pub fn approvals_required(mut self, count: u32) -> Self {
        self.spec.approvals_required = Some(count);
        self
    }

    /// The project runs merge request pipelines: a push to a branch with an open MR starts a
    /// pipeline on `refs/merge-requests/<iid>/head`, as GitLab does.
    pub fn merge_request_pipelines(mut self, enabled: bool) -> Self {
        self.spec.merge_request_pipelines = Some(enabled);
        self
    }

    /// Whether a push clears the MR's approvals (GitLab's default: yes).
    pub fn reset_approvals_on_push(mut self, reset: bool) -> Self {
        self.spec.reset_approvals_on_push = Some(reset);
        self
    }

    pub fn require_pipeline_success(mut self, required: bool) -> Self {
        self.spec.only_allow_merge_if_pipeline_succeeds = Some(required);
        self
    }

    /// Adds a scripted job (the first call replaces the default single `test` job).
    pub fn job(mut self, job: JobSpec) -> Self {
        self.spec.jobs.get_or_insert_with(Vec::new).push(job);
        self
    }

    /// No CI at all (no pipelines are created).
    pub fn no_ci(mut self) -> Self {
        self.spec.jobs = Some(Vec::new());
        self
    }

    pub fn webhook(mut self, url: &str, secret: &str) -> Self {
        self.spec.webhook_url = Some(url.to_string());
        self.spec.webhook_secret = Some(secret.to_string());
        self
    }

    /// Creates the project; returns its id.
    pub fn create(self) -> anyhow::Result<u64> {
        Ok(control::create_gitlab_project(
            &self.handle.state,
            &self.spec,
        )?)
    }
}
