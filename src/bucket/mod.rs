//! The lock-free token bucket: one atomic word, one compare-and-swap loop.

mod states;

use std::time::Duration;

use crate::advertised::{Advertised, Shape};
use crate::clock::{Clock, DefaultClock};
use crate::error::AcquireError;
use crate::gcra::Gcra;
use crate::limit::{Identity, Limit, Taken, sealed};
use crate::quota::Quota;
use crate::state::Admission;
use crate::timeline::{Behind, Reading, Timeline};
use states::{State, States};

/// A token bucket whose whole state is one cache-padded `AtomicU64`.
///
/// Every decision reads the clock once, then runs a compare-and-swap loop on
/// the state; a denial never writes. The quota can change at run time
/// ([`set_quota`](Self::set_quota)), carrying the state over by the rule of
/// [`docs/semantics.md`](crate::guide::semantics), "Changing a quota".
///
/// Linearization points (see [`docs/proofs.md`](crate::guide::proofs)):
/// - an admission ([`try_acquire`](Limit::try_acquire), [`reserve`](Limit::reserve))
///   takes effect at its successful compare-and-swap;
/// - a denial and [`available`](Limit::available) at the load (or failed
///   compare-and-swap) whose value they decided on;
/// - a [`Receipt`](crate::Receipt)'s undo at its successful
///   compare-and-swap (or, if nothing is owed any more, at the load that
///   showed it);
/// - [`refund`](Self::refund) at its successful compare-and-swap;
/// - [`reset`](Self::reset) at its successful compare-and-swap;
/// - [`set_quota`](Self::set_quota) at the compare-and-swap that seals the
///   old quota's state; an operation that meets the seal wrote nothing, and
///   runs again under the new quota, linearizing there.
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
    /// The GCRA theoretical arrival time and the quota it is kept under,
    /// in the quota's ticks since the timeline's origin: inline, and on the
    /// heap after a change of quota.
    states: States,
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
            states: States::new(quota, tat),
            timeline: Timeline::new(clock),
        }
    }

    /// The current tick of this bucket's timeline in `gcra`'s ticks, on
    /// which a striped bucket's pools place their slots too.
    #[inline]
    pub(crate) fn ticks_now(&self, gcra: &Gcra) -> u64 {
        self.timeline.now(gcra)
    }

    /// The quota in force and its generation (0 before any change).
    pub(crate) fn in_force(&self) -> (Quota, u64) {
        self.states.in_force()
    }

    /// Gives back `tokens` of what `admission` took (all of it from
    /// `admission.tokens` on), by the one rule that never mints credit
    /// (`Tat::undo`; nothing across a change of quota); returns the ticks
    /// given back.
    pub(crate) fn undo_admission(&self, admission: &Admission, tokens: u64) -> u64 {
        self.states.on_state(
            |state| {
                let gcra = state.gcra();
                let ticks = gcra.returned_ticks(admission.tokens, tokens);
                state
                    .tat
                    .undo(gcra, admission, ticks, state.generation, || {
                        self.timeline.now(gcra)
                    })
            },
            |&returned| returned == 0,
        )
    }

    /// Gives back `unused` of a lease of `granted` tokens decided at tick
    /// `at` under quota `generation` (by [`Self::grant_up_to`]), by the
    /// inexact half of the same rule; nothing across a change of quota.
    pub(crate) fn undo_lease(&self, granted: u64, at: u64, unused: u64, generation: u64) {
        self.states.on_state(
            |state| {
                if state.generation != generation {
                    return 0;
                }
                let gcra = state.gcra();
                let cost = gcra.returned_ticks(granted, granted);
                let returned = gcra.returned_ticks(granted, unused);
                state
                    .tat
                    .undo_inexact(gcra, at, cost, returned, || self.timeline.now(gcra))
            },
            |&returned| returned == 0,
        );
    }

    /// Grants as many of `want` tokens as the bucket holds now (none if it
    /// is empty), in one compare-and-swap: the grant and its admission.
    pub(crate) fn grant_up_to(&self, want: u64) -> Option<(u64, Admission)> {
        self.states.on_state(
            |state| {
                let gcra = state.gcra();
                state
                    .tat
                    .admit_up_to(gcra, self.timeline.now(gcra), want, state.generation)
                    .ok()
            },
            Option::is_none,
        )
    }

    /// Admits `cost` tokens on `state` at the clock `reading` with a wait of
    /// up to `max_wait`: validates the cost and runs the decision in the
    /// state's compare-and-swap loop, then gives `done` the admission and
    /// how to tell its wait. Every admission of the bucket comes through
    /// here ([`docs/architecture.md`](crate::guide::architecture), "The decision path").
    /// The clock is read once per decision, before the first state is
    /// tried: a decision that meets a seal and runs again on the successor
    /// reads it no second time.
    ///
    /// A reading before the bucket's creation is decided at the creation,
    /// with the reservation's budget less the gap, and every wait measured
    /// from the reading ([`Behind`]); each adjustment sits on a branch
    /// taken only then, and the admission's own path computes nothing of
    /// it (`docs/benchmarks.md`, "Readings before a limiter's creation").
    // Always inlined, as are its callers: out of line, its result comes
    // back through memory and the caller copies it (`docs/benchmarks.md`,
    // "Measured design choices").
    #[inline(always)]
    fn admit_on<R>(
        &self,
        state: &State,
        reading: Reading,
        cost: u64,
        max_wait: Duration,
        done: impl FnOnce(Admission, Wait<'_>) -> R,
    ) -> Result<R, AcquireError> {
        let gcra = state.gcra();
        let cost_ticks = gcra.cost_ticks(cost)?;
        let behind = reading.behind();
        let slack = match behind {
            None => gcra.ticks_of(max_wait),
            Some(behind) => {
                std::hint::cold_path();
                gcra.ticks_of(behind.budget(max_wait))
            }
        };
        let admission = state
            .tat
            .admit(
                gcra,
                gcra.ticks(reading.nanos()),
                cost,
                cost_ticks,
                slack,
                state.generation,
            )
            .map_err(|refused| match behind {
                None => refused,
                Some(behind) => behind.refusal(refused, max_wait),
            })?;
        Ok(done(admission, Wait { gcra, behind }))
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
        self.states
            .on_state(|state| state.tat.refund(state.gcra(), cost), |&done| !done);
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
        self.states
            .on_state(|state| state.tat.reset(), |&done| !done);
    }

    /// The quota this bucket enforces now: the last one
    /// [`set_quota`](Self::set_quota) put in force, or the one it was built
    /// with.
    ///
    /// ```
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(2)?);
    /// assert_eq!(bucket.quota().capacity(), 2);
    /// bucket.set_quota(Quota::per_second(5)?);
    /// assert_eq!(bucket.quota(), Quota::per_second(5)?);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.in_force().0
    }

    /// Changes the quota at run time, without losing the bucket's state.
    ///
    /// At the instant of the change, the whole tokens available carry over,
    /// clipped to the new capacity; a debt (reservations promised beyond
    /// what is available) carries over as the instant it is paid, so every
    /// start time already promised stays valid. A change never mints
    /// credit, and changing back and forth never gains tokens
    /// ([`docs/semantics.md`](crate::guide::semantics), "Changing a
    /// quota"). Admissions decided before the change are not given back
    /// after it: a [`Receipt`](crate::Receipt) taken before it undoes
    /// nothing. The new quota's initial credit plays no part: the bucket
    /// is not new.
    ///
    /// Decisions stay lock-free while a change runs (changes are serialised
    /// among themselves); one that races the change either linearizes
    /// before it or runs again under the new quota. A quota with the same
    /// capacity and emission interval as the one in force changes nothing.
    /// Nothing can fail: a [`Quota`] in hand is valid, and every state has
    /// a carry under every quota. Until the first change, decisions cost
    /// exactly what they cost without this method; after one, each also
    /// loads the word the change sealed and the current state
    /// ([`docs/benchmarks.md`](crate::guide::benchmarks), "Changing a
    /// quota").
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, clock.clone());
    /// bucket.try_acquire(4)?;
    /// // 6 tokens left; a capacity of 3 keeps 3 of them.
    /// bucket.set_quota(Quota::per_second(3)?);
    /// assert_eq!(bucket.available(), 3);
    /// // Raising it again brings nothing back: 3 tokens, refilling at 20/s.
    /// bucket.set_quota(Quota::per_second(20)?);
    /// assert_eq!(bucket.available(), 3);
    /// clock.advance(Duration::from_millis(100));
    /// assert_eq!(bucket.available(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.states.change(quota, || self.timeline.nanos());
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

/// How to tell an admission's caller its wait: in the quota's ticks
/// rounded up to the nanosecond, from a reading `behind` the bucket's
/// creation too. Computed only by the callers that report it: the rounding
/// divides, and a division the compiler cannot prove harmless stays on the
/// path of every admission whose caller drops the wait.
struct Wait<'a> {
    gcra: &'a Gcra,
    behind: Option<Behind>,
}

impl Wait<'_> {
    #[inline(always)]
    fn of(&self, admission: &Admission) -> Duration {
        let wait = self.gcra.duration(admission.wait(self.gcra));
        match self.behind {
            None => wait,
            Some(behind) => {
                std::hint::cold_path();
                behind.wait(wait)
            }
        }
    }
}

// Always inlined, like `admit`: a `reserve` through the trait left
// `take_within` out of line and could no longer fold its constant
// `max_wait` into ticks once per loop (`docs/benchmarks.md`, "Measured
// design choices").
impl<C: Clock> sealed::Sealed for TokenBucket<C> {
    #[inline(always)]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        let reading = self.timeline.read();
        let admission = self.states.on_state(
            #[inline(always)]
            move |state| {
                self.admit_on(state, reading, cost, Duration::ZERO, |admission, _| {
                    admission
                })
            },
            Result::is_err,
        )?;
        Ok(Taken::own(admission, cost))
    }

    // The wait is computed inside, under the quota that admitted.
    #[inline(always)]
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        let reading = self.timeline.read();
        let (admission, wait) = self.states.on_state(
            #[inline(always)]
            move |state| {
                self.admit_on(state, reading, cost, max_wait, |admission, wait| {
                    (admission, wait.of(&admission))
                })
            },
            Result::is_err,
        )?;
        Ok((Taken::own(admission, cost), wait))
    }

    fn undo(&self, taken: &Taken) {
        if let Some(admission) = taken.admission() {
            self.undo_admission(admission, taken.tokens);
        }
    }

    /// Under the quota in force, whichever the admission was decided
    /// under: a debt is a charge, and a charge never mints.
    fn debit(&self, tokens: u64) {
        self.states.on_state(
            |state| {
                let gcra = state.gcra();
                let ticks = gcra.debt_ticks(tokens);
                tokens == 0 || state.tat.debit(ticks, || self.timeline.now(gcra)).is_some()
            },
            |&done| !done,
        );
    }

    fn capacity(&self) -> u64 {
        self.quota().capacity()
    }

    fn identity(&self) -> Identity {
        Identity::of(self)
    }
}

impl<C: Clock> Advertised for TokenBucket<C> {
    fn shape(&self) -> Shape {
        Shape::from(&self.quota())
    }

    fn idle_reset(&self) -> Duration {
        self.quota().refill_interval()
    }
}

// `try_acquire` and `reserve` decide on their own, rather than through
// `take` and `take_within` as the trait's defaults do: a decision may run
// on the inline state or on a successor, and the two outcomes meet as a
// value built in memory unless that value is as small as their own.
impl<C: Clock> Limit for TokenBucket<C> {
    #[inline(always)]
    fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        let reading = self.timeline.read();
        self.states.on_state(
            #[inline(always)]
            move |state| self.admit_on(state, reading, cost, Duration::ZERO, |_, _| ()),
            Result::is_err,
        )
    }

    #[inline(always)]
    fn reserve(&self, cost: u64, max_wait: Duration) -> Result<Duration, AcquireError> {
        let reading = self.timeline.read();
        self.states.on_state(
            #[inline(always)]
            move |state| {
                self.admit_on(state, reading, cost, max_wait, |admission, wait| {
                    wait.of(&admission)
                })
            },
            Result::is_err,
        )
    }

    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.states.on_state(
            |state| {
                let gcra = state.gcra();
                let cost_ticks = gcra.cost_ticks(cost)?;
                let reading = self.timeline.read();
                let now = gcra.ticks(reading.nanos());
                let wait = gcra.duration(state.tat.wait_for(gcra, now, cost_ticks));
                Ok(match reading.behind() {
                    None => wait,
                    Some(behind) => {
                        std::hint::cold_path();
                        behind.wait(wait)
                    }
                })
            },
            // A wait (or a cost above the capacity) may come from a sealed
            // word; no wait cannot.
            |wait| *wait != Ok(Duration::ZERO),
        )
    }

    fn available(&self) -> u64 {
        self.states.on_state(
            |state| {
                let gcra = state.gcra();
                state.tat.available(gcra, self.timeline.now(gcra))
            },
            |&tokens| tokens == 0,
        )
    }
}
