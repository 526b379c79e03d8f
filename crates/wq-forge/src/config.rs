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
}

/// All configured forges, by the name callers use in submissions.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct ForgesConfig {
    pub instances: BTreeMap<String, ForgeConfig>,
}

/// One forge instance. Secrets are read from the environment variables the
/// file names (`token_env`, `webhook_secret_env`); `token` and
/// `webhook_secret` exist for tests and the demo, which build the config in
/// code.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    /// (`kind`, `token`, `timeout_seconds`).
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
}
