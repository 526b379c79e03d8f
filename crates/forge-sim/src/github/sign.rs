//! Webhook signatures: `X-Hub-Signature-256: sha256=<hex hmac-sha256(secret, body)>`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The `X-Hub-Signature-256` header value for `body` signed with `secret`.
pub fn signature_256(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC-SHA256 accepts any key length"),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Verifies an `X-Hub-Signature-256` header value in constant time.
pub fn verify_signature_256(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

/// A 40-hex object id derived from content (SHA-256 truncated to SHA-1 length).
pub fn object_id(kind: &str, content: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update(b" ");
    h.update(content.len().to_string().as_bytes());
    h.update([0u8]);
    h.update(content);
    let mut s = hex::encode(h.finalize());
    s.truncate(40);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_githubs_documented_example() {
        let sig = signature_256(b"It's a Secret to Everybody", b"Hello, World!");
        assert_eq!(
            sig,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        assert!(verify_signature_256(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            &sig
        ));
        assert!(!verify_signature_256(b"other", b"Hello, World!", &sig));
        assert!(!verify_signature_256(b"x", b"y", "sha1=00"));
    }

    #[test]
    fn object_ids_are_40_hex() {
        let id = object_id("blob", b"hello");
        assert_eq!(id.len(), 40);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(id, object_id("tree", b"hello"));
    }
}
