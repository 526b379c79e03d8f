//! The `auth:` section of the config file as written ([`AuthConfig`]) and
//! its validated form ([`AuthSettings`]), which is what an
//! [`Authenticator`](crate::Authenticator) is built from. Unknown keys are
//! refused by the parser; [`AuthConfig::validate`] reports every other
//! problem at once, each naming its field, and for rules and static tokens
//! also their name (`auth.rules[2] (name "ci"): ...`).
//!
//! ```yaml
//! auth:
//!   jwt:
//!     leeway_seconds: 60
//!     refresh_min_interval_seconds: 30
//!     jwks_max_age_seconds: 3600
//!     request_timeout_seconds: 10
//!   openshift:
//!     api_url: https://api.cluster.example:6443
//!     cache_ttl_seconds: 300
//!     refusal_cache_ttl_seconds: 10
//!     max_concurrent_lookups: 16
//!     lookup_wait_milliseconds: 1000
//!   oauth_proxy:
//!     enabled: false
//!   static_tokens:
//!     - name: nightly
//!       sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
//!       identity: nightly-bot
//!       groups: [bots]
//!   rules:
//!     - name: agents
//!       groups: [agents, bots]
//!       permissions: [read, submit]
//!       projects: ["team/*"]
//!     - name: ci
//!       issuer: https://gitlab.example.com
//!       claims:
//!         aud: workqueue
//!         project_id: 42
//!         ref_protected: true
//!         ref: [main, stable]
//!       permissions: [submit, merge]
//!       item_types: [mr]
//!       forges: [gitlab]
//!     - name: cluster
//!       issuer: k8s
//!       claims:
//!         aud: workqueue
//!         sub: system:serviceaccount:ci:runner
//!       permissions: [submit]
//! ```
//!
//! Issuer rules: a token must carry every claim listed, with one of the
//! values given. `aud` is always required, and so is a claim binding the
//! token to whom it was issued ([`SUBJECT_CLAIMS`]: `sub`, GitLab's
//! `project_path`/`project_id`/`namespace_path`/`namespace_id`/
//! `user_login`/`user_id`, GitHub's `repository`/`repository_id`/
//! `repository_owner`/`repository_owner_id`/`workflow_ref`), unless the rule
//! says `allow_any_subject: true`: GitLab CI, GitHub Actions and Kubernetes
//! let whoever runs a job or pod pick the `aud` of its token, so a rule on
//! `aud` alone would trust every project of the issuer. Values compare
//! exactly (see [`RuleConfig::claims`]); `claims_case_insensitive: true`
//! folds case for one rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::rules::{
    ClaimCondition, IssuerRef, Permission, PermissionSet, Rule, RuleIdentity, ScopePatterns,
};
use crate::static_tokens::StaticToken;

/// Clock skew accepted on `exp`, `nbf` and `iat`.
pub const DEFAULT_LEEWAY_SECONDS: u64 = 60;
/// Shortest pause between two key fetches from one issuer, so tokens with
/// unknown key ids cannot make the service hammer the issuer.
pub const DEFAULT_REFRESH_MIN_INTERVAL_SECONDS: u64 = 30;
/// Age after which an issuer's cached keys are fetched again on next use,
/// so a key the issuer withdrew stops being accepted.
pub const DEFAULT_JWKS_MAX_AGE_SECONDS: u64 = 3600;
/// Longest wait for a discovery, JWKS or OpenShift user request.
pub const DEFAULT_REQUEST_TIMEOUT_SECONDS: u64 = 10;
/// How long an OpenShift token's user and groups are reused (DDR-24).
pub const DEFAULT_OPENSHIFT_CACHE_TTL_SECONDS: u64 = 300;
/// How long a token the OpenShift API refused (401/403) is refused without
/// asking again.
pub const DEFAULT_OPENSHIFT_REFUSAL_CACHE_TTL_SECONDS: u64 = 10;
/// OpenShift `users/~` look-ups in flight at once.
pub const DEFAULT_OPENSHIFT_MAX_CONCURRENT_LOOKUPS: usize = 16;
/// How long a look-up waits for a free slot before the caller is told the
/// API is unavailable.
pub const DEFAULT_OPENSHIFT_LOOKUP_WAIT_MILLISECONDS: u64 = 1000;
/// The `issuer:` shorthand for the cluster's own service-account issuer
/// (DDR-11, DDR-26).
pub const K8S_ISSUER: &str = "k8s";
/// The claim every issuer rule must constrain (DDR-22).
pub const AUDIENCE_CLAIM: &str = "aud";
/// Claims that bind a token to whom it was issued: an issuer rule must
/// constrain one of them (or say `allow_any_subject: true`), since the
/// issuers this service trusts (GitLab CI, GitHub Actions, Kubernetes)
/// let the token's holder choose its `aud`.
///
/// - `sub`: every issuer. GitLab CI:
///   `project_path:{group}/{project}:ref_type:{type}:ref:{ref}`; GitHub
///   Actions: `repo:{owner}/{repo}:...`; Kubernetes (and the `k8s`
///   shorthand): `system:serviceaccount:{namespace}:{name}`, the only
///   top-level claim naming the service account (the `kubernetes.io`
///   claim is an object, which rules cannot name).
/// - GitLab CI ID tokens: `project_path`, `project_id` (the project),
///   `namespace_path`, `namespace_id` (every project of that group or
///   user), `user_login`, `user_id` (pipelines that user started).
/// - GitHub Actions: `repository`, `repository_id` (the repository),
///   `repository_owner`, `repository_owner_id` (every repository of that
///   account), `workflow_ref` (`{owner}/{repo}/.github/workflows/{file}@{ref}`:
///   the calling repository's workflow).
///
/// Deliberately not: `job_workflow_ref` and GitLab's `ci_config_ref_uri`
/// name the workflow or CI file that ran, which any repository allowed to
/// call or include it (for a public one, any repository at all) can run;
/// GitHub's `actor` is whoever triggered the run, which includes a comment
/// or pull request on someone else's repository; `environment`, `ref`,
/// `ref_protected`, `aud` exist in every project. Combine those with one
/// of the above.
pub const SUBJECT_CLAIMS: &[&str] = &[
    "sub",
    "project_path",
    "project_id",
    "namespace_path",
    "namespace_id",
    "user_login",
    "user_id",
    "repository",
    "repository_id",
    "repository_owner",
    "repository_owner_id",
    "workflow_ref",
];

/// `auth:`
#[derive(Debug, Clone, PartialEq, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Settings shared by every JWT issuer.
    pub jwt: JwtConfig,
    /// Where opaque OpenShift tokens (`sha256~...`) are checked; without
    /// it such tokens are refused.
    pub openshift: Option<OpenShiftConfig>,
    /// The `/me` bridge for an OAuth proxy (DDR-27).
    pub oauth_proxy: OAuthProxyConfig,
    /// API tokens issued by this service, stored as SHA-256 hashes.
    pub static_tokens: Vec<StaticTokenConfig>,
    /// Remote identity → local permissions (DDR-21, DDR-23).
    pub rules: Vec<RuleConfig>,
}

/// `auth.jwt:`
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// Clock skew accepted on `exp`, `nbf` and `iat`, 0 to 600
    /// (default [`DEFAULT_LEEWAY_SECONDS`]).
    pub leeway_seconds: u64,
    /// Shortest pause between two key fetches from one issuer, 1 to 3600
    /// (default [`DEFAULT_REFRESH_MIN_INTERVAL_SECONDS`]).
    pub refresh_min_interval_seconds: u64,
    /// Cached keys older than this are fetched again on next use, 60 to
    /// 604800 (default [`DEFAULT_JWKS_MAX_AGE_SECONDS`]).
    pub jwks_max_age_seconds: u64,
    /// Longest wait for one discovery or JWKS request, 1 to 120
    /// (default [`DEFAULT_REQUEST_TIMEOUT_SECONDS`]).
    pub request_timeout_seconds: u64,
}

impl Default for JwtConfig {
    fn default() -> Self {
        Self {
            leeway_seconds: DEFAULT_LEEWAY_SECONDS,
            refresh_min_interval_seconds: DEFAULT_REFRESH_MIN_INTERVAL_SECONDS,
            jwks_max_age_seconds: DEFAULT_JWKS_MAX_AGE_SECONDS,
            request_timeout_seconds: DEFAULT_REQUEST_TIMEOUT_SECONDS,
        }
    }
}

/// `auth.openshift:`
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OpenShiftConfig {
    /// Base URL of the OpenShift API (`https://api.cluster:6443`); https,
    /// or http on a loopback address for tests.
    pub api_url: String,
    /// How long a token's user and groups are reused, 1 to 3600
    /// (default [`DEFAULT_OPENSHIFT_CACHE_TTL_SECONDS`]).
    #[serde(default = "default_openshift_cache_ttl_seconds")]
    pub cache_ttl_seconds: u64,
    /// How long a token the API refused (401 or 403) is refused again
    /// without a request, 0 (not at all) to 300 (default
    /// [`DEFAULT_OPENSHIFT_REFUSAL_CACHE_TTL_SECONDS`]). A refreshed
    /// OpenShift token is a new token, so this never delays a login.
    #[serde(default = "default_openshift_refusal_cache_ttl_seconds")]
    pub refusal_cache_ttl_seconds: u64,
    /// Look-ups in flight at once, 1 to 1024 (default
    /// [`DEFAULT_OPENSHIFT_MAX_CONCURRENT_LOOKUPS`]); concurrent requests
    /// with the same token share one.
    #[serde(default = "default_openshift_max_concurrent_lookups")]
    pub max_concurrent_lookups: usize,
    /// How long a look-up waits for one of those slots before the request
    /// is answered as if the API were unavailable, 0 to 10000 (default
    /// [`DEFAULT_OPENSHIFT_LOOKUP_WAIT_MILLISECONDS`]).
    #[serde(default = "default_openshift_lookup_wait_milliseconds")]
    pub lookup_wait_milliseconds: u64,
    /// PEM file of the CA that signed the API's certificate, when it is not
    /// a public one (in a pod: the service account's `ca.crt`).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn default_openshift_cache_ttl_seconds() -> u64 {
    DEFAULT_OPENSHIFT_CACHE_TTL_SECONDS
}

fn default_openshift_refusal_cache_ttl_seconds() -> u64 {
    DEFAULT_OPENSHIFT_REFUSAL_CACHE_TTL_SECONDS
}

fn default_openshift_max_concurrent_lookups() -> usize {
    DEFAULT_OPENSHIFT_MAX_CONCURRENT_LOOKUPS
}

fn default_openshift_lookup_wait_milliseconds() -> u64 {
    DEFAULT_OPENSHIFT_LOOKUP_WAIT_MILLISECONDS
}

/// `auth.oauth_proxy:`
#[derive(Debug, Clone, PartialEq, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthProxyConfig {
    /// Accept `X-Forwarded-Access-Token` on `/me` (default false). Only turn
    /// it on when an OAuth proxy that sets the header guards `/me`.
    pub enabled: bool,
}

/// One entry of `auth.static_tokens:`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StaticTokenConfig {
    /// Unique name, shown in logs.
    pub name: String,
    /// SHA-256 of the token, 64 hex digits.
    pub sha256: String,
    /// Who the caller is, recorded as the caller identity (default: the
    /// name).
    #[serde(default)]
    pub identity: Option<String>,
    /// Groups the token belongs to; `groups` rules grant its permissions.
    pub groups: Vec<String>,
}

impl StaticTokenConfig {
    /// The entry that accepts `token` (by its SHA-256) for callers named
    /// `name` in `groups`: for a token made in the process itself, like the
    /// one `workqueue demo` uses. Config files get theirs from
    /// [`new_static_token`](crate::new_static_token).
    pub fn for_token(name: &str, token: &str, groups: Vec<String>) -> StaticTokenConfig {
        StaticTokenConfig {
            name: name.to_owned(),
            sha256: hex::encode(crate::static_tokens::token_hash(token)),
            identity: None,
            groups,
        }
    }
}

/// One entry of `auth.rules:`: EITHER `groups` OR `issuer` + `claims`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Unique name, recorded with the caller identity.
    pub name: String,
    /// Matches OpenShift users and static tokens in any of these groups.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// Issuer URL of the JWTs this rule accepts, or `k8s` for the cluster's
    /// own service-account issuer.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Claims a JWT must carry, all of them; a list accepts any of its
    /// values. `aud` is required, and so is one of [`SUBJECT_CLAIMS`]
    /// unless `allow_any_subject` is set. Values compare exactly, by their
    /// text: strings as written (`ref: main` does not match `"MAIN"`), a
    /// number as its decimal text (`project_id: 42` matches `42` and
    /// GitLab's `"42"`, not `"042"`), a boolean as `true`/`false`
    /// (`ref_protected: true` matches `true` and GitLab's `"true"`, not
    /// `"TRUE"`). Quote what YAML would read as a number but is not
    /// (`ref: "1.10"`). Only top-level claims can be named.
    #[serde(default)]
    pub claims: Option<BTreeMap<String, serde_json::Value>>,
    /// Accept tokens of this issuer whatever subject they name: no claim of
    /// [`SUBJECT_CLAIMS`] is required (default false). Only for an issuer
    /// whose every token-holder is trusted with the rule's permissions;
    /// GitLab CI, GitHub Actions and Kubernetes let anyone who can run a
    /// job or pod choose the `aud` of their token.
    #[serde(default)]
    pub allow_any_subject: bool,
    /// Compare claim values ignoring case (both sides lowercased), e.g.
    /// for GitLab paths, which GitLab itself resolves ignoring case
    /// (default false: exact).
    #[serde(default)]
    pub claims_case_insensitive: bool,
    /// Any of `read`, `submit`, `retry`, `merge`, `admin` (admin implies the
    /// others).
    pub permissions: Vec<String>,
    /// Glob patterns of item types the permissions hold for (default: all).
    #[serde(default)]
    pub item_types: Option<Vec<String>>,
    /// Glob patterns of forge names the permissions hold for (default: all).
    #[serde(default)]
    pub forges: Option<Vec<String>>,
    /// Glob patterns of project paths (`team/*`, `team/**`) the permissions
    /// hold for (default: all). `*` stays within one path segment; matching
    /// ignores case, like the forges' own paths.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
}

/// The validated `auth:` section, ready to build an
/// [`Authenticator`](crate::Authenticator).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub(crate) jwt: JwtSettings,
    pub(crate) openshift: Option<OpenShiftSettings>,
    pub(crate) oauth_proxy_enabled: bool,
    pub(crate) static_tokens: Vec<StaticToken>,
    pub(crate) rules: Vec<Arc<Rule>>,
}

impl AuthSettings {
    /// The rules, in file order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|rule| &**rule)
    }

    /// Whether `/me` accepts `X-Forwarded-Access-Token`.
    pub fn oauth_proxy_enabled(&self) -> bool {
        self.oauth_proxy_enabled
    }
}

#[derive(Debug, Clone)]
pub(crate) struct JwtSettings {
    pub(crate) leeway: Duration,
    pub(crate) refresh_min_interval: Duration,
    pub(crate) jwks_max_age: Duration,
    pub(crate) request_timeout: Duration,
}

#[derive(Debug, Clone)]
pub(crate) struct OpenShiftSettings {
    pub(crate) api_url: Url,
    pub(crate) cache_ttl: Duration,
    pub(crate) refusal_cache_ttl: Duration,
    pub(crate) max_concurrent_lookups: usize,
    pub(crate) lookup_wait: Duration,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) request_timeout: Duration,
}

/// Every problem found in an `auth:` section, one `field: message` per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfigErrors(pub Vec<String>);

impl std::fmt::Display for AuthConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for AuthConfigErrors {}

/// Collects problems under a field path.
struct Problems {
    found: Vec<String>,
}

impl Problems {
    fn add(&mut self, field: &str, message: impl std::fmt::Display) {
        self.found.push(format!("{field}: {message}"));
    }
}

impl AuthConfig {
    /// Checks everything the parser cannot and returns the settings an
    /// [`Authenticator`](crate::Authenticator) is built from, or every
    /// problem found.
    pub fn validate(&self) -> Result<AuthSettings, AuthConfigErrors> {
        let mut problems = Problems { found: Vec::new() };

        let jwt = self.jwt.validate(&mut problems);
        let openshift = self
            .openshift
            .as_ref()
            .and_then(|openshift| openshift.validate(&mut problems, jwt.request_timeout));

        let mut static_tokens = Vec::new();
        let mut token_names = BTreeSet::new();
        let mut token_hashes = BTreeSet::new();
        for (index, token) in self.static_tokens.iter().enumerate() {
            let field = format!("auth.static_tokens[{index}] (name {:?})", token.name);
            if !token_names.insert(token.name.as_str()) {
                problems.add(&field, "name: another static token has this name");
            }
            if !token_hashes.insert(token.sha256.to_ascii_lowercase()) {
                problems.add(&field, "sha256: another static token has this hash");
            }
            if let Some(token) = token.validate(&field, &mut problems) {
                static_tokens.push(token);
            }
        }

        let mut rules = Vec::new();
        let mut rule_names = BTreeSet::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let field = format!("auth.rules[{index}] (name {:?})", rule.name);
            if !rule_names.insert(rule.name.as_str()) {
                problems.add(&field, "name: another rule has this name");
            }
            if let Some(rule) = rule.validate(&field, &mut problems) {
                rules.push(Arc::new(rule));
            }
        }

        if !problems.found.is_empty() {
            return Err(AuthConfigErrors(problems.found));
        }
        Ok(AuthSettings {
            jwt,
            openshift,
            oauth_proxy_enabled: self.oauth_proxy.enabled,
            static_tokens,
            rules,
        })
    }
}

impl JwtConfig {
    fn validate(&self, problems: &mut Problems) -> JwtSettings {
        let checks = [
            ("auth.jwt.leeway_seconds", self.leeway_seconds, 0, 600),
            (
                "auth.jwt.refresh_min_interval_seconds",
                self.refresh_min_interval_seconds,
                1,
                3600,
            ),
            (
                "auth.jwt.jwks_max_age_seconds",
                self.jwks_max_age_seconds,
                60,
                604_800,
            ),
            (
                "auth.jwt.request_timeout_seconds",
                self.request_timeout_seconds,
                1,
                120,
            ),
        ];
        for (field, value, min, max) in checks {
            check_between(problems, field, value, min, max);
        }
        JwtSettings {
            leeway: Duration::from_secs(self.leeway_seconds),
            refresh_min_interval: Duration::from_secs(self.refresh_min_interval_seconds),
            jwks_max_age: Duration::from_secs(self.jwks_max_age_seconds),
            request_timeout: Duration::from_secs(self.request_timeout_seconds),
        }
    }
}

impl OpenShiftConfig {
    fn validate(
        &self,
        problems: &mut Problems,
        request_timeout: Duration,
    ) -> Option<OpenShiftSettings> {
        check_between(
            problems,
            "auth.openshift.cache_ttl_seconds",
            self.cache_ttl_seconds,
            1,
            3600,
        );
        check_between(
            problems,
            "auth.openshift.refusal_cache_ttl_seconds",
            self.refusal_cache_ttl_seconds,
            0,
            300,
        );
        check_between(
            problems,
            "auth.openshift.max_concurrent_lookups",
            u64::try_from(self.max_concurrent_lookups).unwrap_or(u64::MAX),
            1,
            1024,
        );
        check_between(
            problems,
            "auth.openshift.lookup_wait_milliseconds",
            self.lookup_wait_milliseconds,
            0,
            10_000,
        );
        let api_url = match checked_url(&self.api_url) {
            Ok(url) => url,
            Err(message) => {
                problems.add("auth.openshift.api_url", message);
                return None;
            }
        };
        Some(OpenShiftSettings {
            api_url,
            cache_ttl: Duration::from_secs(self.cache_ttl_seconds),
            refusal_cache_ttl: Duration::from_secs(self.refusal_cache_ttl_seconds),
            max_concurrent_lookups: self.max_concurrent_lookups,
            lookup_wait: Duration::from_millis(self.lookup_wait_milliseconds),
            ca_file: self.ca_file.clone(),
            request_timeout,
        })
    }
}

impl StaticTokenConfig {
    fn validate(&self, field: &str, problems: &mut Problems) -> Option<StaticToken> {
        let before = problems.found.len();
        if self.name.trim().is_empty() {
            problems.add(field, "name: must not be empty");
        }
        let hash = decode_sha256(&self.sha256);
        if hash.is_none() {
            problems.add(
                field,
                "sha256: must be 64 hex digits (the SHA-256 of the token, as printed by `workqueue token new`)",
            );
        }
        if let Some(identity) = &self.identity
            && identity.trim().is_empty()
        {
            problems.add(
                field,
                "identity: must not be empty (omit it to use the name)",
            );
        }
        if self.groups.is_empty() {
            problems.add(
                field,
                "groups: must name at least one group, or no rule can match the token",
            );
        }
        for (index, group) in self.groups.iter().enumerate() {
            if group.trim().is_empty() {
                problems.add(field, format_args!("groups[{index}]: must not be empty"));
            }
        }
        if problems.found.len() > before {
            return None;
        }
        Some(StaticToken {
            name: self.name.clone(),
            identity: self.identity.clone().unwrap_or_else(|| self.name.clone()),
            groups: self.groups.clone(),
            hash: hash?,
        })
    }
}

impl RuleConfig {
    fn validate(&self, field: &str, problems: &mut Problems) -> Option<Rule> {
        let before = problems.found.len();
        if self.name.trim().is_empty() {
            problems.add(field, "name: must not be empty");
        }

        let identity = self.validate_identity(field, problems);

        let mut permissions = PermissionSet::EMPTY;
        if self.permissions.is_empty() {
            problems.add(field, "permissions: must name at least one permission");
        }
        for (index, name) in self.permissions.iter().enumerate() {
            match Permission::parse(name) {
                Some(permission) => permissions.insert(permission),
                None => problems.add(
                    field,
                    format_args!(
                        "permissions[{index}]: {name:?} is not a permission (expected one of {})",
                        Permission::NAMES.join(", ")
                    ),
                ),
            }
        }

        let item_types = scope_patterns(
            field,
            "item_types",
            self.item_types.as_deref(),
            false,
            problems,
        );
        let forges = scope_patterns(field, "forges", self.forges.as_deref(), false, problems);
        let projects = scope_patterns(field, "projects", self.projects.as_deref(), true, problems);

        if problems.found.len() > before {
            return None;
        }
        Some(Rule {
            name: self.name.clone(),
            identity: identity?,
            permissions,
            scope: ScopePatterns {
                item_types: item_types?,
                forges: forges?,
                projects: projects?,
            },
        })
    }

    fn validate_identity(&self, field: &str, problems: &mut Problems) -> Option<RuleIdentity> {
        match (&self.groups, &self.issuer, &self.claims) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                problems.add(
                    field,
                    "has both groups and issuer/claims; a rule matches EITHER groups OR issuer + claims",
                );
                None
            }
            (None, None, None) => {
                problems.add(
                    field,
                    "needs either groups or issuer + claims to say whom it matches",
                );
                None
            }
            (Some(groups), None, None) => {
                for (key, set) in [
                    ("allow_any_subject", self.allow_any_subject),
                    ("claims_case_insensitive", self.claims_case_insensitive),
                ] {
                    if set {
                        problems.add(
                            field,
                            format_args!("{key}: only applies to an issuer rule's claims"),
                        );
                    }
                }
                if groups.is_empty() {
                    problems.add(field, "groups: must name at least one group");
                    return None;
                }
                let mut valid = true;
                for (index, group) in groups.iter().enumerate() {
                    if group.trim().is_empty() {
                        problems.add(field, format_args!("groups[{index}]: must not be empty"));
                        valid = false;
                    }
                }
                valid.then(|| RuleIdentity::Groups(groups.clone()))
            }
            (None, None, Some(_)) => {
                problems.add(
                    field,
                    "claims: needs an issuer saying whose tokens they apply to",
                );
                None
            }
            (None, Some(issuer), claims) => {
                let issuer = match issuer.as_str() {
                    K8S_ISSUER => Some(IssuerRef::KubernetesInCluster),
                    url => match checked_url(url) {
                        Ok(url) => Some(IssuerRef::Url(url)),
                        Err(message) => {
                            problems.add(field, format_args!("issuer: {message} (or `k8s`)"));
                            None
                        }
                    },
                };
                let claims = self.validate_claims(field, claims.as_ref(), problems);
                Some(RuleIdentity::Issuer {
                    issuer: issuer?,
                    claims: claims?,
                })
            }
        }
    }

    fn validate_claims(
        &self,
        field: &str,
        claims: Option<&BTreeMap<String, serde_json::Value>>,
        problems: &mut Problems,
    ) -> Option<Vec<ClaimCondition>> {
        let empty = BTreeMap::new();
        let given = claims.unwrap_or(&empty);
        let mut valid = true;
        if !given.contains_key(AUDIENCE_CLAIM) {
            problems.add(
                field,
                "claims: an issuer rule must require `aud`, so tokens minted for other services are not accepted",
            );
            valid = false;
        }
        if !self.allow_any_subject
            && !given
                .keys()
                .any(|claim| SUBJECT_CLAIMS.contains(&claim.as_str()))
        {
            problems.add(
                field,
                format_args!(
                    "claims: an issuer rule must require a claim naming whose tokens it accepts, one of {} (e.g. `project_path: team/app`, `repository: team/app`, `sub: system:serviceaccount:ci:runner`), or say `allow_any_subject: true`; whoever requests a token chooses its `aud`, so without one the rule trusts every project of this issuer",
                    SUBJECT_CLAIMS.join(", ")
                ),
            );
            valid = false;
        }
        let mut conditions = Vec::new();
        for (claim, value) in given {
            match ClaimCondition::new(claim, value, self.claims_case_insensitive) {
                Ok(condition) => conditions.push(condition),
                Err(message) => {
                    problems.add(field, format_args!("claims.{claim}: {message}"));
                    valid = false;
                }
            }
        }
        valid.then_some(conditions)
    }
}

fn scope_patterns(
    field: &str,
    key: &str,
    patterns: Option<&[String]>,
    is_path: bool,
    problems: &mut Problems,
) -> Option<Option<crate::rules::Patterns>> {
    let Some(patterns) = patterns else {
        return Some(None);
    };
    if patterns.is_empty() {
        problems.add(
            field,
            format_args!("{key}: must not be empty (omit it to allow all)"),
        );
        return None;
    }
    match crate::rules::Patterns::new(patterns, is_path) {
        Ok(compiled) => Some(Some(compiled)),
        Err((index, message)) => {
            problems.add(field, format_args!("{key}[{index}]: {message}"));
            None
        }
    }
}

fn check_between(problems: &mut Problems, field: &str, value: u64, min: u64, max: u64) {
    if value < min || value > max {
        problems.add(
            field,
            format_args!("must be between {min} and {max}, got {value}"),
        );
    }
}

/// An https URL, or http to a loopback host (for tests and local issuers).
pub(crate) fn checked_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|error| format!("{text:?} is not a URL ({error})"))?;
    if !is_fetchable(&url) {
        return Err(format!(
            "{text:?} must be an https URL (http only on a loopback address)"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?} must not have a query or fragment"));
    }
    Ok(url)
}

/// https with a host, or http to a loopback host.
pub(crate) fn is_fetchable(url: &Url) -> bool {
    if url.host_str().is_none_or(str::is_empty) {
        return false;
    }
    match url.scheme() {
        "https" => true,
        "http" => is_loopback(url),
        _ => false,
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain == "localhost",
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    }
}

fn decode_sha256(text: &str) -> Option<[u8; 32]> {
    let mut hash = [0_u8; 32];
    hex::decode_to_slice(text, &mut hash).ok()?;
    Some(hash)
}
