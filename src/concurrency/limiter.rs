//! `ConcurrencyLimiter`: at most `max` units in flight, in one cache-padded
//! atomic word.

use crossbeam_utils::CachePadded;

use super::counter;
#[cfg(feature = "tokio")]
use super::wait::Waiters;
use super::{InFlightError, LimitError, OwnedPermit, Permit};
use crate::sync::{AtomicU64, Ordering};
// Owned permits hold std's `Arc` even under loom: a method receiver
// (`self: &Arc<Self>`) must be std's, and the reference count is not what the
// models check.
use crate::sync::unmodelled::Arc;

/// The ordering of a release's subtraction. With async waiting compiled in
/// it is one half of the `SeqCst` handshake in `wait.rs`; without it,
/// `Release` is all a permit needs (its work happens before that of whoever
/// reuses its units). On x86 both are the same `lock xadd`.
#[cfg(feature = "tokio")]
const RELEASE: Ordering = Ordering::SeqCst;
#[cfg(not(feature = "tokio"))]
const RELEASE: Ordering = Ordering::Release;

/// At most `max` units of work in flight at once, each permit weighing one
/// or more units.
///
/// The whole state is one cache-padded `AtomicU64`, the units in flight. A
/// permit is granted by a compare-and-swap loop that adds its weight only if
/// the sum stays within `max`, and is released when dropped, by a
/// `fetch_sub` of exactly its weight: during a panic's unwind too. Nothing
/// locks and nothing queues; `acquire` (feature `tokio`) waits for room
/// bounded by a `max_wait`.
///
/// Linearization points:
/// - a grant at its successful compare-and-swap;
/// - a refusal ([`InFlightError::Full`]) at the load or failed
///   compare-and-swap whose value it refused on (the `in_flight` it reports);
/// - a release at its `fetch_sub`;
/// - [`in_flight`](Self::in_flight) at its load.
///
/// Every history is therefore equivalent to one in which grants and releases
/// happen one at a time, and in it the sum of the weights of live permits
/// never exceeds `max`.
///
/// ```
/// use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};
///
/// // At most 8 units of work in flight, weighted by estimated cost.
/// let limiter = ConcurrencyLimiter::new(8)?;
/// let big = limiter.try_acquire(5)?;
/// let small = limiter.try_acquire(3)?;
/// assert_eq!(limiter.in_flight(), 8);
/// assert!(matches!(limiter.try_acquire(1), Err(InFlightError::Full { .. })));
/// drop(big);
/// assert_eq!(limiter.in_flight(), 3);
/// drop(small);
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyLimiter {
    /// Units held by live permits; always at most `max`.
    in_flight: CachePadded<AtomicU64>,
    max: u64,
    /// Tasks waiting in `acquire`; only releases look here, never grants.
    #[cfg(feature = "tokio")]
    waiters: Waiters,
}

impl ConcurrencyLimiter {
    /// A limiter allowing at most `max` units in flight. A `max` of zero
    /// could never grant anything and is [`LimitError::ZeroLimit`].
    ///
    /// ```
    /// use tollgate::concurrency::{ConcurrencyLimiter, LimitError};
    ///
    /// let limiter = ConcurrencyLimiter::new(64)?;
    /// assert_eq!(limiter.max(), 64);
    /// assert_eq!(ConcurrencyLimiter::new(0).unwrap_err(), LimitError::ZeroLimit);
    /// # Ok::<(), LimitError>(())
    /// ```
    pub fn new(max: u64) -> Result<Self, LimitError> {
        if max == 0 {
            return Err(LimitError::ZeroLimit);
        }
        Ok(ConcurrencyLimiter {
            in_flight: CachePadded::new(AtomicU64::new(0)),
            max,
            #[cfg(feature = "tokio")]
            waiters: Waiters::new(),
        })
    }

    /// Takes `weight` units now, or refuses without taking anything.
    ///
    /// [`InFlightError::Full`] means the weight does not fit now; a weight
    /// above [`max`](Self::max) is [`InFlightError::ExceedsLimit`] (it never
    /// fits) and a weight of zero is [`InFlightError::ZeroWeight`]. The units
    /// return when the permit is dropped, so bind it for as long as the work
    /// runs: `let _ = limiter.try_acquire(1)` releases at once.
    ///
    /// ```
    /// use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};
    ///
    /// let limiter = ConcurrencyLimiter::new(2)?;
    /// let permit = limiter.try_acquire(2)?;
    /// assert_eq!(permit.weight(), 2);
    /// assert_eq!(
    ///     limiter.try_acquire(1).unwrap_err(),
    ///     InFlightError::Full { in_flight: 2, max: 2 },
    /// );
    /// drop(permit);
    /// assert!(limiter.try_acquire(1).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, weight: u64) -> Result<Permit<'_>, InFlightError> {
        self.try_acquire_with(weight, Ordering::Acquire)
    }

    /// [`try_acquire`](Self::try_acquire) for a permit that holds an `Arc`
    /// of the limiter instead of a borrow, so it can move into a spawned
    /// thread or task and outlive the caller's frame.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::thread;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = Arc::new(ConcurrencyLimiter::new(4)?);
    /// let permit = limiter.try_acquire_owned(3)?;
    /// let worker = thread::spawn(move || {
    ///     // ... the work the permit pays for ...
    ///     drop(permit);
    /// });
    /// worker.join().unwrap();
    /// assert_eq!(limiter.in_flight(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_owned(self: &Arc<Self>, weight: u64) -> Result<OwnedPermit, InFlightError> {
        self.try_acquire_owned_with(weight, Ordering::Acquire)
    }

    /// Takes `weight` units, waiting up to `max_wait` for permits to be
    /// dropped if they do not fit now (feature `tokio`). Every async wait of
    /// the crate takes its bound this way, as a `Duration`; `Duration::MAX`
    /// waits for as long as it takes.
    ///
    /// It first tries at once, so a weight that fits is granted even with a
    /// `max_wait` of zero. Otherwise the task sleeps until a release or the
    /// end of `max_wait` and retries on every release, returning
    /// [`InFlightError::Timeout`] when the wait is over. `ZeroWeight` and
    /// `ExceedsLimit` are returned at once; `Full` never is.
    ///
    /// Cancellation-safe: nothing is taken before the compare-and-swap that
    /// grants the permit, and the permit is returned in the same poll, so
    /// dropping the future leaves the limiter as it was.
    ///
    /// No fairness: woken waiters race each other and every other caller,
    /// and a heavy waiter can starve behind a stream of light acquirers,
    /// since it needs its whole weight free at one instant. Waiting needs a
    /// tokio runtime with its timer enabled.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let held = limiter.try_acquire(1)?;
    /// let soon = Duration::from_millis(50);
    /// assert_eq!(limiter.acquire(1, soon).await.unwrap_err(), InFlightError::Timeout);
    ///
    /// drop(held);
    /// let permit = limiter.acquire(1, Duration::from_secs(1)).await?;
    /// assert_eq!(permit.weight(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire(
        &self,
        weight: u64,
        max_wait: std::time::Duration,
    ) -> Result<Permit<'_>, InFlightError> {
        self.waiters
            .wait(max_wait, |load| self.try_acquire_with(weight, load))
            .await
    }

    /// [`acquire`](Self::acquire) for an [`OwnedPermit`] (feature `tokio`).
    /// The future holds its own `Arc` of the limiter, so it can be spawned
    /// as it is.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = Arc::new(ConcurrencyLimiter::new(2)?);
    /// let held = limiter.try_acquire(2)?;
    /// let waiter = tokio::spawn(limiter.acquire_owned(2, Duration::from_secs(1)));
    /// tokio::task::yield_now().await;
    /// assert!(!waiter.is_finished());
    /// drop(held);
    /// let permit = waiter.await??;
    /// assert_eq!(limiter.in_flight(), 2);
    /// drop(permit);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub fn acquire_owned(
        self: &Arc<Self>,
        weight: u64,
        max_wait: std::time::Duration,
    ) -> impl Future<Output = Result<OwnedPermit, InFlightError>> + Send + 'static {
        let limiter = Arc::clone(self);
        async move {
            limiter
                .waiters
                .wait(max_wait, |load| {
                    limiter.try_acquire_owned_with(weight, load)
                })
                .await
        }
    }

    /// The units held by live permits, as of one load: a snapshot that
    /// other threads may change at once.
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = ConcurrencyLimiter::new(10)?;
    /// let _permit = limiter.try_acquire(4)?;
    /// assert_eq!(limiter.in_flight(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The most units that may be in flight at once.
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// assert_eq!(ConcurrencyLimiter::new(10)?.max(), 10);
    /// # Ok::<(), tollgate::concurrency::LimitError>(())
    /// ```
    pub fn max(&self) -> u64 {
        self.max
    }

    #[inline]
    fn take(&self, weight: u64, load: Ordering) -> Result<(), InFlightError> {
        counter::validate(weight, self.max)?;
        counter::try_add(&self.in_flight, weight, self.max, load)
    }

    // The permit is built right after the swap, with nothing between that
    // could panic or yield, so the units taken always have an owner.
    #[inline]
    fn try_acquire_with(&self, weight: u64, load: Ordering) -> Result<Permit<'_>, InFlightError> {
        self.take(weight, load)?;
        Ok(Permit::new(self, weight))
    }

    #[inline]
    fn try_acquire_owned_with(
        self: &Arc<Self>,
        weight: u64,
        load: Ordering,
    ) -> Result<OwnedPermit, InFlightError> {
        self.take(weight, load)?;
        // Cloning the `Arc` after the swap keeps refusals off its counter;
        // a clone cannot unwind (it aborts on overflow).
        Ok(OwnedPermit::new(Arc::clone(self), weight))
    }

    /// Returns `weight` units; called only by a permit's drop.
    #[inline]
    pub(super) fn release(&self, weight: u64) {
        counter::sub(&self.in_flight, weight, RELEASE);
        #[cfg(feature = "tokio")]
        self.waiters.released();
    }
}
