//! Test support for code that runs against the simulator (the `testing` feature): starting it, a
//! JSON client for either forge's API, and a receiver for its webhooks.
//!
//! Every wait here is on a signal, never on a timer: [`ApiClient::poll`] looks again after each
//! change the simulator reports ([`SimHandle::changes`]), [`Receiver::wait_for`] after each
//! delivery it receives. [`WAIT_LIMIT`] only bounds how long a test may wait before it fails.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{DEFAULT_TOKEN, ForgeSim, SimConfig, SimHandle};

/// The token of the user every client here acts as.
pub const TOKEN: &str = DEFAULT_TOKEN;

/// How long a wait may last before the test fails (a guard, not a pace: waits end on signals).
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Each request's timeout: a simulator that does not answer fails the test instead of hanging it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A simulator with the default configuration: its background ticker progresses pipelines,
/// trains and queues every 50 ms.
pub async fn start_sim() -> SimHandle {
    ForgeSim::start(SimConfig::default())
        .await
        .expect("sim starts")
}

/// A simulator whose background ticker is effectively off: every API request ticks it once, so
/// the test's own requests drive it, step by step.
pub async fn start_stepped_sim() -> SimHandle {
    ForgeSim::start(SimConfig {
        tick_interval: Duration::from_secs(3600),
        ..SimConfig::default()
    })
    .await
    .expect("sim starts")
}

/// A JSON client of one forge's API on the simulator, acting as [`TOKEN`]'s user.
#[derive(Clone)]
pub struct ApiClient {
    pub client: reqwest::Client,
    /// The API's base URL (GitLab's ends in `/api/v4`, GitHub's is the server's root).
    pub base: String,
    /// The header carrying the credential (`PRIVATE-TOKEN` or `Authorization`).
    auth_header: &'static str,
    auth: Option<String>,
    accept: Option<&'static str>,
    changes: watch::Receiver<u64>,
}

impl ApiClient {
    /// A client of the simulated GitLab (`PRIVATE-TOKEN`).
    pub fn gitlab(sim: &SimHandle) -> ApiClient {
        ApiClient::new(
            sim,
            sim.gitlab_url(),
            "PRIVATE-TOKEN",
            TOKEN.to_string(),
            None,
        )
    }

    /// A client of the simulated GitHub (`Authorization: Bearer`, GitHub's media type).
    pub fn github(sim: &SimHandle) -> ApiClient {
        ApiClient::new(
            sim,
            sim.github_url(),
            "Authorization",
            format!("Bearer {TOKEN}"),
            Some("application/vnd.github+json"),
        )
    }

    fn new(
        sim: &SimHandle,
        base: String,
        auth_header: &'static str,
        auth: String,
        accept: Option<&'static str>,
    ) -> ApiClient {
        ApiClient {
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()
                .expect("client builds"),
            base,
            auth_header,
            auth: Some(auth),
            accept,
            changes: sim.changes(),
        }
    }

    /// The same client with another credential: the whole value of its auth header (a GitLab
    /// token, or GitHub's `Bearer …`), or none at all.
    pub fn with_auth(&self, auth: Option<&str>) -> ApiClient {
        ApiClient {
            auth: auth.map(str::to_string),
            ..self.clone()
        }
    }

    fn authorize(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(auth) = &self.auth {
            request = request.header(self.auth_header, auth);
        }
        if let Some(accept) = self.accept {
            request = request.header("Accept", accept);
        }
        request
    }

    /// Sends `request` with this client's credential; the status and the JSON body (`null` when
    /// empty, a string when not JSON).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = self
            .authorize(request)
            .send()
            .await
            .expect("request is answered");
        let status = response.status();
        let text = response.text().await.expect("body is readable");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, body)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.post(self.url(path)).json(&body))
            .await
    }

    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.put(self.url(path)).json(&body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.patch(self.url(path)).json(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.delete(self.url(path))).await
    }

    /// `GET` of a path (or of an absolute URL, as a `Link` header gives it): the status, the
    /// headers and the JSON body.
    pub async fn get_with_headers(&self, path_or_url: &str) -> (StatusCode, HeaderMap, Value) {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_string()
        } else {
            self.url(path_or_url)
        };
        let response = self
            .authorize(self.client.get(url))
            .send()
            .await
            .expect("request is answered");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, headers, body)
    }

    /// `GET path` as text (job traces, raw files).
    pub async fn get_text(&self, path: &str) -> (StatusCode, String) {
        let response = self
            .authorize(self.client.get(self.url(path)))
            .send()
            .await
            .expect("request is answered");
        let status = response.status();
        (status, response.text().await.expect("body is readable"))
    }

    /// GitHub's `POST /graphql`; the whole response body (its status asserted 200).
    pub async fn graphql(&self, query: &str, variables: Value) -> Value {
        let (status, body) = self
            .post(
                "/graphql",
                json!({ "query": query, "variables": variables }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "graphql answered {status}: {body}");
        body
    }

    /// `GET path` until `done(body)` holds, looking again after each change the simulator
    /// reports. Each look is a request, which ticks the simulator once: on a stepped simulator
    /// the looks themselves drive it.
    pub async fn poll(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut changes = self.changes.clone();
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        loop {
            // Marked seen before looking: a change during the request wakes the next wait.
            changes.borrow_and_update();
            let (status, body) = self.get(path).await;
            if status.is_success() && done(&body) {
                return body;
            }
            let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
            assert!(
                matches!(changed, Ok(Ok(()))),
                "{path} never reached the awaited state; last answer {status} {body}"
            );
        }
    }

    /// GitHub: commits `files` onto `branch` through the git data API (blob, tree, commit, ref)
    /// as a client would, creating the branch from `main` when it does not exist; the new sha.
    pub async fn commit_files(
        &self,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> String {
        let (status, existing) = self
            .get(&format!("/repos/{repo}/git/ref/heads/{branch}"))
            .await;
        let exists = status == StatusCode::OK;
        let parent_ref = if exists {
            existing
        } else {
            self.get(&format!("/repos/{repo}/git/ref/heads/main"))
                .await
                .1
        };
        let parent = parent_ref["object"]["sha"]
            .as_str()
            .expect("parent sha")
            .to_string();
        let (_, parent_commit) = self
            .get(&format!("/repos/{repo}/git/commits/{parent}"))
            .await;
        let base_tree = parent_commit["tree"]["sha"]
            .as_str()
            .expect("tree sha")
            .to_string();
        let mut entries = Vec::new();
        for (path, content) in files {
            let (status, blob) = self
                .post(
                    &format!("/repos/{repo}/git/blobs"),
                    json!({ "content": content, "encoding": "utf-8" }),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{blob}");
            entries.push(
                json!({ "path": path, "mode": "100644", "type": "blob", "sha": blob["sha"] }),
            );
        }
        let (status, tree) = self
            .post(
                &format!("/repos/{repo}/git/trees"),
                json!({ "base_tree": base_tree, "tree": entries }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{tree}");
        let (status, commit) = self
            .post(
                &format!("/repos/{repo}/git/commits"),
                json!({ "message": message, "tree": tree["sha"], "parents": [parent] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{commit}");
        let sha = commit["sha"].as_str().expect("commit sha").to_string();
        let (status, body) = if exists {
            self.patch(
                &format!("/repos/{repo}/git/refs/heads/{branch}"),
                json!({ "sha": sha, "force": false }),
            )
            .await
        } else {
            self.post(
                &format!("/repos/{repo}/git/refs"),
                json!({ "ref": format!("refs/heads/{branch}"), "sha": sha }),
            )
            .await
        };
        assert!(status.is_success(), "ref update: {status} {body}");
        sha
    }

    /// GitHub: opens a pull request from `branch` into `main`; its number.
    pub async fn open_pr(&self, repo: &str, branch: &str, title: &str) -> u64 {
        let owner = repo.split('/').next().unwrap_or_default();
        let (status, pr) = self
            .post(
                &format!("/repos/{repo}/pulls"),
                json!({ "title": title, "head": format!("{owner}:{branch}"), "base": "main", "body": "body" }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{pr}");
        pr["number"].as_u64().expect("number")
    }

    /// GitHub: the pull request once its mergeability is computed.
    pub async fn mergeable(&self, repo: &str, number: u64) -> Value {
        self.poll(&format!("/repos/{repo}/pulls/{number}"), |pr| {
            !pr["mergeable"].is_null()
        })
        .await
    }
}

/// One webhook a [`Receiver`] got, with its exact bytes (for signatures).
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub raw: Bytes,
    /// The body as JSON (`null` when it is not JSON).
    pub body: Value,
}

impl Received {
    /// A header's value ("" when absent or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }

    /// The event: `X-Gitlab-Event` or `X-GitHub-Event`.
    pub fn event(&self) -> &str {
        match self.header("x-gitlab-event") {
            "" => self.header("x-github-event"),
            gitlab => gitlab,
        }
    }

    /// The delivery as a webhook endpoint takes it: (lower-case name, value) header pairs and
    /// the exact body.
    pub fn parts(&self) -> (Vec<(String, String)>, Vec<u8>) {
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    value.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        (headers, self.raw.to_vec())
    }
}

/// Header pairs borrowed, as the forge clients' `parse_webhook` takes them.
pub fn header_refs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

/// A small HTTP server recording every webhook POSTed to its [`Receiver::url`], in order.
pub struct Receiver {
    pub url: String,
    /// Everything received; each delivery wakes the waiters.
    received: watch::Sender<Vec<Received>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let received = watch::Sender::new(Vec::new());
        let sink = received.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, raw: Bytes| {
                let sink = sink.clone();
                async move {
                    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                    sink.send_modify(|received| received.push(Received { headers, raw, body }));
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver binds");
        let addr = listener.local_addr().expect("receiver has an address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            received,
        }
    }

    /// Every webhook received so far, in order.
    pub fn all(&self) -> Vec<Received> {
        self.received.borrow().clone()
    }

    /// The webhooks of one event (`X-Gitlab-Event` or `X-GitHub-Event`).
    pub fn of(&self, event: &str) -> Vec<Received> {
        self.received
            .borrow()
            .iter()
            .filter(|received| received.event() == event)
            .cloned()
            .collect()
    }

    /// The first webhook satisfying `found`, waiting for deliveries until one does.
    pub async fn wait_for(&self, what: &str, found: impl Fn(&Received) -> bool) -> Received {
        let mut deliveries = self.received.subscribe();
        let waited = tokio::time::timeout(
            WAIT_LIMIT,
            deliveries.wait_for(|received| received.iter().any(&found)),
        )
        .await;
        if let Ok(Ok(received)) = waited
            && let Some(hit) = received.iter().find(|received| found(received))
        {
            return hit.clone();
        }
        let seen: Vec<(String, Value, Value)> = self
            .all()
            .iter()
            .map(|received| {
                (
                    received.event().to_string(),
                    received.body["object_kind"].clone(),
                    received.body["action"].clone(),
                )
            })
            .collect();
        panic!("no webhook {what} arrived; got (event, object_kind, action) {seen:?}");
    }
}

/// A GitLab commit request body: `files` as (action, path, content) on `branch`, which starts
/// from `start` when given.
pub fn commit_body(branch: &str, start: Option<&str>, files: &[(&str, &str, &str)]) -> Value {
    let actions: Vec<Value> = files
        .iter()
        .map(|(action, path, content)| {
            json!({ "action": action, "file_path": path, "content": content })
        })
        .collect();
    let mut body = json!({
        "branch": branch,
        "commit_message": format!("change {branch}"),
        "actions": actions,
    });
    if let Some(start) = start {
        body["start_branch"] = Value::String(start.to_string());
    }
    body
}
