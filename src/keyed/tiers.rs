//! Per-key quotas: a resolver picks each key's tier.

use std::hash::{BuildHasher, Hash};

use crate::clock::{Clock, DefaultClock};
use crate::error::AcquireError;
use crate::keyed::{KeyLimit, KeyRef, KeyTable, KeyTableStats, KeyedLimiter};

/// Keyed limiters with different quotas, and a resolver that decides which
/// one a key belongs to (a plan, a tier, an operation class).
///
/// Each tier is its own [`KeyedLimiter`], so a key's quota is its tier's
/// while its bucket lives; a tier's quota may change at run time
/// ([`tier_at`](Self::tier_at)). A key whose resolver answer changes (an upgrade) starts a
/// bucket in its new tier, with that tier's initial credit; its old bucket
/// is swept once full. Resolve from verified data (the authenticated
/// principal's plan), never from a field the client sends.
///
/// The resolver returns a tier index; an index past the last tier means the
/// last tier, so put the most restrictive tier last and unknown keys get it.
/// It takes the form keys are looked up by (`K`, or a borrowed form such as
/// `str` for `String` keys, any [`KeyRef`]), so a lookup by a borrowed form
/// copies nothing.
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota, Tiered};
///
/// #[derive(Clone, PartialEq, Eq, Hash)]
/// struct Account { id: u64, pro: bool }
///
/// let clock = ManualClock::new();
/// let tiers = Tiered::new(
///     [
///         KeyedLimiter::builder(Quota::per_second(100)?).clock(clock.clone()).build(),
///         KeyedLimiter::builder(Quota::per_second(10)?).clock(clock.clone()).build(),
///     ],
///     |account: &Account| if account.pro { 0 } else { 1 },
/// );
/// let free = Account { id: 1, pro: false };
/// tiers.try_acquire(&free, 10)?;
/// assert!(tiers.try_acquire(&free, 1).is_err());
/// tiers.try_acquire(&Account { id: 2, pro: true }, 100)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tiered<K: Send, F, const N: usize, C = DefaultClock, S = ahash::RandomState> {
    tiers: [KeyedLimiter<K, C, S>; N],
    resolve: F,
}

// By hand: a derive would require the resolver (usually a closure) to be
// `Debug`.
impl<K: Send, F, const N: usize, C, S> std::fmt::Debug for Tiered<K, F, N, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiered")
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl<K, F, const N: usize, C, S> Tiered<K, F, N, C, S>
where
    K: Hash + Eq + Send,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Tiers in index order and the resolver that picks one per key.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new([KeyedLimiter::builder(Quota::per_second(1)?).build::<u8>()], |_: &u8| 0);
    /// assert_eq!(tiers.tier(&3).quota().capacity(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(tiers: [KeyedLimiter<K, C, S>; N], resolve: F) -> Self {
        const { assert!(N > 0, "a Tiered needs at least one tier") };
        Tiered { tiers, resolve }
    }

    /// The limiter `key` belongs to.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new(
    ///     [
    ///         KeyedLimiter::builder(Quota::per_second(5)?).build::<u32>(),
    ///         KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>(),
    ///     ],
    ///     |id: &u32| if *id < 100 { 0 } else { 7 },
    /// );
    /// assert_eq!(tiers.tier(&1).quota().capacity(), 5);
    /// assert_eq!(tiers.tier(&500).quota().capacity(), 1); // past the end: the last tier
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tier<Q>(&self, key: &Q) -> &KeyedLimiter<K, C, S>
    where
        Q: KeyRef<K> + ?Sized,
        F: Fn(&Q) -> usize,
    {
        let index = (self.resolve)(key).min(N - 1);
        &self.tiers[index]
    }

    /// The tier at `index`, if there is one: to read its quota, or to
    /// change it at run time ([`KeyedLimiter::set_quota`]: each of its
    /// keys keeps what it has spent, by the continuity rule of
    /// [`docs/semantics.md`](crate::guide::semantics), "Changing a quota").
    /// A change reaches one tier; the others keep theirs.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new(
    ///     [
    ///         KeyedLimiter::builder(Quota::per_second(100)?).build::<u32>(),
    ///         KeyedLimiter::builder(Quota::per_second(10)?).build::<u32>(),
    ///     ],
    ///     |id: &u32| if *id < 100 { 0 } else { 1 },
    /// );
    /// // The free tier gets twice as much from now on.
    /// if let Some(free) = tiers.tier_at(1) {
    ///     free.set_quota(Quota::per_second(20)?);
    /// }
    /// assert_eq!(tiers.tier(&500).quota().capacity(), 20);
    /// assert_eq!(tiers.tier(&1).quota().capacity(), 100);
    /// assert!(tiers.tier_at(2).is_none());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tier_at(&self, index: usize) -> Option<&KeyedLimiter<K, C, S>> {
        self.tiers.get(index)
    }

    /// Takes `cost` tokens from `key`'s bucket in its tier; see
    /// [`KeyedLimiter::try_acquire`].
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new([KeyedLimiter::builder(Quota::per_second(1)?).build::<u8>()], |_: &u8| 0);
    /// tiers.try_acquire(&1, 1)?;
    ///
    /// // String keys, looked up and resolved as `&str`.
    /// let plans = Tiered::new(
    ///     [KeyedLimiter::builder(Quota::per_second(1)?).build::<String>()],
    ///     |_: &str| 0,
    /// );
    /// plans.try_acquire("alice", 1)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
        F: Fn(&Q) -> usize,
    {
        self.tier(key).try_acquire(key, cost)
    }

    /// `key`'s limit in its tier: a [`Limit`](crate::Limit), for every
    /// other decision (reserve, acquire, retry_after, available) and for the
    /// layers written over any limit (hierarchies, receipts, counting).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, Tiered};
    ///
    /// let clock = ManualClock::new();
    /// let tiers = Tiered::new(
    ///     [KeyedLimiter::builder(Quota::per_second(2)?).clock(&clock).build::<u8>()],
    ///     |_: &u8| 0,
    /// );
    /// tiers.key(&1).try_acquire(2)?;
    /// assert_eq!(tiers.key(&1).retry_after(1)?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key<'a, Q>(&'a self, key: &'a Q) -> KeyLimit<'a, Q, K, C, S>
    where
        Q: KeyRef<K> + ?Sized,
        F: Fn(&Q) -> usize,
    {
        self.tier(key).key(key)
    }

    /// Sweeps every tier; returns the buckets dropped.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new([KeyedLimiter::builder(Quota::per_second(1)?).build::<u8>()], |_: &u8| 0);
    /// assert_eq!(tiers.sweep(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.tiers.iter().map(KeyedLimiter::sweep).sum()
    }

    /// Keys tracked by all tiers together (a key in two tiers, after its
    /// resolver's answer changed, counts twice until its old bucket is
    /// swept).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new(
    ///     [
    ///         KeyedLimiter::builder(Quota::per_second(5)?).build::<u32>(),
    ///         KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>(),
    ///     ],
    ///     |id: &u32| usize::from(*id >= 100),
    /// );
    /// tiers.try_acquire(&1, 1)?;
    /// tiers.try_acquire(&500, 1)?;
    /// assert_eq!(tiers.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.tiers.iter().map(KeyedLimiter::len).sum()
    }

    /// Whether no tier tracks a key.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new([KeyedLimiter::builder(Quota::per_second(1)?).build::<u8>()], |_: &u8| 0);
    /// assert!(tiers.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.tiers.iter().all(KeyedLimiter::is_empty)
    }

    /// The most keys tracked at once by all tiers together: the sum of
    /// their caps, since each tier bounds its own table.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, MaxKeys, Quota, Tiered};
    ///
    /// let cap = MaxKeys::new(10)?;
    /// let tiers = Tiered::new(
    ///     [
    ///         KeyedLimiter::builder(Quota::per_second(5)?).max_keys(cap).build::<u32>(),
    ///         KeyedLimiter::builder(Quota::per_second(1)?).max_keys(cap).build::<u32>(),
    ///     ],
    ///     |id: &u32| usize::from(*id >= 100),
    /// );
    /// assert_eq!(tiers.max_keys(), 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.tiers
            .iter()
            .map(KeyedLimiter::max_keys)
            .fold(0, usize::saturating_add)
    }

    /// What the tiers' key tables hold and have dropped, summed over the
    /// tiers (each tier's own is [`tier_at`](Self::tier_at)`(i)?.table_stats()`).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, Tiered};
    ///
    /// let tiers = Tiered::new(
    ///     [
    ///         KeyedLimiter::builder(Quota::per_second(5)?).build::<u32>(),
    ///         KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>(),
    ///     ],
    ///     |id: &u32| usize::from(*id >= 100),
    /// );
    /// tiers.try_acquire(&1, 1)?;
    /// tiers.try_acquire(&500, 1)?;
    /// let stats = tiers.table_stats();
    /// assert_eq!((stats.keys, stats.created, stats.max_keys), (2, 2, 2 << 20));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table_stats(&self) -> KeyTableStats {
        self.tiers
            .iter()
            .map(KeyedLimiter::table_stats)
            .fold(KeyTableStats::default(), KeyTableStats::plus)
    }
}

impl<K, F, const N: usize, C, S> KeyTable for Tiered<K, F, N, C, S>
where
    K: Hash + Eq + Send + Sync,
    F: Send + Sync,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn len(&self) -> usize {
        Tiered::len(self)
    }

    fn max_keys(&self) -> usize {
        Tiered::max_keys(self)
    }

    fn sweep(&self) -> usize {
        Tiered::sweep(self)
    }

    fn table_stats(&self) -> KeyTableStats {
        Tiered::table_stats(self)
    }
}
