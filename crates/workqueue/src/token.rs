//! `workqueue token new --name NAME`: a new static API token, shown once,
//! and the `auth.static_tokens` entry that accepts it (only its SHA-256 goes
//! in the config file).

/// What `token new` prints: the token, then the YAML to paste.
pub fn new_token_text(name: &str) -> anyhow::Result<String> {
    if name.trim().is_empty() {
        anyhow::bail!("--name: must not be empty");
    }
    let (token, entry) = wq_auth::new_static_token(name);
    Ok(format!(
        "token: {token}\n\
         (shown once: its holder sends it as `Authorization: Bearer <token>`, or sets\n\
         WORKQUEUE_TOKEN for `workqueue items`)\n\
         \n\
         # Add this entry under auth.static_tokens in the config file, and name the\n\
         # groups whose rules (under auth.rules) grant the token its permissions:\n\
         {entry}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_shows_the_token_once_and_its_entry() {
        let text = new_token_text("nightly").unwrap();
        let token = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("token: "))
            .unwrap();
        assert!(token.starts_with(wq_auth::STATIC_TOKEN_PREFIX), "{text}");
        assert_eq!(text.matches(token).count(), 1, "{text}");
        assert!(text.contains("- name: \"nightly\"\n  sha256: "), "{text}");
        assert!(new_token_text(" ").is_err());
    }
}
