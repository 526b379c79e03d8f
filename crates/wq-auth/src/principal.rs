//! An authenticated caller ([`Principal`]): who it is and which rules
//! matched it, and the authorization check against those rules.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::rules::{Forbidden, Permission, Rule, Scope};

/// Who the caller proved to be. Serializable, so that a sign-in can keep
/// who signed in and [`crate::Authenticator::principal_of`] match the rules
/// again later.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Identity {
    /// A JWT from a trusted issuer; `claims` are all of the token's claims.
    Jwt {
        issuer: String,
        subject: String,
        claims: Map<String, Value>,
    },
    /// An OpenShift user, from `users/~`.
    OpenShift {
        username: String,
        groups: Vec<String>,
    },
    /// A static API token from the config file.
    StaticToken {
        name: String,
        identity: String,
        groups: Vec<String>,
    },
}

/// An authenticated caller and the rules that matched it. A principal with
/// no matching rule is still authenticated: every [`Principal::authorize`]
/// is then [`Forbidden`] (403, not 401).
#[derive(Debug, Clone)]
pub struct Principal {
    identity: Identity,
    rules: Vec<Arc<Rule>>,
}

impl Principal {
    pub(crate) fn new(identity: Identity, rules: Vec<Arc<Rule>>) -> Principal {
        Principal { identity, rules }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The rules that matched the caller, in file order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|rule| &**rule)
    }

    /// The first matching rule (in file order) that grants `permission` for
    /// `scope`.
    pub fn authorize(&self, permission: Permission, scope: &Scope<'_>) -> Result<&Rule, Forbidden> {
        for rule in &self.rules {
            if rule.permits(permission, scope) {
                return Ok(rule);
            }
        }
        Err(Forbidden {
            permission,
            scope: scope.to_string(),
            matched_rules: self.rules.iter().map(|rule| rule.name.clone()).collect(),
        })
    }

    /// True when one of the caller's rules grants `permission` with no
    /// scope restriction (then a listing needs no per-item check).
    pub fn permits_everywhere(&self, permission: Permission) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.permits_everywhere(permission))
    }

    /// Who the caller is, without the rule: the OpenShift user name, the
    /// static token's identity, or a JWT's `sub` and issuer.
    pub fn name(&self) -> String {
        match &self.identity {
            Identity::Jwt {
                issuer, subject, ..
            } => format!("{subject} (issuer {issuer})"),
            Identity::OpenShift { username, .. } => username.clone(),
            Identity::StaticToken { name, identity, .. } => format!("{identity} (token {name})"),
        }
    }

    /// The `caller_identity` recorded on what the caller does under `rule`:
    /// `"alice (rule agents)"`, `"nightly-bot (token nightly, rule bots)"`,
    /// `"project_path:team/app (issuer https://gitlab.example.com, rule ci)"`.
    pub fn caller_identity(&self, rule: &Rule) -> String {
        match &self.identity {
            Identity::Jwt {
                issuer, subject, ..
            } => {
                format!("{subject} (issuer {issuer}, rule {})", rule.name)
            }
            Identity::OpenShift { username, .. } => format!("{username} (rule {})", rule.name),
            Identity::StaticToken { name, identity, .. } => {
                format!("{identity} (token {name}, rule {})", rule.name)
            }
        }
    }
}
