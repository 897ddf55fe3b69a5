//! One hot bucket shared by many threads without contending on its word:
//! per-thread pools of slots leased from it.

mod slots;

use crossbeam_utils::CachePadded;

use std::time::Duration;

use crate::advertised::{Advertised, Shape};
use crate::bucket::TokenBucket;
use crate::clock::{Clock, DefaultClock};
use crate::error::AcquireError;
use crate::limit::{Identity, Limit, Taken, sealed};
use crate::quota::Quota;
use crate::sync::swap::Swap;
use crate::sync::{Arc, Mutex, lock};
use slots::{Drained, Slots, Take};

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
/// plus the tokens still usable in all pools is at most `B`. [`docs/proofs.md`](crate::guide::proofs) ("Striped buckets") has the proof.
///
/// Linearization points:
/// - an admission from a pool: its compare-and-swap on the pool's next
///   free slot; one from the bucket (a cost the pool cannot cover): the
///   bucket's;
/// - a lease: the bucket's compare-and-swap that grants it (the pool then
///   publishes the slots before any take can spend them);
/// - [`flush`](Self::flush), per pool: the compare-and-swap that empties it,
///   then the bucket's undo;
/// - [`set_quota`](Self::set_quota): the bucket's seal, after every pool's
///   (a take from a pool linearizes before its pool's seal).
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
    /// The pools of the quota the bucket was built with: inline, so that
    /// an unchanged striped bucket pays nothing for changes.
    first: Lanes,
    /// The pools of the quota in force, once it changed.
    later: Swap<Lanes>,
    /// Serialises changes of quota.
    changing: Mutex<()>,
    /// The lease asked for, clamped to each quota's capacity.
    lease: u64,
}

/// One quota's pools and the lease sizes that quota implies. A change of
/// quota seals every pool of the lanes in force and puts new lanes, in the
/// new quota's ticks, in their place.
#[derive(Debug)]
struct Lanes {
    stripes: Box<[CachePadded<Slots>]>,
    /// The quota the pools' slots are ticks of, and its generation in the
    /// bucket: a lease of another generation never enters these pools.
    quota: Quota,
    generation: u64,
    lease: u64,
    /// Ticks per token.
    token_ticks: u64,
    /// A pool left with fewer ticks of slots than this leases again.
    low_water: u64,
}

impl StripedBucket {
    /// The most stripes a striped bucket has: a larger count asked for is
    /// clamped to this one, as 0 is to 1.
    ///
    /// Threads take the stripe of their id, and ids are dense over the
    /// live threads, so stripes beyond the threads that contend are never
    /// used; yet each costs its 128 bytes and a step of every
    /// [`flush`](StripedBucket::flush), [`pooled`](StripedBucket::pooled)
    /// (and so `available`) and quota change. 1024 is more hardware threads
    /// than the largest common servers have (two sockets of 256), in 128
    /// KiB; threads beyond it share stripes two to one, which costs
    /// contention on a pool's word, never precision. A count is clamped
    /// rather than refused because every count has a meaning (about one
    /// per contending thread), as a lease above the capacity is clamped to
    /// it: [`stripes`](StripedBucket::stripes) tells what was built.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::new(Quota::per_second(5)?, usize::MAX, 1);
    /// assert_eq!(bucket.stripes(), StripedBucket::MAX_STRIPES);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub const MAX_STRIPES: usize = 1024;

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
    /// A striped bucket of `stripes` pools (about the number of threads
    /// that contend; clamped to 1 ..= [`MAX_STRIPES`](StripedBucket::MAX_STRIPES)),
    /// each leasing `lease` tokens at a time (clamped to 1 ..= the
    /// capacity).
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(10)?, ManualClock::new(), 0, 1000);
    /// assert_eq!((bucket.stripes(), bucket.lease()), (1, 10));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C, stripes: usize, lease: u64) -> Self {
        StripedBucket {
            first: Lanes::new(quota, crate::state::FIRST, stripes, lease),
            later: Swap::empty(),
            changing: Mutex::new(()),
            lease,
            bucket: TokenBucket::with_clock(quota, clock),
        }
    }

    /// The lanes of the quota in force.
    fn lanes<R>(&self, then: impl FnOnce(&Lanes) -> R) -> R {
        let later = self.later.load();
        then(later.as_deref().unwrap_or(&self.first))
    }

    /// Takes from the pools of a quota that is no longer the first: those
    /// in force, or, while a change is between sealing the pools and
    /// publishing new ones, the bucket directly.
    #[cold]
    #[inline(never)]
    fn try_acquire_moved(&self, cost: u64) -> Result<(), AcquireError> {
        let later = self.later.load();
        later
            .as_deref()
            .and_then(|lanes| lanes.try_acquire(&self.bucket, cost))
            .unwrap_or_else(|| self.bucket.try_acquire(cost))
    }

    /// Changes the quota at run time: the bucket's state carries over by
    /// the rule of [`TokenBucket::set_quota`], and the pools start again
    /// under the new quota.
    ///
    /// Pooled tokens were debited from the bucket under the old quota, so
    /// they cannot stay spendable beside the carried tokens (at the change,
    /// the bucket and the pools together could then hold more than the new
    /// capacity). So the change first seals every pool: each one's usable
    /// tokens of its last lease go back to the bucket by the rule that
    /// never mints credit (as [`flush`](Self::flush) returns them), the
    /// rest are dropped, and no take spends from it again. Then the bucket
    /// changes, carrying what it holds (returned tokens included, clipped
    /// to the new capacity), and new pools lease under the new quota, with
    /// the lease clamped to the new capacity. From the change on, the
    /// striped bucket keeps the new quota's envelope; every take from an
    /// old pool linearized before it.
    ///
    /// Takes stay lock-free throughout: one that finds its pool sealed
    /// goes to the new pools, or to the bucket while they are not yet
    /// published. Change the quota here, not through
    /// [`bucket`](Self::bucket): a change made there leaves the pools with
    /// what they hold (they stop leasing, and their tokens expire with
    /// their slots).
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, StripedBucket};
    ///
    /// let bucket = StripedBucket::with_clock(Quota::per_second(100)?, ManualClock::new(), 2, 10);
    /// bucket.try_acquire(1)?; // leases 10, 9 pooled
    /// bucket.set_quota(Quota::per_second(5)?);
    /// assert_eq!(bucket.pooled(), 0);
    /// assert_eq!((bucket.available(), bucket.lease()), (5, 5));
    /// assert_eq!((0..10).filter(|_| bucket.try_acquire(1).is_ok()).count(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        let _serialised = lock(&self.changing);
        let later = self.later.load();
        let old = later.as_deref().unwrap_or(&self.first);
        if old.quota.gcra() == quota.gcra() && old.generation == self.bucket.in_force().1 {
            return;
        }
        old.seal(&self.bucket);
        self.bucket.set_quota(quota);
        let (quota, generation) = self.bucket.in_force();
        let lanes = Lanes::new(quota, generation, old.stripes.len(), self.lease);
        self.later.store(Some(Arc::new(lanes)));
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
        self.lanes(|lanes| {
            lanes
                .stripes
                .iter()
                .filter_map(|stripe| stripe.claim())
                .map(|claim| {
                    let drained = claim.drain(lanes.clock(&self.bucket), lanes.token_ticks);
                    lanes.give_back(&self.bucket, drained)
                })
                .sum()
        })
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
        self.lanes(|lanes| {
            let now = self.bucket.ticks_now(lanes.quota.gcra());
            lanes
                .stripes
                .iter()
                .map(|stripe| stripe.usable(now, lanes.token_ticks))
                .sum()
        })
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
        self.first.stripes.len()
    }

    /// Tokens per lease under the quota in force.
    ///
    /// ```
    /// use tollgate::{Quota, StripedBucket};
    ///
    /// assert_eq!(StripedBucket::new(Quota::per_second(5)?, 3, 2).lease(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn lease(&self) -> u64 {
        self.lanes(|lanes| lanes.lease)
    }
}

impl Lanes {
    /// `stripes` pools (clamped to 1..=`MAX_STRIPES`) leasing `lease`
    /// tokens (clamped to 1..=capacity) of `quota`, in force at
    /// `generation`.
    fn new(quota: Quota, generation: u64, stripes: usize, lease: u64) -> Lanes {
        let lease = lease.clamp(1, quota.capacity());
        let token_ticks = quota.gcra().slot_ticks();
        Lanes {
            stripes: (0..stripes.clamp(1, StripedBucket::MAX_STRIPES))
                .map(|_| CachePadded::new(Slots::new()))
                .collect(),
            quota,
            generation,
            lease,
            token_ticks,
            // lease <= capacity, and capacity * token_ticks fits.
            low_water: lease.div_ceil(2) * token_ticks,
        }
    }

    /// Takes `cost` tokens from this thread's pool, leasing from the bucket
    /// when it runs low; a cost the pool cannot cover goes to the bucket
    /// directly. `None` when the pool is sealed: these lanes are no longer
    /// in force.
    #[inline]
    fn try_acquire<C: Clock>(
        &self,
        bucket: &TokenBucket<C>,
        cost: u64,
    ) -> Option<Result<(), AcquireError>> {
        let stripe = &self.stripes[crate::thread_id::stripe(self.stripes.len())];
        let gcra = self.quota.gcra();
        // The bucket's checks, so that a bad cost is refused the same way
        // whichever path would have served it (by the quota in force).
        let cost_ticks = match gcra.cost_ticks(cost) {
            Ok(ticks) => ticks,
            Err(error) => return (!stripe.is_sealed()).then_some(Err(error)),
        };
        match stripe.take(bucket.ticks_now(gcra), cost_ticks, self.low_water) {
            Take::Taken { low } => {
                if low {
                    self.refill(bucket, stripe);
                }
                Some(Ok(()))
            }
            Take::Short { low } => {
                // A sealed pool is short of everything: the take goes on
                // to the lanes in force.
                if stripe.is_sealed() {
                    return None;
                }
                // A fresh reading: the lease just read the clock, and a take
                // behind its reading spends nothing. A cost above the lease
                // leases nothing: no lease could cover it, and the tokens
                // leased would be missing from the bucket it goes to.
                if low
                    && cost <= self.lease
                    && self.refill(bucket, stripe)
                    && let Take::Taken { .. } = stripe.take(bucket.ticks_now(gcra), cost_ticks, 0)
                {
                    return Some(Ok(()));
                }
                Some(bucket.try_acquire(cost))
            }
        }
    }

    /// Leases for `stripe` unless another thread is refilling or flushing
    /// it, or a change sealed it: in-process, so at once, with no I/O.
    /// Returns whether tokens came.
    #[cold]
    fn refill<C: Clock>(&self, bucket: &TokenBucket<C>, stripe: &Slots) -> bool {
        let Some(claim) = stripe.claim() else {
            return false;
        };
        if stripe.is_sealed() {
            return false;
        }
        let Some((granted, admission)) = bucket.grant_up_to(self.lease) else {
            return false;
        };
        if admission.generation != self.generation {
            // The bucket's quota changed under these pools (a change between
            // sealing them and publishing the next, or one made on the
            // bucket directly): the lease is in another quota's ticks. Back
            // it goes, by the one rule.
            bucket.undo_admission(&admission, granted);
            return false;
        }
        claim.extend(admission.at, granted, admission.cost_ticks, admission.after);
        true
    }

    /// Seals every pool for a change of quota: a pool no refill or flush
    /// holds gives its last lease's usable tokens back first; one that is
    /// held is sealed as it stands (its tokens are dropped: the change does
    /// not wait for the holder).
    fn seal<C: Clock>(&self, bucket: &TokenBucket<C>) {
        for stripe in &self.stripes {
            match stripe.claim() {
                Some(claim) => {
                    self.give_back(bucket, claim.seal(self.clock(bucket), self.token_ticks));
                }
                None => stripe.seal(),
            }
        }
    }

    /// The bucket's clock in these pools' ticks.
    fn clock<'a, C: Clock>(&'a self, bucket: &'a TokenBucket<C>) -> impl Fn() -> u64 + 'a {
        || bucket.ticks_now(self.quota.gcra())
    }

    /// Gives what a drain or seal took out of a pool back to the bucket
    /// against the pool's last lease, by the one rule; returns how many
    /// tokens left the pool that way.
    fn give_back<C: Clock>(&self, bucket: &TokenBucket<C>, drained: Drained) -> u64 {
        bucket.undo_lease(drained.granted, drained.at, drained.tokens, self.generation);
        drained.tokens
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

    fn debit(&self, tokens: u64) {
        self.bucket.debit(tokens);
    }

    fn capacity(&self) -> u64 {
        self.bucket.capacity()
    }

    /// The bucket's: pooled tokens were spent from it.
    fn identity(&self) -> Identity {
        self.bucket.identity()
    }
}

impl<C: Clock> Advertised for StripedBucket<C> {
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
        match self.first.try_acquire(&self.bucket, cost) {
            Some(outcome) => outcome,
            None => self.try_acquire_moved(cost),
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
