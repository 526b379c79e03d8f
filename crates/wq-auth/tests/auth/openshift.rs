//! Opaque OpenShift tokens against a local `users/~`: the cache, its
//! expiry, and failures that are not cached.

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
async fn failures_are_not_cached() {
    let api = FakeOpenShift::start().await;
    let clock = clock_now();
    let auth = authenticator(&config(&api.url), &clock);

    // Unknown token: refused each time, asking each time.
    for expected_requests in 1..=2 {
        let failure = auth.authenticate(Some(&bearer(ALICE))).await.unwrap_err();
        assert_eq!(failure, AuthFailure::OpenShiftRejected { status: 401 });
        assert_eq!(api.requests(), expected_requests);
    }
    // The token becomes valid (a refreshed session): accepted at once.
    api.add_user(ALICE, "alice", &["agents"]);
    assert!(auth.authenticate(Some(&bearer(ALICE))).await.is_ok());
    assert_eq!(api.requests(), 3);

    // An outage is not remembered either.
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
