//! The effective configuration as `workqueue config check` prints it: every
//! setting with its default filled in, secrets redacted.
//!
//! Redacted: the password of any URL (its user part, a `password=` query
//! parameter: database URLs, endpoints), and the value of any key that
//! names a secret (`token`, `secret`, `password`, or a key ending in
//! `_token`, `_secret`, `_password`, `_key`), wherever it is. The forges'
//! `token` and `webhook_secret` are never printed (they are read from the
//! environment variables `token_env` and `webhook_secret_env` name, which
//! are shown). The SHA-256 of a static token is not a secret and is shown.

use serde_json::Value;

use super::Config;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// `config` as YAML, secrets redacted; it parses back as a config file
/// (redacted values aside).
pub fn render(config: &Config) -> anyhow::Result<String> {
    let mut tree = serde_json::to_value(config)?;
    redact(&mut tree);
    Ok(serde_saphyr::to_string(&tree)?)
}

/// Redacts the secrets in a config value, in place.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if names_a_secret(key) && !child.is_null() {
                    *child = Value::String(REDACTED.to_owned());
                } else {
                    redact(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) if text.contains("://") || text.contains("password=") => {
            *text = crate::app::redact(text);
        }
        _ => {}
    }
}

/// A key whose value is a secret (not a key naming where one is, such as
/// `token_env`).
fn names_a_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    matches!(key.as_str(), "token" | "secret" | "password")
        || ["_token", "_secret", "_password", "_key"]
            .iter()
            .any(|suffix| key.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_secret_is_redacted() {
        let mut config = Config::default();
        config.database.url = "postgres://wq:hunter2@db:5432/wq?password=query2".to_owned();
        let mut forge = wq_forge::ForgeConfig::literal(
            wq_forge::ForgeKind::Gitlab,
            "https://bot:urlpass3@gitlab.example.com",
            "glpat-token4",
            "hook-secret5",
        );
        forge.token_env = Some("GITLAB_TOKEN".to_owned());
        config.forges.instances.insert("gitlab".to_owned(), forge);
        config.audit.archive.endpoint = Some("http://minio:miniopass6@127.0.0.1:9000".to_owned());
        let printed = render(&config).unwrap();
        for secret in [
            "hunter2",
            "query2",
            "urlpass3",
            "glpat-token4",
            "hook-secret5",
            "miniopass6",
        ] {
            assert!(!printed.contains(secret), "{secret} in:\n{printed}");
        }
        assert!(
            printed.contains("postgres://wq:***@db:5432/wq?password=***"),
            "{printed}"
        );
        assert!(printed.contains("token_env: GITLAB_TOKEN"), "{printed}");
        assert!(
            printed.contains("https://bot:***@gitlab.example.com"),
            "{printed}"
        );

        let mut tree = serde_json::json!({
            "a": {"token": "t1", "client_secret": "t2", "api_key": "t3", "db_password": "t4"},
            "list": [{"secret": "t5"}, "https://u:t6@host/x"],
            "token_env": "NAME",
            "unset_token": null,
        });
        redact(&mut tree);
        assert_eq!(
            tree,
            serde_json::json!({
                "a": {"token": REDACTED, "client_secret": REDACTED, "api_key": REDACTED,
                      "db_password": REDACTED},
                "list": [{"secret": REDACTED}, "https://u:***@host/x"],
                "token_env": "NAME",
                "unset_token": null,
            })
        );
    }

    /// Every default is printed, and the text is a config file again.
    #[test]
    fn the_defaults_are_filled_in_and_the_text_parses_back() {
        let printed = render(&Config::default()).unwrap();
        for setting in [
            "url: sqlite:./workqueue.db",
            "bind: 127.0.0.1:8080",
            "workers: 10",
            "lease_seconds: 60",
            "managed_label: managed-by::workqueue",
            "retention_days: 90",
        ] {
            assert!(printed.contains(setting), "{setting} in:\n{printed}");
        }
        assert_eq!(Config::parse(&printed).unwrap(), Config::default());

        let text = "engine:\n  handled_types: []\n  workers: 3\nmr:\n  review_overrides:\n    \
                    - {forge: github, project: team/docs, require_review: false}\n\
                    ci_retry:\n  matchers:\n    - name: oom\n      messages: [OOMKilled]\n      \
                    retry_limit: 2\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(Config::parse(&render(&config).unwrap()).unwrap(), config);
    }
}
