//! Opaque OpenShift tokens (`sha256~...`, DDR-24): the token authenticates
//! itself by reading `users/~` from the OpenShift API. The user name and
//! groups are cached for `cache_ttl` under the token's SHA-256 (never the
//! token); failures are not cached (DDR-27), so an expired token that was
//! refreshed works at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;
use url::Url;
use wq_core::Clock;

use crate::config::OpenShiftSettings;
use crate::failure::AuthFailure;
use crate::static_tokens::token_hash;

/// Prefix of OpenShift OAuth access tokens.
pub const OPENSHIFT_TOKEN_PREFIX: &str = "sha256~";
/// Path of the caller's own user object under the API URL.
const USERS_SELF_PATH: &str = "/apis/user.openshift.io/v1/users/~";
/// Entries past which expired ones are dropped on insert.
const CACHE_PRUNE_THRESHOLD: usize = 10_000;

/// The user an OpenShift token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenShiftUser {
    pub(crate) username: String,
    pub(crate) groups: Vec<String>,
}

pub(crate) struct OpenShiftUsers {
    client: reqwest::Client,
    user_url: Url,
    cache_ttl: Duration,
    request_timeout: Duration,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<[u8; 32], CachedUser>>,
}

struct CachedUser {
    user: OpenShiftUser,
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
            request_timeout: settings.request_timeout,
            clock,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The token's user, from the cache or from `users/~`.
    pub(crate) async fn user(&self, token: &str) -> Result<OpenShiftUser, AuthFailure> {
        let key = token_hash(token);
        let now = self.clock.now();
        if let Some(cached) = self
            .cache
            .lock()
            .expect("user cache lock poisoned")
            .get(&key)
            && cached.expires_at > now
        {
            return Ok(cached.user.clone());
        }

        let user = self.fetch(token).await?;
        let mut cache = self.cache.lock().expect("user cache lock poisoned");
        if cache.len() >= CACHE_PRUNE_THRESHOLD {
            cache.retain(|_, cached| cached.expires_at > now);
        }
        cache.insert(
            key,
            CachedUser {
                user: user.clone(),
                expires_at: now + self.cache_ttl,
            },
        );
        Ok(user)
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
