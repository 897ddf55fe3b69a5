//! One stripe's pool: the slots of the bucket's timeline it leased and has
//! not spent, which expire as the bucket refills past them.
//!
//! A token the bucket grants occupies a slot of `T` ticks on the bucket's
//! timeline; the bucket holds its full capacity again once the clock passes
//! the slot. A pooled token must therefore stop being usable once the clock
//! passes its slot, or the pool would spend it a second time beside the
//! refilled bucket. So the pool keeps slots, not a count: the leased range
//! ends at `end`, everything up to `next` is spent, and a take at reading
//! `now` spends the `cost` slots just above `max(next, now)` if they end by
//! `end`. That is a GCRA admission against a fixed horizon: the same
//! arithmetic as the bucket's, and no division on the way.
//!
//! The proof that this keeps the bucket's envelope, and why each ordering
//! below is needed, is in [`docs/proofs.md`](crate::guide::proofs), "Striped buckets".

use crate::sync::{AtomicU64, Ordering};

/// `next` of a pool sealed by a change of quota: above every slot, so a
/// take finds nothing left, and, `next` only growing, for good.
const SEALED: u64 = u64::MAX;

/// A stripe's leased slots and the one refill or flush acting on them.
#[derive(Debug)]
pub(super) struct Slots {
    /// The first slot not yet spent, expired or returned. It only grows,
    /// and every change makes it larger, so a take whose compare-and-swap
    /// on it succeeds knows that no other take and no flush came between its
    /// load and its swap.
    next: AtomicU64,
    /// Where the leased slots end. Written only under a [`Claim`]: raised
    /// by each lease, lowered only by a flush, which first empties the pool.
    end: AtomicU64,
    /// The latest reading a lease was decided at. Takes read after the
    /// lease's `end` see at least this, and refuse at a reading behind it:
    /// a clock that went backwards must not spend tokens leased "later".
    floor: AtomicU64,
    /// Non-zero while a thread holds the [`Claim`].
    claimed: AtomicU64,
    /// The last lease's tokens not yet returned, and its reading: the
    /// receipt a flush returns them against. Accessed only under the claim.
    granted: AtomicU64,
    at: AtomicU64,
}

/// What [`Slots::take`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Take {
    /// The cost was spent from the pool.
    Taken {
        /// What is left is below the low-water mark: worth a refill.
        low: bool,
    },
    /// The pool could not cover the cost; nothing was spent.
    Short {
        /// As for [`Take::Taken`].
        low: bool,
    },
}

/// The exclusive right to extend or empty a stripe's slots, held by one
/// thread (a refill or a flush) and released when dropped, so that a panic
/// inside a refill (a clock that panics, say) cannot wedge the stripe.
#[derive(Debug)]
pub(super) struct Claim<'a>(&'a Slots);

/// What [`Claim::drain`] took out of the pool, with the receipt to return
/// it against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Drained {
    /// Tokens taken out that the last lease can account for.
    pub(super) tokens: u64,
    /// That lease's tokens not returned before this drain.
    pub(super) granted: u64,
    /// That lease's reading.
    pub(super) at: u64,
}

impl Slots {
    pub(super) fn new() -> Self {
        Slots {
            next: AtomicU64::new(0),
            end: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            at: AtomicU64::new(0),
        }
    }

    /// Spends `cost` ticks of slots above `now`, if the pool holds them.
    /// `low_water` is in ticks.
    ///
    /// Linearization point: the successful compare-and-swap on `next`, or,
    /// for a refusal, the loads it decided on.
    #[inline]
    pub(super) fn take(&self, now: u64, cost: u64, low_water: u64) -> Take {
        let mut next = self.next.load(Ordering::Acquire);
        loop {
            // Loaded after `next`: a take that saw a flush's `next` sees the
            // emptied `end` too, and one that saw a lease's `end` sees its
            // `floor`.
            let end = self.end.load(Ordering::Acquire);
            if now < self.floor.load(Ordering::Acquire) {
                return Take::Short { low: false };
            }
            let start = next.max(now);
            let left = end.saturating_sub(start);
            if left < cost {
                return Take::Short {
                    low: left < low_water,
                };
            }
            match self.next.compare_exchange_weak(
                next,
                start + cost,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Take::Taken {
                        low: left - cost < low_water,
                    };
                }
                Err(actual) => next = actual,
            }
        }
    }

    /// Whole tokens of `token_ticks` a take at `now` could spend (none at a
    /// reading behind the last lease).
    pub(super) fn usable(&self, now: u64, token_ticks: u64) -> u64 {
        let next = self.next.load(Ordering::Acquire);
        let end = self.end.load(Ordering::Acquire);
        if now < self.floor.load(Ordering::Acquire) {
            return 0;
        }
        end.saturating_sub(next.max(now)) / token_ticks
    }

    /// Whether a change of quota sealed the pool (see [`Claim::seal`]).
    #[inline]
    pub(super) fn is_sealed(&self) -> bool {
        self.next.load(Ordering::Acquire) == SEALED
    }

    /// Seals the pool without its claim, for a change of quota that does
    /// not wait for a refill or flush in flight: its slots are dropped
    /// (see [`Claim::seal`]). The holder's writes cannot undo it: a
    /// drain's compare-and-swap on `next` fails, and a lease's slots end
    /// below `next`.
    pub(super) fn seal(&self) {
        // A swap, not a store: loom mis-orders a store racing a
        // compare-and-swap (tokio-rs/loom#254).
        self.next.swap(SEALED, Ordering::AcqRel);
    }

    /// The claim, unless another thread holds it.
    #[inline]
    pub(super) fn claim(&self) -> Option<Claim<'_>> {
        // The load first: a stripe whose refill is in flight is seen so by
        // every take below the low-water mark, and a load does not take the
        // line away from the claimant. The guard is built only once won
        // (`then`, not `then_some`): dropping one releases the claim.
        (self.claimed.load(Ordering::Relaxed) == 0 && self.claimed.swap(1, Ordering::Acquire) == 0)
            .then(|| Claim(self))
    }
}

impl Claim<'_> {
    /// Adds a lease of `tokens` (`ticks` of slots) decided at reading `at`,
    /// which left the bucket's state at `state`.
    ///
    /// The new slots go on top of those the pool still holds: `end` becomes
    /// `max(end, at) + ticks`, the GCRA of the pool's leases, but never
    /// beyond the bucket's own state. The bucket's state is at least every
    /// pool's `end` as long as only admissions and the one undo rule move
    /// it, so the cap changes nothing then; after a trusted `refund` or
    /// `reset` of the bucket rewound its state below a pool's slots, it
    /// keeps the pool from spending slots the bucket no longer holds.
    /// `floor` is published before `end`, so that a take that sees the new
    /// slots refuses a reading behind this lease.
    pub(super) fn extend(&self, at: u64, tokens: u64, ticks: u64, state: u64) {
        let slots = self.0;
        let floor = slots.floor.load(Ordering::Relaxed).max(at);
        slots.floor.store(floor, Ordering::Release);
        let end = slots.end.load(Ordering::Relaxed);
        slots.end.store(
            end.max(at).saturating_add(ticks).min(state),
            Ordering::Release,
        );
        slots.granted.store(tokens, Ordering::Relaxed);
        slots.at.store(at, Ordering::Relaxed);
    }

    /// Empties the pool and says how many of its tokens, usable at the
    /// reading `now()` returns after each load, the last lease can take
    /// back (at most what it has left; older leases' tokens are dropped).
    ///
    /// The returned tokens are the top slots, which are the last lease's.
    /// `end` drops by them, so that the next lease stacks on what was not
    /// returned. While the pool is being emptied `end` reads zero: a take
    /// that sees the new `next` can then spend nothing, and one that loaded
    /// the old `next` fails its compare-and-swap, since `next` grows. When
    /// everything is returned and the clock is behind `next`, `next` must
    /// still grow: it moves one tick past the new `end`, which the next
    /// lease loses (at most one token).
    pub(super) fn drain(&self, mut now: impl FnMut() -> u64, token_ticks: u64) -> Drained {
        let slots = self.0;
        let end = slots.end.load(Ordering::Relaxed);
        let granted = slots.granted.load(Ordering::Relaxed);
        let at = slots.at.load(Ordering::Relaxed);
        let nothing = Drained {
            tokens: 0,
            granted,
            at,
        };
        let mut next = slots.next.load(Ordering::Acquire);
        if next >= end {
            return nothing;
        }
        // Published by the swap on `next` below, which releases it.
        slots.end.store(0, Ordering::Relaxed);
        loop {
            let usable = end.saturating_sub(next.max(now())) / token_ticks;
            let tokens = usable.min(granted);
            let kept = end - tokens * token_ticks;
            // `next < end`, so `next + 1` cannot overflow.
            let emptied = kept.max(next + 1);
            match slots
                .next
                .compare_exchange(next, emptied, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    slots.end.store(kept, Ordering::Release);
                    slots.granted.store(granted - tokens, Ordering::Relaxed);
                    return Drained {
                        tokens,
                        granted,
                        at,
                    };
                }
                Err(actual) if actual >= end => {
                    // Takes emptied it meanwhile.
                    slots.end.store(end, Ordering::Release);
                    return nothing;
                }
                Err(actual) => next = actual,
            }
        }
    }

    /// Empties the pool for good: [`Self::drain`], then [`Slots::seal`]:
    /// `next` moves to the top of the range, where no take finds a slot
    /// and no refill extends (a refill checks [`Slots::is_sealed`] under
    /// its claim). A take that loaded `next` before fails its
    /// compare-and-swap, so every take from the pool linearizes before the
    /// seal. The slots the drain kept (older leases') are dropped: never
    /// spent, never returned.
    pub(super) fn seal(&self, now: impl FnMut() -> u64, token_ticks: u64) -> Drained {
        let drained = self.drain(now, token_ticks);
        self.0.seal();
        drained
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.claimed.swap(0, Ordering::Release);
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    const T: u64 = 10;

    fn leased(at: u64, tokens: u64) -> Slots {
        let slots = Slots::new();
        slots
            .claim()
            .unwrap()
            .extend(at, tokens, tokens * T, u64::MAX);
        slots
    }

    #[test]
    fn tokens_expire_as_the_clock_passes_their_slots() {
        let slots = leased(0, 4);
        assert_eq!(slots.take(0, T, 0), Take::Taken { low: false });
        assert_eq!(slots.usable(0, T), 3);
        // Two slots have passed: one of them was spent, one expired.
        assert_eq!(slots.usable(2 * T, T), 2);
        assert_eq!(slots.take(2 * T, 3 * T, 0), Take::Short { low: false });
        assert_eq!(slots.take(2 * T + 1, 2 * T, 0), Take::Short { low: false });
        assert_eq!(slots.take(2 * T, 2 * T, 0), Take::Taken { low: false });
        assert_eq!(slots.usable(2 * T, T), 0);
    }

    #[test]
    fn a_lease_stacks_on_what_the_pool_still_holds() {
        let slots = leased(0, 4);
        slots.claim().unwrap().extend(T, 2, 2 * T, u64::MAX);
        assert_eq!(slots.usable(T, T), 5);
        assert_eq!(slots.usable(0, T), 0, "a reading behind the last lease");
        // Once the old slots have passed, the new lease is what is left.
        slots.claim().unwrap().extend(10 * T, 2, 2 * T, u64::MAX);
        assert_eq!(slots.usable(10 * T, T), 2);
    }

    #[test]
    fn a_reading_behind_the_last_lease_spends_nothing() {
        let slots = leased(5 * T, 4);
        assert_eq!(slots.take(4 * T, T, 0), Take::Short { low: false });
        assert_eq!(slots.take(5 * T, T, 2 * T), Take::Taken { low: false });
    }

    #[test]
    fn the_low_water_mark_is_reported_once_crossed() {
        let slots = leased(0, 4);
        assert_eq!(slots.take(0, 2 * T, 2 * T), Take::Taken { low: false });
        assert_eq!(slots.take(0, T, 2 * T), Take::Taken { low: true });
        assert_eq!(slots.take(0, 2 * T, 2 * T), Take::Short { low: true });
    }

    #[test]
    fn one_claim_at_a_time_and_a_dropped_claim_frees_the_stripe() {
        let slots = Slots::new();
        let claim = slots.claim().unwrap();
        assert!(slots.claim().is_none());
        assert!(
            slots.claim().is_none(),
            "a failed claim released the holder's"
        );
        drop(claim);
        assert!(slots.claim().is_some());
    }

    #[test]
    fn a_drain_returns_the_usable_tokens_the_last_lease_covers() {
        let slots = leased(0, 4);
        slots.take(0, T, 0);
        let claim = slots.claim().unwrap();
        let drained = claim.drain(|| T / 2, T);
        assert_eq!(
            drained,
            Drained {
                tokens: 3,
                granted: 4,
                at: 0
            }
        );
        assert_eq!(slots.usable(0, T), 0);
        assert_eq!(claim.drain(|| 0, T).tokens, 0);
        // The next lease stacks on the unreturned slots, less one tick.
        claim.extend(0, 4, 4 * T, u64::MAX);
        assert_eq!(slots.usable(0, T), 3);
    }

    #[test]
    fn a_sealed_pool_spends_nothing_and_never_refills() {
        let slots = leased(0, 4);
        let claim = slots.claim().unwrap();
        claim.extend(0, 1, T, u64::MAX);
        // The last lease's token goes back; the older lease's four are dropped.
        assert_eq!(claim.seal(|| 0, T).tokens, 1);
        drop(claim);
        assert!(slots.is_sealed());
        assert_eq!(slots.usable(0, T), 0);
        assert_eq!(slots.take(0, T, T), Take::Short { low: true });
        assert_eq!(slots.claim().unwrap().drain(|| 0, T).tokens, 0);
    }

    #[test]
    fn a_drain_keeps_what_older_leases_hold_from_being_returned_twice() {
        let slots = leased(0, 4);
        let claim = slots.claim().unwrap();
        claim.extend(0, 1, T, u64::MAX);
        assert_eq!(slots.usable(0, T), 5);
        assert_eq!(claim.drain(|| 0, T).tokens, 1);
        assert_eq!(slots.usable(0, T), 0);
    }
}
