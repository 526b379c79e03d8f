//! Authentication and authorization of workqueue callers (DDR-11,
//! DDR-21 to DDR-27).
//!
//! Callers send `Authorization: Bearer <token>`; the token is a JWT from a
//! trusted issuer, an opaque OpenShift token, or a static API token. The
//! [`Authenticator`] turns it into a [`Principal`] holding the rules that
//! matched it, and [`Principal::authorize`] checks a [`Permission`] for a
//! [`Scope`]. An [`AuthFailure`] is answered 401 with
//! [`AuthFailure::www_authenticate`] and no detail; a [`Forbidden`] is a
//! 403. Both carry the detail for logs in `Display`.
//!
//! Configuration: [`AuthConfig`] (the `auth:` section) is validated into
//! [`AuthSettings`], from which the [`Authenticator`] is built.
//!
//! Errors: [`AuthConfigErrors`] for the config, [`SetupError`] for building,
//! [`AuthFailure`] and [`Forbidden`] per request.

mod authenticator;
pub mod config;
mod failure;
mod jwt;
pub mod k8s;
mod openshift;
mod principal;
mod rules;
mod static_tokens;

pub use authenticator::{
    Authenticator, AuthenticatorOptions, ForwardedLogin, MAX_TOKEN_BYTES, SetupError,
};
pub use config::{AuthConfig, AuthConfigErrors, AuthSettings};
pub use failure::{AuthFailure, REALM};
pub use k8s::{InCluster, ServiceAccountToken};
pub use openshift::OPENSHIFT_TOKEN_PREFIX;
pub use principal::{Identity, Principal};
pub use rules::{Forbidden, Permission, PermissionSet, Rule, Scope, ScopeGlobs};
pub use static_tokens::{STATIC_TOKEN_PREFIX, new_static_token};
