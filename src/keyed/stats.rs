//! What a keyed limiter's table holds and has dropped: kept off the
//! decision path, so reading it costs a decision nothing.

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of what a keyed limiter's key table holds and has dropped,
/// from [`KeyTable::table_stats`](crate::KeyTable::table_stats), which
/// every keyed limiter implements (a `Tiered`'s summed over its tiers). A
/// key's state is its bucket, its window word, its count in flight or its
/// demand record.
///
/// ```
/// use tollgate::{KeyedLimiter, Quota};
///
/// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>();
/// limiter.try_acquire(&1, 1)?;
/// assert_eq!(limiter.table_stats().keys, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyTableStats {
    /// Keys tracked now.
    pub keys: u64,
    /// The key cap.
    pub max_keys: u64,
    /// Keys' states created so far. At rest, `created = keys + evicted`.
    pub created: u64,
    /// Sweeps run, explicit and automatic (an automatic sweep is counted
    /// even when it finds nothing to drop).
    pub sweeps: u64,
    /// States dropped because they were idle (a bucket refilled to full, a
    /// window nothing counted in still weighs, no work in flight, a key
    /// asking for nothing): by sweeps, and by undos (a refused hierarchy, an
    /// abandoned async `acquire`) or releases that left their key idle.
    pub evicted: u64,
    /// Admissions served by the shared overflow bucket because the table
    /// was full ([`AtCapacity::SharedOverflow`](crate::AtCapacity::SharedOverflow)),
    /// including ones undone later.
    pub overflowed: u64,
    /// Times a thread cached a key as hot
    /// ([`KeyedBuilder::hot_keys_per_thread`](crate::KeyedBuilder::hot_keys_per_thread)):
    /// a count that climbs with every decision means keys keep evicting
    /// each other from the threads' caches. Zero for window limiters.
    pub cached: u64,
}

impl KeyTableStats {
    /// The two snapshots' counts added, saturating: the stats of two tables
    /// as one.
    pub(crate) fn plus(self, other: KeyTableStats) -> KeyTableStats {
        KeyTableStats {
            keys: self.keys.saturating_add(other.keys),
            max_keys: self.max_keys.saturating_add(other.max_keys),
            created: self.created.saturating_add(other.created),
            sweeps: self.sweeps.saturating_add(other.sweeps),
            evicted: self.evicted.saturating_add(other.evicted),
            overflowed: self.overflowed.saturating_add(other.overflowed),
            cached: self.cached.saturating_add(other.cached),
        }
    }

    /// Publishes this snapshot through the `metrics` facade (feature
    /// `metrics`): gauges `{prefix}_keys` and `{prefix}_max_keys`, counters
    /// `{prefix}_created_total`, `_sweeps_total`, `_evicted_total` and
    /// `_overflowed_total` at their absolute values.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?).build::<u32>();
    /// limiter.table_stats().export("per_client"); // no recorder installed: a no-op
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn export(&self, prefix: &str) {
        crate::export::gauges(prefix, &[("keys", self.keys), ("max_keys", self.max_keys)]);
        crate::export::counters(
            prefix,
            &[
                ("created_total", self.created),
                ("sweeps_total", self.sweeps),
                ("evicted_total", self.evicted),
                ("overflowed_total", self.overflowed),
                ("cached_total", self.cached),
            ],
        );
    }
}

/// The running totals behind [`KeyTableStats`]. Each is bumped only on a
/// path that already writes shared state (a key's creation, a sweep, an
/// eviction, a decision on the overflow bucket), never on a decision on an
/// existing key. On a cache line of their own, so that bumping them never
/// slows the reads of the limiter's other fields.
#[derive(Debug, Default)]
pub(crate) struct TableCounters {
    created: AtomicU64,
    sweeps: AtomicU64,
    evicted: AtomicU64,
    overflowed: AtomicU64,
    cached: AtomicU64,
}

impl TableCounters {
    // Relaxed: each is a total read on its own, ordering nothing.
    pub(crate) fn created(&self) {
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn swept(&self) {
        self.sweeps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn evicted(&self, dropped: usize) {
        self.evicted.fetch_add(dropped as u64, Ordering::Relaxed);
    }

    pub(crate) fn overflowed(&self) {
        self.overflowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cached(&self) {
        self.cached.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, keys: u64, max_keys: u64) -> KeyTableStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        KeyTableStats {
            keys,
            max_keys,
            created: read(&self.created),
            sweeps: read(&self.sweeps),
            evicted: read(&self.evicted),
            overflowed: read(&self.overflowed),
            cached: read(&self.cached),
        }
    }
}
