//! The lock-free token bucket: one atomic word, one compare-and-swap loop.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::limit::{Limit, Shape, Taken, sealed};
use crate::state::{Admission, FIRST, Tat};
use crate::timeline::Timeline;
use crate::{AcquireError, Clock, DefaultClock, Quota};

/// A token bucket whose whole state is one cache-padded `AtomicU64`.
///
/// Every decision reads the clock once, then runs a compare-and-swap loop on
/// the state; a denial never writes. The quota beside the state is immutable.
///
/// Linearization points (see [`docs/design.md`](crate::guide::design)):
/// - an admission ([`try_acquire`](Limit::try_acquire), [`reserve`](Limit::reserve))
///   takes effect at its successful compare-and-swap;
/// - a denial and [`available`](Limit::available) at the load (or failed
///   compare-and-swap) whose value they decided on;
/// - a [`Receipt`](crate::Receipt)'s undo at its successful
///   compare-and-swap (or, if nothing is owed any more, at the load that
///   showed it);
/// - [`refund`](Self::refund) at its successful compare-and-swap;
/// - [`reset`](Self::reset) at its swap.
///
/// Its decisions are the methods of [`Limit`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::new(3, 2, Duration::from_secs(1))?, clock.clone());
/// for _ in 0..3 {
///     bucket.try_acquire(1)?;
/// }
/// assert!(bucket.try_acquire(1).is_err());
/// clock.advance(Duration::from_millis(500));
/// bucket.try_acquire(1)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TokenBucket<C = DefaultClock> {
    /// The GCRA theoretical arrival time, in the quota's ticks since the
    /// timeline's origin.
    tat: CachePadded<Tat>,
    quota: Quota,
    timeline: Timeline<C>,
}

impl TokenBucket<DefaultClock> {
    /// A bucket on the [`DefaultClock`].
    ///
    /// ```
    /// use tollgate::{Limit, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(100)?);
    /// assert!(bucket.try_acquire(1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        TokenBucket::with_clock(quota, DefaultClock::new())
    }
}

impl<C: Clock> TokenBucket<C> {
    /// A bucket reading time from `clock`, starting with the quota's initial
    /// credit.
    ///
    /// ```
    /// use tollgate::{InitialCredit, Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let quota = Quota::per_second(5)?.with_initial_credit(InitialCredit::Empty)?;
    /// let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    /// assert_eq!(bucket.available(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        // Ticks count from creation, so "full" is tick 0 and a missing
        // credit is a debt from there.
        let tat = quota.gcra().initial_tat(quota.initial_credit());
        TokenBucket {
            tat: CachePadded::new(Tat::new(tat)),
            quota,
            timeline: Timeline::new(clock),
        }
    }

    /// The current tick of this bucket's timeline, on which a striped
    /// bucket's pools place their slots too.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.timeline.now(self.quota.gcra())
    }

    /// Gives back `tokens` of what `admission` took (all of it from
    /// `admission.tokens` on), by the one rule that never mints credit
    /// (`Tat::undo`); returns the ticks given back.
    pub(crate) fn undo_admission(&self, admission: &Admission, tokens: u64) -> u64 {
        let gcra = self.quota.gcra();
        let ticks = gcra.returned_ticks(admission.tokens, tokens);
        self.tat.undo(gcra, admission, ticks, FIRST, || self.now())
    }

    /// Gives back `unused` of a lease of `granted` tokens decided at tick
    /// `at` (by [`Self::grant_up_to`]), by the inexact half of the same rule.
    pub(crate) fn undo_lease(&self, granted: u64, at: u64, unused: u64) {
        let gcra = self.quota.gcra();
        let cost = gcra.returned_ticks(granted, granted);
        let returned = gcra.returned_ticks(granted, unused);
        self.tat
            .undo_inexact(gcra, at, cost, returned, || self.now());
    }

    /// Grants as many of `want` tokens as the bucket holds now (none if it
    /// is empty), in one compare-and-swap: the grant and its admission.
    pub(crate) fn grant_up_to(&self, want: u64) -> Option<(u64, Admission)> {
        self.tat
            .admit_up_to(self.quota.gcra(), self.now(), want, FIRST)
            .ok()
    }

    /// Admits `cost` tokens with up to `slack` ticks of delay: validates
    /// the cost, reads the clock, and runs the decision in the state's
    /// compare-and-swap loop. Every admission of the bucket comes through
    /// here ([`docs/design.md`](crate::guide::design), "The decision path").
    // Always inlined: out of line, its result comes back through memory and
    // the caller copies it (`docs/benchmarks.md`, "Measured design choices").
    #[inline(always)]
    pub(crate) fn admit(&self, cost: u64, slack: u64) -> Result<Admission, AcquireError> {
        let gcra = self.quota.gcra();
        let cost_ticks = gcra.cost_ticks(cost)?;
        self.tat
            .admit(gcra, self.now(), cost, cost_ticks, slack, FIRST)
    }

    /// Returns `cost` tokens unconditionally: a trusted operation, for a
    /// caller who knows what it holds. Credit is clipped at the capacity. A
    /// cost of zero is a no-op.
    ///
    /// Refunding more than was taken, or long after it was taken, grants
    /// credit that was never spent, so no path a client can trigger should
    /// call it: to give back an admission, take it as a
    /// [`Receipt`](crate::Receipt) and [`undo`](crate::Receipt::undo) it,
    /// the rule that never mints credit. No layer of this crate refunds.
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// bucket.try_acquire(3)?;
    /// bucket.refund(2);
    /// assert_eq!(bucket.available(), 3);
    /// bucket.refund(100);
    /// assert_eq!(bucket.available(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, cost: u64) {
        if cost == 0 {
            return;
        }
        self.tat.refund(self.quota.gcra(), cost);
    }

    /// Refills the bucket to capacity, cancelling any debt: a trusted
    /// operation like [`refund`](Self::refund) (it forgives outstanding
    /// receipts too, whose undo may then return their cost once more).
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// bucket.try_acquire(2)?;
    /// bucket.reset();
    /// assert_eq!(bucket.available(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) {
        self.tat.reset();
    }

    /// The quota this bucket enforces.
    ///
    /// ```
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(2)?);
    /// assert_eq!(bucket.quota().capacity(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock this bucket reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// bucket.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        self.timeline.clock()
    }
}

// Always inlined, like `admit`: a `reserve` through the trait left
// `take_within` out of line and could no longer fold its constant
// `max_wait` into ticks once per loop (`docs/benchmarks.md`, "Measured
// design choices").
impl<C: Clock> sealed::Sealed for TokenBucket<C> {
    #[inline(always)]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        Ok(Taken::own(self.admit(cost, 0)?, cost))
    }

    #[inline(always)]
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        let gcra = self.quota.gcra();
        let admission = self.admit(cost, gcra.ticks_of(max_wait))?;
        let wait = gcra.duration(admission.wait(gcra));
        Ok((Taken::own(admission, cost), wait))
    }

    fn undo(&self, taken: &Taken) {
        if let Some(admission) = taken.admission() {
            self.undo_admission(admission, taken.tokens);
        }
    }

    fn shape(&self) -> Shape {
        Shape::of_quota(&self.quota)
    }

    fn idle_reset(&self) -> Duration {
        self.quota.refill_interval()
    }
}

impl<C: Clock> Limit for TokenBucket<C> {
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        let gcra = self.quota.gcra();
        let cost_ticks = gcra.cost_ticks(cost)?;
        Ok(gcra.duration(self.tat.wait_for(gcra, self.now(), cost_ticks)))
    }

    fn available(&self) -> u64 {
        self.tat.available(self.quota.gcra(), self.now())
    }
}
