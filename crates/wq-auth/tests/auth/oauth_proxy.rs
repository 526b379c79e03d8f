//! The `/me` bridge: `X-Forwarded-Access-Token` is authenticated like a
//! bearer token and handed back, only when the proxy is enabled.

use wq_auth::{AuthFailure, Identity};

use crate::helpers::*;

fn config(api_url: &str, enabled: bool) -> String {
    format!(
        r#"
openshift:
  api_url: {api_url}
oauth_proxy:
  enabled: {enabled}
rules:
  - name: agents
    groups: [agents]
    permissions: [read]
"#
    )
}

#[tokio::test]
async fn the_forwarded_token_is_authenticated_and_returned() {
    let api = FakeOpenShift::start().await;
    api.add_user("sha256~session", "alice", &["agents"]);
    let clock = clock_now();
    let auth = authenticator(&config(&api.url, true), &clock);

    let login = auth
        .authenticate_forwarded_access_token(Some("sha256~session"))
        .await
        .unwrap();
    assert_eq!(login.bearer_token, "sha256~session");
    assert!(
        matches!(login.principal.identity(), Identity::OpenShift { username, .. } if username == "alice")
    );
    assert!(!format!("{login:?}").contains("sha256~session"));

    // The returned token then works as a bearer token (from the cache).
    let principal = auth
        .authenticate(Some(&bearer(&login.bearer_token)))
        .await
        .unwrap();
    assert_eq!(principal.rules().count(), 1);
    assert_eq!(api.requests(), 1);

    let failure = auth
        .authenticate_forwarded_access_token(None)
        .await
        .unwrap_err();
    assert_eq!(failure, AuthFailure::MissingCredentials);
    let failure = auth
        .authenticate_forwarded_access_token(Some("sha256~expired"))
        .await
        .unwrap_err();
    assert_eq!(failure, AuthFailure::OpenShiftRejected { status: 401 });
}

#[tokio::test]
async fn disabled_by_default() {
    let api = FakeOpenShift::start().await;
    api.add_user("sha256~session", "alice", &["agents"]);
    let clock = clock_now();
    let auth = authenticator(&config(&api.url, false), &clock);
    let failure = auth
        .authenticate_forwarded_access_token(Some("sha256~session"))
        .await
        .unwrap_err();
    assert_eq!(failure, AuthFailure::OAuthProxyDisabled);
    assert_eq!(api.requests(), 0);
}
