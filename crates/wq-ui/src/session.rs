//! Who is signed in to the dashboard, with the API's rules.
//!
//! - **Behind an OAuth proxy** (`auth.oauth_proxy.enabled`, DDR-27): the
//!   proxy's `X-Forwarded-Access-Token` is authenticated on every request,
//!   as `/api/v1/me` bridges it; the CSRF token is derived from it.
//! - **Sign-in page**: `POST /ui/sign-in` takes an API token, authenticates
//!   it with the same authenticator and opens a server-side session
//!   (`ui_sessions`): the browser holds a random id in an `HttpOnly`,
//!   `SameSite=Strict` cookie (`Secure` unless the request is to loopback)
//!   with an expiry; only the id's SHA-256 is stored, with who signed in
//!   (matched against the rules again on every request,
//!   [`wq_auth::Authenticator::principal_of`]) and a CSRF token. Sign-out
//!   deletes the row.
//! - **One-time sign-in link** (the demo's): a single-use, short-lived
//!   code in the URL, exchanged for a session and redirected to a clean
//!   URL.
//! - **CSRF**: every POST carries the session's token (form field `csrf`
//!   or header `X-CSRF-Token`); a missing or wrong one is a 403. The
//!   sign-in form itself is protected by a double-submit cookie.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;
use wq_api::AppState;
use wq_auth::{Identity, Principal};
use wq_store::sessions::{LINK, SESSION, UiSession};

/// The session cookie.
pub const SESSION_COOKIE: &str = "wq_session";
/// The sign-in form's double-submit cookie.
pub const SIGN_IN_COOKIE: &str = "wq_sign_in";
/// The header a script sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// How long a one-time sign-in link may wait to be used.
pub const LINK_TTL: Duration = Duration::from_secs(15 * 60);

/// A signed-in person.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub principal: Principal,
    /// What every form and fetch of this person carries.
    pub csrf: String,
    /// The stored session (`None` behind the OAuth proxy).
    pub session_hash: Option<String>,
}

/// A random id, hex.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// The SHA-256 (hex) of `text`.
pub fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Equal in constant time.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The value of cookie `name`, if sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether the request was made to a loopback host (then a cookie cannot
/// be `Secure`: plain HTTP on localhost is how the demo and tests run).
pub fn to_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, `Path=/`, with
/// `Max-Age`, `Secure` unless `loopback`.
pub fn set_cookie(name: &str, value: &str, max_age: Duration, loopback: bool) -> HeaderValue {
    let secure = if loopback { "" } else { "; Secure" };
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        max_age.as_secs()
    ))
    .expect("cookie values are hex")
}

/// A `Set-Cookie` value that removes cookie `name`.
pub fn clear_cookie(name: &str, loopback: bool) -> HeaderValue {
    set_cookie(name, "", Duration::ZERO, loopback)
}

fn store_error(error: wq_store::StoreError) -> wq_api::ApiError {
    wq_api::ApiError::from(error)
}

/// Why nobody is signed in.
#[derive(Debug)]
pub enum NotSignedIn {
    /// No credentials, or ones that do not hold.
    Refused,
    /// The credentials cannot be checked now (an issuer is down, the
    /// database fails).
    Unavailable(String),
}

/// The person behind the request: a valid session cookie, else the OAuth
/// proxy's header when the proxy is enabled.
pub async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<SignedIn, NotSignedIn> {
    let now = state.clock().now();
    if let Some(id) = cookie(headers, SESSION_COOKIE) {
        let hash = digest(id);
        let session = state
            .store()
            .ui_session_get(&hash, SESSION, now)
            .await
            .map_err(|error| NotSignedIn::Unavailable(error.to_string()))?;
        if let Some(session) = session {
            match serde_json::from_value::<Identity>(session.principal.clone()) {
                Ok(identity) => match state.authenticator().principal_of(identity) {
                    Ok(principal) => {
                        return Ok(SignedIn {
                            principal,
                            csrf: session.csrf_token,
                            session_hash: Some(hash),
                        });
                    }
                    Err(failure) => {
                        tracing::info!(reason = %failure, "dashboard session no longer valid: {failure}");
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, "unreadable dashboard session ignored");
                }
            }
        }
    }
    if let Some(token) = headers
        .get(wq_api::auth::FORWARDED_ACCESS_TOKEN)
        .and_then(|value| value.to_str().ok())
    {
        match state
            .authenticator()
            .authenticate_forwarded_access_token(Some(token))
            .await
        {
            Ok(login) => {
                return Ok(SignedIn {
                    principal: login.principal,
                    csrf: digest(&format!("wq-ui-csrf:{}", login.bearer_token)),
                    session_hash: None,
                });
            }
            Err(wq_auth::AuthFailure::OAuthProxyDisabled) => {}
            Err(failure) if failure.is_upstream_problem() => {
                return Err(NotSignedIn::Unavailable(failure.to_string()));
            }
            Err(failure) => {
                tracing::info!(reason = %failure, "dashboard request refused: {failure}");
            }
        }
    }
    Err(NotSignedIn::Refused)
}

/// Opens a session for `principal`: the id for the cookie. Sessions and
/// links that expired are deleted on the way (one indexed statement per
/// sign-in).
pub async fn open(state: &AppState, principal: &Principal) -> Result<String, wq_api::ApiError> {
    let now = state.clock().now();
    if let Err(error) = state.store().ui_session_prune(now).await {
        tracing::warn!(%error, "expired dashboard sessions not deleted: {error}");
    }
    let id = random_token();
    state
        .store()
        .ui_session_insert(UiSession {
            id_hash: digest(&id),
            kind: SESSION.to_owned(),
            principal: identity_json(principal.identity()),
            csrf_token: random_token(),
            created_at: now,
            expires_at: now + SESSION_TTL,
        })
        .await
        .map_err(store_error)?;
    Ok(id)
}

fn identity_json(identity: &Identity) -> serde_json::Value {
    serde_json::to_value(identity).expect("an identity serializes")
}

/// Ends the session whose id hashes to `hash`.
pub async fn close(state: &AppState, hash: &str) -> Result<(), wq_api::ApiError> {
    state
        .store()
        .ui_session_take(hash, SESSION, state.clock().now())
        .await
        .map_err(store_error)?;
    Ok(())
}

/// A single-use sign-in link's code for `principal`, valid for
/// [`LINK_TTL`]: the demo prints `{url}/ui/sign-in/link/{code}`.
pub async fn create_link(
    store: &dyn wq_store::Store,
    principal: &Principal,
    now: OffsetDateTime,
) -> Result<String, wq_store::StoreError> {
    let code = random_token();
    store
        .ui_session_insert(UiSession {
            id_hash: digest(&code),
            kind: LINK.to_owned(),
            principal: identity_json(principal.identity()),
            csrf_token: String::new(),
            created_at: now,
            expires_at: now + LINK_TTL,
        })
        .await?;
    Ok(code)
}

/// Uses the link `code` (once): a session id for the person it names, or
/// `None` when it is unknown, used or expired.
pub async fn redeem_link(state: &AppState, code: &str) -> Result<Option<String>, wq_api::ApiError> {
    let now = state.clock().now();
    let Some(link) = state
        .store()
        .ui_session_take(&digest(code), LINK, now)
        .await
        .map_err(store_error)?
    else {
        return Ok(None);
    };
    let Ok(identity) = serde_json::from_value::<Identity>(link.principal) else {
        return Ok(None);
    };
    let Ok(principal) = state.authenticator().principal_of(identity) else {
        return Ok(None);
    };
    Ok(Some(open(state, &principal).await?))
}

/// Whether the request carries `expected` as its CSRF token (header or
/// form field).
pub fn csrf_ok(expected: &str, headers: &HeaderMap, form_token: Option<&str>) -> bool {
    let sent = headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .or(form_token);
    sent.is_some_and(|sent| !expected.is_empty() && same(sent, expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn cookies_are_read_by_name() {
        let map = headers(&[("cookie", "a=1; wq_session=abc"), ("cookie", "b=2")]);
        assert_eq!(cookie(&map, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&map, "b"), Some("2"));
        assert_eq!(cookie(&map, "c"), None);
    }

    #[test]
    fn loopback_hosts_get_cookies_without_secure() {
        for host in ["127.0.0.1:8080", "localhost", "[::1]:80", "localhost:3000"] {
            assert!(to_loopback(&headers(&[("host", host)])), "{host}");
        }
        for host in ["wq.example.com", "10.0.0.1:80", "example.com:443"] {
            assert!(!to_loopback(&headers(&[("host", host)])), "{host}");
        }
        let public = set_cookie("s", "x", SESSION_TTL, false);
        let public = public.to_str().unwrap();
        assert!(public.contains("HttpOnly") && public.contains("SameSite=Strict"));
        assert!(public.contains("Secure") && public.contains("Max-Age=28800"));
        let local = set_cookie("s", "x", SESSION_TTL, true);
        assert!(!local.to_str().unwrap().contains("Secure"));
    }

    #[test]
    fn csrf_needs_the_exact_token() {
        let token = random_token();
        assert!(csrf_ok(&token, &HeaderMap::new(), Some(&token)));
        assert!(csrf_ok(&token, &headers(&[(CSRF_HEADER, &token)]), None));
        assert!(!csrf_ok(&token, &HeaderMap::new(), None));
        assert!(!csrf_ok(&token, &HeaderMap::new(), Some("nope")));
        assert!(!csrf_ok("", &HeaderMap::new(), Some("")));
    }
}
