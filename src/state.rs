//! A bucket's state word and the operations on it, apart from any clock.
//!
//! [`Tat`] is the GCRA theoretical arrival time in one `AtomicU64`; every
//! operation is one compare-and-swap loop (or one load) given the quota's
//! arithmetic and a time already read. [`TokenBucket`](crate::TokenBucket)
//! keeps one on its own cache line; a keyed limiter keeps one per key, bare,
//! so that a key costs eight bytes of state.

use std::convert::Infallible;

use crossbeam_utils::Backoff;

use crate::error::AcquireError;
use crate::gcra::{FULL, Gcra};
use crate::sync::{AtomicU64, Ordering};

/// The GCRA theoretical arrival time, in the quota's ticks.
#[derive(Debug)]
pub(crate) struct Tat(AtomicU64);

/// The state word of a state that moved to another quota: written once, by
/// [`Tat::seal`], and never replaced. No operation writes it otherwise
/// (every decision stops at [`LAST`](crate::gcra::LAST)), and every
/// operation on it fails of itself, without a check of its own: a decision
/// overflows (`max(tat, now) + cost` with a cost of at least a tick) and is
/// refused, `available` is zero, an undo's compare-and-swap cannot match.
/// Only the writes that could otherwise lower it look for it: the inexact
/// undo (whose debt test saturates at the end of the clock range), and the
/// unconditional [`Tat::refund`] and [`Tat::reset`]. The
/// holder of the word tells a refusal from a seal by loading it again
/// ([`Tat::is_sealed`]), on the refusal's path only.
pub(crate) const SEALED: u64 = u64::MAX;

/// One admission as the state word recorded it: enough to undo it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    /// The state the admission's compare-and-swap replaced.
    pub(crate) before: u64,
    /// The state it wrote.
    pub(crate) after: u64,
    /// The tick the admission was decided at.
    pub(crate) at: u64,
    /// The tokens admitted, and the ticks they were charged.
    pub(crate) tokens: u64,
    pub(crate) cost_ticks: u64,
    /// The quota generation the admission was decided under: [`FIRST`]
    /// until the state's first quota change, one more at each. An undo
    /// under another generation gives back nothing: the admission's debit
    /// was carried over by the continuity rule, and giving it back under
    /// another quota could mint ([`docs/semantics.md`](crate::guide::semantics),
    /// "Changing a quota").
    pub(crate) generation: u64,
}

/// The generation of a state whose quota never changed.
pub(crate) const FIRST: u64 = 0;

impl Admission {
    /// The ticks its caller must wait before its tokens exist: zero when
    /// credit covered it, the reservation's delay otherwise.
    #[inline]
    pub(crate) fn wait(&self, gcra: &Gcra) -> u64 {
        gcra.wait(self.after, self.at)
    }
}

impl Tat {
    pub(crate) fn new(tat: u64) -> Self {
        Tat(AtomicU64::new(tat))
    }

    /// The one compare-and-swap loop: applies `next` to the current state
    /// until the swap succeeds or `next` refuses, and returns the state it
    /// replaced and the new one. A refusal writes nothing. `next` runs after
    /// the load it is given, so a clock read inside it is no older than any
    /// update that load shows.
    #[inline]
    fn update<E>(&self, mut next: impl FnMut(u64) -> Result<u64, E>) -> Result<(u64, u64), E> {
        let backoff = Backoff::new();
        let mut tat = self.0.load(Ordering::Acquire);
        loop {
            let new_tat = next(tat)?;
            match self
                .0
                .compare_exchange_weak(tat, new_tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((tat, new_tat)),
                Err(actual) => {
                    tat = actual;
                    backoff.spin();
                }
            }
        }
    }

    /// Admits `cost` tokens, charged `cost_ticks` ([`Gcra::cost_ticks`]),
    /// at `now` with up to `slack` ticks of delay: the core decision in the
    /// compare-and-swap loop, stamped with the state's quota `generation`.
    /// Linearizes at the successful compare-and-swap, or, refused, at the
    /// load it decided on.
    #[inline]
    pub(crate) fn admit(
        &self,
        gcra: &Gcra,
        now: u64,
        cost: u64,
        cost_ticks: u64,
        slack: u64,
        generation: u64,
    ) -> Result<Admission, AcquireError> {
        let (before, after) = self.update(|tat| {
            gcra.decide(tat, now, cost_ticks, slack)
                .map_err(|early| AcquireError::Insufficient {
                    retry_after: gcra.duration(early),
                })
        })?;
        Ok(Admission {
            before,
            after,
            at: now,
            tokens: cost,
            cost_ticks,
            generation,
        })
    }

    /// The wait in ticks until `cost_ticks` would fit at `now`, zero if it
    /// fits already. Reads only.
    #[inline]
    pub(crate) fn wait_for(&self, gcra: &Gcra, now: u64, cost_ticks: u64) -> u64 {
        match gcra.decide(self.0.load(Ordering::Acquire), now, cost_ticks, 0) {
            Ok(_) => 0,
            Err(early) => early,
        }
    }

    /// Gives back `returned_ticks` of what `admission` took: the one rule by
    /// which credit ever flows back to a bucket (every receipt's undo, a
    /// lease's unused part, an abandoned wait), apart from the trusted
    /// [`Self::refund`] and [`Self::reset`].
    ///
    /// Exact when the undo can prove nothing was admitted since: the state
    /// word still shows what the admission wrote, and either the clock has
    /// not moved since the admission or the admission's slot still lies
    /// ahead (a reservation not yet due). Then the state moves back by
    /// exactly what is returned, as if the admission had taken only the
    /// rest. Otherwise it moves back by at most the admission's cost less the
    /// time elapsed since it was decided, with `now` read after each load,
    /// and never by more than is returned.
    ///
    /// Why a matching word proves nothing once the clock has moved: an
    /// inexact undo of an earlier receipt lowers the word and a new
    /// admission can raise it back to exactly this admission's value (ABA);
    /// the exact path would then return the whole cost after another
    /// admission, minting the refill of the time held (14 tokens at one
    /// instant on `B = 10`: `tests/adversarial`,
    /// `an_undo_whose_word_came_back_mints_nothing`). While the slot lies
    /// ahead, no inexact undo can have lowered the word below it (they give
    /// nothing back while the state is beyond `now + B·T`), and at the
    /// admission's own reading both paths give the same.
    ///
    /// Why not the whole cost: the state is at least `d_i + C_i` for every
    /// live admission `i` (`d_i` its due time, the reading for an immediate
    /// admission; `C_i` the cost admitted from it on; [`docs/semantics.md`](crate::guide::semantics),
    /// "Giving back"). Removing admission `r` lowers the terms before it by
    /// its cost, but the term of a later admission `j` does not move, and it
    /// may have been below the state only because `r` was there:
    /// `d_j + C_j <= now + (state - n_r - cost_r)`, given `d_j <= now`. So
    /// the state may drop by `cost_r - (now - n_r)` and no more; returning
    /// the whole cost after others have acted would hand out refill the
    /// bucket had wasted while full. `d_j <= now` holds because nothing is
    /// given back while a later reservation is due after `now`, and needs a
    /// clock that does not go backwards across threads: a reading behind
    /// another thread's lets this undo return up to that gap too much.
    ///
    /// An admission decided under another quota `generation` than the
    /// state's gets nothing back: see [`Admission::generation`].
    ///
    /// Returns the ticks given back.
    pub(crate) fn undo(
        &self,
        gcra: &Gcra,
        admission: &Admission,
        returned_ticks: u64,
        generation: u64,
        mut now: impl FnMut() -> u64,
    ) -> u64 {
        if admission.generation != generation {
            return 0;
        }
        let returned_ticks = returned_ticks.min(admission.cost_ticks);
        let reading = now();
        let held_for = reading.saturating_sub(admission.at);
        let ahead = gcra.wait(admission.after, reading) > 0;
        // Once the cost has refilled (and the slot is behind), nothing is
        // owed; in particular a keyed bucket swept since (swept only once
        // full) and recreated is never touched.
        if returned_ticks == 0 || (!ahead && admission.cost_ticks <= held_for) {
            return 0;
        }
        if ahead || held_for == 0 {
            let exact = if returned_ticks == admission.cost_ticks {
                admission.before
            } else {
                admission.after - returned_ticks
            };
            if self
                .0
                .compare_exchange(admission.after, exact, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return returned_ticks;
            }
        }
        self.undo_inexact(
            gcra,
            admission.at,
            admission.cost_ticks,
            returned_ticks,
            now,
        )
    }

    /// The inexact half of [`Self::undo`], also for receipts that do not
    /// know the state their admission wrote (a store's lease): gives back
    /// `returned_ticks` of `cost_ticks` admitted at tick `at`, less the time
    /// held since. Returns the ticks given back.
    ///
    /// Nothing goes back while the state lies beyond `now + B·T`: the top of
    /// the state then belongs to reservations due after `now`, whose callers
    /// were promised their start times. Lowering it would hand the same slot
    /// to the next reservation, two starts where the quota allows one. Below
    /// that line every slot is due already, which is what the argument above
    /// covers (with due times in place of readings).
    pub(crate) fn undo_inexact(
        &self,
        gcra: &Gcra,
        at: u64,
        cost_ticks: u64,
        returned_ticks: u64,
        mut now: impl FnMut() -> u64,
    ) -> u64 {
        let owed = std::cell::Cell::new(0);
        // `Err(())` means nothing is owed back any more: the state stays.
        let _ = self.update(|tat| {
            let now = now();
            // A sealed word shows a debt too, except at the very end of the
            // clock range, where the debt test saturates: checked by name.
            if tat == SEALED || gcra.wait(tat, now) > 0 {
                return Err(());
            }
            let held_for = now.saturating_sub(at);
            let cap = cost_ticks.saturating_sub(held_for);
            owed.set(returned_ticks.min(cap).min(tat));
            match owed.get() {
                0 => Err(()),
                owed => Ok(tat - owed),
            }
        });
        owed.get()
    }

    /// Admits as many of `want` whole tokens as are available at `now`, in
    /// one compare-and-swap: `(granted, admission)`, or the wait in ticks
    /// until one token is available. Stamped like [`Self::admit`].
    pub(crate) fn admit_up_to(
        &self,
        gcra: &Gcra,
        now: u64,
        want: u64,
        generation: u64,
    ) -> Result<(u64, Admission), u64> {
        let charged = std::cell::Cell::new((0, 0));
        let (before, after) = self.update(|tat| {
            let n = want.min(gcra.available(tat, now));
            // A capacity is at least one token, so both costs are valid.
            let cost_ticks = gcra.cost_ticks(n.max(1)).map_err(|_| u64::MAX)?;
            if n == 0 {
                return Err(gcra.decide(tat, now, cost_ticks, 0).err().unwrap_or(0));
            }
            charged.set((n, cost_ticks));
            gcra.decide(tat, now, cost_ticks, 0)
        })?;
        let (granted, cost_ticks) = charged.get();
        Ok((
            granted,
            Admission {
                before,
                after,
                at: now,
                tokens: granted,
                cost_ticks,
                generation,
            },
        ))
    }

    /// Returns `cost` tokens unconditionally (the caller vouches for them),
    /// rounded down to whole ticks. Returns false, changing nothing, if the
    /// state is sealed.
    pub(crate) fn refund(&self, gcra: &Gcra, cost: u64) -> bool {
        self.update(|tat| match tat {
            SEALED => Err(()),
            tat => Ok(gcra.refunded(tat, cost)),
        })
        .is_ok()
    }

    /// Charges `ticks` at `now` whether or not they fit: the excess of a
    /// settled cost over its estimate ([`Receipt::settle`](crate::Receipt::settle)).
    /// The state moves to `max(tat, now) + ticks` (stopping at
    /// [`LAST`](crate::gcra::LAST)), beyond `now + B·T` if need be: a debt
    /// that every later admission waits out, so nothing the excess used is
    /// ever handed out again. Linearizes at the successful
    /// compare-and-swap. Returns the state it replaced and the one it
    /// wrote, or `None`, changing nothing, if the state is sealed (its
    /// holder then debits the successor).
    pub(crate) fn debit(&self, ticks: u64, mut now: impl FnMut() -> u64) -> Option<(u64, u64)> {
        self.update(|tat| match tat {
            SEALED => Err(()),
            tat => Ok(tat.max(now()).saturating_add(ticks).min(crate::gcra::LAST)),
        })
        .ok()
    }

    /// Whole tokens available at `now`.
    #[inline]
    pub(crate) fn available(&self, gcra: &Gcra, now: u64) -> u64 {
        gcra.available(self.0.load(Ordering::Acquire), now)
    }

    /// Whether the bucket holds its full capacity at `now`, and so is
    /// indistinguishable from a fresh full bucket from then on.
    #[cfg(feature = "keyed")]
    #[inline]
    pub(crate) fn is_full(&self, now: u64) -> bool {
        self.0.load(Ordering::Acquire) <= now
    }

    /// Makes the bucket no fuller than a bucket full at `at`.
    #[cfg(feature = "keyed")]
    pub(crate) fn raise_to(&self, at: u64) {
        self.0.fetch_max(at, Ordering::AcqRel);
    }

    /// The state, taken out of a bucket no other thread can reach: a keyed
    /// table's entry under its shard's write lock, while a quota change
    /// replaces it with its converted state.
    #[cfg(feature = "keyed")]
    pub(crate) fn into_inner(self) -> u64 {
        self.0.into_inner()
    }

    /// Makes the bucket full. Returns false, changing nothing, if the state
    /// is sealed.
    pub(crate) fn reset(&self) -> bool {
        // A compare-and-swap loop rather than a swap, which would unseal a
        // sealed word. (Not a plain store either: loom mis-orders a store
        // racing a compare-and-swap, tokio-rs/loom#254.)
        self.update(|tat| match tat {
            SEALED => Err(()),
            _ => Ok(FULL),
        })
        .is_ok()
    }

    /// Whether the state has moved to another quota for good. Acquire:
    /// whoever sees the seal sees everything written before it (the
    /// successor's state, and where to find it).
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.0.load(Ordering::Acquire) == SEALED
    }

    /// Seals the state: `carry` is given each state the seal may replace
    /// (it writes the successor's state from it), and the compare-and-swap
    /// from that state to [`SEALED`] is retried until it succeeds, so the
    /// successor holds the carry of exactly the state that was sealed. The
    /// caller must be the only one to seal this word. Linearizes at the
    /// successful compare-and-swap; release, so whoever sees the seal sees
    /// what `carry` wrote.
    pub(crate) fn seal(&self, mut carry: impl FnMut(u64)) {
        let sealed: Result<_, Infallible> = self.update(|tat| {
            carry(tat);
            Ok(SEALED)
        });
        let Ok(_) = sealed;
    }

    /// Seals the state if `idle` holds for it (a keyed bucket shared with
    /// the threads that cache it, dropped full): whether it did. A decision
    /// that changed the state first keeps it unsealed. Linearizes at the
    /// successful compare-and-swap, or at the load `idle` refused.
    #[cfg(feature = "keyed")]
    pub(crate) fn seal_if(&self, idle: impl Fn(u64) -> bool) -> bool {
        self.update(|tat| {
            if tat != SEALED && idle(tat) {
                Ok(SEALED)
            } else {
                Err(())
            }
        })
        .is_ok()
    }

    /// The state now, for a copy made where no other thread writes it (a
    /// keyed entry under its shard's write lock, as it is shared).
    #[cfg(feature = "keyed")]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Writes the state of a word no other thread can reach yet (a
    /// successor before its predecessor's seal publishes it).
    pub(crate) fn set(&self, tat: u64) {
        // Relaxed: the seal's release publishes it.
        self.0.store(tat, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket of 2 tokens at one token per 1000 ticks.
    fn gcra() -> Gcra {
        Gcra::new(2, 1, std::time::Duration::from_nanos(1000)).unwrap()
    }

    #[test]
    fn an_undo_at_the_admission_reading_restores_the_state_exactly() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        let admission = tat.admit(&g, 500, 1, 1000, 0, FIRST).unwrap();
        tat.undo(&g, &admission, 1000, FIRST, || 500);
        assert_eq!(tat.0.load(Ordering::Acquire), FULL);
    }

    #[test]
    fn an_undo_of_a_reservation_still_ahead_is_exact_however_long_it_was_held() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        tat.admit(&g, 0, 2, 2000, 0, FIRST).unwrap();
        // Due at 1000, its slot ends at 3000; undone at 900, held 900.
        let reservation = tat.admit(&g, 0, 1, 1000, 2000, FIRST).unwrap();
        assert_eq!(tat.undo(&g, &reservation, 1000, FIRST, || 900), 1000);
        assert_eq!(tat.0.load(Ordering::Acquire), 2000);
    }

    #[test]
    fn once_the_clock_moved_a_matching_word_proves_nothing() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        // Nothing came between, but the undo cannot know that: cost less
        // the time held.
        let admission = tat.admit(&g, 500, 1, 1000, 0, FIRST).unwrap();
        assert_eq!(tat.undo(&g, &admission, 1000, FIRST, || 900), 600);
        assert_eq!(tat.0.load(Ordering::Acquire), 900);
    }

    #[test]
    fn an_undo_after_another_admission_returns_the_cost_less_the_time_held() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        // Full at 0: ours takes a token (state 1000), another admission at
        // 500 takes one more (2000). Without ours, that admission would have
        // left 1500; returning our whole token would leave 1000 and hand out
        // the 500 ticks of refill the full bucket wasted.
        let ours = tat.admit(&g, 0, 1, 1000, 0, FIRST).unwrap();
        tat.admit(&g, 500, 1, 1000, 0, FIRST).unwrap();
        tat.undo(&g, &ours, 1000, FIRST, || 600);
        assert_eq!(tat.0.load(Ordering::Acquire), 1600);
        assert!(tat.0.load(Ordering::Acquire) >= 1500);
    }

    #[test]
    fn an_undo_under_another_generation_returns_nothing() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        let admission = tat.admit(&g, 500, 1, 1000, 0, FIRST).unwrap();
        assert_eq!(admission.generation, FIRST);
        assert_eq!(tat.undo(&g, &admission, 1000, FIRST + 1, || 500), 0);
        assert_eq!(tat.0.load(Ordering::Acquire), 1500);
        assert_eq!(tat.undo(&g, &admission, 1000, FIRST, || 500), 1000);
    }

    #[test]
    fn every_operation_on_a_sealed_word_fails_and_leaves_it_sealed() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        let admission = tat.admit(&g, 0, 1, 1000, 0, FIRST).unwrap();
        tat.seal(|state| assert_eq!(state, 1000));
        let end = u64::MAX - 1;
        for now in [0, 5000, end, u64::MAX] {
            assert!(tat.admit(&g, now, 1, 1000, u64::MAX, FIRST).is_err());
            assert!(tat.admit_up_to(&g, now, 2, FIRST).is_err());
            assert!(tat.wait_for(&g, now, 1000) > 0);
            assert_eq!(tat.available(&g, now), 0);
            assert_eq!(tat.undo(&g, &admission, 1000, FIRST, || now), 0);
            assert_eq!(tat.undo_inexact(&g, now, 1000, 1000, || now), 0);
            assert!(tat.is_sealed(), "at {now}");
        }
        assert!(!tat.refund(&g, 2));
        assert!(!tat.reset());
        assert!(tat.is_sealed());
    }

    #[test]
    fn an_undo_once_the_cost_has_refilled_returns_nothing() {
        let (g, tat) = (gcra(), Tat::new(FULL));
        let ours = tat.admit(&g, 0, 1, 1000, 0, FIRST).unwrap();
        tat.admit(&g, 1500, 1, 1000, 0, FIRST).unwrap();
        tat.undo(&g, &ours, 1000, FIRST, || 1500);
        assert_eq!(tat.0.load(Ordering::Acquire), 2500);
    }
}
