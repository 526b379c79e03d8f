//! JWTs from a local OIDC issuer: acceptance, every refusal, claim
//! matching, key rotation and the refresh rate limit.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use time::Duration;
use wq_auth::{AuthFailure, Identity, Permission, Scope};
use wq_core::ManualClock;

use crate::helpers::*;

fn ci_rules(issuer: &str) -> String {
    format!("rules:\n{}", ci_rule(issuer))
}

/// The `ci` rule, as a list item.
fn ci_rule(issuer: &str) -> String {
    format!(
        r#"  - name: ci
    issuer: {issuer}
    claims:
      aud: workqueue
      project_id: 42
      ref_protected: true
      ref: [main, stable]
    permissions: [submit, read]
    projects: ["team/*"]
"#
    )
}

/// Claims that satisfy the `ci` rule, valid for five minutes.
fn ci_claims(issuer: &str, clock: &ManualClock) -> Value {
    let now = unix(clock);
    json!({
        "iss": issuer,
        "sub": "project_path:team/app:ref_type:branch:ref:main",
        "aud": "workqueue",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "project_id": "42",
        "ref_protected": "true",
        "ref": "main",
    })
}

fn with(mut claims: Value, changes: Value) -> Value {
    for (key, value) in changes.as_object().unwrap() {
        if value.is_null() {
            claims.as_object_mut().unwrap().remove(key);
        } else {
            claims[key] = value.clone();
        }
    }
    claims
}

const TEAM_APP: Scope<'static> = Scope {
    item_type: Some("mr"),
    forge: Some("gitlab"),
    project: Some("team/app"),
    ..Scope::ANY
};

#[tokio::test]
async fn valid_rs256_and_es256_tokens_are_authenticated_and_authorized() {
    let rsa = rsa_key("rsa-1", 0);
    let ec = ec_key("ec-1");
    let issuer = FakeIssuer::start(&[&rsa, &ec]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);

    for key in [&rsa, &ec] {
        let token = sign(key, &ci_claims(&issuer.url, &clock));
        let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
        let Identity::Jwt {
            issuer: iss,
            subject,
            claims,
        } = principal.identity()
        else {
            panic!("not a JWT identity: {principal:?}");
        };
        assert_eq!(iss, &issuer.url);
        assert_eq!(subject, "project_path:team/app:ref_type:branch:ref:main");
        assert_eq!(claims["project_id"], "42");

        let rule = principal.authorize(Permission::Submit, &TEAM_APP).unwrap();
        assert_eq!(rule.name(), "ci");
        assert_eq!(
            principal.caller_identity(rule),
            format!(
                "project_path:team/app:ref_type:branch:ref:main (issuer {}, rule ci)",
                issuer.url
            )
        );
        assert!(principal.authorize(Permission::Read, &Scope::ANY).is_ok());
        let forbidden = principal
            .authorize(Permission::Merge, &TEAM_APP)
            .unwrap_err();
        assert_eq!(forbidden.matched_rules, vec!["ci".to_owned()]);
        let elsewhere = Scope {
            project: Some("other/app"),
            ..TEAM_APP
        };
        assert!(principal.authorize(Permission::Submit, &elsewhere).is_err());
    }
    assert_eq!(issuer.discovery_fetches(), 1);
    assert_eq!(
        issuer.jwks_fetches(),
        1,
        "the keys are fetched once and cached"
    );
}

/// What a refusal must look like.
type Expected = fn(&AuthFailure) -> bool;

/// Each refusal is an `AuthFailure` (401) with the invalid_token challenge.
#[tokio::test]
async fn bad_tokens_are_refused() {
    let rsa = rsa_key("rsa-1", 0);
    let stranger = rsa_key("rsa-1", 1);
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);
    let good = ci_claims(&issuer.url, &clock);
    let now = unix(&clock);

    let expired = sign(
        &rsa,
        &with(
            good.clone(),
            json!({"iat": now - 900, "nbf": now - 900, "exp": now - 61}),
        ),
    );
    let wrong_audience = sign(&rsa, &with(good.clone(), json!({"aud": ["other-service"]})));
    let no_audience = sign(&rsa, &with(good.clone(), json!({"aud": null})));
    let wrong_issuer = sign(
        &rsa,
        &with(good.clone(), json!({"iss": "https://evil.example.com"})),
    );
    let unknown_kid = sign(&rsa_key("rsa-2", 0), &good);
    let other_key_same_kid = sign(&stranger, &good);
    let no_expiry = sign(&rsa, &with(good.clone(), json!({"exp": null})));
    let no_subject = sign(&rsa, &with(good.clone(), json!({"sub": null})));
    let not_yet_valid = sign(&rsa, &with(good.clone(), json!({"nbf": now + 120})));
    let issued_in_future = sign(&rsa, &with(good.clone(), json!({"iat": now + 120})));

    let valid = sign(&rsa, &good);
    let (signed_part, _) = valid.rsplit_once('.').unwrap();
    let tampered_payload = URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&with(good.clone(), json!({"project_id": "43"}))).unwrap());
    let header_part = signed_part.split('.').next().unwrap();
    let tampered = format!(
        "{header_part}.{tampered_payload}.{}",
        valid.rsplit_once('.').unwrap().1
    );

    let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#);
    let none_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&good).unwrap());
    let alg_none = format!("{none_header}.{none_payload}.");

    // HS256 signed with the RSA public key as the secret: the classic key
    // confusion, with the kid of the issuer's RSA key.
    let mut hs_header = Header::new(Algorithm::HS256);
    hs_header.kid = Some("rsa-1".to_owned());
    let hs256 = jsonwebtoken::encode(
        &hs_header,
        &good,
        &EncodingKey::from_secret(&rsa.public_pem).unwrap(),
    )
    .unwrap();

    let cases: Vec<(&str, String, Expected)> = vec![
        ("expired", expired, |f| {
            matches!(f, AuthFailure::Expired { .. })
        }),
        ("wrong aud", wrong_audience, |f| {
            matches!(f, AuthFailure::AudienceNotAccepted { .. })
        }),
        ("no aud", no_audience, |f| {
            matches!(f, AuthFailure::AudienceNotAccepted { .. })
        }),
        (
            "wrong iss",
            wrong_issuer,
            |f| matches!(f, AuthFailure::UntrustedIssuer(iss) if iss == "https://evil.example.com"),
        ),
        (
            "unknown kid",
            unknown_kid,
            |f| matches!(f, AuthFailure::UnknownKeyId { kid, .. } if kid == "rsa-2"),
        ),
        ("another key under a known kid", other_key_same_kid, |f| {
            matches!(f, AuthFailure::BadSignature(_))
        }),
        ("tampered", tampered, |f| {
            matches!(f, AuthFailure::BadSignature(_))
        }),
        ("alg none", alg_none, |f| {
            matches!(
                f,
                AuthFailure::MalformedJwt(_) | AuthFailure::AlgorithmNotAllowed(_)
            )
        }),
        (
            "HS256 with the RSA public key",
            hs256,
            |f| matches!(f, AuthFailure::AlgorithmNotAllowed(alg) if alg == "HS256"),
        ),
        ("no exp", no_expiry, |f| {
            matches!(f, AuthFailure::BadClaim { claim: "exp", .. })
        }),
        ("no sub", no_subject, |f| {
            matches!(f, AuthFailure::BadClaim { claim: "sub", .. })
        }),
        ("nbf ahead", not_yet_valid, |f| {
            matches!(f, AuthFailure::NotYetValid { .. })
        }),
        ("iat ahead", issued_in_future, |f| {
            matches!(f, AuthFailure::IssuedInFuture { .. })
        }),
    ];
    for (label, token, expected) in cases {
        let failure = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
        assert!(expected(&failure), "{label}: got {failure:?}");
        assert_eq!(
            failure.www_authenticate(),
            "Bearer realm=\"workqueue\", error=\"invalid_token\"",
            "{label}"
        );
    }
    // The good token still works after all that.
    assert!(auth.authenticate(Some(&bearer(&valid))).await.is_ok());
}

#[tokio::test]
async fn clock_skew_within_the_leeway_is_accepted() {
    let rsa = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);
    let now = unix(&clock);
    let skewed = with(
        ci_claims(&issuer.url, &clock),
        json!({"exp": now - 30, "nbf": now + 30, "iat": now + 30}),
    );
    let token = sign(&rsa, &skewed);
    assert!(auth.authenticate(Some(&bearer(&token))).await.is_ok());

    clock.advance(Duration::seconds(31));
    let failure = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
    assert_eq!(
        failure,
        AuthFailure::Expired {
            expired_at: now - 30
        }
    );
}

#[tokio::test]
async fn numeric_and_boolean_claims_match_their_exact_text() {
    let rsa = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    // The rules write strings; the first token carries a number and a bool.
    // `"TRUE"` is not the text of `true`: that rule matches nothing.
    let rules = format!(
        r#"
rules:
  - name: strings
    issuer: {url}
    claims:
      aud: workqueue
      project_id: "7"
      ref_protected: "true"
    permissions: [merge]
  - name: shouting
    issuer: {url}
    claims:
      aud: workqueue
      project_id: "7"
      ref_protected: "TRUE"
    permissions: [merge]
"#,
        url = issuer.url
    );
    let auth = authenticator(&format!("{rules}{}", ci_rule(&issuer.url)), &clock);
    let base = ci_claims(&issuer.url, &clock);

    let typed = sign(
        &rsa,
        &with(
            base.clone(),
            json!({"project_id": 7, "ref_protected": true}),
        ),
    );
    let principal = auth.authenticate(Some(&bearer(&typed))).await.unwrap();
    let names: Vec<&str> = principal.rules().map(|rule| rule.name()).collect();
    assert_eq!(names, ["strings"]);

    // The `ci` rule writes `project_id: 42` and `ref_protected: true`.
    let strings = sign(
        &rsa,
        &with(
            base.clone(),
            json!({"project_id": "42", "ref_protected": "true"}),
        ),
    );
    let principal = auth.authenticate(Some(&bearer(&strings))).await.unwrap();
    assert_eq!(
        principal
            .authorize(Permission::Submit, &TEAM_APP)
            .unwrap()
            .name(),
        "ci"
    );
    let numbers = sign(
        &rsa,
        &with(
            base.clone(),
            json!({"project_id": 42, "ref_protected": true}),
        ),
    );
    let principal = auth.authenticate(Some(&bearer(&numbers))).await.unwrap();
    assert_eq!(
        principal
            .authorize(Permission::Submit, &TEAM_APP)
            .unwrap()
            .name(),
        "ci"
    );

    let unprotected = sign(&rsa, &with(base.clone(), json!({"ref_protected": false})));
    let principal = auth
        .authenticate(Some(&bearer(&unprotected)))
        .await
        .unwrap();
    assert_eq!(principal.rules().count(), 0);
    let forbidden = principal
        .authorize(Permission::Submit, &TEAM_APP)
        .unwrap_err();
    assert!(forbidden.matched_rules.is_empty());
    assert_eq!(
        forbidden.to_string(),
        "no rule grants submit for item type mr, forge gitlab, project team/app (no rule matches the caller)"
    );
}

#[tokio::test]
async fn a_list_value_accepts_any_of_its_items() {
    let rsa = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);
    let base = ci_claims(&issuer.url, &clock);
    for (git_ref, granted) in [
        ("main", true),
        ("stable", true),
        ("Stable", false),
        ("next", false),
    ] {
        let token = sign(&rsa, &with(base.clone(), json!({"ref": git_ref})));
        let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
        assert_eq!(
            principal.authorize(Permission::Submit, &TEAM_APP).is_ok(),
            granted,
            "ref {git_ref}"
        );
    }
    // A list-valued `aud` passes when one of its items is accepted.
    let token = sign(&rsa, &with(base, json!({"aud": ["other", "workqueue"]})));
    assert!(auth.authenticate(Some(&bearer(&token))).await.is_ok());
}

#[tokio::test]
async fn a_rotated_key_is_picked_up_without_restart() {
    let old = rsa_key("2024", 0);
    let new = ec_key("2025");
    let issuer = FakeIssuer::start(&[&old]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);
    let old_token = sign(&old, &ci_claims(&issuer.url, &clock));
    assert!(auth.authenticate(Some(&bearer(&old_token))).await.is_ok());
    assert_eq!(issuer.jwks_fetches(), 1);

    // The issuer rotates: only the new key is published.
    issuer.set_keys(&[&new]);
    clock.advance(Duration::seconds(31));
    let new_token = sign(&new, &ci_claims(&issuer.url, &clock));
    let principal = auth.authenticate(Some(&bearer(&new_token))).await.unwrap();
    assert_eq!(principal.rules().count(), 1);
    assert_eq!(
        issuer.jwks_fetches(),
        2,
        "the unknown kid caused one refresh"
    );

    // The withdrawn key is gone with the refresh.
    let old_token = sign(&old, &ci_claims(&issuer.url, &clock));
    let failure = auth
        .authenticate(Some(&bearer(&old_token)))
        .await
        .unwrap_err();
    assert!(
        matches!(failure, AuthFailure::UnknownKeyId { .. }),
        "{failure:?}"
    );
    assert_eq!(issuer.discovery_fetches(), 1, "discovery is not repeated");
}

#[tokio::test]
async fn keys_older_than_the_max_age_are_fetched_again() {
    let first = rsa_key("k1", 0);
    let issuer = FakeIssuer::start(&[&first]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);
    assert!(
        auth.authenticate(Some(&bearer(&sign(
            &first,
            &ci_claims(&issuer.url, &clock)
        ))))
        .await
        .is_ok()
    );

    // The issuer withdraws k1; within the hour the cached key still holds.
    issuer.set_keys(&[]);
    clock.advance(Duration::minutes(59));
    assert!(
        auth.authenticate(Some(&bearer(&sign(
            &first,
            &ci_claims(&issuer.url, &clock)
        ))))
        .await
        .is_ok()
    );
    assert_eq!(issuer.jwks_fetches(), 1);

    clock.advance(Duration::minutes(2));
    let failure = auth
        .authenticate(Some(&bearer(&sign(
            &first,
            &ci_claims(&issuer.url, &clock),
        ))))
        .await
        .unwrap_err();
    assert!(
        matches!(failure, AuthFailure::UnknownKeyId { .. }),
        "{failure:?}"
    );
    assert_eq!(issuer.jwks_fetches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_unknown_kids_causes_at_most_one_fetch() {
    let known = rsa_key("known", 0);
    let issuer = FakeIssuer::start(&[&known]).await;
    let clock = clock_now();
    let auth = Arc::new(authenticator(&ci_rules(&issuer.url), &clock));
    assert!(
        auth.authenticate(Some(&bearer(&sign(
            &known,
            &ci_claims(&issuer.url, &clock)
        ))))
        .await
        .is_ok()
    );
    assert_eq!(issuer.jwks_fetches(), 1);

    let burst = |count: usize| {
        let mut tasks = tokio::task::JoinSet::new();
        for index in 0..count {
            let forged = sign(
                &rsa_key(&format!("forged-{index}"), 1),
                &ci_claims(&issuer.url, &clock),
            );
            let auth = auth.clone();
            tasks.spawn(async move { auth.authenticate(Some(&bearer(&forged))).await });
        }
        tasks
    };

    // Right after a fetch: no fetch at all.
    let results = burst(20).join_all().await;
    assert!(
        results
            .iter()
            .all(|result| matches!(result, Err(AuthFailure::UnknownKeyId { .. })))
    );
    assert_eq!(issuer.jwks_fetches(), 1);

    // Past the interval: the whole burst shares one fetch.
    clock.advance(Duration::seconds(31));
    let results = burst(20).join_all().await;
    assert!(
        results
            .iter()
            .all(|result| matches!(result, Err(AuthFailure::UnknownKeyId { .. })))
    );
    assert_eq!(issuer.jwks_fetches(), 2);

    let results = burst(20).join_all().await;
    assert_eq!(results.len(), 20);
    assert_eq!(issuer.jwks_fetches(), 2);
}

#[tokio::test]
async fn a_discovery_document_naming_another_issuer_is_refused() {
    let rsa = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start_with(&[&rsa], None, |url| {
        (format!("{url}/impostor"), format!("{url}{JWKS_PATH}"))
    })
    .await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&issuer.url), &clock);

    let token = sign(&rsa, &ci_claims(&issuer.url, &clock));
    let failure = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
    let AuthFailure::IssuerUnavailable { reason, .. } = &failure else {
        panic!("expected IssuerUnavailable, got {failure:?}");
    };
    assert!(reason.contains("names issuer"), "{reason}");
    assert!(failure.is_upstream_problem());

    // A token claiming the document's issuer is not trusted either.
    let token = sign(
        &rsa,
        &ci_claims(&format!("{}/impostor", issuer.url), &clock),
    );
    let failure = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
    assert!(
        matches!(failure, AuthFailure::UntrustedIssuer(_)),
        "{failure:?}"
    );
    assert_eq!(
        issuer.jwks_fetches(),
        0,
        "no keys are fetched from a refused issuer"
    );
}

#[tokio::test]
async fn the_issuer_string_is_the_discovery_documents() {
    let rsa = rsa_key("rsa-1", 0);
    // Configured with a trailing slash; the document has none.
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&format!("{}/", issuer.url)), &clock);
    let token = sign(&rsa, &ci_claims(&issuer.url, &clock));
    let principal = auth.authenticate(Some(&bearer(&token))).await.unwrap();
    assert_eq!(principal.rules().count(), 1);

    // A token spelling the issuer with the slash does not equal it.
    let slashed = sign(&rsa, &ci_claims(&format!("{}/", issuer.url), &clock));
    let failure = auth
        .authenticate(Some(&bearer(&slashed)))
        .await
        .unwrap_err();
    assert!(
        matches!(failure, AuthFailure::UntrustedIssuer(_)),
        "{failure:?}"
    );
}

#[tokio::test]
async fn an_unreachable_issuer_is_an_upstream_problem_and_retried_later() {
    let rsa = rsa_key("rsa-1", 0);
    // Take a free port and close it again: nothing listens there.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let clock = clock_now();
    let auth = authenticator(&ci_rules(&url), &clock);
    let token = sign(&rsa, &ci_claims(&url, &clock));
    let failure = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
    assert!(failure.is_upstream_problem(), "{failure:?}");
    // Within the interval the failure is reported without a new attempt.
    let again = auth.authenticate(Some(&bearer(&token))).await.unwrap_err();
    let AuthFailure::IssuerUnavailable { reason, .. } = &again else {
        panic!("{again:?}");
    };
    assert!(
        reason.contains("retried at most every refresh interval"),
        "{reason}"
    );
}

#[tokio::test]
async fn claim_values_compare_exactly_unless_the_rule_folds_case() {
    let rsa = rsa_key("rsa-1", 0);
    let issuer = FakeIssuer::start(&[&rsa]).await;
    let clock = clock_now();
    let rules = format!(
        r#"{ci}  - name: ci-any-case
    issuer: {url}
    claims:
      aud: workqueue
      project_path: team/app
      ref: main
    claims_case_insensitive: true
    permissions: [read]
"#,
        ci = ci_rules(&issuer.url),
        url = issuer.url
    );
    let auth = authenticator(&rules, &clock);
    let base = with(
        ci_claims(&issuer.url, &clock),
        json!({"project_path": "Team/App"}),
    );
    let names = |principal: &wq_auth::Principal| -> Vec<String> {
        principal
            .rules()
            .map(|rule| rule.name().to_owned())
            .collect()
    };

    // `ref: main` does not accept `MAIN` (it did when claims were folded).
    let shouted = sign(&rsa, &with(base.clone(), json!({"ref": "MAIN"})));
    let principal = auth.authenticate(Some(&bearer(&shouted))).await.unwrap();
    assert_eq!(names(&principal), ["ci-any-case"]);
    assert!(principal.authorize(Permission::Submit, &TEAM_APP).is_err());

    let exact = sign(&rsa, &with(base.clone(), json!({"ref": "main"})));
    let principal = auth.authenticate(Some(&bearer(&exact))).await.unwrap();
    assert_eq!(names(&principal), ["ci", "ci-any-case"]);

    // Folding is not prefix or pattern matching.
    let other = sign(&rsa, &with(base, json!({"ref": "Main-2"})));
    let principal = auth.authenticate(Some(&bearer(&other))).await.unwrap();
    assert!(names(&principal).is_empty());
}
