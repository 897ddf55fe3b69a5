//! The name a key's shared state has in the store: the key itself when it
//! is short, a SHA-256 fingerprint when it is long.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// Keys up to this many bytes name their shared state as they are.
///
/// ```
/// use tollgate::shared::{STORE_KEY_LITERAL_MAX, store_key};
///
/// let longest = "k".repeat(STORE_KEY_LITERAL_MAX);
/// assert_eq!(store_key(&longest), longest);
/// ```
pub const LITERAL_MAX: usize = 64;

/// What a fingerprint's name starts with. With the 64 hex digits it is 72
/// bytes long, longer than any literal key, so no literal key can take a
/// long key's name.
const FINGERPRINT_PREFIX: &str = "~sha256:";

/// The store's name for `key`, the same on every node (it names the state
/// they share): `key` itself up to [`LITERAL_MAX`] bytes, otherwise
/// `~sha256:` and the hex SHA-256 of its bytes, so what a node keeps and
/// sends per key is bounded whatever its length.
///
/// Two long keys with one fingerprint share one budget: each admits less,
/// never more. Finding such a pair is a SHA-256 collision.
///
/// ```
/// use tollgate::shared::{store_key, STORE_KEY_LITERAL_MAX};
///
/// assert_eq!(store_key("customer-7"), "customer-7");
/// let long = "k".repeat(STORE_KEY_LITERAL_MAX + 1);
/// assert!(store_key(&long).starts_with("~sha256:"));
/// assert_eq!(store_key(&long).len(), 72);
/// ```
pub fn store_key(key: &str) -> Cow<'_, str> {
    if key.len() <= LITERAL_MAX {
        return Cow::Borrowed(key);
    }
    Cow::Owned(format!(
        "{FINGERPRINT_PREFIX}{:x}",
        Sha256::digest(key.as_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_their_own_names_and_long_ones_never_collide_with_them() {
        let exact = "x".repeat(LITERAL_MAX);
        assert_eq!(store_key(&exact), exact.as_str());
        let long = store_key(&"x".repeat(LITERAL_MAX + 1)).into_owned();
        assert!(long.len() > LITERAL_MAX);
        assert_ne!(long, store_key(&"x".repeat(LITERAL_MAX + 2)));
        assert_eq!(long, store_key(&"x".repeat(LITERAL_MAX + 1)));
    }

    /// The name is SHA-256 of the bytes, the same in every process: FIPS
    /// 180-2's test vector of a million "a".
    #[test]
    fn the_fingerprint_is_plain_sha256() {
        assert_eq!(
            store_key(&"a".repeat(1_000_000)),
            "~sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }
}
