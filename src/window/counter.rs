//! A window counter: one cache-padded word, its frame and its clock.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::frame::Frame;
use super::state::WindowState;
use super::{WindowKind, WindowQuota};
use crate::{AcquireError, Clock, DefaultClock, QuotaError};

/// A window limit in one cache-padded `AtomicU64`: a [`FixedWindow`](super::FixedWindow)
/// or a [`SlidingWindow`](super::SlidingWindow), by its kind `K`.
///
/// Every decision reads the clock once, then runs a compare-and-swap loop
/// on the word; the first decision of a window rolls the word forward in
/// its own compare-and-swap, so a refusal never writes and an admission
/// writes once. The rules, the bounds and the packing are in
/// [`docs/semantics.md`](crate::guide::semantics) ("Windows").
///
/// Linearization points:
/// - an admission ([`try_acquire`](Self::try_acquire), a receipt's take)
///   at its successful compare-and-swap, which also rolls the window;
/// - a refusal, [`available`](Self::available) and
///   [`retry_after`](Self::retry_after) at the load (or failed
///   compare-and-swap) whose word they decided on;
/// - a [`WindowReceipt`](super::WindowReceipt)'s undo at its successful
///   compare-and-swap, or at the load that (with its clock reading) showed
///   the window had ended.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, ManualClock, SlidingWindow, WindowQuota};
///
/// let clock = ManualClock::new();
/// let quota = WindowQuota::per_second(2)?;
/// let fixed = FixedWindow::with_clock(quota, &clock)?;
/// let sliding = SlidingWindow::with_clock(quota, &clock)?;
/// fixed.try_acquire(2)?;
/// sliding.try_acquire(2)?;
/// clock.advance(Duration::from_millis(1500));
/// // A new window: the fixed counter is empty, the sliding one still
/// // counts half of the last window's 2.
/// assert_eq!((fixed.available(), sliding.available()), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct WindowCounter<K: WindowKind, C = DefaultClock> {
    state: CachePadded<WindowState>,
    frame: Frame<K>,
    quota: WindowQuota,
    clock: C,
}

impl<K: WindowKind> WindowCounter<K, DefaultClock> {
    /// A window counter on the [`DefaultClock`].
    ///
    /// Refuses a limit too large to pack beside a window index that lasts
    /// 36 years ([`QuotaError::LimitTooLarge`], with the largest that fits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, QuotaError, SlidingWindow, WindowQuota};
    ///
    /// let limiter = SlidingWindow::new(WindowQuota::per_minute(600)?)?;
    /// assert!(limiter.try_acquire(1).is_ok());
    /// assert_eq!(
    ///     SlidingWindow::new(WindowQuota::per_second(1 << 20)?).unwrap_err(),
    ///     QuotaError::LimitTooLarge { limit: 1 << 20, max: (1 << 16) - 1 },
    /// );
    /// assert!(FixedWindow::new(WindowQuota::per_second(1 << 20)?).is_ok());
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn new(quota: WindowQuota) -> Result<Self, QuotaError> {
        WindowCounter::with_clock(quota, DefaultClock::new())
    }
}

impl<K: WindowKind, C: Clock> WindowCounter<K, C> {
    /// A window counter reading time from `clock`, with nothing admitted
    /// yet. Its windows are placed as the quota says (the clock's epoch, an
    /// offset, or the calendar) around the clock's reading now.
    ///
    /// ```
    /// use tollgate::{FixedWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(5)?, ManualClock::new())?;
    /// assert_eq!(limiter.available(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: WindowQuota, clock: C) -> Result<Self, QuotaError> {
        Ok(WindowCounter {
            state: CachePadded::new(WindowState::default()),
            frame: Frame::new(&quota, clock.now_nanos())?,
            quota,
            clock,
        })
    }

    /// Nanoseconds since the start of the limiter's first window.
    #[inline]
    fn now(&self) -> u64 {
        self.frame.elapsed(self.clock.now_nanos())
    }

    /// Counts `cost` now, or refuses without counting anything.
    ///
    /// A refusal carries the exact wait until the same cost would fit if
    /// nothing else were admitted: for a fixed window the start of the next
    /// window; for a sliding one the first nanosecond at which the previous
    /// window's weight has faded enough. A cost above the limit never fits
    /// ([`AcquireError::ExceedsCapacity`]); a cost of zero is
    /// [`AcquireError::ZeroCost`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, FixedWindow, ManualClock, WindowQuota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(3)?, &clock)?;
    /// clock.advance(Duration::from_millis(400));
    /// limiter.try_acquire(3)?;
    /// assert_eq!(
    ///     limiter.try_acquire(1),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_millis(600) }),
    /// );
    /// assert_eq!(
    ///     limiter.try_acquire(4),
    ///     Err(AcquireError::ExceedsCapacity { cost: 4, capacity: 3 }),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        self.take(cost).map(drop)
    }

    /// Admits `cost`, returning the index of the window it was counted in.
    #[inline]
    pub(crate) fn take(&self, cost: u64) -> Result<u64, AcquireError> {
        self.frame.check_cost(cost)?;
        self.state.acquire(&self.frame, self.now(), cost)
    }

    /// Gives back `cost` counted in window `index`, by the rule of
    /// `WindowState::give_back`.
    pub(crate) fn give_back(&self, index: u64, cost: u64) {
        self.state.give_back(&self.frame, index, cost, self.now());
    }

    /// How long until `cost` would be admitted, zero if it would be now.
    /// Counts nothing: another caller may take the room first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, SlidingWindow, WindowQuota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::with_clock(WindowQuota::per_second(4)?, &clock)?;
    /// limiter.try_acquire(4)?;
    /// clock.advance(Duration::from_secs(1));
    /// // The last window's 4 weigh 4 · (1 - 0.25) = 3 a quarter into this one.
    /// assert_eq!(limiter.retry_after(1)?, Duration::from_millis(250));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.frame.check_cost(cost)?;
        let at = self.now();
        let view = self.state.view(&self.frame, at);
        Ok(if self.frame.fits(&view, cost) {
            Duration::ZERO
        } else {
            self.frame.wait(&view, at, cost)
        })
    }

    /// Whole units that would be admitted now: the limit less the current
    /// window's count (and, for a sliding window, less the previous
    /// window's weighted count, rounded up).
    ///
    /// ```
    /// use tollgate::{FixedWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(5)?, ManualClock::new())?;
    /// limiter.try_acquire(2)?;
    /// assert_eq!(limiter.available(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn available(&self) -> u64 {
        self.frame
            .available(&self.state.view(&self.frame, self.now()))
    }

    /// The limit this counter enforces.
    ///
    /// ```
    /// use tollgate::{FixedWindow, WindowQuota};
    ///
    /// let limiter = FixedWindow::new(WindowQuota::per_minute(60)?)?;
    /// assert_eq!(limiter.quota().limit(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &WindowQuota {
        &self.quota
    }

    /// The clock this counter reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(1)?, ManualClock::new())?;
    /// limiter.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
