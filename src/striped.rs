//! One hot bucket shared by many threads without contending on its word:
//! per-thread pools of slots leased from it.

mod slots;

use crossbeam_utils::CachePadded;

use std::time::Duration;

use crate::limit::{Limit, Shape, Taken, sealed};
use crate::{AcquireError, Clock, DefaultClock, Quota, TokenBucket};
use slots::{Slots, Take};

/// A [`TokenBucket`] striped over per-thread pools: each thread takes from
/// its own pool (one compare-and-swap on a cache line no other thread
/// writes), which leases `lease` tokens at a time from the shared bucket.
/// Under contention, throughput grows with threads instead of collapsing on
/// one word.
///
/// **The bound is the bucket's envelope**: over every interval `[s, e]` of
/// clock readings, the cost admitted at readings in it is at most
/// `B + r·(e − s)`, exactly as for a [`TokenBucket`] ([`docs/semantics.md`](crate::guide::semantics),
/// "The envelope"). A leased token occupies a slot of the bucket's timeline,
/// which the bucket refills once the clock passes it; so a pool keeps slots,
/// not a count, and a pooled token expires when the clock passes its slot.
/// At any reading no pool's last lease is ahead of, the bucket's credit
/// plus the tokens still usable in all pools is at most `B`. [`docs/design.md`](crate::guide::design) ("Striped buckets") has the proof.
///
/// Linearization points:
/// - an admission from a pool: its compare-and-swap on the pool's next
///   free slot; one from the bucket (a cost the pool cannot cover): the
///   bucket's;
/// - a lease: the bucket's compare-and-swap that grants it (the pool then
///   publishes the slots before any take can spend them);
/// - [`flush`](Self::flush), per pool: the compare-and-swap that empties it,
///   then the bucket's undo.
///
/// The price is precision near the limit: tokens can sit in other threads'
/// pools while a thread is refused (up to about `1.5 × lease` per stripe,
/// fewer as their slots pass). [`flush`](Self::flush) returns them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
///
/// let clock = ManualClock::new();
/// let bucket = StripedBucket::with_clock(Quota::per_second(10)?, clock.clone(), 4, 10);
/// assert!(bucket.try_acquire(5).is_ok());
/// // The pool keeps what the lease left, but only until the bucket has
/// // refilled past it: one instant never admits more than the capacity.
/// clock.advance(Duration::from_secs(100));
/// assert_eq!((0..20).filter(|_| bucket.try_acquire(1).is_ok()).count(), 10);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct StripedBucket<C = DefaultClock> {
    bucket: TokenBucket<C>,
    stripes: Box<[CachePadded<Slots>]>,
    lease: u64,
    /// Ticks per token.
    token_ticks: u64,
    /// A pool left with fewer ticks of slots than this leases again.
    low_water: u64,
}

impl StripedBucket {
    /// A striped bucket on the [`DefaultClock`].
    ///
    /// ```
    /// use tollgate::{Limit, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::new(Quota::per_second(100_000)?, 8, 64);
    /// assert!(bucket.try_acquire(1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota, stripes: usize, lease: u64) -> Self {
        StripedBucket::with_clock(quota, DefaultClock::new(), stripes, lease)
    }
}

impl<C: Clock> StripedBucket<C> {
    /// A striped bucket of `stripes` pools (at least 1; about the number of
    /// threads that contend), each leasing `lease` tokens at a time (at
    /// least 1, at most the capacity).
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(10)?, ManualClock::new(), 0, 1000);
    /// assert_eq!((bucket.stripes(), bucket.lease()), (1, 10));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C, stripes: usize, lease: u64) -> Self {
        let lease = lease.clamp(1, quota.capacity());
        let token_ticks = quota.gcra().slot_ticks();
        StripedBucket {
            stripes: (0..stripes.max(1))
                .map(|_| CachePadded::new(Slots::new()))
                .collect(),
            lease,
            token_ticks,
            // lease <= capacity, and capacity * token_ticks fits.
            low_water: lease.div_ceil(2) * token_ticks,
            bucket: TokenBucket::with_clock(quota, clock),
        }
    }

    /// Leases for `stripe` unless another thread is refilling or flushing
    /// it: in-process, so at once, with no I/O. Returns whether tokens came.
    #[cold]
    fn refill(&self, stripe: &Slots) -> bool {
        let Some(claim) = stripe.claim() else {
            return false;
        };
        let Some((granted, admission)) = self.bucket.grant_up_to(self.lease) else {
            return false;
        };
        claim.extend(admission.at, granted, admission.cost_ticks, admission.after);
        true
    }

    /// Returns every pool's usable tokens to the bucket, each pool
    /// against its last lease by the one rule that never mints credit (less
    /// the time held; [`docs/semantics.md`](crate::guide::semantics), "Giving back"), and returns how
    /// many tokens left the pools that way. Older leases' tokens are
    /// dropped, and a pool being refilled at that moment keeps its tokens.
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(8)?, ManualClock::new(), 1, 4);
    /// bucket.try_acquire(1)?;
    /// assert_eq!(bucket.flush(), 3);
    /// assert_eq!(bucket.bucket().available(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self) -> u64 {
        self.stripes
            .iter()
            .filter_map(|stripe| stripe.claim())
            .map(|claim| {
                let drained = claim.drain(|| self.bucket.now(), self.token_ticks);
                self.bucket
                    .undo_lease(drained.granted, drained.at, drained.tokens);
                drained.tokens
            })
            .sum()
    }

    /// Tokens in the pools that a take could spend now: leased, not yet
    /// spent, and whose slots the clock has not passed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = StripedBucket::with_clock(Quota::per_second(8)?, clock.clone(), 1, 4);
    /// bucket.try_acquire(1)?;
    /// assert_eq!(bucket.pooled(), 3);
    /// clock.advance(Duration::from_millis(250)); // two slots have passed
    /// assert_eq!(bucket.pooled(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pooled(&self) -> u64 {
        let now = self.bucket.now();
        self.stripes
            .iter()
            .map(|stripe| stripe.usable(now, self.token_ticks))
            .sum()
    }

    /// The shared bucket.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::new(Quota::per_second(5)?, 2, 2);
    /// assert_eq!(bucket.bucket().quota().capacity(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn bucket(&self) -> &TokenBucket<C> {
        &self.bucket
    }

    /// The number of stripes.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// assert_eq!(StripedBucket::new(Quota::per_second(5)?, 3, 1).stripes(), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// Tokens per lease.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// assert_eq!(StripedBucket::new(Quota::per_second(5)?, 3, 2).lease(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn lease(&self) -> u64 {
        self.lease
    }
}

/// Receipts, reservations and hierarchy steps take from the bucket
/// underneath, not from a pool: undoing by the rule that never mints credit
/// needs the record of the bucket's own compare-and-swap, which a take from
/// a pool's slots does not leave. Pooled tokens are already spent from the
/// bucket, so taking there stays within the same envelope; it only forgoes
/// the pools' relief from contention.
impl<C: Clock> sealed::Sealed for StripedBucket<C> {
    #[inline]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        self.bucket.take(cost)
    }

    #[inline]
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        self.bucket.take_within(cost, max_wait)
    }

    fn undo(&self, taken: &Taken) {
        self.bucket.undo(taken);
    }

    fn shape(&self) -> Shape {
        self.bucket.shape()
    }

    fn idle_reset(&self) -> Duration {
        self.bucket.idle_reset()
    }
}

impl<C: Clock> Limit for StripedBucket<C> {
    /// Takes `cost` tokens from this thread's pool, leasing from the bucket
    /// when it runs low; a cost the pool cannot cover goes to the bucket
    /// directly. Refuses with the bucket's exact `retry_after`.
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(4)?, ManualClock::new(), 2, 2);
    /// for _ in 0..4 {
    ///     bucket.try_acquire(1)?;
    /// }
    /// assert!(bucket.try_acquire(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        // The bucket's checks, so that a bad cost is refused the same way
        // whichever path would have served it.
        let cost_ticks = self.bucket.quota().gcra().cost_ticks(cost)?;
        let stripe = &self.stripes[crate::thread_id::stripe(self.stripes.len())];
        match stripe.take(self.bucket.now(), cost_ticks, self.low_water) {
            Take::Taken { low } => {
                if low {
                    self.refill(stripe);
                }
                Ok(())
            }
            Take::Short { low } => {
                // A fresh reading: the lease just read the clock, and a take
                // behind its reading spends nothing.
                if low
                    && self.refill(stripe)
                    && let Take::Taken { .. } = stripe.take(self.bucket.now(), cost_ticks, 0)
                {
                    return Ok(());
                }
                self.bucket.try_acquire(cost)
            }
        }
    }

    /// The bucket's wait for `cost`: tokens pooled for other threads are
    /// not this caller's, so it never understates the wait, and overstates
    /// it only when the caller's own pool holds the tokens.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(2)?, ManualClock::new(), 1, 1);
    /// bucket.try_acquire(1)?;
    /// bucket.try_acquire(1)?;
    /// assert_eq!(bucket.retry_after(1)?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.bucket.retry_after(cost)
    }

    /// Tokens that exist now: the bucket's and every pool's, though a
    /// caller can only use its own pool's and the bucket's.
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(10)?, ManualClock::new(), 2, 4);
    /// bucket.try_acquire(1)?; // leases 4, of which 3 stay pooled
    /// assert_eq!(bucket.available(), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn available(&self) -> u64 {
        self.bucket.available().saturating_add(self.pooled())
    }
}
