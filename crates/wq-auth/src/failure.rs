//! Why a caller was not authenticated. The reason is for logs and the audit
//! trail; the caller only ever gets a generic 401 with the
//! [`AuthFailure::www_authenticate`] challenge.

/// The realm named in every challenge.
pub const REALM: &str = "workqueue";

/// An authentication failure: answer 401 with
/// `WWW-Authenticate: {www_authenticate()}` and no detail. `Display` gives
/// the detail, for logs only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("no Authorization header")]
    MissingCredentials,
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    #[error("no static token has this hash")]
    UnknownStaticToken,
    #[error("malformed JWT: {0}")]
    MalformedJwt(String),
    #[error("JWT algorithm {0} is not accepted (RS256 and ES256 are)")]
    AlgorithmNotAllowed(String),
    #[error("JWT header has no kid")]
    MissingKeyId,
    #[error("JWT issuer {0:?} is not trusted by any rule")]
    UntrustedIssuer(String),
    #[error("issuer {issuer} has no key {kid:?}")]
    UnknownKeyId { issuer: String, kid: String },
    #[error("key {kid:?} of issuer {issuer} is not for {alg}")]
    KeyAlgorithmMismatch {
        issuer: String,
        kid: String,
        alg: String,
    },
    #[error("JWT signature does not verify: {0}")]
    BadSignature(String),
    #[error("JWT claim {claim} is missing or not {expected}")]
    BadClaim {
        claim: &'static str,
        expected: &'static str,
    },
    #[error("JWT expired at {expired_at} (unix seconds)")]
    Expired { expired_at: i64 },
    #[error("JWT not valid before {not_before} (unix seconds)")]
    NotYetValid { not_before: i64 },
    #[error("JWT issued in the future, at {issued_at} (unix seconds)")]
    IssuedInFuture { issued_at: i64 },
    #[error("JWT audience {audience} is not accepted by any rule of issuer {issuer}")]
    AudienceNotAccepted { issuer: String, audience: String },
    #[error("issuer {issuer} cannot be used: {reason}")]
    IssuerUnavailable { issuer: String, reason: String },
    #[error("the OpenShift token is not `sha256~` followed by base64url")]
    MalformedOpenShiftToken,
    #[error("an OpenShift token was presented but auth.openshift is not configured")]
    OpenShiftNotConfigured,
    #[error("OpenShift refused the token (HTTP {status})")]
    OpenShiftRejected { status: u16 },
    #[error("OpenShift user lookup failed: {0}")]
    OpenShiftUnavailable(String),
    #[error("X-Forwarded-Access-Token is not accepted: auth.oauth_proxy.enabled is false")]
    OAuthProxyDisabled,
}

impl AuthFailure {
    /// The `WWW-Authenticate` value for the 401 (RFC 6750): a bare
    /// challenge when no bearer token came, `error="invalid_token"` when
    /// one did. Never a description.
    pub fn www_authenticate(&self) -> String {
        match self {
            AuthFailure::MissingCredentials
            | AuthFailure::NotBearer
            | AuthFailure::OAuthProxyDisabled => format!("Bearer realm=\"{REALM}\""),
            _ => format!("Bearer realm=\"{REALM}\", error=\"invalid_token\""),
        }
    }

    /// True when the failure lies with an issuer or OpenShift that could
    /// not be reached or answered nonsense, not with the token: worth a
    /// warning in the logs.
    pub fn is_upstream_problem(&self) -> bool {
        matches!(
            self,
            AuthFailure::IssuerUnavailable { .. } | AuthFailure::OpenShiftUnavailable(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_never_carries_the_reason() {
        assert_eq!(
            AuthFailure::MissingCredentials.www_authenticate(),
            "Bearer realm=\"workqueue\""
        );
        let expired = AuthFailure::Expired { expired_at: 5 };
        assert_eq!(
            expired.www_authenticate(),
            "Bearer realm=\"workqueue\", error=\"invalid_token\""
        );
        assert!(expired.to_string().contains("expired"));
        assert!(!expired.www_authenticate().contains("expired"));
    }
}
