//! Shared helpers of the GitHub integration tests: a REST/GraphQL client, a raw webhook receiver,
//! and git-data helpers that build branches the way a client would.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub const TOKEN: &str = forge_sim::DEFAULT_TOKEN;
pub const REPO: &str = "octo/app";

/// Starts a sim whose background ticker is effectively off: every API request ticks once, so
/// progress is driven (deterministically) by the test's own requests.
pub async fn start() -> forge_sim::SimHandle {
    forge_sim::ForgeSim::start(forge_sim::SimConfig {
        tick_interval: Duration::from_secs(3600),
        ..forge_sim::SimConfig::default()
    })
    .await
    .expect("sim starts")
}

/// A GitHub API client bound to one sim.
pub struct Gh {
    pub client: reqwest::Client,
    pub base: String,
    pub auth: Option<String>,
}

impl Gh {
    pub fn new(sim: &forge_sim::SimHandle) -> Gh {
        Gh {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client builds"),
            base: sim.github_url(),
            auth: Some(format!("Bearer {TOKEN}")),
        }
    }

    /// The same client with another `Authorization` header (or none).
    pub fn with_auth(&self, auth: Option<&str>) -> Gh {
        Gh {
            client: self.client.clone(),
            base: self.base.clone(),
            auth: auth.map(str::to_string),
        }
    }

    pub async fn send(&self, mut request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let response = request
            .header("Accept", "application/vnd.github+json")
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

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.put(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(
            self.client
                .patch(format!("{}{path}", self.base))
                .json(&body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.delete(format!("{}{path}", self.base)))
            .await
    }

    /// `POST /graphql`; returns the whole response body (status asserted 200).
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

    /// Polls `GET path` until `done(body)` holds (each poll also ticks the sim once).
    pub async fn poll(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..200 {
            let (status, body) = self.get(path).await;
            if status.is_success() && done(&body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (status, body) = self.get(path).await;
        panic!("timed out polling {path}: last {status} {body}");
    }

    /// Commits `files` onto `branch` through the git data API (blob, tree, commit, ref),
    /// creating the branch from the default branch when it does not exist. Returns the sha.
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
        let (parent, exists) = if status == StatusCode::OK {
            (
                existing["object"]["sha"]
                    .as_str()
                    .expect("ref sha")
                    .to_string(),
                true,
            )
        } else {
            let (_, main) = self.get(&format!("/repos/{repo}/git/ref/heads/main")).await;
            (
                main["object"]["sha"]
                    .as_str()
                    .expect("main sha")
                    .to_string(),
                false,
            )
        };
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

    /// Opens a pull request from `branch` into `main`; returns its number.
    pub async fn open_pr(&self, repo: &str, branch: &str, title: &str) -> u64 {
        let (status, pr) = self
            .post(
                &format!("/repos/{repo}/pulls"),
                json!({ "title": title, "head": format!("{}:{branch}", repo.split('/').next().unwrap_or_default()), "base": "main", "body": "body" }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{pr}");
        pr["number"].as_u64().expect("number")
    }

    /// Polls the pull request until GitHub has computed its mergeability.
    pub async fn mergeable(&self, repo: &str, number: u64) -> Value {
        self.poll(&format!("/repos/{repo}/pulls/{number}"), |p| {
            !p["mergeable"].is_null()
        })
        .await
    }
}

/// One received webhook, with its exact bytes.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub raw: Bytes,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn event(&self) -> &str {
        self.header("x-github-event")
    }
}

/// A small axum server recording every webhook POSTed to `/hook` (raw bytes kept for signatures).
pub struct Receiver {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let sink = received.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, raw: Bytes| {
                let sink = sink.clone();
                async move {
                    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                    sink.lock()
                        .expect("receiver lock")
                        .push(Received { headers, raw, body });
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver binds");
        let addr = listener.local_addr().expect("receiver address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            received,
        }
    }

    pub fn all(&self) -> Vec<Received> {
        self.received.lock().expect("receiver lock").clone()
    }

    /// Waits until a received webhook satisfies `found` (10 s at most).
    pub async fn wait_for(&self, what: &str, found: impl Fn(&Received) -> bool) -> Received {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(hit) = self.all().into_iter().find(|r| found(r)) {
                return hit;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for webhook {what}; got {:?}",
                self.all()
                    .iter()
                    .map(|r| (r.event().to_string(), r.body["action"].clone()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Creates `octo/app` (or another `owner/name`) through the handle.
pub fn create_repo(sim: &forge_sim::SimHandle, spec: forge_sim::github::GithubRepoSpec) {
    sim.github_create_repo(spec).expect("repo created");
}
