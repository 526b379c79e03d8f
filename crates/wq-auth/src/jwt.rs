//! JWTs from trusted issuers (DDR-11, DDR-22): discovery, the JWKS cache
//! with rate-limited refresh, signature and time checks, and the match
//! against the issuer's rules.
//!
//! An issuer is trusted when a rule names it. Its discovery document
//! (`{issuer}/.well-known/openid-configuration`) gives the issuer string
//! tokens must carry, which must equal the configured URL up to a trailing
//! slash, and the JWKS URI. For `k8s` the document comes from the API
//! server and the JWKS URI's host is rewritten to it. Keys are cached; an
//! unknown `kid`, or keys older than `jwks_max_age`, cause a refresh, but
//! at most one fetch per issuer per `refresh_min_interval` whatever the
//! traffic. Only RS256 and ES256 (P-256) are accepted.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use url::Url;
use wq_core::Clock;

use crate::config::{AUDIENCE_CLAIM, JwtSettings};
use crate::failure::AuthFailure;
use crate::k8s::InCluster;
use crate::principal::Identity;
use crate::rules::{IssuerRef, Rule};

/// Path of the discovery document under an issuer.
const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// Every trusted issuer and its cached keys.
pub(crate) struct JwtAuthority {
    issuers: Vec<Issuer>,
    settings: JwtSettings,
    clock: Arc<dyn Clock>,
}

struct Issuer {
    /// The configured URL, or `k8s`; for messages.
    label: String,
    source: IssuerSource,
    client: reqwest::Client,
    /// The rules naming this issuer, in file order.
    rules: Vec<Arc<Rule>>,
    cache: RwLock<IssuerCache>,
    /// Held during a fetch, so concurrent refreshes make one request.
    refresh_lock: tokio::sync::Mutex<()>,
}

enum IssuerSource {
    /// Configured URL, without trailing slash.
    Url(String),
    InCluster(InCluster),
}

#[derive(Default)]
struct IssuerCache {
    discovered: Option<Arc<Discovered>>,
    keys: Arc<HashMap<String, Arc<CachedKey>>>,
    /// Last successful JWKS fetch.
    fetched_at: Option<OffsetDateTime>,
    /// Last attempt, successful or not: the rate limit's reference.
    last_attempt: Option<OffsetDateTime>,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

struct Discovered {
    /// The document's `issuer`: tokens' `iss` must equal it exactly.
    issuer: String,
    jwks_uri: Url,
}

struct CachedKey {
    key: DecodingKey,
    algorithm: Algorithm,
}

#[derive(Deserialize)]
struct DiscoveryDocument {
    issuer: String,
    jwks_uri: String,
}

enum Refresh {
    Fetched,
    RateLimited,
    Failed(String),
}

impl JwtAuthority {
    /// One [`Issuer`] per distinct issuer of `rules` (all issuer rules; `k8s`
    /// ones only when `in_cluster` is given).
    pub(crate) fn new(
        rules: &[Arc<Rule>],
        settings: JwtSettings,
        client: &reqwest::Client,
        clock: Arc<dyn Clock>,
        in_cluster: Option<&InCluster>,
    ) -> Result<JwtAuthority, String> {
        let mut issuers: Vec<Issuer> = Vec::new();
        for rule in rules {
            let Some(issuer_ref) = rule.issuer() else {
                continue;
            };
            let (label, source, issuer_client) = match issuer_ref {
                IssuerRef::Url(url) => {
                    let trimmed = url.as_str().trim_end_matches('/').to_owned();
                    (trimmed.clone(), IssuerSource::Url(trimmed), client.clone())
                }
                IssuerRef::KubernetesInCluster => {
                    let Some(in_cluster) = in_cluster else {
                        continue;
                    };
                    let cluster_client = in_cluster.client(client, settings.request_timeout)?;
                    (
                        crate::config::K8S_ISSUER.to_owned(),
                        IssuerSource::InCluster(in_cluster.clone()),
                        cluster_client,
                    )
                }
            };
            match issuers.iter_mut().find(|issuer| issuer.label == label) {
                Some(existing) => existing.rules.push(rule.clone()),
                None => issuers.push(Issuer {
                    label,
                    source,
                    client: issuer_client,
                    rules: vec![rule.clone()],
                    cache: RwLock::default(),
                    refresh_lock: tokio::sync::Mutex::new(()),
                }),
            }
        }
        Ok(JwtAuthority {
            issuers,
            settings,
            clock,
        })
    }

    /// Discovers every issuer and fetches its keys (subject to the rate
    /// limit); failures are logged and retried on use.
    /// The rules of the discovered issuer `issuer` that match `claims` now
    /// (none when it is not discovered, or no longer trusted), and whether
    /// the claims' `exp` has passed.
    pub(crate) fn rules_for(
        &self,
        issuer: &str,
        claims: &Map<String, Value>,
    ) -> Result<Vec<Arc<Rule>>, AuthFailure> {
        self.check_times(claims)?;
        let trusted = self
            .issuers
            .iter()
            .find(|candidate| candidate.discovered().is_some_and(|d| d.issuer == issuer))
            .ok_or_else(|| AuthFailure::UntrustedIssuer(issuer.to_owned()))?;
        Ok(trusted
            .rules
            .iter()
            .filter(|rule| rule.matches_claims(claims))
            .cloned()
            .collect())
    }

    pub(crate) async fn warm_up(&self) {
        for issuer in &self.issuers {
            self.refresh(issuer).await;
        }
    }

    /// Verifies `token` and returns the caller with the issuer's rules whose
    /// claims it satisfies.
    pub(crate) async fn authenticate(
        &self,
        token: &str,
    ) -> Result<(Identity, Vec<Arc<Rule>>), AuthFailure> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|error| AuthFailure::MalformedJwt(error.to_string()))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(AuthFailure::AlgorithmNotAllowed(format!(
                "{:?}",
                header.alg
            )));
        }
        let kid = header.kid.as_deref().ok_or(AuthFailure::MissingKeyId)?;
        let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|error| AuthFailure::MalformedJwt(error.to_string()))?;
        let claimed_issuer = string_claim(&unverified, "iss")?;

        let (issuer, discovered) = self.issuer_for(claimed_issuer).await?;
        let key = self.key(issuer, &discovered, kid).await?;
        if key.algorithm != header.alg {
            return Err(AuthFailure::KeyAlgorithmMismatch {
                issuer: discovered.issuer.clone(),
                kid: kid.to_owned(),
                alg: format!("{:?}", header.alg),
            });
        }

        // The library checks the algorithm and the signature; claims are
        // checked below, against the service's clock.
        let mut validation = Validation::new(header.alg);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|error| match error.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    AuthFailure::BadSignature("signature mismatch".to_owned())
                }
                _ => AuthFailure::BadSignature(error.to_string()),
            })?
            .claims;

        if string_claim(&claims, "iss")? != discovered.issuer {
            return Err(AuthFailure::UntrustedIssuer(claimed_issuer.to_owned()));
        }
        self.check_times(&claims)?;
        let subject = string_claim(&claims, "sub")?.to_owned();
        if !issuer.accepts_audience(&claims) {
            return Err(AuthFailure::AudienceNotAccepted {
                issuer: discovered.issuer.clone(),
                audience: claims
                    .get(AUDIENCE_CLAIM)
                    .map_or_else(|| "(none)".to_owned(), Value::to_string),
            });
        }
        let rules = issuer
            .rules
            .iter()
            .filter(|rule| rule.matches_claims(&claims))
            .cloned()
            .collect();
        let identity = Identity::Jwt {
            issuer: discovered.issuer.clone(),
            subject,
            claims,
        };
        Ok((identity, rules))
    }

    /// `exp` (required), `nbf` and `iat` against the clock, with leeway.
    fn check_times(&self, claims: &Map<String, Value>) -> Result<(), AuthFailure> {
        let now = self.clock.now().unix_timestamp();
        let leeway = i64::try_from(self.settings.leeway.as_secs()).unwrap_or(i64::MAX);
        let expires_at = numeric_date(claims, "exp")?.ok_or(AuthFailure::BadClaim {
            claim: "exp",
            expected: "a number",
        })?;
        if now >= expires_at.saturating_add(leeway) {
            return Err(AuthFailure::Expired {
                expired_at: expires_at,
            });
        }
        if let Some(not_before) = numeric_date(claims, "nbf")?
            && now.saturating_add(leeway) < not_before
        {
            return Err(AuthFailure::NotYetValid { not_before });
        }
        if let Some(issued_at) = numeric_date(claims, "iat")?
            && issued_at > now.saturating_add(leeway)
        {
            return Err(AuthFailure::IssuedInFuture { issued_at });
        }
        Ok(())
    }

    /// The issuer whose discovered issuer string is `claimed`; discovers
    /// candidates not discovered yet.
    async fn issuer_for(&self, claimed: &str) -> Result<(&Issuer, Arc<Discovered>), AuthFailure> {
        for issuer in &self.issuers {
            if let Some(discovered) = issuer.discovered()
                && discovered.issuer == claimed
            {
                return Ok((issuer, discovered));
            }
        }
        let mut unavailable = None;
        for issuer in &self.issuers {
            if issuer.discovered().is_some() || !issuer.may_be(claimed) {
                continue;
            }
            let outcome = self.refresh(issuer).await;
            match issuer.discovered() {
                Some(discovered) if discovered.issuer == claimed => {
                    return Ok((issuer, discovered));
                }
                Some(_) => {}
                None => {
                    unavailable = Some(AuthFailure::IssuerUnavailable {
                        issuer: issuer.label.clone(),
                        reason: issuer.failure_reason(outcome),
                    });
                }
            }
        }
        // An issuer that could be the claimed one could not be discovered:
        // say so rather than blame the token.
        Err(unavailable.unwrap_or_else(|| AuthFailure::UntrustedIssuer(claimed.to_owned())))
    }

    /// The issuer's key `kid`, refreshing the keys when `kid` is unknown or
    /// they are older than `jwks_max_age`.
    async fn key(
        &self,
        issuer: &Issuer,
        discovered: &Discovered,
        kid: &str,
    ) -> Result<Arc<CachedKey>, AuthFailure> {
        let (found, stale) = {
            let cache = issuer.cache.read().expect("issuer cache lock poisoned");
            let stale = cache.fetched_at.is_none_or(|fetched_at| {
                self.clock.now() - fetched_at >= self.settings.jwks_max_age
            });
            (cache.keys.get(kid).cloned(), stale)
        };
        if let Some(key) = &found
            && !stale
        {
            return Ok(key.clone());
        }
        let outcome = self.refresh(issuer).await;
        let refreshed = issuer.key(kid);
        match (refreshed, found, outcome) {
            (Some(key), _, _) => Ok(key),
            // Keys could not be fetched again: the cached one still holds.
            (None, Some(key), Refresh::Failed(_) | Refresh::RateLimited) => Ok(key),
            (None, _, Refresh::Failed(reason)) => Err(AuthFailure::IssuerUnavailable {
                issuer: discovered.issuer.clone(),
                reason,
            }),
            (None, _, _) => Err(AuthFailure::UnknownKeyId {
                issuer: discovered.issuer.clone(),
                kid: kid.to_owned(),
            }),
        }
    }

    /// Discovers the issuer if needed and fetches its keys, unless an
    /// attempt was made less than `refresh_min_interval` ago. Concurrent
    /// callers wait for one fetch.
    async fn refresh(&self, issuer: &Issuer) -> Refresh {
        let _fetching = issuer.refresh_lock.lock().await;
        let now = self.clock.now();
        let discovered = {
            let mut cache = issuer.cache.write().expect("issuer cache lock poisoned");
            if let Some(last_attempt) = cache.last_attempt
                && now - last_attempt < self.settings.refresh_min_interval
            {
                return Refresh::RateLimited;
            }
            cache.last_attempt = Some(now);
            cache.discovered.clone()
        };
        let fetched = async {
            let discovered = match discovered {
                Some(discovered) => discovered,
                None => {
                    let discovered = Arc::new(self.discover(issuer).await?);
                    issuer
                        .cache
                        .write()
                        .expect("issuer cache lock poisoned")
                        .discovered = Some(discovered.clone());
                    discovered
                }
            };
            let set: JwkSet = self.get_json(issuer, &discovered.jwks_uri).await?;
            Ok::<_, String>(usable_keys(&set))
        }
        .await;
        let mut cache = issuer.cache.write().expect("issuer cache lock poisoned");
        match fetched {
            Ok(keys) => {
                tracing::debug!(issuer = %issuer.label, keys = keys.len(), "fetched the keys of issuer {}", issuer.label);
                cache.keys = Arc::new(keys);
                cache.fetched_at = Some(now);
                cache.last_error = None;
                Refresh::Fetched
            }
            Err(reason) => {
                tracing::warn!(issuer = %issuer.label, %reason, "cannot refresh issuer {}: {reason}", issuer.label);
                cache.last_error = Some(reason.clone());
                Refresh::Failed(reason)
            }
        }
    }

    async fn discover(&self, issuer: &Issuer) -> Result<Discovered, String> {
        let (base, in_cluster) = match &issuer.source {
            IssuerSource::Url(base) => (base.clone(), None),
            IssuerSource::InCluster(in_cluster) => (
                in_cluster.api_url.as_str().trim_end_matches('/').to_owned(),
                Some(in_cluster),
            ),
        };
        let url = Url::parse(&format!("{base}{DISCOVERY_PATH}"))
            .map_err(|error| format!("bad discovery URL for {base}: {error}"))?;
        let document: DiscoveryDocument = self.get_json(issuer, &url).await?;
        if document.issuer.is_empty() {
            return Err(format!(
                "the discovery document at {url} has an empty issuer"
            ));
        }
        if in_cluster.is_none() && document.issuer.trim_end_matches('/') != base {
            return Err(format!(
                "the discovery document at {url} names issuer {:?}, not the configured {base:?}",
                document.issuer
            ));
        }
        let jwks_uri = Url::parse(&document.jwks_uri)
            .map_err(|error| format!("jwks_uri {:?} is not a URL: {error}", document.jwks_uri))?;
        let jwks_uri = match in_cluster {
            Some(in_cluster) => in_cluster.rewrite(&jwks_uri),
            None if crate::config::is_fetchable(&jwks_uri) => jwks_uri,
            None => {
                return Err(format!(
                    "jwks_uri {jwks_uri} must be https (http only on a loopback address)"
                ));
            }
        };
        Ok(Discovered {
            issuer: document.issuer,
            jwks_uri,
        })
    }

    async fn get_json<T: DeserializeOwned>(&self, issuer: &Issuer, url: &Url) -> Result<T, String> {
        let mut request = issuer
            .client
            .get(url.clone())
            .timeout(self.settings.request_timeout)
            .header(reqwest::header::ACCEPT, "application/json");
        if let IssuerSource::InCluster(in_cluster) = &issuer.source {
            request = request.bearer_auth(in_cluster.token.read()?);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("GET {url}: {}", error.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        response
            .json::<T>()
            .await
            .map_err(|error| format!("GET {url}: unexpected answer: {}", error.without_url()))
    }
}

impl Issuer {
    fn discovered(&self) -> Option<Arc<Discovered>> {
        self.cache
            .read()
            .expect("issuer cache lock poisoned")
            .discovered
            .clone()
    }

    fn key(&self, kid: &str) -> Option<Arc<CachedKey>> {
        self.cache
            .read()
            .expect("issuer cache lock poisoned")
            .keys
            .get(kid)
            .cloned()
    }

    /// Whether tokens claiming `claimed` could come from this issuer before
    /// it was discovered.
    fn may_be(&self, claimed: &str) -> bool {
        match &self.source {
            IssuerSource::Url(base) => claimed.trim_end_matches('/') == base,
            // The cluster's issuer is only known from its discovery document.
            IssuerSource::InCluster(_) => true,
        }
    }

    fn failure_reason(&self, outcome: Refresh) -> String {
        match outcome {
            Refresh::Failed(reason) => reason,
            Refresh::Fetched | Refresh::RateLimited => {
                let cache = self.cache.read().expect("issuer cache lock poisoned");
                let last = cache.last_error.as_deref().unwrap_or("not discovered yet");
                format!("{last} (retried at most every refresh interval)")
            }
        }
    }

    /// Whether `aud` satisfies the `aud` condition of any of the issuer's
    /// rules: a token minted for another service is not authenticated.
    fn accepts_audience(&self, claims: &Map<String, Value>) -> bool {
        self.rules.iter().any(|rule| {
            rule.claim_conditions()
                .iter()
                .filter(|condition| condition.claim == AUDIENCE_CLAIM)
                .all(|condition| condition.matches(claims))
        })
    }
}

/// The keys of `set` this service can use, by `kid`: RSA for RS256 and
/// P-256 for ES256, not marked for encryption or for another algorithm.
fn usable_keys(set: &JwkSet) -> HashMap<String, Arc<CachedKey>> {
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        let Some(kid) = &jwk.common.key_id else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Some(algorithm) = key_algorithm(jwk) else {
            continue;
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => {
                keys.insert(kid.clone(), Arc::new(CachedKey { key, algorithm }));
            }
            Err(error) => tracing::debug!(%kid, %error, "skipping unusable key {kid}"),
        }
    }
    keys
}

fn key_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    let (algorithm, declared) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (Algorithm::RS256, KeyAlgorithm::RS256),
        AlgorithmParameters::EllipticCurve(params) if params.curve == EllipticCurve::P256 => {
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        _ => return None,
    };
    match jwk.common.key_algorithm {
        Some(stated) if stated != declared => None,
        _ => Some(algorithm),
    }
}

fn string_claim<'a>(
    claims: &'a Map<String, Value>,
    claim: &'static str,
) -> Result<&'a str, AuthFailure> {
    claims
        .get(claim)
        .and_then(Value::as_str)
        .ok_or(AuthFailure::BadClaim {
            claim,
            expected: "a string",
        })
}

/// A NumericDate claim in whole seconds; `None` when absent.
fn numeric_date(
    claims: &Map<String, Value>,
    claim: &'static str,
) -> Result<Option<i64>, AuthFailure> {
    let Some(value) = claims.get(claim) else {
        return Ok(None);
    };
    let seconds = value
        .as_i64()
        .or_else(|| {
            value
                .as_f64()
                .filter(|seconds| seconds.is_finite())
                .map(|seconds| seconds.floor() as i64)
        })
        .ok_or(AuthFailure::BadClaim {
            claim,
            expected: "a number",
        })?;
    Ok(Some(seconds))
}
