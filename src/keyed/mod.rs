//! Keyed limiters: one exact bucket per key, created on first use, in
//! memory bounded in keys and in bytes.

mod admission;
mod cap;
mod config;
mod contract;
mod decisions;
mod eviction;
mod fingerprint;
mod generations;
mod hot_keys;
mod key_limit;
mod key_ref;
mod key_table;
mod max_keys;
mod owned_key;
mod per_key;
mod quota_change;
mod shared_entry;
mod stats;
mod tiers;

use std::hash::{BuildHasher, Hash};

use crossbeam_utils::CachePadded;

pub use config::{AtCapacity, KeyedBuilder};
pub use contract::KeyTable;
pub use key_limit::KeyLimit;
pub use key_ref::KeyRef;
pub use max_keys::{MaxKeys, MaxKeysError};
pub use owned_key::OwnedKey;
pub use per_key::PerKey;
pub use stats::KeyTableStats;
pub use tiers::Tiered;
// The loom models run the cap's real code against a stand-in table.
#[cfg(all(not(tollgate_loom), feature = "tokio"))]
pub(crate) use cap::KeyCap;
#[cfg(tollgate_loom)]
pub use cap::{KeyCap, Place};
#[cfg(tollgate_loom)]
pub use generations::{Change, Entry, Generations, Steady};
#[cfg(tollgate_loom)]
pub use shared_entry::SharedEntry;

use crate::clock::{Clock, DefaultClock};
use crate::quota::Quota;
use crate::state::Tat;
use crate::sync::{AtomicU64, RwLock};
use crate::timeline::Timeline;
pub(crate) use config::KeyBound;
pub(crate) use decisions::KeyDecision;
#[cfg(not(tollgate_loom))]
use generations::Generations;
use generations::Marked;
use hot_keys::HotKeys;
pub(crate) use key_ref::Find;
pub(crate) use key_table::{Found, KeyState, Located, Table, in_table};
use shared_entry::Stored;
#[cfg(feature = "tokio")]
pub(crate) use stats::TableCounters;

/// A token bucket per key, with the same exact semantics as
/// [`TokenBucket`](crate::TokenBucket), in a sharded map ([`dashmap`]).
///
/// A key's bucket is created on its first decision, with the quota's initial
/// credit, and is sixteen bytes beside the key (its state, and the quota
/// generation it is kept in: the quota may change at run time,
/// [`set_quota`](Self::set_quota)), or, while a thread caches the key
/// ([`hot_keys_per_thread`](KeyedBuilder::hot_keys_per_thread)), a pointer
/// to those sixteen bytes shared with the caches. Keys are typed values:
/// a composite key is a tuple or a struct, so `("a:b", "c")` and
/// `("a", "b:c")` are different keys.
///
/// Memory is bounded in keys and in bytes: at most
/// [`max_keys`](KeyedBuilder::max_keys) keys are tracked, and a key longer
/// than [`max_exact_key_bytes`](KeyedBuilder::max_exact_key_bytes) (counted
/// as the bytes its `Hash` writes) is kept as a 128-bit keyed fingerprint,
/// 16 bytes whatever its length, instead of a copy. Two long keys share a
/// budget only if their fingerprints collide: about 2^-89 among 2^20 keys
/// ([`docs/semantics.md`](crate::guide::semantics), "Bounded memory"), and a shared budget only ever
/// refuses more. [`sweep`](Self::sweep) drops buckets that have refilled to
/// full and nothing else; at the cap, new keys get the [`AtCapacity`]
/// policy. No eviction ever gives a key credit it would not have had
/// ([`docs/semantics.md`](crate::guide::semantics)), across quota changes
/// too. A dropped key that comes back starts with the
/// quota's initial credit: with
/// [`InitialCredit::Full`](crate::InitialCredit::Full) (the default) a sweep
/// changes no decision; with less, a returning key gets less than it would
/// have had.
///
/// Linearization points: a decision on a key is its bucket's (the
/// compare-and-swap or load), made while holding the key's shard for reading,
/// or for writing when a new key's decision falls to the overflow bucket, or,
/// for a key this thread caches, on its shared bucket without the lock. A
/// sweep drops a bucket while holding its shard for writing, so no decision
/// through the table is in flight, and seals a shared one first (a cached
/// decision that meets the seal is made again in the table;
/// [`docs/proofs.md`](crate::guide::proofs), "Hot keys").
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
///
/// // Per (tenant, account, operation): two per second each.
/// let limiter = KeyedLimiter::builder(Quota::per_second(2)?)
///     .clock(ManualClock::new())
///     .build::<(String, String, &'static str)>();
/// let alice = ("north".to_owned(), "alice".to_owned(), "export");
/// let bob = ("north".to_owned(), "bob".to_owned(), "export");
/// limiter.try_acquire(&alice, 2)?;
/// assert!(limiter.try_acquire(&alice, 1).is_err());
/// assert!(limiter.try_acquire(&bob, 1).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedLimiter<K: Send, C = DefaultClock, S = ahash::RandomState> {
    /// The buckets, the key cap and the counters.
    table: Table<K, Stored, S>,
    /// Each thread's cache of the keys it decides on most (`hot_keys.rs`).
    hot: HotKeys<K>,
    /// The quota every key gets, by generation (see `generations.rs`).
    generations: Generations,
    timeline: Timeline<C>,
    /// The shared bucket of [`AtCapacity::SharedOverflow`] and its floors,
    /// always in the current quota generation: decisions on it hold the
    /// lock for reading, a quota change converts it holding it for writing.
    overflow: CachePadded<RwLock<Overflow>>,
}

/// The shared bucket of [`AtCapacity::SharedOverflow`].
#[derive(Debug)]
struct Overflow {
    tat: Tat,
    /// Under [`AtCapacity::SharedOverflow`], per slot of key hashes, the
    /// overflow state after the latest overflow decision for a key of that
    /// slot (as a `Marked` state: none until one), carried at each quota
    /// change: a key's own bucket starts no fuller than that, and keys that
    /// never spent from the overflow bucket (but for a 1-in-slots hash
    /// collision) do not inherit its debt. Empty under [`AtCapacity::Deny`].
    floors: Box<[AtomicU64]>,
}

/// Slots of [`Overflow::floors`]: 32 KiB per limiter with the overflow
/// policy.
const OVERFLOW_FLOOR_SLOTS: usize = 4096;

impl<K: Send, C, S> std::fmt::Debug for KeyedLimiter<K, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.generations.quota())
            .field("keys", &self.table.len())
            .field("bound", &self.table.bound)
            .field("hot_keys_per_thread", &self.hot.slots())
            .finish_non_exhaustive()
    }
}

impl KeyedLimiter<()> {
    /// Starts configuring a keyed limiter that gives every key `quota`.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).build::<u64>();
    /// assert!(limiter.try_acquire(&7, 1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn builder(quota: Quota) -> KeyedBuilder {
        KeyedBuilder::new(quota)
    }
}

impl<K: Hash + Eq + Send> KeyedLimiter<K> {
    /// A keyed limiter with the default clock, hasher and memory bound.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(Quota::per_second(10)?);
    /// assert!(limiter.try_acquire("alice", 1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        KeyedLimiter::builder(quota).build()
    }
}

impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    pub(crate) fn from_parts(quota: Quota, clock: C, hasher: S, bound: KeyBound) -> Self {
        KeyedLimiter {
            table: Table::new(hasher, bound),
            hot: HotKeys::new(bound.hot_keys),
            timeline: Timeline::new(clock),
            overflow: CachePadded::new(RwLock::new(Overflow {
                tat: Tat::new(quota.gcra().initial_tat(quota.initial_credit())),
                floors: match bound.at_capacity {
                    AtCapacity::Deny => Box::default(),
                    AtCapacity::SharedOverflow => (0..OVERFLOW_FLOOR_SLOTS)
                        .map(|_| AtomicU64::new(Marked::NONE))
                        .collect(),
                },
            })),
            generations: Generations::new(&quota),
        }
    }

    /// Drops every bucket that has refilled to full, and returns how many.
    ///
    /// A bucket created after this sweep starts no fuller than the ones it
    /// dropped, now and after any later quota change; with full initial
    /// credit (the default) it makes the same decisions a kept bucket would
    /// have. Each shard is write-locked while it is swept, so decisions on
    /// keys of that shard wait for it. A sweep and a quota change wait for
    /// each other.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).clock(clock.clone()).build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// assert_eq!(limiter.sweep(), 0); // still in debt: kept
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.sweep(), 1); // full again: dropped
    /// assert!(limiter.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.table
            .cap
            .sweep(|| self.drop_full_at(self.timeline.nanos()))
    }

    /// What the key table holds and has dropped so far. Always kept: its
    /// counters move only when a key is created or dropped, on sweeps and on
    /// overflow admissions, so a decision on an existing key pays nothing
    /// for them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).clock(clock.clone()).build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// clock.advance(Duration::from_secs(1));
    /// limiter.sweep();
    /// let stats = limiter.table_stats();
    /// assert_eq!((stats.created, stats.keys, stats.sweeps, stats.evicted), (1, 0, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table_stats(&self) -> KeyTableStats {
        self.table.stats()
    }

    /// Keys currently tracked, as counted against the cap: for a moment the
    /// count may run above the table (a place is reserved before each
    /// insertion, and a sweep uncounts what it dropped when it ends), never
    /// below it, so the cap is never overshot.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is tracked.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// assert!(KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>().is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// assert_eq!(KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>().max_keys(), 1 << 20);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.table.bound.max_keys
    }

    /// The most bytes a key's `Hash` may write for the key to be kept as a
    /// copy; longer keys are kept as fingerprints (see
    /// [`KeyedBuilder::max_exact_key_bytes`]).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// assert_eq!(KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>().max_exact_key_bytes(), 64);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_exact_key_bytes(&self) -> usize {
        self.table.bound.max_exact_key_bytes
    }

    /// The hasher of the table of exact keys. The default is keyed per
    /// limiter from OS randomness, so how keys spread over shards cannot be
    /// predicted, and hash flooding cannot be prepared, from outside.
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let a = KeyedLimiter::<u64>::new(Quota::per_second(1)?);
    /// let b = KeyedLimiter::<u64>::new(Quota::per_second(1)?);
    /// assert_ne!(a.hasher().hash_one(7u64), b.hasher().hash_one(7u64));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn hasher(&self) -> &S {
        self.table.exact.hasher()
    }

    /// The quota every key gets: the last one given to
    /// [`set_quota`](Self::set_quota), or the one the limiter was built
    /// with.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(7)?).build::<u32>();
    /// assert_eq!(limiter.quota().capacity(), 7);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.generations.quota()
    }

    /// The clock every bucket reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).clock(ManualClock::new()).build::<u32>();
    /// limiter.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        self.timeline.clock()
    }

    /// `key`'s limit: a [`Limit`](crate::Limit), for the layers written
    /// over any limit (a [`Step`](crate::Step) of a hierarchy, a
    /// [`Receipt`](crate::Receipt)).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Limit, Quota, TokenBucket, try_acquire_all};
    ///
    /// let per_account = KeyedLimiter::builder(Quota::per_second(5)?).build::<u64>();
    /// let global = TokenBucket::new(Quota::per_second(1000)?);
    /// try_acquire_all(&[per_account.key(&42).cost(1), global.cost(1)])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key<'a, Q>(&'a self, key: &'a Q) -> KeyLimit<'a, Q, K, C, S>
    where
        Q: KeyRef<K> + ?Sized,
    {
        KeyLimit { limiter: self, key }
    }
}
