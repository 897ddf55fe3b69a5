//! One hot bucket shared by many threads without contending on its word:
//! per-thread pools of tokens leased from it.

use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use crate::shared::{LeasePool, Take};
use crate::sync::lock;
use crate::{AcquireError, Clock, MonotonicClock, Quota, TokenBucket};

/// A [`TokenBucket`] striped over per-thread pools: each thread takes from
/// its own pool (one compare-and-swap on a cache line no other thread
/// writes), which leases `lease` tokens at a time from the shared bucket.
/// Under contention, throughput grows with threads instead of collapsing on
/// one word.
///
/// The bound is the bucket's: tokens enter a pool only when the bucket
/// granted them, so admissions never exceed its envelope (`docs/design.md`,
/// the local allowance's proof with the bucket as its store). The price is
/// precision near the limit: up to `stripes × lease` granted tokens can sit
/// in other threads' pools while a thread is refused. [`flush`](Self::flush)
/// gives them back.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, StripedBucket};
///
/// let bucket = StripedBucket::with_clock(Quota::per_second(1000)?, ManualClock::new(), 4, 16);
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct StripedBucket<C = MonotonicClock> {
    bucket: TokenBucket<C>,
    stripes: Box<[CachePadded<Stripe>]>,
    lease: u64,
}

#[derive(Debug)]
struct Stripe {
    pool: LeasePool,
    /// The last grant's receipt, `(granted, at)`, for returns.
    receipt: Mutex<(u64, u64)>,
}

impl StripedBucket {
    /// A striped bucket on the monotonic clock.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::new(Quota::per_second(100_000)?, 8, 64);
    /// assert!(bucket.try_acquire(1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota, stripes: usize, lease: u64) -> Self {
        StripedBucket::with_clock(quota, MonotonicClock::new(), stripes, lease)
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
        let stripes = (0..stripes.max(1))
            .map(|_| {
                CachePadded::new(Stripe {
                    pool: LeasePool::new(),
                    receipt: Mutex::new((0, 0)),
                })
            })
            .collect();
        StripedBucket {
            lease: lease.clamp(1, quota.capacity()),
            bucket: TokenBucket::with_clock(quota, clock),
            stripes,
        }
    }

    /// Takes `cost` tokens from this thread's pool, leasing from the bucket
    /// when it runs low; a cost the pool cannot cover goes to the bucket
    /// directly. Refuses with the bucket's exact `retry_after`.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(4)?, ManualClock::new(), 2, 2);
    /// for _ in 0..4 {
    ///     bucket.try_acquire(1)?;
    /// }
    /// assert!(bucket.try_acquire(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        // The bucket's checks, so that a bad cost is refused the same way
        // whichever path would have served it.
        self.bucket.quota().gcra().cost_ticks(cost)?;
        let stripe = &self.stripes[crate::stripe::of(self.stripes.len())];
        match stripe.pool.take(cost, self.lease.div_ceil(2)) {
            Take::Taken { refill } => {
                if refill {
                    self.refill(stripe);
                }
                Ok(())
            }
            Take::Short { refill } => {
                if refill {
                    self.refill(stripe);
                    if let Take::Taken { .. } = stripe.pool.take(cost, 0) {
                        return Ok(());
                    }
                }
                self.bucket.try_acquire(cost)
            }
        }
    }

    /// Leases for `stripe`, whose refill this caller claimed: in-process, so
    /// at once, with no I/O.
    #[cold]
    fn refill(&self, stripe: &Stripe) {
        let granted = match self.bucket.grant_up_to(self.lease) {
            Some((granted, admission)) => {
                *lock(&stripe.receipt) = (granted, admission.at);
                granted
            }
            None => 0,
        };
        stripe.pool.land(granted);
    }

    /// Gives every pool's tokens back to the bucket (each against its last
    /// lease, less the time since; older leases' tokens are dropped) and
    /// returns how many were given back.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(8)?, ManualClock::new(), 1, 4);
    /// bucket.try_acquire(1)?;
    /// assert_eq!(bucket.flush(), 3);
    /// assert_eq!(bucket.bucket().available(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self) -> u64 {
        let mut returned = 0;
        for stripe in self.stripes.iter() {
            let drained = stripe.pool.drain();
            let mut receipt = lock(&stripe.receipt);
            let unused = drained.min(receipt.0);
            self.bucket.undo_lease(receipt.0, receipt.1, unused);
            receipt.0 -= unused;
            returned += unused;
        }
        returned
    }

    /// Tokens leased into the pools and not yet spent.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(8)?, ManualClock::new(), 1, 4);
    /// bucket.try_acquire(1)?;
    /// assert_eq!(bucket.pooled(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pooled(&self) -> u64 {
        self.stripes.iter().map(|stripe| stripe.pool.tokens()).sum()
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
