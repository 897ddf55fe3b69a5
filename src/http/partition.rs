//! Partition keys (`pk`) that tell keys apart without naming them.
//!
//! A rate-limit key is often identifying (an address, an account), and the
//! RateLimit fields travel to the client and to every intermediary on the
//! way. So `pk` is a keyed hash of the key, never the key: without the hash
//! key, nobody can test a guess ("is this 192.0.2.7?") against it, while the
//! same key under the same [`PartitionKeys`] always gets the same `pk`, which
//! is all a client needs to tell its budgets apart.

use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use super::PolicyName;

/// The advertised partition key: the first 8 bytes of a keyed hash.
///
/// ```
/// use tollgate::http::{PartitionKeys, PolicyName};
///
/// let keys = PartitionKeys::random();
/// let pk = keys.key(&PolicyName::new("per-address")?, "192.0.2.7");
/// assert_eq!(pk.as_bytes().len(), 8);
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PartitionKey([u8; 8]);

impl PartitionKey {
    /// The bytes sent as the `pk` Byte Sequence.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName};
    ///
    /// let pk = PartitionKeys::with_secret([7; 16]).key(&PolicyName::new("p")?, &42u64);
    /// assert_ne!(pk.as_bytes(), &[0; 8]);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }
}

/// How a set of policies turns keys into [`PartitionKey`]s: SipHash with a
/// random key drawn once (stable for this process), or with a secret you
/// supply (stable across restarts and nodes that share it).
///
/// The policy name is hashed with the key, so one key under two policies
/// gets two unrelated `pk`s.
///
/// ```
/// use tollgate::http::{PartitionKeys, PolicyName};
///
/// let keys = PartitionKeys::random();
/// let policy = PolicyName::new("per-account")?;
/// assert_eq!(keys.key(&policy, "alice"), keys.key(&policy, "alice"));
/// assert_ne!(keys.key(&policy, "alice"), keys.key(&policy, "bob"));
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
#[derive(Clone, Debug)]
pub struct PartitionKeys {
    keying: Keying,
}

#[derive(Clone, Debug)]
enum Keying {
    /// std's SipHash-1-3 with per-process random keys.
    Random(RandomState),
    /// SipHash-2-4 under a caller's 128-bit secret.
    Secret(u64, u64),
}

impl PartitionKeys {
    /// Hashing under a key drawn from the OS at this call.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName};
    ///
    /// let (a, b) = (PartitionKeys::random(), PartitionKeys::random());
    /// let policy = PolicyName::new("p")?;
    /// assert_ne!(a.key(&policy, &1u32), b.key(&policy, &1u32));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn random() -> PartitionKeys {
        PartitionKeys {
            keying: Keying::Random(RandomState::new()),
        }
    }

    /// Hashing under `secret`, so every node configured with it advertises
    /// the same `pk` for the same key. Keep it as secret as any MAC key:
    /// whoever knows it can test guesses of keys against advertised `pk`s.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName};
    ///
    /// let policy = PolicyName::new("p")?;
    /// let node_a = PartitionKeys::with_secret(*b"0123456789abcdef");
    /// let node_b = PartitionKeys::with_secret(*b"0123456789abcdef");
    /// assert_eq!(node_a.key(&policy, "alice"), node_b.key(&policy, "alice"));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_secret(secret: [u8; 16]) -> PartitionKeys {
        let (k0, k1) = secret.split_at(8);
        let word = |half: &[u8]| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(half);
            u64::from_le_bytes(bytes)
        };
        PartitionKeys {
            keying: Keying::Secret(word(k0), word(k1)),
        }
    }

    /// The partition key of `key` under `policy`.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName};
    ///
    /// let keys = PartitionKeys::random();
    /// let pk = keys.key(&PolicyName::new("per-address")?, "192.0.2.7");
    /// assert!(!pk.as_bytes().windows(4).any(|w| w == b"192."));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn key<K: Hash + ?Sized>(&self, policy: &PolicyName, key: &K) -> PartitionKey {
        let digest = match &self.keying {
            Keying::Random(state) => digest(state.build_hasher(), policy, key),
            // SipHash-2-4 is a PRF under the caller's secret: nodes that
            // share the secret agree on keys, nobody else can invert them.
            Keying::Secret(k0, k1) => digest(
                siphasher::sip::SipHasher24::new_with_keys(*k0, *k1),
                policy,
                key,
            ),
        };
        PartitionKey(digest.to_be_bytes())
    }
}

/// `key` under `policy`, hashed by `hasher` (on the stack: a key is
/// derived for every advertised response).
fn digest<K: Hash + ?Sized>(mut hasher: impl Hasher, policy: &PolicyName, key: &K) -> u64 {
    policy.as_str().hash(&mut hasher);
    key.hash(&mut hasher);
    hasher.finish()
}

impl Default for PartitionKeys {
    fn default() -> PartitionKeys {
        PartitionKeys::random()
    }
}
