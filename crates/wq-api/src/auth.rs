//! Who may call `/api/v1`, and for what (DDR-21 to DDR-27).
//!
//! - [`require_bearer`] runs before every `/api/v1` route but `/me`: it
//!   turns `Authorization: Bearer <token>` into a [`Caller`] kept in the
//!   request, or answers 401 `unauthenticated` with a `WWW-Authenticate`
//!   challenge and a message that never says why (the reason is logged).
//!   When the token's issuer or OpenShift cannot be asked, the answer is 503
//!   `unavailable`: the caller's token may be fine.
//! - Handlers take a [`Caller`] and call [`Caller::authorize`] with the
//!   permission and the scope (item type, forge, project) of what they do:
//!   403 `forbidden` when no rule of the caller grants it. What is granted
//!   returns the caller identity to record, from the granting rule.
//! - `/me` authenticates on its own ([`authenticate_me`]): a bearer token,
//!   or, when `auth.oauth_proxy.enabled`, the proxy's
//!   `X-Forwarded-Access-Token` (DDR-27).
//!
//! Health, readiness, metrics and webhooks (which check their own
//! signatures) are not behind any of this.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use wq_auth::{AuthFailure, ForwardedLogin, Permission, Principal, Scope};
use wq_core::TypeRegistry;

use crate::error::ApiError;
use crate::state::AppState;

/// The header an OAuth proxy sets from its session (DDR-27).
pub const FORWARDED_ACCESS_TOKEN: HeaderName = HeaderName::from_static("x-forwarded-access-token");

/// An authenticated caller of an `/api/v1` route. Extracting it from a
/// request that did not pass [`require_bearer`] is a 500: the route was
/// mounted outside the authenticated part of the router.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Principal,
}

impl Caller {
    /// The caller `principal`, authenticated by another front door with
    /// the same authenticator (the dashboard's sign-in session), so that
    /// it goes through the same handlers and checks as an API call.
    pub fn signed_in(principal: Principal) -> Self {
        Self { principal }
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The caller identity to record for an action under `permission` on
    /// `scope` (from the first rule granting it), or a 403 whose reason
    /// goes to the log.
    pub fn authorize(&self, permission: Permission, scope: &Scope<'_>) -> Result<String, ApiError> {
        match self.principal.authorize(permission, scope) {
            Ok(rule) => Ok(self.principal.caller_identity(rule)),
            Err(forbidden) => {
                let caller = self.principal.name();
                tracing::warn!(
                    %caller,
                    %permission,
                    reason = %forbidden,
                    "request refused: {caller} is forbidden: {forbidden}"
                );
                Err(ApiError::forbidden(permission))
            }
        }
    }

    /// Passes when a rule of the caller grants one of `permissions` for
    /// `scope`; else a 403 naming them all, whose reason goes to the log.
    /// For a check before what a request touches is known (e.g. which
    /// permission an item's command needs).
    pub fn authorize_any(
        &self,
        permissions: &[Permission],
        scope: &Scope<'_>,
    ) -> Result<(), ApiError> {
        if permissions
            .iter()
            .any(|permission| self.principal.authorize(*permission, scope).is_ok())
        {
            return Ok(());
        }
        let caller = self.principal.name();
        let wanted = permissions
            .iter()
            .map(|permission| permission.as_str())
            .collect::<Vec<_>>()
            .join(" or ");
        tracing::warn!(
            %caller,
            permission = %wanted,
            %scope,
            "request refused: {caller} is forbidden: no rule grants {wanted} for {scope}"
        );
        Err(ApiError::forbidden(wanted))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.remove::<Caller>().ok_or_else(|| {
            ApiError::internal(format!(
                "{} {} wants a caller but is not behind require_bearer",
                parts.method,
                parts.uri.path()
            ))
        })
    }
}

/// Middleware: authenticates the bearer token and hands the [`Caller`] to
/// the handler, or answers 401 (503 when the issuer is down).
pub async fn require_bearer(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let authorization = header_text(request.headers(), &header::AUTHORIZATION);
    match state.auth.authenticate(authorization).await {
        Ok(principal) => {
            request.extensions_mut().insert(Caller { principal });
            next.run(request).await
        }
        Err(failure) => refusal(&failure).into_response(),
    }
}

/// The caller of `/me`, and the token to use from now on when it came from
/// the OAuth proxy's header.
pub async fn authenticate_me(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Principal, Option<String>), ApiError> {
    let authorization = header_text(headers, &header::AUTHORIZATION);
    if authorization.is_none()
        && let Some(forwarded) = header_text(headers, &FORWARDED_ACCESS_TOKEN)
    {
        match state
            .auth
            .authenticate_forwarded_access_token(Some(forwarded))
            .await
        {
            Ok(ForwardedLogin {
                principal,
                bearer_token,
            }) => return Ok((principal, Some(bearer_token))),
            // Without the proxy the header is anybody's: ignored.
            Err(AuthFailure::OAuthProxyDisabled) => {
                tracing::debug!(
                    "X-Forwarded-Access-Token ignored: auth.oauth_proxy.enabled is false"
                );
            }
            Err(failure) => return Err(refusal(&failure)),
        }
    }
    match state.auth.authenticate(authorization).await {
        Ok(principal) => Ok((principal, None)),
        Err(failure) => Err(refusal(&failure)),
    }
}

/// A header's value; a value that is not text counts as present but
/// unusable (it is refused as not `Bearer <token>`).
fn header_text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .map(|value| value.to_str().unwrap_or_default())
}

/// 401 with the challenge, or 503 when the failure lies with the issuer;
/// the reason is logged here, once.
fn refusal(failure: &AuthFailure) -> ApiError {
    if failure.is_upstream_problem() {
        tracing::warn!(reason = %failure, "request refused: cannot check credentials: {failure}");
        return ApiError::unavailable(
            "the credentials cannot be checked right now; try again later",
        );
    }
    tracing::warn!(reason = %failure, "request refused: not authenticated: {failure}");
    ApiError::bearer_challenge(failure.www_authenticate())
}

/// The permissions the commands of `types` need, in [`Permission::ALL`]
/// order: a caller granted none of them anywhere may run no command. `admin`
/// alone when no type offers a command.
pub fn command_permissions(types: &TypeRegistry) -> Vec<Permission> {
    let needed: Vec<Permission> = types
        .names()
        .filter_map(|name| types.get(name))
        .flat_map(|item_type| item_type.commands())
        .flat_map(|spec| std::iter::once(spec.permission).chain(spec.owner_permission))
        .collect();
    let permissions: Vec<Permission> = Permission::ALL
        .into_iter()
        .filter(|permission| needed.contains(permission))
        .collect();
    if permissions.is_empty() {
        vec![Permission::Admin]
    } else {
        permissions
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use wq_core::{
        Action, CommandSpec, EventResult, ExecError, ExecOutcome, ItemType, ItemView, PendingEvent,
    };

    use super::*;

    struct Commanding(&'static [CommandSpec]);

    #[async_trait]
    impl ItemType for Commanding {
        fn name(&self) -> &'static str {
            "commanding"
        }
        fn actions(&self) -> &'static [&'static str] {
            &["noop"]
        }
        fn decide(&self, _view: &ItemView) -> Option<Action> {
            None
        }
        async fn execute(
            &self,
            _action: Action,
            _view: &ItemView,
        ) -> Result<ExecOutcome, ExecError> {
            Ok(ExecOutcome::done())
        }
        async fn handle_event(
            &self,
            _view: &ItemView,
            _event: &PendingEvent,
        ) -> Result<EventResult, ExecError> {
            Ok(EventResult::ignored())
        }
        fn commands(&self) -> &'static [CommandSpec] {
            self.0
        }
    }

    fn registry(commands: &'static [CommandSpec]) -> TypeRegistry {
        TypeRegistry::builder()
            .register(Arc::new(Commanding(commands)))
            .build()
            .unwrap()
    }

    #[test]
    fn the_command_permissions_are_those_the_commands_name() {
        let commands = registry(&[
            CommandSpec {
                name: "merge",
                permission: Permission::Merge,
                owner_permission: None,
            },
            CommandSpec {
                name: "retry-merge",
                permission: Permission::Retry,
                owner_permission: None,
            },
            CommandSpec {
                name: "again",
                permission: Permission::Retry,
                owner_permission: None,
            },
        ]);
        assert_eq!(
            command_permissions(&commands),
            vec![Permission::Retry, Permission::Merge]
        );
        assert_eq!(command_permissions(&registry(&[])), vec![Permission::Admin]);
        assert_eq!(
            command_permissions(&TypeRegistry::default()),
            vec![Permission::Admin]
        );
    }
}
