//! Config validation: every refusal names its field, and rules and static
//! tokens by index and name.

use wq_auth::{AuthConfig, Permission};

/// The refusal of an issuer rule that binds no subject.
const NO_SUBJECT: &str = "claims: an issuer rule must require a claim naming whose tokens it accepts, one of sub, project_path, project_id, namespace_path, namespace_id, user_login, user_id, repository, repository_id, repository_owner, repository_owner_id, workflow_ref (e.g. `project_path: team/app`, `repository: team/app`, `sub: system:serviceaccount:ci:runner`), or say `allow_any_subject: true`; whoever requests a token chooses its `aud`, so without one the rule trusts every project of this issuer";

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
    let expected: [&str; 12] = [
        r#"auth.rules[0] (name "both"): has both groups and issuer/claims; a rule matches EITHER groups OR issuer + claims"#,
        r#"auth.rules[1] (name "neither"): needs either groups or issuer + claims to say whom it matches"#,
        r#"auth.rules[2] (name "ci"): claims: an issuer rule must require `aud`, so tokens minted for other services are not accepted"#,
        r#"auth.rules[3] (name "typo"): permissions[1]: "deploy" is not a permission (expected one of read, submit, retry, merge, admin)"#,
        r#"auth.rules[4] (name "glob"): projects[1]: "team/[abc" is not a valid glob: unclosed character class; missing ']'"#,
        r#"auth.rules[5] (name "orphan"): claims: needs an issuer saying whose tokens they apply to"#,
        r#"auth.rules[6] (name "plain-http"): issuer: "http://gitlab.example.com" must be an https URL (http only on a loopback address) (or `k8s`)"#,
        &format!(r#"auth.rules[6] (name "plain-http"): {NO_SUBJECT}"#),
        r#"auth.rules[6] (name "plain-http"): claims.ref: must be a string, number, boolean or a list of them"#,
        r#"auth.rules[7] (name "typo"): name: another rule has this name"#,
        r#"auth.rules[7] (name "typo"): permissions: must name at least one permission"#,
        r#"auth.rules[7] (name "typo"): item_types: must not be empty (omit it to allow all)"#,
    ];
    assert_eq!(errors, expected);
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

#[test]
fn an_issuer_rule_on_aud_alone_is_refused_naming_the_rule() {
    let errors = errors_of(
        r#"
rules:
  - name: agents
    groups: [agents]
    permissions: [read]
  - name: github
    issuer: https://token.actions.githubusercontent.com
    claims: {aud: workqueue, ref: refs/heads/main, ref_protected: true}
    permissions: [submit]
  - name: cluster
    issuer: k8s
    claims: {aud: workqueue}
    permissions: [submit]
  - name: gitlab-ci
    issuer: https://gitlab.example.com
    claims:
      aud: [workqueue]
      # `job_workflow_ref` names a workflow others can call: not a subject.
      job_workflow_ref: team/shared/.github/workflows/x.yml@refs/heads/main
    permissions: [submit]
  - name: bare
    issuer: https://gitlab.example.com
    permissions: [read]
"#,
    );
    assert_eq!(
        errors,
        [
            format!(r#"auth.rules[1] (name "github"): {NO_SUBJECT}"#),
            format!(r#"auth.rules[2] (name "cluster"): {NO_SUBJECT}"#),
            format!(r#"auth.rules[3] (name "gitlab-ci"): {NO_SUBJECT}"#),
            r#"auth.rules[4] (name "bare"): claims: an issuer rule must require `aud`, so tokens minted for other services are not accepted"#.to_owned(),
            format!(r#"auth.rules[4] (name "bare"): {NO_SUBJECT}"#),
        ]
    );
}

#[test]
fn each_subject_claim_or_allow_any_subject_satisfies_the_rule() {
    for claim in wq_auth::config::SUBJECT_CLAIMS {
        let yaml = format!(
            "rules:\n  - name: ci\n    issuer: https://gitlab.example.com\n    claims: {{aud: workqueue, {claim}: x}}\n    permissions: [read]\n"
        );
        let config: AuthConfig = serde_saphyr::from_str(&yaml).unwrap();
        assert!(config.validate().is_ok(), "{claim}");
    }
    let config: AuthConfig = serde_saphyr::from_str(
        r#"
rules:
  - name: whole-issuer
    issuer: https://idp.example.com
    claims: {aud: workqueue}
    allow_any_subject: true
    permissions: [read]
"#,
    )
    .unwrap();
    assert!(config.validate().is_ok());
}

#[test]
fn issuer_rule_options_are_refused_on_group_rules() {
    let errors = errors_of(
        r#"
rules:
  - name: agents
    groups: [agents]
    allow_any_subject: true
    claims_case_insensitive: true
    permissions: [read]
"#,
    );
    assert_eq!(
        errors,
        [
            r#"auth.rules[0] (name "agents"): allow_any_subject: only applies to an issuer rule's claims"#,
            r#"auth.rules[0] (name "agents"): claims_case_insensitive: only applies to an issuer rule's claims"#,
        ]
    );
}

#[test]
fn openshift_look_up_limits_are_checked() {
    let errors = errors_of(
        r#"
openshift:
  api_url: https://api.cluster.example:6443
  refusal_cache_ttl_seconds: 301
  max_concurrent_lookups: 0
  lookup_wait_milliseconds: 10001
"#,
    );
    assert_eq!(
        errors,
        [
            "auth.openshift.refusal_cache_ttl_seconds: must be between 0 and 300, got 301",
            "auth.openshift.max_concurrent_lookups: must be between 1 and 1024, got 0",
            "auth.openshift.lookup_wait_milliseconds: must be between 0 and 10000, got 10001",
        ]
    );
}
