//! Opaque OpenShift tokens against a local `users/~`: the cache, its
//! expiry, refusals cached briefly, outages not at all, one look-up per
//! token however many callers, and the cap on look-ups in flight.

use std::sync::Arc;

use time::Duration;
use wq_auth::{AuthFailure, Identity, Permission, Scope};

use crate::helpers::*;

fn config(api_url: &str) -> String {
    format!(
        r#"
openshift:
  api_url: {api_url}
rules:
  - name: agents
    groups: [agents]
    permissions: [read, submit]
    projects: ["team/*"]
  - name: admins
    groups: [platform]
    permissions: [admin]
"#
    )
}

const ALICE: &str = "sha256~alice-token";

#[tokio::test]
async fn the_user_and_groups_come_from_users_self_and_map_to_rules() {
    let api = FakeOpenShift::start().await;
    api.add_user(ALICE, "alice", &["agents", "system:authenticated"]);
    let clock = clock_now();
    let auth = authenticator(&config(&api.url), &clock);

    let principal = auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    assert_eq!(
        principal.identity(),
        &Identity::OpenShift {
            username: "alice".to_owned(),
            groups: vec!["agents".to_owned(), "system:authenticated".to_owned()],
        }
    );
    let scope = Scope {
        project: Some("team/app"),
        ..Scope::ANY
    };
    let rule = principal.authorize(Permission::Submit, &scope).unwrap();
    assert_eq!(principal.caller_identity(rule), "alice (rule agents)");
    assert!(principal.authorize(Permission::Retry, &scope).is_err());
    // The caller's own token went to the API.
    assert_eq!(
        api.state.requests.all(),
        vec![(USERS_SELF_PATH.to_owned(), Some(format!("Bearer {ALICE}")))]
    );
}

#[tokio::test]
async fn a_second_call_within_the_ttl_makes_no_request() {
    let api = FakeOpenShift::start().await;
    api.add_user(ALICE, "alice", &["agents"]);
    let clock = clock_now();
    let auth = authenticator(&config(&api.url), &clock);

    auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    clock.advance(Duration::seconds(299));
    let principal = auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    assert!(
        matches!(principal.identity(), Identity::OpenShift { username, .. } if username == "alice")
    );
    assert_eq!(api.requests(), 1);
}

#[tokio::test]
async fn the_cache_expires_after_the_ttl() {
    let api = FakeOpenShift::start().await;
    api.add_user(ALICE, "alice", &["agents"]);
    let clock = clock_now();
    let auth = authenticator(&config(&api.url), &clock);

    auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    assert_eq!(api.requests(), 1);
    // The user moves to another group; after the TTL the change shows.
    api.add_user(ALICE, "alice", &["platform"]);
    clock.advance(Duration::seconds(301));
    let principal = auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    assert_eq!(api.requests(), 2);
    let names: Vec<&str> = principal.rules().map(|rule| rule.name()).collect();
    assert_eq!(names, ["admins"]);
}

#[tokio::test]
async fn refusals_are_cached_briefly_and_outages_not_at_all() {
    let api = FakeOpenShift::start().await;
    let clock = clock_now();
    let auth = authenticator(&config(&api.url), &clock);

    // Unknown token: asked once, then refused from the cache for 10 s.
    for _ in 0..5 {
        let failure = auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
        assert_eq!(failure, AuthFailure::OpenShiftRejected { status: 401 });
    }
    assert_eq!(api.requests(), 1);
    clock.advance(Duration::seconds(9));
    auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
    assert_eq!(api.requests(), 1);
    clock.advance(Duration::seconds(1));
    auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
    assert_eq!(api.requests(), 2);

    // The token becomes valid: accepted once its refusal has expired.
    api.add_user(ALICE, "alice", &["agents"]);
    clock.advance(Duration::seconds(10));
    assert!(auth.authenticate(Some(&bearer(ALICE))).await.is_ok());
    assert_eq!(api.requests(), 3);

    // An outage is not remembered.
    let bob = "sha256~bob-token";
    api.add_user(bob, "bob", &["agents"]);
    api.state
        .failures_left
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let failure = auth.authenticate(Some(&bearer(bob))).await.unwrap_err();
    assert!(failure.is_upstream_problem(), "{failure:?}");
    assert!(auth.authenticate(Some(&bearer(bob))).await.is_ok());
    assert_eq!(api.requests(), 5);
}

#[tokio::test]
async fn a_refusal_ttl_of_zero_asks_every_time() {
    let api = FakeOpenShift::start().await;
    let clock = clock_now();
    let yaml = config(&api.url).replace(
        "openshift:\n",
        "openshift:\n  refusal_cache_ttl_seconds: 0\n",
    );
    let auth = authenticator(&yaml, &clock);
    for expected_requests in 1..=3 {
        let failure = auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
        assert_eq!(failure, AuthFailure::OpenShiftRejected { status: 401 });
        assert_eq!(api.requests(), expected_requests);
    }
}

#[tokio::test]
async fn concurrent_requests_with_one_token_share_one_look_up() {
    let api = FakeOpenShift::start().await;
    api.add_user(ALICE, "alice", &["agents"]);
    let clock = clock_now();
    let auth = Arc::new(authenticator(&config(&api.url), &clock));

    api.hold();
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.authenticate(Some(&bearer(ALICE))).await })
        })
        .collect();
    api.received(1).await;
    // Every caller has had its turn while the first look-up is held.
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    api.release();
    for caller in callers {
        let principal = caller.await.unwrap().unwrap();
        assert_eq!(principal.name(), "alice");
    }
    assert_eq!(api.requests(), 1);
    // Once the cached answer expires, the next caller asks again: the
    // shared look-up left no answer of its own behind.
    clock.advance(Duration::seconds(301));
    let principal = auth.authenticate(Some(&bearer(ALICE))).await.unwrap();
    assert_eq!(principal.name(), "alice");
    assert_eq!(api.requests(), 2);

    // The same for a refused token: one request answers every caller.
    let unknown = "sha256~unknown";
    api.hold();
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.authenticate(Some(&bearer(unknown))).await })
        })
        .collect();
    api.received(3).await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    api.release();
    for caller in callers {
        assert_eq!(
            caller.await.unwrap().unwrap_err(),
            AuthFailure::OpenShiftRejected { status: 401 }
        );
    }
    assert_eq!(api.requests(), 3);
}

/// `config` with at most `max` look-ups in flight, waiting `wait_ms` for one.
fn capped(api_url: &str, max: usize, wait_ms: u64) -> String {
    config(api_url).replace(
        "openshift:\n",
        &format!(
            "openshift:\n  max_concurrent_lookups: {max}\n  lookup_wait_milliseconds: {wait_ms}\n"
        ),
    )
}

#[tokio::test]
async fn look_ups_beyond_the_cap_are_answered_unavailable_not_queued() {
    let api = FakeOpenShift::start().await;
    let tokens = ["sha256~one", "sha256~two", "sha256~three"];
    for (index, token) in tokens.iter().enumerate() {
        api.add_user(token, &format!("user-{index}"), &["agents"]);
    }
    let clock = clock_now();
    let auth = Arc::new(authenticator(&capped(&api.url, 2, 0), &clock));

    api.hold();
    let spawn = |token: &'static str| {
        let auth = auth.clone();
        tokio::spawn(async move { auth.authenticate(Some(&bearer(token))).await })
    };
    let first = spawn(tokens[0]);
    let second = spawn(tokens[1]);
    api.received(2).await;
    // Both slots are taken: a third token is turned away at once, without
    // a request, as an upstream problem (503 at the API, not 401).
    // (The timeout only keeps a regression from hanging the suite.)
    let failure = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        auth.authenticate(Some(&bearer(tokens[2]))),
    )
    .await
    .expect("answered at once, not queued")
    .unwrap_err();
    assert!(
        matches!(&failure, AuthFailure::OpenShiftUnavailable(reason) if reason.contains("max_concurrent_lookups")),
        "{failure:?}"
    );
    assert!(failure.is_upstream_problem());
    // A caller with a token already being looked up needs no slot.
    let joined = spawn(tokens[0]);
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(api.requests(), 2);

    api.release();
    assert_eq!(first.await.unwrap().unwrap().name(), "user-0");
    assert_eq!(second.await.unwrap().unwrap().name(), "user-1");
    assert_eq!(joined.await.unwrap().unwrap().name(), "user-0");
    assert_eq!(api.requests(), 2);
    // The slots are free again; the turned-away answer was not cached.
    let principal = auth.authenticate(Some(&bearer(tokens[2]))).await.unwrap();
    assert_eq!(principal.name(), "user-2");
    assert_eq!(api.requests(), 3);
}

#[tokio::test]
async fn a_look_up_waits_for_a_slot_that_frees_within_the_wait() {
    let api = FakeOpenShift::start().await;
    api.add_user("sha256~one", "one", &["agents"]);
    api.add_user("sha256~two", "two", &["agents"]);
    let clock = clock_now();
    let auth = Arc::new(authenticator(&capped(&api.url, 1, 10_000), &clock));

    api.hold();
    let spawn = |token: &'static str| {
        let auth = auth.clone();
        tokio::spawn(async move { auth.authenticate(Some(&bearer(token))).await })
    };
    let first = spawn("sha256~one");
    api.received(1).await;
    let second = spawn("sha256~two");
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    // The second waits for the only slot: no request yet.
    assert_eq!(api.requests(), 1);
    api.release();
    assert_eq!(first.await.unwrap().unwrap().name(), "one");
    assert_eq!(second.await.unwrap().unwrap().name(), "two");
    assert_eq!(api.requests(), 2);
}

#[tokio::test]
async fn without_openshift_config_such_tokens_are_refused() {
    let clock = clock_now();
    let auth = authenticator("rules: []\n", &clock);
    let failure = auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
    assert_eq!(failure, AuthFailure::OpenShiftNotConfigured);
}

#[test]
fn a_ca_file_that_cannot_be_used_stops_the_setup() {
    let missing = std::env::temp_dir().join(format!("wq-auth-no-ca-{}.pem", std::process::id()));
    let not_pem = std::env::temp_dir().join(format!("wq-auth-not-pem-{}.pem", std::process::id()));
    std::fs::write(&not_pem, "hello\n").unwrap();
    for (path, expected) in [
        (&missing, "cannot read"),
        (&not_pem, "holds no certificate"),
    ] {
        let yaml = format!(
            "openshift:\n  api_url: https://api.cluster.example:6443\n  ca_file: {}\n",
            path.display()
        );
        let error = wq_auth::Authenticator::with_options(
            settings(&yaml),
            reqwest::Client::new(),
            wq_auth::AuthenticatorOptions {
                clock: clock_now(),
                in_cluster: None,
            },
        )
        .err()
        .expect("the setup must fail")
        .to_string();
        assert!(error.contains("auth.openshift.ca_file: "), "{error}");
        assert!(error.contains(expected), "{error}");
    }
    std::fs::remove_file(not_pem).unwrap();
}
