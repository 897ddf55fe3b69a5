//! Keyed limiters: one exact bucket per key, created on first use, in
//! memory bounded in keys and in bytes.

mod cap;
mod config;
mod fingerprint;
mod generations;
mod key_limit;
mod key_ref;
mod key_table;
mod per_key;
mod stats;
mod table;
mod tiers;

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use crossbeam_utils::CachePadded;

pub use config::{AtCapacity, KeyedBuilder};
pub use key_limit::KeyLimit;
pub use key_ref::KeyRef;
pub use per_key::PerKey;
pub use stats::KeyTableStats;
pub use tiers::Tiered;
// The loom models run the cap's real code against a stand-in table.
#[cfg(tollgate_loom)]
pub use cap::{KeyCap, Place};
#[cfg(tollgate_loom)]
pub use generations::{Change, Entry, Generations, Steady};

use crate::gcra::Gcra;
use crate::limit::Taken;
use crate::state::{Admission, Tat};
use crate::sync::{AtomicU64, Ordering, RwLock, read, write};
use crate::timeline::{Reading, Timeline};
use crate::{AcquireError, Clock, DefaultClock, Quota};
use config::KeyBound;
#[cfg(not(tollgate_loom))]
use generations::{Change, Entry, Generations};
use generations::{Held, Marked};
pub(crate) use key_ref::Find;
pub(crate) use key_table::{Found, KeyState, KeyTable, Located, in_table};
pub(crate) use stats::TableCounters;

/// A token bucket per key, with the same exact semantics as
/// [`TokenBucket`](crate::TokenBucket), in a sharded map ([`dashmap`]).
///
/// A key's bucket is created on its first decision, with the quota's initial
/// credit, and is sixteen bytes beside the key (its state, and the quota
/// generation it is kept in: the quota may change at run time,
/// [`set_quota`](Self::set_quota)). Keys are typed values:
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
/// or for writing when a new key's decision falls to the overflow bucket; a
/// sweep drops a bucket while holding its shard for writing, so no decision
/// on that bucket is in flight.
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
pub struct KeyedLimiter<K, C = DefaultClock, S = ahash::RandomState> {
    /// The buckets, the key cap and the counters.
    table: KeyTable<K, Entry, S>,
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

/// One decision as it was made: the admission, the quota it was decided
/// under, the clock reading, and whether the overflow bucket served it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decided {
    pub(crate) admission: Admission,
    pub(crate) gcra: Gcra,
    pub(crate) nanos: u64,
    /// The reading it was decided at: a reading before the limiter's
    /// creation (decided at the creation, `nanos` zero) reports its waits
    /// from the reading.
    reading: Reading,
    overflow: bool,
}

impl Decided {
    fn new(admission: Admission, gcra: Gcra, reading: Reading, overflow: bool) -> Self {
        Decided {
            admission,
            gcra,
            nanos: reading.nanos(),
            reading,
            overflow,
        }
    }
}

impl<K, C, S> std::fmt::Debug for KeyedLimiter<K, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.generations.quota())
            .field("keys", &self.table.len())
            .field("bound", &self.table.bound)
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

impl<K: Hash + Eq> KeyedLimiter<K> {
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

impl<K: Hash + Eq, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    pub(crate) fn from_parts(quota: Quota, clock: C, hasher: S, bound: KeyBound) -> Self {
        KeyedLimiter {
            table: KeyTable::new(hasher, bound),
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

    /// Takes `cost` tokens from `key`'s bucket now, or refuses without
    /// spending anything; see [`Limit::try_acquire`](crate::Limit::try_acquire).
    /// A new key at the cap gets the [`AtCapacity`] policy.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// assert!(limiter.try_acquire(&1, 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.acquire_within(key, cost, Duration::ZERO).map(drop)
    }

    /// Takes `cost` tokens from `key`'s bucket now and returns how long to
    /// wait before using them, if that wait is at most `max_wait`; see
    /// [`Limit::reserve`](crate::Limit::reserve).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(2)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 2)?;
    /// assert_eq!(limiter.reserve(&1, 1, Duration::from_secs(1))?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let decided = self.acquire_within(key, cost, max_wait)?;
        Ok(decided.wait())
    }

    /// Takes `cost` tokens from `key`'s bucket and waits until they may be
    /// used; see [`Limit::acquire`](crate::Limit::acquire)
    /// (first come, first served; dropping the future gives the
    /// reservation back).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = KeyedLimiter::builder(Quota::per_second(4)?).clock(ManualClock::new()).build::<u32>();
    /// limiter.acquire(&1, 4, Duration::ZERO).await?;
    /// let started = tokio::time::Instant::now();
    /// limiter.acquire(&1, 1, Duration::from_secs(1)).await?;
    /// assert_eq!(started.elapsed(), Duration::from_millis(250));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        crate::waiting::acquire(&self.key(key), cost, max_wait).await
    }

    /// The one admission path: `cost` tokens with up to `max_wait` of
    /// delay.
    #[inline]
    fn acquire_within<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decided, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.decide(key, cost, |held, now, reading| {
            let slack = match reading.behind() {
                None => held.gcra.ticks_of(max_wait),
                Some(behind) => {
                    std::hint::cold_path();
                    held.gcra.ticks_of(behind.budget(max_wait))
                }
            };
            held.admit(now, cost, slack)
                .map_err(|refused| match reading.behind() {
                    None => refused,
                    Some(behind) => behind.refusal(refused, max_wait),
                })
        })
    }

    /// Grants as many of `want` tokens to `key` as its bucket holds now:
    /// the grant and its decision (the lease's clock reading, the quota it
    /// was granted under), or the wait for one token.
    pub(crate) fn grant_up_to<Q>(&self, key: &Q, want: u64) -> Result<(u64, Decided), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let mut granted = 0;
        let decided = self.decide(key, 1, |held, now, reading| {
            let (n, admission) = held
                .tat
                .admit_up_to(&held.gcra, now, want, held.generation)
                .map_err(|wait| {
                    let wait = held.gcra.duration(wait);
                    AcquireError::Insufficient {
                        retry_after: reading.behind().map_or(wait, |behind| behind.wait(wait)),
                    }
                })?;
            granted = n;
            Ok(admission)
        })?;
        Ok((granted, decided))
    }

    /// Makes one admission on `key`'s bucket (created if new and `cost` is
    /// within its quota's capacity, or the overflow bucket at the cap) with
    /// `admit(bucket, now)`.
    #[inline]
    fn decide<Q>(
        &self,
        key: &Q,
        cost: u64,
        admit: impl FnOnce(Held<'_>, u64, Reading) -> Result<Admission, AcquireError>,
    ) -> Result<Decided, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        in_table!(self.table, key, |table| self
            .decide_in(table, key, cost, admit))
    }

    /// Gives back `tokens` of what `taken` took from `key`'s bucket (or the
    /// overflow bucket) by the one rule that never mints credit
    /// (`Tat::undo`): nothing if the quota changed since. A key no longer
    /// tracked was full when dropped: nothing is owed. Drops the key's
    /// bucket if the undo left it full.
    pub(crate) fn undo<Q: Find<K> + ?Sized>(&self, key: &Q, taken: &Taken, tokens: u64) {
        let Some(admission) = taken.admission() else {
            return;
        };
        if taken.overflow {
            let overflow = read(&self.overflow);
            let held = self.overflow_held(&overflow);
            let ticks = held.gcra.returned_ticks(admission.tokens, tokens);
            held.tat
                .undo(&held.gcra, admission, ticks, held.generation, || {
                    held.gcra.ticks(self.timeline.nanos())
                });
            return;
        }
        in_table!(self.table, key, |table| {
            self.undo_in(table, key, admission, tokens);
        });
    }

    /// Gives back `unused` of a store lease of `granted` tokens admitted at
    /// the clock reading `at_nanos` to `key`'s bucket, by the inexact half
    /// of the same rule (a lease does not record the state its admission
    /// wrote); nothing if it may have been granted under an earlier quota.
    pub(crate) fn undo_lease(&self, key: &str, granted: u64, at_nanos: u64, unused: u64)
    where
        K: Borrow<str>,
    {
        in_table!(
            self.table,
            key,
            |table| if let Some(entry) = table.get(key) {
                // Read under the shard lock, after any conversion of the bucket.
                if !self.generations.lease_is_current(at_nanos) {
                    return;
                }
                let Held { tat, gcra, .. } = entry.held(&self.generations);
                let granted = granted.min(gcra.capacity());
                let (cost, returned) = (
                    gcra.returned_ticks(granted, granted),
                    gcra.returned_ticks(granted, unused.min(granted)),
                );
                tat.undo_inexact(&gcra, gcra.ticks(at_nanos), cost, returned, || {
                    gcra.ticks(self.timeline.nanos())
                });
            }
        );
    }

    /// Returns `cost` tokens to `key`'s bucket unconditionally: a trusted
    /// operation, like [`TokenBucket::refund`](crate::TokenBucket::refund),
    /// for a caller who knows what it holds. To give back an admission,
    /// take it as a [`Receipt`](crate::Receipt) of
    /// [`key`](Self::key) and undo it, the rule that never mints credit.
    /// A key no longer tracked was full when it was dropped, so there is
    /// nothing to return to and this is a no-op (as it is for tokens taken
    /// from the overflow bucket).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(3)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 3)?;
    /// limiter.refund(&1, 2);
    /// assert_eq!(limiter.available(&1), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, cost: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        in_table!(
            self.table,
            key,
            |table| if let Some(entry) = table.get(key) {
                let held = entry.held(&self.generations);
                held.tat.refund(&held.gcra, cost);
            }
        );
    }

    /// Whole tokens available to `key` now. A key not tracked reports the
    /// credit a new bucket would start with; asking creates nothing.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(5)?).build::<u32>();
    /// assert_eq!(limiter.available(&9), 5);
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.available_of(key)
    }

    /// [`Self::available`] for any lookup form, the key's limit's included.
    pub(crate) fn available_of<Q: Find<K> + ?Sized>(&self, key: &Q) -> u64 {
        in_table!(self.table, key, |table| match key.find_in(table) {
            Some(entry) => {
                let held = entry.held(&self.generations);
                held.tat
                    .available(&held.gcra, held.gcra.ticks(self.timeline.nanos()))
            }
            None => {
                let (gcra, tat, now) = self.unknown_in(table, key, self.timeline.nanos());
                gcra.available(tat, now)
            }
        })
    }

    /// How long until `key` could take `cost` tokens, zero if it could now.
    /// Spends and creates nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(2)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 2)?;
    /// assert_eq!(limiter.retry_after(&1, 1)?, Duration::from_millis(500));
    /// assert_eq!(limiter.retry_after(&2, 1)?, Duration::ZERO);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after<Q>(&self, key: &Q, cost: u64) -> Result<Duration, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.retry_after_of(key, cost)
    }

    /// [`Self::retry_after`] for any lookup form, the key's limit's included.
    pub(crate) fn retry_after_of<Q: Find<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
    ) -> Result<Duration, AcquireError> {
        in_table!(self.table, key, |table| {
            let found = key.find_in(table);
            let reading = self.timeline.read();
            let nanos = reading.nanos();
            let wait = match found {
                Some(entry) => {
                    let Held { tat, gcra, .. } = entry.held(&self.generations);
                    let now = gcra.ticks(nanos);
                    gcra.duration(tat.wait_for(&gcra, now, gcra.cost_ticks(cost)?))
                }
                None => {
                    let (gcra, tat, now) = self.unknown_in(table, key, nanos);
                    let wait = gcra.decide(tat, now, gcra.cost_ticks(cost)?, 0);
                    gcra.duration(wait.err().unwrap_or(0))
                }
            };
            Ok(reading.behind().map_or(wait, |behind| behind.wait(wait)))
        })
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

    /// Gives every key `quota` from now on, keeping what each key has
    /// spent: every bucket (and the overflow bucket) is converted by the
    /// continuity rule of [`docs/semantics.md`](crate::guide::semantics)
    /// ("Changing a quota"): its whole tokens carry over, clipped to the new
    /// capacity, and a debt keeps the instant it is paid. Keys created from
    /// now on get the new quota's initial credit, but no more than a bucket
    /// dropped full before the change would have carried, so that a sweep
    /// between two changes gives no key back what it spent (after a raise
    /// of the capacity, for at most the new quota's refill of the tokens
    /// withheld; never if no bucket was ever dropped). A receipt taken
    /// before the change gives nothing back after it, nor does a store
    /// lease.
    ///
    /// A `Clock` that panics during the change leaves the keys it had not
    /// reached under the old quota, each decided under it; the next change
    /// or sweep converts them first.
    ///
    /// Decisions go on while it runs: it converts one shard of the table at
    /// a time, holding that shard for writing (a pause for the keys of that
    /// shard alone, measured in [`docs/benchmarks.md`](crate::guide::benchmarks)),
    /// and a decision on a bucket not converted yet is made under the old
    /// quota. Changes are serialised, with each other and with sweeps; each
    /// returns once every bucket is converted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).clock(clock.clone()).build::<u32>();
    /// limiter.try_acquire(&1, 6)?;
    /// limiter.set_quota(Quota::per_second(2)?);
    /// // 4 tokens were left: 2 carry over, the new capacity.
    /// assert_eq!(limiter.available(&1), 2);
    /// assert_eq!(limiter.available(&9), 2);
    /// clock.advance(Duration::from_millis(500));
    /// limiter.set_quota(Quota::per_second(100)?);
    /// assert_eq!(limiter.available(&1), 2); // refills at the new rate from here
    /// assert_eq!(limiter.available(&9), 100);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        // A walk a panicking clock cut short is finished first: the slot
        // this change rewrites is that walk's old generation's.
        let change = self.generations.begin(&quota, |pending| self.walk(pending));
        {
            // The overflow bucket, its floors and the drop watermark are
            // converted, and the new generation published, under the
            // overflow bucket's write lock: a decision on it, a new bucket
            // reading a floor, or a drop raising the watermark, sees all
            // before or all after.
            let mut overflow = write(&self.overflow);
            let nanos = self.timeline.nanos();
            let overflow = &mut *overflow;
            let tat = std::mem::replace(&mut overflow.tat, Tat::new(0)).into_inner();
            overflow.tat = Tat::new(change.carry(tat, nanos));
            for floor in overflow.floors.iter() {
                // Carried like a state, full ones too: a floor a full
                // bucket of the old quota has reached holds that quota's
                // capacity, which may be less than the new one.
                let mark = floor.load(Ordering::Relaxed);
                let carried = Marked::state(mark)
                    .map_or(Marked::NONE, |state| Marked::of(change.carry(state, nanos)));
                floor.store(carried, Ordering::Relaxed);
            }
            change.publish(nanos);
        }
        let nanos = self.walk(&change);
        change.finish(nanos);
    }

    /// Converts every entry not yet in `change`'s generation, and returns a
    /// clock reading taken after. `iter_mut` write-locks one shard at a
    /// time; no guard of ours is alive. Each bucket is converted at a
    /// reading taken under its shard's lock, so no later than any decision
    /// made on it under the old quota. A panicking clock stops it where it
    /// is: the entries not reached stay in the old generation, decided
    /// under its quota, until the next change or sweep finishes the walk.
    fn walk(&self, change: &Change<'_>) -> u64 {
        for mut entry in self.table.exact.iter_mut() {
            change.convert(entry.value_mut(), self.timeline.nanos());
        }
        for mut entry in self.table.fingerprints.iter_mut() {
            change.convert(entry.value_mut(), self.timeline.nanos());
        }
        self.timeline.nanos()
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

impl Decided {
    /// How long the caller must wait before its tokens exist, from the
    /// reading.
    fn wait(&self) -> Duration {
        let wait = self.gcra.duration(self.admission.wait(&self.gcra));
        match self.reading.behind() {
            None => wait,
            Some(behind) => {
                std::hint::cold_path();
                behind.wait(wait)
            }
        }
    }

    /// What [`Limit`](crate::Limit)'s layers keep of it to undo it.
    fn taken(&self, tokens: u64) -> Taken {
        Taken {
            overflow: self.overflow,
            ..Taken::own(self.admission, tokens)
        }
    }
}
