//! Static API tokens: issued by this service ([`new_static_token`]), kept in
//! the config file only as SHA-256 hashes and compared in constant time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// Prefix of every token [`new_static_token`] makes, so a leaked one is
/// recognisable (e.g. by secret scanners).
pub const STATIC_TOKEN_PREFIX: &str = "wq_";
/// Random bytes in a new token.
const TOKEN_RANDOM_BYTES: usize = 32;

/// A validated `auth.static_tokens` entry.
#[derive(Clone)]
pub(crate) struct StaticToken {
    pub(crate) name: String,
    pub(crate) identity: String,
    pub(crate) groups: Vec<String>,
    pub(crate) hash: [u8; 32],
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticToken")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

/// SHA-256 of a token.
pub(crate) fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The configured token whose hash equals the presented token's. Every
/// entry is compared, each in constant time.
pub(crate) fn find<'a>(tokens: &'a [StaticToken], presented: &str) -> Option<&'a StaticToken> {
    let hash = token_hash(presented);
    let mut found = None;
    for token in tokens {
        if bool::from(token.hash.ct_eq(&hash)) {
            found = Some(token);
        }
    }
    found
}

/// A new random token for `name` and the `auth.static_tokens` entry that
/// accepts it (the `workqueue token new --name NAME` output). The token is
/// shown once; only its hash goes in the file.
///
/// ```
/// let (token, snippet) = wq_auth::new_static_token("nightly");
/// assert!(token.starts_with("wq_"));
/// assert!(snippet.contains("name: \"nightly\""));
/// ```
pub fn new_static_token(name: &str) -> (String, String) {
    let mut random = [0_u8; TOKEN_RANDOM_BYTES];
    rand::rng().fill_bytes(&mut random);
    let token = format!("{STATIC_TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(random));
    let hash = hex::encode(token_hash(&token));
    // A JSON string is a valid YAML double-quoted scalar.
    let quoted = serde_json::Value::String(name.to_owned()).to_string();
    let snippet = format!(
        "- name: {quoted}\n  sha256: {hash}\n  identity: {quoted}\n  groups: [] # the groups whose rules apply, at least one\n"
    );
    (token, snippet)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, token: &str) -> StaticToken {
        StaticToken {
            name: name.to_owned(),
            identity: name.to_owned(),
            groups: vec!["bots".to_owned()],
            hash: token_hash(token),
        }
    }

    #[test]
    fn the_matching_entry_is_found() {
        let tokens = [entry("a", "wq_one"), entry("b", "wq_two")];
        assert_eq!(
            find(&tokens, "wq_two").map(|token| token.name.as_str()),
            Some("b")
        );
        assert_eq!(
            find(&tokens, "wq_one").map(|token| token.name.as_str()),
            Some("a")
        );
        assert!(find(&tokens, "wq_three").is_none());
        assert!(find(&tokens, "").is_none());
    }

    #[test]
    fn new_tokens_are_random_and_their_snippet_holds_the_hash() {
        let (first, snippet) = new_static_token("nightly \"bot\"");
        let (second, _) = new_static_token("nightly");
        assert_ne!(first, second);
        assert!(first.starts_with(STATIC_TOKEN_PREFIX));
        assert_eq!(first.len(), STATIC_TOKEN_PREFIX.len() + 43);
        assert!(
            snippet.contains(&hex::encode(token_hash(&first))),
            "{snippet}"
        );
        assert!(
            snippet.starts_with("- name: \"nightly \\\"bot\\\"\"\n"),
            "{snippet}"
        );
        assert!(!snippet.contains(&first));
    }

    #[test]
    fn debug_output_leaves_the_hash_out() {
        let rendered = format!("{:?}", entry("a", "wq_one"));
        assert!(!rendered.contains(&hex::encode(token_hash("wq_one"))));
        assert!(rendered.contains("\"a\""));
    }
}
