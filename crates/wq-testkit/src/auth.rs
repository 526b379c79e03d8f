//! Credentials for tests and benchmarks: an authenticator that accepts one
//! static token granted `admin`, and an HTTP client that sends it.

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use wq_auth::config::{RuleConfig, StaticTokenConfig};
use wq_auth::{AuthConfig, Authenticator, AuthenticatorOptions};
use wq_core::Clock;

/// Name, identity and group of the admin token.
pub const ADMIN: &str = "tester";

/// An authenticator and the one token it accepts (granted `admin`).
pub struct AdminAuth {
    pub token: String,
    pub authenticator: Arc<Authenticator>,
}

impl AdminAuth {
    /// A fresh random token, its static-token entry and a rule `admins`
    /// granting its group `admin`. Outside any cluster, with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let (token, _) = wq_auth::new_static_token(ADMIN);
        let config = AuthConfig {
            static_tokens: vec![StaticTokenConfig::for_token(
                ADMIN,
                &token,
                vec![ADMIN.to_owned()],
            )],
            rules: vec![RuleConfig {
                name: "admins".to_owned(),
                groups: Some(vec![ADMIN.to_owned()]),
                issuer: None,
                claims: None,
                allow_any_subject: false,
                claims_case_insensitive: false,
                permissions: vec!["admin".to_owned()],
                item_types: None,
                forges: None,
                projects: None,
            }],
            ..AuthConfig::default()
        };
        let settings = config.validate().expect("the admin auth config is valid");
        let authenticator = Authenticator::with_options(
            settings,
            reqwest::Client::new(),
            AuthenticatorOptions {
                clock,
                in_cluster: None,
            },
        )
        .expect("authenticator");
        Self {
            token,
            authenticator: Arc::new(authenticator),
        }
    }

    /// An HTTP client that sends the token with every request.
    pub fn client(&self) -> reqwest::Client {
        let mut headers = HeaderMap::new();
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", self.token)).expect("a header value");
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("HTTP client")
    }
}
