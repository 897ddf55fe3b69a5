//! Per-key quotas: a resolver picks each key's tier.

use std::hash::{BuildHasher, Hash};

use crate::{AcquireError, Clock, DefaultClock, KeyLimit, KeyedLimiter};

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
pub struct Tiered<K, F, const N: usize, C = DefaultClock, S = ahash::RandomState> {
    tiers: [KeyedLimiter<K, C, S>; N],
    resolve: F,
}

// By hand: a derive would require the resolver (usually a closure) to be
// `Debug`.
impl<K, F, const N: usize, C, S> std::fmt::Debug for Tiered<K, F, N, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiered")
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl<K, F, const N: usize, C, S> Tiered<K, F, N, C, S>
where
    K: Hash + Eq,
    F: Fn(&K) -> usize,
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
    pub fn tier(&self, key: &K) -> &KeyedLimiter<K, C, S> {
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
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self, key: &K, cost: u64) -> Result<(), AcquireError>
    where
        K: Clone,
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
    pub fn key<'a>(&'a self, key: &'a K) -> KeyLimit<'a, K, K, C, S>
    where
        K: Clone,
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
}
