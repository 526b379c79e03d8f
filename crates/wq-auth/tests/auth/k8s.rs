//! The `k8s` issuer shorthand: skipped outside a cluster, and inside one
//! (a local server standing in for the API server) discovery comes from the
//! API server, the JWKS host is rewritten to it, and both requests carry
//! the service-account token.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use wq_auth::{AuthFailure, InCluster, Permission, Scope, ServiceAccountToken, new_static_token};

use crate::helpers::*;

const CLUSTER_ISSUER: &str = "https://oidc.example.test/cluster-1";

fn config(bots_snippet: &str) -> String {
    let indented: String = bots_snippet
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    format!(
        r#"
static_tokens:
{indented}rules:
  - name: cluster
    issuer: k8s
    claims:
      aud: workqueue
      sub: system:serviceaccount:ci:runner
    permissions: [submit]
  - name: bots
    groups: [bots]
    permissions: [read]
"#
    )
}

/// Collects formatted log output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn outside_a_cluster_k8s_rules_are_skipped_with_a_warning() {
    let (token, snippet) = new_static_token("nightly");
    let yaml = config(&snippet.replace("groups: []", "groups: [bots]"));
    let clock = clock_now();

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let auth =
        tracing::subscriber::with_default(subscriber, || authenticator_in(&yaml, &clock, None));

    assert_eq!(auth.skipped_rules(), ["cluster".to_owned()]);
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("WARN"), "{logs}");
    assert!(logs.contains("skipping rule cluster: issuer k8s"), "{logs}");

    // The other rules work.
    let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
    assert_eq!(
        principal
            .authorize(Permission::Read, &Scope::ANY)
            .unwrap()
            .name(),
        "bots"
    );

    // A service-account token finds no issuer.
    let key = rsa_key("sa", 0);
    let now = unix(&clock);
    let jwt = sign(
        &key,
        &json!({"iss": CLUSTER_ISSUER, "sub": "system:serviceaccount:ci:runner", "aud": "workqueue", "exp": now + 60}),
    );
    let failure = auth.authenticate(Some(&bearer(&jwt))).await.unwrap_err();
    assert_eq!(
        failure,
        AuthFailure::UntrustedIssuer(CLUSTER_ISSUER.to_owned())
    );
}

#[tokio::test]
async fn in_a_cluster_discovery_and_keys_come_from_the_api_server_with_the_service_account() {
    let key = ec_key("sa-key");
    // The discovered JWKS host does not resolve: only the rewrite reaches it.
    let api = FakeIssuer::start_with(&[&key], Some("sa-token"), |_| {
        (
            CLUSTER_ISSUER.to_owned(),
            "https://apiserver.invalid:6443/openid/v1/jwks".to_owned(),
        )
    })
    .await;
    let mut token_file = std::env::temp_dir();
    token_file.push(format!("wq-auth-sa-token-{}", std::process::id()));
    std::fs::write(&token_file, "sa-token\n").unwrap();
    let in_cluster = InCluster {
        api_url: api.url.parse().unwrap(),
        token: ServiceAccountToken::File(token_file.clone()),
        ca_pem: None,
    };
    let (_, snippet) = new_static_token("nightly");
    let clock = clock_now();
    let auth = authenticator_in(
        &config(&snippet.replace("groups: []", "groups: [bots]")),
        &clock,
        Some(in_cluster),
    );
    assert!(auth.skipped_rules().is_empty());

    let now = unix(&clock);
    let jwt = sign(
        &key,
        &json!({
            "iss": CLUSTER_ISSUER,
            "sub": "system:serviceaccount:ci:runner",
            "aud": ["workqueue"],
            "iat": now,
            "exp": now + 600,
            "kubernetes.io": {"namespace": "ci", "serviceaccount": {"name": "runner"}},
        }),
    );
    let principal = auth.authenticate(Some(&bearer(&jwt))).await.unwrap();
    let rule = principal
        .authorize(Permission::Submit, &Scope::ANY)
        .unwrap();
    assert_eq!(
        principal.caller_identity(rule),
        format!("system:serviceaccount:ci:runner (issuer {CLUSTER_ISSUER}, rule cluster)")
    );
    assert_eq!(
        api.state.requests.all(),
        [
            (
                DISCOVERY_PATH.to_owned(),
                Some("Bearer sa-token".to_owned())
            ),
            (
                "/openid/v1/jwks".to_owned(),
                Some("Bearer sa-token".to_owned())
            ),
        ]
    );
    std::fs::remove_file(token_file).unwrap();
}

#[tokio::test]
async fn in_a_cluster_a_refused_service_account_leaves_the_issuer_unavailable() {
    let key = ec_key("sa-key");
    let api = FakeIssuer::start_with(&[&key], Some("sa-token"), |url| {
        (CLUSTER_ISSUER.to_owned(), format!("{url}/openid/v1/jwks"))
    })
    .await;
    let in_cluster = InCluster {
        api_url: api.url.parse().unwrap(),
        token: ServiceAccountToken::Value("wrong-token".to_owned()),
        ca_pem: None,
    };
    let (_, snippet) = new_static_token("nightly");
    let clock = clock_now();
    let auth = authenticator_in(
        &config(&snippet.replace("groups: []", "groups: [bots]")),
        &clock,
        Some(in_cluster),
    );
    let now = unix(&clock);
    let jwt = sign(
        &key,
        &json!({"iss": CLUSTER_ISSUER, "sub": "system:serviceaccount:ci:runner", "aud": "workqueue", "exp": now + 60}),
    );
    let failure = auth.authenticate(Some(&bearer(&jwt))).await.unwrap_err();
    let AuthFailure::IssuerUnavailable { issuer, reason } = &failure else {
        panic!("expected IssuerUnavailable, got {failure:?}");
    };
    assert_eq!(issuer, "k8s");
    assert!(reason.contains("HTTP 401"), "{reason}");
    assert_eq!(api.discovery_fetches(), 1);
    assert_eq!(api.jwks_fetches(), 0);
}
