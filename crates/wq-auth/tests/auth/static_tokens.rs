//! Static API tokens: made by `new_static_token`, accepted by the snippet it
//! prints, scoped by the rules of their groups.

use wq_auth::{AuthFailure, Identity, Permission, Scope, new_static_token};

use crate::helpers::*;

fn config(snippet: &str) -> String {
    let indented: String = snippet.lines().map(|line| format!("  {line}\n")).collect();
    format!(
        r#"
static_tokens:
{indented}rules:
  - name: bots
    groups: [bots]
    permissions: [read, submit]
    projects: ["team/*"]
"#
    )
}

#[tokio::test]
async fn the_printed_snippet_accepts_the_token() {
    let (token, snippet) = new_static_token("nightly");
    let snippet = snippet.replace("groups: []", "groups: [bots]");
    let clock = clock_now();
    let auth = authenticator(&config(&snippet), &clock);

    let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
    assert_eq!(
        principal.identity(),
        &Identity::StaticToken {
            name: "nightly".to_owned(),
            identity: "nightly".to_owned(),
            groups: vec!["bots".to_owned()],
        }
    );
    let team = Scope {
        project: Some("team/x"),
        ..Scope::ANY
    };
    let rule = principal.authorize(Permission::Submit, &team).unwrap();
    assert_eq!(
        principal.caller_identity(rule),
        "nightly (token nightly, rule bots)"
    );
    assert!(principal.authorize(Permission::Read, &Scope::ANY).is_ok());

    let other = Scope {
        project: Some("other/x"),
        ..Scope::ANY
    };
    let forbidden = principal.authorize(Permission::Submit, &other).unwrap_err();
    assert_eq!(forbidden.matched_rules, vec!["bots".to_owned()]);
    assert_eq!(
        forbidden.to_string(),
        "no rule grants submit for project other/x (rules matching the caller: bots)"
    );
}

#[tokio::test]
async fn a_wrong_token_is_refused() {
    let (token, snippet) = new_static_token("nightly");
    let snippet = snippet.replace("groups: []", "groups: [bots]");
    let clock = clock_now();
    let auth = authenticator(&config(&snippet), &clock);

    let (other_token, _) = new_static_token("nightly");
    let mut altered = token.clone();
    altered.pop();
    altered.push(if token.ends_with('A') { 'B' } else { 'A' });
    for wrong in [other_token.as_str(), altered.as_str(), "wq_"] {
        let failure = auth.authenticate(Some(&bearer(wrong))).await.unwrap_err();
        assert_eq!(failure, AuthFailure::UnknownStaticToken);
        assert_eq!(
            failure.www_authenticate(),
            "Bearer realm=\"workqueue\", error=\"invalid_token\""
        );
    }
}

#[tokio::test]
async fn missing_and_non_bearer_headers_are_refused() {
    let (token, _) = new_static_token("nightly");
    let clock = clock_now();
    let auth = authenticator("rules: []\n", &clock);
    let failure = auth.authenticate(None).await.unwrap_err();
    assert_eq!(failure, AuthFailure::MissingCredentials);
    assert_eq!(failure.www_authenticate(), "Bearer realm=\"workqueue\"");
    let failure = auth
        .authenticate(Some(&format!("Basic {token}")))
        .await
        .unwrap_err();
    assert_eq!(failure, AuthFailure::NotBearer);
    let failure = auth
        .authenticate(Some("Bearer two words"))
        .await
        .unwrap_err();
    assert_eq!(failure, AuthFailure::NotBearer);
}

#[tokio::test]
async fn an_entry_for_a_token_made_in_process_accepts_it() {
    let (token, _) = new_static_token("demo");
    let entry = wq_auth::config::StaticTokenConfig::for_token("demo", &token, vec!["bots".into()]);
    assert_eq!(entry.sha256.len(), 64);
    let config = wq_auth::AuthConfig {
        static_tokens: vec![entry],
        ..wq_auth::AuthConfig::default()
    };
    let yaml_free = config.validate().unwrap();
    let auth = wq_auth::Authenticator::with_options(
        yaml_free,
        reqwest::Client::new(),
        wq_auth::AuthenticatorOptions {
            clock: clock_now(),
            in_cluster: None,
        },
    )
    .unwrap();
    let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
    assert_eq!(principal.name(), "demo (token demo)");
    let (other, _) = new_static_token("demo");
    let failure = auth.authenticate(Some(&bearer(&other))).await.unwrap_err();
    assert_eq!(failure, AuthFailure::UnknownStaticToken);
}

#[tokio::test]
async fn a_kept_identity_is_matched_against_the_rules_again() {
    let (token, snippet) = new_static_token("nightly");
    let snippet = snippet.replace("groups: []", "groups: [bots]");
    let clock = clock_now();
    let auth = authenticator(&config(&snippet), &clock);
    let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
    // Kept as JSON (a dashboard session), read back, matched again.
    let kept = serde_json::to_value(principal.identity()).unwrap();
    let identity: Identity = serde_json::from_value(kept).unwrap();
    let again = auth.principal_of(identity.clone()).unwrap();
    assert_eq!(again.identity(), principal.identity());
    assert!(again.authorize(Permission::Read, &Scope::ANY).is_ok());
    // A config without the token refuses it.
    let (_, other) = new_static_token("other");
    let other = other.replace("groups: []", "groups: [bots]");
    let without = authenticator(&config(&other), &clock);
    assert_eq!(
        without.principal_of(identity).unwrap_err(),
        AuthFailure::UnknownStaticToken
    );
}
