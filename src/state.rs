//! A bucket's state word and the operations on it, apart from any clock.
//!
//! [`Tat`] is the GCRA theoretical arrival time in one `AtomicU64`; every
//! operation is one compare-and-swap loop (or one load) given the quota's
//! arithmetic and a time already read. [`TokenBucket`](crate::TokenBucket)
//! keeps one on its own cache line; a keyed limiter keeps one per key, bare,
//! so that a key costs eight bytes of state.

use std::convert::Infallible;

use crossbeam_utils::Backoff;

use crate::AcquireError;
use crate::gcra::{FULL, Gcra};
use crate::sync::{AtomicU64, Ordering};

/// The GCRA theoretical arrival time, in the quota's ticks.
#[derive(Debug)]
pub(crate) struct Tat(AtomicU64);

impl Tat {
    pub(crate) fn new(tat: u64) -> Self {
        Tat(AtomicU64::new(tat))
    }

    /// The one compare-and-swap loop: applies `next` to the current state
    /// until the swap succeeds or `next` refuses, and returns the new state.
    /// A refusal writes nothing. `next` runs after the load it is given, so
    /// a clock read inside it is no older than any update that load shows.
    #[inline]
    fn update<E>(&self, mut next: impl FnMut(u64) -> Result<u64, E>) -> Result<u64, E> {
        let backoff = Backoff::new();
        let mut tat = self.0.load(Ordering::Acquire);
        loop {
            let new_tat = next(tat)?;
            match self
                .0
                .compare_exchange_weak(tat, new_tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(new_tat),
                Err(actual) => {
                    tat = actual;
                    backoff.spin();
                }
            }
        }
    }

    /// Admits `cost_ticks` at `now` with up to `slack` ticks of delay, and
    /// returns the admission's wait in ticks.
    #[inline]
    pub(crate) fn acquire(
        &self,
        gcra: &Gcra,
        now: u64,
        cost_ticks: u64,
        slack: u64,
    ) -> Result<u64, AcquireError> {
        let new_tat = self.update(|tat| {
            gcra.admit(tat, now, cost_ticks, slack)
                .map_err(|early| AcquireError::Insufficient {
                    retry_after: gcra.duration(early),
                })
        })?;
        Ok(gcra.wait(new_tat, now))
    }

    /// The wait in ticks until `cost_ticks` would fit at `now`, zero if it
    /// fits already. Reads only.
    #[inline]
    pub(crate) fn wait_for(&self, gcra: &Gcra, now: u64, cost_ticks: u64) -> u64 {
        match gcra.admit(self.0.load(Ordering::Acquire), now, cost_ticks, 0) {
            Ok(_) => 0,
            Err(early) => early,
        }
    }

    /// Undoes an admission of `cost_ticks` made at tick `admitted_at`,
    /// returning as much as provably never mints credit: the cost less the
    /// time elapsed since the admission. `now` is read after each load.
    ///
    /// Why not the whole cost: the state is the largest `n_i + C_i` over the
    /// live admissions (`n_i` an admission's time, `C_i` the cost admitted
    /// from it on; `docs/design.md`). Removing admission `r` lowers the terms
    /// up to `r` by its cost, but a later admission `j` whose term dominated
    /// only because `r` was there may now dominate on its own, and that term
    /// is at most `now + C_(r+1) <= now + (state - n_r - cost)`. So the
    /// state may drop to `max(state - cost, state - cost + (now - n_r))` and
    /// no lower; returning the full cost after others have acted would hand
    /// out refill the bucket would have wasted while full.
    pub(crate) fn rollback(&self, cost_ticks: u64, admitted_at: u64, mut now: impl FnMut() -> u64) {
        // `Err(())` means nothing is owed back any more: the state stays.
        let _ = self.update(|tat| {
            let held_for = now().saturating_sub(admitted_at);
            match cost_ticks.saturating_sub(held_for) {
                0 => Err(()),
                give_back => Ok(tat.saturating_sub(give_back)),
            }
        });
    }

    /// Returns `cost` tokens unconditionally (the caller vouches for them).
    pub(crate) fn refund(&self, gcra: &Gcra, cost: u64) {
        let refunded: Result<_, Infallible> = self.update(|tat| Ok(gcra.refunded(tat, cost)));
        let Ok(_) = refunded;
    }

    /// Whole tokens available at `now`.
    #[inline]
    pub(crate) fn available(&self, gcra: &Gcra, now: u64) -> u64 {
        gcra.available(self.0.load(Ordering::Acquire), now)
    }

    /// Whether the bucket holds its full capacity at `now`, and so is
    /// indistinguishable from a fresh full bucket from then on.
    #[inline]
    pub(crate) fn is_full(&self, now: u64) -> bool {
        self.0.load(Ordering::Acquire) <= now
    }

    /// The raw state, for seeding a new bucket no fuller than this one.
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Makes the bucket no fuller than a bucket full at `at`.
    pub(crate) fn raise_to(&self, at: u64) {
        self.0.fetch_max(at, Ordering::AcqRel);
    }

    pub(crate) fn reset(&self) {
        // A read-modify-write rather than a plain store: the same cost off the
        // hot path, and loom (which mis-orders a store racing a
        // compare-and-swap, tokio-rs/loom#254) can then check it soundly.
        self.0.swap(FULL, Ordering::AcqRel);
    }
}
