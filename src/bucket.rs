//! The lock-free token bucket: one atomic word, one compare-and-swap loop.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::state::{Admission, Tat};
use crate::timeline::Timeline;
use crate::{AcquireError, Clock, DefaultClock, Quota};

/// A token bucket whose whole state is one cache-padded `AtomicU64`.
///
/// Every decision reads the clock once, then runs a compare-and-swap loop on
/// the state; a denial never writes. The quota beside the state is immutable.
///
/// Linearization points (see [`docs/design.md`](crate::guide::design)):
/// - an admission ([`try_acquire`](Self::try_acquire), [`reserve`](Self::reserve))
///   takes effect at its successful compare-and-swap;
/// - a denial and [`available`](Self::available) at the load (or failed
///   compare-and-swap) whose value they decided on;
/// - a [`Receipt`](crate::Receipt)'s undo at its successful
///   compare-and-swap (or, if nothing is owed any more, at the load that
///   showed it);
/// - [`refund`](Self::refund) at its successful compare-and-swap;
/// - [`reset`](Self::reset) at its swap.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, TokenBucket};
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
    /// use tollgate::{Quota, TokenBucket};
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
    /// use tollgate::{InitialCredit, ManualClock, Quota, TokenBucket};
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

    /// Takes `cost` tokens now, or refuses without spending anything.
    ///
    /// A refusal carries the exact wait until `cost` would fit, rounded up to
    /// the nanosecond. A cost above the capacity can never fit and gets
    /// [`AcquireError::ExceedsCapacity`]; a cost of zero gets
    /// [`AcquireError::ZeroCost`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::new());
    /// bucket.try_acquire(3)?;
    /// // 3/s is an emission interval of 333_333_333.3 ns, rounded up.
    /// assert_eq!(
    ///     bucket.try_acquire(1),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_nanos(333_333_334) }),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        // Admitted with no slack is admitted now: there is no wait to work out.
        self.admit(cost, 0).map(drop)
    }

    /// Takes `cost` tokens now and tells the caller how long to wait before
    /// using them, provided that wait is at most `max_wait`; otherwise refuses
    /// without spending anything.
    ///
    /// This is *delay* rather than denial: the tokens are spent at once (the
    /// bucket goes into debt), and the caller starts its work after the
    /// returned wait, which keeps the start times within the quota (to the
    /// nanosecond the wait is rounded up to; see [`docs/semantics.md`](crate::guide::semantics)). A refusal
    /// reports how much later the same call would succeed. Nothing queues:
    /// the wait is the caller's to honour.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// assert_eq!(bucket.reserve(2, Duration::ZERO)?, Duration::ZERO);
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(1))?, Duration::from_millis(500));
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(1))?, Duration::from_secs(1));
    /// assert!(bucket.reserve(1, Duration::from_secs(1)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn reserve(&self, cost: u64, max_wait: Duration) -> Result<Duration, AcquireError> {
        let gcra = self.quota.gcra();
        self.admit(cost, gcra.ticks_of(max_wait))
            .map(|admission| gcra.duration(admission.wait(gcra)))
    }

    /// Takes `cost` tokens and waits until they may be used: the async form
    /// of [`reserve`](Self::reserve), for callers that prefer delay to
    /// denial. If the tokens exist within `max_wait`, they are reserved at
    /// once and the future completes after the wait (on tokio's timer);
    /// otherwise it refuses at once, spending nothing, with the exact
    /// `retry_after`.
    ///
    /// Cancellation-safe: dropping the future before its wait ends gives the
    /// reservation back by the rule that never mints credit: exactly, if
    /// nothing else reserved since; nothing, while a later reservation
    /// holds the bucket's future (its start was promised); otherwise the cost
    /// less the time held ([`docs/semantics.md`](crate::guide::semantics), "Giving back").
    ///
    /// Fairness: first come, first served. A caller's slot is fixed when it
    /// calls, and every later call, however small, is scheduled after it, so
    /// a large request is never starved by a stream of small ones; it is only
    /// refused when its own slot lies beyond its `max_wait`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// bucket.acquire(2, Duration::ZERO).await?;
    /// let started = tokio::time::Instant::now();
    /// bucket.acquire(1, Duration::from_secs(1)).await?; // waits 500 ms
    /// assert_eq!(started.elapsed(), Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, cost: u64, max_wait: Duration) -> Result<(), AcquireError> {
        self.acquire_observed(cost, max_wait, &()).await
    }

    /// [`Self::acquire`], telling `observer` of its wait and abandonment.
    #[cfg(feature = "tokio")]
    pub(crate) async fn acquire_observed(
        &self,
        cost: u64,
        max_wait: Duration,
        observer: &impl crate::waiting::WaitObserver,
    ) -> Result<(), AcquireError> {
        let gcra = self.quota.gcra();
        let admission = self.admit(cost, gcra.ticks_of(max_wait))?;
        let wait = gcra.duration(admission.wait(gcra));
        crate::waiting::sleep_or_give_back(wait, observer, || {
            self.undo(&admission, u64::MAX);
        })
        .await;
        Ok(())
    }

    /// Gives back `tokens` of what `admission` took (all of it from
    /// `admission.tokens` on), by the one rule that never mints credit
    /// (`Tat::undo`); returns the ticks given back.
    pub(crate) fn undo(&self, admission: &Admission, tokens: u64) -> u64 {
        let gcra = self.quota.gcra();
        let ticks = gcra.returned_ticks(admission.tokens, tokens);
        self.tat.undo(gcra, admission, ticks, || self.now())
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
            .admit_up_to(self.quota.gcra(), self.now(), want)
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
        self.tat.admit(gcra, self.now(), cost, cost_ticks, slack)
    }

    /// How long until `cost` tokens would be admitted, zero if they would be
    /// now. Spends nothing: another caller may take the credit first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// assert_eq!(bucket.retry_after(4)?, Duration::ZERO);
    /// bucket.try_acquire(4)?;
    /// assert_eq!(bucket.retry_after(2)?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        let gcra = self.quota.gcra();
        let cost_ticks = gcra.cost_ticks(cost)?;
        Ok(gcra.duration(self.tat.wait_for(gcra, self.now(), cost_ticks)))
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
    /// use tollgate::{ManualClock, Quota, TokenBucket};
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

    /// Whole tokens available now (zero while reservations hold the bucket in
    /// debt).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, clock.clone());
    /// bucket.try_acquire(2)?;
    /// clock.advance(Duration::from_millis(999));
    /// assert_eq!(bucket.available(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn available(&self) -> u64 {
        self.tat.available(self.quota.gcra(), self.now())
    }

    /// Refills the bucket to capacity, cancelling any debt: a trusted
    /// operation like [`refund`](Self::refund) (it forgives outstanding
    /// receipts too, whose undo may then return their cost once more).
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
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
