//! `forges:` in the service configuration: named forge instances.
//!
//! ```yaml
//! forges:
//!   gitlab:
//!     kind: gitlab
//!     url: https://gitlab.example.com
//!     token_env: GITLAB_TOKEN
//!     webhook_secret_env: GITLAB_WEBHOOK_SECRET
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// Which API a forge instance speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    Gitlab,
    Github,
}

impl ForgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gitlab => "gitlab",
            Self::Github => "github",
        }
    }

    /// The (lower-case) header that names a webhook delivery's event:
    /// present on every delivery of this kind.
    pub fn event_header(self) -> &'static str {
        match self {
            Self::Gitlab => crate::gitlab::webhook::EVENT_HEADER,
            Self::Github => crate::github::webhook::EVENT_HEADER,
        }
    }
}

/// All configured forges, by the name callers use in submissions.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct ForgesConfig {
    pub instances: BTreeMap<String, ForgeConfig>,
}

/// One forge instance. Secrets are read from the environment variables the
/// file names (`token_env`, `webhook_secret_env`); `token` and
/// `webhook_secret` exist for tests and the demo, which build the config in
/// code. `Debug` shows neither secret (`Some("<redacted>")`).
#[derive(Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForgeConfig {
    pub kind: ForgeKind,
    /// Base URL: `https://gitlab.example.com` (the client appends
    /// `/api/v4`); for GitHub the REST base, `https://api.github.com` or
    /// GitHub Enterprise's `https://host/api/v3` (GraphQL is derived).
    pub url: String,
    #[serde(default)]
    pub token_env: Option<String>,
    #[serde(default, skip)]
    pub token: Option<String>,
    #[serde(default)]
    pub webhook_secret_env: Option<String>,
    #[serde(default, skip)]
    pub webhook_secret: Option<String>,
    /// Per-request timeout in seconds (default 30).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Allows a plain `http://` URL on a host that is not loopback
    /// (default false): the token would cross the network unencrypted.
    /// Loopback (`127.0.0.0/8`, `::1`, `localhost`) may always use http.
    #[serde(default)]
    pub insecure_http: bool,
}

/// What `Debug` shows instead of a secret.
const REDACTED: &str = "<redacted>";

impl fmt::Debug for ForgeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForgeConfig")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("token_env", &self.token_env)
            .field("token", &self.token.as_ref().map(|_| REDACTED))
            .field("webhook_secret_env", &self.webhook_secret_env)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| REDACTED),
            )
            .field("timeout_seconds", &self.timeout_seconds)
            .field("insecure_http", &self.insecure_http)
            .finish()
    }
}

fn default_timeout() -> u64 {
    30
}

/// What a client takes from its [`ForgeConfig`], checked.
pub(crate) struct ClientSettings<'a> {
    pub token: &'a str,
    pub timeout: std::time::Duration,
    pub webhook_secret: Option<String>,
}

impl ForgeConfig {
    /// The settings a client of `kind` needs; errors name the field
    /// (`kind`, `url`, `token`, `timeout_seconds`).
    pub(crate) fn client_settings(
        &self,
        kind: ForgeKind,
    ) -> crate::ForgeResult<ClientSettings<'_>> {
        use crate::ForgeError;
        if self.kind != kind {
            return Err(ForgeError::invalid(format!(
                "kind: {} is not {}",
                self.kind.as_str(),
                kind.as_str()
            )));
        }
        let url = crate::http_util::parse_base_url(&self.url)?;
        crate::http_util::check_transport(&url, self.insecure_http)?;
        let token = self
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ForgeError::invalid(
                    "token: required (token_env names the environment variable holding it)",
                )
            })?;
        if self.timeout_seconds == 0 {
            return Err(ForgeError::invalid("timeout_seconds: must be at least 1"));
        }
        Ok(ClientSettings {
            token,
            timeout: std::time::Duration::from_secs(self.timeout_seconds),
            webhook_secret: self.webhook_secret.clone().filter(|s| !s.is_empty()),
        })
    }

    /// A config with literal secrets (tests, demo).
    pub fn literal(kind: ForgeKind, url: &str, token: &str, webhook_secret: &str) -> Self {
        Self {
            kind,
            url: url.to_owned(),
            token_env: None,
            token: Some(token.to_owned()),
            webhook_secret_env: None,
            webhook_secret: Some(webhook_secret.to_owned()),
            timeout_seconds: default_timeout(),
            insecure_http: false,
        }
    }

    /// Reads the secrets named by `*_env` from the environment. Errors name
    /// the field.
    pub fn resolve_secrets(&mut self, name: &str) -> Result<(), String> {
        if self.token.is_none() {
            let var = self
                .token_env
                .as_deref()
                .ok_or_else(|| format!("forges.{name}.token_env: required"))?;
            self.token = Some(std::env::var(var).map_err(|_| {
                format!("forges.{name}.token_env: environment variable {var} is not set")
            })?);
        }
        if self.webhook_secret.is_none()
            && let Some(var) = self.webhook_secret_env.as_deref()
        {
            self.webhook_secret = Some(std::env::var(var).map_err(|_| {
                format!("forges.{name}.webhook_secret_env: environment variable {var} is not set")
            })?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(config: &ForgeConfig, kind: ForgeKind) -> String {
        match config.client_settings(kind) {
            Ok(_) => panic!("{config:?} accepted for {kind:?}"),
            Err(error) => error.message,
        }
    }

    #[test]
    fn client_settings_are_checked_and_errors_name_the_field() {
        let mut config = ForgeConfig::literal(ForgeKind::Gitlab, "https://g.example", " t ", "");
        let settings = config.client_settings(ForgeKind::Gitlab).expect("valid");
        assert_eq!(settings.token, "t", "the token is trimmed");
        assert_eq!(settings.timeout, std::time::Duration::from_secs(30));
        assert_eq!(settings.webhook_secret, None, "an empty secret is none");

        assert_eq!(
            message(&config, ForgeKind::Github),
            "kind: gitlab is not github"
        );
        for token in [None, Some(" ")] {
            config.token = token.map(str::to_owned);
            assert!(message(&config, ForgeKind::Gitlab).starts_with("token: required"));
        }
        config.token = Some("t".into());
        config.timeout_seconds = 0;
        assert!(message(&config, ForgeKind::Gitlab).starts_with("timeout_seconds: "));
    }

    #[test]
    fn debug_redacts_the_token_and_the_webhook_secret() {
        let mut config = ForgeConfig::literal(
            ForgeKind::Gitlab,
            "https://g.example",
            "glpat-SECRET-TOKEN",
            "hook-SECRET",
        );
        config.token_env = Some("GITLAB_TOKEN".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains(r#"token: Some("<redacted>")"#), "{shown}");
        assert!(
            shown.contains(r#"webhook_secret: Some("<redacted>")"#),
            "{shown}"
        );
        assert!(
            shown.contains(r#"token_env: Some("GITLAB_TOKEN")"#),
            "{shown}"
        );
        assert!(shown.contains("https://g.example"), "{shown}");
        config.webhook_secret = None;
        assert!(format!("{config:?}").contains("webhook_secret: None"));
        // Pretty printing goes through the same impl.
        assert!(!format!("{config:#?}").contains("SECRET"));
    }

    #[test]
    fn plain_http_off_loopback_needs_insecure_http() {
        let mut config =
            ForgeConfig::literal(ForgeKind::Github, "http://github.example.com", "t", "");
        let error = message(&config, ForgeKind::Github);
        assert!(error.starts_with("url: "), "{error}");
        assert!(error.contains("https"), "{error}");
        config.insecure_http = true;
        config
            .client_settings(ForgeKind::Github)
            .expect("insecure_http allows http");
        for loopback in ["http://127.0.0.1:9", "http://localhost:9", "http://[::1]:9"] {
            let config = ForgeConfig::literal(ForgeKind::Gitlab, loopback, "t", "");
            config
                .client_settings(ForgeKind::Gitlab)
                .expect("loopback may use http");
        }
    }

    #[test]
    fn insecure_http_is_read_from_the_file_and_defaults_to_false() {
        let config: ForgeConfig =
            serde_json::from_str(r#"{"kind": "gitlab", "url": "http://g.internal"}"#)
                .expect("parses");
        assert!(!config.insecure_http);
        let config: ForgeConfig = serde_json::from_str(
            r#"{"kind": "gitlab", "url": "http://g.internal", "insecure_http": true}"#,
        )
        .expect("parses");
        assert!(config.insecure_http);
    }
}
