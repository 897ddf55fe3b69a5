//! The contract every keyed limiter's table of keys keeps, as one trait:
//! what tends keyed limiters (a sweep timer, a dashboard, a capacity
//! alarm) is written once for all of them.

use std::hash::{BuildHasher, Hash};

use super::{KeyTableStats, KeyedLimiter};
use crate::clock::Clock;

/// A keyed limiter's table of keys: how many keys it tracks and may track,
/// the dropping of idle ones, and what it has created and dropped.
///
/// Every keyed limiter is one: [`KeyedLimiter`], [`Tiered`](crate::Tiered)
/// (its tiers' tables taken together), the keyed windows
/// [`KeyedFixedWindow`](crate::KeyedFixedWindow) and
/// [`KeyedSlidingWindow`](crate::KeyedSlidingWindow),
/// [`KeyedConcurrencyLimiter`](crate::concurrency::KeyedConcurrencyLimiter)
/// and (feature `tokio`) `KeyedAllowance`. Each also has these methods as
/// its own, so a call on a concrete limiter needs no import: the trait is
/// for code written once over all of them. It is object safe, and
/// `Send + Sync` as every limiter shared between threads is, so one timer
/// thread can tend limiters of different kinds:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::concurrency::KeyedConcurrencyLimiter;
/// use tollgate::{KeyTable, KeyedFixedWindow, KeyedLimiter, ManualClock, Quota, WindowQuota};
///
/// let clock = ManualClock::new();
/// let buckets = Arc::new(KeyedLimiter::builder(Quota::per_second(1)?).clock(clock.clone()).build::<u32>());
/// let windows = Arc::new(
///     KeyedFixedWindow::builder(WindowQuota::per_second(1)?).clock(clock.clone()).build_fixed::<u32>()?,
/// );
/// let in_flight = Arc::new(KeyedConcurrencyLimiter::<u32>::new(1)?);
/// let tables: Vec<Arc<dyn KeyTable>> = vec![buckets.clone(), windows.clone(), in_flight.clone()];
///
/// buckets.try_acquire(&1, 1)?;
/// windows.try_acquire(&1, 1)?;
/// let permit = in_flight.try_acquire(&1, 1)?;
/// clock.advance(Duration::from_secs(1));
///
/// // The timer's tick, on a thread of its own: the full bucket and the
/// // ended window go; the key with work in flight stays.
/// let tick = std::thread::spawn(move || {
///     let dropped: usize = tables.iter().map(|table| table.sweep()).sum();
///     (dropped, tables.iter().map(|table| table.len()).sum::<usize>())
/// });
/// assert_eq!(tick.join().unwrap(), (2, 1));
/// drop(permit);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// What a key's state is, and so when it is idle (dropping it would
/// change no decision), is each limiter's own:
///
/// - a [`KeyedLimiter`]'s key, and a `Tiered`'s in its tier, is a token
///   bucket, idle once refilled to full;
/// - a keyed window's key is its window word, idle once nothing it counted
///   still weighs (a fixed window's once its window has ended, a sliding
///   window's once the window after it has too);
/// - a keyed concurrency limiter's key is its count in flight, idle at
///   zero: an entry goes with its key's last permit, so a sweep finds only
///   what a removal cut short by a panicking `Hash` or `Eq` left;
/// - a keyed allowance's key is the record of its demand, idle once it has
///   asked for nothing for its
///   [`forget_after`](crate::shared::KeyedAllowanceConfig::forget_after)
///   (the store keeps its budget).
///
/// So is what a new key meets at the cap: the keyed bucket's
/// [`AtCapacity`](crate::AtCapacity) policy, a refusal from the keyed
/// windows and the keyed concurrency limiter, a cold store decision with
/// the key untracked from the keyed allowance.
pub trait KeyTable: Send + Sync {
    /// Keys tracked now, as counted against the cap: for a moment the count
    /// may run above what the table holds (a place is reserved before each
    /// insertion, and a sweep uncounts what it dropped when it ends), never
    /// below it, so the cap is never overshot. A `Tiered`'s is its tiers'
    /// summed: a key whose tier changed counts in both until its old state
    /// is swept.
    ///
    /// ```
    /// use tollgate::{KeyTable, KeyedLimiter, Quota};
    ///
    /// fn tracked(table: &dyn KeyTable) -> usize {
    ///     table.len()
    /// }
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// limiter.try_acquire(&2, 1)?;
    /// assert_eq!(tracked(&limiter), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn len(&self) -> usize;

    /// Whether no key is tracked: `len() == 0`.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    /// use tollgate::KeyTable;
    ///
    /// let limiter = KeyedConcurrencyLimiter::<u32>::new(1)?;
    /// let table: &dyn KeyTable = &limiter;
    /// let permit = limiter.try_acquire(&1, 1)?;
    /// assert!(!table.is_empty());
    /// drop(permit);
    /// assert!(table.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once: [`len`](Self::len) never exceeds it.
    /// A `Tiered`'s is its tiers' caps summed, a keyed concurrency
    /// limiter's without a cap `usize::MAX`, and a keyed allowance's may be
    /// zero (it then tracks no key).
    ///
    /// ```
    /// use tollgate::MaxKeys;
    /// use tollgate::{KeyTable, KeyedLimiter, Quota};
    ///
    /// fn headroom(table: &dyn KeyTable) -> usize {
    ///     table.max_keys() - table.len()
    /// }
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .max_keys(MaxKeys::new(10)?)
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// assert_eq!(headroom(&limiter), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn max_keys(&self) -> usize;

    /// Drops every key whose state is idle, and returns how many. Dropping
    /// never gives a key credit: one that comes back starts no better off
    /// than the state dropped. Each shard of the table is write-locked
    /// while it is swept, so decisions on its keys wait for it.
    ///
    /// Limiters also sweep on their own, with no timer: a keyed bucket or
    /// window when a new key finds its table full (at most once per
    /// [`sweep_interval`](crate::KeyedBuilder::sweep_interval)), a keyed
    /// allowance at each demand sample. A sweep of yours frees memory
    /// before the cap is reached, on a schedule of yours; both kinds count
    /// in [`table_stats`](Self::table_stats)' `sweeps` and `evicted`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyTable, KeyedSlidingWindow, ManualClock, WindowQuota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedSlidingWindow::builder(WindowQuota::per_second(1)?)
    ///     .clock(clock.clone())
    ///     .build_sliding::<u32>()?;
    /// let table: &dyn KeyTable = &limiter;
    /// limiter.try_acquire(&1, 1)?;
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(table.sweep(), 0); // still weighs in the sliding window
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(table.sweep(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn sweep(&self) -> usize;

    /// What the table holds and has dropped so far: `keys` and `max_keys`
    /// as [`len`](Self::len) and [`max_keys`](Self::max_keys) read them,
    /// and the counts since the limiter was built ([`KeyTableStats`]; at
    /// rest, `created == keys + evicted`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyTable, KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).clock(clock.clone()).build::<u32>();
    /// let table: &dyn KeyTable = &limiter;
    /// limiter.try_acquire(&1, 1)?;
    /// limiter.try_acquire(&2, 1)?;
    /// clock.advance(Duration::from_secs(1));
    /// table.sweep();
    /// let stats = table.table_stats();
    /// assert_eq!((stats.created, stats.evicted, stats.keys), (2, 2, 0));
    /// assert_eq!(stats.max_keys, table.max_keys() as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn table_stats(&self) -> KeyTableStats;
}

impl<K, C, S> KeyTable for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Send + Sync,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn len(&self) -> usize {
        KeyedLimiter::len(self)
    }

    fn max_keys(&self) -> usize {
        KeyedLimiter::max_keys(self)
    }

    fn sweep(&self) -> usize {
        KeyedLimiter::sweep(self)
    }

    fn table_stats(&self) -> KeyTableStats {
        KeyedLimiter::table_stats(self)
    }
}
