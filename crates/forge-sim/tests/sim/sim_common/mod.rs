//! Shared helpers for forge-sim's integration tests: an HTTP client wrapper and a webhook receiver.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use reqwest::StatusCode;
use serde_json::Value;

pub const TOKEN: &str = forge_sim::DEFAULT_TOKEN;

/// A GitLab API client bound to one sim.
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client builds"),
            base: base.to_string(),
            token: TOKEN.to_string(),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request
            .header("PRIVATE-TOKEN", &self.token)
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

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn get_text(&self, path: &str) -> (StatusCode, String) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("PRIVATE-TOKEN", &self.token)
            .send()
            .await
            .expect("request is answered");
        let status = response.status();
        (status, response.text().await.expect("body is readable"))
    }

    /// Polls `GET path` until `done(body)` holds (10 s at most).
    pub async fn poll(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, body) = self.get(path).await;
            if status.is_success() && done(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out polling {path}: last {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One received webhook.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Value,
}

impl Received {
    pub fn event(&self) -> &str {
        self.headers
            .get("x-gitlab-event")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A small axum server recording every webhook POSTed to it.
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
            axum::routing::post(
                move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
                    let sink = sink.clone();
                    async move {
                        sink.lock()
                            .expect("receiver lock")
                            .push(Received { headers, body });
                        StatusCode::OK
                    }
                },
            ),
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

    pub fn all(&self) -> Vec<Received> {
        self.received.lock().expect("receiver lock").clone()
    }

    pub fn of(&self, event: &str) -> Vec<Received> {
        self.all()
            .into_iter()
            .filter(|r| r.event() == event)
            .collect()
    }

    /// Waits until some received webhook satisfies `found` (10 s at most).
    pub async fn wait_for(&self, what: &str, found: impl Fn(&Received) -> bool) -> Received {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(hit) = self.all().into_iter().find(|r| found(r)) {
                return hit;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for webhook: {what}; got {:?}",
                self.all()
                    .iter()
                    .map(|r| (r.event().to_string(), r.body["object_kind"].clone()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub async fn start_sim() -> forge_sim::SimHandle {
    forge_sim::ForgeSim::start(forge_sim::SimConfig::default())
        .await
        .expect("sim starts")
}

/// A commit request body creating/updating text files on `branch`, starting from `start`.
pub fn commit_body(branch: &str, start: Option<&str>, files: &[(&str, &str, &str)]) -> Value {
    let actions: Vec<Value> = files
        .iter()
        .map(|(action, path, content)| serde_json::json!({"action": action, "file_path": path, "content": content}))
        .collect();
    let mut body = serde_json::json!({
        "branch": branch,
        "commit_message": format!("change {branch}"),
        "actions": actions,
    });
    if let Some(start) = start {
        body["start_branch"] = Value::String(start.to_string());
    }
    body
}
