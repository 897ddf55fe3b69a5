//! Long keys kept as fixed-size keyed fingerprints, so that a key's length,
//! which a client chooses, does not decide what it costs the table.

use std::hash::{BuildHasher, Hash, Hasher};

use siphasher::sip128::{Hasher128, SipHasher13};

/// The bytes a key's `Hash` writes to a hasher: its content, which is what a
/// client controls, plus the lengths and terminators std's impls add.
pub(crate) fn hashed_len<Q: Hash + ?Sized>(key: &Q) -> usize {
    let mut count = ByteCount(0);
    key.hash(&mut count);
    count.0
}

/// A hasher that only counts. For fixed-size keys the count is a constant
/// the compiler folds away, so short keys pay nothing for being measured.
struct ByteCount(usize);

impl Hasher for ByteCount {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Saturating: a count that wrapped would pass a huge key as short.
        self.0 = self.0.saturating_add(bytes.len());
    }

    fn finish(&self) -> u64 {
        self.0 as u64
    }
}

/// A key's 128-bit keyed hash, stored in place of the key. Two words rather
/// than a `u128`, whose 16-byte alignment would pad each table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint([u64; 2]);

impl Hash for Fingerprint {
    /// One word, already uniformly distributed: with [`PassThrough`] it is
    /// the table hash, so a lookup hashes the key once, not twice.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
    }
}

/// Fingerprints keys with SipHash-1-3 (128-bit output) under a key of its
/// own, drawn once per limiter. SipHash is a keyed pseudorandom function:
/// without the key, nobody can find two keys with the same fingerprint
/// faster than by luck, and luck is 2^-128 per pair ([`docs/semantics.md`](crate::guide::semantics)
/// gives the birthday bounds).
#[derive(Clone)]
pub(crate) struct Fingerprinter {
    key: (u64, u64),
}

impl Fingerprinter {
    /// A fingerprinter with a fresh secret key. std's `RandomState` is seeded
    /// from the OS and differs per instance; two of its outputs make 128
    /// secret bits without a dependency on an RNG.
    pub(crate) fn new() -> Self {
        let seed = std::hash::RandomState::new();
        Fingerprinter {
            key: (seed.hash_one(0u8), seed.hash_one(1u8)),
        }
    }

    /// Out of line and marked cold, so that the inlined SipHash rounds stay
    /// out of every decision's code: short keys' decisions lay out as if
    /// there were no fingerprints. A long key pays one call beside a SipHash
    /// pass over more than 64 bytes.
    #[cold]
    #[inline(never)]
    pub(crate) fn of<Q: Hash + ?Sized>(&self, key: &Q) -> Fingerprint {
        let mut hasher = SipHasher13::new_with_keys(self.key.0, self.key.1);
        key.hash(&mut hasher);
        let (first, second) = hasher.finish128().as_u64();
        Fingerprint([first, second])
    }
}

// By hand: the secret key must not end up in logs.
impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fingerprinter").finish_non_exhaustive()
    }
}

/// The hasher of the fingerprint table: a fingerprint's word is already a
/// keyed hash, so hashing it again would only cost time.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PassThrough;

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;

    #[inline]
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

/// The [`PassThrough`] hasher: the last word written is the hash.
pub(crate) struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.0 = word;
    }

    /// Only [`Fingerprint`]s are hashed here, and they write one `u64`; any
    /// other input is folded in rather than dropped, so that it would still
    /// spread.
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_len_counts_what_a_key_writes() {
        assert_eq!(hashed_len(&7u64), 8);
        // A string writes its bytes and a terminator.
        assert_eq!(hashed_len("abc"), 4);
        assert_eq!(hashed_len(&("ab".to_owned(), 1u32)), 3 + 4);
        assert_eq!(hashed_len(&"x".repeat(65_536)), 65_537);
    }

    #[test]
    fn fingerprints_are_keyed_per_fingerprinter() {
        let (a, b) = (Fingerprinter::new(), Fingerprinter::new());
        for key in ["", "k", "a long key, long enough to take several blocks"] {
            assert_eq!(a.of(key), a.of(&key.to_owned()));
            assert_ne!(a.of(key), b.of(key));
        }
        assert_ne!(a.of("k1"), a.of("k2"));
    }

    #[test]
    fn the_pass_through_hash_of_a_fingerprint_is_its_first_word() {
        let print = Fingerprint([0xDEAD_BEEF, 7]);
        assert_eq!(PassThrough.hash_one(print), 0xDEAD_BEEF);
    }
}
