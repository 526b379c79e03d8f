//! Opaque OpenShift tokens (`sha256~...`, DDR-24): the token authenticates
//! itself by reading `users/~` from the OpenShift API.
//!
//! - The user name and groups are cached for `cache_ttl` under the token's
//!   SHA-256 (never the token).
//! - A refusal (401 or 403) is cached the same way for `refusal_cache_ttl`
//!   (a few seconds), so a caller repeating an unknown token costs one
//!   request per interval. A refreshed OpenShift token is a new token, so
//!   this never delays a login. An unreachable or failing API is not cached
//!   (DDR-27).
//! - Concurrent requests with the same token share one look-up.
//! - At most `max_concurrent_lookups` look-ups are in flight; one that
//!   cannot start within `lookup_wait` is answered "unavailable" rather
//!   than queued without bound.
//! - A token whose part after `sha256~` is empty or not base64url (what the
//!   OpenShift OAuth server issues) is refused without a request.
//!
//! Both caches together hold at most [`CACHE_MAX_ENTRIES`] tokens: when
//! full, expired entries go, then the refusals; if it is still full, the
//! answer is not cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;
use tokio::sync::{OnceCell, Semaphore};
use url::Url;
use wq_core::Clock;

use crate::config::OpenShiftSettings;
use crate::failure::AuthFailure;
use crate::static_tokens::token_hash;

/// Prefix of OpenShift OAuth access tokens.
pub const OPENSHIFT_TOKEN_PREFIX: &str = "sha256~";
/// Path of the caller's own user object under the API URL.
const USERS_SELF_PATH: &str = "/apis/user.openshift.io/v1/users/~";
/// Most tokens whose answer (user or refusal) is remembered.
pub(crate) const CACHE_MAX_ENTRIES: usize = 10_000;

/// The user an OpenShift token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenShiftUser {
    pub(crate) username: String,
    pub(crate) groups: Vec<String>,
}

type Answer = Result<OpenShiftUser, AuthFailure>;

pub(crate) struct OpenShiftUsers {
    client: reqwest::Client,
    user_url: Url,
    cache_ttl: Duration,
    refusal_cache_ttl: Duration,
    request_timeout: Duration,
    lookup_wait: Duration,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<[u8; 32], CachedAnswer>>,
    /// Look-ups under way, by token hash: later callers with the same token
    /// wait for the first one's answer.
    in_flight: Mutex<HashMap<[u8; 32], Arc<OnceCell<Answer>>>>,
    lookups: Semaphore,
}

struct CachedAnswer {
    /// A user, or [`AuthFailure::OpenShiftRejected`].
    answer: Answer,
    expires_at: OffsetDateTime,
}

#[derive(Deserialize)]
struct UserObject {
    metadata: UserMetadata,
    #[serde(default)]
    groups: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct UserMetadata {
    name: String,
}

/// Whether `token` has the form the OpenShift OAuth server issues:
/// `sha256~` and then base64url without padding.
pub(crate) fn is_well_formed(token: &str) -> bool {
    token
        .strip_prefix(OPENSHIFT_TOKEN_PREFIX)
        .is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        })
}

/// Removes a look-up from `in_flight` when its last waiter is done (or
/// gone), so a cancelled look-up leaves nothing behind.
struct InFlight<'a> {
    users: &'a OpenShiftUsers,
    key: [u8; 32],
    cell: Arc<OnceCell<Answer>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut in_flight = self
            .users
            .in_flight
            .lock()
            .expect("in-flight lock poisoned");
        // An answered look-up is done with (the cache, or nothing for an
        // outage, serves the next caller: never this old answer); an
        // unanswered one when no other waiter is left (the map's reference
        // and this one).
        if in_flight
            .get(&self.key)
            .is_some_and(|cell| Arc::ptr_eq(cell, &self.cell))
            && (self.cell.initialized() || Arc::strong_count(&self.cell) <= 2)
        {
            in_flight.remove(&self.key);
        }
    }
}

impl OpenShiftUsers {
    pub(crate) fn new(
        settings: &OpenShiftSettings,
        client: &reqwest::Client,
        clock: Arc<dyn Clock>,
    ) -> Result<OpenShiftUsers, String> {
        let client = match &settings.ca_file {
            None => client.clone(),
            Some(path) => {
                let pem = std::fs::read(path).map_err(|error| {
                    format!(
                        "auth.openshift.ca_file: cannot read {}: {error}",
                        path.display()
                    )
                })?;
                let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|error| {
                    format!(
                        "auth.openshift.ca_file: {} is not PEM: {error}",
                        path.display()
                    )
                })?;
                if roots.is_empty() {
                    return Err(format!(
                        "auth.openshift.ca_file: {} holds no certificate",
                        path.display()
                    ));
                }
                reqwest::Client::builder()
                    .tls_certs_merge(roots)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|error| format!("cannot build the OpenShift HTTP client: {error}"))?
            }
        };
        let base = settings.api_url.as_str().trim_end_matches('/');
        let user_url = Url::parse(&format!("{base}{USERS_SELF_PATH}"))
            .map_err(|error| format!("auth.openshift.api_url: {error}"))?;
        Ok(OpenShiftUsers {
            client,
            user_url,
            cache_ttl: settings.cache_ttl,
            refusal_cache_ttl: settings.refusal_cache_ttl,
            request_timeout: settings.request_timeout,
            lookup_wait: settings.lookup_wait,
            clock,
            cache: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            lookups: Semaphore::new(settings.max_concurrent_lookups),
        })
    }

    /// The token's user: from the cache, from a look-up under way for the
    /// same token, or from `users/~`.
    pub(crate) async fn user(&self, token: &str) -> Answer {
        if !is_well_formed(token) {
            return Err(AuthFailure::MalformedOpenShiftToken);
        }
        let key = token_hash(token);
        if let Some(answer) = self.cached(&key) {
            return answer;
        }
        let cell = self
            .in_flight
            .lock()
            .expect("in-flight lock poisoned")
            .entry(key)
            .or_default()
            .clone();
        let in_flight = InFlight {
            users: self,
            key,
            cell,
        };
        in_flight
            .cell
            .get_or_init(|| self.look_up(token, key))
            .await
            .clone()
    }

    /// The cached answer for the token hash `key`, unless expired.
    fn cached(&self, key: &[u8; 32]) -> Option<Answer> {
        let now = self.clock.now();
        self.cache
            .lock()
            .expect("user cache lock poisoned")
            .get(key)
            .filter(|cached| cached.expires_at > now)
            .map(|cached| cached.answer.clone())
    }

    /// Asks `users/~` once a slot is free, and caches a user or a refusal.
    async fn look_up(&self, token: &str, key: [u8; 32]) -> Answer {
        // A look-up that finished since this caller's cache check.
        if let Some(answer) = self.cached(&key) {
            return answer;
        }
        let permit = match self.lookups.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) if self.lookup_wait.is_zero() => None,
            Err(_) => tokio::time::timeout(self.lookup_wait, self.lookups.acquire())
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(_permit) = permit else {
            return Err(AuthFailure::OpenShiftUnavailable(format!(
                "no free look-up slot within {} ms (auth.openshift.max_concurrent_lookups are busy)",
                self.lookup_wait.as_millis()
            )));
        };
        let answer = self.fetch(token).await;
        let ttl = match &answer {
            Ok(_) => Some(self.cache_ttl),
            Err(AuthFailure::OpenShiftRejected { .. }) if !self.refusal_cache_ttl.is_zero() => {
                Some(self.refusal_cache_ttl)
            }
            Err(_) => None,
        };
        if let Some(ttl) = ttl {
            self.remember(key, answer.clone(), ttl);
        }
        answer
    }

    fn remember(&self, key: [u8; 32], answer: Answer, ttl: Duration) {
        let now = self.clock.now();
        let mut cache = self.cache.lock().expect("user cache lock poisoned");
        if cache.len() >= CACHE_MAX_ENTRIES && !cache.contains_key(&key) {
            cache.retain(|_, cached| cached.expires_at > now);
            if cache.len() >= CACHE_MAX_ENTRIES {
                cache.retain(|_, cached| cached.answer.is_ok());
            }
            if cache.len() >= CACHE_MAX_ENTRIES {
                return;
            }
        }
        cache.insert(
            key,
            CachedAnswer {
                answer,
                expires_at: now + ttl,
            },
        );
    }

    async fn fetch(&self, token: &str) -> Result<OpenShiftUser, AuthFailure> {
        let response = self
            .client
            .get(self.user_url.clone())
            .bearer_auth(token)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(|error| AuthFailure::OpenShiftUnavailable(error.without_url().to_string()))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(AuthFailure::OpenShiftRejected {
                status: status.as_u16(),
            });
        }
        if !status.is_success() {
            return Err(AuthFailure::OpenShiftUnavailable(format!("HTTP {status}")));
        }
        let object: UserObject = response.json().await.map_err(|error| {
            AuthFailure::OpenShiftUnavailable(format!("unexpected answer: {}", error.without_url()))
        })?;
        if object.metadata.name.is_empty() {
            return Err(AuthFailure::OpenShiftUnavailable(
                "the user object has an empty metadata.name".to_owned(),
            ));
        }
        Ok(OpenShiftUser {
            username: object.metadata.name,
            groups: object.groups.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wq_core::ManualClock;

    fn users(clock: Arc<ManualClock>) -> OpenShiftUsers {
        let settings = OpenShiftSettings {
            api_url: Url::parse("https://api.cluster.example:6443").unwrap(),
            cache_ttl: Duration::from_secs(300),
            refusal_cache_ttl: Duration::from_secs(10),
            max_concurrent_lookups: 16,
            lookup_wait: Duration::from_secs(1),
            ca_file: None,
            request_timeout: Duration::from_secs(10),
        };
        OpenShiftUsers::new(&settings, &reqwest::Client::new(), clock).unwrap()
    }

    fn key(index: usize) -> [u8; 32] {
        token_hash(&format!("sha256~token{index}"))
    }

    fn user() -> Answer {
        Ok(OpenShiftUser {
            username: "alice".to_owned(),
            groups: Vec::new(),
        })
    }

    const REFUSED: Answer = Err(AuthFailure::OpenShiftRejected { status: 401 });

    #[test]
    fn the_cache_never_grows_past_its_bound() {
        let clock = Arc::new(ManualClock::new(OffsetDateTime::UNIX_EPOCH));
        let users = users(clock.clone());
        let ten_seconds = Duration::from_secs(10);
        let five_minutes = Duration::from_secs(300);
        let len = || users.cache.lock().unwrap().len();

        // Full of live refusals: a user pushes them all out.
        for index in 0..CACHE_MAX_ENTRIES {
            users.remember(key(index), REFUSED, ten_seconds);
        }
        assert_eq!(len(), CACHE_MAX_ENTRIES);
        users.remember(key(usize::MAX), user(), five_minutes);
        assert_eq!(len(), 1);
        assert!(users.cached(&key(usize::MAX)).unwrap().is_ok());

        // Full of live users: a newcomer is not cached, nobody is evicted.
        for index in 0..CACHE_MAX_ENTRIES - 1 {
            users.remember(key(index), user(), five_minutes);
        }
        assert_eq!(len(), CACHE_MAX_ENTRIES);
        users.remember(key(CACHE_MAX_ENTRIES), REFUSED, ten_seconds);
        assert_eq!(len(), CACHE_MAX_ENTRIES);
        assert!(users.cached(&key(CACHE_MAX_ENTRIES)).is_none());

        // Once they expire, room is made again.
        clock.advance(time::Duration::seconds(301));
        users.remember(key(CACHE_MAX_ENTRIES), REFUSED, ten_seconds);
        assert_eq!(len(), 1);
        assert_eq!(users.cached(&key(CACHE_MAX_ENTRIES)), Some(REFUSED));
    }

    #[test]
    fn only_the_oauth_servers_token_form_is_well_formed() {
        assert!(is_well_formed("sha256~Ab-_9"));
        for token in [
            "sha256~",
            "sha256~a=",
            "sha256~a/b",
            "sha256~a.b",
            "sha256",
            "x",
        ] {
            assert!(!is_well_formed(token), "{token}");
        }
    }
}
