//! The in-cluster side of the `k8s` issuer shorthand (DDR-11, DDR-26):
//! where the Kubernetes API is, the service-account token that
//! authenticates discovery and JWKS requests, and the cluster CA.
//! [`InCluster::detect`] reads the pod's environment; tests build an
//! [`InCluster`] pointing at a local server instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

/// The API server as every pod reaches it.
pub const IN_CLUSTER_API_URL: &str = "https://kubernetes.default.svc";
/// Where Kubernetes mounts the pod's service-account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Set by Kubernetes in every pod.
pub const SERVICE_HOST_VARIABLE: &str = "KUBERNETES_SERVICE_HOST";

/// The service-account token; a projected token file is rotated by the
/// kubelet, so it is read again for every request.
#[derive(Clone)]
pub enum ServiceAccountToken {
    File(PathBuf),
    Value(String),
}

impl ServiceAccountToken {
    pub(crate) fn read(&self) -> Result<String, String> {
        match self {
            ServiceAccountToken::Value(token) => Ok(token.clone()),
            ServiceAccountToken::File(path) => std::fs::read_to_string(path)
                .map(|token| token.trim().to_owned())
                .map_err(|error| {
                    format!(
                        "cannot read service-account token {}: {error}",
                        path.display()
                    )
                }),
        }
    }
}

impl std::fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceAccountToken::File(path) => f.debug_tuple("File").field(path).finish(),
            ServiceAccountToken::Value(_) => f.write_str("Value(<redacted>)"),
        }
    }
}

/// How this process reaches its cluster's API.
#[derive(Debug, Clone)]
pub struct InCluster {
    /// Base URL of the API server; discovery is fetched from it and the
    /// JWKS URI's host is replaced by it.
    pub api_url: Url,
    /// Sent as bearer on both requests (OpenShift refuses anonymous JWKS
    /// reads).
    pub token: ServiceAccountToken,
    /// PEM of the cluster CA; when set, the only trusted root for the API.
    pub ca_pem: Option<Vec<u8>>,
}

impl InCluster {
    /// The pod's own cluster: `KUBERNETES_SERVICE_HOST` is set and the
    /// service-account token is mounted. `None` elsewhere (local runs), and
    /// then `k8s` rules are skipped.
    pub fn detect() -> Option<InCluster> {
        let host = std::env::var_os(SERVICE_HOST_VARIABLE)?;
        if host.is_empty() {
            return None;
        }
        InCluster::from_directory(Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// Credentials mounted in `directory` (`token`, optional `ca.crt`).
    pub fn from_directory(directory: &Path) -> Option<InCluster> {
        let token = directory.join("token");
        if !token.is_file() {
            return None;
        }
        Some(InCluster {
            api_url: Url::parse(IN_CLUSTER_API_URL).expect("the in-cluster URL is valid"),
            token: ServiceAccountToken::File(token),
            ca_pem: std::fs::read(directory.join("ca.crt")).ok(),
        })
    }

    /// A client that trusts only the cluster CA when one is given, else
    /// `base`.
    pub(crate) fn client(
        &self,
        base: &reqwest::Client,
        timeout: Duration,
    ) -> Result<reqwest::Client, String> {
        let Some(ca_pem) = &self.ca_pem else {
            return Ok(base.clone());
        };
        let roots = reqwest::Certificate::from_pem_bundle(ca_pem)
            .map_err(|error| format!("the cluster CA is not PEM: {error}"))?;
        if roots.is_empty() {
            return Err("the cluster CA holds no certificate".to_owned());
        }
        reqwest::Client::builder()
            .tls_certs_only(roots)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| format!("cannot build the in-cluster HTTP client: {error}"))
    }

    /// `uri` with its scheme, host and port replaced by the API server's
    /// (DDR-11: the discovered JWKS host may be unreachable from pods).
    pub(crate) fn rewrite(&self, uri: &Url) -> Url {
        let mut rewritten = self.api_url.clone();
        rewritten.set_path(uri.path());
        rewritten.set_query(uri.query());
        rewritten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jwks_host_is_replaced_by_the_api_server() {
        let cluster = InCluster {
            api_url: Url::parse("https://kubernetes.default.svc").unwrap(),
            token: ServiceAccountToken::Value("t".to_owned()),
            ca_pem: None,
        };
        let discovered = Url::parse("https://10.0.0.1:6443/openid/v1/jwks?x=1").unwrap();
        assert_eq!(
            cluster.rewrite(&discovered).as_str(),
            "https://kubernetes.default.svc/openid/v1/jwks?x=1"
        );
    }

    #[test]
    fn no_token_file_means_not_in_cluster() {
        let empty = std::env::temp_dir().join(format!("wq-auth-no-sa-{}", std::process::id()));
        assert!(InCluster::from_directory(&empty).is_none());
    }

    #[test]
    fn a_token_value_is_not_printed() {
        let token = ServiceAccountToken::Value("secret-token".to_owned());
        assert!(!format!("{token:?}").contains("secret-token"));
    }
}
