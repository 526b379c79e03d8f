//! Bearer-token test support shared by wq-auth's tests and benchmarks and
//! the API's: signing keys made at run time (RS256, ES256), tokens signed
//! with them, a local OIDC issuer (axum on 127.0.0.1:0) that counts its
//! requests, and an authenticator built from YAML with a manual clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use time::OffsetDateTime;
use wq_auth::{AuthConfig, Authenticator, AuthenticatorOptions, InCluster};
use wq_core::{Clock, ManualClock};

/// A private key that signs test tokens, and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub algorithm: Algorithm,
    pub encoding: EncodingKey,
    pub jwk: Jwk,
    /// The public key as PEM, for the HS256 key-confusion attack.
    pub public_pem: Vec<u8>,
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text.into_bytes()
}

/// RSA key generation is slow in debug builds: a few keys are made once
/// and handed out under any kid.
fn rsa_pool() -> &'static Vec<(EncodingKey, Vec<u8>)> {
    static POOL: OnceLock<Vec<(EncodingKey, Vec<u8>)>> = OnceLock::new();
    POOL.get_or_init(|| {
        (0..2)
            .map(|_| {
                use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der, PublicKeyX509Der};
                let pair = aws_lc_rs::rsa::KeyPair::generate(KeySize::Rsa2048).unwrap();
                let private: Pkcs8V1Der<'_> = pair.as_der().unwrap();
                let public: PublicKeyX509Der<'_> = pair.public_key().as_der().unwrap();
                let encoding =
                    EncodingKey::from_rsa_pem(&pem("PRIVATE KEY", private.as_ref())).unwrap();
                (encoding, pem("PUBLIC KEY", public.as_ref()))
            })
            .collect()
    })
}

/// An RS256 key; `variant` 0 or 1 picks one of two distinct key pairs.
pub fn rsa_key(kid: &str, variant: usize) -> SigningKey {
    let (encoding, public_pem) = rsa_pool()[variant].clone();
    let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    SigningKey {
        kid: kid.to_owned(),
        algorithm: Algorithm::RS256,
        encoding,
        jwk,
        public_pem,
    }
}

/// A fresh ES256 (P-256) key.
pub fn ec_key(kid: &str) -> SigningKey {
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
    let encoding = EncodingKey::from_ec_der(pkcs8.as_ref());
    let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    SigningKey {
        kid: kid.to_owned(),
        algorithm: Algorithm::ES256,
        encoding,
        jwk,
        public_pem: pair.public_key().as_ref().to_vec(),
    }
}

/// A JWT signed by `key` with its kid.
pub fn sign(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(key.algorithm);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// Unix seconds of `clock`.
pub fn unix(clock: &ManualClock) -> i64 {
    clock.now().unix_timestamp()
}

/// A clock at the current time.
#[expect(
    clippy::disallowed_methods,
    reason = "a manual clock for tests starts at the wall-clock time"
)]
pub fn clock_now() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(OffsetDateTime::now_utc()))
}

/// What a fake server saw: path and `Authorization` header of each request.
#[derive(Default)]
pub struct Requests {
    seen: Mutex<Vec<(String, Option<String>)>>,
}

impl Requests {
    /// Records one request; fake servers call it first thing.
    pub fn record(&self, uri: &Uri, headers: &HeaderMap) {
        let authorization = headers
            .get("authorization")
            .map(|value| value.to_str().unwrap().to_owned());
        self.seen
            .lock()
            .unwrap()
            .push((uri.path().to_owned(), authorization));
    }

    pub fn all(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self, path: &str) -> usize {
        self.all().iter().filter(|(seen, _)| seen == path).count()
    }
}

pub const JWKS_PATH: &str = "/keys";
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// A local OIDC issuer: discovery and JWKS, both counted.
pub struct FakeIssuer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub state: Arc<IssuerState>,
}

pub struct IssuerState {
    /// `issuer` of the discovery document.
    pub discovery_issuer: Mutex<String>,
    /// `jwks_uri` of the discovery document.
    pub jwks_uri: Mutex<String>,
    pub keys: Mutex<Vec<Jwk>>,
    /// When set, requests without `Authorization: Bearer <this>` get 401.
    pub required_bearer: Option<String>,
    pub requests: Requests,
    jwks_served: AtomicUsize,
}

impl FakeIssuer {
    /// Serves `keys`; discovery names this server as issuer.
    pub async fn start(keys: &[&SigningKey]) -> FakeIssuer {
        FakeIssuer::start_with(keys, None, |url| {
            (url.to_owned(), format!("{url}{JWKS_PATH}"))
        })
        .await
    }

    /// `document(url)` gives the discovery document's issuer and jwks_uri.
    pub async fn start_with(
        keys: &[&SigningKey],
        required_bearer: Option<&str>,
        document: impl FnOnce(&str) -> (String, String),
    ) -> FakeIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (issuer, jwks_uri) = document(&url);
        let state = Arc::new(IssuerState {
            discovery_issuer: Mutex::new(issuer),
            jwks_uri: Mutex::new(jwks_uri),
            keys: Mutex::new(keys.iter().map(|key| key.jwk.clone()).collect()),
            required_bearer: required_bearer.map(str::to_owned),
            requests: Requests::default(),
            jwks_served: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route(DISCOVERY_PATH, get(discovery))
            .fallback(get(jwks))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeIssuer { url, state }
    }

    pub fn set_keys(&self, keys: &[&SigningKey]) {
        *self.state.keys.lock().unwrap() = keys.iter().map(|key| key.jwk.clone()).collect();
    }

    /// JWKS documents served so far.
    pub fn jwks_fetches(&self) -> usize {
        self.state.jwks_served.load(Ordering::SeqCst)
    }

    pub fn discovery_fetches(&self) -> usize {
        self.state.requests.count(DISCOVERY_PATH)
    }
}

fn authorized(state: &IssuerState, headers: &HeaderMap) -> bool {
    let Some(required) = &state.required_bearer else {
        return true;
    };
    headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        == Some(&format!("Bearer {required}"))
}

async fn discovery(
    State(state): State<Arc<IssuerState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    state.requests.record(&uri, &headers);
    if !authorized(&state, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    Json(json!({
        "issuer": *state.discovery_issuer.lock().unwrap(),
        "jwks_uri": *state.jwks_uri.lock().unwrap(),
        "response_types_supported": ["id_token"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
    }))
    .into_response()
}

async fn jwks(State(state): State<Arc<IssuerState>>, uri: Uri, headers: HeaderMap) -> Response {
    state.requests.record(&uri, &headers);
    if !authorized(&state, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    state.jwks_served.fetch_add(1, Ordering::SeqCst);
    let keys = state.keys.lock().unwrap().clone();
    Json(JwkSet { keys }).into_response()
}

/// Parses and validates an `auth:` section body.
pub fn settings(yaml: &str) -> wq_auth::AuthSettings {
    let config: AuthConfig = serde_saphyr::from_str(yaml).unwrap();
    config.validate().unwrap()
}

/// An authenticator for `yaml` with `clock`, outside any cluster.
pub fn authenticator(yaml: &str, clock: &Arc<ManualClock>) -> Authenticator {
    authenticator_in(yaml, clock, None)
}

pub fn authenticator_in(
    yaml: &str,
    clock: &Arc<ManualClock>,
    in_cluster: Option<InCluster>,
) -> Authenticator {
    let clock: Arc<dyn Clock> = clock.clone();
    Authenticator::with_options(
        settings(yaml),
        reqwest::Client::new(),
        AuthenticatorOptions { clock, in_cluster },
    )
    .unwrap()
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
