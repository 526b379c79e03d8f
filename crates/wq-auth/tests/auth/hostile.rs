//! Hostile bearer tokens: each is refused without a panic, and where the
//! token's form already decides, without a request to an issuer or the
//! OpenShift API. Grows with every finding.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use wq_auth::{AuthFailure, Authenticator, MAX_TOKEN_BYTES, new_static_token};

use crate::helpers::*;

/// An authenticator trusting `issuer` (one `ci` rule), OpenShift at
/// `openshift`, and one static token, which it returns.
fn setup(issuer: &FakeIssuer, openshift: &FakeOpenShift) -> (Authenticator, String) {
    let (static_token, snippet) = new_static_token("nightly");
    let snippet: String = snippet
        .replace("groups: []", "groups: [bots]")
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    let yaml = format!(
        r#"
openshift:
  api_url: {openshift}
static_tokens:
{snippet}rules:
  - name: bots
    groups: [bots, agents]
    permissions: [read]
  - name: ci
    issuer: {issuer}
    claims:
      aud: workqueue
      project_path: team/app
    permissions: [submit]
"#,
        openshift = openshift.url,
        issuer = issuer.url,
    );
    (authenticator(&yaml, &clock_now()), static_token)
}

fn segment(value: &serde_json::Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// Valid `ci` claims for `iss`, as far as the claims go.
fn claims(iss: &str) -> serde_json::Value {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    json!({
        "iss": iss, "sub": "project_path:team/app:ref_type:branch:ref:main",
        "aud": "workqueue", "project_path": "team/app",
        "iat": now, "nbf": now, "exp": now + 300,
    })
}

/// No request reached the issuer or the OpenShift API.
fn assert_no_requests(issuer: &FakeIssuer, openshift: &FakeOpenShift, what: &str) {
    assert_eq!(issuer.state.requests.all(), vec![], "{what}: issuer asked");
    assert_eq!(openshift.requests(), 0, "{what}: OpenShift asked");
}

#[tokio::test]
async fn oversized_and_non_ascii_tokens_are_refused_before_any_look_up() {
    let key = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&key]).await;
    let openshift = FakeOpenShift::start().await;
    let (auth, static_token) = setup(&issuer, &openshift);
    openshift.add_user("sha256~alice", "alice", &["agents"]);
    let valid_jwt = sign(&key, &claims(&issuer.url));

    let long = "a".repeat(MAX_TOKEN_BYTES + 1);
    let long_openshift = format!("sha256~{}", "A".repeat(MAX_TOKEN_BYTES));
    let long_jwt = format!("{valid_jwt}{}", "A".repeat(MAX_TOKEN_BYTES));
    let cases: Vec<(&str, String)> = vec![
        ("longer than the limit", long),
        ("a long OpenShift token", long_openshift),
        ("a long JWT", long_jwt),
        ("NUL in an OpenShift token", "sha256~alice\0".to_owned()),
        ("CR LF in an OpenShift token", "sha256~al\r\nice".to_owned()),
        ("DEL in a static token", format!("{static_token}\x7f")),
        ("escape in a JWT", format!("{valid_jwt}\x1b[0m")),
        ("tab inside", "sha256~al\tice".to_owned()),
        ("non-ASCII", "sha256~alïce".to_owned()),
        ("a bidi override", format!("{static_token}\u{202e}")),
    ];
    for (what, token) in &cases {
        let failure = auth.authenticate_token(token).await.unwrap_err();
        assert_eq!(failure, AuthFailure::NotBearer, "{what}");
        // The same through the header (its surrounding space is trimmed).
        let failure = auth.authenticate(Some(&bearer(token))).await.unwrap_err();
        assert_eq!(failure, AuthFailure::NotBearer, "{what} (header)");
    }
    assert_no_requests(&issuer, &openshift, "oversized or non-ASCII");
    // The clean tokens still work.
    assert!(auth.authenticate_token(&static_token).await.is_ok());
    assert!(auth.authenticate_token("sha256~alice").await.is_ok());
}

#[tokio::test]
async fn junk_openshift_tokens_are_refused_without_a_request() {
    let key = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&key]).await;
    let openshift = FakeOpenShift::start().await;
    let (auth, _) = setup(&issuer, &openshift);

    for token in [
        "sha256~",
        "sha256~!!!",
        "sha256~abc/def",
        "sha256~abc+def",
        "sha256~YWJj==",
        "sha256~a.b.c",
        "sha256~~",
        "sha256~%00",
    ] {
        let failure = auth.authenticate_token(token).await.unwrap_err();
        assert_eq!(failure, AuthFailure::MalformedOpenShiftToken, "{token}");
        assert!(!failure.is_upstream_problem(), "{token}");
    }
    assert_no_requests(&issuer, &openshift, "junk sha256~");
    // A well-formed unknown token is asked about once, then refused from
    // the cache.
    for _ in 0..3 {
        let failure = auth
            .authenticate_token("sha256~bm90LWEtdG9rZW4")
            .await
            .unwrap_err();
        assert_eq!(failure, AuthFailure::OpenShiftRejected { status: 401 });
    }
    assert_eq!(openshift.requests(), 1);
}

#[tokio::test]
async fn forged_jwts_are_refused_without_fetching_keys() {
    let key = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&key]).await;
    let openshift = FakeOpenShift::start().await;
    let (auth, _) = setup(&issuer, &openshift);
    let body = segment(&claims(&issuer.url));

    // `alg: none`, unsigned, in the spellings attackers try.
    for alg in ["none", "None", "NONE", "nOnE"] {
        let header = segment(&json!({"alg": alg, "typ": "JWT", "kid": "rsa-1"}));
        for signature in ["", "e30"] {
            let token = format!("{header}.{body}.{signature}");
            let failure = auth.authenticate_token(&token).await.unwrap_err();
            assert!(
                matches!(
                    failure,
                    AuthFailure::MalformedJwt(_) | AuthFailure::AlgorithmNotAllowed(_)
                ),
                "alg {alg}: {failure:?}"
            );
        }
    }
    // HS256 signed with the issuer's public key as the secret.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-1".to_owned());
    let confused = jsonwebtoken::encode(
        &header,
        &claims(&issuer.url),
        &EncodingKey::from_secret(&key.public_pem).unwrap(),
    )
    .unwrap();
    assert_eq!(
        auth.authenticate_token(&confused).await.unwrap_err(),
        AuthFailure::AlgorithmNotAllowed("HS256".to_owned())
    );
    // Three parts that are not a JWT.
    for token in [
        "a.b.c",
        "..",
        "e30.e30.e30",
        "eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIn0.%%%.x",
        &format!("{}.{body}.x", segment(&json!(["RS256"]))),
        &format!("{}.{body}.x", segment(&json!({"alg": "RS256", "kid": 5}))),
    ] {
        let failure = auth.authenticate_token(token).await.unwrap_err();
        assert!(
            matches!(failure, AuthFailure::MalformedJwt(_)),
            "{token}: {failure:?}"
        );
    }
    // No kid: nothing to look up.
    let header = segment(&json!({"alg": "RS256", "typ": "JWT"}));
    assert_eq!(
        auth.authenticate_token(&format!("{header}.{body}.e30"))
            .await
            .unwrap_err(),
        AuthFailure::MissingKeyId
    );
    assert_no_requests(&issuer, &openshift, "forged JWTs");
}

#[tokio::test]
async fn a_jwt_from_an_issuer_no_rule_names_is_refused_without_a_request() {
    let key = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&key]).await;
    let openshift = FakeOpenShift::start().await;
    let (auth, _) = setup(&issuer, &openshift);

    for iss in [
        "https://evil.example".to_owned(),
        format!("{}/other", issuer.url),
        format!("{}/../{}", issuer.url, "x"),
        issuer.url.to_uppercase(),
        format!("{} ", issuer.url),
        String::new(),
    ] {
        let token = sign(&key, &claims(&iss));
        let failure = auth.authenticate_token(&token).await.unwrap_err();
        assert_eq!(failure, AuthFailure::UntrustedIssuer(iss.clone()), "{iss}");
    }
    // `iss` that is not a string, or absent.
    for iss in [json!(42), json!(null), json!([issuer.url]), json!({"a": 1})] {
        let mut claims = claims(&issuer.url);
        claims["iss"] = iss.clone();
        let failure = auth
            .authenticate_token(&sign(&key, &claims))
            .await
            .unwrap_err();
        assert!(
            matches!(failure, AuthFailure::BadClaim { claim: "iss", .. }),
            "{iss}: {failure:?}"
        );
    }
    assert_no_requests(&issuer, &openshift, "unknown issuer");
}
