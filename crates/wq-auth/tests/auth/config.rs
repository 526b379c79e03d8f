//! Config validation: every refusal names its field, and rules and static
//! tokens by index and name.

use wq_auth::{AuthConfig, Permission};

fn errors_of(yaml: &str) -> Vec<String> {
    let config: AuthConfig = serde_saphyr::from_str(yaml).unwrap();
    config.validate().unwrap_err().0
}

#[test]
fn a_full_section_is_accepted() {
    let yaml = r#"
jwt:
  leeway_seconds: 30
  refresh_min_interval_seconds: 10
  jwks_max_age_seconds: 600
  request_timeout_seconds: 5
openshift:
  api_url: https://api.cluster.example:6443
  cache_ttl_seconds: 120
oauth_proxy:
  enabled: true
static_tokens:
  - name: nightly
    sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
    identity: nightly-bot
    groups: [bots]
rules:
  - name: agents
    groups: [agents, bots]
    permissions: [read, submit]
    projects: ["team/*"]
  - name: ci
    issuer: https://gitlab.example.com
    claims:
      aud: workqueue
      project_id: 42
      ref_protected: true
      ref: [main, stable]
    permissions: [submit, merge]
    item_types: [mr]
    forges: [gitlab]
  - name: cluster
    issuer: k8s
    claims:
      aud: [workqueue]
      sub: system:serviceaccount:ci:runner
    permissions: [admin]
"#;
    let config: AuthConfig = serde_saphyr::from_str(yaml).unwrap();
    let settings = config.validate().unwrap();
    assert!(settings.oauth_proxy_enabled());
    let rules: Vec<(&str, Vec<Permission>)> = settings
        .rules()
        .map(|rule| (rule.name(), rule.permissions().iter().collect()))
        .collect();
    assert_eq!(
        rules,
        [
            ("agents", vec![Permission::Read, Permission::Submit]),
            ("ci", vec![Permission::Submit, Permission::Merge]),
            ("cluster", vec![Permission::Admin]),
        ]
    );
}

#[test]
fn an_empty_section_is_valid_and_grants_nothing() {
    let config: AuthConfig = serde_saphyr::from_str("{}").unwrap();
    let settings = config.validate().unwrap();
    assert_eq!(settings.rules().count(), 0);
    assert!(!settings.oauth_proxy_enabled());
}

#[test]
fn every_rule_problem_is_reported_with_the_rules_name() {
    let errors = errors_of(
        r#"
rules:
  - name: both
    groups: [a]
    issuer: https://gitlab.example.com
    claims: {aud: workqueue}
    permissions: [read]
  - name: neither
    permissions: [read]
  - name: ci
    issuer: https://gitlab.example.com
    claims:
      project_id: 42
    permissions: [submit]
  - name: typo
    groups: [a]
    permissions: [read, deploy]
  - name: glob
    groups: [a]
    permissions: [read]
    projects: ["team/*", "team/[abc"]
  - name: orphan
    claims: {aud: workqueue}
    permissions: [read]
  - name: plain-http
    issuer: http://gitlab.example.com
    claims: {aud: workqueue, ref: {nested: true}}
    permissions: [read]
  - name: typo
    groups: [b]
    permissions: []
    item_types: []
"#,
    );
    assert_eq!(
        errors,
        [
            r#"auth.rules[0] (name "both"): has both groups and issuer/claims; a rule matches EITHER groups OR issuer + claims"#,
            r#"auth.rules[1] (name "neither"): needs either groups or issuer + claims to say whom it matches"#,
            r#"auth.rules[2] (name "ci"): claims: an issuer rule must require `aud`, so tokens minted for other services are not accepted"#,
            r#"auth.rules[3] (name "typo"): permissions[1]: "deploy" is not a permission (expected one of read, submit, retry, merge, admin)"#,
            r#"auth.rules[4] (name "glob"): projects[1]: "team/[abc" is not a valid glob: unclosed character class; missing ']'"#,
            r#"auth.rules[5] (name "orphan"): claims: needs an issuer saying whose tokens they apply to"#,
            r#"auth.rules[6] (name "plain-http"): issuer: "http://gitlab.example.com" must be an https URL (http only on a loopback address) (or `k8s`)"#,
            r#"auth.rules[6] (name "plain-http"): claims.ref: must be a string, number, boolean or a list of them"#,
            r#"auth.rules[7] (name "typo"): name: another rule has this name"#,
            r#"auth.rules[7] (name "typo"): permissions: must name at least one permission"#,
            r#"auth.rules[7] (name "typo"): item_types: must not be empty (omit it to allow all)"#,
        ]
    );
}

#[test]
fn settings_and_static_token_problems_name_their_field() {
    let errors = errors_of(
        r#"
jwt:
  leeway_seconds: 601
  refresh_min_interval_seconds: 0
openshift:
  api_url: "not a url"
  cache_ttl_seconds: 0
static_tokens:
  - name: short
    sha256: abc
    groups: [bots]
  - name: lonely
    sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
    groups: []
  - name: short
    sha256: 5E884898DA28047151D0E56F8DC6292773603D0D6AABBDD62A11EF721D1542D8
    groups: [bots]
"#,
    );
    assert_eq!(
        errors,
        [
            "auth.jwt.leeway_seconds: must be between 0 and 600, got 601",
            "auth.jwt.refresh_min_interval_seconds: must be between 1 and 3600, got 0",
            "auth.openshift.cache_ttl_seconds: must be between 1 and 3600, got 0",
            r#"auth.openshift.api_url: "not a url" is not a URL (relative URL without a base)"#,
            r#"auth.static_tokens[0] (name "short"): sha256: must be 64 hex digits (the SHA-256 of the token, as printed by `workqueue token new`)"#,
            r#"auth.static_tokens[1] (name "lonely"): groups: must name at least one group, or no rule can match the token"#,
            r#"auth.static_tokens[2] (name "short"): name: another static token has this name"#,
            r#"auth.static_tokens[2] (name "short"): sha256: another static token has this hash"#,
        ]
    );
}

#[test]
fn unknown_keys_are_refused_by_the_parser() {
    let error = serde_saphyr::from_str::<AuthConfig>(
        "rules:\n  - name: x\n    group: [a]\n    permissions: [read]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("unknown field `group`"), "{error}");
}
