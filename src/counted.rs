//! Opt-in decision counters: a limiter wrapped in [`Counted`] counts what it
//! admits and refuses; an unwrapped limiter pays nothing.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::advertised::{Advertised, Shape};
use crate::error::AcquireError;
#[cfg(feature = "keyed")]
use crate::keyed::{KeyRef, PerKey};
use crate::limit::{Identity, Limit, Taken, sealed};
use crate::sync::{AtomicU64, Ordering};

/// Counts of a [`Counted`] limiter's decisions, summed over threads.
///
/// ```
/// use tollgate::DecisionStats;
///
/// assert_eq!(DecisionStats::default().admitted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionStats {
    /// Requests granted their tokens. A `reserve` or an async `acquire`
    /// counts when its tokens are reserved, before its wait.
    pub admitted: u64,
    /// Tokens they took.
    pub admitted_cost: u64,
    /// Requests refused for want of tokens (`Insufficient`).
    pub denied: u64,
    /// Tokens those refused requests asked for.
    pub denied_cost: u64,
    /// Requests refused for any other reason (a bad cost, a full key table).
    pub rejected: u64,
    /// Admissions that came with a non-zero wait (`reserve`, `acquire`),
    /// counted when the wait is granted: waits under way and abandoned
    /// ones included.
    pub delayed: u64,
    /// Those waits, summed as granted, in nanoseconds.
    pub delay_nanos: u64,
    /// Admissions given back to the limiter: async `acquire`s dropped
    /// before their wait ended, receipts undone, and hierarchy steps
    /// undone because a later step refused. They are counted in `admitted`
    /// (and a wait in `delayed`) too: tokens in use are `admitted_cost`
    /// less what they gave back.
    pub abandoned: u64,
}

impl DecisionStats {
    /// Field by field, saturating.
    fn plus(self, other: DecisionStats) -> DecisionStats {
        DecisionStats {
            admitted: self.admitted.saturating_add(other.admitted),
            admitted_cost: self.admitted_cost.saturating_add(other.admitted_cost),
            denied: self.denied.saturating_add(other.denied),
            denied_cost: self.denied_cost.saturating_add(other.denied_cost),
            rejected: self.rejected.saturating_add(other.rejected),
            delayed: self.delayed.saturating_add(other.delayed),
            delay_nanos: self.delay_nanos.saturating_add(other.delay_nanos),
            abandoned: self.abandoned.saturating_add(other.abandoned),
        }
    }
}

/// One stripe of counters, on a cache line of its own.
#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    admitted_cost: AtomicU64,
    denied: AtomicU64,
    denied_cost: AtomicU64,
    rejected: AtomicU64,
    delayed: AtomicU64,
    delay_nanos: AtomicU64,
    abandoned: AtomicU64,
}

impl Stripe {
    fn snapshot(&self) -> DecisionStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DecisionStats {
            admitted: read(&self.admitted),
            admitted_cost: read(&self.admitted_cost),
            denied: read(&self.denied),
            denied_cost: read(&self.denied_cost),
            rejected: read(&self.rejected),
            delayed: read(&self.delayed),
            delay_nanos: read(&self.delay_nanos),
            abandoned: read(&self.abandoned),
        }
    }
}

/// A stripe, and whether the calling thread is its only writer.
#[derive(Clone, Copy)]
struct Writer<'a> {
    stripe: &'a Stripe,
    exclusive: bool,
}

impl Writer<'_> {
    /// Adds `by` to one of the stripe's counters, saturating (a total that
    /// reaches `u64::MAX` stays there rather than wrapping to small). An
    /// only writer loses nothing with a load and a store, a fraction of the
    /// cost of a locked add; a shared stripe needs the read-modify-write.
    /// Relaxed: only the sums are ever read.
    #[inline]
    fn add(self, field: fn(&Stripe) -> &AtomicU64, by: u64) {
        let counter = field(self.stripe);
        if self.exclusive {
            let sum = counter.load(Ordering::Relaxed).saturating_add(by);
            counter.store(sum, Ordering::Relaxed);
        } else {
            let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                Some(total.saturating_add(by))
            });
        }
    }

    /// Counts one admission of `cost` tokens.
    #[inline]
    fn admitted(self, cost: u64) {
        self.add(|s| &s.admitted, 1);
        self.add(|s| &s.admitted_cost, cost);
    }
}

/// A limiter whose decisions are counted.
///
/// Counting is opt-in: the limiter types themselves carry no counters, so
/// one that is not wrapped pays nothing. A wrapped one adds two counter
/// updates per decision (four for a decision with a wait) to a stripe that
/// only its thread writes, so they are plain loads and stores, with no
/// locked read-modify-write and no cache line shared between threads
/// ([`docs/benchmarks.md`](crate::guide::benchmarks) measures the cost). Stripes are indexed by a small
/// id each live thread holds; a thread beyond the stripes (more live
/// threads than four per core) or in its thread-local destructors counts on
/// one shared stripe with locked adds instead. [`stats`](Self::stats) sums
/// a snapshot; with feature `metrics`, [`DecisionStats::export`] publishes
/// it through the `metrics` facade.
///
/// ```
/// use tollgate::{Counted, Limit, ManualClock, Quota, TokenBucket};
///
/// let bucket = Counted::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
/// bucket.try_acquire(2)?;
/// assert!(bucket.try_acquire(1).is_err());
/// let stats = bucket.stats();
/// assert_eq!((stats.admitted, stats.admitted_cost, stats.denied), (1, 2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Counted<L> {
    limiter: L,
    tally: Tally,
}

/// The counters of a [`Counted`], striped by thread.
struct Tally {
    /// Stripe `i` is written only by the live thread whose id is `i`
    /// (`crate::thread_id::current`).
    own: Box<[CachePadded<Stripe>]>,
    /// Written, with read-modify-writes, by every other thread.
    shared: CachePadded<Stripe>,
}

impl<L: std::fmt::Debug> std::fmt::Debug for Counted<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("limiter", &self.limiter)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<L> Counted<L> {
    /// Wraps `limiter`, with a stripe of counters for each of four live
    /// threads per core (at least 16 stripes: 128 bytes each).
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert_eq!(bucket.stats(), Default::default());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(limiter: L) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Counted {
            limiter,
            tally: Tally {
                own: (0..(4 * cores).max(16))
                    .map(|_| CachePadded::default())
                    .collect(),
                shared: CachePadded::default(),
            },
        }
    }

    /// The wrapped limiter, for calls that need not be counted.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert_eq!(bucket.inner().quota().capacity(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn inner(&self) -> &L {
        &self.limiter
    }

    /// The counts so far, summed over threads. Each counter is read once;
    /// decisions made while summing may be partly included.
    ///
    /// ```
    /// use tollgate::{Counted, Limit, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// bucket.try_acquire(3)?;
    /// assert_eq!(bucket.stats().admitted_cost, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> DecisionStats {
        self.tally.stats()
    }

    /// `limit` counted on these counters.
    #[inline]
    fn counting<M: Limit>(&self, limit: M) -> Counting<'_, M> {
        Counting {
            limit,
            tally: &self.tally,
        }
    }
}

impl Tally {
    /// The counts so far, summed over threads.
    fn stats(&self) -> DecisionStats {
        self.own
            .iter()
            .chain([&self.shared])
            .map(|stripe| stripe.snapshot())
            .fold(DecisionStats::default(), DecisionStats::plus)
    }

    /// The stripe this thread writes.
    #[inline]
    fn writer(&self) -> Writer<'_> {
        match crate::thread_id::current().and_then(|id| self.own.get(id)) {
            Some(own) => Writer {
                stripe: own,
                exclusive: true,
            },
            None => Writer {
                stripe: &self.shared,
                exclusive: false,
            },
        }
    }

    /// Counts one decision of `cost` on this thread's stripe.
    // Always inlined: called from every counted limit's decisions, it was
    // left out of line, and a counted decision on the coarse clock measured
    // twice as slow (`docs/benchmarks.md`, "Measured design choices").
    #[inline(always)]
    fn count<T>(&self, cost: u64, decision: Result<T, AcquireError>) -> Result<T, AcquireError> {
        match &decision {
            Ok(_) => self.writer().admitted(cost),
            Err(error) => self.count_refusal(cost, error),
        }
        decision
    }

    #[inline]
    fn count_refusal(&self, cost: u64, error: &AcquireError) {
        let writer = self.writer();
        if let AcquireError::Insufficient { .. } = error {
            writer.add(|s| &s.denied, 1);
            writer.add(|s| &s.denied_cost, cost);
        } else {
            writer.add(|s| &s.rejected, 1);
        }
    }

    /// Counts a reservation of `cost` tokens that waits `wait`.
    fn count_reservation(&self, cost: u64, wait: Duration) {
        let writer = self.writer();
        writer.admitted(cost);
        if !wait.is_zero() {
            writer.add(|s| &s.delayed, 1);
            writer.add(|s| &s.delay_nanos, crate::clock::saturating_nanos(wait));
        }
    }
}

impl DecisionStats {
    /// Publishes these counts through the `metrics` facade (feature
    /// `metrics`) as counters `{prefix}_admitted_total`,
    /// `_admitted_cost_total`, `_denied_total`, `_denied_cost_total`,
    /// `_rejected_total`, `_delayed_total`, `_delay_nanos_total` and
    /// `_abandoned_total`, set to their absolute values: call it from a
    /// periodic task, or before your exporter scrapes.
    ///
    /// ```
    /// use tollgate::{Counted, Limit, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// bucket.try_acquire(1)?;
    /// bucket.stats().export("api_global"); // no recorder installed: a no-op
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn export(&self, prefix: &str) {
        crate::export::counters(
            prefix,
            &[
                ("admitted_total", self.admitted),
                ("admitted_cost_total", self.admitted_cost),
                ("denied_total", self.denied),
                ("denied_cost_total", self.denied_cost),
                ("rejected_total", self.rejected),
                ("delayed_total", self.delayed),
                ("delay_nanos_total", self.delay_nanos),
                ("abandoned_total", self.abandoned),
            ],
        );
    }
}

/// A limit counted on a [`Counted`]'s counters: the limiter itself, or
/// one key of a counted keyed limiter.
struct Counting<'a, L> {
    limit: L,
    tally: &'a Tally,
}

impl<L: Limit> sealed::Sealed for Counting<'_, L> {
    #[inline]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        self.tally.count(cost, self.limit.take(cost))
    }

    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        self.limit
            .take_within(cost, max_wait)
            .inspect(|&(_, wait)| self.tally.count_reservation(cost, wait))
            .inspect_err(|error| self.tally.count_refusal(cost, error))
    }

    /// Counted as `abandoned`: an async acquire dropped before its wait
    /// ended, a receipt undone, a hierarchy step undone after a later step
    /// refused.
    fn undo(&self, taken: &Taken) {
        self.limit.undo(taken);
        self.tally.writer().add(|s| &s.abandoned, 1);
    }

    fn debit(&self, tokens: u64) {
        self.limit.debit(tokens);
    }

    /// Not an abandonment: the admission stands, at its actual cost.
    fn settle(&self, taken: &Taken, actual: u64) {
        self.limit.settle(taken, actual);
    }

    fn capacity(&self) -> u64 {
        self.limit.capacity()
    }

    fn identity(&self) -> Identity {
        self.limit.identity()
    }
}

impl<L: Advertised> Advertised for Counting<'_, L> {
    fn shape(&self) -> Shape {
        self.limit.shape()
    }

    fn idle_reset(&self) -> Duration {
        self.limit.idle_reset()
    }
}

impl<L: Limit> Limit for Counting<'_, L> {
    /// The limit's own `try_acquire` (a striped bucket's pools, say),
    /// counted.
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        self.tally.count(cost, self.limit.try_acquire(cost))
    }

    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limit.retry_after(cost)
    }

    fn available(&self) -> u64 {
        self.limit.available()
    }
}

/// Every decision of the wrapped limit is counted: `try_acquire`,
/// `reserve`, `acquire` (with its wait, and whether it was abandoned), and
/// the takes and undos of its receipts and hierarchy steps. Looks
/// (`retry_after`, `available`) decide nothing and count nothing.
impl<L: Limit> sealed::Sealed for Counted<L> {
    #[inline]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        self.counting(&self.limiter).take(cost)
    }

    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        self.counting(&self.limiter).take_within(cost, max_wait)
    }

    fn undo(&self, taken: &Taken) {
        self.counting(&self.limiter).undo(taken);
    }

    fn debit(&self, tokens: u64) {
        self.counting(&self.limiter).debit(tokens);
    }

    fn settle(&self, taken: &Taken, actual: u64) {
        self.counting(&self.limiter).settle(taken, actual);
    }

    fn capacity(&self) -> u64 {
        self.limiter.capacity()
    }

    /// The counted limit's: counting spends nothing of its own.
    fn identity(&self) -> Identity {
        self.limiter.identity()
    }
}

impl<L: Advertised> Advertised for Counted<L> {
    fn shape(&self) -> Shape {
        self.limiter.shape()
    }

    fn idle_reset(&self) -> Duration {
        self.limiter.idle_reset()
    }
}

impl<L: Limit> Limit for Counted<L> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        self.counting(&self.limiter).try_acquire(cost)
    }

    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limiter.retry_after(cost)
    }

    fn available(&self) -> u64 {
        self.limiter.available()
    }
}

#[cfg(feature = "keyed")]
impl<L: PerKey> Counted<L> {
    /// `key`'s limit with its decisions counted here: what
    /// [`PerKey::key`] is to the keyed limiter (a
    /// [`KeyedLimiter`](crate::KeyedLimiter), a keyed window counter).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Counted, KeyedFixedWindow, KeyedLimiter, Limit, ManualClock, Quota, WindowQuota};
    ///
    /// let limiter = Counted::new(
    ///     KeyedLimiter::builder(Quota::per_second(1)?).clock(ManualClock::new()).build::<u32>(),
    /// );
    /// limiter.key(&7).try_acquire(1)?;
    /// assert!(limiter.key(&7).try_acquire(1).is_err());
    /// assert_eq!(limiter.key(&7).reserve(1, Duration::from_secs(1))?, Duration::from_secs(1));
    /// let stats = limiter.stats();
    /// assert_eq!((stats.admitted, stats.denied, stats.delay_nanos), (2, 1, 1_000_000_000));
    ///
    /// let windows = Counted::new(
    ///     KeyedFixedWindow::builder(WindowQuota::per_second(1)?).clock(ManualClock::new()).build_fixed::<u32>()?,
    /// );
    /// windows.key(&7).try_acquire(1)?;
    /// assert!(windows.key(&7).try_acquire(1).is_err());
    /// assert!(windows.key(&8).try_acquire(1).is_ok());
    /// assert_eq!((windows.stats().admitted, windows.stats().denied), (2, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<L::Key> + Sync + ?Sized,
    {
        self.counting(PerKey::key(&self.limiter, key))
    }
}

/// A counted keyed limiter is a keyed limiter: whatever serves keyed
/// limiters counts its decisions through it.
#[cfg(feature = "keyed")]
impl<L: PerKey> PerKey for Counted<L> {
    type Key = L::Key;

    fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<L::Key> + Sync + ?Sized,
    {
        Counted::key(self, key)
    }

    fn shape(&self) -> Shape {
        self.limiter.shape()
    }
}
