//! Credentials for tests and benchmarks: static tokens of several standings
//! made per app ([`Tokens`]), the rules that grant them, an authenticator
//! that accepts them, and HTTP clients that send one.

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_auth::{AuthConfig, Authenticator, AuthenticatorOptions};
use wq_core::Clock;

/// Static tokens an app accepts, made fresh per app. Each token's name is
/// its identity; its group is its rule's name, so a caller identity reads
/// `NAME (token NAME, rule GROUP)`.
#[derive(Clone)]
pub struct Tokens {
    /// `admin`, group and rule `admins`: `admin` everywhere.
    pub admin: String,
    /// `reader`, group and rule `readers`: `read` everywhere.
    pub reader: String,
    /// `team`, group and rule `team`: `read`, `submit`, `retry` on
    /// projects `team/*`.
    pub team: String,
    /// `teammate`: another identity in group `team`.
    pub teammate: String,
    /// `team_admin`, group and rule `team_admin`: `admin` on `team/*`.
    pub team_admin: String,
    /// `elsewhere`, group and rule `elsewhere`: `read`, `submit`, `retry`
    /// on projects `other/*` only.
    pub elsewhere: String,
    /// `alice`, group and rule `alice`: `read`, `submit`, `retry`
    /// everywhere.
    pub alice: String,
    /// `bob`, group and rule `bob`: the same permissions as `alice`.
    pub bob: String,
    /// `stranger`, group `strangers`, which no rule names: authenticated,
    /// granted nothing.
    pub stranger: String,
}

/// One rule: its name (also the group it names), its permissions and the
/// projects it is restricted to (`None`: everywhere).
type Grant = (&'static str, &'static [&'static str], Option<&'static str>);

/// The rules [`Tokens::configure`] adds.
const GRANTS: [Grant; 7] = [
    ("admins", &["admin"], None),
    ("readers", &["read"], None),
    ("team", &["read", "submit", "retry"], Some("team/*")),
    ("team_admin", &["admin"], Some("team/*")),
    ("elsewhere", &["read", "submit", "retry"], Some("other/*")),
    ("alice", &["read", "submit", "retry"], None),
    ("bob", &["read", "submit", "retry"], None),
];

impl Tokens {
    /// Fresh random tokens.
    pub fn new() -> Self {
        let token = |name: &str| wq_auth::new_static_token(name).0;
        Self {
            admin: token("admin"),
            reader: token("reader"),
            team: token("team"),
            teammate: token("teammate"),
            team_admin: token("team_admin"),
            elsewhere: token("elsewhere"),
            alice: token("alice"),
            bob: token("bob"),
            stranger: token("stranger"),
        }
    }

    /// Every token as (name, token, group).
    fn entries(&self) -> [(&'static str, &str, &'static str); 9] {
        [
            ("admin", &self.admin, "admins"),
            ("reader", &self.reader, "readers"),
            ("team", &self.team, "team"),
            ("teammate", &self.teammate, "team"),
            ("team_admin", &self.team_admin, "team_admin"),
            ("elsewhere", &self.elsewhere, "elsewhere"),
            ("alice", &self.alice, "alice"),
            ("bob", &self.bob, "bob"),
            ("stranger", &self.stranger, "strangers"),
        ]
    }

    /// Adds the tokens and their rules to `auth`, after what it holds.
    pub fn configure(&self, auth: &mut AuthConfig) {
        for (name, token, group) in self.entries() {
            auth.static_tokens.push(StaticTokenConfig::for_token(
                name,
                token,
                vec![group.to_owned()],
            ));
        }
        for (name, permissions, projects) in GRANTS {
            auth.rules.push(RuleConfig {
                name: name.to_owned(),
                groups: Some(vec![name.to_owned()]),
                issuer: None,
                claims: None,
                allow_any_subject: false,
                claims_case_insensitive: false,
                permissions: permissions
                    .iter()
                    .map(|permission| (*permission).to_owned())
                    .collect(),
                item_types: None,
                forges: None,
                projects: projects.map(|pattern| vec![pattern.to_owned()]),
            });
        }
    }

    /// An authenticator for `auth` with the tokens added, outside any
    /// cluster, reading time from `clock`.
    pub fn authenticator(&self, mut auth: AuthConfig, clock: Arc<dyn Clock>) -> Arc<Authenticator> {
        self.configure(&mut auth);
        let settings = auth.validate().expect("the test auth config is valid");
        let authenticator = Authenticator::with_options(
            settings,
            reqwest::Client::new(),
            AuthenticatorOptions {
                clock,
                in_cluster: None,
            },
        )
        .expect("authenticator");
        Arc::new(authenticator)
    }
}

impl Default for Tokens {
    fn default() -> Self {
        Self::new()
    }
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// An HTTP client that sends `token` as `Authorization: Bearer` with every
/// request.
pub fn bearer_client(token: &str) -> reqwest::Client {
    let mut headers = HeaderMap::new();
    let mut value = HeaderValue::from_str(&bearer(token)).expect("a header value");
    value.set_sensitive(true);
    headers.insert(AUTHORIZATION, value);
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("HTTP client")
}
