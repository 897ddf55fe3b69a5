//! How a keyed limiter bounds its memory, and its builder.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use crate::clock::{Clock, DefaultClock};
use crate::keyed::{KeyedLimiter, MaxKeys};
use crate::quota::Quota;

/// What a keyed limiter does with a new key once it tracks
/// [`max_keys`](KeyedBuilder::max_keys) keys and no bucket can be dropped
/// losslessly.
///
/// Dropping a bucket that is not full would hand its key fresh credit, so
/// neither policy does that. Keys already tracked are never affected.
///
/// ```
/// use tollgate::MaxKeys;
/// use tollgate::{AcquireError, AtCapacity, KeyedLimiter, ManualClock, Quota};
///
/// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
///     .clock(ManualClock::new())
///     .max_keys(MaxKeys::new(1)?)
///     .at_capacity(AtCapacity::Deny)
///     .build();
/// limiter.try_acquire("first", 1)?;
/// assert_eq!(limiter.try_acquire("second", 1), Err(AcquireError::TooManyKeys { max_keys: 1 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AtCapacity {
    /// Refuse new keys with [`AcquireError::TooManyKeys`](crate::AcquireError::TooManyKeys)
    /// until a sweep frees room. The default: an attacker rotating keys
    /// cannot take any budget, at the price of new legitimate clients being
    /// refused while the table is full.
    #[default]
    Deny,
    /// Serve every new key from one shared overflow bucket with the same
    /// quota: all keys that arrive while the table is full share one key's
    /// budget. New clients keep a trickle of service while a flood of new
    /// keys is throttled as one. A key that later gets its own bucket starts
    /// no fuller than the overflow bucket was after the key's own last
    /// decision in it, so moving out of overflow mints nothing, and keys
    /// that never spent from it do not inherit its debt.
    SharedOverflow,
}

/// The memory bound of a keyed limiter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyBound {
    pub(crate) max_keys: usize,
    pub(crate) at_capacity: AtCapacity,
    /// The least time between two automatic sweeps; `None` disables them.
    pub(crate) sweep_interval: Option<Duration>,
    /// The most bytes a key's `Hash` may write for the key to be kept as
    /// itself; longer keys are kept as fingerprints.
    pub(crate) max_exact_key_bytes: usize,
    /// Slots of each thread's cache of hot keys (keyed buckets only).
    pub(crate) hot_keys: usize,
}

/// The default key cap: about a million keys, some 32 MiB of table for
/// 16-byte keys ([`docs/benchmarks.md`](crate::guide::benchmarks) has the measured bytes per key).
const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// The default least time between automatic sweeps at the cap.
const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The default length past which keys are kept as fingerprints: addresses,
/// ids, tenant and account names and most routes are shorter and stay
/// exact (and as fast as ever to look up); a copied key then holds at most
/// about 64 bytes of heap, so the default cap bounds the table to some
/// 180 MiB whatever clients send ([`docs/benchmarks.md`](crate::guide::benchmarks)).
const DEFAULT_MAX_EXACT_KEY_BYTES: usize = 64;

/// The default slots of each thread's cache of hot keys: a few KiB per
/// thread, and enough for the head of a skewed mix (measured in
/// [`docs/benchmarks.md`](crate::guide::benchmarks), "Hot keys").
const DEFAULT_HOT_KEYS: usize = 64;

/// Configures a [`KeyedLimiter`]: clock, hasher and memory bound.
///
/// ```
/// use tollgate::MaxKeys;
/// use std::time::Duration;
/// use tollgate::{AtCapacity, KeyedLimiter, Quota};
///
/// let per_address = KeyedLimiter::builder(Quota::per_second(50)?)
///     .max_keys(MaxKeys::new(100_000)?)
///     .at_capacity(AtCapacity::SharedOverflow)
///     .sweep_interval(Some(Duration::from_secs(5)))
///     .build::<std::net::IpAddr>();
/// assert_eq!(per_address.max_keys(), 100_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct KeyedBuilder<C = DefaultClock, S = ahash::RandomState, Q = Quota> {
    pub(crate) quota: Q,
    pub(crate) clock: C,
    pub(crate) hasher: S,
    pub(crate) bound: KeyBound,
}

impl<Q> KeyedBuilder<DefaultClock, ahash::RandomState, Q> {
    pub(crate) fn new(quota: Q) -> Self {
        KeyedBuilder {
            quota,
            clock: DefaultClock::new(),
            hasher: ahash::RandomState::new(),
            bound: KeyBound {
                max_keys: DEFAULT_MAX_KEYS,
                at_capacity: AtCapacity::default(),
                sweep_interval: Some(DEFAULT_SWEEP_INTERVAL),
                max_exact_key_bytes: DEFAULT_MAX_EXACT_KEY_BYTES,
                hot_keys: DEFAULT_HOT_KEYS,
            },
        }
    }
}

impl<C: Clock, S: BuildHasher + Clone, Q> KeyedBuilder<C, S, Q> {
    /// The clock every key's bucket reads (default: [`DefaultClock`]).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u64>();
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<C2, S, Q> {
        KeyedBuilder {
            quota: self.quota,
            clock,
            hasher: self.hasher,
            bound: self.bound,
        }
    }

    /// The hasher of the key table (default: `ahash::RandomState`, keyed
    /// from OS randomness). Keys are usually chosen by clients, so a hasher
    /// with a fixed or guessable key invites hash flooding; pass
    /// `std::hash::RandomState` for SipHash, a keyed PRF, at some cost.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .hasher(std::hash::RandomState::new())
    ///     .build::<String>();
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn hasher<S2: BuildHasher + Clone>(self, hasher: S2) -> KeyedBuilder<C, S2, Q> {
        KeyedBuilder {
            quota: self.quota,
            clock: self.clock,
            hasher,
            bound: self.bound,
        }
    }

    /// The most keys tracked at once (default 2^20).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, MaxKeys, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .max_keys(MaxKeys::new(10)?)
    ///     .build::<u32>();
    /// assert_eq!(limiter.max_keys(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(mut self, max_keys: MaxKeys) -> Self {
        self.bound.max_keys = max_keys.get();
        self
    }

    /// What to do with new keys at the cap (default [`AtCapacity::Deny`]).
    ///
    /// ```
    /// use tollgate::{AtCapacity, KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .at_capacity(AtCapacity::SharedOverflow)
    ///     .build::<u32>();
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn at_capacity(mut self, policy: AtCapacity) -> Self {
        self.bound.at_capacity = policy;
        self
    }

    /// The least time between two automatic sweeps (default 1 s), or `None`
    /// for none.
    ///
    /// A new key that finds the table full first waits for a sweep in
    /// progress, then sweeps the table for full buckets itself, on its own
    /// thread (there is no background timer), unless a sweep ran within this
    /// interval. A sweep visits every key, a shard at a time;
    /// with `None`, call [`KeyedLimiter::sweep`] from a task of your own.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .sweep_interval(None)
    ///     .build::<u32>();
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.bound.sweep_interval = interval;
        self
    }

    /// The most bytes a key's `Hash` may write for the key to be kept as a
    /// copy (default 64); a longer key is kept as a 128-bit fingerprint
    /// under a secret key of the limiter's, 16 bytes whatever its length.
    ///
    /// Clients choose how long keys are (a request path may be 64 KiB), so
    /// without this a key cap would bound the table's keys but not its
    /// bytes. Two distinct keys share a budget only if their fingerprints
    /// collide: about 2^-89 among 2^20 keys ([`docs/semantics.md`](crate::guide::semantics)).
    /// Exact keys are looked up faster (one fast hash, no SipHash pass);
    /// raise the bound for long keys that are not clients' to choose, lower
    /// it (0 keeps every key as a fingerprint) to bound bytes more tightly.
    /// What a key writes is its content plus std's length prefixes and
    /// terminators: a string of `n` bytes writes `n + 1`.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .max_exact_key_bytes(256)
    ///     .build::<String>();
    /// assert_eq!(limiter.max_exact_key_bytes(), 256);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_exact_key_bytes(mut self, bytes: usize) -> Self {
        self.bound.max_exact_key_bytes = bytes;
        self
    }
}

impl<C: Clock, S: BuildHasher + Clone> KeyedBuilder<C, S, Quota> {
    /// How many keys each thread may cache as hot (default 64, rounded up
    /// to a power of two, at most 65 536; zero for none). A decision on a key its thread
    /// has cached takes no shard lock: it costs what a
    /// [`TokenBucket`](crate::TokenBucket)'s does, plus the key's hash and
    /// comparison. A key is cached after two decisions in a row that miss
    /// its slot in the thread's cache, once the key holding the slot, if
    /// any, has lost the standing its hits earned it, so a walk over many
    /// keys leaves the hot ones cached. Where decisions mostly miss (many
    /// keys, none hot) the lookup costs a few nanoseconds a decision
    /// ([`docs/benchmarks.md`](crate::guide::benchmarks), "Hot keys").
    ///
    /// Each cached key costs its thread a copy of the key and, while any
    /// thread caches it, its bucket moves from the table to the heap
    /// (shared by the table and the caches): about `slots × (72 bytes + a
    /// key)` per thread that decides, for as long as the limiter lives
    /// ([`docs/semantics.md`](crate::guide::semantics), "Bounded memory").
    /// Keys kept as fingerprints (longer than
    /// [`max_exact_key_bytes`](Self::max_exact_key_bytes)) are never
    /// cached. Caching changes no decision: a cached bucket is the key's
    /// bucket in the table.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(100)?)
    ///     .hot_keys_per_thread(0)
    ///     .build::<u64>();
    /// assert!(limiter.try_acquire(&7, 1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn hot_keys_per_thread(mut self, slots: usize) -> Self {
        self.bound.hot_keys = slots;
        self
    }

    /// The limiter, for keys of type `K`.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).build::<(u32, String)>();
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn build<K: Hash + Eq + Send>(self) -> KeyedLimiter<K, C, S> {
        KeyedLimiter::from_parts(self.quota, self.clock, self.hasher, self.bound)
    }
}
