//! The key cap: how many keys a keyed limiter tracks, the places new keys
//! take under the cap, and the sweeps that free places when it is reached.
//!
//! Counting a key in is one compare-and-swap while the table has room. Only
//! a new key that finds the table full takes the sweep lock: a sweep running
//! then holds it, so the key waits for that sweep (it is finite: one pass
//! over the table) and counts in again, instead of being refused while the
//! places it needs are being freed. Under the lock, a sweep that is due runs;
//! a key is refused only when, after that, the table is still full of keys
//! that cannot be dropped without losing spent credit.
//!
//! Written on the `crate::sync` shim so that the loom models in
//! `loom-tests/` run this very code (the dashmap tables around it are not
//! loom-aware; a model stands in for them).

use crate::sync::{AtomicUsize, Mutex, MutexGuard, Ordering, lock};

/// The count of keys a table holds, bounded by `max_keys`, and the sweep
/// schedule at the cap.
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed limiter.
#[derive(Debug)]
pub struct KeyCap {
    max_keys: usize,
    /// The least ticks between two automatic sweeps; `None`: none.
    sweep_interval: Option<u64>,
    /// Keys in the table (or about to be: counted before insertion, so the
    /// cap is never overshot).
    keys: AtomicUsize,
    /// Held for the whole of each sweep; holds the earliest tick at which
    /// the next automatic sweep may run. Only a table at its cap takes it.
    sweeps: Mutex<u64>,
}

/// A new key's place under the cap, taken before its bucket is inserted and
/// released when dropped unless [`Place::keep`] says the bucket went in.
/// A key's own code (`Clone`, `Hash`, `Eq`) runs in between and may panic:
/// without this, each such panic would leave a count for a key that is not
/// there, and enough of them would fill the cap for good.
#[derive(Debug)]
#[must_use = "a place dropped without `keep` is released"]
pub struct Place<'a>(&'a AtomicUsize);

impl Place<'_> {
    /// Keeps the place: the key's bucket is in the table.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl KeyCap {
    /// An empty table's count under a cap of `max_keys`, swept automatically
    /// at most once per `sweep_interval` ticks (`None`: never).
    pub fn new(max_keys: usize, sweep_interval: Option<u64>) -> Self {
        KeyCap {
            max_keys,
            sweep_interval,
            keys: AtomicUsize::new(0),
            sweeps: Mutex::new(0),
        }
    }

    /// The most keys counted in at once.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys counted in.
    pub fn counted(&self) -> usize {
        self.keys.load(Ordering::Acquire)
    }

    /// A place for a new key if the table has room, without waiting: the
    /// path of every new key while the table is below its cap, and the
    /// whole of it for a table that never sweeps at the cap (one whose
    /// caller holds a shard lock, which a sweep would wait for).
    #[inline]
    pub fn count_in(&self) -> Option<Place<'_>> {
        self.keys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_keys).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(&self.keys))
    }

    /// A place for a new key, or `None` if the table is full of keys no
    /// sweep may drop.
    ///
    /// At the cap, waits for a sweep in progress and counts in again. If
    /// still full and the sweep interval has passed since the last
    /// automatic sweep, runs `sweep(at)`, which drops what is full at `at`
    /// and uncounts it ([`Self::forget`]), and counts in once more. `at`
    /// is the caller's reading `now` when that is due: a sweep later than the
    /// reading the new key's decision is made on would start that key in
    /// debt. But a reading taken before a wait (or a preemption) may be
    /// stale, and a sweep at it drops too little: then the clock is read
    /// again (`fresh`) and, if it moved on, the table swept once more at
    /// that reading.
    #[inline]
    pub fn take_place(
        &self,
        now: u64,
        fresh: impl Fn() -> u64,
        sweep: impl Fn(u64),
    ) -> Option<Place<'_>> {
        if let Some(place) = self.count_in() {
            return Some(place);
        }
        let mut next_sweep = self.lock_sweeps();
        // A sweep that ran while we waited, or ended just before, may have
        // made room.
        if let Some(place) = self.count_in() {
            return Some(place);
        }
        let interval = self.sweep_interval?;
        let at = match now >= *next_sweep {
            true => now,
            false => Some(fresh()).filter(|&fresh| fresh >= *next_sweep)?,
        };
        let mut sweep_at = |at: u64| {
            sweep(at);
            // Scheduled once the sweep is done: one cut short by a panic
            // (a key's `Drop`) is due again at once.
            *next_sweep = at.saturating_add(interval);
            self.count_in()
        };
        sweep_at(at).or_else(|| Some(fresh()).filter(|&later| later > at).and_then(sweep_at))
    }

    /// Runs `sweep` as a sweep (an automatic one waits for it to end).
    pub fn sweep<T>(&self, sweep: impl FnOnce() -> T) -> T {
        let _sweeping = self.lock_sweeps();
        sweep()
    }

    /// Uncounts `dropped` keys taken out of the table.
    pub fn forget(&self, dropped: usize) {
        self.keys.fetch_sub(dropped, Ordering::AcqRel);
    }

    fn lock_sweeps(&self) -> MutexGuard<'_, u64> {
        // A sweep that panicked (a key's `Drop` may) left the schedule
        // whole: a plain number, written after the sweep ends.
        lock(&self.sweeps)
    }
}
