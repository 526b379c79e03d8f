//! The [`Authenticator`]: turns an `Authorization: Bearer` header into a
//! [`Principal`] (DDR-24). The token's form picks the check:
//!
//! - `sha256~...`: an OpenShift token, checked with `users/~` (see the
//!   `openshift` module for its caches and the cap on look-ups);
//! - three dot-separated parts: a JWT from a trusted issuer;
//! - anything else: a static API token.
//!
//! Also the `/me` bridge for an OAuth proxy (DDR-27):
//! [`Authenticator::authenticate_forwarded_access_token`].

use std::sync::Arc;

use wq_core::{Clock, SystemClock};

use crate::config::AuthSettings;
use crate::failure::AuthFailure;
use crate::jwt::JwtAuthority;
use crate::k8s::InCluster;
use crate::openshift::{OPENSHIFT_TOKEN_PREFIX, OpenShiftUsers};
use crate::principal::{Identity, Principal};
use crate::rules::{IssuerRef, Rule};
use crate::static_tokens::{self, StaticToken};

/// Longest bearer token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What an [`Authenticator`] takes from its surroundings besides the
/// settings and the HTTP client.
pub struct AuthenticatorOptions {
    /// Time for token expiry, the JWKS refresh limit and the OpenShift
    /// cache.
    pub clock: Arc<dyn Clock>,
    /// The cluster the process runs in, for `k8s` rules; `None` skips them.
    pub in_cluster: Option<InCluster>,
}

impl Default for AuthenticatorOptions {
    /// The system clock and the detected cluster, if any.
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            in_cluster: InCluster::detect(),
        }
    }
}

/// The authenticator could not be built (a CA file, an HTTP client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot set up authentication: {0}")]
pub struct SetupError(String);

/// Authenticates callers against the validated `auth:` settings. Cheap to
/// share behind an `Arc`; caches live inside.
pub struct Authenticator {
    static_tokens: Vec<StaticToken>,
    group_rules: Vec<Arc<Rule>>,
    jwt: JwtAuthority,
    openshift: Option<OpenShiftUsers>,
    oauth_proxy_enabled: bool,
    skipped_rules: Vec<String>,
}

/// A successful `/me`: who the proxy's session belongs to and the token the
/// caller should send as `Authorization: Bearer` from now on.
#[derive(Clone)]
pub struct ForwardedLogin {
    pub principal: Principal,
    pub bearer_token: String,
}

impl std::fmt::Debug for ForwardedLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardedLogin")
            .field("principal", &self.principal)
            .field("bearer_token", &"<redacted>")
            .finish()
    }
}

impl Authenticator {
    /// With the system clock and the detected cluster.
    pub fn new(
        settings: AuthSettings,
        client: reqwest::Client,
    ) -> Result<Authenticator, SetupError> {
        Authenticator::with_options(settings, client, AuthenticatorOptions::default())
    }

    pub fn with_options(
        settings: AuthSettings,
        client: reqwest::Client,
        options: AuthenticatorOptions,
    ) -> Result<Authenticator, SetupError> {
        let mut skipped_rules = Vec::new();
        let mut rules = Vec::new();
        for rule in settings.rules {
            if rule.issuer() == Some(&IssuerRef::KubernetesInCluster)
                && options.in_cluster.is_none()
            {
                tracing::warn!(
                    rule = %rule.name,
                    "skipping rule {}: issuer k8s needs the pod's service account, and this process does not run in a cluster",
                    rule.name
                );
                skipped_rules.push(rule.name.clone());
                continue;
            }
            rules.push(rule);
        }
        let group_rules = rules
            .iter()
            .filter(|rule| rule.issuer().is_none())
            .cloned()
            .collect();
        let jwt = JwtAuthority::new(
            &rules,
            settings.jwt,
            &client,
            options.clock.clone(),
            options.in_cluster.as_ref(),
        )
        .map_err(SetupError)?;
        let openshift = settings
            .openshift
            .as_ref()
            .map(|openshift| OpenShiftUsers::new(openshift, &client, options.clock.clone()))
            .transpose()
            .map_err(SetupError)?;
        Ok(Authenticator {
            static_tokens: settings.static_tokens,
            group_rules,
            jwt,
            openshift,
            oauth_proxy_enabled: settings.oauth_proxy_enabled,
            skipped_rules,
        })
    }

    /// Names of the rules left out because they need a cluster this process
    /// is not in.
    pub fn skipped_rules(&self) -> &[String] {
        &self.skipped_rules
    }

    /// Discovers every issuer and fetches its keys, so the first requests
    /// need not; failures are logged and retried on use.
    pub async fn warm_up(&self) {
        self.jwt.warm_up().await;
    }

    /// Authenticates the value of an `Authorization` header.
    pub async fn authenticate(
        &self,
        authorization_header: Option<&str>,
    ) -> Result<Principal, AuthFailure> {
        let header = authorization_header.ok_or(AuthFailure::MissingCredentials)?;
        let token = bearer_token(header)?;
        self.authenticate_token(token).await
    }

    /// Authenticates a bare bearer token. One that is empty, longer than
    /// [`MAX_TOKEN_BYTES`] or holds anything but visible ASCII (no space,
    /// control or non-ASCII character; RFC 6750 tokens are narrower still)
    /// is refused before any look-up.
    pub async fn authenticate_token(&self, token: &str) -> Result<Principal, AuthFailure> {
        if token.is_empty()
            || token.len() > MAX_TOKEN_BYTES
            || !token.bytes().all(|byte| byte.is_ascii_graphic())
        {
            return Err(AuthFailure::NotBearer);
        }
        if token.starts_with(OPENSHIFT_TOKEN_PREFIX) {
            let openshift = self
                .openshift
                .as_ref()
                .ok_or(AuthFailure::OpenShiftNotConfigured)?;
            let user = openshift.user(token).await?;
            let rules = self.group_rules_for(&user.groups);
            return Ok(Principal::new(
                Identity::OpenShift {
                    username: user.username,
                    groups: user.groups,
                },
                rules,
            ));
        }
        if token.split('.').count() == 3 {
            let (identity, rules) = self.jwt.authenticate(token).await?;
            return Ok(Principal::new(identity, rules));
        }
        let found = static_tokens::find(&self.static_tokens, token)
            .ok_or(AuthFailure::UnknownStaticToken)?;
        let rules = self.group_rules_for(&found.groups);
        Ok(Principal::new(
            Identity::StaticToken {
                name: found.name.clone(),
                identity: found.identity.clone(),
                groups: found.groups.clone(),
            },
            rules,
        ))
    }

    /// `/me` behind an OAuth proxy: authenticates the proxy's
    /// `X-Forwarded-Access-Token` like a bearer token and hands it back for
    /// the caller to use as one. Refused unless `auth.oauth_proxy.enabled`.
    pub async fn authenticate_forwarded_access_token(
        &self,
        forwarded_access_token: Option<&str>,
    ) -> Result<ForwardedLogin, AuthFailure> {
        if !self.oauth_proxy_enabled {
            return Err(AuthFailure::OAuthProxyDisabled);
        }
        let token = forwarded_access_token
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or(AuthFailure::MissingCredentials)?;
        let principal = self.authenticate_token(token).await?;
        Ok(ForwardedLogin {
            principal,
            bearer_token: token.to_owned(),
        })
    }

    /// The caller `identity` names, with the rules that match it now: what
    /// a sign-in session keeps instead of the token it was opened with. A
    /// static token is found again by name (gone from the config: refused);
    /// a JWT's claims must still be in date and its issuer still trusted;
    /// an OpenShift user keeps the groups it had at sign-in.
    pub fn principal_of(&self, identity: Identity) -> Result<Principal, AuthFailure> {
        let rules = match &identity {
            Identity::StaticToken {
                name,
                identity: who,
                ..
            } => {
                let found = self
                    .static_tokens
                    .iter()
                    .find(|token| token.name == *name && token.identity == *who)
                    .ok_or(AuthFailure::UnknownStaticToken)?;
                let rules = self.group_rules_for(&found.groups);
                return Ok(Principal::new(
                    Identity::StaticToken {
                        name: found.name.clone(),
                        identity: found.identity.clone(),
                        groups: found.groups.clone(),
                    },
                    rules,
                ));
            }
            Identity::OpenShift { groups, .. } => self.group_rules_for(groups),
            Identity::Jwt { issuer, claims, .. } => self.jwt.rules_for(issuer, claims)?,
        };
        Ok(Principal::new(identity, rules))
    }

    fn group_rules_for(&self, groups: &[String]) -> Vec<Arc<Rule>> {
        self.group_rules
            .iter()
            .filter(|rule| rule.matches_groups(groups))
            .cloned()
            .collect()
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive).
fn bearer_token(header: &str) -> Result<&str, AuthFailure> {
    let (scheme, token) = header
        .trim()
        .split_once(' ')
        .ok_or(AuthFailure::NotBearer)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthFailure::NotBearer);
    }
    let token = token.trim_start();
    if token.is_empty() {
        return Err(AuthFailure::NotBearer);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bearer_headers_give_a_token() {
        assert_eq!(bearer_token("Bearer abc"), Ok("abc"));
        assert_eq!(bearer_token("bearer  abc "), Ok("abc"));
        assert_eq!(
            bearer_token("Basic YWxhZGRpbjpvcGVu"),
            Err(AuthFailure::NotBearer)
        );
        assert_eq!(bearer_token("Bearer"), Err(AuthFailure::NotBearer));
        assert_eq!(bearer_token("Bearer "), Err(AuthFailure::NotBearer));
        assert_eq!(bearer_token("abc"), Err(AuthFailure::NotBearer));
    }
}
