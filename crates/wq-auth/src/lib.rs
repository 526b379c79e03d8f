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
//!
//! # Token forms
//!
//! A token that is not visible ASCII or is over [`MAX_TOKEN_BYTES`] is
//! refused before anything else. Then, by its form:
//!
//! - `sha256~...` is an OpenShift token, checked by calling `users/~` with
//!   the caller's own token: username and groups cached 5 minutes by the
//!   token's SHA-256, a 401/403 10 seconds, an outage not at all; one
//!   look-up per token however many callers wait for it; at most 16
//!   look-ups in flight, and a caller that gets no slot within a second is
//!   answered as an outage; a token not `sha256~` + base64url is refused
//!   without a look-up.
//! - Three dot-separated parts are a JWT, verified against the JWKS of the
//!   issuer a rule names (issuer and `jwks_uri` from its discovery
//!   document; RS256/ES256 only; `exp`/`nbf`/`iat` with leeway; an unknown
//!   `kid` refreshes the keys at most once per interval). The `k8s`
//!   shorthand discovers from the API server in cluster and is skipped with
//!   a warning outside.
//! - Anything else is compared in constant time with the configured static
//!   tokens' hashes.
//!
//! # Rules
//!
//! Rules map a remote identity (groups, or issuer + claims: `aud` and a
//! subject-binding claim such as `sub`, `project_path` or `repository`
//! required unless `allow_any_subject: true`; values compared exactly as
//! text, case folded only with `claims_case_insensitive: true`; lists as
//! OR) to permissions (`read`, `submit`, `retry`, `merge`, `admin`) scoped
//! to item types, forges and project globs. `wq-api`'s `require_bearer`
//! authenticates every `/api/v1` request but `/me`, which authenticates
//! itself (401 with `WWW-Authenticate`, or 503 when an issuer cannot be
//! reached); handlers authorize (403).

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
