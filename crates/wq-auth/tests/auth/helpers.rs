//! Test support of wq-auth's tests: the shared keys, local OIDC issuer and
//! authenticator builders of [`wq_testkit::oidc`], and a local OpenShift API
//! (axum on 127.0.0.1:0) that counts, and can hold, its requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

pub use wq_testkit::oidc::*;

/// A local OpenShift API answering `users/~` for known tokens.
pub struct FakeOpenShift {
    pub url: String,
    pub state: Arc<OpenShiftState>,
}

pub const USERS_SELF_PATH: &str = "/apis/user.openshift.io/v1/users/~";

pub struct OpenShiftState {
    /// token → (user name, groups)
    pub users: Mutex<HashMap<String, (String, Vec<String>)>>,
    /// Answer this many requests with 503 before answering normally.
    pub failures_left: AtomicUsize,
    pub requests: Requests,
    /// While true, requests are received (and counted) but not answered.
    held: tokio::sync::watch::Sender<bool>,
    /// Requests received so far, to wait on.
    received: tokio::sync::watch::Sender<usize>,
}

impl FakeOpenShift {
    pub async fn start() -> FakeOpenShift {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(OpenShiftState {
            users: Mutex::new(HashMap::new()),
            failures_left: AtomicUsize::new(0),
            requests: Requests::default(),
            held: tokio::sync::watch::Sender::new(false),
            received: tokio::sync::watch::Sender::new(0),
        });
        let app = Router::new()
            .route(USERS_SELF_PATH, get(users_self))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeOpenShift { url, state }
    }

    pub fn add_user(&self, token: &str, name: &str, groups: &[&str]) {
        self.state.users.lock().unwrap().insert(
            token.to_owned(),
            (
                name.to_owned(),
                groups.iter().map(|group| (*group).to_owned()).collect(),
            ),
        );
    }

    pub fn requests(&self) -> usize {
        self.state.requests.count(USERS_SELF_PATH)
    }

    /// From now on, requests wait unanswered until [`FakeOpenShift::release`].
    pub fn hold(&self) {
        self.state.held.send_replace(true);
    }

    /// Answers the held requests and every later one.
    pub fn release(&self) {
        self.state.held.send_replace(false);
    }

    /// Waits until `count` requests have been received in all.
    pub async fn received(&self, count: usize) {
        self.state
            .received
            .subscribe()
            .wait_for(|received| *received >= count)
            .await
            .unwrap();
    }
}

async fn users_self(
    State(state): State<Arc<OpenShiftState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    state.requests.record(&uri, &headers);
    state.received.send_modify(|received| *received += 1);
    let mut held = state.held.subscribe();
    held.wait_for(|held| !held).await.unwrap();
    if state
        .failures_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok()
    {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let token = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    match state.users.lock().unwrap().get(token) {
        Some((name, groups)) => Json(json!({
            "kind": "User",
            "apiVersion": "user.openshift.io/v1",
            "metadata": {"name": name, "uid": "5f1c"},
            "identities": [],
            "groups": groups,
        }))
        .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}
